"""A Gluon kernel (``triton.experimental.gluon.jit``) for karchive's build and capture tests (issue 21).

Gluon kernels spell out their layouts; Triton compiles them through the same ``ASTSource`` path as
``@triton.jit`` kernels (from the release that ships ``triton.experimental.gluon``).
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl


@gluon.jit
def gluon_scale(src, dst, n, alpha, BLOCK: gl.constexpr):
    layout: gl.constexpr = gl.BlockedLayout(size_per_thread=[4], threads_per_warp=[32], warps_per_cta=[4], order=[0])
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=layout)
    mask = offs < n
    gl.store(dst + offs, gl.load(src + offs, mask=mask) * alpha, mask=mask)
