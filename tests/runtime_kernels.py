"""Kernels the runtime tests compile (on this CPU-only machine) beyond examples/kernels.py."""

import triton
import triton.language as tl


@triton.jit
def scalars_kernel(out_ptr, flag, i8v, i16v, u32v, i64v, h, b, f, d, n, BLOCK: tl.constexpr):
    """A parameter of every scalar type the runtime packs: out = their sum (as fp32)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    total = (
        flag.to(tl.float32)
        + i8v.to(tl.float32)
        + i16v.to(tl.float32)
        + u32v.to(tl.float32)
        + i64v.to(tl.float32)
        + h.to(tl.float32)
        + b.to(tl.float32)
        + f
        + d.to(tl.float32)
    )
    tl.store(out_ptr + offs, tl.zeros([BLOCK], tl.float32) + total, mask=offs < n)


@triton.jit
def even_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    """out = 2x; EVEN=True skips the mask (only right when n is a multiple of BLOCK). EVEN has no default:
    Triton refuses a call without it, and so must karchive where the archive holds both values."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN:
        tl.store(out_ptr + offs, tl.load(x_ptr + offs) * 2)
    else:
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)


@triton.jit
def even_default_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr = False):
    """even_kernel with a signature default for EVEN: a call without it is EVEN=False, as in Triton."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN:
        tl.store(out_ptr + offs, tl.load(x_ptr + offs) * 2)
    else:
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)
