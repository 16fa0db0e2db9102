"""Open an archive reader from a local path or any fsspec URL (``s3://``, ``gs://``, ``http://``, ``memory://``)."""

from __future__ import annotations

import os
from typing import Any

from .reader import ArchiveReader, Limits
from .source import FileSource, FsspecSource


def is_url(ref: str) -> bool:
    return "://" in ref


def open_reader(ref: str | os.PathLike, *, storage_options: dict[str, Any] | None = None,
                limits: Limits = Limits()) -> ArchiveReader:
    """Local files are read with pread; URLs with exact-range ``cat_file`` calls (no read-ahead)."""
    text = os.fspath(ref)
    if not is_url(text) or text.startswith("file://"):
        path = text[len("file://"):] if text.startswith("file://") else text
        return ArchiveReader(FileSource(path), limits=limits)
    import fsspec  # imported only for remote archives

    fs, path = fsspec.core.url_to_fs(text, **(storage_options or {}))
    return ArchiveReader(FsspecSource(fs, path), limits=limits)
