"""One parser for TOML karchive did not write (trust policies, build specs): bounded nesting depth.

``tomllib`` is a recursive-descent parser in Python: ``a = [[[[...]]]]`` 5,000 deep raised a raw
``RecursionError`` out of the policy loader (issue 20). Here that, and any document nested more than
:data:`MAX_DEPTH` deep, is the caller's own karchive error.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the `trust` extra installs tomli
    import tomli as tomllib

from ..errors import KarchiveError
from .jsonio import MAX_DEPTH

__all__ = ["MAX_DEPTH", "TOMLDecodeError", "depth", "parse_toml"]

TOMLDecodeError = tomllib.TOMLDecodeError


def depth(value: Any) -> int:
    """How deep tables and arrays nest in a parsed document (iterative: no recursion to exhaust)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        deepest = max(deepest, level)
        stack.extend((child, level + 1) for child in children)
    return deepest


def parse_toml(data: bytes, what: str, error: Callable[[str], KarchiveError], *, max_depth: int = MAX_DEPTH) -> dict:
    """``data`` as a TOML document, or ``error(message)`` raised naming ``what``."""
    try:
        doc = tomllib.loads(data.decode("utf-8"))
    except RecursionError:
        raise error(f"{what} is nested deeper than {max_depth} levels") from None
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise error(f"{what} is not valid TOML: {exc}") from exc
    if depth(doc) > max_depth:
        raise error(f"{what} is nested deeper than {max_depth} levels")
    return doc
