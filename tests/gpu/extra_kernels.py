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


# The tuned kinds of tools/bench_launch*.py (issue 33): the same body as examples/kernels.py's add_kernel (4 launch
# arguments), autotuned, with a heuristic, and heuristics over autotune (flash-linear-attention's stacking: the
# heuristic's value is part of the autotune key). tools/tuned_bench.py builds their archive with recorded choices.
@triton.autotune(
    configs=[triton.Config({"BLOCK": 1024}, num_warps=4), triton.Config({"BLOCK": 512}, num_warps=4)],
    key=["n_elements"],
)
@triton.jit
def add_tuned(x_ptr, y_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask)


@triton.heuristics({"BLOCK": lambda args: min(triton.next_power_of_2(args["n_elements"]), 1024)})
@triton.jit
def add_heur(x_ptr, y_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask)


@triton.heuristics({"EVEN": lambda args: args["n_elements"] % 1024 == 0})
@triton.autotune(
    configs=[triton.Config({"BLOCK": 1024}, num_warps=4), triton.Config({"BLOCK": 512}, num_warps=4)],
    key=["n_elements", "EVEN"],
)
@triton.jit
def add_stacked(x_ptr, y_ptr, out_ptr, n_elements, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN:
        tl.store(out_ptr + offsets, tl.load(x_ptr + offsets) + tl.load(y_ptr + offsets))
    else:
        mask = offsets < n_elements
        tl.store(
            out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask
        )
