"""User-defined Triton kernels inside a ``torch.compile``d graph (issue 31): the MLP's ``silu(gate) * up`` as a
``torch.library.triton_op`` with an autotuned forward kernel and a plain backward kernel, so Inductor copies both
into its generated modules (``@triton_heuristics.user_autotune``) and tunes the forward's configs itself.

Used by tools/bench_compiled_model.py's ``user-kernel`` workload (``patch_mlp``); needs a CUDA torch with Triton.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl
from torch.library import triton_op, wrap_triton


@triton.autotune(
    configs=[triton.Config({"BLOCK": 512}, num_warps=4), triton.Config({"BLOCK": 1024}, num_warps=8)],
    key=["n"],
)
@triton.jit
def silu_mul_fwd(g_ptr, u_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    g = tl.load(g_ptr + offs, mask=m).to(tl.float32)
    u = tl.load(u_ptr + offs, mask=m).to(tl.float32)
    tl.store(out_ptr + offs, (g * tl.sigmoid(g) * u).to(out_ptr.dtype.element_ty), mask=m)


@triton.jit
def silu_mul_bwd(g_ptr, u_ptr, dy_ptr, dg_ptr, du_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    g = tl.load(g_ptr + offs, mask=m).to(tl.float32)
    u = tl.load(u_ptr + offs, mask=m).to(tl.float32)
    dy = tl.load(dy_ptr + offs, mask=m).to(tl.float32)
    s = tl.sigmoid(g)
    tl.store(du_ptr + offs, (dy * g * s).to(du_ptr.dtype.element_ty), mask=m)
    tl.store(dg_ptr + offs, (dy * u * (s + g * s * (1.0 - s))).to(dg_ptr.dtype.element_ty), mask=m)


@triton_op("karchive_bench::silu_mul", mutates_args=())
def silu_mul(g: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    g, u = g.contiguous(), u.contiguous()
    out = torch.empty_like(g)
    n = g.numel()
    wrap_triton(silu_mul_fwd)[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](g, u, out, n)
    return out


@triton_op("karchive_bench::silu_mul_backward", mutates_args=())
def silu_mul_backward(g: torch.Tensor, u: torch.Tensor, dy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    g, u, dy = g.contiguous(), u.contiguous(), dy.contiguous()
    dg, du = torch.empty_like(g), torch.empty_like(u)
    n = g.numel()
    wrap_triton(silu_mul_bwd)[(triton.cdiv(n, 1024),)](g, u, dy, dg, du, n, BLOCK=1024)
    return dg, du


def _setup(ctx: Any, inputs: tuple, output: Any) -> None:
    ctx.save_for_backward(*inputs)


def _backward(ctx: Any, dy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    g, u = ctx.saved_tensors
    return silu_mul_backward(g, u, dy)


silu_mul.register_autograd(_backward, setup_context=_setup)


def patch_mlp(model: Any) -> int:
    """Every Llama MLP of ``model`` computes ``down(silu_mul(gate(x), up(x)))``; the number patched."""
    patched = 0
    for module in model.modules():
        if all(hasattr(module, a) for a in ("gate_proj", "up_proj", "down_proj")):
            module.forward = (lambda m: lambda x: m.down_proj(silu_mul(m.gate_proj(x), m.up_proj(x))))(module)
            patched += 1
    return patched
