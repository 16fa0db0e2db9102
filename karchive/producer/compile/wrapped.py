"""Ahead-of-time builds of ``@triton.autotune`` / ``@triton.heuristics`` kernels (spec/BUILD.md, "Autotuned
and heuristics kernels").

A request naming a wrapped kernel becomes one request per autotune config (its ``kwargs`` as constexprs,
its ``num_warps`` / ``num_stages`` / ``num_ctas`` / ``maxnreg`` as options) times the values of every
heuristics-computed constexpr, and the archive gets, as data:

- an autotune record (spec/FORMAT.md §6.3) with the key names, the configs, ``reset_to_zero`` /
  ``restore_value``, the names outer heuristics pass into the autotuner (they are part of Triton's key),
  and no entries: the runtime tunes a key on the device among the prebuilt configs;
- a heuristics record (§6.4) holding, per computed name, an expression
  (:mod:`karchive.format.heuristics_expr`) translated from the function's source, or nothing when it
  cannot be translated (the build then needs the name's values from the spec, and a caller passes it).

``prune_configs_by`` is not applied: its ``early_config_prune`` and ``perf_model`` are Python called with
the launch's arguments (and, in practice, the device's properties), none of which a build has. Every
config is built and the reason is recorded; the runtime benchmarks among them on the device.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...errors import KarchiveError, SpecFileError
from ...format.heuristics import OPTION_NAMES
from ...format.heuristics_expr import is_boolean
from ._heuristics_translate import Untranslatable, translate
from .kernel_ref import config_json, load_object, unwrap, wrappers

PRUNE_SKIPPED = ("prune_configs_by is not applied ahead of time: early_config_prune and perf_model take the "
                 "launch's arguments (and often the device), which a build has not; every config is built and "
                 "the device tunes among them")


@dataclass
class Stack:
    """What wraps one kernel: outermost first, each ``("autotune", Autotuner)`` or ``("heuristics", Heuristics)``."""

    layers: list[tuple[str, Any]]
    jit: Any

    @property
    def tuner(self) -> Any | None:
        return next((obj for kind, obj in self.layers if kind == "autotune"), None)

    def heuristics(self) -> list[tuple[str, Any, bool]]:
        """(name, function, outer) for every computed name, in Triton's evaluation order (outer layers first,
        each layer's names in order); ``outer``: computed before the autotuner sees the call."""
        out = []
        seen_tuner = False
        for kind, obj in self.layers:
            if kind == "autotune":
                seen_tuner = True
                continue
            for name, fn in getattr(obj, "values", {}).items():
                out.append((name, fn, not seen_tuner))
        return out


def stack_of(obj: Any) -> Stack:
    layers = []
    for w in wrappers(obj):
        if hasattr(w, "configs") and hasattr(w, "keys"):
            layers.append(("autotune", w))
        elif hasattr(w, "values"):
            layers.append(("heuristics", w))
        else:
            raise KarchiveError(f"{type(w).__name__} wraps the kernel; karchive knows @triton.autotune and "
                                "@triton.heuristics")
    return Stack(layers, unwrap(obj))


@dataclass
class WrappedPlan:
    requests: list  # VariantRequest, expanded
    autotune: list[dict] = field(default_factory=list)
    heuristics: list[dict] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _is_wrapped(ref: str, base_dir: str | None, cache: dict) -> Stack | None:
    key = (ref, base_dir)
    if key not in cache:
        try:
            obj, _module = load_object(ref, base_dir)
        except KarchiveError:  # not importable here (a remote executor's module): its compile says why
            cache[key] = None
            return None
        stack = stack_of(obj)
        cache[key] = stack if stack.layers else None
    return cache[key]


