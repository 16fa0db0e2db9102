"""An im2col tensor descriptor launched from an archive, against torch's unfold (issue 21).

The archive (``.gpu/tensordesc/im2col.karc``) is built on the CPU machine by ``python
tests/gpu/build_tensordesc.py`` with Triton 3.9 (Gluon im2col needs 3.8+; this machine's Triton 3.6 has none,
so Triton cannot be the reference here: torch is). Its kernel, tests/data/im2col_kernels.py:im2col_gather,
loads ``[64 pixels, 64 channels]`` tiles of an NHWC image through a ``cuTensorMapEncodeIm2col`` map and
stores them through a tiled map: the im2col matrix of a 3x3 convolution. It must equal
``torch.nn.functional.unfold`` of the NCHW image (columns reordered to tap-major, channel-minor) bit for
bit, for stride 1 and stride 2 (``element_strides``), with padding from the pixel box's negative corners;
with ``padding="nan"`` the padded positions (and only they) read NaN. On both launch paths.
"""

from __future__ import annotations

import os
import pathlib

import pytest

from karchive.runtime import launch_path

USES_BUILD_FIXTURES = False  # its own archive (build_tensordesc.py)
ROOT = pathlib.Path(__file__).resolve().parents[2]
ARCHIVE = pathlib.Path(os.environ.get("KARCHIVE_GPU_FIXTURES", ROOT / ".gpu")) / "tensordesc" / "im2col.karc"
N, H, W, C, R, S = 2, 16, 16, 64, 3, 3


def _unfold_rows(x_nhwc, stride: int, pad: int):
    """torch's im2col of the NHWC image as the kernel lays it out: row = output pixel (n, oy, ox), column =
    (r * S + s) * C + c. Also the mask of the positions that come from padding."""
    import torch

    nchw = x_nhwc.permute(0, 3, 1, 2).float()
    cols = torch.nn.functional.unfold(nchw, (R, S), padding=pad, stride=stride)  # [N, C*R*S, L], c-major
    L = cols.shape[-1]
    rows = cols.view(N, C, R * S, L).permute(0, 3, 2, 1).reshape(N * L, R * S * C)
    inside = torch.nn.functional.unfold(torch.ones_like(nchw), (R, S), padding=pad, stride=stride)
    pad_mask = inside.view(N, C, R * S, L).permute(0, 3, 2, 1).reshape(N * L, R * S * C) == 0
    return rows.to(x_nhwc.dtype), pad_mask


@pytest.mark.parametrize("path", [launch_path.PYTHON, launch_path.EXTENSION])
@pytest.mark.parametrize("padding", ["zero", "nan"])
@pytest.mark.parametrize("stride", [1, 2])
def test_im2col_descriptor_gathers_what_torch_unfold_gives(path, padding, stride):
    import torch

    import karchive

    if not ARCHIVE.exists():
        pytest.skip(
            f"{ARCHIVE} missing: on the CPU machine run `python tests/gpu/build_tensordesc.py` with "
            "Triton 3.8+ (the worktree venv), then carry .gpu/tensordesc"
        )
    if path == launch_path.EXTENSION and launch_path.extension() is None:
        pytest.skip(f"the compiled launcher is not built here: {launch_path.status().detail}")
    pad = 1
    out_h = (H + 2 * pad - R) // stride + 1
    out_w = (W + 2 * pad - S) // stride + 1
    # the pixel box: start at -pad, and hold exactly out_h x out_w pixels stepping by the stride
    upper = [(out_h - 1) * stride + 1 - H - pad, (out_w - 1) * stride + 1 - W - pad]
    M = N * out_h * out_w
    torch.manual_seed(0)
    x = torch.randn(N, H, W, C, device="cuda", dtype=torch.float16)
    want, pad_mask = _unfold_rows(x, stride, pad)
    with launch_path.forced(path):
        k = karchive.open(str(ARCHIVE)).kernel("im2col_gather")
        assert k.launch_path == path
        out = torch.full((M, R * S * C), 7.0, device="cuda", dtype=torch.float16)
        a = karchive.TensorDescriptor(
            x,
            [64, 64],
            padding=padding,
            pixel_box_lower_corner=[-pad, -pad],
            pixel_box_upper_corner=upper,
            element_strides=[1, stride, stride, 1],
        )
        b = karchive.TensorDescriptor(out, [64, 64])
        k[(M // 64, R * S, C // 64)](a, b, out_h, out_w, C, stride, pad, S=S, BLOCK_PIX=64, BLOCK_C=64)
        k[(M // 64, R * S, C // 64)](a, b, out_h, out_w, C, stride, pad, S=S, BLOCK_PIX=64, BLOCK_C=64)  # cached map
        torch.cuda.synchronize()
        if padding == "zero":
            assert torch.equal(out, want), float((out.float() - want.float()).abs().max())
        else:  # NAN_REQUEST_ZERO_FMA: the padded taps read NaN, everything else is the image
            assert torch.equal(torch.isnan(out), pad_mask)
            assert torch.equal(out[~pad_mask], want[~pad_mask])
        # a tiled descriptor for the im2col parameter is refused before anything reaches the GPU
        from karchive.errors import ArgumentError

        with pytest.raises(ArgumentError, match="takes an im2col descriptor"):
            k[(M // 64, R * S, 1)](
                karchive.TensorDescriptor(x, [1, 1, 64, 64]),
                b,
                out_h,
                out_w,
                C,
                stride,
                pad,
                S=S,
                BLOCK_PIX=64,
                BLOCK_C=64,
            )
    print(
        f"\n[im2col] stride {stride}, padding {padding}, {path} path: {M} x {R * S * C} im2col matrix as torch "
        "unfold gives it"
    )
