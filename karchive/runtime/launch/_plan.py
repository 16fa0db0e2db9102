"""What a kernel's call looks like to the launch path: a role per parameter and what the selection key reads.

A call ``kernel[grid](*args, **kwargs)`` is turned into a *selection key*: the facts about the arguments
that can change which variant runs. Both launch routes (the compiled one in ``_fastlaunch.c`` and the
pure-Python function of :mod:`._pypath`) read the key exactly as described here, and a call
whose key was seen before goes straight to its loaded variant; a new key runs the full checks
(:mod:`.select`).

Per parameter, by role:

``ptr``    the argument's Python type, its dtype object, its device (None unknown, -1 host, else the
           ordinal) and, where some variant takes the pointer ``:16``, whether the address is 16-byte aligned.
``int``    the argument's Python type and, where some variant specialises on them, ``== 1``, divisibility
           by 16 and whether it fits i32.
``float``  the argument's Python type.
``value``  the value itself and its type (constexprs, and the launch options ``num_warps=`` & co.).
``mixed``  constexpr in some variants, not in others (rare): :func:`mixed_key` of the value.

A parameter that was not passed is part of the key too (as "missing").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol

from ...errors import ArgumentError
from ...format.autotune import CONFIG_OPTIONS
from ...format.dtypes import INT_RANGES
from ...format.manifest import Variant
from ..args import pointer_info

#: Keyword arguments of a launch that select among variants, as Triton's ``kernel[grid](..., num_warps=8)``.
LAUNCH_OPTIONS = CONFIG_OPTIONS
#: The stream keyword (not part of the key).
STREAM = "stream"

PTR, INT, FLOAT, VALUE, MIXED = "ptr", "int", "float", "value", "mixed"

# Key flags (bits, shared with _fastlaunch.c).
ALIGN, EQ1, DIV16, RANGE = 1, 2, 4, 8


class ParamPlan(NamedTuple):
    """One kernel parameter as the launch path sees it."""

    name: str
    role: str  # PTR | INT | FLOAT | VALUE | MIXED
    flags: int  # ALIGN | EQ1 | DIV16 | RANGE: what the key records beyond the type
    required: bool  # every variant needs a value from the caller


class KernelPlan(NamedTuple):
    """The parameters, the launch options a call may add, and which values reach the binary."""

    kernel: str
    params: tuple[ParamPlan, ...]
    options: tuple[str, ...]  # launch options (LAUNCH_OPTIONS minus any the kernel uses as a parameter name)
    call_positions: tuple[int, ...]  # parameters passed on to the launcher (not constexpr in every variant)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    @property
    def extracted(self) -> frozenset[int]:
        """Positions whose device address is read during key building (so the launcher gets an int)."""
        return frozenset(i for i, p in enumerate(self.params) if p.role == PTR)


def option_value(variant: Variant, option: str) -> Any:
    """A variant's value of a launch option, as a caller would write it."""
    if option == "num_warps":
        return variant.abi.num_warps
    if option == "num_ctas":
        return variant.abi.num_ctas
    return variant.options.get(option)


def make_plan(kernel: str, variants: Sequence[Variant]) -> KernelPlan:
    """Roles and key flags per parameter position, over every variant of the kernel."""
    names = [p.name for p in variants[0].params]
    if STREAM in names:
        raise ArgumentError(
            f"{kernel}: a kernel parameter is named like the launch option {STREAM!r}", kernel=kernel, param=STREAM
        )
    params: list[ParamPlan] = []
    for i, name in enumerate(names):
        column = [v.params[i] for v in variants]
        # Each distinct parameter object once (the variants of a shard share them): what follows only
        # collects sets and flags, so repeats add nothing.
        ps = list(dict(zip(map(id, column), column)).values())
        kinds: set[str] = set()
        flags = 0
        for p in ps:
            if p.equal_to_1:
                kinds.add(INT)
                flags |= EQ1
            elif p.is_constexpr:
                kinds.add(VALUE)
            elif p.type.startswith("*"):
                kinds.add(PTR)
                if p.divisibility == 16:
                    flags |= ALIGN
            elif p.type in INT_RANGES:
                kinds.add(INT)
                if p.divisibility == 16:
                    flags |= DIV16
            else:
                kinds.add(FLOAT)
        if len({p.type for p in ps if not p.is_constexpr and p.type in INT_RANGES}) > 1:
            flags |= RANGE
        # An int that is == 1 in some variants and passed in others is still an int (its key records == 1).
        role = next(iter(kinds)) if len(kinds) == 1 else MIXED
        required = all(not p.is_constexpr or p.equal_to_1 for p in ps)
        params.append(ParamPlan(name, role, flags if role in (PTR, INT) else 0, required))
    options = tuple(o for o in LAUNCH_OPTIONS if o not in names)
    calls = tuple(i for i, p in enumerate(params) if p.role != VALUE)
    return KernelPlan(kernel, tuple(params), options, calls)


def mixed_key(value: Any) -> Any:
    """Key of a parameter that is constexpr in some variants only: its type plus what can decide."""
    if isinstance(value, bool) or value is None or isinstance(value, (str, float)):
        return (type(value), value)
    if isinstance(value, int):
        return (int, value == 1, value % 16 == 0, -(1 << 31) <= value < (1 << 31), value >= 0)
    ptr, dtype, dev = pointer_info(value)
    return ("ptr", type(value), dtype, dev, ptr % 16 == 0)


class Done:
    """A miss the kernel answered itself (``Kernel._miss`` may return one, on both launch paths): the call's
    result, nothing remembered. A served call site's dispatcher answers a call Triton must dispatch this way
    (serve/fast.py)."""

    __slots__ = ("result",)

    def __init__(self, result: Any) -> None:
        self.result = result


class PlannedKernel(Protocol):
    """What the two launch routes (:mod:`._pypath`, :mod:`._native`) read of a :class:`~.kernel.Kernel`: a
    protocol, so that neither imports kernel.py, which builds them (no import circle)."""

    name: str
    _py_cache: dict[Any, Any]
    resolver: Any  # the MetaResolver of a tuned or heuristics kernel; None for a plain one
    takes_stream: bool  # stream= is its launch keyword (not a served call site's: Triton refuses it)

    @property
    def plan(self) -> KernelPlan: ...

    @property
    def _candidates(self) -> tuple[Any, ...]: ...

    def _resolving_run(self, resolver: Any) -> Callable[..., Any]: ...

    def _miss(self, args: Sequence[Any], kwargs: dict[str, Any], grid: Any = None) -> Any: ...

    def _slow(self, grid: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> None: ...

    def _answer(self, exc: Exception, grid: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> Done: ...

    def _grid_of(self, grid: Any, meta: dict[str, Any], values: Sequence[Any]) -> Any: ...
