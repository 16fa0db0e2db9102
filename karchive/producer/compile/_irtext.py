"""Small parsers for parameter lists in compiler text (LLVM IR, Triton IR): brackets and quotes."""

from __future__ import annotations

_OPEN, _CLOSE = "([{<", ")]}>"


def enclosed(text: str, start: int) -> str | None:
    """The text from ``start`` (just after an opening parenthesis) to its matching ``)``."""
    depth, quoted = 0, False
    for i in range(start, len(text)):
        ch = text[i]
        if ch == '"':
            quoted = not quoted
        elif quoted:
            continue
        elif ch in _OPEN:
            depth += 1
        elif ch in _CLOSE:
            if depth == 0:
                return text[start:i] if ch == ")" else None
            depth -= 1
    return None


def split_top_level(text: str) -> list[str]:
    """Split on commas that are outside brackets and quotes; empty trailing parts are dropped."""
    parts: list[str] = []
    current: list[str] = []
    depth, quoted = 0, False
    for ch in text:
        if ch == '"':
            quoted = not quoted
        if not quoted:
            if ch in _OPEN:
                depth += 1
            elif ch in _CLOSE:
                depth -= 1
            elif ch == "," and depth == 0:
                parts.append("".join(current))
                current = []
                continue
        current.append(ch)
    if "".join(current).strip():
        parts.append("".join(current))
    return parts
