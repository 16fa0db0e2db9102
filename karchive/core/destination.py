"""Check where a command will write before the work that produces the bytes.

A build that compiles for minutes and then cannot write its archive wastes the minutes; an extraction
into a path that is a file fails half-way. So commands resolve and check their destination first:
missing parent directories are created (``mkdir -p``, as ``-o`` users expect), anything that cannot
work (a file where a directory is needed, a directory where a file is wanted, no permission) is a
:class:`~karchive.errors.DestinationError` naming the path the user gave.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from ..errors import DestinationError

__all__ = ["output_dir", "output_file", "unwritable"]


def unwritable(directory: str | os.PathLike) -> str | None:
    """Why no file can be created in the existing ``directory`` (None: one can), found by creating and
    removing one. Permission bits say nothing for root or on special filesystems (``/proc`` accepts the
    access check and refuses the file), so the check is the operation itself."""
    try:
        fd, name = tempfile.mkstemp(prefix=".karchive-probe-", dir=directory)
    except OSError as exc:
        if isinstance(exc, FileNotFoundError) and os.path.isdir(directory):
            return f"files cannot be created in {directory} (a special filesystem: {exc.strerror})"
        return f"cannot create a file in {directory}: {exc.strerror or exc}"
    os.close(fd)
    os.unlink(name)
    return None


def _make_dirs(directory: Path, wanted: str, *, create: bool = True) -> None:
    """``mkdir -p directory`` (or, with ``create=False``, check that it could be made); a file in the way
    or a permission problem says which path is at fault."""
    probe = directory
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        raise DestinationError(f"cannot write {wanted}: {probe} is a file, not a directory", path=wanted)
    if not create:
        if not os.access(probe, os.W_OK | os.X_OK):
            raise DestinationError(f"cannot write {wanted}: no permission to write in {probe}", path=wanted)
        why = unwritable(probe) if probe.is_dir() else None
        if why:
            raise DestinationError(f"cannot write {wanted}: {why}", path=wanted)
        return
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DestinationError(
            f"cannot write {wanted}: cannot create directory {directory}: {exc.strerror or exc}", path=wanted
        ) from None
    if not os.access(directory, os.W_OK | os.X_OK):
        raise DestinationError(f"cannot write {wanted}: no permission to write in {directory}", path=wanted)
    why = unwritable(directory)
    if why:
        raise DestinationError(f"cannot write {wanted}: {why}", path=wanted)


def output_file(path: str | os.PathLike, *, default_name: str | None = None) -> str:
    """The file to write for ``path``, its directory created and checked.

    ``path`` naming a directory (one that exists, or any path ending in ``/``) means "in there" when
    ``default_name`` is given (``-o out/`` writes ``out/<default_name>``), and is an error otherwise.
    An existing file is replaced later, atomically, by the writer.
    """
    text = os.fspath(path)
    if not text:
        raise DestinationError("no output path given", path=text)
    is_dir = text.endswith(("/", os.sep)) or os.path.isdir(text)
    if is_dir:
        if default_name is None:
            raise DestinationError(f"cannot write {text}: it is a directory; give a file name", path=text)
        _make_dirs(Path(text), text)
        return os.path.join(text, default_name)
    target = Path(text)
    _make_dirs(target.parent if str(target.parent) else Path("."), text)
    if target.exists() and not target.is_file():
        raise DestinationError(f"cannot write {text}: it exists and is not a regular file", path=text)
    return text


def output_dir(path: str | os.PathLike, *, create: bool = True) -> str:
    """A directory to write files into (created if missing, unless ``create=False``: then only checked,
    for a writer that creates it once its input proved sound); a file in its place is an error."""
    text = os.fspath(path)
    if not text:
        raise DestinationError("no output directory given", path=text)
    if os.path.exists(text) and not os.path.isdir(text):
        raise DestinationError(f"cannot use {text} as the destination directory: it is a file", path=text)
    _make_dirs(Path(text), text, create=create)
    return text
