"""Text for people: archive content made safe for a terminal, aligned tables, counted nouns.

Below every layer that prints (the CLI's output module re-exports these; ``Archive.summary`` and the
reprs use them too), so a table or an escaped name looks the same wherever it appears.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["plural", "printable", "table"]


def printable(value: Any, keep: str = "") -> str:
    """Text from an archive, safe for a terminal: control characters (escape sequences) are shown
    escaped, never emitted. ``keep`` lists characters to pass through (e.g. newlines for IR)."""
    text = str(value)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c in keep else repr(c)[1:-1] for c in text)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, right: Sequence[str] = ()) -> str:
    """Plain aligned columns (no dependency, stable in logs and CI); cells are made printable."""
    cells = [[str(h) for h in headers]] + [["-" if c is None else printable(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for n, r in enumerate(cells):
        parts = [c.rjust(w) if headers[i] in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))]
        lines.append("  ".join(parts).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def plural(count: int, noun: str, many: str | None = None) -> str:
    """``1 variant``, ``2 variants`` (``many`` for irregular plurals)."""
    return f"{count} {noun if count == 1 else (many or noun + 's')}"
