"""Readable tables for people, JSON for machines: the one place CLI output is formatted."""

from __future__ import annotations

import json
import sys
from typing import Any

from ..core.text import plural, printable, table  # noqa: F401 - re-exported: the CLI formats text through here
from ..core.units import human_bytes  # noqa: F401 - re-exported: the CLI formats sizes through this module


def emit_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")


def err(message: str) -> None:
    print(f"karchive: error: {printable(message, keep=chr(10))}", file=sys.stderr)
