"""Inductor's side of serving: ``torch.compile`` answered from an archive's recorded decisions, benchmarking nothing
(docs/inductor-notes.md).

A serving process still runs Dynamo, AOTAutograd and Inductor's codegen (with empty caches); what it must not do
is compile Triton kernels (the compile boundary serves each ``triton.compile`` of an archived kernel) or benchmark.
Inductor benchmarks in three places, each answered here from the manifest's ``inductor`` section
(:mod:`karchive.format.inductor_records`):

- ``CachingAutotuner`` (every generated kernel with more than one config): before it precompiles, its configs
  become the one config the capture saw it launch with, marked found by coordinate descent and as an autotune-cache
  hit, exactly what Inductor does itself on a hit of its own autotune cache, so it compiles that config alone
  (through the boundary), never benchmarks, never runs coordinate descent nor rescales its reduction block
  (``dynamic_scale_rblock`` off for it: not every torch release skips the rescale on a cache hit, and a rescale
  compiles a second config and benchmarks the two);
- max-autotune's template selection: ``PersistentCache.lookup`` answers each selection with what the capture's
  autotune table answered the same lookup (the same choices under the same key, counted in order: a later
  re-benchmark of a key changes what later lookups read), so Inductor benchmarks nothing and picks what the capture
  picked; the precompile probe is answered from the answers given so far, as the capture's table stood at that
  point, so Inductor precompiles (through the boundary) and drops the choices that fail to load where it did in
  the capture, and each selection asks for the same choices;
- the scheduler's benchmarks of generated modules (``TritonScheduling.benchmark_codegened_module``: template
  epilogue/prologue fusion, fusion benchmarking, mix-order reduction split sizes): answered with the milliseconds
  the capture measured for a module of the same source digest, so the module is neither compiled nor run and the
  scheduler fuses as it did;
- anything left (``benchmark_all_configs``, ``coordinate_descent_tuning`` reached anyway): counted, and a
  ``strict`` session refuses it.

Inductor compiles in this process while serving (``compile_threads = 1``): a compile worker would compile outside
the boundary. Inductor's Triton bundle is never restored while serving (``TritonBundler.read_and_emit`` answers
nothing): an FX graph cache hit would otherwise write the bundle's cubins into Triton's cache and hand Inductor
statically launchable autotuners made from them, binaries that never pass the boundary.

**torch's cache artifacts** (the section's ``cache_artifacts`` member: FX graph and AOTAutograd cache entries,
pickles) are loaded with ``torch.compiler.load_cache_artifacts`` when this is installed, before Inductor's first
compile, so that a graph the capture compiled is an FX graph cache hit (no lowering, no codegen): only from an
archive whose signatures a trust policy verified, and only where torch and Triton are the versions recorded.
Otherwise they are skipped and the report says why; serving never depends on them.

``strict``: a kernel with several configs and no recorded decision, or a template selection with no
recorded times, raises :class:`~karchive.errors.ServeMissError` naming it. ``fallback``: Inductor benchmarks as it
would, the miss is reported (the boundary compiles and records the kernels). ``audit``: nothing is changed, what
would have been answered is counted.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import logging
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from ..core.holds import hold_attr
from ..core.inductor_bundles import refuse_triton_bundles
from ..errors import ServeMissError
from ..format import inductor_source
from ..format.inductor_records import (
    CacheArtifacts,
    InductorSection,
    KernelDecision,
    current_graph,
    graph_label,
    section_of,
)
from .ledger import trust_of

STRICT, FALLBACK, AUDIT = "strict", "fallback", "audit"


class InductorServing:
    """The Inductor patches of one serve session, and what they did (:meth:`to_json`)."""

    def __init__(self, archives: list[Any], mode: str) -> None:
        self.mode = mode
        self.archives = list(archives)
        self.labels = tuple(f"{a.name}@{a.version}" for a in archives)
        self.sections: list[InductorSection] = [s for a in archives if (s := section_of(a.manifest)) is not None]
        self.lock = threading.Lock()
        self.pinned = 0  # autotuners narrowed to their recorded config
        self.configs_skipped = 0  # configs Inductor would have compiled and benchmarked
        self.templates_answered = 0
        self.modules_answered = 0
        self.benchmarks = 0  # benchmark / coordinate-descent runs that still happened (0 when served)
        self.misses: list[dict[str, str]] = []
        self._lookups: dict[tuple[Any, ...], int] = {}  # (key, choices, graph counted in) -> lookups answered
        self._table: dict[tuple[Any, ...], dict[str, float]] = {}  # key -> choice -> time: answered so far, merged
        self.bundles_refused = 0  # Triton bundles of FX graph cache entries not restored (binaries not from karchive)
        self.cache_artifacts: list[dict[str, Any]] = []  # per archive with the member: loaded or skipped, and why
        self._undo: list[Callable[[], None]] = []
        #: False once uninstalled: a wrapper a capture's wrapper kept in its chain then passes every call through
        self.active = False

    # -- lookups -----------------------------------------------------------------------------------
    def decision(self, digest: str, graph: str | None = None) -> KernelDecision | None:
        for s in self.sections:
            d = s.decision(digest, graph)
            if d is not None:
                return d
        return None

    def module_time(self, digest: str) -> float | None:
        for s in self.sections:
            if digest in s.modules:
                return s.modules[digest]
        return None

    def miss(self, what: str, name: str, reason: str) -> None:
        """Report a miss; raise it in strict mode."""
        with self.lock:
            earlier = list(self.misses)
            self.misses.append({"what": what, "name": name, "reason": reason})
        if self.mode == STRICT:
            # Inductor catches some errors and carries on without the choice that raised (the scheduler's
            # prologue/epilogue fusion candidates): such a miss changes what is generated next, so the miss that
            # finally escapes names the ones before it
            caught = "; ".join(f"{m['what']} {m['name']}: {m['reason']}" for m in earlier[:3])
            raise ServeMissError(
                f"karchive.serve(strict): Inductor {what} {name}: {reason}. Nothing was benchmarked; archives: "
                f"{', '.join(self.labels) or '(none)'}"
                + (f". Earlier misses, caught inside Inductor ({len(earlier)}): {caught}" if earlier else ""),
                kernel=name,
                call=what,
                archives=self.labels,
                param=None,
            )

    def filed(self, ident: inductor_source.InductorIdentity) -> str:
        """Whether the archives hold a kernel of this source (the capture compiled it but never launched it to a
        decision) or only kernels of the same function from other sources (this process generated a module the
        capture did not): the two causes of a kernel without a decision call for different fixes."""
        held, others = False, []
        for arc in self.archives:
            kernels = getattr(getattr(arc, "manifest", None), "kernels", None)
            names = kernels() if callable(kernels) else []
            held = held or ident.name in names
            others += [n for n in names if n != ident.name and n.endswith(f":{ident.function}")]
        if held:
            return "the archives hold its binary: the capture compiled it but never launched it to a decision"
        if not others:
            return f"no archived kernel is named {ident.function}"
        return f"no archived kernel has this source; {len(others)} of the same name have another: " + ", ".join(
            sorted(others)[:4]
        )

    # -- the decisions -----------------------------------------------------------------------------
    def pin(self, tuner: Any) -> None:
        """Narrow a ``CachingAutotuner`` to its recorded config before it compiles (see the module doc)."""
        if tuner.__dict__.get("_karchive_pinned") or getattr(tuner, "compile_results", None):
            return  # decided already, or compiled elsewhere (a worker, Inductor's caches)
        configs = list(getattr(tuner, "configs", None) or [])
        ident = inductor_source.of_function(getattr(tuner, "fn", None))
        name = ident.name if ident is not None else str(getattr(getattr(tuner, "fn", None), "__name__", "?"))
        decision = self.decision(ident.digest, graph_label(tuner)) if ident is not None else None
        coordesc = bool(getattr(tuner, "inductor_meta", {}).get("coordinate_descent_tuning", False))
        if decision is None:
            # A template (max-autotune's choices: one config each) needs no decision to compile: every choice is
            # precompiled, only the winners launch (coordinate descent at a first launch is still the counted
            # wrapper's miss), and a choice that loads only to fail, as in the capture, is no miss
            template = ident is not None and ident.heuristic == "template" and len(configs) == 1
            if not template and (len(configs) > 1 or coordesc):
                why = (
                    "its source is not an Inductor module karchive can read"
                    if ident is None
                    else f"the archives record no autotune decision for this source ({self.filed(ident)})"
                )
                self.miss(
                    "kernel",
                    name,
                    f"{why} (Inductor would benchmark {len(configs)} configs"
                    f"{' and run coordinate descent' if coordesc else ''})",
                )
            return
        shapes = {frozenset(getattr(c, "kwargs", {}) or {}) for c in configs}
        if shapes and frozenset(decision.config["kwargs"]) not in shapes:  # an archive never adds a constexpr
            self.miss(
                "kernel",
                name,
                f"the recorded config sets {sorted(decision.config['kwargs'])}, which no "
                f"config of this kernel does ({sorted(sorted(k) for k in shapes)})",
            )
            return
        if self.mode == AUDIT:
            with self.lock:
                self.pinned += 1
            return
        config = make_config(decision, type(configs[0]) if configs else None)
        tuner.configs = [config]
        meta = getattr(tuner, "inductor_meta", None)
        if isinstance(meta, dict):  # not every torch skips halving a reduction's block on a cache hit
            tuner.inductor_meta = {**meta, "dynamic_scale_rblock": False}
        info = dict(getattr(tuner, "autotune_cache_info", None) or {})
        info.update({"autotune_cache_state": "hit", "karchive": name})
        tuner.autotune_cache_info = info
        tuner.__dict__["_karchive_pinned"] = True
        with self.lock:
            self.pinned += 1
            self.configs_skipped += max(0, len(configs) - 1)

    def answer(self, choices: list[Any], op: str, inputs: str, hint: int | None) -> dict[Any, float] | None:
        """A selection's lookup: what the capture's autotune table answered the same lookup (see
        :meth:`InductorSection.selection`, counted per key, choices and graph), or None; the table this process has
        answered so far (:meth:`probe`) takes it in."""
        key = _key(op, inputs, hint)
        keys = [str(c.hash_key()) for c in choices]
        asked = frozenset(keys)
        graph = current_graph()
        with self.lock:
            for s in self.sections:
                counted, found = s.answers(key, asked, graph)
                if not found:
                    continue
                nth = self._lookups.get((key, asked, counted), 0)
                table = s.pick(found, nth)
                if table is None:
                    return None  # asked more often than in the capture
                self._lookups[(key, asked, counted)] = nth + 1
                self._table.setdefault(key, {}).update(table)
                return {c: table[k] for c, k in zip(choices, keys)}
        return None

    def probe(self, choices: list[Any], op: str, inputs: str, hint: int | None) -> dict[Any, float]:
        """The precompile probe (a lookup without a benchmark): answered from the table as the capture's stood at
        the same point (every selection answered so far in this process, merged as Inductor merges them; empty at
        the start, as the capture's was), so Inductor precompiles exactly the choices it precompiled there and drops
        the same failures (another set of choices would be looked up otherwise)."""
        from torch._inductor import config as inductor_config

        key = _key(op, inputs, hint)
        got: dict[Any, float] = {}
        if not inductor_config.autotune_local_cache:
            return got  # Inductor's probe reads no table then: it always precompiles
        with self.lock:
            table = self._table.get(key, {})
            for c in choices:  # as Inductor's check does: the hits up to the first choice it lacks
                k = str(c.hash_key())
                if k not in table:
                    break
                got[c] = table[k]
        return got

    def taken(self, op: str, inputs: str, hint: int | None, timings: dict[Any, float]) -> None:
        """A selection Inductor benchmarked itself (fallback): in the table, as in Inductor's."""
        key = _key(op, inputs, hint)
        with self.lock:
            self._table.setdefault(key, {}).update({str(c.hash_key()): float(t) for c, t in timings.items()})

    def weighed(self, op: str, inputs: str, hint: int | None) -> str:
        """What the capture weighed under this selection key (for a miss)."""
        sizes = sorted({n for s in self.sections for n in s.weighed(_key(op, inputs, hint))})
        return f"the capture weighed {', '.join(map(str, sizes))} choices there" if sizes else "the capture made none"

    # -- patches -----------------------------------------------------------------------------------
    def install(self) -> bool:
        """Patch Inductor (False, nothing patched, where torch is not imported or has no Inductor)."""
        if "torch" not in sys.modules:
            return False
        try:
            from torch._inductor import config as inductor_config
            from torch._inductor.codecache import PersistentCache
            from torch._inductor.runtime.triton_heuristics import CachingAutotuner
        except Exception:  # noqa: BLE001 - no Inductor in this torch: nothing to serve for it
            return False
        me = self
        orig_pre = CachingAutotuner.precompile
        orig_bench = CachingAutotuner.benchmark_all_configs
        orig_coord = CachingAutotuner.coordinate_descent_tuning
        orig_lookup = PersistentCache.lookup

        def precompile(self: Any, *args: Any, **kwargs: Any) -> Any:
            if me.active:
                me.pin(self)
            return orig_pre(self, *args, **kwargs)

        def counted(orig: Callable[..., Any], what: str) -> Callable[..., Any]:
            def bench(self: Any, *args: Any, **kwargs: Any) -> Any:
                if not me.active:
                    return orig(self, *args, **kwargs)
                ident = inductor_source.of_function(getattr(self, "fn", None))
                name = ident.name if ident is not None else str(getattr(self.fn, "__name__", "?"))
                with me.lock:
                    me.benchmarks += 1
                if me.mode == STRICT:
                    filed = f": {me.filed(ident)}" if ident is not None else ""
                    me.miss(
                        "kernel", name, f"{what} was reached (the archives record no decision for its source{filed})"
                    )
                return orig(self, *args, **kwargs)

            return bench

        def lookup(self: Any, choices: Any, op: str, inputs: str, benchmark: Any, *args: Any, **kwargs: Any) -> Any:
            if not me.active:
                return orig_lookup(self, choices, op, inputs, benchmark, *args, **kwargs)
            hint_override = kwargs.get("hint_override", args[0] if args else None)  # torch >= 2.9 passes it
            if benchmark is None:
                if me.mode == AUDIT:
                    return orig_lookup(self, choices, op, inputs, benchmark, *args, **kwargs)
                return me.probe(list(choices), op, inputs, hint_override)
            answered = me.answer(list(choices), op, inputs, hint_override) if choices else None
            if answered is not None and me.mode != AUDIT:
                with me.lock:
                    me.templates_answered += 1
                return answered
            if answered is None:
                me.miss(
                    "template selection",
                    f"{op}({inputs})",
                    f"the archives record no answer for these {len(choices)} choices "
                    f"({me.weighed(op, inputs, hint_override)}; Inductor would benchmark them)",
                )
            got = orig_lookup(self, choices, op, inputs, benchmark, *args, **kwargs)
            if isinstance(got, dict) and me.mode != AUDIT:
                me.taken(op, inputs, hint_override, got)
            return got

        self.active = True
        self._undo = self._wrap_module_benchmark()
        if self.mode != AUDIT:
            self._undo += self._no_triton_bundles()
        self._undo += [
            _patch(CachingAutotuner, "precompile", precompile),
            _patch(CachingAutotuner, "benchmark_all_configs", counted(orig_bench, "benchmark_all_configs")),
            _patch(CachingAutotuner, "coordinate_descent_tuning", counted(orig_coord, "coordinate_descent_tuning")),
            _patch(PersistentCache, "lookup", lookup),
        ]
        if self.mode != AUDIT:  # held with any capture's (karchive.core.holds): the last to end puts it back
            self._undo.append(hold_attr(inductor_config, "compile_threads", 1))
        return True

    def _wrap_module_benchmark(self) -> list[Callable[[], None]]:
        try:
            from torch._inductor.codegen.triton import TritonScheduling
        except Exception:  # noqa: BLE001 - no Triton codegen in this Inductor: nothing benchmarked there
            return []
        me = self
        orig = TritonScheduling.benchmark_codegened_module

        def bench(self: Any, mod: Any, *args: Any, **kwargs: Any) -> Any:
            if not me.active:
                return orig(self, mod, *args, **kwargs)
            digest = inductor_source.module_digest(mod)
            ms = me.module_time(digest) if digest is not None else None
            if ms is not None and me.mode != AUDIT:
                with me.lock:
                    me.modules_answered += 1
                return ms, mod.__file__
            if ms is None:
                name = f"{digest[:16] if digest else '?'} ({getattr(mod, '__file__', '?')})"
                me.miss(
                    "module benchmark",
                    name,
                    "the archives record no time for a module of this source "
                    "(the scheduler would compile and benchmark it)",
                )
            return orig(self, mod, *args, **kwargs)

        return [_patch(TritonScheduling, "benchmark_codegened_module", bench)]

    def _no_triton_bundles(self) -> list[Callable[[], None]]:
        """No Triton bundle restored while serving (:mod:`karchive.core.inductor_bundles`), counted."""

        def refused() -> None:
            with self.lock:
                self.bundles_refused += 1

        undo = refuse_triton_bundles(refused)
        return [] if undo is None else [undo]

    def load_cache_artifacts(self) -> None:
        """Load each archive's cache artifacts where it may (see the module doc); record what happened."""
        for arc in self.archives:
            section = section_of(arc.manifest)
            record = section.cache_artifacts if section is not None else None
            if record is None:
                continue
            label = f"{arc.name}@{arc.version}"
            entry: dict[str, Any] = {"archive": label, "bytes": record.size, "torch": record.torch}
            why = self._why_not_load(arc, record)
            if why is None:
                import torch

                t0 = time.perf_counter()
                try:
                    info = torch.compiler.load_cache_artifacts(arc.reader.read(record.path))
                    why = None if info is not None else "torch could not read them"
                except Exception as exc:  # noqa: BLE001 - the kernels never depend on them: say why, serve on
                    why = f"refused: {type(exc).__name__}: {exc}"
                entry["load_s"] = round(time.perf_counter() - t0, 4)
            entry.update({"loaded": True} if why is None else {"loaded": False, "reason": why})
            if why is not None:
                logging.getLogger("karchive.serve").info(
                    "karchive.serve: torch's cache artifacts of %s not loaded: %s", label, why
                )
            self.cache_artifacts.append(entry)

    def _why_not_load(self, arc: Any, record: CacheArtifacts) -> str | None:
        """Why an archive's cache artifacts are not loaded here, or None: they may be."""
        if self.mode == AUDIT:
            return "audit mode changes nothing"
        trust = trust_of(arc)
        if not trust.startswith("signed"):
            return f"{trust}: loading them would unpickle the archive's content; only a signed archive's are loaded"
        import torch

        if str(torch.__version__) != record.torch:
            return f"recorded with torch {record.torch}, this process has torch {torch.__version__}"
        triton = str(getattr(sys.modules.get("triton"), "__version__", ""))
        if record.triton is not None and triton != record.triton:
            return f"recorded with Triton {record.triton}, this process has Triton {triton or '(none)'}"
        return None

    def uninstall(self) -> None:
        self.active = False
        for undo in reversed(self._undo):
            undo()
        self._undo = []

    def to_json(self) -> dict[str, Any]:
        with self.lock:
            return {
                "autotuners_pinned": self.pinned,
                "configs_not_compiled": self.configs_skipped,
                "template_selections_answered": self.templates_answered,
                "module_benchmarks_answered": self.modules_answered,
                "benchmarks": self.benchmarks,
                "misses": list(self.misses),
                "triton_bundles_not_restored": self.bundles_refused,
                "cache_artifacts": [dict(e) for e in self.cache_artifacts],
            }


def _key(op: str, inputs: str, hint: int | None) -> tuple[str, str, str, int | None]:
    """A template selection's key as Inductor's autotune table files it: op, inputs key, matmul precision, hint."""
    import torch

    return (op, inputs, str(torch.get_float32_matmul_precision()), hint)


def make_config(decision: KernelDecision, config_type: Any = None) -> Any:
    """The ``triton.Config`` Inductor's autotuner takes (``config_type``: the class of the configs it holds), from
    a recorded decision, marked found by coordinate descent: the recorded config is final."""
    if config_type is None:
        import triton

        config_type = triton.Config

    c = decision.config
    options = {k: c[k] for k in ("num_warps", "num_stages", "num_ctas", "maxnreg") if c.get(k) is not None}
    config = config_type(dict(c["kwargs"]), **options)
    config.found_by_coordesc = True
    return config


def _patch(owner: Any, attr: str, ours: Callable[..., Any]) -> Callable[[], None]:
    """Set ``owner.attr`` to ``ours``; the undo puts back what it replaced where ``ours`` is still there. Where a
    capture wrapped it since, the capture's undo puts ``ours`` back later, which then passes calls through."""
    orig = owner.__dict__[attr] if attr in owner.__dict__ else getattr(owner, attr)
    setattr(owner, attr, ours)

    def undo() -> None:
        if owner.__dict__.get(attr) is ours:
            setattr(owner, attr, orig)

    return undo


_ACTIVE: dict[str, InductorServing | None] = {"serving": None}


def install_inductor(session: Any) -> InductorServing | None:
    """Serve Inductor's decisions from ``session``'s archives (its ``archives`` and ``mode``); replaces a previous
    installation. None when this process has no Inductor to patch (torch not imported)."""
    uninstall_inductor()
    serving = InductorServing(list(session.archives), session.mode)
    if not serving.install():
        return None
    _ACTIVE["serving"] = serving
    serving.load_cache_artifacts()  # after the bundle switch: loading may already restore bundles (torch 2.13)
    return serving


#: Imported when torch.compile's Inductor backend first compiles: the moment to patch Inductor in a process whose
#: serving began before torch was imported (``KARCHIVE_SERVE``).
TRIGGER = "torch._inductor.compile_fx"


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs ``then()`` once :data:`TRIGGER` has been imported (its loader's ``exec_module`` wrapped)."""

    def __init__(self, then: Callable[[], object]) -> None:
        self.then = then

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != TRIGGER:
            return None
        sys.meta_path.remove(self)  # one shot; the other finders find the module
        spec = importlib.util.find_spec(name)
        loader = getattr(spec, "loader", None)
        if spec is None or loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module, then = loader.exec_module, self.then

        def exec_and_install(module: Any) -> None:
            exec_module(module)
            then()

        loader.exec_module = exec_and_install
        return spec


def install_inductor_on_import(session: Any) -> InductorServing | None:
    """:func:`install_inductor` now where Inductor is imported, else as soon as it is (for ``KARCHIVE_SERVE``,
    which starts serving before the program imports torch). Returns the installation, or None until then."""
    if TRIGGER in sys.modules:
        return install_inductor(session)
    for f in [f for f in sys.meta_path if isinstance(f, _AfterImport)]:
        sys.meta_path.remove(f)
    sys.meta_path.insert(0, _AfterImport(lambda: install_inductor(session)))
    return None


def uninstall_inductor() -> InductorServing | None:
    """Inductor's own methods back (and a pending :func:`install_inductor_on_import` dropped); returns what was
    installed."""
    for f in [f for f in sys.meta_path if isinstance(f, _AfterImport)]:
        sys.meta_path.remove(f)
    serving, _ACTIVE["serving"] = _ACTIVE["serving"], None
    if serving is not None:
        serving.uninstall()
    return serving


def active_inductor() -> InductorServing | None:
    return _ACTIVE["serving"]


__all__ = [
    "InductorServing",
    "install_inductor",
    "install_inductor_on_import",
    "uninstall_inductor",
    "active_inductor",
    "make_config",
    "TRIGGER",
]
