"""Run under one Triton release's interpreter: that release's own launcher against karchive's expansion.

    <venv>/bin/python tests/data/tensordesc_launcher_probe.py     # (PYTHONPATH = the checkout) -> JSON on stdout

For each case (a host descriptor and the compile metadata a kernel would carry) it calls the release's
``make_tensordesc_arg`` with a recording ``fill_tma_descriptor[_tiled]`` in place of the C encoder, and
karchive's :func:`karchive.runtime.descriptors.expand` for the convention karchive assigns to that release
(with ``encode_tiled`` recorded instead of called). It prints both sides in one form, for
tests/test_tensordesc_runtime.py to compare: the ``cuTensorMapEncodeTiled`` arguments the release's C
``fillTMADescriptorTiled`` derives from what it was given (innermost dimension first, byte strides; its
fixed interleave, L2 promotion and element strides are asserted against karchive's there), and the values
passed after the map, or the whole decomposed expansion. No GPU, no torch: the tensors are stand-ins.
"""

from __future__ import annotations

import inspect
import json
import sys
from typing import Any


class FakeDtype:
    """A torch dtype as Triton's descriptor and karchive read it (``str()``, ``itemsize``, floating)."""

    def __init__(self, name: str, itemsize: int, floating: bool) -> None:
        self.name, self.itemsize, self.is_floating_point = name, itemsize, floating

    def __str__(self) -> str:
        return f"torch.{self.name}"


class FakeTensor:  # the class name Triton's descriptor accepts without a real allocation
    def __init__(self, ptr: int, shape: list[int], dtype: FakeDtype, strides: list[int]) -> None:
        self.ptr, self.shape, self.dtype, self._strides = ptr, tuple(shape), dtype, tuple(strides)

    def data_ptr(self) -> int:
        return self.ptr

    def stride(self) -> tuple[int, ...]:
        return self._strides

    def get_device(self) -> int:
        return 0


FP16, BF16, FP32, U8 = (
    FakeDtype("float16", 2, True),
    FakeDtype("bfloat16", 2, True),
    FakeDtype("float32", 4, True),
    FakeDtype("uint8", 1, False),
)
#: name, karchive dtype, tensor dtype, shape, strides, block, padding, tf32, tensordesc_meta (None: decomposed)
CASES: list[tuple[str, str, FakeDtype, list[int], list[int], list[int], str, bool, dict | None]] = [
    (
        "fp16-2d",
        "fp16",
        FP16,
        [256, 128],
        [128, 1],
        [64, 64],
        "zero",
        False,
        {"swizzle": 3, "elem_size": 2, "elem_type": 6, "block_size": [64, 64], "fp4_padded": False},
    ),
    (
        "bf16-3d-nan",
        "bf16",
        BF16,
        [8, 96, 64],
        [96 * 64, 64, 1],
        [2, 32, 64],
        "nan",
        False,
        {"swizzle": 2, "elem_size": 2, "elem_type": 10, "block_size": [2, 32, 64], "fp4_padded": False},
    ),
    (
        "fp4-padded",
        "u8",
        U8,
        [64, 32],
        [32, 1],
        [64, 64],
        "zero",
        False,
        {"swizzle": 3, "elem_size": 1, "elem_type": 0, "block_size": [64, 64], "fp4_padded": True},
    ),
    (
        "fp32-tf32",
        "fp32",
        FP32,
        [128, 64],
        [64, 1],
        [32, 32],
        "zero",
        True,
        {"swizzle": 3, "elem_size": 4, "elem_type": 7, "block_size": [32, 32], "fp4_padded": False},
    ),
    ("fp16-2d-decomposed", "fp16", FP16, [256, 128], [128, 1], [64, 64], "zero", False, None),
    ("bf16-3d-nan-decomposed", "bf16", BF16, [8, 96, 64], [96 * 64, 64, 1], [2, 32, 64], "nan", False, None),
    ("fp32-tf32-decomposed", "fp32", FP32, [128, 64], [64, 1], [32, 32], "zero", True, None),
]


