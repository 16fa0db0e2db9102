"""Deterministic ustar headers, and a strict parser that accepts only what karchive writes.

Python's ``tarfile`` is lenient by design (pax, GNU long names, links, devices); an archive is
untrusted input, so reading goes through this parser instead, which knows one member type.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from ..errors import FormatError, UnsafeMemberError
from .constants import TAR_BLOCK

__all__ = ["Header", "MAX_NAME", "build_header", "check_member_name", "padded", "parse_header"]

_NAME_RE = re.compile(r"[A-Za-z0-9._\-]+(/[A-Za-z0-9._\-]+)*")
#: The same, with no "." or ".." component: a name this matches whole is safe (the fast path).
_SAFE_RE = re.compile(r"(?!\.\.?(?:/|$))[A-Za-z0-9._\-]+(?:/(?!\.\.?(?:/|$))[A-Za-z0-9._\-]+)*")
MAX_NAME = 255


def check_member_name(name: str) -> str:
    """Refuse names that could escape a target directory or confuse a filesystem."""
    if type(name) is str and len(name) <= MAX_NAME and _SAFE_RE.fullmatch(name):
        return name
    if not isinstance(name, str) or not name or len(name) > MAX_NAME:
        raise UnsafeMemberError(f"bad member name {name!r}", member=ascii(name)[:200])
    if name.startswith("/") or "\\" in name or not _NAME_RE.fullmatch(name):  # not match(): "$" allows a trailing "\n"
        raise UnsafeMemberError(f"unsafe member name {name!r} (absolute, odd characters or empty part)", member=name)
    if any(part in (".", "..") for part in name.split("/")):
        raise UnsafeMemberError(f"unsafe member name {name!r} ('.' or '..' component)", member=name)
    return name


def _octal(value: int, width: int) -> bytes:
    digits = format(value, "o").encode()
    if len(digits) > width - 1:
        raise FormatError(f"value {value} does not fit a {width}-byte tar field")
    return digits.rjust(width - 1, b"0") + b"\0"


def _split_name(name: str) -> tuple[bytes, bytes]:
    raw = name.encode("ascii")
    if len(raw) <= 100:
        return raw, b""
    cut = raw.rfind(b"/", 0, 156)
    while cut > 0 and len(raw) - cut - 1 > 100:
        cut = raw.rfind(b"/", 0, cut)
    if cut <= 0:
        raise FormatError(f"member name too long for ustar: {name!r}")
    return raw[cut + 1 :], raw[:cut]


def build_header(name: str, size: int, mtime: int = 0) -> bytes:
    """One 512-byte ustar header: regular file, mode 0644, uid/gid 0, no user names."""
    check_member_name(name)
    base, prefix = _split_name(name)
    header = bytearray(TAR_BLOCK)
    header[0:100] = base.ljust(100, b"\0")
    header[100:108] = _octal(0o644, 8)
    header[108:116] = _octal(0, 8)
    header[116:124] = _octal(0, 8)
    header[124:136] = _octal(size, 12)
    header[136:148] = _octal(mtime, 12)
    header[148:156] = b" " * 8
    header[156:157] = b"0"
    header[257:265] = b"ustar\x0000"
    header[329:337] = _octal(0, 8)
    header[337:345] = _octal(0, 8)
    header[345:500] = prefix.ljust(155, b"\0")
    checksum = sum(header)
    header[148:156] = format(checksum, "06o").encode() + b"\0 "
    return bytes(header)


def padded(size: int) -> int:
    return (size + TAR_BLOCK - 1) // TAR_BLOCK * TAR_BLOCK


class Header(NamedTuple):
    name: str
    size: int


def _parse_octal(field: bytes, what: str) -> int:
    text = field.rstrip(b"\0 ").lstrip(b" ")
    if not text:
        return 0
    if not all(48 <= c <= 55 for c in text):
        raise FormatError(f"tar header field {what} is not octal: {field!r}")
    return int(text, 8)


def parse_header(block: bytes) -> Header | None:
    """Parse one header block; ``None`` for an all-zero (end-of-archive) block."""
    if len(block) != TAR_BLOCK:
        raise FormatError("truncated tar header")
    if block == bytes(TAR_BLOCK):
        return None
    if block[257:263] != b"ustar\x00":
        raise FormatError("tar header is not ustar")
    stored = _parse_octal(block[148:156], "chksum")
    computed = sum(block[:148]) + 8 * 32 + sum(block[156:])
    if stored != computed:
        raise FormatError("tar header checksum mismatch")
    typeflag = block[156:157]
    shown = block[0:100].split(b"\0", 1)[0].decode("ascii", "replace")  # the name as far as it can be read
    if typeflag not in (b"0", b"\0"):
        raise UnsafeMemberError(f"tar member type {typeflag!r} refused (only regular files are allowed)", member=shown)
    try:
        base = block[0:100].split(b"\0", 1)[0].decode("ascii")
        prefix = block[345:500].split(b"\0", 1)[0].decode("ascii")
    except UnicodeDecodeError as exc:
        raise UnsafeMemberError("non-ASCII tar member name", member=shown) from exc
    name = f"{prefix}/{base}" if prefix else base
    return Header(check_member_name(name), _parse_octal(block[124:136], "size"))
