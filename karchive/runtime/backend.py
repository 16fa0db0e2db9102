"""Pick and cache the process-wide driver backend (CUDA or HIP) on first use.

Failure is remembered as the error to raise, so a machine without a GPU pays for the probe once and
every later launch fails fast with the same :class:`NoDeviceError` naming what is missing.
"""

from __future__ import annotations

import threading

from ..errors import NoDeviceError
from .driver_api import Backend

_lock = threading.Lock()
_backends: dict[str, Backend] = {}
_failures: dict[str, NoDeviceError] = {}


def _create(name: str) -> Backend:
    if name == "cuda":
        from .cuda_driver import CudaBackend

        return CudaBackend()
    if name == "hip":
        from .hip_driver import HipBackend

        return HipBackend()
    raise NoDeviceError(f"unknown backend {name!r}", backend=str(name))


def get_backend(name: str) -> Backend:
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
            b = _create(name)
        except NoDeviceError as exc:
            _failures[name] = exc
            raise
        _backends[name] = b
        return b


def first_available(names: list[str]) -> Backend:
    """The first backend among ``names`` that initialises; otherwise one error naming why each failed."""
    errors = []
    for name in names:
        try:
            return get_backend(name)
        except NoDeviceError as exc:
            errors.append(str(exc))
    if not errors:
        raise NoDeviceError("the archive holds no variant for any known backend", backend=",".join(names))
    raise NoDeviceError(errors[0] if len(errors) == 1 else "no usable GPU backend:\n  " + "\n  ".join(errors),
                        backend=",".join(names))