def expand(requests: list) -> WrappedPlan:
    """Requests with every wrapped kernel expanded (idempotent: expanded requests stay as they are), and
    the records the archive needs for them. A request's ``configs`` (indexes) selects the configs to build."""
    from .aot import VariantRequest

    stacks: dict = {}
    plan = WrappedPlan([])
    done: dict[str, tuple[dict | None, dict | None]] = {}
    for req in requests:
        stack = _is_wrapped(req.kernel_ref, req.base_dir, stacks)
        if stack is None:
            plan.requests.append(req)
            continue
        if req.kernel_ref not in done:
            done[req.kernel_ref] = _records(stack, plan.warnings, req.kernel_ref)
        if getattr(req, "expanded", False):
            plan.requests.append(req)
            continue
        params = {p.name for p in stack.jit.params}
        configs = list(stack.tuner.configs) if stack.tuner is not None else [None]
        chosen = req.configs
        if chosen is not None:
            bad = [i for i in chosen if not (isinstance(i, int) and 0 <= i < len(configs))]
            if bad or stack.tuner is None:
                raise SpecFileError(f"{req.label()}: configs = {chosen} does not index the autotuner's "
                                    f"{len(configs) if stack.tuner is not None else 0} configs")
            configs = [configs[i] for i in chosen]
        heur = [(name, fn) for name, fn, _outer in stack.heuristics()]
        for cfg in configs:
            cx = dict(req.constexprs)
            opts = dict(req.options)
            if cfg is not None:
                for k, v in cfg.kwargs.items():
                    if k not in params:
                        raise SpecFileError(f"{req.label()}: autotune config {cfg} sets {k!r}, which is not a "
                                            "parameter of the kernel")
                    cx[k] = v
                for k in OPTION_NAMES:
                    v = getattr(cfg, k, None)
                    if v is not None:
                        opts[k] = v
            variants = [(cx, opts)]
            for name, fn in heur:
                if name in cx or name in opts:
                    continue  # the spec (or the config) gives it
                values = _build_values(name, fn)
                if values is None:
                    raise SpecFileError(
                        f"{req.label()}: @triton.heuristics computes {name!r} at each call and its value is not "
                        f"a boolean karchive can enumerate; list the values to build, e.g. constexprs = "
                        f"{{ {name} = [...] }}" if name in params else
                        f"{req.label()}: @triton.heuristics computes {name!r}; list the values to build")
                variants = [({**c, name: v}, o) if name in params else (c, {**o, name: v})
                            for c, o in variants for v in values]
            for c, o in variants:
                plan.requests.append(VariantRequest(
                    kernel_ref=req.kernel_ref, signature=req.signature, target=req.target, constexprs=c, options=o,
                    include_ir=req.include_ir, base_dir=req.base_dir, env=dict(req.env), expanded=True))
    for at, he in done.values():
        if at is not None:
            plan.autotune.append(at)
        if he is not None:
            plan.heuristics.append(he)
    return plan


def _build_values(name: str, fn: Any) -> list | None:
    """The values to build for a computed name the spec does not give: both booleans for a boolean expression."""
    try:
        expr = translate(fn)
    except Untranslatable:
        return None
    return [False, True] if is_boolean(expr) else None


def _records(stack: Stack, warnings: list[str], ref: str) -> tuple[dict | None, dict | None]:
    kernel = stack.jit.__name__
    heur = stack.heuristics()
    at = None
    if stack.tuner is not None:
        t = stack.tuner
        at = {"kernel": kernel, "key_names": [str(k) for k in t.keys], "dtype_args": [],
              "configs": [config_json(c) for c in t.configs], "entries": [], "fallback": "nearest-log2",
              "origin": "aot", "key_rule": "triton",
              "reset_to_zero": [str(n) for n in getattr(t, "reset_to_zero", None) or []],
              "restore_value": [str(n) for n in getattr(t, "restore_value", None) or []],
              "outer_heuristics": [n for n, _fn, outer in heur if outer]}
        if getattr(t, "early_config_prune", None) is not None or getattr(t, "perf_model", None) is not None:
            at["prune"] = PRUNE_SKIPPED
            warnings.append(f"{ref}: {PRUNE_SKIPPED}")
        if getattr(t, "user_defined_pre_hook", False) or getattr(t, "user_defined_post_hook", False):
            warnings.append(f"{ref}: the autotuner's pre_hook/post_hook is Python the runtime cannot run; "
                            "it is not recorded")
    he = None
    if heur:
        exprs: dict[str, list] = {}
        for name, fn, _outer in heur:
            try:
                exprs[name] = translate(fn)
            except Untranslatable as exc:
                warnings.append(f"{ref}: heuristic {name!r} is not stored ({exc}); callers pass {name}=...")
        he = {"kernel": kernel, "names": [n for n, _f, _o in heur], "cases": {}, "exprs": exprs}
    return at, he


def align_kernel_names(records: list[dict], kernels: set[str]) -> list[dict]:
    """Records name a kernel by its function name; where the variants name it otherwise (``module:qualname``)
    the record takes the variants' name, when exactly one kernel fits."""
    out = []
    for r in records:
        name = r.get("kernel")
        if isinstance(name, str) and name not in kernels:
            fits = [k for k in kernels if k.rpartition(":")[2].rpartition(".")[2] == name]
            if len(fits) == 1:
                r = {**r, "kernel": fits[0]}
        out.append(r)
    return out
