"""The driver seam: what every backend (CUDA, HIP) gives the runtime, and the process-wide backend per driver.

:class:`Backend` is the one protocol between the launch path (:mod:`.launch`) and a driver binding:
``drivers/cuda.CudaBackend`` over cuda-python and ``drivers/hip.HipBackend`` over hip-python both satisfy
it, and nothing outside a backend touches the binding or the backend's caches. :func:`get_backend`
picks and caches one on first use; failure is remembered as the error to raise, so a machine without a
GPU pays for the probe once and every later launch fails fast with the same :class:`NoDeviceError`
naming what is missing. This module imports no binding (the backends are imported when first asked for).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager as ContextManager
from typing import Any, Protocol, runtime_checkable

from ..errors import ArgumentError, DriverError, NoDeviceError
from .device import DeviceInfo


class LoadedFunction:
    """A kernel loaded into one device's context: the driver's module and function handles."""

    __slots__ = ("module", "function", "context", "device")

    def __init__(self, module: Any, function: Any, context: Any, device: int) -> None:
        self.module, self.function, self.context, self.device = module, function, context, device


def stream_handle(obj: Any) -> int:
    """The raw stream value of an int, a torch/CuPy stream, a ``__cuda_stream__`` object or a binding's stream.

    Raises :class:`ArgumentError` for anything else, and for values that are not a 64-bit address.
    """
    if obj is None:
        return 0
    if isinstance(obj, int) and not isinstance(obj, bool):
        value = obj
    else:
        proto = getattr(obj, "__cuda_stream__", None)
        if proto is not None:
            got = proto() if callable(proto) else proto
            value = int(got[1])
        else:
            for attr in ("cuda_stream", "ptr", "handle"):  # torch.cuda.Stream, cupy.cuda.Stream, others
                got = getattr(obj, attr, None)
                if isinstance(got, int):
                    value = got
                    break
            else:
                try:
                    value = int(obj)  # cuda-python CUstream / hip-python hipStream_t
                except (TypeError, ValueError):
                    raise ArgumentError(
                        f"stream={obj!r}: expected an int handle or a torch/CuPy/__cuda_stream__ stream",
                        kernel=None,
                        param="stream",
                    ) from None
    if not 0 <= value < 1 << 64:
        raise ArgumentError(
            f"stream={obj!r}: {value} is not a stream handle (an address in [0, 2**64))", kernel=None, param="stream"
        )  # the same check for every kernel: not told which
    return value


class StreamCache:
    """The binding's stream object per raw handle, made once (``CUstream(h)`` costs more than a dict lookup).

    Owned by one backend; ``get`` is on the launch path of the pure-Python route.
    """

    __slots__ = ("_make", "_objects", "_lock", "_limit", "known")

    def __init__(self, make: Callable[[int], Any], limit: int = 4096) -> None:
        self._make = make
        self._objects: dict[int, Any] = {}
        self._lock = threading.Lock()
        self._limit = limit  # handles of destroyed streams are never told to us: bound the cache
        #: ``known(handle)``: the object already made for an int handle, else None (one C call, no frame).
        self.known: Callable[[int], Any] = self._objects.get

    def get(self, stream: Any) -> Any:
        """The binding's stream object for an int handle, None (stream 0) or a framework stream."""
        s = self._objects.get(stream) if type(stream) is int else None
        if s is not None:
            return s
        raw = stream_handle(stream)
        s = self._objects.get(raw)
        if s is None:
            s = self._make(raw)
            with self._lock:
                if len(self._objects) >= self._limit:
                    self._objects.clear()
                self._objects[raw] = s
        return s


class DriverBase:
    """What the CUDA and HIP backends share: checking a binding's result, the device-info cache, streams and
    handles. A subclass sets ``name``, ``d`` (the binding), ``SUCCESS``, ``count``, ``streams`` and ``_infos``,
    and gives ``error_text`` and ``_query_device``."""

    name: str
    d: Any
    SUCCESS: Any
    count: int
    streams: StreamCache
    _infos: dict[int, DeviceInfo]

    def error_text(self, err: Any) -> str:
        raise NotImplementedError

    def _query_device(self, index: int) -> DeviceInfo:
        raise NotImplementedError

    def check(self, result: Any, what: str) -> Any:
        """The value(s) after a binding's result code (None for a bare code), or :class:`DriverError`."""
        err = result[0] if isinstance(result, tuple) else result
        if err != self.SUCCESS:
            raise DriverError(f"{what} failed: {self.error_text(err)}", call=what, code=error_code(err))
        if not isinstance(result, tuple):
            return None
        return result[1] if len(result) == 2 else result[1:]

    def device_info(self, index: int) -> DeviceInfo:
        """The device's properties, queried once."""
        info = self._infos.get(index)
        if info is None:
            if not 0 <= index < self.count:
                raise NoDeviceError(
                    f"{self.name.upper()} device {index} does not exist ({self.count} visible)", backend=self.name
                )
            info = self._infos[index] = self._query_device(index)
        return info

    def stream(self, handle: Any) -> Any:
        """The binding's stream for an int handle or any stream object (torch, CuPy, ``__cuda_stream__``), cached."""
        return self.streams.get(handle)

    def handle_address(self, obj: Any) -> int:
        return int(obj)


