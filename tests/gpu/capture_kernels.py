"""A training step whose forward and backward launch autotuned Triton kernels (the capture GPU proof's workload).

``ScaledSilu(x, w) = silu(x * w)`` for ``x`` of shape (M, N) and ``w`` of shape (N,), as a custom
``torch.autograd.Function``: forward launches ``fwd_mul`` and ``fwd_silu``; backward (which PyTorch runs on
its autograd engine's device thread) launches ``bwd_silu`` (also ``@triton.heuristics``), ``bwd_dx`` and
``bwd_dw``. Every kernel is ``@triton.autotune``d over two configs, so a cold step compiles 10 binaries.

Results do not depend on which config the autotuner picks (elementwise kernels compute each element the
same way; ``bwd_dw`` sums rows one at a time in order), so a fresh process that re-tunes must reproduce the
captured outputs and gradients bit for bit.
"""

from __future__ import annotations

import triton
import triton.language as tl

M, N = 256, 512
ELEM_CONFIGS = [triton.Config({"BLOCK": 256}, num_warps=4), triton.Config({"BLOCK": 1024}, num_warps=8)]
COL_CONFIGS = [triton.Config({"BLOCK_N": 64}, num_warps=2), triton.Config({"BLOCK_N": 128}, num_warps=4)]
FORWARD = ("fwd_mul", "fwd_silu")
BACKWARD = ("bwd_silu", "bwd_dx", "bwd_dw")
#: Kept by the last forward/backward for the tests that relaunch kernels one by one.
SAVED: dict = {}


@triton.autotune(configs=ELEM_CONFIGS, key=["n"])
@triton.jit
def fwd_mul(x_ptr, w_ptr, h_ptr, n, ncols, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    w = tl.load(w_ptr + offs % ncols, mask=m)
    tl.store(h_ptr + offs, x * w, mask=m)


@triton.autotune(configs=ELEM_CONFIGS, key=["n"])
@triton.jit
def fwd_silu(h_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    h = tl.load(h_ptr + offs, mask=m)
    tl.store(y_ptr + offs, h * tl.sigmoid(h), mask=m)


@triton.autotune(configs=ELEM_CONFIGS, key=["n"])
@triton.heuristics({"EVEN": lambda args: args["n"] % args["BLOCK"] == 0})
@triton.jit
def bwd_silu(h_ptr, dy_ptr, dh_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN:
        h = tl.load(h_ptr + offs)
        dy = tl.load(dy_ptr + offs)
    else:
        h = tl.load(h_ptr + offs, mask=offs < n)
        dy = tl.load(dy_ptr + offs, mask=offs < n)
    s = tl.sigmoid(h)
    dh = dy * (s + h * s * (1.0 - s))
    if EVEN:
        tl.store(dh_ptr + offs, dh)
    else:
        tl.store(dh_ptr + offs, dh, mask=offs < n)


@triton.autotune(configs=ELEM_CONFIGS, key=["n"])
@triton.jit
def bwd_dx(dh_ptr, w_ptr, dx_ptr, n, ncols, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    dh = tl.load(dh_ptr + offs, mask=m)
    w = tl.load(w_ptr + offs % ncols, mask=m)
    tl.store(dx_ptr + offs, dh * w, mask=m)


@triton.autotune(configs=COL_CONFIGS, key=["nrows", "ncols"])
@triton.jit
def bwd_dw(dh_ptr, x_ptr, dw_ptr, nrows, ncols, BLOCK_N: tl.constexpr):
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    m = cols < ncols
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for r in range(0, nrows):  # one row at a time, in order: the same sum whatever BLOCK_N is
        acc += tl.load(dh_ptr + r * ncols + cols, mask=m, other=0.0) * tl.load(
            x_ptr + r * ncols + cols, mask=m, other=0.0
        )
    tl.store(dw_ptr + cols, acc, mask=m)


def elem_grid(n: int):
    return lambda meta: (triton.cdiv(n, meta["BLOCK"]),)


def col_grid(ncols: int):
    return lambda meta: (triton.cdiv(ncols, meta["BLOCK_N"]),)


def _function_class():
    import torch

    class ScaledSilu(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w):
            nrows, ncols = x.shape
            n = x.numel()
            h, y = torch.empty_like(x), torch.empty_like(x)
            fwd_mul[elem_grid(n)](x, w, h, n, ncols)
            fwd_silu[elem_grid(n)](h, y, n)
            ctx.save_for_backward(x, w, h)
            SAVED["h"] = h
            return y

        @staticmethod
        def backward(ctx, dy):
            import threading

            x, w, h = ctx.saved_tensors
            dy = dy.contiguous()
            nrows, ncols = x.shape
            n = x.numel()
            dh, dx, dw = torch.empty_like(x), torch.empty_like(x), torch.empty_like(w)
            bwd_silu[elem_grid(n)](h, dy, dh, n)
            bwd_dx[elem_grid(n)](dh, w, dx, n, ncols)
            bwd_dw[col_grid(ncols)](dh, x, dw, nrows, ncols)
            SAVED["dh"] = dh
            SAVED["backward_thread"] = threading.current_thread().name
            return dx, dw

    return ScaledSilu


_FN = None


def scaled_silu(x, w):
    global _FN
    if _FN is None:
        _FN = _function_class()
    return _FN.apply(x, w)


def make_inputs(device: str = "cuda", seed: int = 0) -> dict:
    import torch

    g = torch.Generator(device="cpu").manual_seed(seed)
    return {
        "x": torch.randn(M, N, generator=g).to(device),
        "w": torch.randn(N, generator=g).to(device),
        "gy": torch.randn(M, N, generator=g).to(device),
    }


def step(inp: dict) -> dict:
    """One training step: forward, backward with the given upstream gradient; returns outputs and grads."""
    x = inp["x"].detach().clone().requires_grad_(True)
    w = inp["w"].detach().clone().requires_grad_(True)
    y = scaled_silu(x, w)
    y.backward(inp["gy"])
    return {"y": y.detach(), "dx": x.grad, "dw": w.grad}
