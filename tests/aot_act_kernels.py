"""An autotuned kernel with a string and a bool constexpr that are not part of its autotune key (the tutorial
matmul's ``ACTIVATION``), for tests/test_aot_constexpr_launch.py (a plain module: not collected; imported
only where Triton is installed)."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.autotune(
    configs=[triton.Config({"BLOCK": 64}, num_warps=2), triton.Config({"BLOCK": 128}, num_warps=4)], key=["n"]
)
@triton.jit
def at_act(x_ptr, out_ptr, n, BLOCK: tl.constexpr, ACT: tl.constexpr, NEG: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    if NEG:
        x = -x
    if ACT == "leaky_relu":
        x = tl.where(x >= 0, x, 0.01 * x)
    tl.store(out_ptr + offs, x, mask=m)
