"""Triton's element and scalar type names, and what the launch ABI knows about each (one table).

The producer checks signatures against these names, the manifest parser checks ABI parameters, the
runtime packs scalars by them and checks ranges, the JAX bridge maps them onto XLA types.
"""

from __future__ import annotations

#: Scalar parameter types and their byte width as the binary takes them (launch ABI v1, spec/FORMAT.md §6.2).
SCALAR_SIZES: dict[str, int] = {
    "i1": 1,
    "i8": 1,
    "i16": 2,
    "i32": 4,
    "i64": 8,
    "u1": 1,
    "u8": 1,
    "u16": 2,
    "u32": 4,
    "u64": 8,
    "fp16": 2,
    "bf16": 2,
    "fp32": 4,
    "fp64": 8,
}
#: Element types a pointer parameter may point at (``*fp32``, ``*fp8e4nv``, ...).
POINTER_ELEMENT_TYPES = frozenset(
    [
        "i1",
        "i8",
        "i16",
        "i32",
        "i64",
        "u1",
        "u8",
        "u16",
        "u32",
        "u64",
        "fp16",
        "bf16",
        "fp32",
        "fp64",
        "fp8e4nv",
        "fp8e5",
        "fp8e4b15",
        "fp8e4b8",
        "fp8e5b16",
        "fp8e8m0",
        "fp4",
    ]
)
FLOAT_TYPES = frozenset({"fp16", "bf16", "fp32", "fp64"})
#: Inclusive value ranges of the integer scalar types. ``i1``/``u1`` travel as a byte (Triton's launcher
#: packs bools as ``int8``), so their range is the byte's.
INT_RANGES: dict[str, tuple[int, int]] = {
    "i1": (-128, 127),
    "i8": (-128, 127),
    "i16": (-(1 << 15), (1 << 15) - 1),
    "i32": (-(1 << 31), (1 << 31) - 1),
    "i64": (-(1 << 63), (1 << 63) - 1),
    "u1": (0, 255),
    "u8": (0, 255),
    "u16": (0, (1 << 16) - 1),
    "u32": (0, (1 << 32) - 1),
    "u64": (0, (1 << 64) - 1),
}
