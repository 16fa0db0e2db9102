"""Atomic file writes: write a temporary file in the destination's directory, fsync, rename into place.

A reader therefore sees the old file or the whole new one, never a half-written one, and a writer
killed midway leaves at most a temporary file (named ``.<name>.<pid>.<random>.tmp``) that nothing reads.
The same-directory temporary keeps the rename on one file system (``os.replace`` is atomic there,
POSIX rename(2)); the directory fsync makes the rename itself durable.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from ..errors import DestinationError

__all__ = ["atomic_write", "atomic_writer", "fsync_dir", "read_bounded", "read_regular", "temp_path_for"]


def fsync_dir(path: str | os.PathLike) -> None:
    """Make a rename or link in ``path`` durable; best effort (some file systems refuse directory fsync)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def temp_path_for(final: str | os.PathLike) -> Path:
    """A fresh temporary name beside ``final`` (same directory, so a rename onto ``final`` is atomic)."""
    p = Path(final)
    return p.parent / f".{p.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"


@contextlib.contextmanager
def atomic_writer(final: str | os.PathLike, *, durable: bool = True, mode: int | None = None) -> Iterator[BinaryIO]:
    """``with atomic_writer(path) as fh: fh.write(...)``: ``path`` appears complete or not at all.

    ``durable`` fsyncs the file and its directory (skip it for regenerable caches); ``mode`` sets the
    file's permissions before it becomes visible. On any exception the temporary file is removed.
    """
    tmp = temp_path_for(final)
    try:
        try:
            fh = open(tmp, "xb")
        except OSError as exc:
            raise _destination_error(final, exc) from None
        with fh:
            yield fh
            try:
                fh.flush()
                if durable:
                    os.fsync(fh.fileno())
            except OSError as exc:
                raise _destination_error(final, exc) from None
        try:
            if mode is not None:
                os.chmod(tmp, mode)
            os.replace(tmp, final)
        except OSError as exc:
            raise _destination_error(final, exc) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if durable:
        fsync_dir(Path(final).parent)


def _destination_error(final: str | os.PathLike, exc: OSError) -> DestinationError:
    """The error names the file the caller asked for, never the temporary beside it (its name means
    nothing to a user); the OS's reason (errno text) is kept."""
    final = os.fspath(final)
    if isinstance(exc, IsADirectoryError) or os.path.isdir(final):
        why = "it is a directory"
    elif isinstance(exc, FileNotFoundError):
        parent = os.path.dirname(os.path.abspath(final))
        why = (
            f"files cannot be created in {parent} (a special filesystem: {exc.strerror})"
            if os.path.isdir(parent)
            else f"its directory {parent} does not exist"
        )
    elif isinstance(exc, NotADirectoryError):
        why = "a part of its path is a file, not a directory"
    else:
        why = exc.strerror or str(exc)
    return DestinationError(f"cannot write {final}: {why}", path=final)


def atomic_write(final: str | os.PathLike, data: bytes, *, durable: bool = True, mode: int | None = None) -> None:
    """Write ``data`` to ``final`` atomically (see :func:`atomic_writer`)."""
    with atomic_writer(final, durable=durable, mode=mode) as fh:
        fh.write(data)


def read_regular(path: str | os.PathLike, limit: int | None) -> bytes:
    """At most ``limit`` + 1 bytes of ``path`` (all of it for None), which must be a regular file.

    Opened with ``O_NONBLOCK`` and checked with ``fstat`` before any read (as archives are, in
    :class:`karchive.format.source.FileSource`): a FIFO named like a signature sidecar or a policy
    once hung ``karchive.open`` waiting for a writer (issue 20). Anything else (FIFO, device, socket,
    directory) raises an ``OSError`` whose ``strerror`` says so; a missing file raises
    ``FileNotFoundError`` as ``open`` does.
    """
    import stat

    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file (a FIFO, device or socket)"
            raise OSError(errno.EISDIR if stat.S_ISDIR(mode) else errno.EINVAL, kind, os.fspath(path))
        chunks, left = [], (os.fstat(fd).st_size + 1 if limit is None else limit + 1)
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_bounded(path: str | os.PathLike, limit: int) -> bytes:
    """All of ``path``, a regular file (:func:`read_regular`) of at most ``limit`` bytes; a larger one raises
    an ``OSError`` (``EFBIG``) saying so, before more than ``limit`` + 1 bytes are read. For files whose path
    comes from configuration or the command line: a lockfile, a spec, a keys file, the cache's own files."""
    data = read_regular(path, limit)
    if len(data) > limit:
        size = f"{limit >> 20} MiB" if limit >= 1 << 20 and not limit % (1 << 20) else f"{limit} bytes"
        raise OSError(errno.EFBIG, f"larger than {size}", os.fspath(path))
    return data
