"""One overall deadline for every registry operation (issue 20: a registry endpoint that accepted
connections and never answered kept ``karchive ls`` waiting past 25 minutes, each request waiting out
the client's own timeouts, then retried).

An *operation* is one public :class:`~karchive.registry.Registry` call (``ls``, ``resolve``, ``pull``,
``publish`` ...), or one ranged read of a lazily opened archive. Its budget, ``KARCHIVE_REGISTRY_TIMEOUT``
seconds (default :data:`DEFAULT_TIMEOUT`) or ``Registry(timeout=...)``, counts the time spent waiting on
the registry: every request, retry and backoff of the operation together. Work done locally between
requests (verifying a downloaded archive) does not count, and each chunk of archive bytes received
is progress that restarts the budget, so a large download is bounded by a stall, not by its size.
When the budget runs out the operation stops with a :class:`~karchive.errors.TransferError` naming
the registry and its endpoint; requests in flight are cancelled (fsspec's ``timeout``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass

from ..core import settings
from ..errors import RegistryValueError

TIMEOUT_ENV = settings.REGISTRY_TIMEOUT.name
DEFAULT_TIMEOUT = 60.0


def timeout_from_env() -> float:
    """``$KARCHIVE_REGISTRY_TIMEOUT`` in seconds (checked by the settings module), else :data:`DEFAULT_TIMEOUT`."""
    seconds = settings.registry_timeout()
    return DEFAULT_TIMEOUT if seconds is None else seconds


def check_timeout(value: object, what: str = "timeout") -> float:
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        seconds = float("nan")
    if isinstance(value, bool) or not seconds > 0 or seconds == float("inf"):
        raise RegistryValueError(f"{what} must be a positive number of seconds, not {value!r}", value=repr(value)[:200])
    return seconds


@dataclass
class Deadline:
    """The budget of one operation: ``seconds`` of waiting on the registry, ``spent`` so far."""

    seconds: float
    spent: float = 0.0
    _since: float | None = None  # when the wait now under way began

    def remaining(self) -> float:
        waiting = 0.0 if self._since is None else time.monotonic() - self._since
        return self.seconds - self.spent - waiting

    @contextlib.contextmanager
    def waiting(self) -> Iterator[None]:
        """Count the time inside as waiting on the registry (nested waits count once)."""
        if self._since is not None:
            yield
            return
        self._since = time.monotonic()
        try:
            yield
        finally:
            self.spent += time.monotonic() - self._since
            self._since = None

    def progress(self) -> None:
        """The registry delivered (a chunk of archive bytes): the budget starts again."""
        self.spent = 0.0
        if self._since is not None:
            self._since = time.monotonic()


_CURRENT: ContextVar[Deadline | None] = ContextVar("karchive_registry_deadline", default=None)


@contextlib.contextmanager
def operation(seconds: float) -> Iterator[Deadline]:
    """The current operation's deadline, or a new one of ``seconds`` if none is under way (an operation
    inside another, e.g. ``pull`` resolving a name, shares the outer one)."""
    current = _CURRENT.get()
    if current is not None:
        yield current
        return
    deadline = Deadline(seconds)
    token = _CURRENT.set(deadline)
    try:
        yield deadline
    finally:
        _CURRENT.reset(token)


def current() -> Deadline | None:
    return _CURRENT.get()


def progress() -> None:
    """Mark progress on the current operation, if any (see :meth:`Deadline.progress`)."""
    deadline = _CURRENT.get()
    if deadline is not None:
        deadline.progress()
