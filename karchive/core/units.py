"""Human-readable quantities for CLI output and progress lines."""

from __future__ import annotations

__all__ = ["human_bytes"]


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
