"""Where the registry and the cache are: flag, then environment, then XDG defaults.

Only locations are configured here. Credentials never pass through karchive's own configuration:
they are fsspec ``storage_options`` or the backend's own settings (AWS_*, GOOGLE_*, ~/.aws, ...).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ..core import settings
from ..core.jsonio import parse_json
from ..core.paths import CACHE_ENV, cache_dir, default_cache_dir, xdg_dir  # noqa: F401 - re-exported
from ..errors import RegistryError, RegistryValueError

STORAGE_OPTIONS_ENV = settings.STORAGE_OPTIONS.name


def default_registry_dir() -> Path:
    return xdg_dir("XDG_DATA_HOME", ".local/share") / "karchive" / "registry"


def registry_url(flag: str | os.PathLike | None = None) -> str:
    """Flag > ``$KARCHIVE_REGISTRY`` > ``$XDG_DATA_HOME/karchive/registry``."""
    for value in (flag, settings.registry()):
        if value:
            return os.fspath(value)
    return str(default_registry_dir())


def storage_options_from_env() -> dict[str, Any]:
    """Non-secret backend options (e.g. ``{"endpoint_url": ...}``) for the CLI, as JSON."""
    raw = settings.storage_options()
    if not raw:
        return {}
    # The one parser for JSON karchive did not write: bounded depth (a 5,000-deep value is an error here,
    # not a RecursionError).
    value = parse_json(raw, f"${STORAGE_OPTIONS_ENV}", error=RegistryError, strict=False)
    if not isinstance(value, dict):
        raise RegistryValueError(f"${STORAGE_OPTIONS_ENV} must be a JSON object", value=repr(value)[:200])
    return value


def canonical_registry(url: str) -> str:
    """The registry's identity, however its location is spelt: what the cache keys records and the
    rollback ratchet by (spec/REGISTRY.md §5). Keyed by the spelling, a symlink or a ``..`` path gave a
    fresh ratchet and ``NAME@latest`` went back to an older version without an error (issue 20).

    A local directory is its real path (symlinks and ``..`` resolved, ``file://`` dropped). A URL is
    redacted (no credentials, query or fragment), its scheme and host lower-cased, an HTTP(S) default
    port dropped and a trailing ``/`` too. Dot segments are removed only where the client removes them
    (HTTP, RFC 3986 §5.2.4): in an object store ``a/../b`` is a key of its own, another registry, and
    two registries must never share records.
    """
    if url.startswith("file://"):
        url = url[len("file://") :]
    if "://" not in url:
        return os.path.realpath(os.path.expanduser(url))
    if "::" in url.split("://", 1)[0]:  # a chained URL (simplecache::s3://...): keep its spelling, redacted
        return redact_url(url)
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    if ":" in host:  # an IPv6 literal keeps its brackets
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is not None and (scheme, port) not in (("http", 80), ("https", 443)):
        host = f"{host}:{port}"
    path = parts.path
    if scheme in ("http", "https"):
        path = _remove_dot_segments(path)
    return urlunsplit((scheme, host, path.rstrip("/"), "", ""))


def _remove_dot_segments(path: str) -> str:
    """RFC 3986 §5.2.4 on a URL path: ``.`` and ``..`` segments resolved, empty segments kept."""
    out: list[str] = []
    for segment in path.split("/"):
        if segment == "..":
            if len(out) > 1:
                out.pop()
        elif segment != ".":
            out.append(segment)
    return "/".join(out)


def redact_url(url: str) -> str:
    """The URL without user info, query or fragment: safe to print and to store."""
    if "://" not in url:
        return url
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))
