"""Build the tensor-descriptor proof archives (issue 21) on the CPU machine, for tests/gpu/test_tensordesc_gpu.py.

    bash tools/tritons.sh 3.6                      # optional: a Triton 3.6 venv (the H100's release)
    python tests/gpu/build_tensordesc.py [OUT]     # -> .gpu/tensordesc/ (git-ignored; the lead carries .gpu/)

``OUT/tensordesc.karc``: this checkout's ``karchive build`` (its Triton) of tests/gpu/tensordesc_build.toml
(host-descriptor copy and add, persistent matmul, attention forward, a device-side descriptor kernel and an
autotuned descriptor matmul, for cuda:90 and cuda:100). ``OUT/tensordesc-triton-<X.Y.Z>.karc``: the same
spec built by each Triton release venv under ``.venv-triton/`` (tools/tritons.sh), so the H100 launches
archives of two descriptor conventions (``triton-3.5`` from 3.6, ``triton-3.8`` from 3.8/3.9).
``OUT/index.json`` names each archive with the Triton that built it. No GPU needed.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
SPEC = ROOT / "tests" / "gpu" / "tensordesc_build.toml"
DEFAULT_OUT = ROOT / ".gpu" / "tensordesc"
VENVS = ROOT / os.environ.get("KARCHIVE_TRITON_VENVS", ".venv-triton")


def _build(python: str, out: pathlib.Path) -> str:
    """Build SPEC with ``python``'s karchive into ``out``; the Triton version that built it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRITON_")}
    subprocess.run([python, "-m", "karchive", "build", str(SPEC), "-o", str(out)], cwd=ROOT, env=env, check=True)
    from karchive.format.open import open_location

    return str(open_location(out).manifest["produced_by"]["triton"])


def main(argv: list[str]) -> int:
    out = pathlib.Path(argv[0]) if argv else DEFAULT_OUT
    out.mkdir(parents=True, exist_ok=True)
    index: dict[str, str] = {}
    try:
        version = _build(sys.executable, out / "tensordesc.karc")
        index[version] = "tensordesc.karc"
        shutil.copyfile(out / "tensordesc.karc", out / f"tensordesc-triton-{version}.karc")
        for venv in sorted(VENVS.glob("*")) if VENVS.is_dir() else []:
            python = venv / "bin" / "python"
            if not python.exists():
                continue
            path = out / f"tensordesc-triton-{venv.name}.karc"
            v = _build(str(python), path)
            final = out / f"tensordesc-triton-{v}.karc"
            path.replace(final)
            index.setdefault(v, final.name)
    except subprocess.CalledProcessError as exc:
        return exc.returncode or 1
    (out / "index.json").write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")
    for v, name in sorted(index.items()):
        print(f"Triton {v}: {out / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
