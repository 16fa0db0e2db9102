"""Meta-parameter resolvers of kernels wrapped in ``@triton.autotune`` / ``@triton.heuristics``: values from records.

A :class:`~.launch.kernel.Kernel` with a resolver asks it, before the selection key is built, which
meta-parameters a call gets and which variants they leave (a plain Kernel over that subset); the call then
takes the subset's launch path, the compiled one included. :class:`AutotuneResolver` (autotune records, and
the heuristics records around them) and :class:`HeuristicsResolver` (heuristics records only) are the two.

The manifest's ``autotune`` records (spec/FORMAT.md §6.3) map an autotune key, computed as Triton computes it
(heuristics above the autotuner first, then the ``key=`` values and argument dtypes), to a config. A call
takes the recorded entry (exact key, else the ``nearest-log2`` fallback) and launches among the variants
compiled for that config (its constexprs, ``num_warps``/``num_stages``...) the one that fits the call. A
record without entries (an ahead-of-time build, spec/BUILD.md), or ``benchmark=True`` for a key never
tuned, has the key timed on the device across the prebuilt variants of every config (no compiling; the
in-place hooks honoured), and the winner remembered for the process and in the local tuning cache
(:mod:`.tuning`).

The ``heuristics`` records (§6.4) give the values ``@triton.heuristics`` computes: for each computed name,
the first recorded case whose inputs match the call, else the stored expression; the heuristics below the
autotuner see the config's constexprs, as in Triton. Every value is computed from every call, as Triton's
``Heuristics.run`` does: one the caller passes is replaced, never taken (only a served call site, which runs
the library's own heuristics functions, hands in computed values: :func:`computed_by_caller`). A call that
lacks an argument a heuristic reads is refused naming that argument; one that matches no case is refused
with the cases that were recorded and the inputs the nearest one differs in.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from ..errors import ArgumentError, LaunchError, NoMatchingVariantError
from ..format.autotune import AutotuneConfig, AutotuneEntry, AutotuneRecord, choose_entry
from ..format.heuristics import OPTION_NAMES, HeuristicsRecord, missing_inputs, resolve
from ..format.manifest import Variant
from .device import DeviceInfo
from .launch.kernel import Kernel
from .tuning.bench import DeviceBench, RepPolicy, TuningHooks, choose, quantiles


def _fits(v: Variant, constexprs: Mapping[str, Any], options: Mapping[str, Any]) -> bool:
    """Was ``v`` compiled with these constexpr values and codegen options (None: not constrained)?"""
    mine = v.constexprs
    names = {p.name for p in v.params}
    for k, want in constexprs.items():
        if k in names and (k not in mine or mine[k] != want or isinstance(mine[k], bool) != isinstance(want, bool)):
            return False
    for k, want in options.items():
        have = v.options.get(k)
        if want is not None and have is not None and have != want:
            return False
    return True


class _Subsets:
    """Dispatchers over subsets of one kernel's variants (one per subset, created once)."""

    def __init__(self, base: Kernel) -> None:
        self.base = base
        self._by_keys: dict[frozenset, Kernel] = {}
        self._fitting: dict[tuple, Kernel] = {}
        self._lock = threading.Lock()

    def kernel(self, variants: Sequence[Variant]) -> Kernel:
        if not variants:
            return self.base
        # (a dispatcher of its own even over every variant: it takes descriptors' block shapes per config)
        keys = frozenset(v.key for v in variants)
        k = self._by_keys.get(keys)
        if k is None:
            with self._lock:
                k = self._by_keys.get(keys)
                if k is None:
                    k = Kernel(self.base.archive, self.base.name, list(variants))
                    k.descriptor_block_from_variant = True  # descriptors take the config's block shape
                    k.join_family(self.base)  # Kernel.set_result reaches its entries
                    self._by_keys[keys] = k
        return k

    def fitting(self, constexprs: Mapping[str, Any], options: Mapping[str, Any], pinned: str | None = None) -> Kernel:
        """The dispatcher over the variants compiled with these constexprs and options (else the pinned one)."""
        key: tuple | None
        try:
            key = (
                tuple(sorted((k, type(v).__name__, v) for k, v in constexprs.items())),
                tuple(sorted(options.items())),
                pinned,
            )
            hit = self._fitting.get(key)
        except TypeError:  # an unhashable value: no caching
            key, hit = None, None
        if hit is not None:
            return hit
        chosen = [v for v in self.base.variants if _fits(v, constexprs, options)]
        if not chosen and pinned is not None:
            chosen = [v for v in self.base.variants if v.key == pinned]
        k = self.kernel(chosen) if chosen else self.base
        if key is not None:
            self._fitting[key] = k
        return k

    def has(self, constexprs: Mapping[str, Any], options: Mapping[str, Any]) -> bool:
        """Is any variant compiled with these constexprs and options?"""
        return any(_fits(v, constexprs, options) for v in self.base.variants)


