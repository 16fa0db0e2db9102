"""Run under one Triton release's interpreter (3.8+): its own im2col launch against karchive's expansion.

    <venv>/bin/python tests/data/im2col_launcher_probe.py     # (PYTHONPATH = the checkout) -> JSON on stdout

For each case (a Gluon ``TensorDescriptorIm2Col`` and the compile metadata an im2col kernel carries) it calls
the release's ``make_tensordesc_arg`` with a recording ``fill_tma_descriptor_im2col`` in place of the C
encoder, and karchive's :func:`karchive.runtime.descriptors.expand` (``encode_im2col`` recorded). It prints,
for tests/test_tensordesc_im2col.py to compare, the ``cuTensorMapEncodeIm2col`` arguments the release's C
``fillTMADescriptorIm2col`` derives from what it was given (every list innermost first, byte strides,
channelsPerPixel = block[1], pixelsPerColumn = block[0]), karchive's, the values after the map on both
sides, and the release's ``expand_signature`` slots for the parameter type. No GPU, no torch.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from tensordesc_launcher_probe import FP16, FP32, FakeTensor, _Driver

#: name, karchive dtype, tensor dtype, shape, block, lower, upper, element strides, padding, elem (size, type)
CASES = [
    ("nhwc-pad1", "fp16", FP16, [2, 8, 8, 64], [64, 64], [-1, -1], [-1, -1], None, "zero", (2, 6)),
    ("nhwc-stride2-nan", "fp16", FP16, [1, 9, 9, 128], [32, 64], [-1, -2], [-3, -4], [1, 2, 2, 1], "nan", (2, 6)),
    ("nwc-fp32", "fp32", FP32, [4, 16, 32], [128, 32], [-2], [0], [1, 3, 1], "zero", (4, 7)),
    ("ndhwc", "fp16", FP16, [1, 4, 4, 4, 32], [16, 32], [-1, -1, -1], [-1, -1, -1], None, "zero", (2, 6)),
]


def _as_c_encodes(args: tuple) -> dict:
    ptr, swizzle, elem_size, host_type, block, shape, strides, padding, lower, upper, estrides = args
    return {
        "data_type": host_type,
        "rank": len(shape),
        "address": ptr,
        "global_dim": [int(s) for s in reversed(shape)],
        "global_strides": [int(s) * elem_size for s in reversed(list(strides)[:-1])],
        "lower": [int(v) for v in reversed(lower)],
        "upper": [int(v) for v in reversed(upper)],
        "channels_per_pixel": int(block[1]),
        "pixels_per_column": int(block[0]),
        "element_strides": [int(v) for v in reversed(estrides)],
        "swizzle": swizzle,
        "oob_fill": padding,
    }


def main() -> dict:
    import triton
    from triton.backends.driver import expand_signature
    from triton.backends.nvidia import driver as nvdriver
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptorIm2Col
    from triton.runtime.driver import driver as active

    import karchive
    from karchive.format.tensordesc import TensorDescAbi, convention_for_triton
    from karchive.runtime import descriptors as td

    convention = convention_for_triton(triton.__version__)
    out: dict = {"triton": triton.__version__, "convention": convention, "karchive": karchive.__file__, "cases": {}}
    encoded: list[Any] = []

    def recorded(p: Any) -> bytes:
        encoded.append(p)
        return bytes(128)

    td.encode_im2col = recorded  # type: ignore[assignment]
    fake = _Driver()
    fake.utils.fill_tma_descriptor_im2col = fake.utils._fill  # type: ignore[attr-defined]
    active.set_active(fake)
    for name, kdtype, dtype, shape, block, lower, upper, estrides, padding, (size, etype) in CASES:
        strides = [1] * len(shape)
        for i in range(len(shape) - 2, -1, -1):
            strides[i] = strides[i + 1] * shape[i + 1]
        base = FakeTensor(0x7F0000010000, shape, dtype, strides)
        layout = gl.NVMMASharedLayout.get_default_for(block, gl.float16 if kdtype == "fp16" else gl.float32)
        desc = TensorDescriptorIm2Col.from_tensor(
            base,
            block,
            layout,
            padding=padding,
            element_strides=estrides,
            pixel_box_lower_corner=lower,
            pixel_box_upper_corner=upper,
        )
        meta = {
            "swizzle": 3,
            "elem_size": size,
            "elem_type": etype,
            "block_size": block,
            "fp4_padded": False,
            "is_im2col": True,
        }
        record = TensorDescAbi(
            convention, "tma", kdtype, len(shape), tuple(block), swizzle=3, elem_size=size, elem_type=etype, im2col=True
        )
        fake.utils.calls.clear()
        encoded.clear()
        theirs = nvdriver.make_tensordesc_arg(desc, meta, None)
        ours = td.expand("d", record, desc)
        (call,) = fake.utils.calls
        (p,) = encoded
        sig = f"tensordesc_im2col<{kdtype}[{', '.join(map(str, block))}],input_rank={len(shape)},{layout!r}>"
        out["cases"][name] = {
            "slots": list(record.slots),
            "their_slots": [
                "tensormap" if s == "nvTmaDesc" else s for s in expand_signature([sig], [meta], "nvTmaDesc")
            ],
            "theirs": {"encode": _as_c_encodes(call), "after_map": [int(v) for v in theirs[1:]], "map": theirs[0]},
            "ours": {
                "encode": {
                    "data_type": p.data_type,
                    "rank": p.rank,
                    "address": p.address,
                    "global_dim": list(p.global_dim),
                    "global_strides": list(p.global_strides),
                    "lower": list(p.pixel_box_lower_corner),
                    "upper": list(p.pixel_box_upper_corner),
                    "channels_per_pixel": p.channels_per_pixel,
                    "pixels_per_column": p.pixels_per_column,
                    "element_strides": list(p.element_strides),
                    "swizzle": p.swizzle,
                    "oob_fill": p.oob_fill,
                },
                "after_map": [int(v) for v in ours[1:]],
                "map": "MAP" if ours[0] == bytes(128) else "?",
                "fixed": [p.interleave, p.l2_promotion],
            },
        }
    return out


if __name__ == "__main__":
    json.dump(main(), sys.stdout, indent=1)
    sys.stdout.write("\n")
