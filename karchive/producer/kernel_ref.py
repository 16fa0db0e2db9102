"""Find a Triton kernel from ``path/to/file.py:fn`` or ``package.module:fn``."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from types import ModuleType
from typing import Any

from ..errors import KernelNotFoundError


def split_ref(ref: str) -> tuple[str, str]:
    where, sep, name = str(ref).rpartition(":")
    if not sep or not where or not name:
        raise KernelNotFoundError(f"bad kernel reference {ref!r}: expected 'path/to/file.py:fn' or 'package.module:fn'")
    return where, name


def load_module(where: str, base_dir: str | None = None) -> ModuleType:
    if where.endswith(".py") or os.sep in where or "/" in where:
        path = os.path.abspath(os.path.join(base_dir or os.getcwd(), where))
        if not os.path.isfile(path):
            raise KernelNotFoundError(f"kernel file not found: {path}")
        # The module is named after the file, never after its directory: keys must not see paths.
        name = os.path.splitext(os.path.basename(path))[0]
        existing = sys.modules.get(name)
        if existing is not None and os.path.abspath(getattr(existing, "__file__", "") or "") == path:
            return existing
        parent = os.path.dirname(path)
        if parent not in sys.path:
            sys.path.insert(0, parent)
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise KernelNotFoundError(f"cannot import {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            sys.modules.pop(name, None)
            raise KernelNotFoundError(f"importing {path} failed: {type(exc).__name__}: {exc}") from exc
        return module
    try:
        return importlib.import_module(where)
    except ImportError as exc:
        raise KernelNotFoundError(f"cannot import module {where!r}: {exc}") from exc


def unwrap(obj: Any) -> Any:
    """Autotuner/Heuristics wrap a JITFunction in ``.fn`` (possibly several times)."""
    seen = 0
    while not hasattr(obj, "arg_names") and hasattr(obj, "fn") and seen < 8:
        obj = obj.fn
        seen += 1
    return obj


def load_kernel(ref: str, base_dir: str | None = None) -> tuple[Any, ModuleType]:
    """Return ``(JITFunction, module)``; the error says what the name is if it is not a kernel."""
    where, name = split_ref(ref)
    module = load_module(where, base_dir)
    if not hasattr(module, name):
        kernels = sorted(k for k, v in vars(module).items() if hasattr(unwrap(v), "arg_names") and hasattr(unwrap(v), "src"))
        raise KernelNotFoundError(
            f"{name!r} not found in {where}; Triton kernels there: {', '.join(kernels) or 'none'}"
        )
    fn = unwrap(getattr(module, name))
    if not (hasattr(fn, "arg_names") and hasattr(fn, "src")):
        raise KernelNotFoundError(f"{ref} is a {type(fn).__name__}, not a @triton.jit kernel")
    return fn, module
