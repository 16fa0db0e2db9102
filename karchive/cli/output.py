"""Readable tables for people, JSON for machines: the one place CLI output is formatted."""

from __future__ import annotations

import json
import sys
from typing import Any, Sequence

from ..core.units import human_bytes  # noqa: F401 - re-exported: the CLI formats sizes through this module


def emit_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")


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


def err(message: str) -> None:
    print(f"karchive: error: {printable(message, keep=chr(10))}", file=sys.stderr)
