"""Incremental builds: copy a previous archive's variants whose build inputs did not change, compile the rest.

``karchive build SPEC -o OUT --reuse PREVIOUS.karc|NAME@VERSION``. The result is the archive a build
from scratch would write, byte for byte (tests/test_reuse.py); only the work differs.

**Why a lookup and not a predicted key.** The stable key (variant_key.py) hashes the options as
Triton *resolved* them, read back from the compiled metadata (``normalize_options``). Predicting
them before compiling would re-implement every backend's option parsing, and a field some compile
stage adds would make the prediction silently wrong. Instead, a request is matched against what
the previous archive records about how each variant was made, which covers everything the compile
depends on:

1. **the request** (``provenance.build``): module, kernel attribute, target, signature, constexprs,
   options as passed to Triton (with karchive's explicit ``enable_fp_fusion``), codegen environment;
   equal as canonical JSON;
2. **the source**: ``provenance.source_key`` is Triton's ``JITFunction.cache_key`` of the kernel: the
   source text of the kernel and of every JIT function it calls, their first line numbers and the
   constexpr globals they read; it is what Triton trusts for its own cache, and so does a karchive
   build with a warm build cache. Plus the modules those functions live in (import name and
   canonical file name, ``provenance.build.sources`` without the digests), which name the files in
   the debug info;
3. **the toolchain**: the archive's ``format_version`` and ``produced_by`` (karchive, Triton, both
   ptxas, the AMD code generator, LLVM) equal this machine's; per variant,
   ``provenance.triton_cache`` (a digest of Triton's install key, the backend's hash for the target,
   the cache-invalidating environment) and ``provenance.hooks`` (pass plugins) equal what a compile
   here would record;
4. **the IR setting**: IR stages stored or not, as ``include_ir`` asks.

The rest of a module's text (another kernel, a comment below) changes nothing that is compiled,
only the module's digest: a reused variant takes ``files.source`` and
``provenance.build.sources[].sha256`` from the current sources, exactly as a compile would write
them. When in doubt, compile: captured variants and Triton-cache imports (no build record), and
entries this karchive cannot re-create exactly, are never reused.
"""

from __future__ import annotations

import functools
import hashlib
import tempfile
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

from ...core.digest import sha256_hex
from ...core.jsonio import canonical_json
from ...format.constants import FORMAT_VERSION
from ...format.manifest import Variant
from ...format.target import Target
from ..compile.aot import VariantRequest, module_source, pipeline_hooks
from ..compile.buildenv import DEFAULT_FP_FUSION, compile_environment, validate_env
from ..compile.canonical import SCHEME, SourceModule, kernel_name, module_sources
from ..compile.describe import CompiledVariant
from ..compile.kernel_ref import load_kernel, split_ref
from ._executors_ship import toolchain_identity

__all__ = [
    "REQUEST_FIELDS",
    "ReusePlan",
    "ReuseReport",
    "plan_reuse",
    "recorded",
    "reuse_variant",
    "toolchain_differences",
    "wanted",
]

#: provenance.build fields that make up the request (sources are compared apart: their digests may differ).
REQUEST_FIELDS = ("module", "attr", "target", "signature", "constexprs", "options", "env")

NEW, SOURCE, TOOLCHAIN, IR, NOT_REUSABLE = (
    "new",
    "source changed",
    "toolchain changed",
    "IR setting changed",
    "not re-creatable",
)


@dataclass
class ReuseReport:
    """How many variants were copied and how many compiled, and why."""

    previous: str
    requested: int
    reused: int = 0
    toolchain_differs: list[str] = field(default_factory=list)  # "triton 3.8.0 -> 3.9.0"; empty: same toolchain
    compiled_because: dict[str, int] = field(default_factory=dict)

    @property
    def compiled(self) -> int:
        return self.requested - self.reused

    def headline(self) -> str:
        why = ", ".join(f"{n} {r}" for r, n in sorted(self.compiled_because.items()))
        text = f"reusing {self.reused} of {self.requested} variant(s) from {self.previous}"
        if self.toolchain_differs:
            text += f" (toolchain differs: {'; '.join(self.toolchain_differs)})"
        return text + (f"; compiling {self.compiled} ({why})" if self.compiled else "; nothing to compile")

    def to_json(self) -> dict[str, Any]:
        return {
            "previous": self.previous,
            "requested": self.requested,
            "reused": self.reused,
            "compiled": self.compiled,
            "same_toolchain": not self.toolchain_differs,
            "toolchain_differs": list(self.toolchain_differs),
            "compiled_because": dict(self.compiled_because),
        }


