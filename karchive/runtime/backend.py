"""Pick and cache the process-wide driver backend (CUDA or HIP) on first use.

Failure is remembered as the error to raise, so a machine without a GPU pays for the probe once and
every later launch fails fast with the same :class:`NoDeviceError` naming what is missing.
"""

from __future__ import annotations

import threading
from typing import Any

from ..errors import NoDeviceError

_lock = threading.Lock()
_backends: dict[str, Any] = {}
_failures: dict[str, NoDeviceError] = {}


def get_backend(name: str) -> Any:
    """The backend for ``"cuda"`` or ``"hip"`` (initialising the driver the first time)."""
    b = _backends.get(name)
    if b is not None:
        return b
    with _lock:
        b = _backends.get(name)
        if b is not None:
            return b
        if name in _failures:
            raise _failures[name]
        try:
            if name == "cuda":
                from .cuda_driver import CudaBackend

                b = CudaBackend()
            elif name == "hip":
                from .hip_driver import HipBackend

                b = HipBackend()
            else:
                raise NoDeviceError(f"unknown backend {name!r}")
        except NoDeviceError as exc:
            _failures[name] = exc
            raise
        _backends[name] = b
        return b


def install_backend(name: str, backend: Any) -> None:
    """Use ``backend`` for ``name`` (tests only: a recording stand-in for hardware that does not exist here)."""
    with _lock:
        _backends[name] = backend
        _failures.pop(name, None)


def reset_backends() -> None:
    with _lock:
        _backends.clear()
        _failures.clear()


def first_available(names: list[str]) -> Any:
    """The first backend among ``names`` that initialises; otherwise one error naming why each failed."""
    errors = []
    for name in names:
        try:
            return get_backend(name)
        except NoDeviceError as exc:
            errors.append(str(exc))
    if not errors:
        raise NoDeviceError("the archive holds no variant for any known backend")
    raise NoDeviceError(errors[0] if len(errors) == 1 else "no usable GPU backend:\n  " + "\n  ".join(errors))