class _Heuristics:
    """The recorded heuristics of one kernel: values per call, resolutions cached per observable call."""

    def __init__(self, name: str, records: Sequence[HeuristicsRecord]) -> None:
        self.name = name
        self.records = list(records)
        self.names = tuple(n for r in self.records for n in r.names)
        self._cache: dict[tuple, dict[str, Any]] = {}

    def values(self, named: Mapping[str, Any], skip: frozenset = frozenset(), device: Any = None) -> dict[str, Any]:
        """Values for every computed name (but ``skip``: those another layer computed); ``NoMatchingVariantError``
        if one has no case. As Triton's ``Heuristics.run``, a value the caller passes is computed all the same
        and replaces the caller's: it never picks the variant. ``device`` (a target string or DeviceInfo; None:
        not checked) must be the one a concretely recorded case ran on."""
        current = dict(named)
        out: dict[str, Any] = {}
        dev_key = (
            device
            if device is None or isinstance(device, str)
            else (getattr(device, "backend", ""), getattr(device, "arch", ""), getattr(device, "name", ""))
        )
        for record in self.records:
            key = (id(record), skip, record.call_key(current), dev_key)
            hit = self._cache.get(key)
            if hit is None:
                values, unresolved = resolve(record, current, skip=skip, device=device)
                if unresolved:
                    self._refuse(record, unresolved, {**current, **values})
                hit = self._cache[key] = values
            out.update(hit)
            current.update(hit)
        return out

    def _refuse(self, record: HeuristicsRecord, unresolved: Mapping[str, str], named: Mapping[str, Any]) -> None:
        """Why these values cannot be computed: an argument the heuristic reads is not passed (Triton's
        heuristic fails there too: name it), or no recorded case or expression covers this call."""
        for name in unresolved:
            missing = missing_inputs(record, name, named)
            if missing:
                raise NoMatchingVariantError(
                    f"{self.name}: missing argument {', '.join(missing)}: @triton.heuristics computes {name} from "
                    f"it, and this call does not pass it (Triton's heuristic fails on this call too); pass "
                    f"{', '.join(f'{m}=...' for m in missing)}",
                    kernel=self.name,
                    param=missing[0],
                )
        why = "; ".join(f"{n}: {w}" for n, w in unresolved.items())
        raise NoMatchingVariantError(
            f"{self.name}: the @triton.heuristics value(s) {sorted(unresolved)} for this call were never recorded "
            f"({why}); Triton computes them from every call and replaces a value passed, so karchive cannot take "
            "them from the caller either: capture calls like this one (docs/capture.md)",
            kernel=self.name,
            param=None,
        )


