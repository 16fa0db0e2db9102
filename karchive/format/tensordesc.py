"""Host tensor-descriptor parameters (``tensordesc<fp16[64, 64]>``) in the launch ABI (spec/FORMAT.md §6.2.1).

Triton passes one host ``TensorDescriptor`` argument to the binary as several parameters, and how many and
which depends on the Triton release that compiled it (its ``make_tensordesc_arg`` / ``expand_signature``)
and on whether the kernel was lowered to TMA (sm_90 and newer: a 128-byte ``CUtensorMap`` by value) or not
(the *decomposed* expansion: base pointer, shape and strides, passed twice). Nothing in a cubin says which
convention it expects, so the producer records it per parameter (:class:`TensorDescAbi`) and a reader
refuses a convention it does not know instead of launching with the wrong parameters.

Conventions, by what they pass (``r`` = the descriptor's rank):

``triton-3.5`` (Triton 3.5 and 3.6)
    tma: ``tensormap, i32 x r (shape; last dimension doubled when fp4_padded), i64 x r (strides)``;
    decomposed: ``*dtype, i64 x r, i64 x r, i1 (padding == "nan"), i32 x r, i64 x r``.
``triton-3.8`` (Triton 3.7, 3.8 and 3.9)
    tma: ``tensormap, i32 x r (shape as given), i64 x r``; the map itself is encoded with the last
    dimension doubled when fp4_padded, with the TF32 element type for ``round_f32_to_tf32`` descriptors,
    and with bit 21 of its second word cleared for tensors under 128 KiB when the driver is 13.1 or older;
    decomposed: ``*dtype, i64 x r, i64 x r, i1 (nan), i1 (round_f32_to_tf32), i32 x r, i64 x r``.

An im2col parameter (Gluon's ``tensordesc_im2col<...,input_rank=N,...>``, Triton 3.8 and 3.9) expands like a tiled
TMA one of the tensor's rank N; only its map differs (``cuTensorMapEncodeIm2col``, from a 2-entry
``[pixels per column, channels per pixel]`` block and the call's pixel box; runtime/descriptors.py).

The names are identifiers stored in archives, not ranges: ``triton-3.8`` was named after the first release
karchive read with it; Triton 3.7.1's launcher was read later and passes descriptors identically (the same
``make_tensordesc_arg`` arithmetic, ``expand_signature`` slots and C ``fillTMADescriptorTiled``, small-tensor
patch included; it differs from 3.8 only in having no im2col maps and no descriptors nested in tuples, which
change nothing for the tiled descriptors it compiles), so it records ``triton-3.8`` and older readers of that
name launch its variants correctly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..core.grammar import whole
from ..errors import SchemaError, UnsupportedVersionError
from .dtypes import POINTER_ELEMENT_TYPES

__all__ = [
    "CONVENTIONS",
    "SLOT_SIZES",
    "TENSORMAP",
    "TensorDescAbi",
    "TensorDescType",
    "convention_for_triton",
    "expansion_slots",
    "parse_tensordesc_type",
    "slot_size",
]

#: The 128-byte ``CUtensorMap`` a TMA kernel takes by value (PTX ``.param .align 64 .b8 p[128]``).
TENSORMAP = "tensormap"
TENSORMAP_SIZE, TENSORMAP_ALIGN = 128, 64
#: Byte sizes of the other slot types (a ``*dtype`` slot is an 8-byte address).
SLOT_SIZES: dict[str, int] = {TENSORMAP: TENSORMAP_SIZE, "i1": 1, "i32": 4, "i64": 8}
#: Conventions this reader knows, and the Triton minors that produce each (informational for readers;
#: producers pick by :func:`convention_for_triton`). A minor is listed only once its launcher has been read
#: (and tests/test_tensordesc_runtime.py compares it with the release's own ``make_tensordesc_arg``).
CONVENTIONS: dict[str, tuple[str, ...]] = {"triton-3.5": ("3.5", "3.6"), "triton-3.8": ("3.7", "3.8", "3.9")}
MODES = ("tma", "decomposed")

_DESC_RE = re.compile(r"tensordesc(_im2col)?<([a-z][a-z0-9]*)\[([0-9,\s]*)\](.*)>")
_RANK_RE = re.compile(r",\s*input_rank\s*=\s*(\d+)")


@dataclass(frozen=True)
class TensorDescType:
    """What a ``tensordesc<...>`` signature type says: element type, block shape, rank, im2col."""

    dtype: str
    block_shape: tuple[int, ...]
    rank: int
    im2col: bool


def parse_tensordesc_type(typ: str) -> TensorDescType | None:
    """``tensordesc<fp16[64, 64]>`` (and Triton 3.9's ``tensordesc_im2col<...,input_rank=4>``), else None."""
    m = whole(_DESC_RE, typ.strip())
    if not m or m.group(2) not in POINTER_ELEMENT_TYPES:
        return None
    try:
        block = tuple(int(x) for x in m.group(3).split(",") if x.strip())
    except ValueError:
        return None
    if not block:
        return None
    rank_m = _RANK_RE.search(m.group(4))  # other annotations after the block do not change the expansion
    rank = int(rank_m.group(1)) if rank_m else len(block)
    if not 1 <= rank <= 5:
        return None
    return TensorDescType(m.group(2), block, rank, m.group(1) is not None)


def convention_for_triton(version: str) -> str | None:
    """The convention a Triton release's launcher follows (None: unknown to karchive, so not recordable)."""
    mm = ".".join(str(version).split(".")[:2])
    for name, minors in CONVENTIONS.items():
        if mm in minors:
            return name
    return None


def expansion_slots(convention: str, mode: str, dtype: str, rank: int) -> tuple[str, ...]:
    """The binary parameters one descriptor becomes under ``convention`` (see the module docstring)."""
    if convention not in CONVENTIONS:
        raise UnsupportedVersionError(
            f"tensor-descriptor convention {convention!r} is unknown to this karchive (known: "
            f"{', '.join(CONVENTIONS)}); upgrade karchive to launch this variant",
            found=convention,
            supported=", ".join(CONVENTIONS),
        )
    tail = ("i32",) * rank + ("i64",) * rank
    if mode == "tma":
        return (TENSORMAP,) + tail
    flags = ("i1",) if convention == "triton-3.5" else ("i1", "i1")
    return ("*" + dtype,) + ("i64",) * (2 * rank) + flags + tail


def slot_size(slot: str) -> int:
    return 8 if slot.startswith("*") else SLOT_SIZES[slot]


@dataclass(frozen=True)
class TensorDescAbi:
    """One descriptor parameter's expansion: the ``tensordesc`` sub-record of an ABI parameter."""

    convention: str
    mode: str  # "tma" | "decomposed"
    dtype: str
    rank: int
    block_shape: tuple[int, ...]  # the compiled block (Triton's metadata block_size; the signature's if none)
    swizzle: int | None = None  # CUtensorMapSwizzle as Triton passes it (tma only)
    elem_size: int | None = None
    elem_type: int | None = None  # Triton's *device-side* TMA dtype enum (tma only)
    fp4_padded: bool = False
    im2col: bool = False

    @property
    def slots(self) -> tuple[str, ...]:
        return expansion_slots(self.convention, self.mode, self.dtype, self.rank)

    @property
    def size(self) -> int:
        return sum(slot_size(s) for s in self.slots)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "convention": self.convention,
            "mode": self.mode,
            "dtype": self.dtype,
            "rank": self.rank,
            "block_shape": list(self.block_shape),
        }
        if self.mode == "tma":
            out.update(
                swizzle=self.swizzle,
                elem_size=self.elem_size,
                elem_type=self.elem_type,
                fp4_padded=self.fp4_padded,
                im2col=self.im2col,
            )
        out["slots"] = list(self.slots)
        return out

    @classmethod
    def from_json(cls, obj: Any, where: str) -> TensorDescAbi:
        if not isinstance(obj, dict):
            raise SchemaError(f"{where}: the tensordesc record must be an object", where=where)
        conv = obj.get("convention")
        if not isinstance(conv, str):
            raise SchemaError(f"{where}.convention: a string is required", where=f"{where}.convention")
        if conv not in CONVENTIONS:
            raise UnsupportedVersionError(
                f"{where}: tensor-descriptor convention {conv!r} is unknown to this karchive (known: "
                f"{', '.join(CONVENTIONS)}); this variant cannot be launched correctly, upgrade karchive",
                found=conv,
                supported=", ".join(CONVENTIONS),
            )
        mode, dtype, rank, block = obj.get("mode"), obj.get("dtype"), obj.get("rank"), obj.get("block_shape")
        if mode not in MODES:
            raise SchemaError(f"{where}.mode: {mode!r} is not one of {MODES}", where=f"{where}.mode")
        if dtype not in POINTER_ELEMENT_TYPES:
            raise SchemaError(f"{where}.dtype: unknown element type {dtype!r}", where=f"{where}.dtype")
        if type(rank) is not int or not 1 <= rank <= 5:
            raise SchemaError(f"{where}.rank: an int in [1, 5] is required", where=f"{where}.rank")
        if (
            not isinstance(block, list)
            or not block
            or len(block) > 5
            or not all(type(b) is int and 0 < b <= 1 << 16 for b in block)
        ):
            raise SchemaError(f"{where}.block_shape: 1 to 5 positive ints are required", where=f"{where}.block_shape")
        fields: dict[str, Any] = {}
        if mode == "tma":
            for name in ("swizzle", "elem_size", "elem_type"):
                v = obj.get(name)
                if type(v) is not int or not 0 <= v <= 64:
                    raise SchemaError(f"{where}.{name}: a small non-negative int is required", where=f"{where}.{name}")
                fields[name] = v
            for name in ("fp4_padded", "im2col"):
                v = obj.get(name, False)
                if type(v) is not bool:
                    raise SchemaError(f"{where}.{name}: a boolean is required", where=f"{where}.{name}")
                fields[name] = v
        if fields.get("im2col") and (not 3 <= rank <= 5 or len(block) != 2):
            # cuTensorMapEncodeIm2col: a rank 3-5 tensor, a [pixels per column, channels per pixel] box
            raise SchemaError(
                f"{where}: an im2col map needs rank 3 to 5 and a 2-entry block_shape (pixels per "
                f"column, channels per pixel), got rank {rank} and {block}",
                where=where,
            )
        rec = cls(conv, mode, dtype, rank, tuple(block), **fields)
        if obj.get("slots") is not None and obj.get("slots") != list(rec.slots):
            raise SchemaError(
                f"{where}.slots: {obj.get('slots')!r} disagrees with convention {conv!r}, which "
                f"passes {list(rec.slots)}; refusing a variant it would launch wrongly",
                where=f"{where}.slots",
            )
        return rec
