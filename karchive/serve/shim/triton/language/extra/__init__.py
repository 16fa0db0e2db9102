"""karchive's import shim: ``triton.language.extra`` (``libdevice`` functions as inert stubs)."""

from __future__ import annotations

from .. import _stubs

__getattr__ = _stubs("extra.")
