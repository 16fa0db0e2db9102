"""The runtime's entry point: turn "NAME@VERSION" (or a path/URL) into an :class:`ArchiveReader`."""

from __future__ import annotations

import os
from typing import Any

from ..format.reader import ArchiveReader, Limits
from .config import LOCKFILE_ENV
from .lockfile import Lockfile
from .refs import looks_like_path
from .registry import FetchMode, Registry


def open_reader(ref: str, registry: "Registry | str | os.PathLike | None" = None,
                lockfile: "Lockfile | str | os.PathLike | None" = None,
                storage_options: dict[str, Any] | None = None, *,
                cache_dir: str | os.PathLike | None = None, fetch: FetchMode | None = None,
                limits: Limits | None = None) -> ArchiveReader:
    """Open ``ref`` ("NAME", "NAME@VERSION", "NAME@latest", or a file path / URL of a .karc).

    The registry is ``registry`` (a :class:`Registry` or URL), else ``$KARCHIVE_REGISTRY``, else the
    default local one; the lockfile is ``lockfile`` or ``$KARCHIVE_LOCKFILE``. With a lockfile the
    archive must have the pinned digest.
    """
    if looks_like_path(ref):
        from ..format.open import open_reader as open_path

        return open_path(ref, storage_options=storage_options, limits=limits or Limits())
    reg = registry if isinstance(registry, Registry) else Registry(registry, storage_options, cache=cache_dir)
    if lockfile is None and os.environ.get(LOCKFILE_ENV):
        lockfile = os.environ[LOCKFILE_ENV]
    return reg.open(ref, lockfile=lockfile, fetch=fetch, limits=limits)
