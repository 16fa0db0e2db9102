"""What the CLI prints from Python's logging: karchive's own warnings as one line, libraries' not at all.

Storage clients log their retries and give-ups with full tracebacks (gcsfs calls ``logger.exception``);
with no handler configured, Python's last-resort handler prints them to the terminal, ahead of the one
clear error karchive reports for the same failure. The CLI therefore installs one handler that prints
``karchive: warning: <message>`` without tracebacks, and silences the storage libraries' loggers (their
failures reach the user as karchive errors). ``KARCHIVE_DEBUG=1`` shows everything, tracebacks included.
"""

from __future__ import annotations

import logging
import sys

from ..core import settings
from .output import printable

#: Loggers of libraries whose failures karchive reports itself (as TransferError / RegistryError).
QUIET = ("gcsfs", "s3fs", "fsspec", "aiobotocore", "botocore", "urllib3", "asyncio", "google", "aiohttp")


class _OneLine(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return f"karchive: {record.levelname.lower()}: {printable(record.getMessage())}"


def configure() -> None:
    root = logging.getLogger()
    if settings.debug():
        logging.basicConfig(level=logging.DEBUG, stream=sys.stderr)
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_OneLine())
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    for name in QUIET:
        logging.getLogger(name).setLevel(logging.CRITICAL + 1)
