"""Probe kernels: one per Triton feature whose build broke or could break with a Triton release (issue 19).

Built for cuda:80, cuda:90 and hip:gfx942 by every supported Triton release (tests/test_triton_releases.py,
tools/tritons.sh) and launched on a GPU without Triton (tests/gpu/test_triton_releases_gpu.py). Each
kernel reaches a different part of Triton's code generator and of its own package (libdevice, the
atomic and descriptor lowering), which is where machine paths entered the debug info.
"""

import triton
import triton.language as tl
from triton.language.extra import libdevice


@triton.jit
def strided_kernel(x_ptr, out_ptr, rows, cols, stride_x, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """Pointer arithmetic: out[r, c] = x[r * stride_x + c] for a (rows, cols) window of a wider matrix."""
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    c = tl.arange(0, BLOCK_C)
    inside = (r[:, None] < rows) & (c[None, :] < cols)
    src = x_ptr + r[:, None] * stride_x + c[None, :]
    tl.store(out_ptr + r[:, None] * cols + c[None, :], tl.load(src, mask=inside), mask=inside)


@triton.jit
def masked_kernel(x_ptr, out_ptr, n, fill, BLOCK: tl.constexpr):
    """Masked loads with ``other``: out[i] = x[i] + x[i + 1], where x[n] reads as ``fill``."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    a = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    b = tl.load(x_ptr + offs + 1, mask=offs + 1 < n, other=fill)
    tl.store(out_ptr + offs, a + b, mask=offs < n)


@triton.jit
def atomic_kernel(x_ptr, idx_ptr, total_ptr, hist_ptr, n, BLOCK: tl.constexpr):
    """``tl.atomic_add``: total += sum(x) (float, order-dependent), hist[idx[i]] += 1 (int32, exact)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.atomic_add(total_ptr, tl.sum(x, axis=0))
    idx = tl.load(idx_ptr + offs, mask=mask, other=0)
    tl.atomic_add(hist_ptr + idx, tl.full([BLOCK], 1, tl.int32), mask=mask)


@triton.jit
def dot_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """``tl.dot``: C (fp32) = A @ B (fp16, row-major, contiguous), one BM x BN tile per program."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        a = tl.load(
            a_ptr + rm[:, None] * K + (k0 + rk)[None, :], mask=(rm[:, None] < M) & ((k0 + rk)[None, :] < K), other=0.0
        )
        b = tl.load(
            b_ptr + (k0 + rk)[:, None] * N + rn[None, :], mask=((k0 + rk)[:, None] < K) & (rn[None, :] < N), other=0.0
        )
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def libdevice_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """libdevice math (CUDA's libdevice, AMD's ocml): out = erf(x) + pow(|x|, 1.5) * exp2(-x*x)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    y = libdevice.erf(x) + libdevice.pow(libdevice.abs(x), 1.5) * libdevice.exp2(-x * x)
    tl.store(out_ptr + offs, y, mask=mask)


@triton.jit
def descriptor_kernel(in_ptr, out_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    """A device-side tensor descriptor: out = 3 * in. Triton gives it global scratch for the descriptor."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    din = tl.make_tensor_descriptor(in_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    dout = tl.make_tensor_descriptor(out_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    x = din.load([pid_m * BM, pid_n * BN])
    dout.store([pid_m * BM, pid_n * BN], x * 3.0)
