"""Rewrite machine-specific directories in metadata JSON to a sentinel, and back.

Triton's metadata names files by absolute path (libdevice under the Triton install, cache
directories). Packing replaces each known root with ``@KARCHIVE_ROOT@``; a reader restores them to a
directory the caller chooses. Only JSON string values are touched, never keys or numbers.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from typing import Any

from ..errors import FormatError, SentinelError
from .constants import PATH_SENTINEL

__all__ = ["restore_json_bytes", "restore_paths", "rewrite_paths"]


def _walk(node: Any, fn: Callable[[Any], Any]) -> Any:
    if isinstance(node, str):
        return fn(node)
    if isinstance(node, list):
        return [_walk(v, fn) for v in node]
    if isinstance(node, dict):
        return {k: _walk(v, fn) for k, v in node.items()}
    return node


def _contains_sentinel(node: Any) -> bool:
    found = False

    def check(s: str) -> str:
        nonlocal found
        found = found or PATH_SENTINEL in s
        return s

    _walk(node, check)
    return found


def rewrite_paths(metadata: Any, roots: Iterable[str | os.PathLike]) -> Any:
    """Replace every absolute path under one of ``roots`` with ``@KARCHIVE_ROOT@/<relative>``.

    Roots are tried longest first so a nested root wins. Raises :class:`SentinelError` if the
    input already holds the sentinel: restoring would then be ambiguous.
    """
    if _contains_sentinel(metadata):
        raise SentinelError(f"metadata already contains the path sentinel {PATH_SENTINEL!r}; refusing to pack it")
    clean = sorted({os.path.normpath(os.fspath(r)) for r in roots if r}, key=len, reverse=True)

    def fix(s: str) -> str:
        if not os.path.isabs(s):
            return s
        norm = os.path.normpath(s)
        for root in clean:
            if norm == root or norm.startswith(root + os.sep):
                rel = os.path.relpath(norm, root).replace(os.sep, "/")
                return PATH_SENTINEL if rel == "." else f"{PATH_SENTINEL}/{rel}"
        return s

    return _walk(metadata, fix)


def restore_paths(metadata: Any, root: str | os.PathLike) -> Any:
    """Put ``root`` back where the sentinel stands."""
    base = os.fspath(root).rstrip("/") or "/"

    def fix(s: str) -> str:
        if s == PATH_SENTINEL:
            return base
        if s.startswith(PATH_SENTINEL + "/"):
            rel = s[len(PATH_SENTINEL) + 1 :]
            if any(part == ".." for part in rel.split("/")):
                raise FormatError(f"sentinel path {s!r} climbs out of its root")
            return os.path.join(base, *rel.split("/"))
        return s

    return _walk(metadata, fix)


def restore_json_bytes(data: bytes, root: str | os.PathLike) -> bytes:
    """Restore paths in a stored metadata JSON file (bytes in, bytes out)."""
    try:
        obj = json.loads(data)
    except ValueError as exc:
        raise FormatError(f"metadata is not JSON: {exc}") from exc
    return json.dumps(restore_paths(obj, root), sort_keys=True).encode()
