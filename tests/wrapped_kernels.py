"""Autotuned and heuristics kernels in every stacking order, for the AOT and exact-key tests (a plain
module: not collected; imported only where Triton is installed). Shaped like real libraries' kernels
(flash-linear-attention puts heuristics over autotune and keys on a heuristics-computed flag)."""

from __future__ import annotations

import triton
import triton.language as tl

CONFIGS = [
    triton.Config({"BLOCK": 64}, num_warps=2),
    triton.Config({"BLOCK": 128}, num_warps=4),
    triton.Config({"BLOCK": 256}, num_warps=8, num_stages=2),
]


def _prune(configs, named_args, **kwargs):
    return [c for c in configs if c.kwargs["BLOCK"] <= 128]


@triton.autotune(configs=CONFIGS, key=["n"], reset_to_zero=["out_ptr"], prune_configs_by={"early_config_prune": _prune})
@triton.jit
def at_copy(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)


# heuristics over autotune: IS_VARLEN is computed first and is part of the autotune key
@triton.heuristics({"IS_VARLEN": lambda args: args["offsets"] is not None})
@triton.autotune(configs=CONFIGS[:2], key=["n", "IS_VARLEN"])
@triton.jit
def h_over_at(x_ptr, out_ptr, offsets, n, scale, BLOCK: tl.constexpr, IS_VARLEN: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    if IS_VARLEN:
        x += tl.load(offsets + offs, mask=m)
    tl.store(out_ptr + offs, x * scale, mask=m)


# autotune over heuristics: EVEN sees the config's BLOCK
@triton.autotune(configs=CONFIGS[:2], key=["n"], restore_value=["x_ptr"])
@triton.heuristics({"EVEN": lambda args: args["n"] % args["BLOCK"] == 0})
@triton.jit
def at_over_h(x_ptr, out_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN:
        tl.store(out_ptr + offs, tl.load(x_ptr + offs))
    else:
        m = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)


def _opaque_warps(args):
    import os  # a tuning table or device query: no single expression

    return 8 if os.environ.get("WIDE_TILES") else 4


@triton.heuristics({"num_warps": _opaque_warps, "BLOCK": lambda args: triton.next_power_of_2(args["n"])})
@triton.jit
def h_only(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)


# Every key type Triton's autotuner hashes: ints (do_not_specialize), floats, bools, None, a dtype value,
# heuristics-computed values from above (HAS_B, BLOCK_D) and tensor dtypes; a heuristic below sees the config.
@triton.heuristics(
    {"HAS_B": lambda args: args["b_ptr"] is not None, "BLOCK_D": lambda args: triton.next_power_of_2(args["D"])}
)
@triton.autotune(configs=CONFIGS[:2], key=["D", "eps", "flag", "mode", "BLOCK_D", "HAS_B", "opt"])
@triton.heuristics({"EVEN": lambda args: args["D"] % args["BLOCK"] == 0})
@triton.jit(do_not_specialize=["D"])
def keyed(
    x_ptr,
    b_ptr,
    out_ptr,
    D,
    eps,
    flag,
    mode,
    opt,
    BLOCK: tl.constexpr,
    BLOCK_D: tl.constexpr,
    HAS_B: tl.constexpr,
    EVEN: tl.constexpr,
):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < D
    x = tl.load(x_ptr + offs, mask=m)
    if HAS_B:
        x += tl.load(b_ptr + offs, mask=m)
    tl.store(out_ptr + offs, x * eps, mask=m)


def _sm_warps(args):
    """An operator library's heuristic: num_warps from the device the tensor lives on (not replayable from probes)."""
    import torch

    props = torch.cuda.get_device_properties(args["x_ptr"].device)
    return 8 if props.multi_processor_count >= 100 else 4


@triton.autotune(configs=CONFIGS[:2], key=["n"])
@triton.heuristics({"num_warps": _sm_warps})
@triton.jit
def h_device(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + 1.0, mask=m)


# Matmul-like and reduction-like autotuned kernels for the tuning-quality check on the GPU (karchive's on-device
# choice among prebuilt configs against Triton's own autotuner).
MM_CONFIGS = [
    triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk}, num_warps=w, num_stages=s)
    for bm, bn, bk, w, s in (
        (64, 64, 32, 4, 3),
        (128, 64, 32, 4, 4),
        (64, 128, 64, 4, 3),
        (128, 128, 32, 8, 3),
        (128, 256, 64, 8, 3),
        (32, 32, 32, 2, 2),
    )
]


@triton.autotune(configs=MM_CONFIGS, key=["M", "N", "K"])
@triton.jit
def at_matmul(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    pid = tl.program_id(0)
    num_n = tl.cdiv(N, BLOCK_N)
    pid_m = pid // num_n
    pid_n = pid % num_n
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a = a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak
    b = b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a_tile = tl.load(a, mask=(rm[:, None] < M) & (rk[None, :] < k_left), other=0.0)
        b_tile = tl.load(b, mask=(rk[:, None] < k_left) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a_tile, b_tile)
        a += BLOCK_K * stride_ak
        b += BLOCK_K * stride_bk
    c = c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn
    tl.store(c, acc.to(tl.float16), mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.autotune(
    configs=[
        triton.Config({"BLOCK_N": bn}, num_warps=w)
        for bn, w in ((256, 1), (512, 2), (1024, 4), (2048, 8), (4096, 8), (4096, 16))
    ],
    key=["N"],
)
@triton.jit
def at_rowsum(x_ptr, out_ptr, N, stride, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        acc += tl.load(x_ptr + row * stride + cols, mask=cols < N, other=0.0)
    tl.store(out_ptr + row, tl.sum(acc, axis=0))
