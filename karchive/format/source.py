"""Byte-range sources an archive can be read from: memory, a local file, or an fsspec file system.

Readers ask for exact ranges, so a remote archive costs one request per range and never a read-ahead.
"""

from __future__ import annotations

import os
import stat
import threading
from typing import Any, Protocol

from ..errors import ArchiveNotFoundError, FormatError, NotAnArchiveError, TransferError

__all__ = ["BytesSource", "FileSource", "FsspecSource", "RangeSource"]


class RangeSource(Protocol):
    size: int
    requests: int
    bytes_read: int

    def read(self, offset: int, length: int) -> bytes: ...

    def describe(self) -> str: ...


class BytesSource:
    def __init__(self, data: bytes, label: str = "<bytes>") -> None:
        self._data = memoryview(data)
        self.size = len(data)
        self.requests = 0
        self.bytes_read = 0
        self._label = label

    def read(self, offset: int, length: int) -> bytes:
        if offset < 0 or length < 0 or offset + length > self.size:
            raise FormatError(f"read past the end of {self._label} ({offset}+{length} > {self.size})")
        self.requests += 1
        self.bytes_read += length
        return bytes(self._data[offset : offset + length])

    def describe(self) -> str:
        return self._label


class FileSource:
    """A local file read with pread: thread-safe, no shared file position."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = os.fspath(path)
        try:
            # O_NONBLOCK: opening a FIFO must not hang waiting for a writer (it is refused below).
            self._fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0))
        except FileNotFoundError:
            raise ArchiveNotFoundError(f"no such archive: {self.path}", path=self.path) from None
        except IsADirectoryError:
            raise NotAnArchiveError(f"{self.path} is a directory, not an archive", source=self.path) from None
        except PermissionError as exc:
            raise NotAnArchiveError(f"cannot read {self.path}: {exc.strerror}", source=self.path) from None
        st = os.fstat(self._fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(self._fd)
            self._fd = -1
            kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
            raise NotAnArchiveError(f"{self.path} is {kind}, not an archive", source=self.path)
        self.size = st.st_size
        self.requests = 0
        self.bytes_read = 0

    def read(self, offset: int, length: int) -> bytes:
        if offset < 0 or length < 0 or offset + length > self.size:
            raise FormatError(f"read past the end of {self.path} ({offset}+{length} > {self.size})")
        data = os.pread(self._fd, length, offset)
        if len(data) != length:
            raise FormatError(f"short read from {self.path}: the file changed while it was read")
        self.requests += 1
        self.bytes_read += length
        return data

    def describe(self) -> str:
        return self.path

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __del__(self) -> None:  # pragma: no cover - interpreter teardown
        try:
            self.close()
        except Exception:  # noqa: BLE001 - nothing may escape __del__ at interpreter teardown
            pass


class FsspecSource:
    """Exact-range reads through ``fs.cat_file(path, start, end)``: no block cache, no read-ahead."""

    def __init__(self, fs: Any, path: str, size: int | None = None) -> None:
        self.fs = fs
        self.path = path
        self._lock = threading.Lock()
        self.requests = 0
        self.bytes_read = 0
        try:
            self.size = int(size if size is not None else fs.size(path))
        except FileNotFoundError as exc:
            cause = exc.__cause__ or exc.__context__
            if (
                cause is not None
                and not isinstance(cause, FileNotFoundError)
                and getattr(cause, "status", None) not in (404, 410)
            ):
                # fsspec's HTTP file system reports any failed request as "not found"; a refused
                # connection is a network problem, not a missing archive.
                raise TransferError(
                    f"cannot reach {path}: {type(cause).__name__}: {cause}", url=path, registry=None, attempts=1
                ) from exc  # opened by URL: no registry, no retries
            raise ArchiveNotFoundError(f"no such archive: {path}", path=path) from None
        except Exception as exc:
            raise TransferError(f"cannot stat {path}: {exc}", url=path, registry=None, attempts=1) from exc

    def read(self, offset: int, length: int) -> bytes:
        if offset < 0 or length < 0 or offset + length > self.size:
            raise FormatError(f"read past the end of {self.path} ({offset}+{length} > {self.size})")
        try:
            data: bytes = self.fs.cat_file(self.path, start=offset, end=offset + length)
        except Exception as exc:
            raise TransferError(
                f"range read of {self.path} [{offset}, {offset + length}) failed: {exc}",
                url=self.path,
                registry=None,
                attempts=1,
            ) from exc
        if len(data) != length:
            raise FormatError(f"short range read from {self.path}: got {len(data)} of {length} bytes")
        with self._lock:
            self.requests += 1
            self.bytes_read += length
        return data

    def describe(self) -> str:
        return self.path
