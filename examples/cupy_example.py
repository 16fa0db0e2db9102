"""CuPy arrays and streams, raw device pointers and __cuda_array_interface__ objects through the runtime.

python examples/cupy_example.py [examples.karc]      # karchive build examples/build.toml -o examples.karc
"""

import os
import sys


def skip(why: str) -> None:
    print(f"skipped: {why}")
    sys.exit(0)


ARCHIVE = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "examples.karc")

try:
    import cupy as cp
except ImportError:
    skip("cupy is not installed")
try:
    cp.cuda.runtime.getDeviceCount()
except Exception as exc:  # noqa: BLE001
    skip(f"no CUDA GPU ({exc})")
if not os.path.exists(ARCHIVE):
    skip(f"no archive at {ARCHIVE} (karchive build examples/build.toml -o examples.karc)")

import karchive

add = karchive.open(ARCHIVE).kernel("add_kernel")
grid = lambda m: ((m["n_elements"] + m["BLOCK"] - 1) // m["BLOCK"],)  # noqa: E731
n = 1 << 20
x = cp.random.standard_normal(n, dtype=cp.float32)
y = cp.random.standard_normal(n, dtype=cp.float32)

out = cp.empty_like(x)
add[grid](x, y, out, n, BLOCK=1024)  # CuPy arrays; CuPy's current stream
assert cp.array_equal(out, x + y)

s = cp.cuda.Stream(non_blocking=True)
with s:  # inside `with stream:` the launch goes to s
    out2 = cp.empty_like(x)
    add[grid](x, y, out2, n, BLOCK=1024)
s.synchronize()
assert cp.array_equal(out2, x + y)

out3 = cp.zeros_like(x)  # raw addresses and a raw stream handle
add[grid](x.data.ptr, y.data.ptr, out3.data.ptr, n, BLOCK=1024, stream=s.ptr)
s.synchronize()
assert cp.array_equal(out3, x + y)


class Foreign:  # any __cuda_array_interface__ object (Numba, ...)
    def __init__(self, a):
        self.__cuda_array_interface__ = a.__cuda_array_interface__


out4 = cp.empty_like(x)
add[grid](Foreign(x), Foreign(y), Foreign(out4), n, BLOCK=1024, stream=s)
s.synchronize()
assert cp.array_equal(out4, x + y)
print("cupy example OK: CuPy arrays, CuPy streams, raw pointers, __cuda_array_interface__")
