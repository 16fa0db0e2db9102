"""karchive's import shim: ``triton.language.math`` (inert stubs: kernel bodies never run here)."""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    from . import _Stub

    return _Stub(f"math.{name}")