class _Utils:
    """The launcher's C utilities, recording what the release asks its encoder for."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def _fill(self, *args: Any) -> str:
        self.calls.append(args)
        return "MAP"

    fill_tma_descriptor = fill_tma_descriptor_tiled = _fill  # 3.5/3.6 name; 3.7+ name


class _Driver:
    def __init__(self) -> None:
        self.utils = _Utils()


def _as_c_encodes(args: tuple) -> dict:
    """What the release's C ``fillTMADescriptorTiled`` passes to the driver for these arguments (its loops:
    every list reversed, byte strides for all but the innermost dimension; the rest is fixed there)."""
    ptr, swizzle, elem_size, host_type, block, shape, strides, padding = args
    return {
        "data_type": host_type,
        "rank": len(block),
        "address": ptr,
        "global_dim": [int(s) for s in reversed(shape)],
        "global_strides": [int(s) * elem_size for s in reversed(list(strides)[:-1])],
        "box_dim": [int(b) for b in reversed(block)],
        "swizzle": swizzle,
        "oob_fill": padding,
    }


def _their_slots(nvdriver: Any, sig: str, meta: dict | None) -> list[str] | None:
    """The release's own ``expand_signature`` for one descriptor parameter (None where it is not reachable:
    3.5/3.6 define it inside ``make_launcher``), with its ``nvTmaDesc`` named as karchive names it."""
    try:
        from triton.backends.driver import expand_signature as shared  # 3.8+
    except ImportError:
        shared = None
    metas = [meta] if meta is not None else None
    if shared is not None:
        slots = shared([sig], metas, "nvTmaDesc")
    elif hasattr(nvdriver, "expand_signature"):  # 3.7
        slots = nvdriver.expand_signature([sig], metas)
    else:
        return None
    return ["tensormap" if s == "nvTmaDesc" else s for s in slots]


def main() -> dict:
    import triton
    from triton.backends.nvidia import driver as nvdriver
    from triton.runtime.driver import driver as active
    from triton.tools.tensor_descriptor import TensorDescriptor as TritonDesc

    import karchive
    from karchive.errors import ArgumentError
    from karchive.format.tensordesc import TensorDescAbi, convention_for_triton
    from karchive.runtime import descriptors as td

    convention = convention_for_triton(triton.__version__)
    out: dict = {"triton": triton.__version__, "convention": convention, "karchive": karchive.__file__, "cases": {}}
    if convention is None:
        return out
    encoded: list[td.EncodeParams] = []

    def recorded_encode(p: td.EncodeParams) -> bytes:  # the driver call itself needs a GPU
        encoded.append(p)
        return bytes(128)

    td.encode_tiled = recorded_encode
    td._driver = lambda: 13020  # a patched driver: the small-tensor bit is the C source's business (other test)
    fake = _Driver()
    active.set_active(fake)
    takes_tf32 = "round_f32_to_tf32" in inspect.signature(TritonDesc).parameters
    extra = [None] * (len(inspect.signature(nvdriver.make_tensordesc_arg).parameters) - 2)  # 3.8+: a 3rd arg
    for name, kdtype, dtype, shape, strides, block, padding, tf32, meta in CASES:
        base = FakeTensor(0x7F0000010000, shape, dtype, strides)
        mode = "decomposed" if meta is None else "tma"
        record = (
            TensorDescAbi(convention, mode, kdtype, len(shape), tuple(block))
            if meta is None
            else TensorDescAbi(
                convention,
                mode,
                kdtype,
                len(shape),
                tuple(meta["block_size"]),
                swizzle=meta["swizzle"],
                elem_size=meta["elem_size"],
                elem_type=meta["elem_type"],
                fp4_padded=meta["fp4_padded"],
            )
        )
        case: dict = {
            "mode": mode,
            "slots": list(record.slots),
            "their_slots": _their_slots(nvdriver, f"tensordesc<{kdtype}[{', '.join(map(str, block))}]>", meta),
        }
        if tf32 and not takes_tf32:  # 3.5/3.6: no such descriptor; karchive must refuse it under their convention
            try:
                td.expand(
                    "d",
                    record,
                    td.TensorDescriptor(
                        base.ptr, block, shape=shape, strides=strides, dtype="fp32", round_f32_to_tf32=True
                    ),
                )
                case["ours_refused"] = False
            except ArgumentError:
                case["ours_refused"] = True
            out["cases"][name] = case
            continue
        kwargs = {"round_f32_to_tf32": True} if tf32 else {}
        desc = TritonDesc(base, shape, strides, block, padding=padding, **kwargs)
        fake.utils.calls.clear()
        encoded.clear()
        theirs = nvdriver.make_tensordesc_arg(desc, meta, *extra)
        ours = td.expand("d", record, desc)
        if meta is None:
            case["theirs"] = [base.ptr if theirs[0] is base else repr(theirs[0])] + [int(v) for v in theirs[1:]]
            case["ours"] = [int(v) for v in ours]
        else:
            (call,) = fake.utils.calls
            (p,) = encoded
            case["theirs"] = {
                "encode": _as_c_encodes(call),
                "after_map": [int(v) for v in theirs[1:]],
                "map": theirs[0],
            }
            case["ours"] = {
                "encode": {
                    "data_type": p.data_type,
                    "rank": p.rank,
                    "address": p.address,
                    "global_dim": list(p.global_dim),
                    "global_strides": list(p.global_strides),
                    "box_dim": list(p.box_dim),
                    "swizzle": p.swizzle,
                    "oob_fill": p.oob_fill,
                },
                "after_map": [int(v) for v in ours[1:]],
                "map": "MAP" if ours[0] == bytes(128) else "?",
                "fixed": [p.interleave, p.l2_promotion, list(p.element_strides)],
            }
        out["cases"][name] = case
    return out


if __name__ == "__main__":
    json.dump(main(), sys.stdout, indent=1)
    sys.stdout.write("\n")
