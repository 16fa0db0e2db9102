"""Human-readable quantities for CLI output and progress lines."""

from __future__ import annotations


def human_bytes(n: int | float | None) -> str:
    """``1536`` -> ``"1.5 KiB"``; binary units, whole bytes below 1 KiB; ``None`` -> ``"-"``."""
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


def plural(n: int, noun: str, plural_form: str | None = None) -> str:
    """``plural(1, "variant")`` -> ``"1 variant"``; ``plural(2, "variant")`` -> ``"2 variants"``."""
    return f"{n} {noun if n == 1 else (plural_form or noun + 's')}"
