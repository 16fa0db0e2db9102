"""Whole-string grammar checks for names that arrive from untrusted input (archives, registries,
policies, the environment).

One rule for every such check: :func:`fullmatch`. ``re.match`` with a pattern that ends in ``$`` accepts a
trailing newline (``$`` matches before a final ``"\\n"``), so ``"9.9.9\\n"`` passed as a version and
``"<key id>\\n"`` as a revocation that revoked nothing (issue 20). A pattern used here carries no
anchors; the helper anchors it at both ends.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["IDENTIFIER", "fullmatch", "whole"]

#: A Python identifier in ASCII (kernel, parameter and module names as archives store them).
IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"


def fullmatch(pattern: re.Pattern[str], value: Any) -> bool:
    """True when ``value`` is a ``str`` and ``pattern`` matches all of it (never a prefix, never
    before a trailing newline)."""
    return type(value) is str and pattern.fullmatch(value) is not None


def whole(pattern: re.Pattern[str], value: Any) -> re.Match[str] | None:
    """:func:`fullmatch` for a caller that needs the groups: the match of all of ``value``, or None."""
    return pattern.fullmatch(value) if type(value) is str else None
