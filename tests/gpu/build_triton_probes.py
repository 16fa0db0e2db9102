"""Build the probe kernels once per Triton release, for the GPU test that launches each without Triton.

    bash tools/tritons.sh all                       # one venv per supported Triton minor (.venv-triton/)
    python tests/gpu/build_triton_probes.py [OUT]   # -> .gpu/tritons/ (git-ignored; the lead carries it)

Each venv's own ``karchive build`` (its Triton) compiles tests/data/probes/build.toml into
``OUT/probes-triton-<version>.karc``; ``OUT/index.json`` names every archive with its Triton version,
digest and variant count. tests/gpu/test_triton_releases_gpu.py launches the cuda:90 variant of every
probe from every archive on an H100 with Triton blocked from import and compares with torch.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from triton_releases import PROBES, VENVS, build, floor, venvs  # noqa: E402 - after the path is set

DEFAULT_OUT = ROOT / ".gpu" / "tritons"


def main(argv: list[str]) -> int:
    out = pathlib.Path(argv[0]) if argv else DEFAULT_OUT
    low = tuple(int(p) for p in floor().split("."))
    found = [v for v in venvs() if v.key >= low]
    if not found:
        print(f"no Triton release venvs under {VENVS}: run bash tools/tritons.sh all", file=sys.stderr)
        return 1
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("probes-triton-*.karc"):
        stale.unlink()
    index: dict[str, dict] = {}
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRITON_")}
    env["PYTHONPATH"] = str(ROOT)
    with tempfile.TemporaryDirectory(prefix="karchive-probes-") as tmp:
        for v in found:
            t0 = time.time()
            path = out / f"probes-triton-{v.version}.karc"
            build(
                v,
                PROBES / "build.toml",
                path,
                cwd=pathlib.Path(tmp),
                env=dict(env, KARCHIVE_CACHE_DIR=os.path.join(tmp, v.version)),
            )
            data = path.read_bytes()
            from karchive.format.reader import ArchiveReader

            n = len(ArchiveReader.from_path(path).manifest["variants"])
            index[v.version] = {"file": path.name, "sha256": hashlib.sha256(data).hexdigest(), "variants": n}
            print(f"{path.name}: triton {v.version}, {n} variants, {len(data)} bytes, {time.time() - t0:.1f}s")
    (out / "index.json").write_text(json.dumps({"archives": index}, indent=2, sort_keys=True) + "\n")
    print(f"{len(index)} archives in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
