"""A Gluon kernel that reads its input through a TMA im2col descriptor (Triton 3.9's ``tensordesc_im2col``).

``im2col_gather`` writes the im2col matrix of an NHWC image for a convolution: row ``m`` is output pixel
``m`` (batch, row, column, in that order), columns ``(r * S + s) * C + c`` hold input channel ``c`` under
filter tap ``(r, s)``. One program loads ``BLOCK_PIX`` output pixels x ``BLOCK_C`` channels of one tap with
``async_load_im2col`` (the descriptor's pixel box and element strides carry the padding and the
convolution stride; taps are the load's offsets) and stores the tile through a tiled descriptor. Grid:
``(N * OUT_H * OUT_W / BLOCK_PIX, R * S, C / BLOCK_C)``. Its result equals ``torch.nn.functional.unfold``
of the NCHW image, columns reordered; tests/gpu/test_tensordesc_gpu.py compares the two.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma


@gluon.jit
def im2col_gather(
    in_desc, out_desc, OUT_H, OUT_W, C, STRIDE, PAD, S: gl.constexpr, BLOCK_PIX: gl.constexpr, BLOCK_C: gl.constexpr
):
    pid_m = gl.program_id(0)
    tap = gl.program_id(1)
    pid_c = gl.program_id(2)
    first = pid_m * BLOCK_PIX
    n = first // (OUT_H * OUT_W)
    rem = first % (OUT_H * OUT_W)
    oy = rem // OUT_W
    ox = rem % OUT_W
    r = tap // S
    s = tap % S
    smem = gl.allocate_shared_memory(in_desc.dtype, in_desc.block_shape, in_desc.layout)
    bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(bar, count=1)
    mbarrier.expect(bar, in_desc.block_type.nbytes)
    tma.async_load_im2col(
        in_desc, [n, oy * STRIDE - PAD, ox * STRIDE - PAD, pid_c * BLOCK_C], [r.to(gl.int16), s.to(gl.int16)], bar, smem
    )
    mbarrier.wait(bar, phase=0)
    mbarrier.invalidate(bar)
    tma.async_store(out_desc, [first, tap * C + pid_c * BLOCK_C], smem)
    tma.store_wait(pendings=0)
