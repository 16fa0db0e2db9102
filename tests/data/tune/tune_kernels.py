"""Autotuned kernels for `karchive tune`'s quality check on the GPU (tests/gpu/test_wrapped_gpu.py,
tests/gpu/build_tune.py): a matmul-like kernel and a reduction-like kernel, written for this test, whose
configs differ enough in speed that the choice matters.

- ``tq_linear``: ``out[M, N] = x[M, K] @ w[N, K]^T + bias[N]`` in fp16 with fp32 accumulation (the shape of a
  ``torch.nn.Linear`` forward: the weight is stored row-major as N x K), programs walked in groups of
  ``GROUP_M`` rows of tiles so neighbouring programs share weight tiles in L2.
- ``tq_row_l2``: ``out[r] = sqrt(sum_c x[r, c]^2)``, one program per row, the row read in chunks of
  ``CHUNK`` columns: a bandwidth-bound reduction whose best chunk and warp count depend on the row length.
"""

from __future__ import annotations

import triton
import triton.language as tl

LINEAR_CONFIGS = [
    triton.Config({"TILE_M": tm, "TILE_N": tn, "TILE_K": tk, "GROUP_M": 8}, num_warps=w, num_stages=s)
    for tm, tn, tk, w, s in (
        (32, 32, 32, 2, 2),
        (64, 64, 32, 4, 3),
        (64, 128, 64, 4, 3),
        (128, 64, 32, 4, 4),
        (128, 128, 64, 8, 3),
        (128, 256, 64, 8, 3),
        (256, 128, 32, 8, 3),
    )
]


@triton.autotune(configs=LINEAR_CONFIGS, key=["M", "N", "K"])
@triton.jit
def tq_linear(
    x_ptr,
    w_ptr,
    bias_ptr,
    out_ptr,
    M,
    N,
    K,
    stride_xm,
    stride_wn,
    stride_om,
    TILE_M: tl.constexpr,
    TILE_N: tl.constexpr,
    TILE_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, TILE_M)
    tiles_n = tl.cdiv(N, TILE_N)
    per_group = GROUP_M * tiles_n
    group = pid // per_group
    first_m = group * GROUP_M
    rows_in_group = min(tiles_m - first_m, GROUP_M)
    tile_m = first_m + (pid % per_group) % rows_in_group
    tile_n = (pid % per_group) // rows_in_group

    offs_m = tile_m * TILE_M + tl.arange(0, TILE_M)
    offs_n = tile_n * TILE_N + tl.arange(0, TILE_N)
    offs_k = tl.arange(0, TILE_K)
    x_tile = x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :]
    w_tile = w_ptr + offs_n[None, :] * stride_wn + offs_k[:, None]  # w^T: K x N view of the N x K weight
    acc = tl.zeros((TILE_M, TILE_N), dtype=tl.float32)
    for k0 in range(0, K, TILE_K):
        k_ok = (k0 + offs_k) < K
        a = tl.load(x_tile, mask=(offs_m[:, None] < M) & k_ok[None, :], other=0.0)
        b = tl.load(w_tile, mask=k_ok[:, None] & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
        x_tile += TILE_K
        w_tile += TILE_K
    bias = tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)
    acc += bias[None, :]
    out = out_ptr + offs_m[:, None] * stride_om + offs_n[None, :]
    tl.store(out, acc.to(tl.float16), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


ROW_CONFIGS = [
    triton.Config({"CHUNK": c}, num_warps=w)
    for c, w in ((128, 1), (256, 2), (512, 4), (1024, 4), (2048, 8), (4096, 16), (8192, 16))
]


@triton.autotune(configs=ROW_CONFIGS, key=["n_cols"])
@triton.jit
def tq_row_l2(x_ptr, out_ptr, n_cols, row_stride, CHUNK: tl.constexpr):
    row = tl.program_id(0)
    base = x_ptr + row.to(tl.int64) * row_stride
    sq = tl.zeros((CHUNK,), dtype=tl.float32)
    for c0 in range(0, n_cols, CHUNK):
        cols = c0 + tl.arange(0, CHUNK)
        v = tl.load(base + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
        sq += v * v
    tl.store(out_ptr + row, tl.sqrt(tl.sum(sq, axis=0)))
