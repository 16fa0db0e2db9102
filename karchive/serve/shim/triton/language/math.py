"""karchive's import shim: ``triton.language.math`` (inert stubs: kernel bodies never run here)."""

from __future__ import annotations

from . import _stubs

__getattr__ = _stubs("math.")
