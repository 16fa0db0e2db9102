"""Where karchive keeps per-user state on disk: the cache root (archives, receipts, build caches).

The registry's cache and the producer's own Triton build cache both live under it, so its location is
decided here, below both: ``--cache-dir`` flag, else ``$KARCHIVE_CACHE_DIR``, else
``$XDG_CACHE_HOME/karchive`` (``~/.cache/karchive``).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["BUILD_CACHE", "CACHE_ENV", "cache_dir", "default_cache_dir", "xdg_dir"]

from . import settings

CACHE_ENV = settings.CACHE_DIR.name
#: The producer's own Triton cache for builds, under the cache root (``karchive cache ls`` counts it).
BUILD_CACHE = "triton-build"


def xdg_dir(var: str, fallback: str) -> Path:
    """``$var`` when it is an absolute path (the XDG spec ignores relative ones), else ``~/<fallback>``."""
    value = os.environ.get(var)
    return Path(value) if value and os.path.isabs(value) else Path.home() / fallback


def default_cache_dir() -> Path:
    return xdg_dir("XDG_CACHE_HOME", ".cache") / "karchive"


def cache_dir(flag: str | os.PathLike | None = None) -> Path:
    """Flag > ``$KARCHIVE_CACHE_DIR`` > ``$XDG_CACHE_HOME/karchive``."""
    for value in (flag, settings.cache_dir()):
        if value:
            return Path(os.fspath(value)).expanduser()
    return default_cache_dir()
