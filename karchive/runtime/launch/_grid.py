"""A callable grid, evaluated, and what it read: the compiled path remembers its result under that.

``kernel[lambda meta: (triton.cdiv(meta["n"], meta["BLOCK"]),)](...)`` is evaluated on the call's named
arguments plus the variant's meta-parameters (:func:`evaluate`, both launch paths). On the compiled path the
dispatcher keeps the result with the key's entry and takes it again without calling Python while *what the
grid read* is unchanged (``GridMemo`` in ``c-ext/dispatcher.c``). :func:`reads` decides when that is safe:

- the grid is a plain Python function (``def`` or ``lambda``) with no default values, and its closure cells
  hold only ``int``/``float``/``bool``/``str``/``None``, modules, functions or classes (compared on each call:
  identical, or the same type and ``==``);
- it read the mapping only by ``m[name]`` / ``m.get(name)`` / ``name in m`` (not iterated, copied or
  unpacked), and every call argument it read is such a scalar (compared on each call; the meta-parameters it
  read are the entry's, fixed);
- every global name its code uses is a module, a function, a class or such a scalar, each compared by
  identity on each call. Attributes of those modules (``triton.cdiv``) and builtins are taken as fixed, and
  the functions it calls as pure: a grid that calls something impure is not a grid Triton supports either.

Anything else (a tensor read through a closure or the mapping, ``**meta``, a callable object, a lambda with
defaults) is evaluated on every launch, as the Python path always does.
"""

from __future__ import annotations

import types
from collections.abc import Sequence
from typing import Any

from ..select import MISSING

_SCALARS = (int, float, bool, str, type(None))
_FIXED = (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, type)


class _Reading(dict):
    """The mapping a grid is called with, noting the names it reads (``whole``: it read more than names)."""

    __slots__ = ("read", "whole")

    def __init__(self, values: dict[str, Any]) -> None:
        super().__init__(values)
        self.read: set[str] = set()
        self.whole = False

    def __getitem__(self, name: Any) -> Any:
        self.read.add(name)
        return dict.__getitem__(self, name)

    def get(self, name: Any, default: Any = None) -> Any:
        self.read.add(name)
        return dict.get(self, name, default)

    def __contains__(self, name: Any) -> bool:
        self.read.add(name)
        return dict.__contains__(self, name)

    def __iter__(self) -> Any:
        self.whole = True
        return dict.__iter__(self)

    def keys(self) -> Any:
        self.whole = True
        return dict.keys(self)

    def items(self) -> Any:
        self.whole = True
        return dict.items(self)

    def values(self) -> Any:
        self.whole = True
        return dict.values(self)

    def __len__(self) -> int:
        self.whole = True
        return dict.__len__(self)

    def copy(self) -> dict[str, Any]:
        self.whole = True
        return dict(self)


def _reads_all(name: str) -> Any:
    method = getattr(dict, name)

    def whole(self: _Reading, *args: Any, **kwargs: Any) -> Any:
        self.whole = True
        return method(self, *args, **kwargs)

    whole.__name__ = name
    return whole


# every other way to look at the mapping reads all of it (or changes it): its answer is not remembered
for _name in (
    "setdefault",
    "pop",
    "popitem",
    "update",
    "__setitem__",
    "__delitem__",
    "__eq__",
    "__ne__",
    "__repr__",
    "__str__",
    "__or__",
    "__ror__",
    "__ior__",
    "__reduce__",
    "__reduce_ex__",
    "__reversed__",
    "clear",
):
    setattr(_Reading, _name, _reads_all(_name))


def evaluate(grid: Any, names: Sequence[str], meta: dict[str, Any], values: Sequence[Any]) -> Any:
    """The grid of a call: ``grid`` itself, or a callable grid's answer on the named arguments and ``meta``."""
    if not callable(grid):
        return grid
    named = {n: v for n, v in zip(names, values) if v is not MISSING}
    return grid({**named, **meta})


def evaluate_reading(
    grid: Any, names: Sequence[str], meta: dict[str, Any], values: Sequence[Any]
) -> tuple[Any, tuple[tuple[int, ...], tuple[str, ...]] | None]:
    """(the grid of a call, what it read: (parameter indices, global names), or None where its answer must
    not be remembered). Only a plain function is watched (:func:`reads`); anything else is :func:`evaluate`."""
    if type(grid) is not types.FunctionType or not _plain_function(grid):
        return evaluate(grid, names, meta, values), None
    named = {n: v for n, v in zip(names, values) if v is not MISSING}
    seen = _Reading({**named, **meta})
    dims = grid(seen)
    return dims, reads(grid, seen, names, meta, values)


def _fixed(value: Any) -> bool:
    """A value the memo may compare by identity (then ==): a scalar, a module, a function, a class."""
    return type(value) in _SCALARS or isinstance(value, _FIXED)


def _plain_function(fn: types.FunctionType) -> bool:
    try:
        cells = [c.cell_contents for c in fn.__closure__ or ()]
    except ValueError:  # an empty cell
        return False
    return fn.__defaults__ is None and not fn.__kwdefaults__ and all(_fixed(v) for v in cells)


def reads(
    fn: types.FunctionType, seen: _Reading, names: Sequence[str], meta: dict[str, Any], values: Sequence[Any]
) -> tuple[tuple[int, ...], tuple[str, ...]] | None:
    """What the compiled path compares before taking a remembered answer of ``fn`` (None: never remember)."""
    if seen.whole or not _plain_function(fn):
        return None
    index = {n: i for i, n in enumerate(names)}
    slots = []
    for name in sorted(seen.read, key=str):
        if name in meta:
            continue  # the entry's own value
        i = index.get(name) if type(name) is str else None
        if i is None or values[i] is MISSING or type(values[i]) not in _SCALARS:
            return None  # a name that is not given (its absence is not compared) or a value that is not a scalar
        slots.append(i)
    g = fn.__globals__
    used = tuple(n for n in _names(fn.__code__) if n in g)
    if not all(_fixed(g[n]) for n in used):
        return None
    return tuple(slots), used


def _names(code: types.CodeType) -> list[str]:
    """Every global or attribute name the code (and code nested in it) uses."""
    out = list(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            out += _names(c)
    return list(dict.fromkeys(out))
