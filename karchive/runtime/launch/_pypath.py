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
from typing import TYPE_CHECKING, Any
from collections.abc import Callable

from ...format.names import short_name
from .. import args as args_module
from ..args import pointer_info
from ..select import MISSING
from ._plan import ALIGN, DIV16, EQ1, FLOAT, INT, MIXED, PTR, RANGE, STREAM, VALUE, mixed_key

if TYPE_CHECKING:  # pragma: no cover
    from .kernel import Kernel

_CACHE_LIMIT = 4096  # keys hold dtype objects and types: bound the memory, start over


def launch_function_name(kernel: str) -> str:
    """The launch function's name (binding errors name it, on both paths): ``add_kernel_launch`` for
    ``pkg.ops:add_kernel``, a name Python could have given a function."""
    return f"{short_name(kernel)}_launch"


def build(kernel: Kernel) -> Callable[..., None]:
    """``kernel._run`` on the Python path: ``launch(grid, *args, stream=None, **kwargs)``."""
    plan = kernel.plan
    names = plan.names
    n = len(names)
    options = plan.options
    # position of each keyword a call may use: parameters, then launch options
    slot_of = {name: i for i, name in enumerate(names + options)}
    roles = tuple((p.role, p.flags) for p in plan.params)
    calls = plan.call_positions
    ptr_positions = plan.extracted
    cache = kernel._py_cache
    lock = threading.Lock()
    miss, slow, grid_of = kernel._miss, kernel._slow, kernel._grid_of
    qualname = launch_function_name(kernel.name)

    def key_of(vals: list[Any], ptrs: list[Any]) -> tuple[Any, ...]:
        """The selection key (raises for an argument whose pointer cannot be read)."""
        key: list[Any] = []
        tensor = args_module.TENSOR_TYPE
        for i, (role, flags) in enumerate(roles):
            a = vals[i]
            if role == PTR:
                t = type(a)
                if t is tensor:
                    p, d, v = a.data_ptr(), a.dtype, a.get_device()
                else:
                    p, d, v = pointer_info(a)
                ptrs[i] = p
                key += (t, d, v)
                if flags & ALIGN:
                    key.append(not p & 15)
            elif role == INT:
                key.append(type(a))
                if flags & EQ1:
                    key.append(a == 1)
                if flags & DIV16:
                    key.append(not a & 15)
                if flags & RANGE:
                    key.append(-2147483648 <= a <= 2147483647)
            elif role == FLOAT:
                key.append(type(a))
            elif role == VALUE:
                key += (type(a), a)
            elif role == MIXED:
                key.append(mixed_key(a))
        if options:
            opts = vals[n:]
            if any(o is not MISSING for o in opts):
                for o in opts:
                    key += (type(o), o)
        return tuple(key)

    def launch(grid: Any, *args: Any, stream: Any = None, **kwargs: Any) -> None:
        # 1. bind (Python's own binding error for a value given twice, as the generated function had)
        vals = list(args) + [MISSING] * (n + len(options) - len(args))
        if len(args) > n:
            return slow(grid, args, {**kwargs, STREAM: stream})
        for k, v in kwargs.items():
            j = slot_of.get(k)
            if j is None:
                return slow(grid, args, {**kwargs, STREAM: stream})
            if j < len(args):
                raise TypeError(f"{qualname}() got multiple values for argument {k!r}")
            vals[j] = v
        values = tuple(vals[:n])
        given = {o: vals[n + i] for i, o in enumerate(options) if vals[n + i] is not MISSING}
        # 2. key
        ptrs: list[Any] = [None] * n
        try:
            key = key_of(vals, ptrs)
        except Exception:  # noqa: BLE001 - an argument whose pointer cannot be read: the slow path says why
            return slow(grid, values, {**given, STREAM: stream})
        # 3. look up, or resolve
        try:
            target = cache[key]
        except KeyError:  # a key not seen before: full checks, selection, module load
            target = miss(values, given)
            with lock:
                if len(cache) >= _CACHE_LIMIT:
                    cache.clear()
                cache[key] = target
        except TypeError:  # an unhashable constexpr value: launch without caching
            return slow(grid, values, {**given, STREAM: stream})
        # 4. launch
        entry = target.entry
        if type(grid) is not tuple:
            grid = grid_of(grid, entry.meta, values)
        if stream is None:
            stream = 0 if target.stream_fn is None else target.stream_fn(entry.device)
        entry.launch(grid, stream, [ptrs[i] if i in ptr_positions else values[i] for i in calls])

    launch.__qualname__ = launch.__name__ = qualname
    launch.__doc__ = f"{kernel.name}[grid](...) on karchive's Python launch path."
    signature = _signature(names, options)
    if signature is not None:
        launch.__signature__ = signature  # type: ignore[attr-defined]  # help() and inspect show the kernel's names
    return launch


def _signature(names: tuple[str, ...], options: tuple[str, ...]) -> inspect.Signature | None:
    """``(grid, x_ptr, ..., *, stream=None, num_warps=..., ...)``; None when a name cannot be a Python parameter."""
    if not all(n.isidentifier() and not keyword.iskeyword(n) for n in names) or "grid" in names:
        return None
    P = inspect.Parameter
    params = [P("grid", P.POSITIONAL_ONLY)]
    params += [P(n, P.POSITIONAL_OR_KEYWORD, default=MISSING) for n in names]
    params += [P(STREAM, P.KEYWORD_ONLY, default=None)] + [P(o, P.KEYWORD_ONLY, default=MISSING) for o in options]
    return inspect.Signature(params)
