"""Kernels of the serving tests (a plain module, imported only where Triton is installed): a ``tl.dtype`` passed as a
constexpr argument (Liger-Kernel passes ``torch_to_triton_dtype[x.dtype]`` that way) and a heuristics over an
autotuner whose value is part of the autotune key (flash-linear-attention's stacking)."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def cast_copy(x_ptr, out_ptr, n, DT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m).to(DT), mask=m)


@triton.heuristics({"HAS_B": lambda args: args["b_ptr"] is not None})
@triton.autotune(
    configs=[triton.Config({"BLOCK": 64}, num_warps=2), triton.Config({"BLOCK": 128}, num_warps=4)], key=["n", "HAS_B"]
)
@triton.jit
def h_over_tuned(x_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr, HAS_B: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    if HAS_B:
        x += tl.load(b_ptr + offs, mask=m)
    tl.store(out_ptr + offs, x, mask=m)


#: What hooked_copy's config pre_hooks saw: (BLOCK, the argument names they were given), in call order.
HOOK_CALLS: list[tuple[int, tuple[str, ...]]] = []


def _block_hook(nargs: dict) -> None:
    """A config pre_hook as descriptor kernels use them (Liger's fused MLP sets each descriptor's block here)."""
    HOOK_CALLS.append((nargs["BLOCK"], tuple(sorted(nargs))))


@triton.autotune(
    configs=[triton.Config({"BLOCK": b}, num_warps=w, pre_hook=_block_hook) for b, w in ((64, 2), (128, 4), (256, 4))],
    key=["n"],
)
@triton.jit
def hooked_copy(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)


#: A constexpr global ``tuned_global`` reads (Triton records it in the JIT function's ``used_global_vals`` and
#: refuses a launch once it changed).
SCALE = tl.constexpr(2)


@triton.autotune(
    configs=[triton.Config({"BLOCK": 64}, num_warps=2), triton.Config({"BLOCK": 128}, num_warps=4)], key=["n"]
)
@triton.jit
def tuned_global(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) * SCALE, mask=m)
