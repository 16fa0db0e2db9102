"""Human-readable quantities for CLI output and progress lines, and the one spelling of a time karchive writes."""

from __future__ import annotations

import datetime

__all__ = ["UTC_TIME", "human_bytes", "utc_text"]

#: Times in archives, records, policies and metadata: ISO 8601, UTC, whole seconds.
UTC_TIME = "%Y-%m-%dT%H:%M:%SZ"


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


def utc_text(t: datetime.datetime | float | None = None) -> str:
    """``t`` (a datetime, a POSIX timestamp, or None for now) as ``YYYY-MM-DDTHH:MM:SSZ``."""
    if t is None:
        t = datetime.datetime.now(datetime.timezone.utc)
    elif not isinstance(t, datetime.datetime):
        t = datetime.datetime.fromtimestamp(t, datetime.timezone.utc)
    return t.astimezone(datetime.timezone.utc).strftime(UTC_TIME)
