"""Inductor's side of a capture: what ``torch.compile`` decided while the window was open (docs/inductor-notes.md).

Inductor compiles its generated kernels with ``triton.compile(ASTSource(fn, ...))`` directly (not through
``JITFunction.run``); Triton's compilation listener sees those compiles like any other, and :mod:`.jit_capture`
files each one under its :mod:`karchive.format.inductor_source` identity. What the listener cannot see is recorded
here, while any capture is active:

- **which config each ``CachingAutotuner`` launched with** (``CachingAutotuner.run`` wrapped: once it has one
  launcher, after benchmarking and coordinate descent), how many it compiled to choose, and the graph
  (``compile_id``, forward or backward) it ran in;
- **max-autotune's template choices**: every answer of Inductor's autotune table to a selection, in order
  (``PersistentCache.lookup`` with a benchmark: op, inputs key, matmul precision, each choice's key and time);
  a serving process replays them in the same order, because a later re-benchmark of the same key overwrites the
  times an earlier selection was answered with;
- **compiles stay in this process** (``Capture(inductor_in_process=True)``, the default):
  ``torch._inductor.config.compile_threads`` is 1 while capturing, so that no compile worker compiles a kernel
  this process never sees as a source (a worker's compile reaches the archive only as a harvested cache entry,
  without Inductor's identity and decisions);
- **no Triton bundle restored** (:mod:`karchive.core.inductor_bundles`): an FX graph cache hit of a warm Inductor
  cache compiles its kernels through ``triton.compile`` (Triton cache hits), so they are filed under their
  identity with their decisions, never harvested from Triton's cache under a plain name;
- **torch's own cache artifacts** (``Capture(inductor_cache_artifacts=True)``, the default): at save, the
  Mega-Cache entries (``torch.compiler.save_cache_artifacts``) recorded while the capture was open, of the kinds
  :data:`~karchive.format.inductor_records.CACHE_ARTIFACT_KINDS` names, FX graph entries without their Triton
  bundle (binaries come from the archive's variants only), become one member (:func:`cache_artifacts`).

The hooks are installed only when torch is already imported (a capture never imports torch itself) and are
undone when the last capture ends. The records become the manifest's ``inductor`` section
(:mod:`karchive.format.inductor_records`).
"""

from __future__ import annotations

import pickle
import sys
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ...core.digest import sha256_hex
from ...core.holds import hold_attr, hold_env
from ...core.inductor_bundles import refuse_triton_bundles
from ...format import inductor_source
from ...format.inductor_records import (
    CACHE_ARTIFACT_KINDS,
    MAX_CACHE_ARTIFACTS_BYTES,
    SECTION_VERSION,
    KernelDecision,
    TemplateChoices,
    current_graph,
    graph_label,
    modules_json,
)
from ...format.layout import inductor_cache_member
from ..compile.kernel_ref import config_json
from . import _scope as scope

_MARK = "_karchive_decided"  # set on an autotuner once its decision is recorded
_GENERATION = [0]  # installations of these hooks so far (see install)


