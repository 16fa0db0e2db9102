"""Extract an archive's members into a directory without ever writing outside it.

Members are written through directory file descriptors with ``O_NOFOLLOW`` and ``O_EXCL``, so neither
a hostile name nor a symlink planted in the destination can redirect a write.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from ..errors import IntegrityError, UnsafeMemberError
from .reader import ArchiveReader
from .tarheader import check_member_name

__all__ = ["extract_all"]

_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)


def _open_subdir(parent_fd: int, name: str) -> int:
    try:
        os.mkdir(name, 0o755, dir_fd=parent_fd)
    except FileExistsError:
        pass
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    except OSError as exc:
        raise UnsafeMemberError(
            f"cannot enter {name!r} in the destination (a symlink or not a directory): {exc}", member=name
        ) from exc


def extract_all(
    reader: ArchiveReader, dest: str | os.PathLike, transform: Callable[[str, bytes], bytes] | None = None
) -> list[str]:
    """Write every member (digest-checked) under ``dest``; returns the member names written.

    ``transform(name, data)`` may rewrite content on the way out (e.g. restoring sentinel paths).
    Existing files are not overwritten.
    """
    # Check everything before writing anything: a damaged archive leaves no partial extraction.
    problems = reader.verify()
    if problems:
        raise IntegrityError(
            f"{reader.source.describe()} is damaged; nothing extracted: " + "; ".join(problems[:5]),
            source=reader.source.describe(),
        )
    os.makedirs(dest, exist_ok=True)
    # The destination itself is the caller's choice and may be a symlink; what lies below it may not.
    root_fd = os.open(os.fspath(dest), os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    written = []
    try:
        for name, data in reader.iter_members():  # archive order: each frame is decoded once
            check_member_name(name)
            if transform is not None:
                data = transform(name, data)
            *dirs, base = name.split("/")
            fds = [root_fd]
            try:
                for d in dirs:
                    fds.append(_open_subdir(fds[-1], d))
                flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
                try:
                    fd = os.open(base, flags, 0o644, dir_fd=fds[-1])
                except FileExistsError as exc:
                    raise UnsafeMemberError(
                        f"{name!r} already exists in the destination; not overwriting", member=name
                    ) from exc
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
                written.append(name)
            finally:
                for fd in fds[1:]:
                    os.close(fd)
    finally:
        os.close(root_fd)
    return written
