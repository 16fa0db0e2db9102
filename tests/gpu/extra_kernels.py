"""Kernels the GPU tests and benchmarks need beyond examples/kernels.py (built into test archives only)."""

import triton
import triton.language as tl


@triton.jit
def tma_scale_kernel(in_ptr, out_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    """out = 2 * in through device-side tensor descriptors: Triton gives this kernel nonzero global scratch."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    din = tl.make_tensor_descriptor(in_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    dout = tl.make_tensor_descriptor(out_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    x = din.load([pid_m * BM, pid_n * BN])
    dout.store([pid_m * BM, pid_n * BN], x * 2.0)


@triton.jit
def add16_kernel(out_ptr, p0, p1, p2, p3, p4, p5, p6, p7, p8, p9, p10, p11, p12, p13, n, BLOCK: tl.constexpr):
    """out = p0 + p1 (the other 12 pointers are only passed): 16 launch arguments for the per-argument cost."""
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(p0 + offs, mask=mask) + tl.load(p1 + offs, mask=mask), mask=mask)
