"""Readable tables for people, JSON for machines: the one place CLI output is formatted."""

from __future__ import annotations

import json
import sys
from typing import Any

from ..core.text import plural, printable, table  # noqa: F401 - re-exported: the CLI formats text through here
from ..core.units import human_bytes  # noqa: F401 - re-exported: the CLI formats sizes through this module

#: Exit statuses, one table for every command (docs/cli.md); karchive.cli.main.exit_code_for maps errors.
EXIT_OK = 0  # success
EXIT_NEGATIVE = 1  # the command ran and its answer is "no": verify found damage, diff found differences,
#                    a --keep-going build with failed variants, an export that skipped variants
EXIT_ERROR = 2  # an error: a missing file, a bad argument, a refusal (every KarchiveError and OSError)
EXIT_PARTIAL = 3  # rebuild --check: no mismatch, but not everything could be reproduced
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT, as shells report it)
EXIT_BROKEN_PIPE = 141  # the reader of stdout went away (| head): 128 + SIGPIPE, what git's status is then


def emit_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")


def err(message: str) -> None:
    print(f"karchive: error: {printable(message, keep=chr(10))}", file=sys.stderr)
