"""An advisory inter-process lock on a file (``flock``): released by the kernel if the holder dies.

Used so that, of many processes pulling the same archive, one downloads and the others wait and
then reuse its verified file. Where ``fcntl`` does not exist the lock is a no-op: every process
downloads, and atomic rename still leaves one complete file.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from types import TracebackType

from ..errors import TransferError

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]  # None: the lock is a no-op (module docstring)


class FileLock:
    def __init__(self, path: Path, timeout: float = 900.0, poll: float = 0.05) -> None:
        self.path = path
        self.timeout = timeout
        self.poll = poll
        self._fd = -1

    def acquire(self, blocking: bool = True) -> bool:
        if fcntl is None:
            return True
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self._fd = fd
                return True
            except BlockingIOError:
                if not blocking:
                    os.close(fd)
                    return False
                if time.monotonic() > deadline:
                    os.close(fd)
                    raise TransferError(
                        f"waited {self.timeout:.0f}s for another karchive process holding {self.path}; "
                        "it may be stuck downloading"
                    ) from None
                time.sleep(self.poll)

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # closing drops the flock
            self._fd = -1

    def __enter__(self) -> FileLock:
        self.acquire()
        return self

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.release()