def c_text(value: Any) -> str:
    """A binding's C string (bytes up to the first NUL; anything else as ``str``) as text."""
    if isinstance(value, bytes):
        return value.split(b"\0", 1)[0].decode(errors="replace")
    return str(value)


def error_code(err: Any) -> int | None:
    """The driver's numeric error code (the bindings give an enum member; an int where they give one)."""
    try:
        return int(err)
    except (TypeError, ValueError):
        return None


@runtime_checkable
class Backend(Protocol):
    """One GPU driver for the whole process (see :func:`get_backend`)."""

    name: str  # "cuda" | "hip"
    count: int  # visible devices
    driver_version: int | None
    context_errors: frozenset[int]  # driver results after which a launch is retried in the device's context
    streams: StreamCache  # the binding's stream objects per handle, owned by this backend

    def error_text(self, err: Any) -> str: ...

    # devices and contexts
    def device_info(self, index: int) -> DeviceInfo: ...
    def current_device(self) -> int: ...
    def has_current(self) -> bool: ...
    def make_current(self, index: int) -> None: ...
    def in_context(self, index: int) -> ContextManager[None]: ...

    # modules, memory, streams
    def load(self, index: int, image: bytes, entry: str, shared: int, num_ctas: int = 1) -> LoadedFunction: ...
    def alloc(self, index: int, nbytes: int) -> int: ...
    def free(self, index: int, ptr: int) -> None: ...
    def stream(self, handle: Any) -> Any:
        """The binding's stream object for an int handle or a framework stream (cached by the backend)."""
        ...

    def is_capturing(self, stream: Any) -> bool: ...
    def synchronize(self, stream: Any) -> None: ...

    # launching
    def launch(
        self, function: Any, gx: int, gy: int, gz: int, block_x: int, shared: int, stream: Any, kernel_params: int
    ) -> int:
        """One plain launch through the binding; returns the driver's result (0 = success)."""
        ...

    def launch_ex(
        self,
        function: Any,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        shared: int,
        stream: Any,
        kernel_params: int,
        cluster: tuple[int, int, int],
        cooperative: bool,
        pdl: bool,
    ) -> int:
        """A launch with clusters / cooperative grid / PDL attributes; returns the driver's result."""
        ...

    def launch_address(self) -> int | None:
        """The C address of the driver's plain launch function (``cuLaunchKernel`` / ``hipModuleLaunchKernel``),
        obtained through the binding, for the compiled launcher; None where the binding cannot give it."""
        ...

    def handle_address(self, obj: Any) -> int:
        """The raw value of a function or stream handle object of this binding."""
        ...


def plain_text(exc: BaseException) -> str:
    """A driver library's error message for people: hip-python formats names as ``b'libamdhip64.so'``
    (``failed to dlopen 'b'libamdhip64.so''``); show the bytes' text, not their repr."""
    text = re.sub(r"""b(['"])(.*?)\1""", lambda m: m.group(2), str(exc))
    return text.replace("''", "'").strip()


_lock = threading.Lock()
_backends: dict[str, Backend] = {}
_failures: dict[str, NoDeviceError] = {}


def _create(name: str) -> Backend:
    from .drivers import KNOWN, backend_class  # the registry of import strings (drivers/__init__.py)

    if name not in KNOWN:
        raise NoDeviceError(f"unknown backend {name!r} (known: {', '.join(sorted(KNOWN))})", backend=str(name))
    backend: Backend = backend_class(name)()
    return backend


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
    raise NoDeviceError(
        errors[0] if len(errors) == 1 else "no usable GPU backend:\n  " + "\n  ".join(errors), backend=",".join(names)
    )
