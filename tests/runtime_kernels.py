"""Kernels the runtime tests compile (on this CPU-only machine) beyond examples/kernels.py."""

import triton
import triton.language as tl


@triton.jit
def scalars_kernel(out_ptr, flag, i8v, i16v, u32v, i64v, h, b, f, d, n, BLOCK: tl.constexpr):
    """A parameter of every scalar type the runtime packs: out = their sum (as fp32)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    total = (flag.to(tl.float32) + i8v.to(tl.float32) + i16v.to(tl.float32) + u32v.to(tl.float32)
             + i64v.to(tl.float32) + h.to(tl.float32) + b.to(tl.float32) + f + d.to(tl.float32))
    tl.store(out_ptr + offs, tl.zeros([BLOCK], tl.float32) + total, mask=offs < n)
