"""The one canonical JSON encoding karchive hashes and stores, and one parser for JSON it did not write.

Canonical JSON (spec/FORMAT.md §7): sorted keys, no insignificant whitespace, ASCII only (non-ASCII as
``\\uXXXX``), no NaN/Infinity. Manifests, indexes, variant keys, registry records and signed statements
all use it, which is what makes their bytes reproducible.

:func:`parse_json` reads untrusted JSON. In ``strict`` mode (archives, registry documents: bytes
karchive wrote canonically) it refuses non-ASCII bytes, duplicate keys (two parsers could disagree on
which one wins) and NaN/Infinity, and it bounds the number of values *before* parsing, because parsed
JSON costs up to ~60 bytes per value however short its text. In every mode it bounds the nesting
depth (:data:`MAX_DEPTH`) before parsing, so a 5,000-deep document is a karchive error naming what was
read, never a raw ``RecursionError`` (issue 20).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from ..errors import KarchiveError

__all__ = ["MAX_DEPTH", "canonical_json", "count_values_bound", "deeper_than", "parse_json"]


def canonical_json(obj: object) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode()


#: Deepest nesting of arrays and objects accepted in JSON karchive did not write (spec/FORMAT.md §7).
MAX_DEPTH = 64
_KEEP_QUOTES_AND_BRACKETS = bytes(set(range(256)) - set(b'"[]{}'))
# Deletion tables that keep only ``[{`` (or ``,:[{``): the length of ``raw.translate(None, table)`` counts
# them in one C pass, where ``bytes.count`` makes a pass per byte value (these run over every shard on its
# way to a launch). The copy is never longer than ``raw``, which the caller already holds.
_OPENERS_ONLY = bytes(set(range(256)) - set(b"[{"))
_VALUE_MARKS_ONLY = bytes(set(range(256)) - set(b",:[{"))
_OBJECTS_AS_ARRAYS = bytes.maketrans(b"{}", b"[]")
_STRING = re.compile(rb'"[^"]*"')


def deeper_than(raw: bytes, limit: int) -> bool:
    """True when the arrays and objects of JSON ``raw`` nest more than ``limit`` deep. Runs at C speed before any parser recurses: escaped backslashes and quotes go
    first, then everything but quotes and brackets, then the strings; objects count as arrays, and each
    pass removes the innermost ``[]`` pairs, so a document of depth d is empty after d passes."""
    if len(raw.translate(None, _OPENERS_ONLY)) <= limit:
        return False
    # Escapes are removed from the span between the first backslash and the byte after the last: no match of either
    # pattern starts outside that span, so the two passes need not run over the whole document (a shard
    # has a few escapes, in a compiler's version string, and hundreds of kilobytes around them).
    first = raw.find(b"\\")
    if first < 0:
        s = raw.translate(None, _KEEP_QUOTES_AND_BRACKETS)
    else:
        end = raw.rfind(b"\\") + 2  # the last backslash and what it escapes
        span = raw[first:end].replace(b"\\\\", b"").replace(b'\\"', b"")
        s = b"".join(part.translate(None, _KEEP_QUOTES_AND_BRACKETS) for part in (raw[:first], span, raw[end:]))
    # Adjacent quotes are an empty string or two strings with nothing between them: removing them keeps
    # the structure, and leaves only the few strings that hold brackets to the regex.
    s = s.replace(b'""', b"")
    if b'"' in s:
        s = _STRING.sub(b"", s)
    s = s.translate(_OBJECTS_AS_ARRAYS)
    for _ in range(limit):
        if not s:
            return False
        shorter = s.replace(b"[]", b"")
        if len(shorter) == len(s):
            return False  # unbalanced: not JSON; the parser says so (and its RecursionError is caught)
        s = shorter
    return bool(s)


def count_values_bound(raw: bytes) -> int:
    """An upper bound on the number of JSON values in ``raw``: every value but the first follows one of
    ``, : [ {``, so counting those bytes bounds the values without parsing anything."""
    return len(raw.translate(None, _VALUE_MARKS_ONLY)) + 1


def parse_json(
    raw: bytes | str,
    what: str,
    *,
    error: type[KarchiveError],
    strict: bool = True,
    max_values: int | None = None,
    limit_error: type[KarchiveError] | None = None,
    note: str = "",
    max_depth: int = MAX_DEPTH,
) -> Any:
    """Parse ``raw`` or raise ``error`` naming ``what``; see the module docstring for ``strict``.

    ``max_values`` bounds the value count (raising ``limit_error``, default ``error``) before parsing;
    ``max_depth`` bounds the nesting (raising ``limit_error`` too); ``note`` is added to the "not valid
    JSON" message (e.g. what that means for the reader).
    """
    if isinstance(raw, str):
        try:
            raw = raw.encode("utf-8")
        except UnicodeEncodeError as exc:  # lone surrogates from the environment
            raise error(f"{what} is not valid JSON: {exc}") from exc
    if strict and not raw.isascii():
        raise error(f"{what} is not ASCII JSON (karchive writes canonical, ASCII-only JSON)")
    if max_values is not None:
        values = count_values_bound(raw)
        if values > max_values:
            raise (limit_error or error)(f"{what} holds up to {values} JSON values; the limit is {max_values}")
    if deeper_than(raw, max_depth):
        raise (limit_error or error)(f"{what} is nested deeper than {max_depth} levels")
    try:
        if strict:
            return json.loads(
                raw.decode("ascii"), object_pairs_hook=_no_duplicate_keys(error), parse_constant=_no_constant(error)
            )
        return json.loads(raw)
    except RecursionError as exc:
        raise error(f"{what}: JSON nested too deeply") from exc
    except KarchiveError:
        raise
    except (ValueError, UnicodeDecodeError) as exc:  # json.JSONDecodeError, over-long integers
        raise error(f"{what} is not valid JSON{note}: {exc}") from exc


def _no_duplicate_keys(error: type[KarchiveError]) -> Callable[[list[tuple[str, Any]]], dict]:
    def hook(pairs: list[tuple[str, Any]]) -> dict:
        obj = dict(pairs)
        if len(obj) != len(pairs):
            seen: set[str] = set()
            for k, _ in pairs:
                if k in seen:
                    raise error(f"duplicate JSON key {k!r}")
                seen.add(k)
        return obj

    return hook


def _no_constant(error: type[KarchiveError]):
    def hook(name: str) -> Any:
        raise error(f"JSON constant {name} is not allowed")

    return hook
