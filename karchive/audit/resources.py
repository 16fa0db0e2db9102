"""Registers, spills and stack a binary records for its entry point, read from the binary itself.

Triton does not store them in its metadata (it asks the driver at load time), but both binary
formats carry them, so an audit needs no GPU:

* CUDA cubin (ELF): the ``.nv.info`` section lists per-function attributes
  ``EIATTR_REGCOUNT`` (0x2f) and ``EIATTR_FRAME_SIZE`` (0x11) for the function's symbol index, the
  numbers ``cuobjdump --dump-resource-usage`` prints as ``REG`` and ``STACK``. The stack frame is
  where ptxas puts spilled registers; the spill byte counts themselves are not in the cubin.
* AMD hsaco (ELF): the ``NT_AMDGPU_METADATA`` note (MessagePack, LLVM's AMDGPUUsage "Code Object V3+
  Metadata") gives ``.vgpr_count``, ``.sgpr_count``, ``.agpr_count``, ``.vgpr_spill_count``,
  ``.sgpr_spill_count`` and ``.private_segment_fixed_size`` per kernel.

Binaries are untrusted: every offset is bounds-checked, and anything unexpected yields no numbers
(an empty dict) rather than an error — resources are extra facts in a diff, never a reason to fail.
"""

from __future__ import annotations

import struct
from typing import Any

__all__ = ["cubin_resources", "hsaco_resources", "recorded_resources"]

_EIATTR_FRAME_SIZE = 0x11
_EIATTR_REGCOUNT = 0x2F
_EIFMT_SVAL = 4
_SHT_SYMTAB, _SHT_NOTE = 2, 7
_NT_AMDGPU_METADATA = 32


class _Bad(Exception):
    """The bytes are not what the parser expects; the caller gives up quietly."""


def _unpack(fmt: str, data: bytes, offset: int) -> tuple:
    if offset < 0 or offset + struct.calcsize(fmt) > len(data):
        raise _Bad
    return struct.unpack_from(fmt, data, offset)


def _sections(data: bytes) -> list[tuple[str, int, int, int, int, int]]:
    """(name, type, offset, size, link, info) of each section of a little-endian ELF64 file."""
    if data[:4] != b"\x7fELF" or len(data) < 64 or data[4] != 2 or data[5] != 1:
        raise _Bad
    (shoff,) = _unpack("<Q", data, 0x28)
    shentsize, shnum, shstrndx = _unpack("<HHH", data, 0x3A)
    if shentsize != 64 or shnum > 4096 or shstrndx >= shnum:
        raise _Bad
    raw = [_unpack("<IIQQQQIIQQ", data, shoff + i * 64) for i in range(shnum)]
    for r in raw:
        if r[1] != 8 and r[4] + r[5] > len(data):  # SHT_NOBITS (8) occupies no bytes
            raise _Bad
    names = raw[shstrndx]

    def name(off: int) -> str:
        start = names[4] + off
        end = data.find(b"\0", start, names[4] + names[5])
        if off >= names[5] or end < 0:
            raise _Bad
        return data[start:end].decode("ascii", errors="replace")

    return [(name(r[0]), r[1], r[4], r[5], r[6], r[7]) for r in raw]