@dataclass
class ReusePlan:
    reused: list[CompiledVariant]  # ready to pack
    to_compile: list[VariantRequest]  # in request order
    report: ReuseReport


@dataclass
class _Wanted:
    """What a compile of one request would record, worked out without compiling."""

    request_key: str
    inputs: dict[str, Any] | None  # None: cannot tell (the kernel's cache key failed): compile
    source_text: str | None
    sources: list[SourceModule]


def _digest(obj: Any) -> str:
    return hashlib.sha256(canonical_json(obj)).hexdigest()


def _request_key(record: dict[str, Any]) -> str:
    return _digest({k: record.get(k) for k in REQUEST_FIELDS})


def toolchain_differences(produced_by: dict[str, Any], format_version: Any) -> list[str]:
    """What differs between the previous archive's toolchain and this machine's (empty: the same)."""
    local = {**toolchain_identity(), "format_version": f"{FORMAT_VERSION[0]}.{FORMAT_VERSION[1]}"}
    prev = {k: (None if v is None else str(v)) for k, v in (produced_by or {}).items()}
    prev["format_version"] = None if format_version is None else str(format_version)
    return [
        f"{k} {prev.get(k)} -> {local.get(k)}" for k in sorted(set(local) | set(prev)) if local.get(k) != prev.get(k)
    ]


@functools.lru_cache(maxsize=64)
def _fingerprint(target: str, env_items: tuple[tuple[str, str], ...]) -> str:
    """``provenance.triton_cache`` a compile here would record for this target and environment (digest)."""
    from ..compile.toolchain import build_fingerprint

    with tempfile.TemporaryDirectory(prefix="karchive-reuse-") as cache, compile_environment(dict(env_items), cache):
        return _digest(build_fingerprint(Target.parse(target).to_json()))


class _Kernels:
    """Each kernel loaded once: its sources and cache key, as a compile of it would record them."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str | None], tuple[Any, Any, list[SourceModule], str | None]] = {}

    def get(self, req: VariantRequest) -> tuple[Any, Any, list[SourceModule], str | None]:
        k = (req.kernel_ref, req.base_dir)
        if k not in self._seen:
            fn, module = load_kernel(req.kernel_ref, req.base_dir)
            try:
                source_key: str | None = fn.cache_key
            except Exception:  # noqa: BLE001 - Triton could not key it: let the compile report the error
                source_key = None
            self._seen[k] = (fn, module, module_sources(fn), source_key)
        return self._seen[k]


def wanted(req: VariantRequest, kernels: _Kernels, hooks: list[dict]) -> _Wanted:
    fn, module, sources, source_key = kernels.get(req)
    env = validate_env(req.env)
    # As aot.build_record writes it: the options passed to Triton, fp fusion explicit, sorted.
    options = dict(sorted({"enable_fp_fusion": DEFAULT_FP_FUSION, **req.options}.items()))
    record = {
        "module": module.__name__,
        "attr": split_ref(req.kernel_ref)[1],
        "target": req.target,
        "signature": req.signature,
        "constexprs": dict(req.constexprs),
        "options": options,
        "env": env,
    }
    inputs = (
        None
        if source_key is None
        else {
            "source_key": source_key,
            "modules": [[s.module, s.name] for s in sources],
            "hooks": hooks,
            "triton_cache": _fingerprint(req.target, tuple(sorted(env.items()))),
            "include_ir": bool(req.include_ir),
            # The name the variant is filed under (module:qualname): an archive written before qualified
            # names holds the bare name, and a reused variant must not keep it beside new ones.
            "kernel": kernel_name(fn),
        }
    )
    return _Wanted(_request_key(record), inputs, module_source(module), sources)


def recorded(v: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """(request key, inputs) of a previous archive's variant, or None if it records no reusable build."""
    prov = v.get("provenance")
    if not isinstance(prov, dict):
        return None
    rec = prov.get("build")
    if prov.get("origin") != "aot" or not isinstance(rec, dict) or rec.get("scheme") != SCHEME:
        return None
    sources = rec.get("sources")
    if not isinstance(sources, list) or not all(isinstance(s, dict) for s in sources):
        return None
    try:
        key = _request_key(rec)
        fingerprint = prov.get("triton_cache")
        inputs = {
            "source_key": prov.get("source_key"),
            "modules": [[s.get("module"), s.get("name")] for s in sources],
            "hooks": list(prov.get("hooks") or []),
            "triton_cache": _digest(fingerprint) if isinstance(fingerprint, dict) else None,
            "include_ir": bool((v.get("files") or {}).get("ir")),
            "kernel": v.get("kernel"),
        }
        canonical_json(inputs)
    except (TypeError, ValueError):  # not JSON-clean: not something this karchive wrote
        return None
    return key, inputs


