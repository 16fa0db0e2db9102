"""Launch the example kernels from an archive with no Triton, no torch and no numpy: raw device pointers.

    python examples/launch.py [ARCHIVE]      # a path, URL or NAME@VERSION (default: examples@0.1.0)

Device memory comes from cuda.bindings directly, as an inference server without a framework would do
it. Without an NVIDIA GPU and driver it says what is missing and exits 0 (the rest of the demo ran).
"""

from __future__ import annotations

import array
import math
import random
import sys
import time

import karchive
from karchive.errors import NoDeviceError

REF = sys.argv[1] if len(sys.argv) > 1 else "examples@0.1.0"


def main() -> int:
    arc = karchive.open(REF)
    add, scale, softmax = (arc.kernel(n) for n in ("add_kernel", "scale_kernel", "softmax_kernel"))
    try:
        from cuda.bindings import driver as cu
    except ImportError:
        print("skipped launch: cuda-python is not installed (pip install 'karchive[cuda]')")
        return 0
    try:
        add.preload()  # loads the module for device 0: fails clearly without a GPU/driver
    except NoDeviceError as exc:
        print(f"skipped launch: {exc}")
        return 0

    def check(err):
        if int(err) != 0:
            raise RuntimeError(f"CUDA error {err}")

    # Raw pointers carry no device: allocate in device 0's primary context, the one karchive launches in.
    err, dev = cu.cuDeviceGet(0)
    check(err)
    err, ctx = cu.cuDevicePrimaryCtxRetain(dev)
    check(err)
    check(cu.cuCtxSetCurrent(ctx)[0])

    def to_device(values: array.array) -> int:
        err, ptr = cu.cuMemAlloc(len(values) * values.itemsize)
        check(err)
        check(cu.cuMemcpyHtoD(ptr, values, len(values) * values.itemsize)[0])
        return int(ptr)

    def to_host(ptr: int, n: int) -> array.array:
        out = array.array("f", bytes(4 * n))
        check(cu.cuMemcpyDtoH(out, ptr, 4 * n)[0])
        return out

    n = 1 << 16
    x = array.array("f", (random.uniform(-1, 1) for _ in range(n)))
    y = array.array("f", (random.uniform(-1, 1) for _ in range(n)))
    px, py, po = to_device(x), to_device(y), to_device(array.array("f", bytes(4 * n)))
    blocks = lambda meta: ((n + meta["BLOCK"] - 1) // meta["BLOCK"],)  # noqa: E731

    start = time.perf_counter()
    add[blocks](px, py, po, n, BLOCK=1024)
    check(cu.cuCtxSynchronize()[0])
    first = time.perf_counter() - start
    got = to_host(po, n)
    assert all(abs(got[i] - (x[i] + y[i])) <= 1e-6 for i in range(n)), "add_kernel: wrong result"
    print(
        f"add_kernel     ok  ({n} elements, first launch incl. module load {first * 1e3:.2f} ms, "
        f"variant {add.select(px, py, po, n, BLOCK=1024).key[:12]})"
    )

    scale[blocks](px, po, n, 1, 2.5, BLOCK=1024)  # stride == 1: the specialised variant
    check(cu.cuCtxSynchronize()[0])
    got = to_host(po, n)
    assert all(abs(got[i] - 2.5 * x[i]) <= 1e-5 for i in range(n)), "scale_kernel: wrong result"
    print(f"scale_kernel   ok  (stride == 1 -> variant {scale.select(px, po, n, 1, 2.5, BLOCK=1024).key[:12]})")

    rows, cols = 64, 1000
    softmax[(rows,)](po, px, cols, cols, cols, BLOCK=1024)
    check(cu.cuCtxSynchronize()[0])
    got = to_host(po, rows * cols)
    for r in range(0, rows, 16):
        row = x[r * cols : (r + 1) * cols]
        m = max(row)
        den = sum(math.exp(v - m) for v in row)
        assert all(abs(got[r * cols + c] - math.exp(row[c] - m) / den) < 1e-6 for c in range(cols)), "softmax"
    print(f"softmax_kernel ok  ({rows} rows of {cols})")

    bound = add.bind(blocks, px, py, po, n, BLOCK=1024)  # the hot-loop path: everything resolved once
    start = time.perf_counter()
    for _ in range(1000):
        bound()
    check(cu.cuCtxSynchronize()[0])
    print(
        f"bound add      {((time.perf_counter() - start) / 1000) * 1e6:.2f} us per launch (host + GPU, 1000 launches)"
    )
    print("triton imported:", "triton" in sys.modules, "| torch imported:", "torch" in sys.modules)
    return 0


if __name__ == "__main__":
    sys.exit(main())
