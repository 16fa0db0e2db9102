"""The manifest's optional ``inductor`` section: the decisions ``torch.compile``'s Inductor made while a capture
watched, so that a serving process makes none of them again (spec/FORMAT.md §6.7, docs/inductor-notes.md).

- ``kernels``: per generated kernel (by :mod:`.inductor_source` identity), the config its ``CachingAutotuner``
  launched with (after benchmarking its configs and, where on, coordinate descent), and the graphs it ran in.
- ``templates``: max-autotune's template selections, every answer Inductor's autotune table
  (``PersistentCache.lookup``) gave a selection, in the order it gave them: op, inputs key, matmul precision,
  each choice's key and its time (a choice that failed has ``null``, Inductor's ``inf``), and how many lookups in
  a row gave that answer. Order matters: a lookup whose choices the table lacks re-benchmarks them all and
  overwrites the times other selections of the same key read later (version 1 kept one merged table per key,
  which answers a selection made before a later re-benchmark with the later times).
- ``modules``: the scheduler's benchmarks of generated modules (epilogue/prologue fusion of templates, fusion
  benchmarking, mix-order reduction split sizes): the module's source digest (:mod:`.inductor_source`) and the
  milliseconds Inductor measured (``null``: ``inf``, it did not compile or spilled).
- ``cache_artifacts``: the member holding torch's own cache artifacts (``torch.compiler.save_cache_artifacts``:
  FX graph and AOTAutograd cache entries, without Triton binaries) and what they depend on (:class:`CacheArtifacts`).

Read from untrusted archives: every field is type-checked here and nothing is executed. The cache artifacts are
pickles: only a serving process that verified the archive's signature loads them (docs/inductor-notes.md).
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from typing import Any

from ..errors import FormatError, SchemaError
from ._fields import nonneg, opt, req
from .inductor_source import is_inductor_name
from .tarheader import check_member_name

#: Version of the section's shape written; 2: ``templates`` in lookup order with ``calls`` (see the module doc).
SECTION_VERSION = 2
#: Versions read (1: one merged table per selection key, answered as it always was).
SECTION_VERSIONS = (1, 2)
_CONFIG_KEYS = ("kwargs", "num_warps", "num_stages", "num_ctas", "maxnreg")
#: The kinds of torch's cache artifacts an archive carries: FX graph cache entries (``inductor``: a compiled graph's
#: wrapper code and kernel sources; Triton binaries stripped) and AOTAutograd cache entries. Never ``autotune``
#: (best configs: the section's decisions own them), ``pgo`` (would change what Dynamo compiles), ``precompile``
#: (whole Dynamo packages) or a kind newer than this list.
CACHE_ARTIFACT_KINDS = ("inductor", "aot_autograd")
#: Largest cache-artifacts member written or read.
MAX_CACHE_ARTIFACTS_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class KernelDecision:
    """The config one Inductor kernel launched with, and where it ran."""

    kernel: str  # archive name (inductor.k<digest>:<function>)
    source_digest: str
    config: dict[str, Any]  # {kwargs, num_warps, num_stages, num_ctas, maxnreg} (a triton.Config as data)
    found_by_coordesc: bool = False
    heuristic: str | None = None
    graphs: tuple[str, ...] = ()
    configs_compiled: int | None = None  # how many configs Inductor compiled to choose (what serving saves)

    @classmethod
    def from_json(cls, obj: Any, where: str) -> KernelDecision:
        if not isinstance(obj, dict):
            raise SchemaError(f"{where}: expected an object", where=where)
        kernel = req(obj, "kernel", str, where)
        if not is_inductor_name(kernel):
            raise SchemaError(f"{where}.kernel: {kernel!r} is not an Inductor kernel name", where=f"{where}.kernel")
        config = req(obj, "config", dict, where)
        kwargs = req(config, "kwargs", dict, f"{where}.config")
        for k, v in kwargs.items():
            if not isinstance(v, (int, float, str, bool)) or v is None:
                raise SchemaError(
                    f"{where}.config.kwargs.{k}: expected a number, string or boolean", where=f"{where}.config.kwargs"
                )
        for k in _CONFIG_KEYS[1:]:
            value = opt(config, k, int, f"{where}.config")
            if isinstance(value, bool):
                raise SchemaError(f"{where}.config.{k}: expected an integer", where=f"{where}.config.{k}")
        graphs = opt(obj, "graphs", list, where) or []
        if not all(isinstance(g, str) for g in graphs):
            raise SchemaError(f"{where}.graphs: expected strings", where=f"{where}.graphs")
        compiled = opt(obj, "configs_compiled", int, where)
        return cls(
            kernel=kernel,
            source_digest=req(obj, "source_digest", str, where),
            config={k: config.get(k) for k in _CONFIG_KEYS},
            found_by_coordesc=bool(opt(obj, "found_by_coordesc", bool, where)),
            heuristic=opt(obj, "heuristic", str, where),
            graphs=tuple(graphs),
            configs_compiled=compiled,
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kernel": self.kernel,
            "source_digest": self.source_digest,
            "config": {k: self.config.get(k) for k in _CONFIG_KEYS},
            "found_by_coordesc": self.found_by_coordesc,
            "graphs": list(self.graphs),
        }
        if self.heuristic is not None:
            out["heuristic"] = self.heuristic
        if self.configs_compiled is not None:
            out["configs_compiled"] = self.configs_compiled
        return out


@dataclass(frozen=True)
class TemplateChoices:
    """One answer of Inductor's autotune table to a max-autotune selection: the time of every choice it weighed
    (``inf``: it failed), given ``calls`` lookups in a row."""

    op: str
    inputs: str
    precision: str
    timings: dict[str, float]
    hint_override: int | None = None
    calls: int = 1
    graph: str | None = None  # the graph whose lowering looked it up (:func:`current_graph`), where known

    @property
    def key(self) -> tuple[str, str, str, int | None]:
        return (self.op, self.inputs, self.precision, self.hint_override)

    @classmethod
    def from_json(cls, obj: Any, where: str) -> TemplateChoices:
        if not isinstance(obj, dict):
            raise SchemaError(f"{where}: expected an object", where=where)
        raw = req(obj, "timings", dict, where)
        timings: dict[str, float] = {}
        for k, v in raw.items():
            if v is None:
                timings[k] = math.inf
            elif isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                timings[k] = float(v)
            else:
                raise SchemaError(f"{where}.timings[{k!r}]: expected a finite number or null", where=f"{where}.timings")
        hint = opt(obj, "hint_override", int, where)
        calls = opt(obj, "calls", int, where)
        graph = opt(obj, "graph", str, where)
        if calls is not None and (isinstance(calls, bool) or calls < 1):
            raise SchemaError(f"{where}.calls: expected a positive integer", where=f"{where}.calls")
        return cls(
            op=req(obj, "op", str, where),
            inputs=req(obj, "inputs", str, where),
            precision=req(obj, "precision", str, where),
            timings=timings,
            hint_override=hint,
            calls=1 if calls is None else calls,
            graph=graph,
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "op": self.op,
            "inputs": self.inputs,
            "precision": self.precision,
            "hint_override": self.hint_override,
            "timings": {k: (v if math.isfinite(v) else None) for k, v in sorted(self.timings.items())},
        }
        if self.calls != 1:
            out["calls"] = self.calls
        if self.graph is not None:
            out["graph"] = self.graph
        return out


@dataclass(frozen=True)
class CacheArtifacts:
    """The archive member holding torch's cache artifacts, and what they depend on: a serving process loads them
    only where its torch and Triton are these (the FX graph cache keys also hold the GPU's name and CUDA version:
    another GPU only misses them)."""

    path: str
    size: int
    sha256: str
    torch: str  # torch.__version__ of the capture
    triton: str | None = None  # triton.__version__
    device: str | None = None  # torch.cuda.get_device_name() where CUDA was in use
    capability: str | None = None  # "9.0"
    entries: dict[str, int] = field(default_factory=dict)  # kind -> how many

    @classmethod
    def from_json(cls, obj: Any, where: str) -> CacheArtifacts:
        if not isinstance(obj, dict):
            raise SchemaError(f"{where}: expected an object", where=where)
        path = req(obj, "path", str, where)
        try:
            check_member_name(path)
        except FormatError as exc:
            raise SchemaError(f"{where}.path: {exc}", where=f"{where}.path") from exc
        size = nonneg(req(obj, "size", int, where), f"{where}.size")
        if size > MAX_CACHE_ARTIFACTS_BYTES:
            raise SchemaError(
                f"{where}.size: {size} bytes exceeds the limit of {MAX_CACHE_ARTIFACTS_BYTES}", where=f"{where}.size"
            )
        digest = req(obj, "sha256", str, where)
        if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            raise SchemaError(f"{where}.sha256: expected 64 lowercase hex digits", where=f"{where}.sha256")
        entries = opt(obj, "entries", dict, where) or {}
        for k, v in entries.items():
            if k not in CACHE_ARTIFACT_KINDS or not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise SchemaError(
                    f"{where}.entries[{k!r}]: expected a count of one of {', '.join(CACHE_ARTIFACT_KINDS)}",
                    where=f"{where}.entries",
                )
        return cls(
            path=path,
            size=size,
            sha256=digest,
            torch=req(obj, "torch", str, where),
            triton=opt(obj, "triton", str, where),
            device=opt(obj, "device", str, where),
            capability=opt(obj, "capability", str, where),
            entries=dict(entries),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "size": self.size,
            "sha256": self.sha256,
            "torch": self.torch,
            "triton": self.triton,
            "device": self.device,
            "capability": self.capability,
            "entries": dict(sorted(self.entries.items())),
        }


@dataclass(frozen=True)
class InductorSection:
    """The whole ``inductor`` section, with the lookups serving makes."""

    kernels: tuple[KernelDecision, ...] = ()
    templates: tuple[TemplateChoices, ...] = ()
    modules: dict[str, float] = field(default_factory=dict)  # benchmark module source digest -> ms
    cache_artifacts: CacheArtifacts | None = None
    version: int = SECTION_VERSION
    _by_digest: dict[str, list[KernelDecision]] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        for d in self.kernels:
            self._by_digest.setdefault(d.source_digest, []).append(d)

    @classmethod
    def from_json(cls, obj: Any, where: str = "manifest.inductor") -> InductorSection:
        if not isinstance(obj, dict):
            raise SchemaError(f"{where}: expected an object", where=where)
        version = req(obj, "version", int, where)
        if version not in SECTION_VERSIONS:
            raise SchemaError(
                f"{where}.version: this karchive reads versions {', '.join(map(str, SECTION_VERSIONS))}, got {version}",
                where=f"{where}.version",
            )
        kernels = opt(obj, "kernels", list, where) or []
        templates = opt(obj, "templates", list, where) or []
        modules = {}
        for k, v in (opt(obj, "modules", dict, where) or {}).items():
            if v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v)):
                raise SchemaError(f"{where}.modules[{k!r}]: expected a finite number or null", where=f"{where}.modules")
            modules[k] = math.inf if v is None else float(v)
        cache = opt(obj, "cache_artifacts", dict, where)
        return cls(
            tuple(KernelDecision.from_json(k, f"{where}.kernels[{i}]") for i, k in enumerate(kernels)),
            tuple(TemplateChoices.from_json(t, f"{where}.templates[{i}]") for i, t in enumerate(templates)),
            modules,
            None if cache is None else CacheArtifacts.from_json(cache, f"{where}.cache_artifacts"),
            version,
        )

    def to_json(self) -> dict[str, Any]:
        out = {
            "version": self.version,
            "kernels": [k.to_json() for k in self.kernels],
            "templates": [t.to_json() for t in self.templates],
            "modules": modules_json(self.modules),
        }
        if self.cache_artifacts is not None:
            out["cache_artifacts"] = self.cache_artifacts.to_json()
        return out

    def decision(self, source_digest: str, graph: str | None = None) -> KernelDecision | None:
        """The decision for a kernel of this source: the one recorded in ``graph`` where the same source chose
        differently in two graphs (a reduction's block size changes its sums' order), else the first."""
        found = self._by_digest.get(source_digest)
        if not found:
            return None
        return next((d for d in found if graph is not None and graph in d.graphs), found[0])

    def answers(
        self, key: tuple[str, str, str, int | None], choices: frozenset[str], graph: str | None
    ) -> tuple[str | None, list[TemplateChoices]]:
        """The recorded answers to lookups of exactly these ``choices`` under ``key`` (op, inputs key, precision,
        hint override), in lookup order: those ``graph`` made where it made any (so a graph another process compiled
        in another order, or took from a cache, does not shift the count), else all; and the graph they are
        counted under (None: the whole process). A version-1 section merged its answers per key (the last wins):
        one answer for any choices its table covers."""
        if self.version == 1:
            merged: dict[str, float] = {}
            for t in self.templates:
                if t.key == key:
                    merged.update(t.timings)
            if not choices or not choices <= merged.keys():
                return None, []
            return None, [TemplateChoices(*key[:3], {k: merged[k] for k in choices}, key[3])]
        found = [t for t in self.templates if t.key == key and t.timings.keys() == choices]
        mine = [t for t in found if graph is not None and t.graph == graph]
        return (graph, mine) if mine else (None, found)

    def selection(
        self, key: tuple[str, str, str, int | None], choices: frozenset[str], nth: int, graph: str | None = None
    ) -> dict[str, float] | None:
        """What the ``nth`` (from 0) lookup of these choices got in the capture (:meth:`answers`); None when the
        capture never looked them up, or looked them up fewer times (this process asks what the capture never
        answered: serving says so rather than guess). A version-1 section's one answer answers every lookup."""
        return self.pick(self.answers(key, choices, graph)[1], nth)

    def pick(self, found: list[TemplateChoices], nth: int) -> dict[str, float] | None:
        """The ``nth`` of :meth:`answers`' list, as :meth:`selection` says."""
        if self.version == 1:
            return found[0].timings if found else None
        for t in found:
            if nth < t.calls:
                return t.timings
            nth -= t.calls
        return None

    def weighed(self, key: tuple[str, str, str, int | None]) -> list[int]:
        """How many choices each recorded answer under ``key`` held (what a miss reports)."""
        return [len(t.timings) for t in self.templates if t.key == key]


