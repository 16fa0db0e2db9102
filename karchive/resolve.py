"""One way to turn what a user typed into an archive reader: a path, an fsspec URL, or NAME[@VERSION].

Shared by ``karchive.open`` and every CLI command that takes an archive, so both accept the same refs.
"""

from __future__ import annotations

import os
import re
from typing import Any

from .format.reader import ArchiveReader, Limits

#: ``name`` or ``name@version`` as a registry reference (not a path, not a URL).
_REGISTRY_REF = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(@[A-Za-z0-9][A-Za-z0-9.+_~^<>=*!,-]*)?")


def looks_like_registry_ref(ref: str) -> bool:
    """NAME or NAME@VERSION that is not an existing file and does not look like a file name."""
    if "://" in ref or os.sep in ref or "/" in ref or ref.endswith(".karc") or os.path.isfile(ref):
        return False
    return bool(_REGISTRY_REF.fullmatch(ref))


def open_any_reader(ref: str | os.PathLike, *, storage_options: dict[str, Any] | None = None,
                    limits: Limits = Limits(), **registry_options: Any) -> ArchiveReader:
    text = os.fspath(ref)
    if looks_like_registry_ref(text):
        from .registry import open_reader as registry_open_reader

        return registry_open_reader(text, storage_options=storage_options, limits=limits, **registry_options)
    if registry_options:
        raise TypeError(f"unexpected options for a path or URL: {sorted(registry_options)}")
    from .format.open import open_reader

    return open_reader(text, storage_options=storage_options, limits=limits)
