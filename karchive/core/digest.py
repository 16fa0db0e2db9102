"""sha256 digests: of bytes, of files (streamed), and the check that a string is one."""

from __future__ import annotations

import hashlib
import os
from typing import TypeGuard

__all__ = ["is_sha256_hex", "sha256_file", "sha256_hex"]

_HEX = frozenset("0123456789abcdef")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> tuple[str, int]:
    """(hex digest, size) of a file, read in chunks so memory stays bounded."""
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as fh:
        while data := fh.read(chunk):
            h.update(data)
            size += len(data)
    return h.hexdigest(), size


def is_sha256_hex(value: object) -> TypeGuard[str]:
    """64 lowercase hex digits: the only digest spelling karchive writes or accepts."""
    return isinstance(value, str) and len(value) == 64 and _HEX.issuperset(value)
