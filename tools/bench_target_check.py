"""What the up-front target check (karchive/producer/compile/toolchain.py) costs a build, side by side.

Each case runs in a fresh process (the checks are cached per process), three times:
  cuda     check_target("cuda:90") and ("cuda:80"): one `ptxas --help` per ptxas binary Triton uses
  hip      check_target("hip:gfx942", probe=True): Triton's LLVM + one tiny probe compile
  compile  compile_variant(hip:gfx942) alone, then probe + compile_variant: the probe's work (backend
           start-up) is what the first compile of a process does anyway

    python tools/bench_target_check.py
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
KERNEL = str(ROOT / "examples" / "kernels.py") + ":add_kernel"

CHILD = r"""
import sys, time
import triton  # validate_requests imports Triton anyway (to load the kernels): not part of the check
from karchive.producer.compile.aot import VariantRequest, compile_variant
from karchive.producer.compile.toolchain import check_target

case = sys.argv[1]
req = VariantRequest(sys.argv[2], "*fp32:16, *fp32:16, *fp32:16, i32", "hip:gfx942", {"BLOCK": 512})
t0 = time.perf_counter()
if case == "cuda":
    check_target("cuda:90"); check_target("cuda:80")
elif case in ("hip", "probe+compile"):
    check_target("hip:gfx942", probe=True)
t1 = time.perf_counter()
if case in ("compile", "probe+compile"):
    compile_variant(req)
t2 = time.perf_counter()
print(f"{1000 * (t1 - t0):.0f} {1000 * (t2 - t1):.0f}")
"""


def main() -> int:
    print(f"{'case':<15} {'check ms':>9} {'compile ms':>11} {'total ms':>9}")
    for case in ("cuda", "hip", "compile", "probe+compile"):
        for _ in range(3):
            out = subprocess.run(
                [sys.executable, "-c", CHILD, case, KERNEL], capture_output=True, text=True, cwd=str(ROOT), check=True
            ).stdout.split()
            check, comp = int(out[0]), int(out[1])
            print(f"{case:<15} {check:>9} {comp:>11} {check + comp:>9}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