def graph_label(autotuner: Any) -> str | None:
    """``<compile_id> forward|backward``: the graph a ``CachingAutotuner``'s kernel belongs to, where Inductor set
    it (``set_compile_info``, before it precompiles); the same in the capturing and the serving process."""
    cid = getattr(autotuner, "compile_id", None)
    if cid is None:
        return None
    return f"{cid} {'backward' if getattr(autotuner, 'is_backward', False) else 'forward'}"


def current_graph() -> str | None:
    """``<compile_id> forward|backward`` of the graph Inductor is lowering now (what it passes to
    ``set_compile_info``), or None outside one; the label :func:`graph_label` reads off an autotuner."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        from torch._inductor.virtualized import V

        cid = torch._guards.CompileContext.current_compile_id()
        backward = bool(getattr(V.graph, "is_backward", False)) if cid is not None else False
    except Exception:  # noqa: BLE001 - outside a compile (V.graph unset), or a torch without these: no label
        return None
    return None if cid is None else f"{cid} {'backward' if backward else 'forward'}"


def modules_json(modules: dict[str, float]) -> dict[str, float | None]:
    """Module timings as JSON holds them (``inf`` is ``null``)."""
    return {k: (v if math.isfinite(v) else None) for k, v in sorted(modules.items())}


def section_of(manifest: Any) -> InductorSection | None:
    """The ``inductor`` section of a manifest (its ``extra`` or raw JSON), or None when it has none."""
    extra = getattr(manifest, "extra", None)
    raw = extra.get("inductor") if isinstance(extra, dict) else None
    return None if raw is None else InductorSection.from_json(raw)


__all__ = [
    "SECTION_VERSION",
    "CACHE_ARTIFACT_KINDS",
    "MAX_CACHE_ARTIFACTS_BYTES",
    "CacheArtifacts",
    "KernelDecision",
    "TemplateChoices",
    "InductorSection",
    "section_of",
    "modules_json",
    "graph_label",
]
