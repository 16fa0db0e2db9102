"""Atomic file writes: write a temporary file in the destination's directory, fsync, rename into place.

A reader therefore sees the old file or the whole new one, never a half-written one, and a writer
killed midway leaves at most a temporary file (named ``.<name>.<pid>.<random>.tmp``) that nothing reads.
The same-directory temporary keeps the rename on one file system (``os.replace`` is atomic there,
POSIX rename(2)); the directory fsync makes the rename itself durable.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO


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
        with open(tmp, "xb") as fh:
            yield fh
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if durable:
        fsync_dir(Path(final).parent)


def atomic_write(final: str | os.PathLike, data: bytes, *, durable: bool = True, mode: int | None = None) -> None:
    """Write ``data`` to ``final`` atomically (see :func:`atomic_writer`)."""
    with atomic_writer(final, durable=durable, mode=mode) as fh:
        fh.write(data)
