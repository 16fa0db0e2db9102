"""Parsing Python source text, safe to call from several threads.

CPython before 3.13 keeps the AST constructor's recursion depth in interpreter-wide state, so two threads
inside ``ast.parse`` at once can fail one of them with ``SystemError: AST constructor recursion depth
mismatch`` (python/cpython gh-106905). Captures parse kernel sources on whatever thread compiles, so
karchive's own parses take one lock and retry once when another library's parse raced them.
"""

from __future__ import annotations

import ast
import threading

__all__ = ["parse"]

_LOCK = threading.Lock()


def parse(text: str, filename: str = "<unknown>") -> ast.Module:
    """``ast.parse``, serialised among karchive's callers and retried once after the CPython race."""
    with _LOCK:
        try:
            return ast.parse(text, filename)
        except SystemError as exc:
            if "recursion depth mismatch" not in str(exc):
                raise
            return ast.parse(text, filename)
