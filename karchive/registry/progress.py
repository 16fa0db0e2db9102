"""Transfer progress on stderr: only when asked, or when stderr is a terminal (CLI default).

Plain text with carriage returns, so the registry works without ``rich``; short transfers stay
silent because nothing is drawn during the first half second.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

from ..core.units import human_bytes


class Progress:
    def __init__(
        self, label: str, total: int, stream: TextIO | None = None, delay: float = 0.5, interval: float = 0.2
    ) -> None:
        self.label = label
        self.total = total
        self.done = 0
        self.stream = stream or sys.stderr
        self._start = time.monotonic()
        self._delay = delay
        self._interval = interval
        self._last = 0.0
        self._drawn = False

    def update(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        if now - self._start >= self._delay and now - self._last >= self._interval:
            self._draw(now)

    def _draw(self, now: float) -> None:
        self._last = now
        self._drawn = True
        rate = self.done / max(now - self._start, 1e-6)
        pct = f"{100 * self.done / self.total:3.0f}%" if self.total else ""
        self.stream.write(
            f"\r{self.label}: {human_bytes(self.done)} / {human_bytes(self.total)} {pct} {human_bytes(rate)}/s   "
        )
        self.stream.flush()

    def close(self) -> None:
        if self._drawn:
            self._draw(time.monotonic())
            self.stream.write("\n")
            self.stream.flush()


class NoProgress:
    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def make_progress(enabled: bool | None, label: str, total: int) -> Progress | NoProgress:
    """``enabled=None`` means "if stderr is a terminal"."""
    if enabled is None:
        enabled = bool(getattr(sys.stderr, "isatty", lambda: False)())
    return Progress(label, total) if enabled else NoProgress()
