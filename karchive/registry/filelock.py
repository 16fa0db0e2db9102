"""An advisory inter-process lock on a file (``flock``): released by the kernel if the holder dies.

Used so that, of many processes pulling the same archive, one downloads and the others wait and
then reuse its verified file; and, shared (``shared=True``), by every reader of a cached archive, so
that ``cache prune`` (which takes it exclusively, without waiting) never deletes a file in use. Where ``fcntl`` does not exist the lock is a no-op: every process
downloads, and atomic rename still leaves one complete file.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from types import TracebackType

from ..errors import CacheError

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]  # None: the lock is a no-op (module docstring)


class FileLock:
    def __init__(self, path: Path, timeout: float = 900.0, poll: float = 0.05, *, shared: bool = False) -> None:
        self.path = path
        self.timeout = timeout
        self.poll = poll
        self.shared = shared  # LOCK_SH: many holders at once, none while someone holds it exclusively
        self._fd = -1

    def acquire(self, blocking: bool = True) -> bool:
        if fcntl is None:
            return True
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                fcntl.flock(fd, (fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
                self._fd = fd
                return True
            except BlockingIOError:
                if not blocking:
                    os.close(fd)
                    return False
                if time.monotonic() > deadline:
                    os.close(fd)
                    raise CacheError(
                        f"waited {self.timeout:.0f}s for another karchive process holding {self.path}; "
                        "it may be stuck downloading",
                        path=str(self.path),
                    ) from None
                time.sleep(self.poll)
            except OSError:  # no locking on this file system (ENOLCK ...): the caller decides, fd not leaked
                os.close(fd)
                raise

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # closing drops the flock
            self._fd = -1

    @property
    def held(self) -> bool:
        return self._fd >= 0

    def __copy__(self) -> FileLock:  # one lock, one descriptor: a copy closing it would release the original
        return self

    def __deepcopy__(self, memo: dict) -> FileLock:  # (dataclasses.asdict of a PullResult deep-copies)
        return self

    def __del__(self) -> None:  # a holder dropped without release() must not keep the lock (or the fd)
        try:
            self.release()
        except Exception:  # noqa: BLE001 - nothing may escape __del__ at interpreter teardown
            pass

    def __enter__(self) -> FileLock:
        self.acquire()
        return self

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.release()
