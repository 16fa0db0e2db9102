"""The fast path of a served plain call site: ``kernel[grid](...)`` through karchive's compiled dispatcher.

Serving at Triton's compile boundary (:mod:`.boundary`) keeps Triton's dispatch, and so its cost (binding, keying,
the cache lookup in Python: a few microseconds per launch). For a plain ``@triton.jit`` kernel an archive serves,
``kernel[grid]`` instead returns karchive's compiled dispatcher over the archive's variants, whose launches return
the ``CompiledKernel`` Triton returns for the same call -- proven per selection key, not assumed:

- a selection key karchive sees for the first time is also given to Triton's own ``run`` (``warmup=True``: binds,
  specialises, compiles -- through the boundary, so from the archive -- and launches nothing); the fast path keeps
  the key only if Triton's ``CompiledKernel`` is the variant karchive selected, and that kernel becomes what every
  later launch with that key returns (``Kernel.set_result``). karchive's key reads at least what Triton's
  specialisation reads for tensors and Python scalars (dtype, device, 16-byte alignment, ``== 1``, divisibility by
  16, integer range, constexpr values), so one agreement stands for the key;
- any disagreement, another device's ``CompiledKernel`` for the same variant, or an argument of another type
  turns the fast path off for that kernel for good; a call karchive cannot bind or select for goes to Triton's own
  path (its binder's errors, its defaults, its miss) -- nothing karchive-specific reaches the call site;
- ``kernel[grid]`` takes the fast path only while the kernel has no ``pre_run_hooks`` and Triton's
  ``launch_enter_hook``/``launch_exit_hook`` are unset (read on every ``kernel[grid]``); otherwise Triton's path.

Autotuned and heuristics call sites keep Triton's path (their per-call Python -- ``best_config``, hooks, the
library's heuristic functions -- is what a library observes).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from ..errors import ArgumentError, NoMatchingVariantError
from ..runtime.launch.kernel import Kernel


class _Refer(Exception):
    """Internal: this call is Triton's to dispatch (the fast path could not prove it would launch the same)."""


_PLAIN_TYPES = (int, float, bool, type(None), str)


def _checkable(value: Any) -> bool:
    """Values karchive's key reads at least as finely as Triton's specialisation: Python scalars, and pointer
    objects (``data_ptr()`` and a ``dtype``: torch tensors, and duck-typed buffers, whose dtype both read from the
    same object -- a first call per key that disagrees turns the fast path off)."""
    if isinstance(value, _PLAIN_TYPES):
        return True
    return callable(getattr(value, "data_ptr", None)) and hasattr(value, "dtype")


class FastKernel(Kernel):
    """karchive's dispatcher over a served kernel's variants; a new selection key is confirmed with Triton first."""

    fast: FastPath

    def _miss(self, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
        target = super()._miss(args, kwargs)
        self.fast.confirm(target.entry.variant, args, kwargs)
        return target


class FastPath:
    """One served plain JIT function's fast path (made at its first ``kernel[grid]`` while a session serves it)."""

    def __init__(self, jit: Any, boundary: Any, arc: Any, name: str, record: Any, triton_run: Callable[..., Any]) -> None:
        self.jit = jit
        self.boundary = boundary
        self.record = record
        self.triton_run = triton_run  # JITFunction.run: Triton's own dispatch
        self.on = True
        self.results: dict[str, Any] = {}
        k = FastKernel(arc, name, arc.variants(name))
        k.fast = self
        self.kernel = k
        self.run = k._run  # the compiled dispatcher (or the Python path): (grid, *args, stream=None, **kwargs)

    def confirm(self, variant: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> None:
        """Triton's own answer for a call with a new selection key: the same variant, or the fast path ends."""
        if not all(_checkable(a) for a in args) or not all(_checkable(v) for v in kwargs.values()):
            self.on = False
            raise _Refer
        try:
            compiled = self.triton_run(self.jit, *args, grid=(1,), warmup=True, **kwargs)
        except Exception as exc:  # Triton refused or missed the call: that is the call's answer (re-raised)
            self.on = False
            raise _Refer(exc) from exc
        served = getattr(compiled, "__dict__", {}).get("_karchive_served")
        if served is None or served[1] != variant.key:
            self.on = False
            raise _Refer
        known = self.results.get(variant.key)
        if known is not None and known is not compiled:  # another device's (or another cache's) CompiledKernel
            self.on = False
            raise _Refer
        self.results[variant.key] = compiled
        self.kernel.set_result(variant.key, compiled)

    def call(self, grid: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            out = self.run(grid, *args, **kwargs)
        except _Refer as refer:
            if refer.args:  # Triton's own run already answered this call with an error: the same error
                raise refer.args[0] from None
            return self.triton_run(self.jit, *args, grid=grid, warmup=False, **kwargs)
        except (NoMatchingVariantError, ArgumentError):
            return self.triton_run(self.jit, *args, grid=grid, warmup=False, **kwargs)
        self.record.calls += 1
        return out

    def bound(self, grid: Any) -> Callable[..., Any]:
        return partial(self.call, grid)
