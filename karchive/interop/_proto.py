"""Just enough protobuf for jaxlib's Triton custom call: encode, splice a field in, read a descriptor.

jaxlib's ``triton_kernel_call`` takes a zlib-compressed ``jax_triton.TritonAnyKernelCall`` message.
Its long-standing fields have fixed numbers (below); fields added later (the precompiled
``module_image``, global scratch) are looked up at run time in the ``FileDescriptorProto`` that
protobuf's C++ code generator embeds in jaxlib's ``_triton`` extension, so karchive never guesses
a field number. No protobuf package is needed.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

# Wire types.
VARINT, I64, LEN, I32 = 0, 1, 2, 5

#: Field numbers of jaxlib/gpu/triton.proto that have not changed since 2023 (num_ctas since 2024).
KERNEL = {
    "kernel_name": 1,
    "num_warps": 2,
    "shared_mem_bytes": 3,
    "ptx": 4,
    "ttir": 5,
    "compute_capability": 6,
    "num_ctas": 10,
}
CALL = {"kernel": 1, "grid_0": 2, "grid_1": 3, "grid_2": 4, "parameters": 5}
PARAM = {"array": 1, "bool_": 2, "i32": 3, "u32": 4, "i64": 5, "u64": 6, "f32": 7, "f64": 8}
ARRAY = {"bytes_to_zero": 1, "ptr_divisibility": 2}
ANY = {"kernel_call": 1, "autotuned_kernel_call": 2, "metadata": 3, "name": 4}


class ProtoError(ValueError):
    """Malformed protobuf bytes (or bytes that are not the message we looked for)."""


# -- encoding ---------------------------------------------------------------------------------------
def varint(n: int) -> bytes:
    """Base-128 varint; negative numbers as 64-bit two's complement (protobuf's int32/int64 rule)."""
    if n < 0:
        n += 1 << 64
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def tag(number: int, wire: int) -> bytes:
    return varint(number << 3 | wire)


def f_varint(number: int, value: int, *, keep_zero: bool = False) -> bytes:
    """A varint field; proto3 omits zeros unless the field has presence (oneof / optional)."""
    if not value and not keep_zero:
        return b""
    return tag(number, VARINT) + varint(int(value))


def f_bytes(number: int, value: bytes, *, keep_empty: bool = False) -> bytes:
    if not value and not keep_empty:
        return b""
    return tag(number, LEN) + varint(len(value)) + value


def f_float(number: int, value: float) -> bytes:
    return tag(number, I32) + struct.pack("<f", value)


def f_double(number: int, value: float) -> bytes:
    return tag(number, I64) + struct.pack("<d", value)


# -- decoding ---------------------------------------------------------------------------------------
def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise ProtoError("truncated or over-long varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


@dataclass(frozen=True)
class Field:
    number: int
    wire: int
    value: int | bytes  # int for VARINT/I32/I64 (raw bits), bytes for LEN
    raw: bytes  # the whole field as encoded (tag included)

    @property
    def data(self) -> bytes:
        """The payload of a length-delimited (LEN) field."""
        if not isinstance(self.value, bytes):
            raise ProtoError(f"field {self.number} is not length-delimited (wire type {self.wire})")
        return self.value

    @property
    def integer(self) -> int:
        """The value of a VARINT, I32 or I64 field (raw bits)."""
        if not isinstance(self.value, int):
            raise ProtoError(f"field {self.number} is length-delimited, not a number")
        return self.value


def iter_fields(buf: bytes, start: int = 0, end: int | None = None, *, strict: bool = True) -> Iterator[Field]:
    """Fields of one message. With ``strict=False`` stops quietly at the first undecodable byte."""
    pos, end = start, len(buf) if end is None else end
    while pos < end:
        begin = pos
        value: int | bytes
        try:
            key, pos = read_varint(buf, pos)
            number, wire = key >> 3, key & 7
            if number == 0:
                raise ProtoError("field number 0")
            if wire == VARINT:
                value, pos = read_varint(buf, pos)
            elif wire == I64:
                value, pos = int.from_bytes(buf[pos : pos + 8], "little"), pos + 8
            elif wire == I32:
                value, pos = int.from_bytes(buf[pos : pos + 4], "little"), pos + 4
            elif wire == LEN:
                n, pos = read_varint(buf, pos)
                if pos + n > end:
                    raise ProtoError("length-delimited field runs past the message")
                value, pos = buf[pos : pos + n], pos + n
            else:
                raise ProtoError(f"unsupported wire type {wire}")
            if pos > end:
                raise ProtoError("field runs past the message")
        except ProtoError:
            if strict:
                raise
            return
        yield Field(number, wire, value, buf[begin:pos])


def replace_in(message: bytes, path: tuple[int, ...], extra: bytes) -> bytes:
    """``message`` with ``extra`` (encoded fields) appended to the sub-message at ``path``.

    Re-encodes the length prefixes on the way up and keeps every other byte as it was. Parsers
    merge fields wherever they appear, so appending is a valid way to set a field.
    """
    if not path:
        return message + extra
    head, rest = path[0], path[1:]
    out = bytearray()
    found = False
    for f in iter_fields(message):
        if f.number == head and f.wire == LEN and not found:
            out += f_bytes(head, replace_in(f.data, rest, extra), keep_empty=True)
            found = True
        else:
            out += f.raw
    if not found:
        raise ProtoError(f"no sub-message field {head} to extend")
    return bytes(out)


# -- descriptors ------------------------------------------------------------------------------------
@dataclass
class MessageInfo:
    name: str
    fields: dict[str, tuple[int, int, str]] = field(default_factory=dict)  # name -> (number, type, type_name)


#: FieldDescriptorProto.type values used here.
TYPE_MESSAGE, TYPE_BYTES, TYPE_STRING, TYPE_UINT32 = 11, 12, 9, 13

_FILE_FIELDS = set(range(1, 15))  # FileDescriptorProto field numbers (name ... edition)


def _parse_message_type(buf: bytes, prefix: str, out: dict[str, MessageInfo]) -> None:
    info = MessageInfo("")
    nested: list[bytes] = []
    for f in iter_fields(buf):
        if f.number == 1 and f.wire == LEN:
            info.name = f.data.decode("ascii")
        elif f.number == 2 and f.wire == LEN:
            name, number, typ, type_name = "", 0, 0, ""
            for g in iter_fields(f.data):
                if g.number == 1 and g.wire == LEN:
                    name = g.data.decode("ascii")
                elif g.number == 3 and g.wire == VARINT:
                    number = g.integer
                elif g.number == 5 and g.wire == VARINT:
                    typ = g.integer
                elif g.number == 6 and g.wire == LEN:
                    type_name = g.data.decode("ascii")
            if name and number:
                info.fields[name] = (number, typ, type_name.rsplit(".", 1)[-1])
        elif f.number == 3 and f.wire == LEN:
            nested.append(f.data)
    if not info.name:
        raise ProtoError("message type without a name")
    full = prefix + info.name
    out[full] = info
    out.setdefault(info.name, info)
    for sub in nested:
        _parse_message_type(sub, full + ".", out)


def parse_file_descriptor(blob: bytes, start: int = 0) -> dict[str, MessageInfo]:
    """Message types of a serialized ``FileDescriptorProto`` starting at ``start``.

    The embedded descriptor has no length prefix, so parsing stops at the first field that cannot
    belong to a FileDescriptorProto; message types decoded before that point are returned.
    """
    out: dict[str, MessageInfo] = {}
    for f in iter_fields(blob, start, min(len(blob), start + (1 << 20)), strict=False):
        if f.number not in _FILE_FIELDS:
            break
        if f.number == 4 and f.wire == LEN:
            try:
                _parse_message_type(f.data, "", out)
            except (ProtoError, UnicodeDecodeError):
                break
    return out


def find_file_descriptor(blob: bytes, proto_path: str) -> dict[str, MessageInfo] | None:
    """Look for the descriptor of ``proto_path`` (e.g. ``jaxlib/gpu/triton.proto``) inside a binary."""
    name = proto_path.encode()
    needle = tag(1, LEN) + varint(len(name)) + name
    pos = blob.find(needle)
    while pos >= 0:
        found = parse_file_descriptor(blob, pos)
        if found:
            return found
        pos = blob.find(needle, pos + 1)
    return None
