"""The pure-Python launch path: ``kernel[grid](...)`` as one plain function per kernel (:func:`build`).

It runs where the compiled launcher (``_fastlaunch``) is not built, or with ``KARCHIVE_LAUNCH_PATH=python``,
and does the same steps in the same order as ``dispatch()`` in ``_fastlaunch/dispatcher.c``, so both paths
select the same variants, pack the same bytes and raise the same errors (``tests/test_runtime_fastpath.py``
checks this call by call):

1. bind positional and keyword arguments to the kernel's parameters and launch options;
2. build the selection key (:mod:`._plan` says what it holds);
3. look the key up, or resolve it (``Kernel._miss``) and remember it;
4. resolve a callable grid and the default stream, and launch the variant (``LaunchEntry.launch``).

Calls it cannot bind or read go to ``Kernel._slow``, which says why.
"""

from __future__ import annotations

import inspect
import keyword
import threading
from collections.abc import Callable
from typing import Any

from ...format.names import short_name
from .. import args as args_module
from ..args import pointer_info
from ..select import MISSING
from ._plan import ALIGN, DIV16, EQ1, FLOAT, INT, MIXED, PTR, RANGE, STREAM, VALUE, Done, PlannedKernel, mixed_key

_CACHE_LIMIT = 4096  # keys hold dtype objects and types: bound the memory, start over


def launch_function_name(kernel: str) -> str:
    """The launch function's name (binding errors name it, on both paths): ``add_kernel_launch`` for
    ``pkg.ops:add_kernel``, a name Python could have given a function."""
    return f"{short_name(kernel)}_launch"


# Role codes of the loop below (small ints: one comparison each).
_R_PTR, _R_INT, _R_FLOAT, _R_VALUE, _R_MIXED = range(5)
_ROLE_CODE = {PTR: _R_PTR, INT: _R_INT, FLOAT: _R_FLOAT, VALUE: _R_VALUE, MIXED: _R_MIXED}
#: The key part of a plain int address (what ``pointer_info`` says of an int: no dtype, no device).
_INT_ADDRESS = (int, None, None)


