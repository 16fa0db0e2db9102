"""Map the dtype objects of torch, NumPy/CuPy/JAX, ``__cuda_array_interface__`` and DLPack to Triton's names.

The hot path keys its cache on the framework's own dtype object (cheap to get, hashable); only a cache
miss turns it into a Triton name ("fp32", "bf16", ...) to compare with a variant's signature.
"""

from __future__ import annotations

from typing import Any

from ..format.dtypes import POINTER_ELEMENT_TYPES

#: Triton element type names by the framework's short dtype name (torch, NumPy, ml_dtypes, JAX).
_BY_NAME: dict[str, str] = {
    "bool": "i1",
    "bool_": "i1",
    "int8": "i8",
    "int16": "i16",
    "int32": "i32",
    "int64": "i64",
    "uint8": "u8",
    "uint16": "u16",
    "uint32": "u32",
    "uint64": "u64",
    "float16": "fp16",
    "half": "fp16",
    "bfloat16": "bf16",
    "float32": "fp32",
    "float": "fp32",
    "float64": "fp64",
    "double": "fp64",
    "float8_e4m3fn": "fp8e4nv",
    "float8_e5m2": "fp8e5",
    "float8_e4m3fnuz": "fp8e4b8",
    "float8_e5m2fnuz": "fp8e5b16",
    "float8_e8m0fnu": "fp8e8m0",
    "float4_e2m1fn_x2": "fp4",
    # ml_dtypes' name of Triton's fp8e4b15 (4 exponent bits, bias 11, no infinities)
    "float8_e4m3b11fnuz": "fp8e4b15",
}
#: Triton's own names, as ``triton.language`` dtypes print them (``tl.float16`` -> "fp16"): a base tensor
#: that already speaks Triton (Triton's MockTensor, a descriptor's base) needs no translation.
_TRITON_NAMES = POINTER_ELEMENT_TYPES  # the element types a pointer parameter names (format/dtypes)

#: ``__cuda_array_interface__`` typestr (without byte order) to Triton names.
_BY_TYPESTR: dict[str, str] = {
    "b1": "i1",
    "i1": "i8",
    "i2": "i16",
    "i4": "i32",
    "i8": "i64",
    "u1": "u8",
    "u2": "u16",
    "u4": "u32",
    "u8": "u64",
    "f2": "fp16",
    "f4": "fp32",
    "f8": "fp64",
}

#: DLPack (type code, bits) to Triton names; codes from dlpack.h (kDLInt=0, kDLUInt=1, kDLFloat=2,
#: kDLBfloat=4, kDLBool=6, kDLFloat8_e4m3fn=10, kDLFloat8_e5m2=12).
_BY_DLPACK: dict[tuple[int, int], str] = {
    (0, 8): "i8",
    (0, 16): "i16",
    (0, 32): "i32",
    (0, 64): "i64",
    (1, 8): "u8",
    (1, 16): "u16",
    (1, 32): "u32",
    (1, 64): "u64",
    (2, 16): "fp16",
    (2, 32): "fp32",
    (2, 64): "fp64",
    (4, 16): "bf16",
    (6, 8): "i1",
    (1, 1): "i1",
    (10, 8): "fp8e4nv",
    (12, 8): "fp8e5",
    # dlpack.h (v1.1): kDLFloat8_e4m3b11fnuz=9, kDLFloat8_e4m3fnuz=11, kDLFloat8_e5m2fnuz=13, kDLFloat8_e8m0fnu=14
    (9, 8): "fp8e4b15",
    (11, 8): "fp8e4b8",
    (13, 8): "fp8e5b16",
    (14, 8): "fp8e8m0",
}


class DLPackDtype(tuple):
    """(code, bits, lanes) of a DLPack tensor, tagged so it is not confused with other tuples."""


class TritonDtype(str):
    """A Triton element type name (``"fp16"``, ``"i8"``), tagged so it is never read as a
    ``__cuda_array_interface__`` typestr (where ``"i8"`` is int64)."""

    __slots__ = ()


def element_type(dtype: Any) -> TritonDtype | None:
    """What a caller's ``dtype=`` names, as a :class:`TritonDtype`: Triton's own names first (``"fp16"``,
    ``"fp8e4nv"``, ``"i8"`` = int8), then framework names and objects (``"float16"``, ``torch.float16``) and
    typestrs (``"<f2"``); None when it names none of them."""
    if isinstance(dtype, str) and dtype in _TRITON_NAMES:
        return TritonDtype(dtype)
    name = triton_dtype(dtype)
    return None if name is None else TritonDtype(name)


def triton_dtype(dtype: Any) -> str | None:
    """Triton's element type name for a framework dtype, or None when unknown (then no check is made)."""
    if dtype is None:
        return None
    if type(dtype) is TritonDtype:
        return str(dtype)
    if isinstance(dtype, DLPackDtype):
        code, bits, lanes = dtype
        return _BY_DLPACK.get((code, bits)) if lanes == 1 else None
    if isinstance(dtype, str):
        if len(dtype) >= 2 and dtype[0] in "<>|=" and dtype[1:] in _BY_TYPESTR:
            return _BY_TYPESTR[dtype[1:]]
        if dtype in _BY_TYPESTR:
            return _BY_TYPESTR[dtype]
        return _BY_NAME.get(dtype.rsplit(".", 1)[-1])
    name = getattr(dtype, "name", None)  # NumPy / CuPy / JAX dtypes
    if isinstance(name, str) and name in _BY_NAME:
        return _BY_NAME[name]
    text = str(dtype).rsplit(".", 1)[-1]  # torch.float32 -> "float32"
    return _BY_NAME.get(text) or (
        text if text in _TRITON_NAMES and type(dtype).__module__.startswith("triton") else None
    )


def pointer_element(sig_type: str) -> str:
    """``"*fp32"`` / ``"*kfp32"`` (const pointer) -> ``"fp32"``."""
    base = sig_type[1:]
    if base.startswith("k") and base[1:2] in "fiub":
        base = base[1:]
    return base
