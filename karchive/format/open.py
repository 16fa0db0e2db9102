"""Open an archive reader from a local path or any fsspec URL (``s3://``, ``gs://``, ``http://``, ``memory://``).

This is the format layer's half of opening: a *location*. Registry references (``NAME@VERSION``) are
resolved above it, in :func:`karchive.resolve.open`, the one entry point users call.
"""

from __future__ import annotations

import os
from typing import Any

from ..errors import UnsupportedLocationError
from .reader import ArchiveReader, Limits
from .source import FileSource, FsspecSource


def is_url(location: str) -> bool:
    return "://" in location


def open_location(
    location: str | os.PathLike, *, storage_options: dict[str, Any] | None = None, limits: Limits | None = None
) -> ArchiveReader:
    """Local files are read with pread; URLs with exact-range ``cat_file`` calls (no read-ahead)."""
    text = os.fspath(location)
    limits = limits or Limits()
    if not is_url(text) or text.startswith("file://"):
        path = text[len("file://") :] if text.startswith("file://") else text
        return ArchiveReader(FileSource(path), limits=limits)
    import fsspec  # imported only for remote archives

    try:
        fs, path = fsspec.core.url_to_fs(text, **(storage_options or {}))
    except ImportError as exc:
        raise UnsupportedLocationError(
            f"{text}: the fsspec backend for this URL is not installed ({exc}); install karchive[s3] for s3://, "
            "karchive[gcs] for gs://, karchive[http] for http(s)://",
            location=text,
        ) from None
    except (ValueError, TypeError) as exc:  # unknown protocol, bad storage options
        raise UnsupportedLocationError(f"cannot open {text}: {exc}", location=text) from None
    return ArchiveReader(FsspecSource(fs, path), limits=limits)
