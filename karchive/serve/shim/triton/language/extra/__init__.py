"""karchive's import shim: ``triton.language.extra`` (``libdevice`` functions as inert stubs)."""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    from .. import _Stub

    return _Stub(f"extra.{name}")
