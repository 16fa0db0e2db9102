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

An **autotuned** call site (exactly ``triton.autotune`` over a plain JIT function, no config ``pre_hook``) takes
the same kind of fast path over the archive's kernel with its autotune resolver: the resolver's answer for a new
key (the recorded config, then karchive's selection among its variants) is confirmed with Triton's own
``Autotuner.run`` (``warmup=True``: Triton's key, its cache -- a library may have filled it --, its prune and the
archive's decision) and kept only if Triton's ``CompiledKernel`` is the same variant (and the same config as for
that variant's other keys); every launch then sets ``best_config`` to the config Triton chose before it launches,
as ``Autotuner.run`` does -- inside the dispatcher (the variant's ``set_result`` effect), so ``kernel[grid]`` is
the dispatcher's own subscript here too, with no Python step per launch on the compiled path. Heuristics call
sites, autotuner subclasses and configs with hooks keep Triton's path (their per-call Python -- the library's
heuristic functions, its own ``run``, hooks -- is what a library observes).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from ..errors import ArgumentError, NoMatchingVariantError
from ..runtime.launch._plan import Done
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


class _Confirming:
    """An autotune resolver whose answer for a new selection key is confirmed with Triton before it is kept."""

    def __init__(self, inner: Any, fast: TunedFastPath) -> None:
        self._inner = inner
        self._fast = fast

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def resolve(self, grid: Any, args: Sequence[Any], kwargs: Any, stream: Any, **kw: Any) -> Any:
        sub, cx = self._inner.resolve(grid, args, kwargs, stream, **kw)
        self._fast.confirm_tuned(sub, cx, args, kwargs)
        return sub, cx


class FastKernel(Kernel):
    """karchive's dispatcher over a served kernel's variants, handed to the call site as its ``kernel[grid]``: a new
    selection key is confirmed with Triton first; a call karchive cannot bind, resolve or select for, or whose key
    Triton answers otherwise, is answered by Triton's own run (a :class:`Done`: its result, or its error, nothing
    kept). An autotuned call site's has the archive's autotune resolver (its confirmation: :class:`_Confirming`)."""

    fast: FastPath
    answers_misses = True
    takes_stream = False

    def _miss(self, args: Sequence[Any], kwargs: dict[str, Any], grid: Any = None) -> Any:
        try:
            target = super()._miss(args, kwargs)
            self.fast.confirm(target.entry.variant, args, kwargs)
        except Exception as exc:  # noqa: BLE001 - _answer re-raises what it does not answer
            return self._answer(exc, grid, args, kwargs)
        return target

    def _answer(self, exc: Exception, grid: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> Done:
        """A call karchive refused, or whose key Triton answered otherwise: Triton's own run answers it."""
        if isinstance(exc, _Refer) and exc.args:  # Triton's own run answered this call with an error
            raise exc.args[0] from None
        if grid is None or not isinstance(exc, (NoMatchingVariantError, ArgumentError, _Refer)):
            raise exc  # (select()/bind(): no call to hand over; or not a refusal)
        return Done(self.fast.triton(grid, *self._as_called(args, kwargs)))

    def _as_called(self, args: Sequence[Any], kwargs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        """The call as the call site made it: the Python launch path hands misses every parameter in order, an
        omitted one as ``MISSING`` (Triton must see it omitted: its defaults, its errors)."""
        from ..runtime.select import MISSING

        names = self.param_names
        pos: list[Any] = []
        kw: dict[str, Any] = {}
        gap = False
        for i, v in enumerate(args):
            if v is MISSING:
                gap = True
            elif gap:
                kw[names[i]] = v
            else:
                pos.append(v)
        kw.update((k, v) for k, v in kwargs.items() if v is not MISSING)
        return pos, kw

    def _slow(self, grid: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
        """A call the compiled steps cannot bind (unknown keywords, odd arguments): Triton's own run says what it
        makes of it."""
        return self.fast.triton(grid, args, kwargs)


class FastPath:
    """One served plain JIT function's fast path (made at its first ``kernel[grid]`` while a session serves it)."""

    def __init__(
        self, jit: Any, boundary: Any, arc: Any, name: str, record: Any, triton_run: Callable[..., Any]
    ) -> None:
        self._start(jit, jit.pre_run_hooks, boundary, record, triton_run)  # triton_run: JITFunction.run
        self._use(FastKernel(arc, name, arc.variants(name)))

    def _start(self, jit: Any, hooks: list[Any], boundary: Any, record: Any, triton_run: Callable[..., Any]) -> None:
        """What every fast path holds: the call site, Triton's own dispatch of it, what Triton confirmed."""
        self.jit = jit
        self.boundary = boundary
        self.record = record
        self.triton_run = triton_run  # Triton's own dispatch
        self.on = True
        self.results: dict[str, Any] = {}
        self.globals: list[Any] = []  # Triton's used_global_vals of the kernel: checked before each fast launch
        #: the JIT function's live list of pre_run_hooks (hooks added later land in it): the fast path only while empty
        self.hooks = hooks

    def _use(self, k: FastKernel) -> None:
        """``k`` answers the call site's ``kernel[grid]``."""
        k.fast = self
        self.kernel = k
        self.run = k._run  # the compiled dispatcher (or the Python path): (grid, *args, stream=None, **kwargs)
        self.subscript = k.__getitem__  # kernel[grid] of the dispatcher (C where the extension is built)
        self.record.direct = True  # kernel[grid] is karchive's dispatcher: its launches are not counted

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
        self.globals = list(getattr(self.jit, "used_global_vals", {}).items())
        self.kernel.set_result(variant.key, compiled)

    def triton(self, grid: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
        """The call through Triton's own run (its binder, its errors; a compile reaches the boundary). ``stream`` is
        in ``kwargs`` only where the caller gave it (``FastKernel.takes_stream``): Triton refuses it."""
        return self.triton_run(self.jit, *args, grid=grid, warmup=False, **kwargs)

    def guarded(self, grid: Any, *args: Any, **kwargs: Any) -> Any:
        """``kernel[grid](...)`` of a kernel that read globals: Triton's run where one changed since it compiled
        (Triton raises for that), else karchive's dispatcher."""
        if self._globals_changed():
            return self.triton(grid, args, kwargs)
        return self.run(grid, *args, **kwargs)

    def _globals_changed(self) -> bool:
        missing = object()
        return any(scope.get(name, missing) != value for (name, _), (value, scope) in self.globals)

    def bound(self, grid: Any) -> Callable[..., Any]:
        """``kernel[grid]`` of a kernel that read globals: the globals check in front of the dispatcher (otherwise
        ``kernel[grid]`` is the dispatcher's own subscript: no Python step, misses and refusals answer inside it)."""
        return partial(self.guarded, grid)


class _WatchedCache(dict):
    """``Autotuner.cache`` of a served autotuned call site. Triton's ``run`` reads ``cache[key]`` on every call; the
    dispatcher remembers the config it confirmed for a key. So a change to an entry a confirmation read (a library's
    table loaded late, a re-tune) turns the fast path off: Triton's own run then reads the cache on every call, as
    without serving. Entries no confirmation read (Triton's run adding a key while a launch hook is set) change
    nothing karchive remembered. A reference to the dict taken before the call site's first served launch is not
    watched."""

    __slots__ = ("fast", "read")
    fast: TunedFastPath
    read: set[Any]  # the keys confirmations read (Triton's own autotune keys)

    def __getitem__(self, key: Any) -> Any:
        if self.fast.confirming == threading.get_ident():
            self.read.add(key)
        return super().__getitem__(key)

    def _changed(self, *keys: Any) -> None:
        """Entries ``keys`` (every entry: none given) change: the fast path ends where a confirmation read one."""
        if self.read and self.fast.confirming != threading.get_ident():
            if not keys or any(k in self.read for k in keys):
                self.fast.on = False

    def __setitem__(self, key: Any, value: Any) -> None:
        if self.get(key) is not value:
            self._changed(key)
        super().__setitem__(key, value)

    def __delitem__(self, key: Any) -> None:
        self._changed(key)
        super().__delitem__(key)

    def update(self, *args: Any, **kwargs: Any) -> None:
        new = dict(*args, **kwargs)
        changed = [k for k, v in new.items() if self.get(k) is not v]
        if changed:
            self._changed(*changed)
        super().update(new)

    def pop(self, key: Any, *default: Any) -> Any:
        self._changed(key)
        return super().pop(key, *default)

    def popitem(self) -> Any:
        self._changed()
        return super().popitem()

    def clear(self) -> None:
        self._changed()
        super().clear()


class TunedFastPath(FastPath):
    """The fast path of a served ``@triton.autotune`` call site (see the module's docstring)."""

    def __init__(
        self, tuner: Any, boundary: Any, arc: Any, name: str, record: Any, triton_run: Callable[..., Any]
    ) -> None:
        self._start(tuner, tuner.fn.pre_run_hooks, boundary, record, triton_run)  # triton_run: Autotuner.run
        self.config_of: dict[str, Any] = {}  # variant key -> the Config Triton chose for it (one per variant)
        self.confirmed: set[tuple[str, int, str]] = set()  # (autotune key, device, variant) Triton agreed on
        # one confirmation at a time: each reads best_config, which Autotuner.run sets on the shared autotuner
        self.lock = threading.Lock()
        self.confirming: int | None = None  # the thread confirming a key (its writes to the cache are Triton's)
        watched = _WatchedCache(tuner.cache)
        watched.fast, watched.read = self, set()
        tuner.cache = watched
        # this call site's own kernel (results are its own), answering refused calls with Triton's run
        k = arc._make_kernel(name, list(arc.variants(name)), False, FastKernel)
        self.tuning_key = getattr(k.resolver, "tuning_key")  # noqa: B009 - an AutotuneResolver (the boundary checked)
        k.resolver = _Confirming(k.resolver, self)
        self._use(k)  # the dispatcher's own kernel[grid]: each launch sets best_config in it

    def confirm_tuned(self, sub: Any, cx: dict[str, Any], args: Sequence[Any], kwargs: Any) -> None:
        if not all(_checkable(a) for a in args) or not all(_checkable(v) for v in kwargs.values()):
            self.on = False
            raise _Refer
        with self.lock:
            self.confirming = threading.get_ident()
            try:
                self._confirm_tuned(sub, cx, args, kwargs)
            finally:
                self.confirming = None

    def _confirm_tuned(self, sub: Any, cx: dict[str, Any], args: Sequence[Any], kwargs: Any) -> None:
        from triton.runtime import driver

        # Triton's autotune key holds no device: another device's first call is confirmed too (its CompiledKernel
        # is another object, which turns the fast path off, as for plain call sites)
        device = driver.active.get_current_device()
        try:
            variant = sub.select(*args, **kwargs, **cx)
        except (NoMatchingVariantError, ArgumentError):
            variant = None
        if variant is not None:  # the Python launch path resolves every call: one confirmation per key and variant
            memo = (repr(self.tuning_key(*args, **kwargs)), device, variant.key)
            if memo in self.confirmed:
                return
        try:
            compiled = self.triton_run(self.jit, *args, grid=(1,), warmup=True, **kwargs)
        except Exception as exc:  # Triton refused or missed the call: that is the call's answer (re-raised)
            self.on = False
            raise _Refer(exc) from exc
        config = getattr(self.jit, "best_config", None)
        served = getattr(compiled, "__dict__", {}).get("_karchive_served")
        known = self.results.get(served[1]) if served is not None else None
        if (
            variant is None
            or served is None
            or served[1] != variant.key
            or config is None
            or (known is not None and known is not compiled)
            or self.config_of.get(variant.key, config) is not config  # (one best_config per launched variant)
        ):
            self.on = False
            raise _Refer
        self.results[variant.key] = compiled
        self.config_of[variant.key] = config
        # the globals the JIT function under the autotuner read: kernel[grid] checks them first (FastPath.bound)
        self.globals = list(getattr(self.jit.fn, "used_global_vals", {}).items())
        self.confirmed.add((repr(self.tuning_key(*args, **kwargs)), device, variant.key))
        effect = (self.jit, "best_config", config)  # set by each launch before it launches, as Autotuner.run does
        self.kernel.set_result(variant.key, compiled, effect)
        sub.set_result(variant.key, compiled, effect)  # the kernel over the config's variants, which launches it
