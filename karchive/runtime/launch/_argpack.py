"""The kernel parameter buffer: one ``struct`` layout per variant, allocated once, re-packed per launch.

``cuLaunchKernel`` takes ``void** kernelParams``: an array of pointers, one per binary parameter, each
pointing at that parameter's bytes. We allocate one aligned byte buffer holding every parameter slot
and the pointer array once; a launch then costs a single ``Struct.pack_into`` over the user
parameters (pointers and scalars) and no allocation at all. Scratch pointers live in trailing slots
written only when they change.

Scalars are packed exactly as the binary takes them: ``i1``/``i8`` one byte, ``fp16`` and ``bf16`` two
bytes. ``bf16`` follows Triton's own launcher (``extractBF16`` in triton/backends/nvidia/driver.c):
the Python float is rounded to fp32 (round-to-nearest-even) and the high 16 bits are kept, i.e. the
fp32 -> bf16 step truncates. Porting a call site therefore never changes the bits a kernel sees.
``fp16`` uses IEEE round-to-nearest-even (as Triton, via ``PyFloat_Pack2``). Out-of-range values
raise :class:`ArgumentError` naming the parameter instead of wrapping silently.
"""

from __future__ import annotations

import ctypes
import math
import struct
from collections.abc import Sequence
from typing import Any, cast

from ...errors import ArgumentError, LaunchError
from ...format.dtypes import FLOAT_TYPES, INT_RANGES
from ...format.manifest import Abi, AbiParam
from ..descriptors import slot_formats

#: struct format characters per Triton scalar type (pointers are "Q").
SCALAR_FORMATS: dict[str, str] = {
    "i1": "b",
    "i8": "b",
    "i16": "h",
    "i32": "i",
    "i64": "q",
    "u1": "B",
    "u8": "B",
    "u16": "H",
    "u32": "I",
    "u64": "Q",
    "fp16": "e",
    "bf16": "H",
    "fp32": "f",
    "fp64": "d",
}

#: How the compiled launcher writes each ABI parameter: the struct format character of the scalar,
#: "P" for a device address, "E" for bf16 made as Triton makes it (see :func:`bf16_bits`), "Z" for a
#: scratch slot that stays null. One character per parameter, so both launch paths read one table.
POINTER_CODE, BF16_CODE, NULL_CODE = "P", "E", "Z"


def pack_code(kind: str, typ: str | None) -> str:
    """The compiled launcher's code for one ABI parameter (``kind`` and ``type`` as in the manifest's ABI)."""
    if kind == "pointer":
        return POINTER_CODE
    if kind != "scalar":
        return NULL_CODE
    return BF16_CODE if typ == "bf16" else SCALAR_FORMATS[str(typ)]


def _struct_char(p: AbiParam) -> str:
    """The struct format character of a user (pointer or scalar) parameter."""
    # A scalar's type is never None: AbiParam.from_json refuses a pointer/scalar parameter without one.
    return "Q" if p.kind == "pointer" else SCALAR_FORMATS[cast(str, p.type)]


_F32 = struct.Struct("<f")
_U32 = struct.Struct("<I")


def bf16_bits(value: Any) -> int:
    """Bits of ``value`` as bf16 exactly as Triton's launcher makes them (fp32 RNE, then keep the top half)."""
    return _U32.unpack(_F32.pack(float(value)))[0] >> 16