def _why_not(want: dict[str, Any], have: dict[str, Any]) -> str:
    if want["source_key"] != have["source_key"] or want["modules"] != have["modules"]:
        return SOURCE
    if want["include_ir"] != have["include_ir"]:
        return IR
    if want["kernel"] != have["kernel"]:
        return SOURCE  # the name it is filed under (bare in archives from before qualified names)
    return TOOLCHAIN  # triton_cache or hooks


def reuse_variant(reader: Any, entry: dict[str, Any], want: _Wanted) -> CompiledVariant | None:
    """The previous archive's variant with its members byte for byte and the current source digests.

    None when the typed model does not re-create the entry exactly (an entry from another karchive):
    it is compiled instead.
    """
    try:
        variant = Variant.from_json(entry, "previous archive variant")
    except Exception:  # noqa: BLE001 - any schema problem means: do not reuse, compile
        return None
    if canonical_json(variant.to_json()) != canonical_json(entry):
        return None
    files = {"binary": reader.read(variant.binary.path), "metadata": reader.read(variant.metadata.path)}
    for stage, ref in variant.ir.items():
        files[stage] = reader.read(ref.path)  # each read checks the member's size and sha256
    build = dict(variant.provenance.build or {})
    build["sources"] = [
        {"module": s.module, "name": s.name, "sha256": sha256_hex(s.text.encode())} for s in want.sources
    ]
    variant = replace(variant, provenance=replace(variant.provenance, build=build))
    return CompiledVariant.assemble(variant, files, want.source_text, extra_sources=[s.text for s in want.sources])


def plan_reuse(requests: list[VariantRequest], reader: Any, label: str = "") -> ReusePlan:
    """Split ``requests`` into variants copied from ``reader``'s archive and requests still to compile."""
    model = reader.model  # identity and toolchain from the header: format 2 reads no shard for them
    report = ReuseReport(previous=label or f"{model.name}@{model.version}", requested=len(requests))
    report.toolchain_differs = toolchain_differences(model.produced_by, model.format_version)
    if report.toolchain_differs:
        report.compiled_because = {TOOLCHAIN: len(requests)} if requests else {}
        return ReusePlan([], list(requests), report)
    # The raw entries (format 2: every shard, expanded), not the model's variants: reuse_variant copies
    # only an entry the model re-creates exactly, and a field the model does not know would be lost.
    index: dict[str, list[tuple[dict, dict]]] = {}
    for v in reader.manifest.get("variants", []):
        found = recorded(v) if isinstance(v, dict) else None
        if found is not None:
            index.setdefault(found[0], []).append((v, found[1]))
    kernels, hooks = _Kernels(), pipeline_hooks()
    reused: list[CompiledVariant] = []
    to_compile: list[VariantRequest] = []
    why: Counter[str] = Counter()
    for req in requests:
        want = wanted(req, kernels, hooks)
        candidates = index.get(want.request_key, [])
        match = next((v for v, have in candidates if want.inputs is not None and have == want.inputs), None)
        copy = reuse_variant(reader, match, want) if match is not None else None
        if copy is not None:
            reused.append(copy)
            continue
        to_compile.append(req)
        if match is not None:
            why[NOT_REUSABLE] += 1
        elif not candidates:
            why[NEW] += 1
        else:
            why[SOURCE if want.inputs is None else _why_not(want.inputs, candidates[0][1])] += 1
    report.reused = len(reused)
    report.compiled_because = dict(why)
    return ReusePlan(reused, to_compile, report)
