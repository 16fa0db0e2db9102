"""karchive's import shim: ``triton.backends.compiler``. Empty on purpose: torch's ``runtime/hints.py`` imports it
and probes ``hasattr(..., "AttrsDescriptor")``, taking its Triton >= 3.3 branch when the name is absent."""

from __future__ import annotations

from ..runtime.driver import GPUTarget

__all__ = ["GPUTarget"]
