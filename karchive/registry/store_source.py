"""A byte-range source over a registry store: retried reads, request counting, footer capture.

Lazy (ranged) loading authenticates what it reads without hashing the whole archive: the version
record (or lockfile) carries the sha256 of the archive index, the footer carries the same digest,
the reader checks the index against the footer, and the index pins the manifest, which pins every
member. :meth:`StoreSource.footer_index_sha256` exposes the footer's digest from the reader's own
tail read, so the check costs no extra request.
"""

from __future__ import annotations

import threading

from ..errors import FormatError, TransferError
from ..format.check import index_sha256_from_footer
from ..format.constants import FOOTER_SIZE
from .retry import RetryPolicy
from .store import Store


class StoreSource:
    def __init__(self, store: Store, path: str, size: int, retry: RetryPolicy) -> None:
        self.store = store
        self.path = path
        self.size = size
        self.retry = retry
        self.requests = 0
        self.bytes_read = 0
        self._footer: bytes | None = None
        self._lock = threading.Lock()

    def read(self, offset: int, length: int) -> bytes:
        if offset < 0 or length < 0 or offset + length > self.size:
            raise FormatError(f"read past the end of {self.describe()} ({offset}+{length} > {self.size})")

        def fetch() -> bytes:
            data = self.store.read_range(self.path, offset, offset + length)
            if len(data) != length:
                raise ConnectionError(f"short range read: {len(data)} of {length} bytes")
            return data

        try:
            data = self.retry.call(
                fetch, f"range read of {self.describe()} [{offset}, {offset + length})", registry=self.store.url
            )
        except FileNotFoundError:
            raise TransferError(
                f"{self.describe()} is missing although a version record points at it (damaged registry)",
                registry=self.store.url,
                url=self.describe(),
                attempts=1,
            ) from None  # a missing object is not retried
        with self._lock:
            self.requests += 1
            self.bytes_read += length
            if offset + length == self.size and length >= FOOTER_SIZE and self._footer is None:
                self._footer = data[-FOOTER_SIZE:]
        return data

    def describe(self) -> str:
        return f"{self.store.url}/{self.path}"

    def footer_index_sha256(self) -> str:
        if self._footer is None:
            self._footer = self.read(self.size - FOOTER_SIZE, FOOTER_SIZE)
        return index_sha256_from_footer(self._footer)