def _overridden(values: Mapping[str, Any], cx: Mapping[str, Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The computed constexprs, and the computed launch options the caller also passed (Triton's heuristics
    replace the caller's keyword: the computed value is the one the launch must get)."""
    return {**cx, **{k: v for k, v in values.items() if k in kwargs and k not in cx}}


class Reads(NamedTuple):
    """What a resolver reads of a call, for the compiled launcher's selection key (launch/_native.py): its
    answer is a function of the values of ``values``, the dtypes of ``objects`` (and whether each is given or
    None), the dtypes of every argument where ``dtypes`` (Triton's autotune key), and which names are given."""

    values: frozenset[str]  # parameters whose value it reads (scalars; a pointer given as an int address)
    objects: frozenset[str]  # parameters it reads only through ``dtype`` or as None / absent
    dtypes: bool  # every argument's dtype (the autotune key appends them)
    outputs: frozenset[str]  # the names it computes (passed on with the call)


def _heuristics_reads(records: Sequence[HeuristicsRecord]) -> tuple[set[str], set[str], set[str]]:
    """(names read by value or probe, names read only through ``dtype`` / None-ness, names computed)."""
    read: set[str] = set()
    shallow: set[str] = set()  # read raw only under is_none / not_none, or probed only for dtype
    for r in records:
        for arg, spellings in r.probes().items():
            read.add(arg)
            if set(spellings) <= {"dtype"}:
                shallow.add(arg)
        for expr in r.exprs.values():
            _deep_reads(expr, shallow, None)
    return read, shallow, {n for r in records for n in r.names}


def _deep_reads(node: Any, shallow: set[str], parent: str | None, depth: int = 0) -> None:
    """Drop from ``shallow`` the arguments an expression reads raw anywhere but under is_none / not_none /
    a dtype probe (anything else may look into the object)."""
    if not isinstance(node, list) or not node or depth > 64:
        return
    head = node[0]
    if head in ("arg", "get") and len(node) > 1 and parent not in ("is_none", "not_none", "probe:dtype"):
        shallow.discard(str(node[1]))
    if head == "probe" and len(node) == 3:
        _deep_reads(node[1], shallow, "probe:dtype" if node[2] == "dtype" else "probe", depth + 1)
        return
    for child in node[1:]:
        _deep_reads(child, shallow, head, depth + 1)


def _split(values: Mapping[str, Any], param_names: Sequence[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(constexpr arguments, codegen options) of heuristic values."""
    params = set(param_names)
    cx = {k: v for k, v in values.items() if k in params}
    opts = {k: v for k, v in values.items() if k in OPTION_NAMES and k not in params}
    return cx, opts


class HeuristicsResolver:
    """The meta-parameters ``@triton.heuristics`` computes for a call, from recorded cases."""

    def __init__(self, base: Kernel, records: Sequence[HeuristicsRecord]) -> None:
        self.base = base
        self.name = base.name
        self.param_names = base.param_names
        self.heuristics = _Heuristics(base.name, records)
        self._subsets = _Subsets(base)
        #: Names whose value in the call was computed by the kernel's own heuristics functions (a served call
        #: site runs them as Heuristics.run does: :func:`computed_by_caller`); any other passed value is replaced.
        self.trusted: frozenset[str] = frozenset()

    def describe(self) -> str:
        return f"computes {list(self.heuristics.names)}"

    def reads(self) -> Reads:
        """What a call's answer depends on (its recorded cases and expressions: what they probe)."""
        read, shallow, outputs = _heuristics_reads(self.heuristics.records)
        return Reads(frozenset(read - shallow), frozenset(shallow), False, frozenset(outputs))

    @property
    def settled(self) -> bool:
        """Whether the same call always gets the same answer from now on (always, for recorded heuristics)."""
        return True

    def resolve(
        self,
        grid: Any,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        stream: Any,
        *,
        may_benchmark: bool = True,
        device: Any = None,
    ) -> tuple[Kernel, dict]:
        """(the kernel over the variants the computed options leave, the computed constexprs to pass)."""
        named = _named(self.name, self.param_names, args, kwargs)
        values = self.heuristics.values(
            named, self.trusted.intersection(kwargs), device if isinstance(device, (str, DeviceInfo)) else None
        )
        cx, opts = _split(values, self.param_names)
        kernel = self._subsets.fitting({}, opts) if opts else self.base
        return kernel, _overridden(values, cx, kwargs)


def _config_dict(cfg: AutotuneConfig | None, variant: Any) -> dict[str, Any]:
    """A choice as the tuning cache stores it: the config's constexprs and options, and the recorded variant."""
    if cfg is None:
        return {"kwargs": {}, "options": {}, "variant": variant}
    return {"kwargs": dict(cfg.kwargs), "options": dict(cfg.options), "variant": variant}


def _named(name: str, param_names: Sequence[str], args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    if len(args) > len(param_names):
        raise ArgumentError(
            f"{name}: {len(args)} positional arguments for {len(param_names)} parameters", kernel=name, param=None
        )
    return {**dict(zip(param_names, args)), **kwargs}


class AutotuneResolver:
    """The tuned meta-parameters of a call, from the kernel's autotune records (then its heuristics records).

    The call goes through the layers as Triton's do: heuristics named in the record's ``outer_heuristics``
    (``@triton.heuristics`` above ``@triton.autotune``) are computed first and join the arguments the
    autotune key is computed from; then the key picks a config; then the remaining heuristics see the
    config's values. A key with no recorded entry is tuned on the device among the prebuilt configs when
    the record has no entries at all (an ahead-of-time build) or ``benchmark=True``; otherwise it takes the
    fallback rule's pick.
    """

    def __init__(
        self,
        base: Kernel,
        records: Sequence[AutotuneRecord],
        *,
        benchmark: bool = False,
        rep_policy: RepPolicy | None = None,
        heuristics: Sequence[HeuristicsRecord] = (),
    ) -> None:
        self.base = base
        self.name = base.name
        self.param_names = base.param_names
        self.variants = base.variants
        self.records = list(records)
        self.benchmark = benchmark
        self.rep_policy = rep_policy or RepPolicy()  # how many runs time a config (_bench: the rule)
        self.tuned_names = frozenset(k for r in self.records for c in r.configs if c is not None for k in c.kwargs)
        self.heuristics = _Heuristics(base.name, heuristics) if heuristics else None
        # Names computed above the autotuner (part of its key); None: a record that does not say (older captures).
        self.outer: frozenset[str] | None = self.records[0].outer_heuristics if self.records else frozenset()
        self.tune_on_device = bool(self.records) and not any(r.entries for r in self.records)
        self.reset_to_zero = tuple(n for r in self.records for n in r.reset_to_zero)
        self.restore_value = tuple(n for r in self.records for n in r.restore_value)
        self._subsets = _Subsets(base)
        self.trusted: frozenset[str] = frozenset()  # as HeuristicsResolver.trusted
        self._choices: dict[tuple, tuple[Mapping[str, Any], dict, Kernel]] = {}
        self._lock = threading.Lock()
        self._store: Any = None  # tuning.TuningStore, made on the first key tuned on the device
        self._tables = any(r.raw.get("tuned") for r in self.records)  # karchive tune's per-GPU-model tables

    def describe(self) -> str:
        n = sum(len(r.entries) for r in self.records)
        return f"{n} tuned keys"

    def reads(self) -> Reads:
        """What a call's answer depends on: the ``key=`` values and every argument's dtype (the autotune key),
        then what the heuristics around the autotuner read. (``reset_to_zero`` / ``restore_value`` act only
        while a key is timed, inside the first launch with that key.)"""
        read, shallow, outputs = (
            _heuristics_reads(self.heuristics.records) if self.heuristics else (set(), set(), set())
        )
        keys = {n for r in self.records for n in r.key_names}
        return Reads(
            frozenset((read - shallow) | keys), frozenset(shallow - keys), True, frozenset(outputs) | self.tuned_names
        )

    @property
    def settled(self) -> bool:
        """Whether the same call always gets the same answer from now on: not while an older record's layering
        of the heuristics is still being learned (:meth:`_outer`)."""
        return self.outer is not None or self.heuristics is None

    # -- choosing -------------------------------------------------------------------------------------
    def _candidates(self) -> list[Mapping[str, Any]]:
        """Every config of the records (recorded choices first), once each."""
        seen = set()
        out = [_config_dict(e.config, e.variant) for r in self.records for e in r.entries if e.config is not None]
        out += [_config_dict(c, None) for r in self.records for c in r.configs if c is not None]
        unique: list[Mapping[str, Any]] = []
        for cfg in out:
            ident = repr((sorted(cfg["kwargs"].items()), sorted(cfg["options"].items())))
            if ident not in seen:
                seen.add(ident)
                unique.append(cfg)
        return unique

    def key(self, named: Mapping[str, Any]) -> list:
        """The autotune key Triton computes for a call that reaches the autotuner with ``named``."""
        return self.records[0].key_for_call(named, self.param_names) if self.records else []

    def tuning_key(self, *args: Any, **kwargs: Any) -> list:
        """The autotune key (as stored) Triton computes for ``k[grid](*args, **kwargs)``: heuristics above
        the autotuner evaluated first, as they are in Triton. Nothing is launched or tuned."""
        named = _named(self.name, self.param_names, args, kwargs)
        return self.key({**named, **self._outer(named)})

    def choose(self, named: Mapping[str, Any]) -> tuple[Kernel, dict, AutotuneEntry | None]:
        """The (dispatcher, tuned constexprs, entry) a call with these named arguments uses."""
        key = self.key(named)
        chosen = choose_entry(self.records, key)
        if chosen is None:
            recorded = sorted({str(list(e.key)) for r in self.records for e in r.entries})
            raise NoMatchingVariantError(
                f"{self.name}: autotune key {key} matches no recorded config (recorded keys: "
                f"{', '.join(recorded) or 'none'}); pass the meta-parameters {sorted(self.tuned_names)} explicitly",
                kernel=self.name,
                param=sorted(self.tuned_names)[0] if self.tuned_names else None,
            )
        entry = chosen[1]
        cfg = _config_dict(entry.config, entry.variant)
        return self._subsets.fitting(cfg["kwargs"], cfg["options"], cfg["variant"]), dict(cfg["kwargs"]), entry

    def _exact(self, key: Sequence[Any]) -> bool:
        want = list(key)
        return any(list(e.key) == want for r in self.records for e in r.entries)

    def _tuned(
        self,
        named: Mapping[str, Any],
        grid: Any,
        args: Sequence[Any],
        kwargs: dict,
        stream: Any,
        may_benchmark: bool,
        outer_cx: Mapping[str, Any],
    ) -> tuple[Mapping[str, Any], dict, Kernel]:
        """(config, its constexprs, dispatcher over its variants) for this call's autotune key, remembered per key."""
        key = tuple(repr(k) for k in self.key(named))
        hit = self._choices.get(key)
        if hit is not None:
            return hit
        table = self._from_table(named, args, kwargs) if self._tables else None
        if table is not None:  # the archive's tuning table for this GPU model (karchive tune) comes first
            cfg = table
        elif self.tune_on_device:
            remembered = self._remembered_or_tuned(named, grid, args, kwargs, stream, may_benchmark, outer_cx)
            if remembered is None:
                raise NoMatchingVariantError(
                    f"{self.name}: autotune key {self.key(named)} is not tuned yet: this archive was built ahead "
                    "of time with every config, and a launch tunes the key on the device (select() does not)",
                    kernel=self.name,
                    param=sorted(self.tuned_names)[0] if self.tuned_names else None,
                )
            cfg = remembered
        else:
            _kernel, cx, entry = self.choose(named)
            cfg = (
                _config_dict(entry.config, entry.variant)
                if entry is not None
                else {"kwargs": cx, "options": {}, "variant": None}
            )
            if self.benchmark and entry is not None and not self._exact(self.key(named)):
                tuned = self._remembered_or_tuned(named, grid, args, kwargs, stream, may_benchmark, outer_cx)
                if tuned is None:  # select(): answer by the rule, remember nothing (a launch will benchmark)
                    return cfg, dict(cfg["kwargs"]), _kernel
                cfg = tuned
        kernel = self._subsets.fitting(cfg["kwargs"], cfg["options"], cfg["variant"])
        with self._lock:
            self._choices[key] = hit = (cfg, dict(cfg["kwargs"]), kernel)
        return hit

    def _from_table(
        self, named: Mapping[str, Any], args: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> Mapping[str, Any] | None:
        """The config the archive's tuning table for this device's GPU model holds for exactly this key."""
        from ..format.tuned import lookup

        device = self._device_of(args, kwargs)
        if device is None or not getattr(device, "name", ""):
            return None
        hit = lookup([r.raw for r in self.records], device.name, f"{device.backend}:{device.arch}", self.key(named))
        return _config_dict(AutotuneConfig.from_json(hit[1]), None) if hit is not None else None

    def _remembered_or_tuned(
        self,
        named: Mapping[str, Any],
        grid: Any,
        args: Sequence[Any],
        kwargs: dict,
        stream: Any,
        may_benchmark: bool,
        outer_cx: Mapping[str, Any],
    ) -> Mapping[str, Any] | None:
        """The decision for this key on this device: from the local tuning cache (:mod:`.tuning`), else timed
        now (and remembered there) when the call may benchmark, else None."""
        from .tuning.decisions import TuningStore, kernel_digest

        key = self.key(named)
        device = self._device_of(args, kwargs)
        if self._store is None:
            self._store = TuningStore(
                self.name, kernel_digest(self.name, [v.key for v in self.variants], [r.to_json() for r in self.records])
            )
        if device is not None:
            hit = self._store.get(device, key, self._candidates())
            if hit is not None:
                return hit
        if not may_benchmark:
            return None
        cfg = self._fastest(grid, args, kwargs, stream, named, outer_cx)
        if device is not None:
            self._store.put(device, key, cfg)
        return cfg

    def _device_of(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> DeviceInfo | None:
        """The device this call launches on (its tensors' device, else the current one); None if unknown."""
        try:
            values, _ = self.base._bind_call(args, dict(kwargs))
            index = self.base._device_index(self.base._infos(values))
            return self.base.archive.backend().device_info(index)
        except Exception:  # noqa: BLE001 - no driver or no device: nothing to remember the decision under
            return None

    def _outer(self, named: dict) -> dict[str, Any]:
        """The heuristics values computed above the autotuner (they join its key)."""
        if self.heuristics is None:
            return {}
        outer = self.outer
        if outer is None:  # an older record: learn the layering from the reading that gives a recorded key
            outer = frozenset()
            if self._exact(self.key(named)):
                self.outer = outer
            else:
                try:
                    values = self.heuristics.values(named, self.trusted.intersection(named))
                except NoMatchingVariantError:
                    values = {}
                if values and self._exact(self.key({**named, **values})):
                    self.outer = outer = frozenset(values)
                # neither reading is recorded (a new key): decide nothing yet, read it as inner this time
        if not outer:
            return {}
        inner = frozenset(self.heuristics.names) - outer
        return self.heuristics.values(named, inner | (self.trusted.intersection(named)))

    def chosen_config(
        self, grid: Any, args: Sequence[Any], kwargs: Mapping[str, Any], stream: Any = None
    ) -> Mapping[str, Any]:
        """The config (``{"kwargs", "options", ...}``) this call's autotune key launches (recorded, from the tuning
        table, or tuned now), the one :meth:`resolve` then uses: Triton's ``best_config`` after the call. A served
        call site whose configs carry a ``pre_hook`` runs the library's hook with it, as Triton's ``run`` does."""
        kwargs = dict(kwargs)
        named = _named(self.name, self.param_names, args, kwargs)
        outer_vals = self._outer(named)
        ocx, _oopts = _split(outer_vals, self.param_names)
        cfg, _cx, _kernel = self._tuned({**named, **outer_vals}, grid, args, kwargs, stream, True, ocx)
        return cfg

    def resolve(
        self,
        grid: Any,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        stream: Any,
        *,
        may_benchmark: bool = True,
        device: Any = None,
    ) -> tuple[Kernel, dict]:
        """(the kernel over the variants of the chosen config, the constexprs to pass): the config recorded
        (or tuned) for the call's autotune key, then the heuristics below the autotuner."""
        kwargs = dict(kwargs)
        given = self.tuned_names & kwargs.keys()
        named = _named(self.name, self.param_names, args, kwargs)
        outer_vals = self._outer(named)
        named = {**named, **outer_vals}  # Heuristics.run passes them on as keywords, after the caller's
        ocx, oopts = _split(outer_vals, self.param_names)
        if given:
            if given != self.tuned_names:
                raise ArgumentError(
                    f"{self.name}: give all tuned meta-parameters {sorted(self.tuned_names)} "
                    f"or none (got {sorted(given)})",
                    kernel=self.name,
                    param=sorted(self.tuned_names ^ given)[0],
                )  # the first one missing or extra
            cfg: Mapping[str, Any] = {"kwargs": {}, "options": {}, "variant": None}
            cx: dict = {}
            kernel = self.base
        else:
            cfg, cx, kernel = self._tuned(named, grid, args, kwargs, stream, may_benchmark, ocx)
        if self.heuristics is None:
            return kernel, _overridden(outer_vals, {**ocx, **cx}, kwargs)
        # Triton passes the config's constexprs to the heuristics below it (Autotuner -> Heuristics -> JIT).
        values = self.heuristics.values({**named, **cx}, frozenset(outer_vals) | (self.trusted.intersection(kwargs)))
        hcx, hopts = _split(values, self.param_names)
        kernel = self._subsets.fitting({**cfg["kwargs"], **ocx, **hcx}, {**cfg["options"], **oopts, **hopts})
        return kernel, _overridden({**outer_vals, **values}, {**ocx, **cx, **hcx}, kwargs)

    def _fastest(
        self,
        grid: Any,
        args: Sequence[Any],
        kwargs: dict,
        stream: Any,
        named: Mapping[str, Any],
        outer_cx: Mapping[str, Any],
    ) -> Mapping[str, Any]:
        """The fastest of the configs on this call (:meth:`time_configs`). The kernel's own time by CUDA events
        where torch is in use and the launch goes on its current stream (the default: no stream given); else
        wall time around a synchronised launch."""
        outer = dict(outer_cx)  # the constexprs computed above the autotuner (named holds them too)
        candidates = self._candidates()
        bench = DeviceBench(self._device_of(args, kwargs), self.rep_policy, events=stream is None)

        def bind(_i: int, kernel: Kernel, cx: dict) -> Any:
            return kernel.bind(grid, *args, stream=stream, **{**kwargs, **cx})

        best, _timings, skipped = self.time_configs(candidates, named, outer, bind, bench)
        if best is None:
            why = "; ".join(f"config {candidates[i]['kwargs']}: {w}" for i, w in sorted(skipped.items()))
            raise NoMatchingVariantError(
                f"{self.name}: no prebuilt config can run on this device for this call ({why})",
                kernel=self.name,
                param=None,
            )  # nothing omitted: no config fits
        return candidates[best]

    def time_configs(
        self,
        configs: Sequence[Mapping[str, Any]],
        named: Mapping[str, Any],
        outer: Mapping[str, Any],
        bind: Callable[[int, Kernel, dict], Any],
        bench: Any,
        skip: tuple[type[Exception], ...] = (NoMatchingVariantError,),
    ) -> tuple[int | None, list[float | None], dict[int, str]]:
        """Time each config (``{"kwargs", "options"}``) on one call, as Triton's autotuner does: the heuristics
        below the autotuner see the config's values, ``bind(index, kernel over the config's variants,
        constexprs)`` makes the launch, ``bench`` (:class:`~.tuning.bench.DeviceBench`, or a test's table) times it
        with ``reset_to_zero`` / ``restore_value`` around every run, so an in-place kernel leaves its arguments
        as the caller gave them. Returns (index of the fastest or None, median seconds per config (None: not
        run), why each skipped config was skipped). The one loop of on-first-launch tuning and karchive tune;
        the choice is :func:`~.tuning.bench.choose`'s (Triton's rule)."""
        ocx, oopts = _split(outer, self.param_names)
        backend = self.base.archive.backend()
        hooks = TuningHooks(self.name, named, self.reset_to_zero, self.restore_value)
        timings: list[float | None] = [None] * len(configs)
        skipped: dict[int, str] = {}
        ranks: dict[int, tuple[float, ...]] = {}
        try:
            for i, cfg in enumerate(configs):
                cx = {**ocx, **cfg["kwargs"]}
                options = {**cfg["options"], **oopts}
                if self.heuristics is not None:
                    try:
                        values = self.heuristics.values(
                            {**named, **outer, **cfg["kwargs"]}, frozenset(outer) | (self.trusted.intersection(named))
                        )
                    except NoMatchingVariantError as exc:
                        skipped[i] = f"heuristics: {exc}"
                        continue
                    hcx, hopts = _split(values, self.param_names)
                    cx.update(hcx)
                    options.update(hopts)
                if not self._subsets.has(cx, options):
                    skipped[i] = "not built (no variant of this config in the archive)"
                    continue
                try:
                    bound = bind(i, self._subsets.fitting(cx, options), cx)
                except skip as exc:
                    skipped[i] = f"cannot run this call: {exc}"
                    continue
                s = backend.stream(bound._stream_raw)

                def sync(s: Any = s) -> None:
                    backend.synchronize(s)

                try:
                    times = bench(cfg, bound, hooks, sync)
                except LaunchError as exc:  # out of resources on this device: Triton times such a config as inf
                    skipped[i] = f"the driver refused to launch it: {exc}"
                    continue
                ranks[i] = quantiles(times)
                timings[i] = ranks[i][0]
        finally:
            hooks.done()
        return choose(ranks), timings, skipped


def computed_by_caller(kernel: Kernel, names: Iterable[str]) -> Kernel:
    """``kernel`` for a caller that computes the heuristics values ``names`` itself with the kernel's own
    functions (``karchive.serve``: a served call site runs them as Triton's ``Heuristics.run`` does): their
    values in a call are taken as computed. Any other caller's value for a computed name is replaced, as
    Triton replaces it. A kernel without a resolver is returned as it is."""
    resolver = kernel.resolver
    if not isinstance(resolver, (HeuristicsResolver, AutotuneResolver)) or not names:
        return kernel
    trusting = copy.copy(resolver)
    trusting.trusted = frozenset(names)
    return Kernel(kernel.archive, kernel.name, kernel.variants, trusting)