class InductorLog:
    """What one capture learnt from Inductor: decisions per kernel identity, template timings."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.decisions: dict[str, list[KernelDecision]] = {}  # source digest -> one per distinct config
        self.templates: list[TemplateChoices] = []  # every answer to a selection, in lookup order
        self.modules: dict[str, float] = {}  # benchmarked module source digest -> ms
        self.bundles_refused = 0  # FX graph cache hits whose Triton bundle was not restored (compiled instead)
        self.warnings: list[str] = []

    def decide(self, decision: KernelDecision) -> None:
        """Record a decision; autotuners of one source that chose the same config share an entry (their graphs
        merged), one that chose another config gets its own (served to its graphs)."""
        with self._lock:
            entries = self.decisions.setdefault(decision.source_digest, [])
            for i, old in enumerate(entries):
                if old.config == decision.config and old.found_by_coordesc == decision.found_by_coordesc:
                    entries[i] = KernelDecision(
                        old.kernel,
                        old.source_digest,
                        old.config,
                        old.found_by_coordesc,
                        old.heuristic,
                        tuple(dict.fromkeys(old.graphs + decision.graphs)),
                        old.configs_compiled,
                    )
                    return
            entries.append(decision)

    def timings(
        self, op: str, inputs: str, precision: str, hint: int | None, timings: dict[str, float], graph: str | None
    ) -> None:
        """One answer of the autotune table; the same answer as the last one to the same choices in the same graph
        counts a call."""
        answer = TemplateChoices(op, inputs, precision, dict(timings), hint, graph=graph)
        with self._lock:
            for i in range(len(self.templates) - 1, -1, -1):
                t = self.templates[i]
                if t.key == answer.key and t.timings.keys() == answer.timings.keys() and t.graph == graph:
                    if t.timings == answer.timings:
                        self.templates[i] = replace(t, calls=t.calls + 1)
                        return
                    break
            self.templates.append(answer)

    def module_time(self, digest: str, ms: float) -> None:
        with self._lock:
            self.modules[digest] = ms

    def section(self, kernels: set[str], empty: bool = False) -> dict[str, Any] | None:
        """The manifest's ``inductor`` section: decisions of the kernels the archive holds, every template table and
        module benchmark (None when there is none; :func:`cache_artifacts` may add its member to an empty one)."""
        with self._lock:
            decided = [d for ds in self.decisions.values() for d in ds if d.kernel in kernels]
            templates = list(self.templates)
            modules = dict(self.modules)
        if not decided and not templates and not modules and not empty:
            return None
        return {
            "version": SECTION_VERSION,
            "kernels": [d.to_json() for d in sorted(decided, key=lambda d: d.kernel)],
            # grouped by key for reading; the sort is stable, so each key's answers keep their lookup order
            "templates": [t.to_json() for t in sorted(templates, key=lambda t: (t.op, t.inputs, t.precision))],
            "modules": modules_json(modules),
        }


def decision_of(autotuner: Any) -> KernelDecision | None:
    """The decision a ``CachingAutotuner`` has made (one launcher left), or None (none yet / not Inductor's)."""
    launchers = getattr(autotuner, "launchers", None) or []
    if len(launchers) != 1:
        return None
    ident = inductor_source.of_function(getattr(autotuner, "fn", None))
    if ident is None:
        return None
    config = launchers[0].config
    graph = graph_label(autotuner)
    data = config_json(config)
    return KernelDecision(
        ident.name,
        ident.digest,
        {k: data.get(k) for k in ("kwargs", "num_warps", "num_stages", "num_ctas", "maxnreg")},
        found_by_coordesc=bool(getattr(config, "found_by_coordesc", False)),
        heuristic=ident.heuristic,
        graphs=(graph,) if graph else (),
        configs_compiled=getattr(autotuner, "_karchive_compiled", None),
    )


def _logs() -> list[InductorLog]:
    caps, _rule = scope.targets()
    return [c.inductor for c in caps if getattr(c, "inductor", None) is not None]


def _after_run(autotuner: Any) -> None:
    if autotuner.__dict__.get(_MARK):
        return
    decision = decision_of(autotuner)
    if decision is None:
        return
    for log in _logs():
        log.decide(decision)
    autotuner.__dict__[_MARK] = True


def _after_lookup(choices: Any, op: str, inputs: str, hint: int | None, timings: Any) -> None:
    if not isinstance(timings, dict) or not choices or len(timings) != len(choices):
        return
    import torch

    precision = str(torch.get_float32_matmul_precision())
    table = {str(c.hash_key()): float(t) for c, t in timings.items()}
    graph = current_graph()
    for log in _logs():
        log.timings(op, inputs, precision, hint, table, graph)


def _bundle_refused() -> None:
    for log in _logs():
        with log._lock:
            log.bundles_refused += 1


def install() -> list[Callable[[], None]]:
    """Wrap Inductor's autotuner, autotune table and module benchmarks; the undo functions. Nothing when torch is
    not imported, or Inductor cannot be."""
    if "torch" not in sys.modules:
        return []
    try:
        from torch._inductor.codecache import PersistentCache
        from torch._inductor.runtime.triton_heuristics import CachingAutotuner
    except Exception:  # noqa: BLE001 - a torch without Inductor (or a broken one): nothing of Inductor's to watch
        return []
    undo: list[Callable[[], None]] = []
    orig_run, orig_pre, orig_lookup = CachingAutotuner.run, CachingAutotuner.precompile, PersistentCache.lookup
    orig_get, orig_update = PersistentCache.get_local_cache, PersistentCache.update_local_cache
    # This installation's generation: an earlier one's wrappers can stay in the chain under these (a serving
    # session installed over them kept them there) and must not record the same answers again or keep a table
    _GENERATION[0] += 1
    gen = _GENERATION[0]
    # Inductor's autotune table while capturing: private and empty at the start, as a serving process replays it
    # (the on-disk one holds other runs' and other processes' times, which decide probes and selections)
    table: dict[str, Any] = {}

    def current() -> bool:
        return gen == _GENERATION[0] and scope.any_active()

    def get_local_cache(self: Any) -> Any:
        return table if current() else orig_get(self)

    def update_local_cache(self: Any, local_cache: Any) -> None:
        if not current():
            orig_update(self, local_cache)

    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = orig_run(self, *args, **kwargs)
        if not self.__dict__.get(_MARK) and scope.any_active():
            try:
                _after_run(self)
            except Exception:  # noqa: BLE001 - a hook inside Inductor's launch must never break the workload
                pass
        return out

    def precompile(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = orig_pre(self, *args, **kwargs)
        if scope.any_active() and "_karchive_compiled" not in self.__dict__:
            self.__dict__["_karchive_compiled"] = len(getattr(self, "compile_results", None) or ())
        return out

    def lookup(self: Any, choices: Any, op: str, inputs: str, benchmark: Any, *args: Any, **kwargs: Any) -> Any:
        hint_override = kwargs.get("hint_override", args[0] if args else None)  # torch >= 2.9 passes it
        out = orig_lookup(self, choices, op, inputs, benchmark, *args, **kwargs)
        # a selection's lookup, not the precompile probe (``benchmark=None``, whose answer decides nothing);
        # recorded once, by this generation (answers are replayed in order and counted)
        if benchmark is not None and current():
            try:
                _after_lookup(choices, op, inputs, hint_override, out)
            except Exception:  # noqa: BLE001 - recording must never break the compile
                pass
        return out

    undo += _wrap_module_benchmark()
    no_bundles = refuse_triton_bundles(_bundle_refused)
    if no_bundles is not None:
        undo.append(no_bundles)
    undo.append(scope.patch(CachingAutotuner, "run", run))
    undo.append(scope.patch(CachingAutotuner, "precompile", precompile))
    undo.append(scope.patch(PersistentCache, "lookup", lookup))
    undo.append(scope.patch(PersistentCache, "get_local_cache", get_local_cache))
    undo.append(scope.patch(PersistentCache, "update_local_cache", update_local_cache))
    return undo


def compile_in_process() -> Callable[[], None] | None:
    """``compile_threads = 1`` (no compile worker) where torch's Inductor is imported; the undo, or None."""
    if "torch" not in sys.modules:
        return None
    releases = [hold_env("TORCHINDUCTOR_COMPILE_THREADS", "1")]  # what Inductor's config reads where imported now
    try:
        from torch._inductor import config as inductor_config
    except Exception:  # noqa: BLE001 - no Inductor: nothing compiles in workers
        inductor_config = None
    if inductor_config is not None:  # held with a serving session's (karchive.core.holds): the last puts it back
        releases.append(hold_attr(inductor_config, "compile_threads", 1))

    def undo() -> None:
        for release in reversed(releases):
            release()

    return undo


def _wrap_module_benchmark() -> list[Callable[[], None]]:
    """Record what the scheduler's ``TritonScheduling.benchmark_codegened_module`` measured, per module source."""
    try:
        from torch._inductor.codegen.triton import TritonScheduling
    except Exception:  # noqa: BLE001 - an Inductor without Triton codegen: nothing benchmarked there
        return []
    orig = TritonScheduling.benchmark_codegened_module

    def bench(self: Any, mod: Any, *args: Any, **kwargs: Any) -> Any:
        out = orig(self, mod, *args, **kwargs)
        if scope.any_active():
            try:
                digest = inductor_source.module_digest(mod)
                if digest is not None:
                    for log in _logs():
                        log.module_time(digest, float(out[0]))
            except Exception:  # noqa: BLE001 - recording must never break the compile
                pass
        return out

    return [scope.patch(TritonScheduling, "benchmark_codegened_module", bench)]


def cache_artifacts_mark() -> frozenset[tuple[str, str]]:
    """The Mega-Cache entries (kind, key) this process recorded before a capture opened: not the capture's."""
    torch_cache = sys.modules.get("torch.compiler._cache")
    manager = getattr(torch_cache, "CacheArtifactManager", None)
    return frozenset((a.type(), a.key) for a in list(getattr(manager, "_seen_artifacts", None) or ()))


def cache_artifacts(
    window: tuple[frozenset[tuple[str, str]], frozenset[tuple[str, str]] | None], warnings: list[str]
) -> tuple[bytes, dict[str, Any]] | None:
    """torch's cache artifacts recorded in ``window`` (:func:`cache_artifacts_mark` when it opened and when it
    closed, None: still open) as (member bytes, the section's ``cache_artifacts`` record), or None: torch not
    imported, nothing recorded, or (said in ``warnings``) torch could not give them.

    Only :data:`CACHE_ARTIFACT_KINDS`; an FX graph entry loses its Triton bundle (``_triton_bundle``: the kernels'
    cubins and Inductor's statically launchable autotuners), so the bytes hold no binary; the bytes are torch's own
    format (``torch.compiler.load_cache_artifacts`` reads them)."""
    if "torch" not in sys.modules:
        return None
    before, after = window
    try:
        import torch
        from torch.compiler._cache import CacheArtifactManager, _deserialize_single_cache, _serialize_single_cache
        from torch.utils._appending_byte_serializer import AppendingByteSerializer

        saved = torch.compiler.save_cache_artifacts()
        if saved is None:  # nothing cached in this process (a capture without torch.compile)
            return None
        CacheArtifactManager._ensure_cache_artifacts_registered()
        # a list of (kind, artifacts) groups: one per save so far, so a kind may repeat (torch's own dict() of it
        # keeps the last group only)
        groups = AppendingByteSerializer.to_list(saved[0], deserialize_fn=_deserialize_single_cache)
        by_kind: dict[str, dict[str, Any]] = {}
        for kind, items in groups:
            for a in items:
                mark = (kind, a.key)
                if kind in CACHE_ARTIFACT_KINDS and mark not in before and (after is None or mark in after):
                    by_kind.setdefault(kind, {})[a.key] = _without_triton_bundle(a) if kind == "inductor" else a
        kept = {kind: list(by_kind[kind].values()) for kind in CACHE_ARTIFACT_KINDS if kind in by_kind}
        if not kept:
            return None
        out = AppendingByteSerializer(serialize_fn=_serialize_single_cache)
        out.extend(kept.items())
        data = out.to_bytes()
    except Exception as exc:  # noqa: BLE001 - the archive is whole without them; say why they are missing
        warnings.append(f"torch's cache artifacts are not stored: {type(exc).__name__}: {exc}")
        return None
    if len(data) > MAX_CACHE_ARTIFACTS_BYTES:
        warnings.append(
            f"torch's cache artifacts are not stored: {len(data)} bytes exceed the limit of {MAX_CACHE_ARTIFACTS_BYTES}"
        )
        return None
    digest = sha256_hex(data)
    triton = sys.modules.get("triton")
    device, capability = _device(torch)
    record = {
        "path": inductor_cache_member(digest),
        "size": len(data),
        "sha256": digest,
        "torch": str(torch.__version__),
        "triton": str(getattr(triton, "__version__", "")) or None,
        "device": device,
        "capability": capability,
        "entries": {kind: len(items) for kind, items in kept.items()},
    }
    return data, record


def _without_triton_bundle(artifact: Any) -> Any:
    """An FX graph cache artifact whose compiled graph carries no Triton bundle (its content is this process's own
    pickle of a ``CompiledFxGraph``)."""
    graph = pickle.loads(artifact.content)
    if getattr(graph, "_triton_bundle", None) is None:
        return artifact
    graph._triton_bundle = None
    return type(artifact)(artifact.key, pickle.dumps(graph))


def _device(torch: Any) -> tuple[str | None, str | None]:
    """The CUDA device's name and capability where this process uses CUDA already (never initialises it)."""
    cuda = getattr(torch, "cuda", None)
    try:
        if cuda is None or not cuda.is_initialized():
            return None, None
        major, minor = cuda.get_device_capability()
        return str(cuda.get_device_name()), f"{major}.{minor}"
    except Exception:  # noqa: BLE001 - a record without the device is still true
        return None, None


def provenance(fn: Any) -> tuple[str, dict[str, Any]] | None:
    """(archive name, ``provenance.inductor``) of a JIT function Inductor generated, else None."""
    ident = inductor_source.of_function(fn)
    if ident is None:
        return None
    prov: dict[str, Any] = {"source_digest": ident.digest, "function": ident.function, "scheme": inductor_source.SCHEME}
    if ident.heuristic:
        prov["heuristic"] = ident.heuristic
    return ident.name, prov


__all__ = [
    "InductorLog",
    "cache_artifacts",
    "cache_artifacts_mark",
    "compile_in_process",
    "decision_of",
    "install",
    "provenance",
]