def _symbol_index(data: bytes, sections: list, entry: str) -> int | None:
    for _, typ, off, size, link, _ in sections:
        if typ != _SHT_SYMTAB or link >= len(sections):
            continue
        str_off, str_size = sections[link][2], sections[link][3]
        for i in range(size // 24):
            (st_name,) = _unpack("<I", data, off + i * 24)
            end = data.find(b"\0", str_off + st_name, str_off + str_size)
            if st_name < str_size and end >= 0 and data[str_off + st_name : end] == entry.encode():
                return i
    return None


def cubin_resources(data: bytes, entry: str) -> dict[str, int]:
    """``{"registers": n, "stack": bytes}`` for ``entry`` in a cubin; empty if not found."""
    try:
        sections = _sections(data)
        index = _symbol_index(data, sections, entry)
        if index is None:
            return {}
        found: dict[str, int] = {}
        for name, _, off, size, _, _ in sections:
            if name != ".nv.info":
                continue
            pos, end = off, off + size
            while pos + 4 <= end:
                fmt, attr, length = _unpack("<BBH", data, pos)
                if fmt != _EIFMT_SVAL:  # the other formats carry their value in `length` and are 4 bytes
                    pos += 4
                    continue
                if pos + 4 + length > end:
                    raise _Bad
                if length == 8:
                    sym, value = _unpack("<II", data, pos + 4)
                    if sym == index and attr == _EIATTR_REGCOUNT:
                        found["registers"] = value
                    elif sym == index and attr == _EIATTR_FRAME_SIZE:
                        found["stack"] = value
                pos += 4 + length
        return found
    except _Bad:
        return {}


# -- AMD: the code object metadata note ------------------------------------------------------------
class _MsgPack:
    """A bounded reader for the MessagePack subset code object metadata uses (no extension types)."""

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise _Bad
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def uint(self, n: int) -> int:
        return int.from_bytes(self.take(n), "big")

    def value(self, depth: int = 0) -> Any:
        if depth > 16:
            raise _Bad
        b = self.uint(1)
        if b <= 0x7F:
            return b
        if b >= 0xE0:
            return b - 0x100
        if 0x80 <= b <= 0x8F:
            return self.map(b & 0x0F, depth)
        if 0x90 <= b <= 0x9F:
            return self.array(b & 0x0F, depth)
        if 0xA0 <= b <= 0xBF:
            return self.take(b & 0x1F).decode("utf-8", errors="replace")
        simple = {0xC0: None, 0xC2: False, 0xC3: True}
        if b in simple:
            return simple[b]
        if b in (0xC4, 0xC5, 0xC6):  # bin 8/16/32
            return self.take(self.uint(1 << (b - 0xC4)))
        if b in (0xCA, 0xCB):
            return struct.unpack(">f" if b == 0xCA else ">d", self.take(4 if b == 0xCA else 8))[0]
        if 0xCC <= b <= 0xCF:  # uint 8/16/32/64
            return self.uint(1 << (b - 0xCC))
        if 0xD0 <= b <= 0xD3:  # int 8/16/32/64
            return int.from_bytes(self.take(1 << (b - 0xD0)), "big", signed=True)
        if b in (0xD9, 0xDA, 0xDB):  # str 8/16/32
            return self.take(self.uint(1 << (b - 0xD9))).decode("utf-8", errors="replace")
        if b in (0xDC, 0xDD):
            return self.array(self.uint(2 if b == 0xDC else 4), depth)
        if b in (0xDE, 0xDF):
            return self.map(self.uint(2 if b == 0xDE else 4), depth)
        raise _Bad  # extension types: not used by code object metadata

    def array(self, n: int, depth: int) -> list:
        if n > len(self.data) - self.pos:  # every element takes at least one byte
            raise _Bad
        return [self.value(depth + 1) for _ in range(n)]

    def map(self, n: int, depth: int) -> dict:
        if 2 * n > len(self.data) - self.pos:
            raise _Bad
        out = {}
        for _ in range(n):
            k = self.value(depth + 1)
            out[k if isinstance(k, str) else repr(k)] = self.value(depth + 1)
        return out


_AMD_FIELDS = {
    ".vgpr_count": "registers.vgpr",
    ".sgpr_count": "registers.sgpr",
    ".agpr_count": "registers.agpr",
    ".vgpr_spill_count": "spills.vgpr",
    ".sgpr_spill_count": "spills.sgpr",
    ".private_segment_fixed_size": "stack",
}


def hsaco_resources(data: bytes, entry: str) -> dict[str, int]:
    """Registers (VGPR/SGPR/AGPR), spill counts and private segment (stack) bytes of ``entry``."""
    try:
        for _, typ, off, size, _, _ in _sections(data):
            if typ != _SHT_NOTE:
                continue
            pos, end = off, off + size
            while pos + 12 <= end:
                namesz, descsz, ntype = _unpack("<III", data, pos)
                name_end = pos + 12 + ((namesz + 3) & ~3)
                desc_end = name_end + ((descsz + 3) & ~3)
                if desc_end > end:
                    raise _Bad
                if ntype == _NT_AMDGPU_METADATA and data[pos + 12 : pos + 12 + namesz].rstrip(b"\0") == b"AMDGPU":
                    meta = _MsgPack(data[name_end : name_end + descsz]).value()
                    for kernel in (meta.get("amdhsa.kernels") or []) if isinstance(meta, dict) else []:
                        if isinstance(kernel, dict) and kernel.get(".name") == entry:
                            return {
                                out: kernel[k]
                                for k, out in _AMD_FIELDS.items()
                                if isinstance(kernel.get(k), int) and not isinstance(kernel.get(k), bool)
                            }
                pos = desc_end
        return {}
    except _Bad:
        return {}


def recorded_resources(variant: dict, binary: bytes) -> dict[str, int]:
    """What the variant's binary records about its entry point (see the module docstring)."""
    abi = variant.get("abi") or {}
    entry = abi.get("entry")
    if not isinstance(entry, str):
        return {}
    if abi.get("binary_format") == "cubin":
        return cubin_resources(binary, entry)
    if abi.get("binary_format") == "hsaco":
        return hsaco_resources(binary, entry)
    return {}