def bf16_bits_rne(value: Any) -> int:
    """Round-to-nearest-even bf16 bits (what ``torch.tensor(x, dtype=torch.bfloat16)`` stores); for reference."""
    bits = _U32.unpack(_F32.pack(float(value)))[0]
    if math.isnan(float(value)):
        return (bits >> 16) | 0x40
    return (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16


class ParamLayout:
    """One parameter buffer for one variant's ABI. Not thread-safe: each thread/launcher owns one. Its errors
    name the kernel by the binary's entry point (the layout is not told the archive's kernel name;
    :class:`~._record.LaunchEntry` re-raises them with it)."""

    __slots__ = (
        "abi",
        "names",
        "types",
        "offsets",
        "size",
        "buffer",
        "pointers",
        "kernel_params",
        "struct",
        "pack_into",
        "n_user",
        "scratch_offsets",
        "_keep",
        "n_values",
        "param_offsets",
    )

    def __init__(self, abi: Abi) -> None:
        self.abi = abi
        user = [p for p in abi.params if p.kind in ("pointer", "scalar", "tensordesc")]
        self.n_user = len(user)
        if list(abi.params[: self.n_user]) != user:
            raise LaunchError(
                f"{abi.entry}: scratch parameters must follow the kernel's own parameters in ABI v1", kernel=abi.entry
            )
        fmt = ["<"]
        offsets: list[int] = []  # per ABI parameter: its (first) binary parameter's offset
        slot_offsets: list[int] = []  # per binary parameter (a tensor descriptor is several)
        offset = 0
        align_to = 8
        for i, p in enumerate(abi.params):
            # (struct format, size, alignment) of each binary parameter this ABI parameter becomes
            slots = slot_formats(p.desc) if p.desc is not None else [(None, p.size, p.size)]
            for j, (char, size, align) in enumerate(slots):
                pad = (-offset) % align
                if pad and i < self.n_user:
                    fmt.append(f"{pad}x")
                offset += pad
                align_to = max(align_to, align)
                if j == 0:
                    offsets.append(offset)
                slot_offsets.append(offset)
                if i < self.n_user:
                    fmt.append(char if char is not None else _struct_char(p))
                offset += size
        self.names = tuple(p.name for p in user)
        self.types = tuple(p.type for p in user)
        self.offsets = tuple(offsets)
        #: Per binary parameter (the kernelParams entries; a descriptor is several): its byte offset.
        self.param_offsets = tuple(slot_offsets)
        self.size = max(offset, 8)
        words = (self.size + 7) // 8
        if align_to > 8:  # a CUtensorMap slot: the buffer itself 64-byte aligned, as the driver reads it
            raw = (ctypes.c_uint64 * (words + align_to // 8))()
            base = ctypes.addressof(raw) + (-ctypes.addressof(raw)) % align_to
            self.buffer = (ctypes.c_uint64 * words).from_address(base)
            keep: Any = raw
        else:
            self.buffer = (ctypes.c_uint64 * words)()
            keep = None
        base = ctypes.addressof(self.buffer)
        count = max(len(slot_offsets), 1)
        addresses: list[int | None] = [base + o for o in slot_offsets] or [None]
        self.pointers = (ctypes.c_void_p * count)(*addresses)
        self.kernel_params = ctypes.addressof(self.pointers) if abi.params else 0
        self.struct = struct.Struct("".join(fmt))
        self.pack_into = self.struct.pack_into
        #: How many values a pack takes (a tensor descriptor's expansion counts one per binary parameter).
        self.n_values = len(self.struct.unpack(bytes(self.struct.size)))
        self.scratch_offsets = {p.kind: offsets[i] for i, p in enumerate(abi.params) if i >= self.n_user}
        self._keep = (self.buffer, self.pointers, keep)

    def pack(self, values: Sequence[Any]) -> None:
        """Pack user parameter values (ABI order; pointers as ints, bf16 as bits); errors name the parameter."""
        try:
            self.pack_into(self.buffer, 0, *values)
        except (struct.error, OverflowError, TypeError) as exc:
            raise self.explain(values, exc) from None

    def replace(self, values: Sequence[Any]) -> None:
        """Like :meth:`pack_into` the user parameters, but all or nothing (a bound launcher keeps its values
        when new ones do not pack); raises what ``struct`` raises."""
        packed = self.struct.pack(*values)
        ctypes.memmove(self.buffer, packed, len(packed))

    def set_scratch(self, kind: str, address: int) -> None:
        struct.pack_into("<Q", self.buffer, self.scratch_offsets[kind], address)

    def set_one(self, index: int, value: Any) -> None:
        """Re-pack a single user parameter in place (the bound launcher's ``set``)."""
        p = self.abi.params[index]
        fmt = "<" + _struct_char(p)
        if p.type == "bf16":
            value = bf16_bits(value)
        try:
            struct.pack_into(fmt, self.buffer, self.offsets[index], value)
        except (struct.error, OverflowError, TypeError) as exc:
            raise ArgumentError(self._why(index, value, exc), kernel=self.abi.entry, param=p.name) from None

    def explain(self, values: Sequence[Any], exc: BaseException | None) -> ArgumentError:
        if len(values) != self.n_user or self.n_values != self.n_user:  # (descriptors: expanded values)
            return ArgumentError(
                f"{self.abi.entry}: {len(values)} values for {self.n_user} parameters {list(self.names)}: {exc}",
                kernel=self.abi.entry,
                param=None,
            )  # the call as a whole
        for i, value in enumerate(values):
            p = self.abi.params[i]
            fmt = "<" + _struct_char(p)
            try:
                struct.pack(fmt, value)
            except (struct.error, OverflowError, TypeError) as err:
                return ArgumentError(self._why(i, value, err), kernel=self.abi.entry, param=p.name)
        return ArgumentError(f"{self.abi.entry}: could not pack parameters: {exc}", kernel=self.abi.entry, param=None)

    def _why(self, index: int, value: Any, exc: BaseException) -> str:
        p = self.abi.params[index]
        if p.kind == "pointer":
            return f"parameter {p.name!r} ({p.type}): {value!r} is not a device address (expected an int in [0, 2**64))"
        if p.type in INT_RANGES:
            lo, hi = INT_RANGES[p.type]
            if isinstance(value, int) and not isinstance(value, bool):
                return f"parameter {p.name!r} ({p.type}): {value} is out of range [{lo}, {hi}]"
            return f"parameter {p.name!r} ({p.type}): expected an integer, got {type(value).__name__} {value!r}"
        if p.type in FLOAT_TYPES:
            if isinstance(value, (int, float)):
                return f"parameter {p.name!r} ({p.type}): {value!r} does not fit {p.type} ({exc})"
            return f"parameter {p.name!r} ({p.type}): expected a number, got {type(value).__name__}"
        return f"parameter {p.name!r} ({p.type}): {exc}"
