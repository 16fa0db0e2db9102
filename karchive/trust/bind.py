"""Which bytes a signature covers, as seen by the reader that will use them (spec/SIGNING.md §6.1).

A reader checks the archive's index against the 72-byte footer it read while opening; the index
pins the manifest and the dictionary by sha256, and the manifest pins every member, which ``read()``
checks. So the footer's index digest *as the reader itself read it* identifies everything that
reader can ever return, even if the file or object changes afterwards. :class:`TailRecorder` wraps
the reader's byte source and keeps that footer, so a loader compares the digest the signature names
with the digest the reader actually used (reading the footer a second time would leave a window in
which the file could be swapped).

Where the whole file is hashed too (local files), :func:`hash_source` hashes it through the same
source and reads the index digest from the hashed bytes, so "this sha256" and "the reader's index"
are known to describe one file.
"""

from __future__ import annotations

import hashlib
from typing import Any

from ..errors import FormatError, IntegrityError
from ..format.check import index_sha256_from_footer
from ..format.constants import FOOTER_SIZE
from ..format.reader import ArchiveReader, Limits

_CHUNK = 4 << 20


class TailRecorder:
    """A byte source that remembers the footer the reader read; everything else is the wrapped
    source's (``size``, ``path``, ``describe()``, ``close()``, request counters)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.footer: bytes | None = None

    def read(self, offset: int, length: int) -> bytes:
        data = self.inner.read(offset, length)
        if self.footer is None and length >= FOOTER_SIZE and offset + length == self.inner.size:
            self.footer = data[-FOOTER_SIZE:]
        return data

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    @property
    def index_sha256(self) -> str:
        if self.footer is None:
            raise FormatError(f"{self.inner.describe()}: the reader did not read the footer")
        return index_sha256_from_footer(self.footer)


def open_recorded(source: Any, limits: Limits | None = None) -> tuple[ArchiveReader, str]:
    """An archive reader over ``source`` and the index digest of the footer it was opened from."""
    recorder = TailRecorder(source)
    reader = ArchiveReader(recorder, limits=limits or Limits())
    return reader, recorder.index_sha256


def hash_source(source: Any, index_sha256: str) -> str:
    """The sha256 of every byte of ``source``, after checking that the hashed bytes end with a footer
    naming ``index_sha256`` (the reader's): the hash and the reader describe the same file. A file
    changed in between is an :class:`IntegrityError`, never a silent mismatch."""
    h = hashlib.sha256()
    size = source.size
    last = b""
    for offset in range(0, size, _CHUNK):
        block = source.read(offset, min(_CHUNK, size - offset))
        h.update(block)
        last = (last + block)[-FOOTER_SIZE:]
    if len(last) != FOOTER_SIZE or index_sha256_from_footer(last) != index_sha256:
        raise IntegrityError(
            f"{source.describe()} changed while it was being opened and hashed; refusing it", source=source.describe()
        )
    return h.hexdigest()
