"""Probes: what a heuristics record may read of a call's argument (spec/FORMAT.md §6.4), and scalars as JSON.

``dtype``, ``shape``, ``ndim``, ``numel()``, ``dim()``, ``element_size()``, ``size(i)``, ``stride(i)``: the
recorded cases (:mod:`.heuristics`) and the stored expressions (:mod:`.heuristics_expr`) read arguments
through these and nothing else. Below both, so that neither imports the other for them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from ..core.grammar import whole
from .autotune import json_scalar

__all__ = [
    "ABSENT",
    "NOT_SCALAR",
    "PROBE",
    "PROBE_ATTRS",
    "PROBE_METHODS",
    "probe_name",
    "probe_value",
    "run_probe",
    "scalar",
]

PROBE_ATTRS = ("dtype", "shape", "ndim")
PROBE_METHODS = ("numel", "dim", "element_size", "size", "stride")
PROBE = re.compile(r"(?:(dtype|shape|ndim)|(numel|dim|element_size|size|stride)\((\d{1,3}(?:,\d{1,3}){0,7})?\))")
#: Stands for an argument the call did not pass.
ABSENT: Any = object()


class _NotScalar:
    """Marks a value that has no JSON scalar form (a tensor, a dtype object, ...)."""

    __slots__ = ()


NOT_SCALAR: Any = _NotScalar()


def scalar(value: Any) -> Any:
    """The JSON form of a scalar argument or heuristic result, else :data:`NOT_SCALAR`."""
    out = json_scalar(value)
    if out is not NotImplemented:
        return out
    if isinstance(value, (tuple, list)) and len(value) <= 64:
        items = [scalar(v) for v in value]
        if not any(i is NOT_SCALAR or isinstance(i, list) for i in items):
            return items
    return NOT_SCALAR


def probe_name(method: str, args: Sequence[Any] = ()) -> str | None:
    """The probe spelling for ``x.method(*args)`` (``None`` when it is not a replayable probe)."""
    if method in PROBE_ATTRS:
        return method
    if method in PROBE_METHODS and all(type(a) is int and 0 <= a < 1000 for a in args) and len(args) <= 8:
        return f"{method}({','.join(str(a) for a in args)})"
    return None


def probe_value(value: Any) -> Any:
    """A probe's result as JSON: dtypes by ``str``, shapes (``torch.Size``, tuples) as lists of ints."""
    s = scalar(value)
    if s is not NOT_SCALAR:
        return s
    if isinstance(value, Iterable) and not isinstance(value, (str, bytes)):
        try:
            items = [scalar(v) for v in value]
        except TypeError:
            return str(value)
        if not any(i is NOT_SCALAR for i in items):
            return items
    return str(value)


def run_probe(obj: Any, spelling: str) -> Any:
    """Evaluate a probe (already validated by :data:`PROBE`) on a call's argument; raises on failure."""
    m = whole(PROBE, spelling)
    if m is None:
        raise ValueError(f"not a probe: {spelling!r}")
    if m.group(1):
        return probe_value(getattr(obj, m.group(1)))
    args = [int(a) for a in m.group(3).split(",")] if m.group(3) else []
    return probe_value(getattr(obj, m.group(2))(*args))
