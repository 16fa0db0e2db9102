"""The manifest model: one set of typed classes that the producer writes and every reader parses.

Each class has ``from_json`` (validating: a hostile manifest fails here with a :class:`SchemaError`
naming the JSON location, instead of deep inside a launch) and ``to_json`` (the exact dict written to
``karchive/manifest.json``; ``Manifest.from_json(m).to_json() == m`` for every manifest karchive writes,
which a test checks). The JSON Schema (``manifest.schema.json``, the machine-readable half of
spec/FORMAT.md §6) describes the same shapes; a test checks that the two agree field by field.

Large archives: :meth:`Manifest.from_json` with ``lazy=True`` checks the top level and the variant keys
but parses each kernel's variants only when asked for (``variants_of``), so opening an archive to
launch a few kernels does not pay for parsing all of them.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..core.digest import is_sha256_hex
from ..errors import SchemaError, UnsupportedVersionError
from .constants import ABI_VERSION, FORMAT_VERSION, PATH_SENTINEL
from .dtypes import POINTER_ELEMENT_TYPES, SCALAR_SIZES
from .target import Target

__all__ = [
    "ABI_KINDS", "POINTER_ELEMENT_TYPES", "SCALAR_SIZES", "Abi", "AbiParam", "FileRef", "Manifest", "Param",
    "Provenance", "Target", "Variant", "parse_variant",
]

ABI_KINDS = ("pointer", "scalar", "global_scratch", "profile_scratch")
ORIGINS = ("aot", "capture", "triton-cache")


# -- field checks ---------------------------------------------------------------------------------
def _req(obj: Any, key: str, typ: type | tuple[type, ...], where: str) -> Any:
    if not isinstance(obj, dict) or key not in obj:
        raise SchemaError(f"{where}: missing {key!r}", where=where)
    value = obj[key]
    if isinstance(value, bool) and typ in (int, (int,)):
        raise SchemaError(f"{where}.{key}: expected integer, got boolean", where=f"{where}.{key}")
    if not isinstance(value, typ):
        raise SchemaError(f"{where}.{key}: expected {_typename(typ)}, got {type(value).__name__}", where=f"{where}.{key}")
    return value


def _opt(obj: Any, key: str, typ: type | tuple[type, ...], where: str) -> Any:
    """An optional field: absent or null gives None, anything else must have the type."""
    value = obj.get(key) if isinstance(obj, dict) else None
    if value is None:
        return None
    if (isinstance(value, bool) and typ is int) or not isinstance(value, typ):
        raise SchemaError(f"{where}.{key}: expected {_typename(typ)}, got {type(value).__name__}", where=f"{where}.{key}")
    return value


def _typename(typ: type | tuple[type, ...]) -> str:
    return " or ".join(t.__name__ for t in typ) if isinstance(typ, tuple) else typ.__name__


def _nonneg(value: int, where: str) -> int:
    if value < 0:
        raise SchemaError(f"{where}: must not be negative, got {value}", where=where)
    return value


# -- leaves ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FileRef:
    """A member named by the manifest, with the size and sha256 a reader checks before returning it."""

    path: str
    size: int
    sha256: str

    @classmethod
    def for_bytes(cls, path: str, data: bytes) -> FileRef:
        from ..core.digest import sha256_hex

        return cls(path, len(data), sha256_hex(data))

    @classmethod
    def from_json(cls, obj: Any, where: str) -> FileRef:
        path = _req(obj, "path", str, where)
        size = _nonneg(_req(obj, "size", int, where), f"{where}.size")
        digest = _req(obj, "sha256", str, where)
        if not is_sha256_hex(digest):
            raise SchemaError(f"{where}.sha256: not a lowercase hex sha256", where=f"{where}.sha256")
        return cls(path, size, digest)

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "size": self.size, "sha256": self.sha256}


@dataclass(frozen=True)
class Param:
    """One parameter of the Python kernel signature, in call order."""

    name: str
    type: str  # "*fp32", "i32", "constexpr"; for an equal_to_1 int, its declared type ("i32")
    constexpr: Any = None  # the value when the parameter was fixed at compile time
    is_constexpr: bool = False
    divisibility: int | None = None  # 16 for ':16' pointers/ints
    equal_to_1: bool = False  # ints specialised to 1 (fixed at compile time, not passed)

    @classmethod
    def from_json(cls, obj: Any, where: str) -> Param:
        name, typ = _req(obj, "name", str, where), _req(obj, "type", str, where)
        hints = _opt(obj, "hints", dict, where) or {}
        return cls(name=name, type=typ, constexpr=obj.get("value"), is_constexpr="value" in obj,
                   divisibility=_opt(hints, "divisibility", int, where + ".hints"),
                   equal_to_1=_opt(hints, "equal_to_1", bool, where + ".hints") is True)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "type": self.type}
        hints: dict[str, Any] = {}
        if self.divisibility is not None:
            hints["divisibility"] = self.divisibility
        if self.equal_to_1:
            hints["equal_to_1"] = True
        if hints:
            out["hints"] = hints
        if self.is_constexpr:
            out["value"] = self.constexpr
        return out


@dataclass(frozen=True)
class AbiParam:
    """One parameter exactly as the binary takes it."""

    name: str
    kind: str  # pointer | scalar | global_scratch | profile_scratch
    type: str | None  # "*fp32" / "i32" / None for scratch
    arg: int | None  # index into the call's arguments; None for scratch
    size: int  # bytes in the parameter buffer

    @classmethod
    def from_json(cls, p: Any, n_params: int, where: str) -> AbiParam:
        kind = _req(p, "kind", str, where)
        if kind not in ABI_KINDS:
            raise SchemaError(f"{where}: unknown kind {kind!r}", where=where)
        typ = p.get("type")
        arg = p.get("arg")
        if kind in ("pointer", "scalar"):
            if not isinstance(typ, str) or not isinstance(arg, int) or isinstance(arg, bool) or not 0 <= arg < n_params:
                raise SchemaError(f"{where}: pointer/scalar params need a type and a valid arg index", where=where)
            if kind == "scalar" and typ not in SCALAR_SIZES:
                raise SchemaError(f"{where}: unsupported scalar type {typ!r}", where=where)
            if kind == "pointer" and not typ.startswith("*"):
                raise SchemaError(f"{where}: pointer type must start with '*'", where=where)
        else:
            typ, arg = None, None
        size = 8 if kind != "scalar" else SCALAR_SIZES[typ]  # type: ignore[index]
        if _req(p, "size", int, where) != size:
            raise SchemaError(f"{where}: size {p['size']} does not match type {typ!r}", where=where)
        return cls(_req(p, "name", str, where), kind, typ, arg, size)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "kind": self.kind, "size": self.size}
        if self.kind in ("pointer", "scalar"):
            out["type"], out["arg"] = self.type, self.arg
        return out


@dataclass(frozen=True)
class Abi:
    """Launch ABI v1 (spec/FORMAT.md §6.2): everything a loader needs, so none infers it from a Triton version."""

    version: int
    entry: str
    binary_format: str
    binary_arch: str
    params: tuple[AbiParam, ...]
    shared: int
    num_warps: int
    warp_size: int
    num_ctas: int
    cluster_dims: tuple[int, int, int]
    cooperative_grid: bool
    pdl: bool
    global_scratch_size: int
    global_scratch_align: int
    profile_scratch_size: int
    profile_scratch_align: int
    tmem_size: int = 0

    @classmethod
    def from_json(cls, obj: Any, n_params: int, where: str) -> Abi:
        version = _req(obj, "version", int, where)
        if version > ABI_VERSION:
            raise UnsupportedVersionError(
                f"{where}: launch ABI version {version} is newer than this runtime supports ({ABI_VERSION})",
                found=str(version), supported=str(ABI_VERSION))
        params = tuple(AbiParam.from_json(p, n_params, f"{where}.params[{i}]")
                       for i, p in enumerate(_req(obj, "params", list, where)))
        gs = _req(obj, "global_scratch", dict, where)
        ps = _req(obj, "profile_scratch", dict, where)
        cluster = _req(obj, "cluster_dims", list, where)
        if len(cluster) != 3 or not all(isinstance(c, int) and not isinstance(c, bool) and c >= 1 for c in cluster):
            raise SchemaError(f"{where}.cluster_dims: three positive integers expected", where=f"{where}.cluster_dims")
        return cls(
            version=version,
            entry=_req(obj, "entry", str, where),
            binary_format=_req(obj, "binary_format", str, where),
            binary_arch=_req(obj, "binary_arch", str, where),
            params=params,
            shared=_nonneg(_req(obj, "shared", int, where), f"{where}.shared"),
            num_warps=_req(obj, "num_warps", int, where),
            warp_size=_req(obj, "warp_size", int, where),
            num_ctas=_req(obj, "num_ctas", int, where),
            cluster_dims=(cluster[0], cluster[1], cluster[2]),
            cooperative_grid=_req(obj, "cooperative_grid", bool, where),
            pdl=_req(obj, "pdl", bool, where),
            global_scratch_size=_nonneg(_req(gs, "size", int, where + ".global_scratch"), f"{where}.global_scratch.size"),
            global_scratch_align=_req(gs, "align", int, where + ".global_scratch"),
            profile_scratch_size=_nonneg(_req(ps, "size", int, where + ".profile_scratch"),
                                         f"{where}.profile_scratch.size"),
            profile_scratch_align=_req(ps, "align", int, where + ".profile_scratch"),
            tmem_size=_opt(obj, "tmem_size", int, where) or 0,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "entry": self.entry,
            "binary_format": self.binary_format,
            "binary_arch": self.binary_arch,
            "params": [p.to_json() for p in self.params],
            "shared": self.shared,
            "tmem_size": self.tmem_size,
            "num_warps": self.num_warps,
            "warp_size": self.warp_size,
            "num_ctas": self.num_ctas,
            "cluster_dims": list(self.cluster_dims),
            "cooperative_grid": self.cooperative_grid,
            "pdl": self.pdl,
            "global_scratch": {"size": self.global_scratch_size, "align": self.global_scratch_align},
            "profile_scratch": {"size": self.profile_scratch_size, "align": self.profile_scratch_align},
        }


@dataclass(frozen=True)
class Provenance:
    """Where a variant came from. ``extra`` keeps fields this version does not know (minor versions add
    optional fields: spec/FORMAT.md §2), so reading and re-writing a manifest never drops them."""

    origin: str  # aot | capture | triton-cache
    triton_version: str = ""
    triton_hash: str | None = None  # Triton's own, install-specific cache hash (for Triton-cache export)
    source_key: str | None = None  # JITFunction.cache_key (or "triton-cache:<hash>" for imported entries)
    hooks: tuple[dict[str, str], ...] = ()  # pass plugins / stage-inspection hooks: {kind, name, sha256}
    triton_cache: dict[str, Any] | None = None  # {triton_key_sha256, backend_hash, env_vars}
    harvested: bool | None = None  # read from a Triton cache another process wrote
    build: dict[str, Any] | None = None  # the AOT request as compiled, for `karchive rebuild` (spec §12)
    extra: dict[str, Any] = field(default_factory=dict)

    _KNOWN = ("origin", "triton_version", "triton_hash", "source_key", "hooks", "triton_cache", "harvested", "build")

    @classmethod
    def from_json(cls, obj: Any, where: str) -> Provenance:
        if not isinstance(obj, dict):
            raise SchemaError(f"{where}: expected an object", where=where)
        origin = _req(obj, "origin", str, where)
        if origin not in ORIGINS:
            raise SchemaError(f"{where}.origin: unknown origin {origin!r} (known: {', '.join(ORIGINS)})",
                              where=f"{where}.origin")
        hooks = _opt(obj, "hooks", list, where) or []
        for i, h in enumerate(hooks):
            for key in ("kind", "name", "sha256"):
                _req(h, key, str, f"{where}.hooks[{i}]")
        return cls(
            origin=origin,
            triton_version=_opt(obj, "triton_version", str, where) or "",
            triton_hash=_opt(obj, "triton_hash", str, where),
            source_key=_opt(obj, "source_key", str, where),
            hooks=tuple(hooks),
            triton_cache=_opt(obj, "triton_cache", dict, where),
            harvested=_opt(obj, "harvested", bool, where),
            build=_opt(obj, "build", dict, where),
            extra={k: v for k, v in obj.items() if k not in cls._KNOWN},
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"origin": self.origin, "triton_version": self.triton_version,
                               "triton_hash": self.triton_hash, "source_key": self.source_key,
                               "hooks": [dict(h) for h in self.hooks]}
        if self.triton_cache is not None:
            out["triton_cache"] = self.triton_cache
        if self.harvested is not None:
            out["harvested"] = self.harvested
        if self.build is not None:
            out["build"] = self.build
        out.update(self.extra)
        return out


# -- variant --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Variant:
    """One compiled specialisation of one kernel for one target: a manifest ``variants[]`` entry."""

    kernel: str
    key: str
    target: Target
    params: tuple[Param, ...]
    options: dict[str, Any]
    abi: Abi
    binary: FileRef
    metadata: FileRef
    ir: dict[str, FileRef] = field(default_factory=dict)
    source: str | None = None  # member name of the module source
    provenance: Provenance = field(default_factory=lambda: Provenance("aot"))

    @property
    def constexprs(self) -> dict[str, Any]:
        return {p.name: p.constexpr for p in self.params if p.is_constexpr and not p.equal_to_1}

    def members(self) -> list[FileRef]:
        """Every member this variant names (binary, metadata, IR stages), in a stable order."""
        return [self.binary, self.metadata, *(self.ir[s] for s in sorted(self.ir))]

    def __repr__(self) -> str:
        """One line, as ``inspect`` shows a variant (the dataclass default printed every file digest):
        ``<Variant add_kernel cuda:90 stride==1 BLOCK=1024 warps=4 stages=3 key=05e7e5a2c737>``."""
        spec = [f"{p.name}==1" for p in self.params if p.equal_to_1]
        spec += [f"{p.name}={p.constexpr!r}" if isinstance(p.constexpr, str) else f"{p.name}={p.constexpr}"
                 for p in self.params if p.is_constexpr and not p.equal_to_1]
        opts = [f"{short}={self.options[k]}" for k, short in (("num_warps", "warps"), ("num_stages", "stages"),
                                                               ("num_ctas", "ctas"))
                if k in self.options and not (k == "num_ctas" and self.options[k] == 1)]
        text = " ".join([self.kernel, str(self.target), *spec, *opts, f"key={self.key[:12]}"])
        # Names come from an untrusted archive: escape control characters (as core.text.printable does).
        return f"<Variant {text if text.isprintable() else ascii(text)[1:-1]}>"

    @classmethod
    def from_json(cls, obj: Any, where: str) -> Variant:
        if not isinstance(obj, dict):
            raise SchemaError(f"{where}: expected an object", where=where)
        params = tuple(Param.from_json(p, f"{where}.params[{i}]") for i, p in enumerate(_req(obj, "params", list, where)))
        files = _req(obj, "files", dict, where)
        ir = {stage: FileRef.from_json(ref, f"{where}.files.ir.{stage}")
              for stage, ref in (_opt(files, "ir", dict, where + ".files") or {}).items()}
        key = _req(obj, "key", str, where)
        if not is_sha256_hex(key):
            raise SchemaError(f"{where}.key: not a 64-digit lowercase hex key", where=f"{where}.key")
        return cls(
            kernel=_req(obj, "kernel", str, where),
            key=key,
            target=Target.from_json(_req(obj, "target", dict, where), where + ".target"),
            params=params,
            options=_req(obj, "options", dict, where),
            abi=Abi.from_json(_req(obj, "abi", dict, where), len(params), where + ".abi"),
            binary=FileRef.from_json(files.get("binary"), f"{where}.files.binary"),
            metadata=FileRef.from_json(files.get("metadata"), f"{where}.files.metadata"),
            ir=ir,
            source=_opt(files, "source", str, where + ".files"),
            provenance=Provenance.from_json(_req(obj, "provenance", dict, where), where + ".provenance"),
        )

    def to_json(self) -> dict[str, Any]:
        files: dict[str, Any] = {"binary": self.binary.to_json(), "metadata": self.metadata.to_json()}
        if self.ir:
            files["ir"] = {stage: ref.to_json() for stage, ref in self.ir.items()}
        if self.source is not None:
            files["source"] = self.source
        return {
            "kernel": self.kernel,
            "key": self.key,
            "target": self.target.to_json(),
            "params": [p.to_json() for p in self.params],
            "options": self.options,
            "abi": self.abi.to_json(),
            "files": files,
            "provenance": self.provenance.to_json(),
        }


def parse_variant(obj: Any, where: str) -> Variant:
    return Variant.from_json(obj, where)


# -- manifest -------------------------------------------------------------------------------------
_TOP_KNOWN = frozenset({"format", "format_version", "abi_version", "name", "version", "produced_by", "created",
                        "path_sentinel", "sources", "variants", "autotune", "heuristics"})


class Manifest:
    """``karchive/manifest.json``: the archive's identity and every variant (spec/FORMAT.md §6).

    Build one to write (:meth:`build`), or parse one (:meth:`from_json`; ``lazy=True`` defers each
    kernel's variants until :meth:`variants_of` asks). ``raw`` is the parsed JSON it came from, if any.
    """

    def __init__(self, *, name: str, version: str, format_version: str, abi_version: int, produced_by: dict,
                 created: str | None, sources: tuple[FileRef, ...], autotune: list[dict] | None,
                 heuristics: list[dict] | None, extra: dict[str, Any], raw: dict | None, by_kernel: dict[str, list[tuple[int, Any]]],
                 parsed: dict[str, list[Variant]]) -> None:
        self.name = name
        self.version = version
        self.format_version = format_version
        self.abi_version = abi_version
        self.produced_by = produced_by
        self.created = created
        self.sources = sources
        self.autotune = autotune  # autotune records (spec §6.3; karchive.format.autotune reads them)
        self.heuristics = heuristics  # heuristics records (spec §6.4; karchive.format.heuristics parses them)
        self.extra = extra
        self.raw = raw
        self._by_kernel = by_kernel  # kernel -> [(manifest index, raw or parsed entry)]
        self._parsed = parsed
        self._lock = threading.Lock()

    # -- construction -------------------------------------------------------------------------------
    @classmethod
    def build(cls, name: str, version: str, variants: Iterable[Variant], *, produced_by: Mapping[str, Any],
              created: str | None = None, sources: Iterable[FileRef] = (), autotune: list[dict] | None = None,
              heuristics: list[dict] | None = None, extra: Mapping[str, Any] | None = None) -> Manifest:
        """A manifest to write: variants ordered by kernel name, then key (spec/FORMAT.md §4)."""
        ordered = sorted(variants, key=lambda v: (v.kernel, v.key))
        keys = [v.key for v in ordered]
        if len(set(keys)) != len(keys):
            raise SchemaError("manifest: duplicate variant keys", where="variants")
        by_kernel: dict[str, list[tuple[int, Any]]] = {}
        parsed: dict[str, list[Variant]] = {}
        for i, v in enumerate(ordered):
            by_kernel.setdefault(v.kernel, []).append((i, v))
            parsed.setdefault(v.kernel, []).append(v)
        unknown = set(extra or {}) & _TOP_KNOWN
        if unknown:
            raise SchemaError(f"manifest: extra fields {sorted(unknown)} shadow standard ones", where="manifest")
        return cls(name=name, version=version, format_version=f"{FORMAT_VERSION[0]}.{FORMAT_VERSION[1]}",
                   abi_version=max([v.abi.version for v in ordered], default=ABI_VERSION), produced_by=dict(produced_by),
                   created=created, sources=tuple(sorted(sources, key=lambda f: f.path)), autotune=autotune,
                   heuristics=heuristics, extra=dict(extra or {}), raw=None, by_kernel=by_kernel, parsed=parsed)

    @classmethod
    def from_json(cls, obj: Any, *, lazy: bool = False) -> Manifest:
        where = "manifest"
        if not isinstance(obj, dict):
            raise SchemaError("manifest is not a JSON object", where=where)
        entries = _req(obj, "variants", list, where)
        by_kernel: dict[str, list[tuple[int, Any]]] = {}
        seen: set[str] = set()
        for i, v in enumerate(entries):
            w = f"variants[{i}]"
            if not isinstance(v, dict):
                raise SchemaError(f"{w}: expected an object", where=w)
            key, kernel = _req(v, "key", str, w), _req(v, "kernel", str, w)
            if key in seen:
                raise SchemaError("manifest: duplicate variant keys", where=w)
            seen.add(key)
            by_kernel.setdefault(kernel, []).append((i, v))
        autotune = _opt(obj, "autotune", list, where)
        if autotune is not None and not all(isinstance(r, dict) for r in autotune):
            raise SchemaError("manifest.autotune: expected a list of objects", where="manifest.autotune")
        heuristics = _opt(obj, "heuristics", list, where)
        if heuristics is not None and not all(isinstance(r, dict) for r in heuristics):
            raise SchemaError("manifest.heuristics: expected a list of objects", where="manifest.heuristics")
        sources = tuple(FileRef.from_json(s, f"manifest.sources[{i}]")
                        for i, s in enumerate(_opt(obj, "sources", list, where) or []))
        abi_version = _opt(obj, "abi_version", int, where)
        manifest = cls(
            name=_req(obj, "name", str, where),
            version=_req(obj, "version", str, where),
            format_version=_req(obj, "format_version", str, where),
            abi_version=ABI_VERSION if abi_version is None else abi_version,
            produced_by=_req(obj, "produced_by", dict, where),
            created=_opt(obj, "created", str, where),
            sources=sources,
            autotune=autotune,
            heuristics=heuristics,
            extra={k: v for k, v in obj.items() if k not in _TOP_KNOWN},
            raw=obj,
            by_kernel=by_kernel,
            parsed={},
        )
        if not lazy:
            for kernel in by_kernel:
                manifest.variants_of(kernel)
        return manifest

    # -- reading ------------------------------------------------------------------------------------
    def kernels(self) -> list[str]:
        return sorted(self._by_kernel)

    def variants_of(self, kernel: str) -> list[Variant]:
        """The variants of one kernel (parsed and checked on first use); [] for an unknown kernel."""
        parsed = self._parsed.get(kernel)
        if parsed is None:
            entries = self._by_kernel.get(kernel, [])
            parsed = [e if isinstance(e, Variant) else Variant.from_json(e, f"variants[{i}]") for i, e in entries]
            with self._lock:
                self._parsed[kernel] = parsed
        return list(parsed)

    @property
    def variants(self) -> tuple[Variant, ...]:
        """Every variant, in manifest order."""
        out: list[tuple[int, Variant]] = []
        for kernel, entries in self._by_kernel.items():
            out.extend(zip((i for i, _ in entries), self.variants_of(kernel)))
        return tuple(v for _, v in sorted(out, key=lambda t: t[0]))

    def __len__(self) -> int:
        return sum(len(e) for e in self._by_kernel.values())

    def backends(self) -> set[str]:
        """Backends the variants target, read without parsing every variant."""
        out = set()
        for entries in self._by_kernel.values():
            for _, e in entries:
                out.add(e.target.backend if isinstance(e, Variant) else str((e.get("target") or {}).get("backend")))
        return out

    # -- writing ------------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "format": "karchive",
            "format_version": self.format_version,
            "abi_version": self.abi_version,
            "name": self.name,
            "version": self.version,
            "produced_by": self.produced_by,
            "created": self.created,
            "path_sentinel": PATH_SENTINEL,
            "sources": [s.to_json() for s in self.sources],
            "variants": [v.to_json() for v in self.variants],
        }
        if self.autotune:
            out["autotune"] = self.autotune
        if self.heuristics:
            out["heuristics"] = self.heuristics
        out.update(self.extra)
        return out

    def __repr__(self) -> str:
        return f"<karchive.Manifest {self.name} {self.version}: {len(self)} variants of {len(self._by_kernel)} kernels>"
