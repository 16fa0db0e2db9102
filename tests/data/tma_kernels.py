"""Kernels that take host tensor descriptors (``tensordesc<...>``), written for karchive's tests (issue 21).

A copy (one descriptor in, one out), a persistent matmul (three descriptors: A, B, C; programs loop over
output tiles) and an attention forward (Q, K, V, O descriptors, online softmax), in the style of Triton's
tutorials but written here. A device-side descriptor kernel (``tl.make_tensor_descriptor`` from plain
pointers) checks that such kernels, which need only a global-scratch allocator, keep working.
"""

import triton
import triton.language as tl


@triton.jit
def desc_copy(in_desc, out_desc, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Copies one [BLOCK_M, BLOCK_N] tile per program (grid: tiles along rows x tiles along columns)."""
    pm = tl.program_id(0)
    pn = tl.program_id(1)
    tile = in_desc.load([pm * BLOCK_M, pn * BLOCK_N])
    out_desc.store([pm * BLOCK_M, pn * BLOCK_N], tile)


@triton.jit
def desc_add(a_desc, b_desc, c_desc, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """C = A + B, one tile per program: three descriptors and little work (tools/bench_launch.py times it)."""
    pm = tl.program_id(0)
    pn = tl.program_id(1)
    c_desc.store(
        [pm * BLOCK_M, pn * BLOCK_N],
        a_desc.load([pm * BLOCK_M, pn * BLOCK_N]) + b_desc.load([pm * BLOCK_M, pn * BLOCK_N]),
    )


@triton.jit
def desc_matmul_persistent(
    a_desc,
    b_desc,
    c_desc,
    M,
    N,
    K,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    NUM_PROGRAMS: tl.constexpr,
):
    """C[M, N] = A[M, K] @ B[N, K]^T, fp32 accumulation; each program walks tiles start, start + P, ..."""
    start = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    for tile in range(start, tiles_m * tiles_n, NUM_PROGRAMS):
        row = (tile // tiles_n) * BLOCK_M
        col = (tile % tiles_n) * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, K, BLOCK_K):
            a = a_desc.load([row, k])
            b = b_desc.load([col, k])
            acc = tl.dot(a, b.T, acc)
        c_desc.store([row, col], acc.to(c_desc.dtype))


@triton.jit
def desc_attention_fwd(
    q_desc,
    k_desc,
    v_desc,
    o_desc,
    seq_len,
    sm_scale,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """Non-causal attention over [batch*heads*seq, HEAD_DIM] views; grid (seq/BLOCK_M, batch*heads)."""
    qblock = tl.program_id(0)
    head = tl.program_id(1)
    base = head * seq_len
    q = q_desc.load([base + qblock * BLOCK_M, 0])
    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), dtype=tl.float32)
    scale = sm_scale * 1.4426950408889634  # log2(e): exp2 below
    for start in range(0, seq_len, BLOCK_N):
        k = k_desc.load([base + start, 0])
        s = tl.dot(q, k.T) * scale
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.math.exp2(s - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = v_desc.load([base + start, 0])
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    o_desc.store([base + qblock * BLOCK_M, 0], (acc / l_i[:, None]).to(o_desc.dtype))


@triton.jit
def device_desc_copy(src, dst, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """A device-side descriptor (made in the kernel): plain pointers in, global scratch for the map."""
    s = tl.make_tensor_descriptor(src, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
    d = tl.make_tensor_descriptor(dst, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
    pm = tl.program_id(0)
    pn = tl.program_id(1)
    d.store([pm * BLOCK_M, pn * BLOCK_N], s.load([pm * BLOCK_M, pn * BLOCK_N]))


def _descriptor_blocks(nargs):
    """Triton's usual autotune pre_hook: each config sets the descriptors' block shapes it was compiled for."""
    bm, bn, bk = nargs["BLOCK_M"], nargs["BLOCK_N"], nargs["BLOCK_K"]
    nargs["a_desc"].block_shape = [bm, bk]
    nargs["b_desc"].block_shape = [bn, bk]
    nargs["c_desc"].block_shape = [bm, bn]


@triton.autotune(
    configs=[
        triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64}, num_warps=4, pre_hook=_descriptor_blocks),
        triton.Config({"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 64}, num_warps=8, pre_hook=_descriptor_blocks),
    ],
    key=["M", "N", "K"],
)
@triton.jit
def desc_matmul_tuned(
    a_desc, b_desc, c_desc, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr
):
    """One output tile per program: C = A @ B^T with block shapes chosen by the autotuner."""
    pid = tl.program_id(0)
    tiles_n = tl.cdiv(N, BLOCK_N)
    row = (pid // tiles_n) * BLOCK_M
    col = (pid % tiles_n) * BLOCK_N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        acc = tl.dot(a_desc.load([row, k]), b_desc.load([col, k]).T, acc)
    c_desc.store([row, col], acc.to(c_desc.dtype))


@triton.jit
def fp8_scale(x_ptr, y_ptr, out_desc, n, scale, BLOCK: tl.constexpr):
    """fp8 in (e4m3 and e5m2 pointers), fp8 e4m3 out through a descriptor: the fp8 types in signatures."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    v = tl.load(x_ptr + offs, mask=m).to(tl.float32) + tl.load(y_ptr + offs, mask=m).to(tl.float32)
    out_desc.store([tl.program_id(0) * BLOCK], (v * scale).to(tl.float8e4nv))


@triton.jit
def desc_to_ptr(in_desc, out_ptr, stride, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """A descriptor followed by a plain pointer and an int: the packer must place each after the expansion."""
    pm = tl.program_id(0)
    rows = pm * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]
    cols = tl.arange(0, BLOCK_N)[None, :]
    tl.store(out_ptr + rows * stride + cols, in_desc.load([pm * BLOCK_M, 0]))
