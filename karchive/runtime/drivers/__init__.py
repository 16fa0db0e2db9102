"""The driver backends, one module each, behind a registry of import strings (as fsspec's registry names its
filesystems): a backend's module is imported when a launch first asks for it, so importing karchive imports no
GPU binding, and the drivers import ``runtime/backend`` (the protocol they satisfy) without it importing them.

``"cuda"``: :class:`~.cuda.CudaBackend` over cuda-python; ``"hip"``: :class:`~.hip.HipBackend` over hip-python.
"""

from __future__ import annotations

import importlib
from typing import Any

#: Backend name -> ``"module:Class"`` of its implementation.
KNOWN: dict[str, str] = {
    "cuda": "karchive.runtime.drivers.cuda:CudaBackend",
    "hip": "karchive.runtime.drivers.hip:HipBackend",
}

__all__ = ["KNOWN", "backend_class"]


def backend_class(name: str) -> Any:
    """The class registered for ``name`` (its module imported now); KeyError for a name not registered."""
    module, _, cls = KNOWN[name].partition(":")
    return getattr(importlib.import_module(module), cls)
