"""Which launch path new kernels use: the compiled launcher (``_fastlaunch``) or the pure-Python one.

``KARCHIVE_LAUNCH_PATH`` chooses, read when a kernel is made:

- unset or ``auto``: the compiled launcher when it is built (``pip install`` compiles it where a C
  compiler exists), else the Python path;
- ``python``: always the Python path (CI runs the suite this way too);
- ``extension``: the compiled launcher or an error at the first launch, never a silent fallback.

Both paths give identical results; ``karchive doctor`` says which one is active and why.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any, NamedTuple

from ..core import settings
from ..errors import RuntimeLoadError

ENV = settings.LAUNCH_PATH.name
EXTENSION, PYTHON, AUTO = "extension", "python", "auto"
#: The interface version this Python code expects of ``_fastlaunch`` (a stale build is not used).
ABI_VERSION = 8

_lock = threading.Lock()
_loaded: tuple[ModuleType | None, str] | None = None
_forced: str | None = None


class PathStatus(NamedTuple):
    """What ``karchive doctor`` reports about the launch path."""

    active: str  # EXTENSION | PYTHON: what a kernel made now uses (EXTENSION when asked for, even if missing)
    requested: str  # AUTO | EXTENSION | PYTHON (from the environment or :func:`forced`)
    built: bool  # the extension imports and matches this code
    detail: str  # where it was loaded from, or why it was not
    torch_reader: str  # how the extension reads torch tensors: "on: ..." (torch's C ABI) or "off: <why>"


def extension() -> ModuleType | None:
    """The compiled launcher module, or None when it is not built (or is stale)."""
    return _load()[0]


def _load() -> tuple[ModuleType | None, str]:
    global _loaded
    if _loaded is None:
        with _lock:
            if _loaded is None:
                try:
                    from . import _fastlaunch
                except ImportError as exc:
                    _loaded = (None, f"not built ({exc})")
                else:
                    version = getattr(_fastlaunch, "ABI_VERSION", None)
                    if version != ABI_VERSION:
                        _loaded = (
                            None,
                            f"stale build at {_fastlaunch.__file__} (interface {version}, this code "
                            f"needs {ABI_VERSION}): rebuild it (pip install -e .)",
                        )
                    else:
                        from . import _torch_abi
                        from .args import on_tensor_type

                        on_tensor_type(functools.partial(_torch_abi.install, _fastlaunch))
                        _loaded = (_fastlaunch, str(_fastlaunch.__file__))
    return _loaded


def subscript(python_getitem: Callable[[Any, Any], Any]) -> Any:
    """``Kernel.__getitem__``: the extension's (``kernel[grid]`` without a Python frame or a partial object),
    unless it is not built or ``KARCHIVE_LAUNCH_PATH=python`` when the runtime is imported; then
    ``python_getitem``. Both return a callable ``(*args, **kwargs)`` that calls ``kernel._run(grid, ...)``."""
    if requested() == PYTHON:
        return python_getitem
    module = extension()
    return python_getitem if module is None else module.subscript


def requested() -> str:
    if _forced is not None:
        return _forced
    value = (settings.launch_path() or AUTO).strip().lower() or AUTO
    return value if value in (AUTO, EXTENSION, PYTHON) else AUTO


def choose() -> str:
    """The path a kernel made now uses (an unusable ``extension`` request is reported at its first launch)."""
    want = requested()
    if want == PYTHON:
        return PYTHON
    if want == EXTENSION or extension() is not None:
        return EXTENSION
    return PYTHON


def require_extension() -> ModuleType:
    """The compiled launcher for a kernel on the extension path; a clear error when it is not there."""
    module, detail = _load()
    if module is None:
        raise RuntimeLoadError(
            f"{ENV}={requested()} asks for karchive's compiled launcher, which is {detail}; "
            f"build it (a C compiler and Python headers: pip install -e .) or set {ENV}=python"
        )
    return module


def status() -> PathStatus:
    module, detail = _load()
    want = requested()
    raw = settings.launch_path()
    if _forced is None and raw is not None and raw.strip().lower() not in ("", AUTO, EXTENSION, PYTHON):
        detail += f"; {ENV}={raw!r} is not one of auto, extension, python and was ignored"
    reader = "off: the extension is not loaded"
    if module is not None:
        from . import _torch_abi

        reader = _torch_abi.status(module)
    return PathStatus(choose(), want, module is not None, detail, reader)


@contextlib.contextmanager
def forced(path: str) -> Iterator[None]:
    """Kernels made inside the block use ``path`` (tests and benchmarks compare both in one process)."""
    global _forced
    if path not in (AUTO, EXTENSION, PYTHON):
        raise ValueError(f"launch path must be one of auto, extension, python, not {path!r}")
    before, _forced = _forced, path
    try:
        yield
    finally:
        _forced = before
