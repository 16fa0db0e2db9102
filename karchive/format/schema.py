"""Access to the manifest's JSON Schema (the machine-readable half of spec/FORMAT.md)."""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources

__all__ = ["load_schema"]


@lru_cache(maxsize=1)
def load_schema() -> dict:
    return json.loads(resources.files(__package__).joinpath("manifest.schema.json").read_text())
