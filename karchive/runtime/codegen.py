"""Compile generated launch code once per *shape*, not once per kernel.

The dispatcher and launchers generate small Python functions specialised to a kernel's arity and
layout. ``compile()`` costs ~0.5-1 ms, which would dominate a cold start over many kernels, so the
source is written with placeholder parameter names and compiled once per distinct text; the real
parameter names are then patched into each function's code object (``co_varnames``), which is what
keyword binding uses. Executing a cached code object costs microseconds.
"""

from __future__ import annotations

import threading
from types import CodeType, FunctionType
from typing import Any, Sequence

_lock = threading.Lock()
_compiled: dict[str, CodeType] = {}


def build(source: str, globals_: dict[str, Any], label: str) -> dict[str, Any]:
    """Execute ``source`` (compiled at most once per process) in ``globals_``; return that namespace."""
    code = _compiled.get(source)
    if code is None:
        code = compile(source, f"<karchive {label}>", "exec")
        with _lock:
            if len(_compiled) > 2048:
                _compiled.clear()
            _compiled[source] = code
    exec(code, globals_)  # noqa: S102 - our own templates only
    return globals_


def rename_args(fn: FunctionType, placeholders: Sequence[str], names: Sequence[str]) -> FunctionType:
    """Give ``fn``'s placeholder parameters their real names (so ``f(BLOCK=...)`` binds by keyword)."""
    mapping = dict(zip(placeholders, names))
    code = fn.__code__
    fn.__code__ = code.replace(co_varnames=tuple(mapping.get(v, v) for v in code.co_varnames))
    return fn
