"""Routing unchanged ``kernel[grid](...)`` call sites to karchive's launcher (``karchive.serve``).

How a launch travels while serving:

1. ``KernelInterface.__getitem__`` (patched on the class, so kernels decorated before or after ``serve``
   are covered) finds the object's :class:`Route`, made once per object and session and kept on the object:
   the chain ``Heuristics* -> Autotuner? -> Heuristics* -> JITFunction`` under it, the live identity of the
   JIT function (:mod:`.identity`) and, where an archive holds that kernel with the same source digest, the
   archive's dispatcher (``arc.kernel(name)``: a ``Kernel``, with an autotune or heuristics resolver or none).
2. A served route hands back ``partial(route.launch, grid)``: heuristics above the autotuner are computed by
   the library's own functions, exactly as ``Heuristics.run`` does, and passed on as keywords; the autotune
   key, the config and the heuristics below the autotuner come from the archive's records (the runtime's
   resolver; nothing is benchmarked); then ``kernel[grid](...)`` launches through the compiled launcher.
3. ``run`` of ``JITFunction``, ``Autotuner`` and ``Heuristics`` is patched too, for call sites that call
   ``.run`` themselves and for libraries' own subclasses and wrappers (fla's ``CachedAutotuner.run`` ends in
   ``Autotuner.run``): the same route decides there.
4. A launch the archives cannot serve is a miss: ``strict`` raises :class:`ServeMissError` (Triton never
   compiles), ``fallback`` reports it once, records it (:mod:`.misses`) and lets Triton run the call,
   ``audit`` lets Triton run everything and reports what karchive would have served.

Triton's own run is entered with a thread-local depth above zero, so the layers under it go straight to
Triton (an autotuner's benchmark runs its JIT function through Triton, as without serving).
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

from ..errors import ArgumentError, KarchiveError, NoMatchingVariantError, ServeMissError
from .identity import LiveIdentity, find, live_identity
from .ledger import Report

STRICT, FALLBACK, AUDIT = "strict", "fallback", "audit"
MODES = (STRICT, FALLBACK, AUDIT)
ATTR = "_karchive_route"
#: Errors of the karchive launch path that mean "cannot serve this call" (anything else propagates).
MISS_ERRORS = (NoMatchingVariantError, ArgumentError)
_MEMO_LIMIT = 4096  # call shapes remembered per route (misses in fallback, answers in audit)


class _Depth(threading.local):
    depth = 0


_TLS = _Depth()
_SESSION_IDS = itertools.count(1)


def triton_classes() -> tuple[type, type, type, type]:
    """(KernelInterface, JITFunction, Autotuner, Heuristics) of the ``triton`` importable now (real or shim)."""
    from triton.runtime.autotuner import Autotuner, Heuristics
    from triton.runtime.jit import JITFunction, KernelInterface

    return KernelInterface, JITFunction, Autotuner, Heuristics


class Session:
    """One ``serve()``: the archives, the mode, the report, the misses log."""

    def __init__(self, archives: Sequence[Any], mode: str, misses: Any = None) -> None:
        self.archives = list(archives)
        self.mode = mode
        self.id = next(_SESSION_IDS)
        self.report = Report(mode, [f"{a.name}@{a.version}" for a in self.archives])
        self.misses = misses
        self.classes = triton_classes()
        self.lock = threading.Lock()

    def labels(self) -> tuple[str, ...]:
        return tuple(f"{a.name}@{a.version}" for a in self.archives)

    def lookup(self, live: LiveIdentity) -> tuple[list[tuple[Any, Any]], list[str]]:
        """[(archive, dispatcher)] of every archive serving ``live``, in the order given; else why not."""
        reasons: list[str] = []
        if live.digest is None:
            return [], [f"{live.name}: its source digest cannot be computed ({live.kind})"]
        found = []
        for arc in self.archives:
            name, why = find(arc, live)
            if name is not None:
                found.append((arc, arc.kernel(name)))
            reasons += why
        return found, reasons


class Route:
    """How launches of one kernel object go while one session serves (made once per object and session)."""

    def __init__(self, obj: Any, session: Session) -> None:
        ki, jit_type, autotuner_type, heuristics_type = session.classes
        self.session = session
        self.mode = session.mode
        self.obj = obj
        self.calls = 0
        self.memo: dict[Any, Any] = {}
        self.outer: list[tuple[Sequence[str], Mapping[str, Callable[..., Any]]]] = []
        self.kernel: Any = None
        self.archive: Any = None
        self.reasons: list[str] = []
        self.passthrough = False  # a library's own wrapper: its run decides, the JIT function's route serves
        self.extra: dict[str, Any] = {}  # a one-config autotuner's config, as Triton passes it
        self.alternates: list[tuple[str, Any]] = []  # (NAME@VERSION, kernel) of later archives, tried on a miss
        self.alt_calls: dict[str, int] = {}  # launches each later archive served (the report credits them exactly)
        self.fast: Callable[[Any], Any] | None = None  # obj[grid] -> launcher, for classes that keep Triton's run
        self.prep = False  # heuristics or a one-config autotuner's config to add before launching
        self.direct = False  # obj[grid] is the archive kernel's own launcher (strict, nothing to compute)
        self.can_direct = False
        self.saw_triton_objects = False  # a call passed tl.dtype / tl.constexpr objects as constexprs
        self.cx_pos: tuple[int, ...] = ()
        self.cx_names: frozenset[str] = frozenset()
        self.config_hooks = False  # the autotuner's configs carry pre_hooks: run the chosen one's (_config_hook)
        layers: list[tuple[str, Any]] = []
        x, jit = obj, None
        for _ in range(16):
            if isinstance(x, jit_type):
                jit = x
                break
            if isinstance(x, autotuner_type):
                layers.append(("autotune", x))
            elif isinstance(x, heuristics_type):
                layers.append(("heuristics", x))
            else:
                layers.append(("wrapper", x))
            x = getattr(x, "fn", None)
            if x is None:
                break
        self.jit = jit
        hooks = getattr(jit, "pre_run_hooks", None)
        self.hooks: list[Any] = hooks if isinstance(hooks, list) else []  # the live list: hooks added later count
        if jit is None:
            self.live = LiveIdentity(f"<{type(obj).__name__}>", "", None, "")
            self.reasons = [f"{type(obj).__name__} wraps no @triton.jit function karchive can find"]
            return
        self.live = live_identity(jit)
        if any(kind == "wrapper" for kind, _ in layers):
            self.passthrough = True
            return
        kinds = [k for k, _ in layers]
        first_at = kinds.index("autotune") if "autotune" in kinds else len(kinds)
        self.outer = [(h.arg_names, h.values) for k, h in layers[:first_at]]
        inner_h = {n for k, h in layers[first_at:] if k == "heuristics" for n in h.values}
        self.param_names = [p.name for p in getattr(jit, "params", [])]
        self.constexpr_names = {p.name for p in getattr(jit, "params", []) if getattr(p, "is_constexpr", False)}
        self.cx_pos = tuple(i for i, n in enumerate(self.param_names) if n in self.constexpr_names)
        self.cx_names = frozenset(self.constexpr_names)
        tuners = [a for k, a in layers if k == "autotune"]
        self.tuner = tuners[0] if tuners else None
        found, reasons = session.lookup(self.live)
        if not found:
            self.reasons = reasons
            return
        arc, kernel = found[0]
        self.alternates = [(f"{a.name}@{a.version}", k) for a, k in found[1:]]  # the same kernel, later archives
        resolver = getattr(kernel, "resolver", None)  # the Kernel's AutotuneResolver / HeuristicsResolver, if any
        if self.tuner is not None and not hasattr(resolver, "tuned_names"):
            configs = list(getattr(self.tuner, "configs", []) or [])
            if len(configs) != 1:
                self.reasons = [
                    f"{self.live.name} is autotuned at this call site ({len(configs)} configs) but "
                    f"{arc.name}@{arc.version} holds no tuning records for it"
                ]
                return
            self.extra = {k: v for k, v in configs[0].all_kwargs().items() if k != "ir_override"}
        # Configs with a pre_hook (the usual pattern of descriptor kernels: the hook sets each descriptor's block
        # for the config): Triton's run calls the chosen config's hook before the launch and leaves the choice in
        # best_config (Liger's fused MLP reads it); a served call does both (the hook is the library's own code).
        self.config_hooks = any(getattr(c, "pre_hook", None) for c in getattr(self.tuner, "configs", None) or [])
        if self.config_hooks and not hasattr(resolver, "chosen_config"):
            self.reasons = [
                f"{self.live.name}: a config of its autotuner has a pre_hook, and {arc.name}@"
                f"{arc.version} records no tuning that says which config a call launches"
            ]
            return
        recorded = set(getattr(getattr(resolver, "heuristics", None), "names", ()) or ())
        if inner_h - recorded:
            self.reasons = [
                f"{self.live.name}: the heuristics {sorted(inner_h - recorded)} under its autotuner "
                f"are not recorded in {arc.name}@{arc.version}"
            ]
            return
        if self.outer:  # the values its outer heuristics compute come from the library's own functions (launch)
            from ..runtime.autotuned import computed_by_caller

            names = [n for _arg_names, values in self.outer for n in values]
            kernel = computed_by_caller(kernel, names)
            self.alternates = [(label, computed_by_caller(k, names)) for label, k in self.alternates]
        self.kernel, self.archive = kernel, arc
        self.keys = set(getattr(self.tuner, "keys", None) or ())
        session.report.routed(self.live.name, f"{arc.name}@{arc.version}", self)
        self.prep = bool(self.outer or self.extra or self.config_hooks)
        self.fast = self._fast_path(obj, session)

    def _fast_path(self, obj: Any, session: Session) -> Callable[[Any], Any] | None:
        """What ``obj[grid]`` returns for a served call site whose class keeps Triton's ``run`` (None: ``obj[grid]``
        goes through ``run``): ``partial(self.launch, grid)``, one Python step before karchive's launcher (the
        heuristics, Triton objects passed as constexprs, the miss report, the fallback). In strict mode with
        nothing to compute first, after :data:`_WARM` launches that passed no Triton object, the route turns
        *direct* (:meth:`_go_direct`)."""
        if self.mode == AUDIT or type(obj).run is not _RUN_OF.get(type(obj)):
            return None
        self.can_direct = self.mode == STRICT and not (self.prep or self.alternates)
        return partial(partial, self.launch)

    def _go_direct(self) -> None:
        """``obj[grid]`` becomes the archive kernel's own ``kernel[grid]``: the call site then costs what
        ``arc.kernel(name)[grid](...)`` costs plus one Python step. A miss there raises the runtime's
        NoMatchingVariantError / ArgumentError (KarchiveErrors naming the kernel, the call and every variant's
        rejection), not counted in the report, nor are its launches."""
        if self.fast is not None and self.can_direct and not self.saw_triton_objects:
            self.fast = self.kernel.__getitem__
            self.direct = True

    # -- serving -------------------------------------------------------------------------------------------
    def launch(self, grid: Any, *args: Any, **kwargs: Any) -> Any:
        """One launch through karchive (``kernel[grid](...)`` of a served call site); a fallback miss returns
        what Triton's run returns."""
        if self.cx_pos:
            args, kwargs = self._plain_constexprs(args, kwargs)
        if self.prep:
            if self.outer:
                kwargs = self._heuristics(args, kwargs)
            if self.extra:
                kwargs = {**kwargs, **self.extra}
        if self.hooks:
            for hook in self.hooks:
                hook(*args, **kwargs)
        try:
            if self.config_hooks:
                self._config_hook(grid, args, kwargs)
            self.kernel[grid](*args, **kwargs)
        except MISS_ERRORS as exc:
            for label, other in () if self.config_hooks else self.alternates:  # a later archive may hold it
                try:
                    other[grid](*args, **kwargs)
                except MISS_ERRORS:
                    continue
                self.calls += 1
                self.alt_calls[label] = self.alt_calls.get(label, 0) + 1
                return None
            return self._missed(grid, args, kwargs, exc)
        self.calls += 1
        if self.calls == _WARM and self.can_direct:
            self._go_direct()
        return None

    def _config_hook(self, grid: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> None:
        """What Triton's ``Autotuner.run`` does around the launch of the config it chose: ``best_config`` set, the
        config's ``pre_hook`` called with the named arguments and the config's values. The config is the one the
        archive's records (or the device's tuning) choose for this call, matched to the call site's own ``Config``
        by its values and options; a config the call site does not have is a miss (its hook is unknown)."""
        tuner = self.tuner
        assert tuner is not None  # config_hooks is set only for a route with an autotuner
        cfg = self.kernel.resolver.chosen_config(grid, args, kwargs)
        values, options = dict(cfg["kwargs"]), dict(cfg["options"])
        matches = [
            c
            for c in tuner.configs
            if {k: v for k, v in c.kwargs.items()} == values
            and all(getattr(c, k, None) == v for k, v in options.items() if hasattr(c, k))
        ]
        if len({id(getattr(c, "pre_hook", None)) for c in matches}) != 1:
            raise NoMatchingVariantError(
                f"{self.live.name}: the archive's config {values} {options} matches "
                f"{'no' if not matches else len(matches)} config(s) of the call site's autotuner with one pre_hook",
                kernel=self.live.name,
                param=None,
            )
        config = matches[0]
        tuner.best_config = config
        if config.pre_hook is not None:
            config.pre_hook({**dict(zip(self.param_names, args)), **kwargs, **config.all_kwargs()})

    def _plain_constexprs(self, args: tuple, kwargs: dict[str, Any]) -> tuple[tuple, dict[str, Any]]:
        """Triton objects passed as constexprs, as an archive holds them: ``tl.constexpr(x)`` is ``x``, a
        ``tl.dtype`` is its name (``tl.float32`` -> ``"fp32"``), as Triton's own cache key spells it."""
        n = len(args)
        changed = None
        for i in self.cx_pos:
            if i < n and type(args[i]).__module__.startswith("triton"):
                changed = changed or list(args)
                changed[i] = _plain(args[i])
        for k, v in kwargs.items():
            if k in self.cx_names and type(v).__module__.startswith("triton"):
                kwargs = {**kwargs, k: _plain(v)}
                self.saw_triton_objects = True
        if changed is not None:
            self.saw_triton_objects = True
            args = tuple(changed)
        return args, kwargs

    def _heuristics(self, args: Sequence[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
        """What ``Heuristics.run`` does: each value computed from the named arguments, in order, as a keyword."""
        kwargs = dict(kwargs)
        for arg_names, values in self.outer:
            for name, heur in values.items():
                kwargs[name] = heur({**dict(zip(arg_names, args)), **kwargs})
        return kwargs

    def _missed(
        self,
        grid: Any,
        args: Sequence[Any],
        kwargs: dict[str, Any],
        exc: BaseException | None,
        warmup: bool = False,
        orig: Callable[..., Any] | None = None,
        obj: Any = None,
    ) -> Any:
        reason = _reason(exc) if exc is not None else "; ".join(self.reasons) or "not served"
        call = self.describe(args, kwargs)
        self.session.report.missed(self.live.name, reason, call)
        if self.mode == STRICT:
            rejections = (
                tuple(getattr(exc, "rejections", ()) or ())
                if exc is not None
                else tuple((self.live.name, r) for r in self.reasons)
            )
            raise ServeMissError(
                f"karchive.serve(strict): cannot serve {call}: {reason}. Triton was not asked to compile it; "
                f"archives: {', '.join(self.session.labels()) or '(none)'}",
                kernel=self.live.name,
                call=call,
                rejections=rejections,
                archives=self.session.labels(),
                param=getattr(exc, "param", None),
                values=tuple(getattr(exc, "values", ()) or ()),
            ) from exc
        if self.session.misses is not None and self.jit is not None:
            self.session.misses.add(self, args, kwargs, reason)
        sig = call_shape(self, args, kwargs)
        if sig is not None and len(self.memo) < _MEMO_LIMIT:
            self.memo[sig] = reason
            self.fast = None  # the memo is read on the run path
        return self.triton(obj if obj is not None else self.obj, orig, grid, warmup, args, kwargs)

    def triton(
        self,
        obj: Any,
        orig: Callable[..., Any] | None,
        grid: Any,
        warmup: bool,
        args: Sequence[Any],
        kwargs: dict[str, Any],
    ) -> Any:
        """Triton's own run of the call (layers below see depth > 0 and go to Triton too)."""
        _TLS.depth += 1
        try:
            if orig is not None:
                return orig(obj, *args, grid=grid, warmup=warmup, **kwargs)
            return obj.run(*args, grid=grid, warmup=warmup, **kwargs)
        finally:
            _TLS.depth -= 1

    def describe(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
        from ..runtime.args import describe_arg

        parts = [describe_arg(a) for a in args] + [f"{k}={describe_arg(v)}" for k, v in kwargs.items()]
        return f"{self.live.name}[grid]({', '.join(parts)})"

    # -- the patched run -----------------------------------------------------------------------------------
    def run(self, obj: Any, orig: Callable[..., Any], args: tuple, kwargs: dict[str, Any]) -> Any:
        grid = kwargs.pop("grid", None)
        warmup = bool(kwargs.pop("warmup", False))
        if self.passthrough:  # a wrapper karchive does not know: it runs, the JIT function's route serves
            return orig(obj, *args, grid=grid, warmup=warmup, **kwargs)
        if self.kernel is None:
            return self._missed(grid, args, kwargs, None, warmup, orig, obj)
        if self.mode == AUDIT:
            self.audit(args, kwargs)
            return self.triton(obj, orig, grid, warmup, args, kwargs)
        if warmup:  # nothing to compile: a served kernel is ready (strict); else Triton warms up as asked
            return None if self.mode == STRICT else self.triton(obj, orig, grid, warmup, args, kwargs)
        if self.memo:
            sig = call_shape(self, args, kwargs)
            if sig is not None and sig in self.memo:
                self.session.report.again(self.live.name, self.memo[sig])
                return self.triton(obj, orig, grid, warmup, args, kwargs)
        return self.launch(grid, *args, **kwargs)

    def audit(self, args: Sequence[Any], kwargs: dict[str, Any]) -> None:
        """Would karchive serve this call? (selection only, remembered per call shape)"""
        sig = call_shape(self, args, kwargs)
        if sig is not None and sig in self.memo:
            return
        if self.cx_pos:
            args, kwargs = self._plain_constexprs(tuple(args), kwargs)
        full = self._heuristics(args, kwargs) if self.outer else dict(kwargs)
        full.update(self.extra)
        try:
            label, variant = _select_any(
                [(f"{self.archive.name}@{self.archive.version}", self.kernel), *self.alternates], args, full
            )
            verdict: str | None = None
            self.session.report.would_serve(self.live.name, getattr(variant, "key", "")[:12], label)
        except MISS_ERRORS as exc:
            verdict = _reason(exc)
            self.session.report.missed(self.live.name, verdict, self.describe(args, kwargs))
        except KarchiveError as exc:  # no driver to select for: say so, once per shape
            verdict = f"cannot select here: {exc}"
            self.session.report.missed(self.live.name, verdict, self.describe(args, kwargs))
        if sig is not None and len(self.memo) < _MEMO_LIMIT:
            self.memo[sig] = verdict


#: Launches through :meth:`Route.launch` before a strict route with nothing to compute turns direct.
_WARM = 8


def _plain(value: Any) -> Any:
    inner = getattr(value, "value", value)
    return inner if inner is not value else str(value)


def _select_any(kernels: Sequence[tuple[str, Any]], args: Sequence[Any], kwargs: dict[str, Any]) -> tuple[str, Any]:
    """(archive, variant): what the first of ``kernels`` ((archive, kernel) pairs) that fits would launch (the
    first one's error if none fits)."""
    first: BaseException | None = None
    for label, k in kernels:
        try:
            return label, k.select(*args, **kwargs)
        except MISS_ERRORS as exc:
            first = first or exc
    assert first is not None
    raise first


def _reason(exc: BaseException) -> str:
    text = str(exc)
    return text if len(text) <= 4000 else text[:4000] + " ..."


def _hint(value: Any) -> Any:
    """What selection can read from a non-constexpr argument (a key as discriminating as karchive's)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return (int, value == 1, value % 16 == 0, -(2**31) <= value < 2**31)
    if isinstance(value, float):
        return float
    ptr = getattr(value, "data_ptr", None)
    if callable(ptr):
        dev = getattr(value, "device", None)
        return (type(value), str(getattr(value, "dtype", None)), str(dev), ptr() % 16 == 0)
    return type(value)


def call_shape(route: Route, args: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple | None:
    """A hashable key of a call for the route's memo: constexprs, launch options and autotune-key arguments by
    value, the rest by what selection reads (type, dtype, device, alignment, int hints); None if unhashable."""
    names = getattr(route, "param_names", [])
    exact = getattr(route, "constexpr_names", set()) | getattr(route, "keys", set())
    out: list[Any] = []
    for i, a in enumerate(args):
        n = names[i] if i < len(names) else None
        out.append(a if n in exact else _hint(a))
    for k, v in kwargs.items():
        out.append((k, v if (k in exact or k not in names) else _hint(v)))
    key = tuple(out)
    try:
        hash(key)
    except TypeError:
        return None
    return key


# -- the patches --------------------------------------------------------------------------------------------
_ACTIVE: dict[str, Any] = {"session": None, "patched": None}
_THREADS = "TORCHINDUCTOR_COMPILE_THREADS"


def active() -> Session | None:
    return _ACTIVE["session"]


def route_of(obj: Any, session: Session) -> Route:
    r = obj.__dict__.get(ATTR)
    if r is None or r.session is not session:
        r = Route(obj, session)
        obj.__dict__[ATTR] = r
    return r


def _make_getitem(orig: Callable[..., Any]) -> Callable[..., Any]:
    def __getitem__(self: Any, grid: Any) -> Any:
        s = _ACTIVE["session"]
        if s is not None and not _TLS.depth:
            r = self.__dict__.get(ATTR)
            if r is None or r.session is not s:
                r = route_of(self, s)
            fast = r.fast
            if fast is not None and not r.hooks:  # pre_run_hooks run in launch(): not on the direct path
                return fast(grid)
        return orig(self, grid)

    __getitem__._karchive_orig = orig  # type: ignore[attr-defined]
    return __getitem__


def _make_run(orig: Callable[..., Any]) -> Callable[..., Any]:
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        s = _ACTIVE["session"]
        if s is None or _TLS.depth:
            return orig(self, *args, **kwargs)
        return route_of(self, s).run(self, orig, args, kwargs)

    run._karchive_orig = orig  # type: ignore[attr-defined]
    return run


class _RunOf(dict):
    """type -> the run its instances reach when they do not override it (the patched run of its base)."""

    def get(self, tp: Any, default: Any = None) -> Any:
        hit = dict.get(self, tp)
        if hit is None:
            bases = _ACTIVE["patched"] or {}
            for base, (_orig, patched) in bases.items():
                if base != "__getitem__" and isinstance(base, type) and issubclass(tp, base):
                    hit = patched
                    break
            self[tp] = hit if hit is not None else False
        return hit


_RUN_OF = _RunOf()


def install(session: Session) -> None:
    """Serve ``session``: with real Triton at its compile boundary (:mod:`.boundary`: Triton's runtime dispatches,
    the archives supply binaries and tuning decisions); under the import shim, which has no runtime of its own, by
    routing the shim's launches (:func:`install_routes`). A second session replaces the first."""
    from . import boundary

    if getattr(sys.modules.get("triton"), "__karchive_shim__", False):
        install_routes(session)
        return
    boundary.install(session)
    _ACTIVE["session"] = session
    from .inductor_serve import active_inductor, install_inductor_on_import

    # torch.compile's autotuning answered from the archives' Inductor records (now where Inductor is loaded, else
    # when it is imported); its kernels' compiles reach the boundary like any other
    # Inductor compiles in worker processes unless told otherwise, and a worker's compile never reaches this
    # process's boundary: one thread, set before Inductor reads its configuration where it has not yet
    inductor_config = sys.modules.get("torch._inductor.config")
    if inductor_config is not None:
        inductor_config.compile_threads = 1  # type: ignore[attr-defined]
    elif "compile_threads" not in _ACTIVE:
        _ACTIVE["compile_threads"] = os.environ.get(_THREADS)  # given back at stop()
        os.environ[_THREADS] = "1"
    install_inductor_on_import(session)
    session.report.sources["inductor"] = lambda: (lambda s: s.to_json() if s is not None else None)(active_inductor())


def install_routes(session: Session) -> None:
    """Route launches to ``session`` (patching the classes once; a second session replaces the first)."""
    if _ACTIVE["patched"] is None:
        ki, jit_type, autotuner_type, heuristics_type = session.classes
        patched: dict[Any, tuple[Any, Any]] = {}
        for cls in (jit_type, autotuner_type, heuristics_type):
            orig = cls.__dict__["run"]
            patched[cls] = (orig, _make_run(orig))
            setattr(cls, "run", patched[cls][1])  # noqa: B010 - a class attribute of a Triton class
        orig_get = ki.__dict__["__getitem__"]
        patched["__getitem__"] = (orig_get, _make_getitem(orig_get))
        setattr(ki, "__getitem__", patched["__getitem__"][1])  # noqa: B010
        _ACTIVE["patched"] = patched
        _ACTIVE["classes"] = session.classes
        _RUN_OF.clear()
    _ACTIVE["session"] = session


def uninstall() -> Session | None:
    """Stop serving: the classes get their own methods back; returns the session that was active."""
    from . import boundary
    from .inductor_serve import uninstall_inductor

    uninstall_inductor()
    boundary.uninstall()
    if "compile_threads" in _ACTIVE:
        old = _ACTIVE.pop("compile_threads")
        if old is None:
            os.environ.pop(_THREADS, None)
        else:
            os.environ[_THREADS] = old
    s = _ACTIVE["session"]
    patched = _ACTIVE["patched"]
    if patched is not None:
        ki = _ACTIVE["classes"][0]
        for cls, (orig, _new) in patched.items():
            setattr(ki if cls == "__getitem__" else cls, "__getitem__" if cls == "__getitem__" else "run", orig)
        _ACTIVE["patched"] = None
        _RUN_OF.clear()
    _ACTIVE["session"] = None
    return s
