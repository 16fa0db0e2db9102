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
  cannot be translated (the build then needs the name's values from the spec; a direct launch is refused,
  since Triton computes the value from each call, while karchive.serve computes it with the library's function).

``prune_configs_by``: ``early_config_prune`` is applied per request with the spec's constexpr values where
it needs nothing else; ``perf_model`` / ``top_k`` never (they need the device). What was applied, and why
the rest was not, is recorded (:mod:`.prune`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ...errors import KarchiveError, SpecFileError
from ...format.autotune import CONFIG_OPTIONS
from ...format.heuristics_expr import ExprError, evaluate, is_boolean
from ._heuristics_translate import Untranslatable, translate
from .kernel_ref import config_json, load_object, unwrap, wrappers
from .prune import PruneOutcome, early_prune


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
            raise KarchiveError(
                f"{type(w).__name__} wraps the kernel; karchive knows @triton.autotune and @triton.heuristics"
            )
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


def expand(requests: list, path: str | None = None) -> WrappedPlan:
    """Requests with every wrapped kernel expanded (idempotent: expanded requests stay as they are), and
    the records the archive needs for them. A request's ``configs`` (indexes) selects the configs to build.
    ``path``: the spec file the requests came from, named by the errors (None: no spec file)."""
    from .aot import VariantRequest

    stacks: dict = {}
    pruned: dict[str, PruneOutcome] = {}
    plan = WrappedPlan([])
    done: dict[str, tuple[dict | None, dict | None]] = {}
    for req in requests:
        stack = _is_wrapped(req.kernel_ref, req.base_dir, stacks)
        if stack is None:
            plan.requests.append(req)
            continue
        if req.kernel_ref not in done:
            done[req.kernel_ref] = _records(stack, plan.warnings, req.kernel_ref)
        params = {p.name for p in stack.jit.params}
        outcome = _prune(stack, req, params, pruned)
        if getattr(req, "expanded", False):
            plan.requests.append(req)
            continue
        configs = list(stack.tuner.configs) if stack.tuner is not None else [None]
        chosen = req.configs
        if chosen is not None:
            bad = [i for i in chosen if not (isinstance(i, int) and 0 <= i < len(configs))]
            if bad or stack.tuner is None:
                raise SpecFileError(
                    f"{req.label()}: configs = {chosen} does not index the autotuner's "
                    f"{len(configs) if stack.tuner is not None else 0} configs",
                    path=path,
                )
        indexes = list(chosen) if chosen is not None else list(range(len(configs)))
        if outcome is not None and outcome["applied"]:
            indexes = [i for i in indexes if i in outcome["kept"]]
        configs = [configs[i] for i in indexes]
        heur = [(name, fn) for name, fn, _outer in stack.heuristics()]
        for cfg in configs:
            cx = dict(req.constexprs)
            opts = dict(req.options)
            if cfg is not None:
                for k, v in cfg.kwargs.items():
                    if k not in params:
                        raise SpecFileError(
                            f"{req.label()}: autotune config {cfg} sets {k!r}, which is not a parameter of the kernel",
                            path=path,
                        )
                    cx[k] = v
                for k in CONFIG_OPTIONS:
                    v = getattr(cfg, k, None)
                    if v is not None:
                        opts[k] = v
            variants = [(cx, opts)]
            nones = _none_args(stack, req.signature)
            for name, fn in heur:
                if name in cx or name in opts:
                    continue  # the spec (or the config) gives it
                values = _build_values(name, fn, {**nones, **cx})
                if values is None:
                    raise SpecFileError(
                        f"{req.label()}: @triton.heuristics computes {name!r} at each call and its value is not "
                        f"a boolean karchive can enumerate; list the values to build, e.g. constexprs = "
                        f"{{ {name} = [...] }}"
                        if name in params
                        else f"{req.label()}: @triton.heuristics computes {name!r}; list the values to build",
                        path=path,
                    )
                variants = [
                    ({**c, name: v}, o) if name in params else (c, {**o, name: v}) for c, o in variants for v in values
                ]
            for c, o in variants:
                plan.requests.append(
                    VariantRequest(
                        kernel_ref=req.kernel_ref,
                        signature=req.signature,
                        target=req.target,
                        constexprs=c,
                        options=o,
                        include_ir=req.include_ir,
                        base_dir=req.base_dir,
                        env=dict(req.env),
                        expanded=True,
                    )
                )
    for ref, (at, he) in done.items():
        if at is not None:
            _record_pruning(at, _stack_of(stacks, ref), pruned.get(ref), plan.warnings, ref)
            plan.autotune.append(at)
        if he is not None:
            plan.heuristics.append(he)
    return plan


def _prune(stack: Stack, req: Any, params: set[str], pruned: dict[str, PruneOutcome]) -> dict[str, Any] | None:
    """``early_config_prune`` with the spec's constexprs (an expanded request's, less what the configs and
    heuristics set: the same arguments, so the same outcome, recorded once)."""
    tuner = stack.tuner
    if tuner is None or getattr(tuner, "early_config_prune", None) is None:
        return None
    known = dict(req.constexprs)
    if getattr(req, "expanded", False):
        tuned = {k for c in tuner.configs for k in getattr(c, "kwargs", {})}
        computed = {name for name, _fn, _outer in stack.heuristics()}
        known = {k: v for k, v in known.items() if k not in tuned and k not in computed}
    outcome = early_prune(tuner, known, params)
    pruned.setdefault(req.kernel_ref, PruneOutcome()).add(outcome)
    return outcome


def _stack_of(stacks: dict, ref: str) -> Stack | None:
    return next((st for (r, _base), st in stacks.items() if r == ref and st is not None), None)


def _record_pruning(at: dict, stack: Stack | None, outcome: PruneOutcome | None, warnings: list[str], ref: str) -> None:
    """The record's ``prune`` (one line) and ``pruning`` (per part: applied with which arguments and which
    configs kept, or the reason it was not), and the same line as a build warning."""
    tuner = stack.tuner if stack is not None else None
    if tuner is None:
        return
    outcome = outcome or PruneOutcome()
    if getattr(tuner, "perf_model", None) is not None:
        outcome.perf_model, outcome.top_k = True, getattr(tuner, "configs_top_k", None)
    if not outcome.early and not outcome.perf_model:
        return
    at["prune"] = outcome.summary()
    at["pruning"] = outcome.record()
    warnings.append(f"{ref}: {at['prune']}")


def _none_args(stack: Stack, signature: Any) -> dict[str, None]:
    """The parameters the request's signature gives as ``None`` (an argument the calls pass as None: Triton
    compiles it as the constexpr None), so heuristics that read only those and the spec's constexprs are
    evaluated at build time instead of built both ways (``IS_VARLEN = cu_seqlens is not None``)."""
    from .signature import split_signature

    names = [p.name for p in stack.jit.params]
    if isinstance(signature, Mapping):
        return {n: None for n, t in signature.items() if str(t).strip() == "None"}
    try:
        entries = split_signature(signature)
    except Exception:  # noqa: BLE001 - resolve() reports a bad signature with its own error later
        return {}
    runtime = [p.name for p in stack.jit.params if not p.is_constexpr]
    order = names if len(entries) == len(names) else runtime if len(entries) == len(runtime) else []
    return {n: None for n, t in zip(order, entries) if str(t).strip() == "None"}


def _build_values(name: str, fn: Any, known: Mapping[str, Any]) -> list | None:
    """The values to build for a computed name the spec does not give: its value where the expression reads
    only what the spec fixes (constexprs, ``None`` arguments), else both booleans for a boolean expression."""
    try:
        expr = translate(fn)
    except Untranslatable:
        return None
    try:
        return [evaluate(expr, known)]
    except ExprError:
        pass  # it reads an argument the calls pass at run time
    return [False, True] if is_boolean(expr) else None


def _records(stack: Stack, warnings: list[str], ref: str) -> tuple[dict | None, dict | None]:
    kernel = stack.jit.__name__
    heur = stack.heuristics()
    at = None
    if stack.tuner is not None:
        t = stack.tuner
        at = {
            "kernel": kernel,
            "key_names": [str(k) for k in t.keys],
            "dtype_args": [],
            "configs": [config_json(c) for c in t.configs],
            "entries": [],
            "fallback": "nearest-log2",
            "origin": "aot",
            "key_rule": "triton",
            "reset_to_zero": [str(n) for n in getattr(t, "reset_to_zero", None) or []],
            "restore_value": [str(n) for n in getattr(t, "restore_value", None) or []],
            "outer_heuristics": [n for n, _fn, outer in heur if outer],
        }
        if getattr(t, "user_defined_pre_hook", False) or getattr(t, "user_defined_post_hook", False):
            warnings.append(
                f"{ref}: the autotuner's pre_hook/post_hook is Python the runtime cannot run; it is not recorded"
            )
    he = None
    if heur:
        exprs: dict[str, list] = {}
        for name, fn, _outer in heur:
            try:
                exprs[name] = translate(fn)
            except Untranslatable as exc:
                warnings.append(
                    f"{ref}: heuristic {name!r} is not stored ({exc}); the archive cannot compute {name} "
                    "for a call (Triton computes it from each call), so a direct launch is refused; a "
                    "call site served by karchive.serve computes it with the library's own function"
                )
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
