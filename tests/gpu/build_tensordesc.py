"""Build the tensor-descriptor proof archive (issue 21) on the CPU machine, for tests/gpu/test_tensordesc_gpu.py.

    python tests/gpu/build_tensordesc.py [OUT]     # -> .gpu/tensordesc/tensordesc.karc (git-ignored)

The real ``karchive build`` of this checkout's Triton compiles tests/gpu/tensordesc_build.toml (host
descriptor copy, persistent matmul, attention forward, a device-side descriptor kernel and an autotuned
descriptor matmul, for cuda:90 and cuda:100). No GPU needed; the lead carries ``.gpu/`` to the H100.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
SPEC = ROOT / "tests" / "gpu" / "tensordesc_build.toml"
DEFAULT_OUT = ROOT / ".gpu" / "tensordesc"


def main(argv: list[str]) -> int:
    out = pathlib.Path(argv[0]) if argv else DEFAULT_OUT
    out.mkdir(parents=True, exist_ok=True)
    archive = out / "tensordesc.karc"
    proc = subprocess.run([sys.executable, "-m", "karchive", "build", str(SPEC), "-o", str(archive)], cwd=ROOT)
    if proc.returncode:
        return proc.returncode
    print(f"wrote {archive}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