def build(kernel: PlannedKernel) -> Callable[..., Any]:
    """``kernel._run`` on the Python path: ``launch(grid, *args, stream=None, **kwargs)``.

    Written for speed in plain Python: one pass over the parameters builds the key and the call values
    together, and what only a miss or the slow path needs (the values tuple, the options given) is made
    only there.
    """
    plan = kernel.plan
    names = plan.names
    n = len(names)
    options = plan.options
    # position of each keyword a call may use: parameters, then launch options
    slot_of = {name: i for i, name in enumerate(names + options)}.get
    params = tuple((_ROLE_CODE[p.role], p.flags) for p in plan.params)
    pad = (MISSING,) * (n + len(options))
    cache = kernel._py_cache
    lock = threading.Lock()
    miss, slow, grid_of = kernel._miss, kernel._slow, kernel._grid_of
    answers = getattr(kernel, "answers_misses", False)  # its _miss takes the grid and may answer a call itself
    qualname = launch_function_name(kernel.name)
    int_ = int

    def launch(grid: Any, /, *args: Any, stream: Any = None, **kwargs: Any) -> Any:
        # 1. bind (Python's own binding error for a value given twice, as a def with these parameters gives)
        nargs = len(args)
        if nargs > n:
            return slow(grid, args, with_stream(kwargs, stream))
        has_options = False
        if kwargs:
            vals = list(args + pad[nargs:])
            for k, v in kwargs.items():
                j = slot_of(k)
                if j is None:
                    return slow(grid, args, with_stream(kwargs, stream))
                if j < nargs:
                    raise TypeError(f"{qualname}() got multiple values for argument {k!r}")
                vals[j] = v
                if j >= n and v is not MISSING:
                    has_options = True
        else:
            vals = args + pad[nargs:]  # type: ignore[assignment]
        # 2. key, and the call values (pointers as their addresses) in the same pass
        key: list[Any] = []
        calls: list[Any] = []
        tensor = args_module.TENSOR_TYPE
        try:
            for a, (role, flags) in zip(vals, params):  # (vals may go on with the launch options)
                if role == _R_PTR:
                    t = type(a)
                    if t is tensor:
                        p = a.data_ptr()
                        key += (t, a.dtype, a.get_device())
                    elif t is int_:
                        p = a
                        key += _INT_ADDRESS
                    else:
                        p, d, dev = pointer_info(a)
                        key += (t, d, dev)
                    if flags & ALIGN:
                        key.append(not p & 15)
                    calls.append(p)
                    continue
                if role == _R_VALUE:
                    key += (type(a), a)
                    continue
                if role == _R_INT:
                    key.append(type(a))
                    if flags:
                        if flags & EQ1:
                            key.append(a == 1)
                        if flags & DIV16:
                            key.append(not a & 15)
                        if flags & RANGE:
                            key.append(-2147483648 <= a <= 2147483647)
                elif role == _R_FLOAT:
                    key.append(type(a))
                else:
                    key.append(mixed_key(a))
                calls.append(a)
            if has_options:
                for o in vals[n:]:
                    key += (type(o), o)
        except Exception:  # noqa: BLE001 - an argument whose pointer cannot be read: the slow path says why
            return slow(grid, tuple(vals[:n]), with_stream(_given(vals), stream))
        # 3. look up, or resolve
        try:
            target = cache[tuple(key)]
        except KeyError:  # a key not seen before: full checks, selection, module load
            target = miss(tuple(vals[:n]), _given(vals), grid) if answers else miss(tuple(vals[:n]), _given(vals))
            if answers and type(target) is Done:  # a miss the kernel answered itself: its result, nothing remembered
                return target.result
            with lock:
                if len(cache) >= _CACHE_LIMIT:
                    cache.clear()
                cache[tuple(key)] = target
        except TypeError:  # an unhashable constexpr value: launch without caching
            return slow(grid, tuple(vals[:n]), with_stream(_given(vals), stream))
        # 4. launch
        entry = target.entry
        if entry.effect is not None:  # (before the grid: Triton's Autotuner.run sets best_config first)
            setattr(*entry.effect)
        if type(grid) is not tuple:
            grid = grid_of(grid, entry.meta, tuple(vals[:n]))
        if stream is None:
            stream = 0 if target.stream_fn is None else target.stream_fn(entry.device)
        entry.launch(grid, stream, calls)
        return entry.result

    def _given(vals: Any) -> dict[str, Any]:
        """The launch options a call gave."""
        return {o: vals[n + i] for i, o in enumerate(options) if vals[n + i] is not MISSING}

    if not kernel.takes_stream:
        launch = without_stream(launch, slow)
    launch.__qualname__ = launch.__name__ = qualname
    launch.__doc__ = f"{kernel.name}[grid](...) on karchive's Python launch path."
    signature = _signature(names, options)
    if signature is not None:
        launch.__signature__ = signature  # type: ignore[attr-defined]  # help() and inspect show the kernel's names
    return launch


def with_stream(kwargs: dict[str, Any], stream: Any) -> dict[str, Any]:
    """The keywords the slow path gets: ``stream`` only where the call gave one."""
    return kwargs if stream is None else {**kwargs, STREAM: stream}


def without_stream(run: Callable[..., Any], slow: Callable[..., Any]) -> Callable[..., Any]:
    """``run`` of a kernel whose launch keywords do not include ``stream`` (``Kernel.takes_stream``): a call that
    gives one goes to the kernel's slow path as given."""

    def launch(grid: Any, /, *args: Any, **kwargs: Any) -> Any:
        if STREAM in kwargs:
            return slow(grid, args, kwargs)
        return run(grid, *args, **kwargs)

    return launch


def _signature(names: tuple[str, ...], options: tuple[str, ...]) -> inspect.Signature | None:
    """``(grid, x_ptr, ..., *, stream=None, num_warps=..., ...)``; None when a name cannot be a Python parameter."""
    if (
        not all(n.isidentifier() and not keyword.iskeyword(n) for n in names) or "grid" in names
    ):  # a signature cannot name "grid" twice
        return None
    P = inspect.Parameter
    params = [P("grid", P.POSITIONAL_ONLY)]
    params += [P(n, P.POSITIONAL_OR_KEYWORD, default=MISSING) for n in names]
    params += [P(STREAM, P.KEYWORD_ONLY, default=None)] + [P(o, P.KEYWORD_ONLY, default=MISSING) for o in options]
    return inspect.Signature(params)
