"""Find a Triton kernel from ``path/to/file.py:fn`` or ``package.module:fn``, and read the decorators around it
(``@triton.autotune`` configs as data, for both the ahead-of-time build and JIT capture)."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from types import ModuleType
from typing import Any

from ...errors import KernelNotFoundError
from ...format.autotune import json_scalar, normalize_value

__all__ = [
    "config_json",
    "is_jit",
    "kernel_names",
    "load_kernel",
    "load_module",
    "load_object",
    "split_ref",
    "unwrap",
    "wrappers",
]


def split_ref(ref: str) -> tuple[str, str]:
    where, sep, name = str(ref).rpartition(":")
    if not sep or not where or not name:
        raise KernelNotFoundError(
            f"bad kernel reference {ref!r}: expected 'path/to/file.py:fn' or 'package.module:fn'", ref=str(ref)
        )
    return where, name


def load_module(where: str, base_dir: str | None = None, ref: str | None = None) -> ModuleType:
    """The module ``where`` names (a file, relative to ``base_dir``, or a module); ``ref`` is the kernel
    reference it is loaded for, named by the errors (None: ``where`` itself)."""
    ref = where if ref is None else ref
    if where.endswith(".py") or os.sep in where or "/" in where:
        path = os.path.abspath(os.path.join(base_dir or os.getcwd(), where))
        if not os.path.isfile(path):
            raise KernelNotFoundError(f"kernel file not found: {path}", ref=ref)
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
            raise KernelNotFoundError(f"cannot import {path}", ref=ref)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            sys.modules.pop(name, None)
            raise KernelNotFoundError(f"importing {path} failed: {type(exc).__name__}: {exc}", ref=ref) from exc
        return module
    try:
        return importlib.import_module(where)
    except ImportError as exc:
        raise KernelNotFoundError(f"cannot import module {where!r}: {exc}", ref=ref) from exc


def is_jit(obj: Any) -> bool:
    """A ``@triton.jit`` function (JITFunction): its source, parameters and cache key. Triton 3.9's
    Autotuner and Heuristics also carry ``arg_names``, so that alone does not tell a kernel."""
    return (
        hasattr(obj, "arg_names")
        and hasattr(obj, "src")
        and hasattr(obj, "params")
        and not hasattr(obj, "configs")
        and not hasattr(obj, "values")
    )


def wrappers(obj: Any) -> list[Any]:
    """The ``@triton.autotune`` / ``@triton.heuristics`` objects around a kernel, outermost first."""
    out: list[Any] = []
    while not is_jit(obj) and hasattr(obj, "fn") and len(out) < 8:
        out.append(obj)
        obj = obj.fn
    return out


def unwrap(obj: Any) -> Any:
    """Autotuner/Heuristics wrap a JITFunction in ``.fn`` (possibly several times)."""
    seen = 0
    while not is_jit(obj) and hasattr(obj, "fn") and seen < 8:
        obj = obj.fn
        seen += 1
    return obj


def _option(value: Any) -> int | None:
    """A codegen option of a config as stored: an int (numpy ints converted) or None."""
    out = json_scalar(value)
    return out if isinstance(out, int) and not isinstance(out, bool) else None


def config_json(config: Any) -> dict:
    """A ``triton.Config`` as data: every value JSON-safe whatever type the library used."""
    kwargs = getattr(config, "kwargs", None) or {}
    out: dict[str, Any] = {
        "kwargs": {str(k): normalize_value(v) for k, v in sorted(kwargs.items(), key=lambda kv: str(kv[0]))},
        "num_warps": _option(getattr(config, "num_warps", None)),
        "num_stages": _option(getattr(config, "num_stages", None)),
        "num_ctas": _option(getattr(config, "num_ctas", None)),
        "maxnreg": _option(getattr(config, "maxnreg", None)),
    }
    if getattr(config, "ir_override", None):
        out["ir_override"] = str(config.ir_override)
    if getattr(config, "pre_hook", None) is not None:
        out["pre_hook"] = True  # Python code the runtime cannot replay; the caller must run it
    return out


def kernel_names(module: ModuleType) -> list[str]:
    """The Triton kernels a module defines at top level, wrapped (autotune, heuristics) or not."""
    out = []
    for k, v in vars(module).items():
        try:
            if is_jit(unwrap(v)):
                out.append(k)
        except Exception:  # noqa: BLE001 - a module attribute whose getattr misbehaves is simply not a kernel
            continue
    return sorted(out)


def load_object(ref: str, base_dir: str | None = None) -> tuple[Any, ModuleType]:
    """The object ``ref`` names (a kernel, or the autotuner/heuristics wrapping one) and its module.

    The name may be a dotted path below the module: ``matmul.fn`` (the kernel inside an autotuner, as
    Triton users write it) or ``Ops.kernel``.
    """
    where, name = split_ref(ref)
    module = load_module(where, base_dir, ref)
    obj: Any = module
    for part in name.split("."):
        if not part.isidentifier() or not hasattr(obj, part):
            kernels = kernel_names(module)
            raise KernelNotFoundError(
                f"{name!r} not found in {where}; Triton kernels there: {', '.join(kernels) or 'none'}",
                ref=ref,
                available=tuple(kernels),
            )
        obj = getattr(obj, part)
    return obj, module


def load_kernel(ref: str, base_dir: str | None = None) -> tuple[Any, ModuleType]:
    """Return ``(JITFunction, module)``; the error says what the name is if it is not a kernel."""
    obj, module = load_object(ref, base_dir)
    fn = unwrap(obj)
    if not is_jit(fn):
        raise KernelNotFoundError(
            f"{ref} is a {type(fn).__name__}, not a @triton.jit kernel", ref=ref, available=tuple(kernel_names(module))
        )
    return fn, module
