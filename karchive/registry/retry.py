"""Retries with exponential backoff for transient storage errors; everything else fails at once.

A transient error is one a second attempt can fix: connection resets, timeouts, throttling and
5xx answers. Missing objects, refused permissions and karchive's own errors are not retried.
"""

from __future__ import annotations

import random
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from ..core import settings
from ..errors import KarchiveError, RegistryError, TransferError
from .deadline import DEFAULT_TIMEOUT, TIMEOUT_ENV, Deadline, operation, timeout_from_env

T = TypeVar("T")
#: The longest ``Retry-After`` honoured before the next attempt (the deadline still bounds the whole).
MAX_RETRY_AFTER = 30.0

_PERMANENT = (
    FileNotFoundError,
    FileExistsError,
    PermissionError,
    IsADirectoryError,
    NotADirectoryError,
    KarchiveError,
    ValueError,
    TypeError,
    KeyError,
    NotImplementedError,
)
#: Exception class names (anywhere in the MRO) of network libraries we do not import.
_TRANSIENT_NAMES = {
    "ClientError",
    "ClientConnectionError",
    "ClientPayloadError",
    "ServerDisconnectedError",
    "ServerTimeoutError",
    "EndpointConnectionError",
    "ConnectionClosedError",
    "ReadTimeoutError",
    "ConnectTimeoutError",
    "IncompleteReadError",
    "ChunkedEncodingError",
}


def _status(exc: BaseException) -> int | None:
    for attr in ("status", "code", "status_code"):
        value = getattr(exc, attr, None)
        if isinstance(value, int) and 100 <= value < 600:
            return value
    return None


def cannot_resolve(exc: BaseException) -> bool:
    """A host name that does not resolve (no network, or a mistyped endpoint): asking again will not help.

    aiohttp (gcsfs, s3fs's aiobotocore, http) raises ``ClientConnectorDNSError`` from a ``socket.gaierror``;
    botocore/urllib3 wrap the ``gaierror`` too: look through the chain of causes.
    """
    seen = 0
    node: BaseException | None = exc
    while node is not None and seen < 16:
        if isinstance(node, socket.gaierror) or type(node).__name__ in (
            "ClientConnectorDNSError",
            "NameResolutionError",
        ):
            return True
        node, seen = node.__cause__ or node.__context__, seen + 1
    return False


def is_transient(exc: BaseException) -> bool:
    if isinstance(exc, _PERMANENT) or cannot_resolve(exc):
        return False
    status = _status(exc)
    if status is not None:
        return status >= 500 or status in (408, 429)
    if isinstance(exc, (ConnectionError, TimeoutError, OSError)):
        return True
    return any(cls.__name__ in _TRANSIENT_NAMES for cls in type(exc).__mro__)


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 5
    base_delay: float = 0.2
    max_delay: float = 5.0
    #: The operation's deadline (:mod:`.deadline`): seconds of waiting on the registry, retries included.
    timeout: float = DEFAULT_TIMEOUT

    @classmethod
    def from_env(cls) -> RetryPolicy:
        """``KARCHIVE_RETRIES`` (attempts), ``KARCHIVE_RETRY_DELAY`` (first backoff, seconds) and
        ``KARCHIVE_REGISTRY_TIMEOUT`` (the operation deadline, seconds)."""
        attempts, delay = settings.retries(), settings.retry_delay()  # checked there: a bad value is an error
        return cls(
            attempts=cls.attempts if attempts is None else attempts,
            base_delay=cls.base_delay if delay is None else delay,
            timeout=timeout_from_env(),
        )

    def delay(self, attempt: int) -> float:
        """Full-jitter exponential backoff, so many clients retrying at once spread out."""
        return random.uniform(0, min(self.max_delay, self.base_delay * (2**attempt)))

    def wait(self, attempt: int, exc: BaseException) -> float:
        """The backoff before the next attempt: at least the server's ``Retry-After`` where it sent one
        (an exception's ``retry_after`` seconds, as the OCI client raises on 429/503), capped at
        :data:`MAX_RETRY_AFTER`; the operation's deadline bounds it either way."""
        asked = getattr(exc, "retry_after", None)
        if isinstance(asked, (int, float)) and asked > 0:
            return max(self.delay(attempt), min(float(asked), MAX_RETRY_AFTER))
        return self.delay(attempt)

    def call(
        self,
        fn: Callable[[], T],
        what: str,
        sleep: Callable[[float], None] = time.sleep,
        *,
        registry: str | None = None,
    ) -> T:
        """Run ``fn``; transient errors are retried, then a :class:`TransferError`.

        Missing and existing objects (``FileNotFoundError``/``FileExistsError``) and karchive's own
        errors pass through for the caller to interpret; any other backend error becomes a karchive
        error, so no library exception escapes to the user. ``registry`` (its URL) fills the errors'
        ``registry`` field.
        """
        with operation(self.timeout) as deadline:
            return self._call(fn, what, sleep, deadline, registry)

    def _call(
        self, fn: Callable[[], T], what: str, sleep: Callable[[float], None], deadline: Deadline, registry: str | None
    ) -> T:
        last: BaseException | None = None
        for attempt in range(self.attempts):
            if deadline.remaining() <= 0:
                raise _too_late(what, deadline, attempt, last, registry)
            try:
                with deadline.waiting():
                    return fn()
            except BaseException as exc:
                if not isinstance(exc, Exception) or isinstance(
                    exc, (KarchiveError, FileNotFoundError, FileExistsError)
                ):
                    raise
                if isinstance(exc, PermissionError) or _status(exc) in (401, 403):
                    raise RegistryError(
                        f"{what}: access denied ({exc}); check the backend's credentials", registry=registry
                    ) from exc
                if not is_transient(exc):
                    raise TransferError(
                        f"{what} failed: {type(exc).__name__}: {exc}",
                        attempts=attempt + 1,
                        registry=registry,
                        url=registry,
                    ) from exc
                last = exc
                if deadline.remaining() <= 0:  # the request itself used up the budget (a silent server)
                    raise _too_late(what, deadline, attempt + 1, exc, registry) from exc
                if attempt + 1 >= self.attempts:
                    raise TransferError(
                        f"{what} failed after {self.attempts} attempts: {type(exc).__name__}: {exc}",
                        attempts=self.attempts,
                        registry=registry,
                        url=registry,
                    ) from exc
                with deadline.waiting():
                    sleep(min(self.wait(attempt, exc), max(0.0, deadline.remaining())))
        raise AssertionError("unreachable")


def _too_late(
    what: str, deadline: Deadline, attempts: int, last: BaseException | None, registry: str | None
) -> TransferError:
    why = (
        f"; last error: {type(last).__name__}: {last}"
        if last is not None and str(last)
        else (f"; last error: {type(last).__name__}" if last is not None else "")
    )
    return TransferError(
        f"{what}: no answer within {deadline.seconds:g} s, the registry deadline (${TIMEOUT_ENV} "
        f"or Registry(timeout=...)){why}",
        attempts=attempts,
        registry=registry,
        url=registry,
    )
