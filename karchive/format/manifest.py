"""The manifest model: one set of typed classes that the producer writes and every reader parses.

Each class has ``from_json`` (validating: a hostile manifest fails here with a :class:`SchemaError`
naming the JSON location, instead of deep inside a launch) and ``to_json`` (the exact dict written to
``karchive/manifest.json``; ``Manifest.from_json(m).to_json() == m`` for every manifest karchive writes,
which a test checks). The JSON Schema (``manifest.schema.json``, the machine-readable half of
spec/FORMAT.md §6) describes the same shapes; a test checks that the two agree field by field.

Large archives: :meth:`Manifest.from_json` with ``lazy=True`` checks the top level and the variant keys
but parses each kernel's variants only when asked for (``variants_of``), so opening an archive to
launch a few kernels does not pay for parsing all of them. Format 2 archives store the variants in one
shard per kernel (spec/FORMAT.md §6.5); :meth:`Manifest.sharded` builds the same model from the
manifest's header and a loader, and ``variants_of(kernel)`` then reads that kernel's shard only. Either
way callers see one model: the shards are the container's business.
"""

from __future__ import annotations

import functools
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, NamedTuple

from ..core.digest import is_sha256_hex
from ..core.grammar import fullmatch
from ..errors import SchemaError, UnsupportedVersionError
from ._fields import nonneg as _nonneg
from ._fields import opt as _opt
from ._fields import req as _req
from .constants import ABI_VERSION, ABI_VERSION_PLAIN, FORMAT_VERSION, PATH_SENTINEL
from .dtypes import POINTER_ELEMENT_TYPES, SCALAR_SIZES
from .names import MAX_KERNEL_NAME, MAX_PARAM_NAME, is_kernel_name, is_param_name
from .target import Target
from .tensordesc import TensorDescAbi

__all__ = [
    "ABI_KINDS",
    "POINTER_ELEMENT_TYPES",
    "SCALAR_SIZES",
    "Abi",
    "AbiParam",
    "FileRef",
    "KernelSummary",
    "Manifest",
    "Param",
    "Provenance",
    "Target",
    "Variant",
    "target_label",
    "target_labels",
]

ABI_KINDS = ("pointer", "scalar", "global_scratch", "profile_scratch", "tensordesc")
_SHA256 = re.compile("[0-9a-f]{64}")  # is_sha256_hex, as one regex (checked for every file of every variant)
ORIGINS = ("aot", "capture", "triton-cache")
#: An IR stage name (``files.ir`` keys): a short lowercase identifier. Stages become file extensions
#: (``export-triton-cache`` writes ``<kernel>.<stage>``), so nothing else is accepted (spec/FORMAT.md §6.1).
IR_STAGE = re.compile(r"[a-z][a-z0-9_]{0,31}")


def is_ir_stage(value: Any) -> bool:
    """True for a valid ``files.ir`` key (:data:`IR_STAGE`, whole string)."""
    return type(value) is str and _stage_ok(value)


@functools.lru_cache(maxsize=1024)
def _stage_ok(value: str) -> bool:  # each stage of each variant is checked: the few names repeat
    return fullmatch(IR_STAGE, value)


#: :func:`~.names.is_kernel_name`, remembered: a format-2 shard checks its kernel's name on every row.
_kernel_ok = functools.lru_cache(maxsize=4096)(is_kernel_name)


def _check_name(value: Any, where: str, ok: Callable[[Any], bool], what: str) -> str:
    if not ok(value):
        shown = value if isinstance(value, str) else type(value).__name__
        raise SchemaError(f"{where}: {ascii(shown)[:80]} is not a {what}", where=where)
    return str(value)


def check_kernel_name(value: Any, where: str) -> str:
    """``value`` if it is a kernel name (spec/FORMAT.md, "Kernel names"), else a :class:`SchemaError`.

    Archives are untrusted and kernel names end up in file names (``export-triton-cache``) and
    terminals: ``../../x`` or ``/abs/path`` must never get past the model."""
    what = f"kernel name (an identifier or module:qualname, at most {MAX_KERNEL_NAME} characters)"
    return _check_name(value, where, is_kernel_name, what)


def check_param_name(value: Any, where: str) -> str:
    """``value`` if it is a parameter name (:func:`~.names.is_param_name`), else a :class:`SchemaError`.

    Parameter names become Python parameters (a bridge's op signature) and keywords: a quoted payload,
    a keyword or a newline never gets past the model."""
    what = f"parameter name (an ASCII identifier that is not a Python keyword, at most {MAX_PARAM_NAME} characters)"
    return _check_name(value, where, is_param_name, what)


def check_distinct_params(params: tuple[Param, ...], where: str) -> tuple[Param, ...]:
    """``params`` if no two share a name (no Python signature has two), else a :class:`SchemaError`."""
    if len({p.name for p in params}) != len(params):
        names = [p.name for p in params]
        twice = next(n for i, n in enumerate(names) if n in names[:i])
        raise SchemaError(f"{where}: parameter {twice!r} is named twice", where=where)
    return params


def _check_stages(ir: Mapping[Any, Any], where: str) -> None:
    for stage in ir:
        if not is_ir_stage(stage):
            raise SchemaError(
                f"{where}: {ascii(stage)[:40]} is not an IR stage name (lowercase identifier, at most 32 characters)",
                where=where,
            )


def _new(cls: type, fields: dict[str, Any]) -> Any:
    """An instance of a frozen dataclass from already-checked fields, without its ``__init__``: that
    sets each field through ``object.__setattr__``, a few times slower, and a shard's rows create six
    file refs and a variant each (thousands per kernel, on the way to its first launch)."""
    obj: Any = object.__new__(cls)
    obj.__dict__.update(fields)
    return obj


# -- leaves ---------------------------------------------------------------------------------------
class FileRef(NamedTuple):
    """A member named by the manifest, with the size and sha256 a reader checks before returning it.

    A named tuple, not a dataclass: a format-2 shard makes six per variant, thousands per kernel on the
    way to its first launch, and tuples are built in bulk at C speed (:mod:`.shard`)."""

    path: str
    size: int
    sha256: str

    @classmethod
    def for_bytes(cls, path: str, data: bytes) -> FileRef:
        from ..core.digest import sha256_hex

        return cls(path, len(data), sha256_hex(data))

    @classmethod
    def valid(cls, obj: Any) -> FileRef | None:
        """The common, valid case in one step (None for anything :meth:`from_json` must look at closely)."""
        if type(obj) is dict:
            return cls.checked(obj.get("path"), obj.get("size"), obj.get("sha256"))
        return None

    @classmethod
    def checked(cls, path: Any, size: Any, digest: Any) -> FileRef | None:
        """A file ref from fields that pass :meth:`from_json`'s checks, else None."""
        if type(path) is str and type(size) is int and size >= 0 and type(digest) is str and _SHA256.fullmatch(digest):
            return cls(path, size, digest)
        return None

    @classmethod
    def from_json(cls, obj: Any, where: str) -> FileRef:
        ref = cls.valid(obj)
        if ref is not None:
            return ref
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
    # The kernel's Python signature: True/False whether the parameter has a default there (``default``
    # holds it), None where the archive does not say (written before 2.0 recorded it). Selection needs
    # it: a call that omits a constexpr takes its default, as Triton does, or is refused.
    has_default: bool | None = None
    default: Any = None

    @classmethod
    def from_json(cls, obj: Any, where: str) -> Param:
        fast = cls._valid(obj)
        if fast is not None:
            return fast
        name, typ = _req(obj, "name", str, where), _req(obj, "type", str, where)
        check_param_name(name, f"{where}.name")
        hints = _opt(obj, "hints", dict, where) or {}
        required = _opt(obj, "required", bool, where)
        if "default" in obj and required is not None:
            raise SchemaError(
                f"{where}: a parameter has either a signature default or required: true, not both", where=where
            )
        default = obj.get("default")
        if default is not None and type(default) not in (bool, int, float, str):
            raise SchemaError(f"{where}.default: a JSON scalar expected", where=f"{where}.default")
        has_default = True if "default" in obj else (False if required else None)
        return cls(
            name=name,
            type=typ,
            constexpr=obj.get("value"),
            is_constexpr="value" in obj,
            divisibility=_opt(hints, "divisibility", int, where + ".hints"),
            equal_to_1=_opt(hints, "equal_to_1", bool, where + ".hints") is True,
            has_default=has_default,
            default=default,
        )

    @classmethod
    def _valid(cls, obj: Any) -> Param | None:
        """The checks below in one expression, for a valid parameter (None: let them find what is wrong).
        A format-2 shard parses one per distinct parameter: one per variant for a constexpr that differs."""
        if type(obj) is not dict:
            return None
        g = obj.get
        name, typ, hints, required, default = g("name"), g("type"), g("hints"), g("required"), g("default")
        if not is_param_name(name) or type(typ) is not str or not (required is None or type(required) is bool):
            return None
        if hints is None:
            divisibility = equal_to_1 = None
        elif type(hints) is dict:
            divisibility, equal_to_1 = hints.get("divisibility"), hints.get("equal_to_1")
            if not (divisibility is None or type(divisibility) is int) or not (
                equal_to_1 is None or type(equal_to_1) is bool
            ):
                return None
        else:
            return None
        has_default = "default" in obj
        if (has_default and required is not None) or (
            default is not None and type(default) not in (bool, int, float, str)
        ):
            return None
        return _new(
            cls,
            {
                "name": name,
                "type": typ,
                "constexpr": g("value"),
                "is_constexpr": "value" in obj,
                "divisibility": divisibility,
                "equal_to_1": equal_to_1 is True,
                "has_default": True if has_default else (False if required else None),
                "default": default,
            },
        )

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
        if self.has_default:
            out["default"] = self.default
        elif self.has_default is False:
            out["required"] = True
        return out


@dataclass(frozen=True)
class AbiParam:
    """One parameter exactly as the binary takes it."""

    name: str
    kind: str  # pointer | scalar | global_scratch | profile_scratch | tensordesc (ABI v2)
    type: str | None  # "*fp32" / "i32" / "tensordesc<fp16[64, 64]>" / None for scratch
    arg: int | None  # index into the call's arguments; None for scratch
    size: int  # bytes in the parameter buffer (a tensordesc: its slots' sizes summed, no padding)
    desc: TensorDescAbi | None = None  # kind tensordesc: how it expands into binary parameters (§6.2.1)

    @classmethod
    def from_json(cls, p: Any, n_params: int, where: str) -> AbiParam:
        check_param_name(_req(p, "name", str, where), f"{where}.name")
        kind = _req(p, "kind", str, where)
        if kind not in ABI_KINDS:
            raise SchemaError(f"{where}: unknown kind {kind!r}", where=where)
        typ = p.get("type")
        arg = p.get("arg")
        if kind == "tensordesc":
            if not isinstance(typ, str) or not isinstance(arg, int) or isinstance(arg, bool) or not 0 <= arg < n_params:
                raise SchemaError(f"{where}: tensordesc params need a type and a valid arg index", where=where)
            desc = TensorDescAbi.from_json(p.get("tensordesc"), f"{where}.tensordesc")
            if _req(p, "size", int, where) != desc.size:
                raise SchemaError(f"{where}: size {p['size']} does not match its slots {list(desc.slots)}", where=where)
            return cls(_req(p, "name", str, where), kind, typ, arg, desc.size, desc)
        if kind in ("pointer", "scalar"):
            if not isinstance(typ, str) or not isinstance(arg, int) or isinstance(arg, bool) or not 0 <= arg < n_params:
                raise SchemaError(f"{where}: pointer/scalar params need a type and a valid arg index", where=where)
            if kind == "scalar" and typ not in SCALAR_SIZES:
                raise SchemaError(f"{where}: unsupported scalar type {typ!r}", where=where)
            if kind == "pointer" and not typ.startswith("*"):
                raise SchemaError(f"{where}: pointer type must start with '*'", where=where)
        else:
            typ, arg = None, None
        size = 8 if kind != "scalar" else SCALAR_SIZES[typ]
        if _req(p, "size", int, where) != size:
            raise SchemaError(f"{where}: size {p['size']} does not match type {typ!r}", where=where)
        return cls(_req(p, "name", str, where), kind, typ, arg, size)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "kind": self.kind, "size": self.size}
        if self.kind in ("pointer", "scalar", "tensordesc"):
            out["type"], out["arg"] = self.type, self.arg
        if self.desc is not None:
            out["tensordesc"] = self.desc.to_json()
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
    def from_json(cls, obj: Any, n_params: int, where: str, memo: dict | None = None) -> Abi:
        # The usual field types are taken as they are; anything else goes through _req, which raises
        # (or accepts) exactly as it always did. A shard parses one ABI per distinct ABI: often one per variant.
        version = obj.get("version") if type(obj) is dict else None
        if type(version) is not int:
            version = _req(obj, "version", int, where)
        if version > ABI_VERSION:
            raise UnsupportedVersionError(
                f"{where}: launch ABI version {version} is newer than this runtime supports ({ABI_VERSION})",
                found=str(version),
                supported=str(ABI_VERSION),
            )
        raw_params = obj.get("params")
        if type(raw_params) is not list:
            raw_params = _req(obj, "params", list, where)
        params = _memo(
            memo,
            "abi_params",
            raw_params,
            n_params,
            lambda: tuple(AbiParam.from_json(p, n_params, f"{where}.params[{i}]") for i, p in enumerate(raw_params)),
        )
        if version < 2 and _has_tensordesc(params, memo):
            raise SchemaError(
                f"{where}: tensordesc parameters need launch ABI version 2, this one says {version}",
                where=f"{where}.version",
            )
        fast = cls._valid(obj, params)
        if fast is not None:
            return fast
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
            global_scratch_size=_nonneg(
                _req(gs, "size", int, where + ".global_scratch"), f"{where}.global_scratch.size"
            ),
            global_scratch_align=_req(gs, "align", int, where + ".global_scratch"),
            profile_scratch_size=_nonneg(
                _req(ps, "size", int, where + ".profile_scratch"), f"{where}.profile_scratch.size"
            ),
            profile_scratch_align=_req(ps, "align", int, where + ".profile_scratch"),
            tmem_size=_opt(obj, "tmem_size", int, where) or 0,
        )

    @classmethod
    def _valid(cls, obj: dict, params: tuple[AbiParam, ...]) -> Abi | None:
        """The checks below in one expression, for a valid ABI (None: let them find what is wrong).
        Format-2 shards parse one per distinct ABI; variants of a kernel often differ only in ``shared``."""
        g = obj.get
        version, entry, fmt, arch, shared, warps, warp_size, ctas, cluster, coop, pdl, gs, ps, tmem = (
            g("version"),
            g("entry"),
            g("binary_format"),
            g("binary_arch"),
            g("shared"),
            g("num_warps"),
            g("warp_size"),
            g("num_ctas"),
            g("cluster_dims"),
            g("cooperative_grid"),
            g("pdl"),
            g("global_scratch"),
            g("profile_scratch"),
            g("tmem_size"),
        )
        if not (
            type(version) is int
            and version <= ABI_VERSION
            and type(entry) is str
            and type(fmt) is str
            and type(arch) is str
            and type(shared) is int
            and shared >= 0
            and type(warps) is int
            and type(warp_size) is int
            and type(ctas) is int
            and type(cluster) is list
            and len(cluster) == 3
            and all(type(c) is int and c >= 1 for c in cluster)
            and type(coop) is bool
            and type(pdl) is bool
            and type(gs) is dict
            and type(ps) is dict
            and (tmem is None or type(tmem) is int)
        ):
            return None
        gsize, galign, psize, palign = gs.get("size"), gs.get("align"), ps.get("size"), ps.get("align")
        if not (
            type(gsize) is int
            and gsize >= 0
            and type(galign) is int
            and type(psize) is int
            and psize >= 0
            and type(palign) is int
        ):
            return None
        return _new(
            cls,
            {
                "version": version,
                "entry": entry,
                "binary_format": fmt,
                "binary_arch": arch,
                "params": params,
                "shared": shared,
                "num_warps": warps,
                "warp_size": warp_size,
                "num_ctas": ctas,
                "cluster_dims": (cluster[0], cluster[1], cluster[2]),
                "cooperative_grid": coop,
                "pdl": pdl,
                "global_scratch_size": gsize,
                "global_scratch_align": galign,
                "profile_scratch_size": psize,
                "profile_scratch_align": palign,
                "tmem_size": tmem or 0,
            },
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
    #: a torch.compile (Inductor) kernel: {source_digest, function, scheme, heuristic} (karchive.format.inductor_source)
    inductor: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    _KNOWN = (
        "origin",
        "triton_version",
        "triton_hash",
        "source_key",
        "hooks",
        "triton_cache",
        "harvested",
        "build",
        "inductor",
    )

    @classmethod
    def from_json(cls, obj: Any, where: str) -> Provenance:
        if not isinstance(obj, dict):
            raise SchemaError(f"{where}: expected an object", where=where)
        origin = _req(obj, "origin", str, where)
        if origin not in ORIGINS:
            raise SchemaError(
                f"{where}.origin: unknown origin {origin!r} (known: {', '.join(ORIGINS)})", where=f"{where}.origin"
            )
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
            inductor=_opt(obj, "inductor", dict, where),
            extra={k: v for k, v in obj.items() if k not in cls._KNOWN},
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "origin": self.origin,
            "triton_version": self.triton_version,
            "triton_hash": self.triton_hash,
            "source_key": self.source_key,
            "hooks": [dict(h) for h in self.hooks],
        }
        if self.triton_cache is not None:
            out["triton_cache"] = self.triton_cache
        if self.harvested is not None:
            out["harvested"] = self.harvested
        if self.build is not None:
            out["build"] = self.build
        if self.inductor is not None:
            out["inductor"] = self.inductor
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
        spec += [
            f"{p.name}={p.constexpr!r}" if isinstance(p.constexpr, str) else f"{p.name}={p.constexpr}"
            for p in self.params
            if p.is_constexpr and not p.equal_to_1
        ]
        opts = [
            f"{short}={self.options[k]}"
            for k, short in (("num_warps", "warps"), ("num_stages", "stages"), ("num_ctas", "ctas"))
            if k in self.options and not (k == "num_ctas" and self.options[k] == 1)
        ]
        text = " ".join([self.kernel, str(self.target), *spec, *opts, f"key={self.key[:12]}"])
        # Names come from an untrusted archive: escape control characters (as core.text.printable does).
        return f"<Variant {text if text.isprintable() else ascii(text)[1:-1]}>"

    @classmethod
    def from_json(cls, obj: Any, where: str, memo: dict[tuple[str, int, int], Any] | None = None) -> Variant:
        """Parse and check one ``variants[]`` entry.

        ``memo`` lets the variants of one format-2 shard share the parsing of what they share: a shard
        stores each distinct target, parameter, options, launch ABI and provenance once and its rows
        point at the same JSON object, so the memo (keyed by the object's identity, which it keeps
        alive) checks each once. Every variant still passes every check; what they share are
        immutable model objects.
        """
        if memo is not None and type(obj) is dict:
            fast = cls._shared(obj, where, memo)
            if fast is not None:
                return fast
        if not isinstance(obj, dict):
            raise SchemaError(f"{where}: expected an object", where=where)
        raw_params = _req(obj, "params", list, where)
        params = tuple(_memo(memo, "param", p, 0, _param_parser(p, where, i)) for i, p in enumerate(raw_params))
        check_distinct_params(params, f"{where}.params")
        files = _req(obj, "files", dict, where)
        raw_ir = _opt(files, "ir", dict, where + ".files") or {}
        _check_stages(raw_ir, where + ".files.ir")
        ir = {stage: FileRef.from_json(ref, f"{where}.files.ir.{stage}") for stage, ref in raw_ir.items()}
        key = _req(obj, "key", str, where)
        if not is_sha256_hex(key):
            raise SchemaError(f"{where}.key: not a 64-digit lowercase hex key", where=f"{where}.key")
        raw_target = _req(obj, "target", dict, where)
        raw_abi = _req(obj, "abi", dict, where)
        raw_prov = _req(obj, "provenance", dict, where)
        return cls(
            kernel=check_kernel_name(_req(obj, "kernel", str, where), where + ".kernel"),
            key=key,
            target=_memo(memo, "target", raw_target, 0, lambda: Target.from_json(raw_target, where + ".target")),
            params=params,
            options=_req(obj, "options", dict, where),
            abi=_memo(
                memo, "abi", raw_abi, len(params), lambda: Abi.from_json(raw_abi, len(params), where + ".abi", memo)
            ),
            binary=FileRef.from_json(files.get("binary"), f"{where}.files.binary"),
            metadata=FileRef.from_json(files.get("metadata"), f"{where}.files.metadata"),
            ir=ir,
            source=_opt(files, "source", str, where + ".files"),
            provenance=_memo(
                memo, "provenance", raw_prov, 0, lambda: Provenance.from_json(raw_prov, where + ".provenance")
            ),
        )

    @classmethod
    def checked_new(
        cls,
        kernel: str,
        key: str,
        target: Target,
        params: tuple[Param, ...],
        options: dict,
        abi: Abi,
        binary: FileRef,
        metadata: FileRef,
        ir: dict[str, FileRef],
        source: str | None,
        provenance: Provenance,
    ) -> Variant:
        """A variant from fields already checked as :meth:`from_json` checks them (a format-2 shard
        checks them a column at a time, :mod:`.shard`); skips the dataclass ``__init__``."""
        return _new(
            cls,
            {
                "kernel": kernel,
                "key": key,
                "target": target,
                "params": params,
                "options": options,
                "abi": abi,
                "binary": binary,
                "metadata": metadata,
                "ir": ir,
                "source": source,
                "provenance": provenance,
            },
        )

    @classmethod
    def _shared(cls, obj: dict, where: str, memo: dict) -> Variant | None:
        """:meth:`from_json` for a valid entry, with no error message built in advance (``verify`` checks
        every row of every shard this way). Each distinct part is parsed once through ``memo``; a part
        that is wrong raises its precise error, anything else unusual gives None (the full checks then
        say what it is)."""
        get = obj.get
        files = get("files")
        if type(files) is not dict:
            return None
        fget = files.get
        binary, metadata, raw_ir = FileRef.valid(fget("binary")), FileRef.valid(fget("metadata")), fget("ir")
        if binary is None or metadata is None:
            return None
        ir: dict[str, FileRef] = {}
        if raw_ir is not None:
            if type(raw_ir) is not dict:
                return None
            for stage, raw in raw_ir.items():
                ref = FileRef.valid(raw)
                if ref is None:
                    return None
                ir[stage] = ref
        kernel, key, raw_target, raw_params = get("kernel"), get("key"), get("target"), get("params")
        options, raw_abi, raw_prov, source = get("options"), get("abi"), get("provenance"), fget("source")
        if not (
            type(key) is str
            and type(kernel) is str
            and type(options) is dict
            and type(raw_params) is list
            and type(raw_target) is dict
            and type(raw_abi) is dict
            and type(raw_prov) is dict
            and (source is None or type(source) is str)
            and _SHA256.fullmatch(key)
            and _kernel_ok(kernel)
            and all(map(is_ir_stage, ir))
        ):
            return None
        params = tuple(_memo(memo, "param", p, 0, _param_parser(p, where, i)) for i, p in enumerate(raw_params))
        n = len(params)
        check_distinct_params(params, f"{where}.params")
        target = _memo(memo, "target", raw_target, 0, lambda: Target.from_json(raw_target, where + ".target"))
        abi = _memo(memo, "abi", raw_abi, n, lambda: Abi.from_json(raw_abi, n, where + ".abi", memo))
        prov = _memo(memo, "provenance", raw_prov, 0, lambda: Provenance.from_json(raw_prov, where + ".provenance"))
        return cls.checked_new(kernel, key, target, params, options, abi, binary, metadata, ir, source, prov)

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


def _memo(
    memo: dict[tuple[str, int, int], Any] | None, what: str, raw: Any, extra: int, parse: Callable[[], Any]
) -> Any:
    """``parse()``, or its earlier result for the very same JSON object (see :meth:`Variant.from_json`).
    The memo holds the raw objects alive while it lives, so an identity is never reused within it."""
    if memo is None:
        return parse()
    slot = (what, id(raw), extra)
    hit = memo.get(slot)
    if hit is None:
        hit = memo[slot] = (parse(), raw)
    return hit[0]


def _has_tensordesc(params: tuple[AbiParam, ...], memo: dict | None) -> bool:
    """Whether an ABI's parameters include a tensor descriptor; answered once per parameter list that
    ``memo`` holds (the ABIs of a shard share one, and the memo keeps it alive, so its id stays its own)."""
    return bool(_memo(memo, "abi_tensordesc", params, 0, lambda: any(p.kind == "tensordesc" for p in params)))


def _param_parser(raw: Any, where: str, i: int) -> Callable[[], Param]:
    return lambda: Param.from_json(raw, f"{where}.params[{i}]")  # the location spelled out only when parsed


def target_labels(variants: Iterable[Variant]) -> list[str]:
    """``str(v.target)`` of each variant (``cuda:90``), each distinct target object formatted once: the
    variants of a shard share theirs, and these labels are compared for every variant read."""
    targets = list(map(_TARGET, variants))
    labels = {key: str(t) for key, t in dict(zip(map(id, targets), targets)).items()}
    return list(map(labels.__getitem__, map(id, targets)))


_TARGET, _KERNEL = attrgetter("target"), attrgetter("kernel")


def target_label(raw: Any) -> str | None:
    """``backend:arch`` of a raw ``target`` object (what summaries count by), None if it is not one."""
    if isinstance(raw, dict) and isinstance(raw.get("backend"), str) and isinstance(raw.get("arch"), str):
        return f"{raw['backend']}:{raw['arch']}"
    return None


@dataclass(frozen=True)
class KernelSummary:
    """How many variants one kernel has, per target (``cuda:90`` → count): what a format-2 manifest
    header records for each shard, so listing and counting never parse a variant."""

    kernel: str
    variants: int
    targets: tuple[tuple[str, int], ...]

    @classmethod
    def of(cls, kernel: str, targets: Iterable[str | None]) -> KernelSummary:
        counts: Counter[str | None] = Counter(targets)  # counted in C: a shard's variants are counted on every read
        if None in counts:
            raise SchemaError(f"a variant of {kernel!r} has no valid target", where="variants")
        labelled = [(t, c) for t, c in counts.items() if t is not None]
        return cls(kernel, sum(counts.values()), tuple(sorted(labelled)))


#: The lists of names an autotune record gives (spec/FORMAT.md §6.3): argument and constexpr names.
_AUTOTUNE_NAMES = ("key_names", "dtype_args", "reset_to_zero", "restore_value", "outer_heuristics")


def _check_record_names(records: list[dict], where: str, fields: tuple[str, ...]) -> None:
    """The names autotune and heuristics records give are parameter names (constexprs a call passes by keyword,
    arguments the records read), checked with the top level so that ``verify`` refuses an archive that breaks
    it; the rest of a record is checked where it is parsed (``format/autotune``, ``format/heuristics``)."""
    for i, record in enumerate(records):
        w = f"{where}[{i}]"
        for field_name in fields:
            names = record.get(field_name)
            if names is None:
                continue
            if not isinstance(names, list):
                raise SchemaError(f"{w}.{field_name}: a list of parameter names expected", where=f"{w}.{field_name}")
            for j, name in enumerate(names):
                check_param_name(name, f"{w}.{field_name}[{j}]")
        configs = record.get("configs") if "configs" in record else []
        for j, config in enumerate(configs if isinstance(configs, list) else []):
            kwargs = config.get("kwargs") if isinstance(config, dict) else None
            for name in kwargs if isinstance(kwargs, dict) else ():
                check_param_name(name, f"{w}.configs[{j}].kwargs")


# -- manifest -------------------------------------------------------------------------------------
_TOP_KNOWN = frozenset(
    {
        "format",
        "format_version",
        "abi_version",
        "name",
        "version",
        "produced_by",
        "created",
        "path_sentinel",
        "sources",
        "variants",
        "autotune",
        "heuristics",
    }
)

#: Loads one kernel's variants from its shard (format 2), checked by this model; see :meth:`Manifest.sharded`.
ShardLoader = Callable[[str], list["Variant"]]
#: Loads one kernel's variants of one target (``cuda:90``): format 2.1 keeps them in a shard of their own.
#: None: that kernel has no such shards (read the whole kernel instead).
TargetLoader = Callable[[str, str], "list[Variant] | None"]


class Manifest:
    """``karchive/manifest.json``: the archive's identity and every variant (spec/FORMAT.md §6).

    Build one to write (:meth:`build`), or parse one: :meth:`from_json` for a whole manifest
    (``lazy=True`` defers each kernel's variants until :meth:`variants_of` asks), :meth:`sharded` for
    a format-2 header whose variants are read one kernel's shard at a time. ``raw`` is the parsed
    JSON it came from, if any (the header, for a sharded manifest).
    """

    def __init__(
        self,
        *,
        name: str,
        version: str,
        format_version: str,
        abi_version: int,
        produced_by: dict,
        created: str | None,
        sources: tuple[FileRef, ...],
        autotune: list[dict] | None,
        heuristics: list[dict] | None,
        extra: dict[str, Any],
        raw: dict | None,
        by_kernel: dict[str, list[tuple[int, Any]]],
        parsed: dict[str, list[Variant]],
        summaries: dict[str, KernelSummary] | None = None,
        loader: ShardLoader | None = None,
        target_loader: TargetLoader | None = None,
    ) -> None:
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
        self._by_kernel = by_kernel  # kernel -> [(manifest index, raw or parsed entry)]; empty when sharded
        self._parsed = parsed
        self._summaries = summaries  # sharded: kernel -> counts, in manifest (shard) order
        self._loader = loader
        self._target_loader = target_loader
        self._by_target: dict[tuple[str, str], list[Variant]] = {}  # (kernel, target) -> variants, read alone
        self._lock = threading.Lock()

    # -- construction -------------------------------------------------------------------------------
    @classmethod
    def build(
        cls,
        name: str,
        version: str,
        variants: Iterable[Variant],
        *,
        produced_by: Mapping[str, Any],
        created: str | None = None,
        sources: Iterable[FileRef] = (),
        autotune: list[dict] | None = None,
        heuristics: list[dict] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> Manifest:
        """A manifest to write (always the current format, :data:`FORMAT_VERSION`): variants ordered by kernel
        name, then key (spec/FORMAT.md §4)."""
        ordered = sorted(variants, key=lambda v: (v.kernel, v.key))
        for v in ordered:  # what a reader would refuse is never written
            check_kernel_name(v.kernel, "variants.kernel")
            for p in v.params:
                check_param_name(p.name, "variants.params.name")
            for ap in v.abi.params:
                check_param_name(ap.name, "variants.abi.params.name")
            check_distinct_params(v.params, "variants.params")
            _check_stages(v.ir, "variants.files.ir")
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
        return cls(
            name=name,
            version=version,
            format_version=f"{FORMAT_VERSION[0]}.{FORMAT_VERSION[1]}",
            abi_version=max([v.abi.version for v in ordered], default=ABI_VERSION_PLAIN),
            produced_by=dict(produced_by),
            created=created,
            sources=tuple(sorted(sources, key=lambda f: f.path)),
            autotune=autotune,
            heuristics=heuristics,
            extra=dict(extra or {}),
            raw=None,
            by_kernel=by_kernel,
            parsed=parsed,
        )

    @staticmethod
    def _top(obj: Any, skip: frozenset[str] = frozenset()) -> dict[str, Any]:
        """The top-level fields (everything but the variants), checked."""
        where = "manifest"
        autotune = _opt(obj, "autotune", list, where)
        if autotune is not None and not all(isinstance(r, dict) for r in autotune):
            raise SchemaError("manifest.autotune: expected a list of objects", where="manifest.autotune")
        heuristics = _opt(obj, "heuristics", list, where)
        if heuristics is not None and not all(isinstance(r, dict) for r in heuristics):
            raise SchemaError("manifest.heuristics: expected a list of objects", where="manifest.heuristics")
        _check_record_names(autotune or [], "manifest.autotune", _AUTOTUNE_NAMES)
        _check_record_names(heuristics or [], "manifest.heuristics", ("names",))
        sources = tuple(
            FileRef.from_json(s, f"manifest.sources[{i}]")
            for i, s in enumerate(_opt(obj, "sources", list, where) or [])
        )
        abi_version = _opt(obj, "abi_version", int, where)
        return dict(
            name=_req(obj, "name", str, where),
            version=_req(obj, "version", str, where),
            format_version=_req(obj, "format_version", str, where),
            abi_version=ABI_VERSION if abi_version is None else abi_version,
            produced_by=_req(obj, "produced_by", dict, where),
            created=_opt(obj, "created", str, where),
            sources=sources,
            autotune=autotune,
            heuristics=heuristics,
            extra={k: v for k, v in obj.items() if k not in _TOP_KNOWN and k not in skip},
            raw=obj,
        )

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
            key, kernel = _req(v, "key", str, w), check_kernel_name(_req(v, "kernel", str, w), f"{w}.kernel")
            if key in seen:
                raise SchemaError("manifest: duplicate variant keys", where=w)
            seen.add(key)
            by_kernel.setdefault(kernel, []).append((i, v))
        manifest = cls(**cls._top(obj), by_kernel=by_kernel, parsed={})
        if not lazy:
            for kernel in by_kernel:
                manifest.variants_of(kernel)
        return manifest

    @classmethod
    def sharded(
        cls,
        header: Any,
        summaries: Iterable[KernelSummary],
        loader: ShardLoader,
        skip: frozenset[str] = frozenset(),
        target_loader: TargetLoader | None = None,
    ) -> Manifest:
        """A format-2 manifest: ``header`` holds every top-level field but the variants, ``summaries``
        count each kernel's variants, and ``loader(kernel)`` returns that kernel's variants (one shard
        read, parsed by :meth:`Variant.from_json` or a column at a time by :mod:`.shard`). ``skip``
        names header fields that belong to the container, not the manifest. ``target_loader(kernel, target)``,
        when given, returns that kernel's variants of one target (:meth:`variants_of` with a target)."""
        if not isinstance(header, dict):
            raise SchemaError("manifest is not a JSON object", where="manifest")
        if "variants" in header:
            raise SchemaError("manifest header: a sharded manifest keeps its variants in shards", where="manifest")
        table: dict[str, KernelSummary] = {}
        for s in summaries:
            check_kernel_name(s.kernel, "manifest.shards")
            if s.kernel in table:
                raise SchemaError(f"manifest header: kernel {s.kernel!r} has two shards", where="manifest")
            table[s.kernel] = s
        return cls(
            **cls._top(header, skip),
            by_kernel={},
            parsed={},
            summaries=table,
            loader=loader,
            target_loader=target_loader,
        )

    # -- reading ------------------------------------------------------------------------------------
    @property
    def is_sharded(self) -> bool:
        return self._summaries is not None

    def kernels(self) -> list[str]:
        return sorted(self._summaries if self._summaries is not None else self._by_kernel)

    def summary_of(self, kernel: str) -> KernelSummary | None:
        """One kernel's counts per target (from the header, for a sharded manifest); None if it has none."""
        if self._summaries is not None:
            return self._summaries.get(kernel)
        return next((s for s in self.summary() if s.kernel == kernel), None)

    def variants_of(self, kernel: str, target: str | None = None) -> list[Variant]:
        """The variants of one kernel (parsed and checked on first use); [] for an unknown kernel. With
        ``target`` (``cuda:90``), only those built for it: a format-2.1 archive then reads that target's
        shard alone, which is what a loader for one device needs."""
        if target is not None:
            return self._variants_of_target(kernel, target)
        parsed = self._parsed.get(kernel)
        if parsed is None:
            summary = self._summaries.get(kernel) if self._summaries is not None else None
            if summary is not None and any((kernel, t) in self._by_target for t, _ in summary.targets):
                # Some targets were read alone: read the others the same way, and keep one object per variant.
                parsed = sorted(
                    (v for t, _ in summary.targets for v in self._variants_of_target(kernel, t)), key=lambda v: v.key
                )
            elif self._summaries is not None:
                parsed = self._load(kernel)
            else:
                entries = self._by_kernel.get(kernel, [])
                parsed = [e if isinstance(e, Variant) else Variant.from_json(e, f"variants[{i}]") for i, e in entries]
            with self._lock:
                self._parsed[kernel] = parsed
        return list(parsed)

    def _variants_of_target(self, kernel: str, target: str) -> list[Variant]:
        parsed = self._parsed.get(kernel)
        if parsed is not None or self._target_loader is None or self._summaries is None:
            return [v for v in (parsed if parsed is not None else self.variants_of(kernel)) if str(v.target) == target]
        found = self._by_target.get((kernel, target))
        if found is None:
            summary = self._summaries.get(kernel)
            count = dict(summary.targets).get(target, 0) if summary is not None else 0
            found = self._target_loader(kernel, target) if count else []
            if found is None:  # no per-target shards: the kernel's whole shard
                return [v for v in self.variants_of(kernel) if str(v.target) == target]
            where = f"shard of {kernel!r} for {target}"
            if set(map(_KERNEL, found)) - {kernel} or set(target_labels(found)) - {target}:
                raise SchemaError(f"{where}: holds a variant of another kernel or target", where=where)
            if len(found) != count:
                raise SchemaError(f"{where}: its variants do not match the counts in the manifest header", where=where)
            with self._lock:
                self._by_target[(kernel, target)] = found
        return list(found)

    def _load(self, kernel: str) -> list[Variant]:
        summary = self._summaries.get(kernel) if self._summaries is not None else None
        if summary is None or self._loader is None:
            return []
        out = self._loader(kernel)
        where = f"shard of {kernel!r}"
        if any(v.kernel != kernel for v in out):
            raise SchemaError(f"{where}: holds a variant of another kernel", where=where)
        if KernelSummary.of(kernel, (str(v.target) for v in out)) != summary:
            raise SchemaError(f"{where}: its variants do not match the counts in the manifest header", where=where)
        return out

    def summary(self) -> list[KernelSummary]:
        """Per kernel: how many variants, for which targets. Sharded manifests answer from the header."""
        if self._summaries is not None:
            return [self._summaries[k] for k in sorted(self._summaries)]
        out = []
        for kernel in sorted(self._by_kernel):
            entries = self._by_kernel[kernel]
            out.append(
                KernelSummary.of(
                    kernel,
                    (str(e.target) if isinstance(e, Variant) else target_label(e.get("target")) for _, e in entries),
                )
            )
        return out

    @property
    def variants(self) -> tuple[Variant, ...]:
        """Every variant, in manifest order."""
        if self._summaries is not None:  # manifest order is shard order, then row order
            return tuple(v for kernel in self._summaries for v in self.variants_of(kernel))
        out: list[tuple[int, Variant]] = []
        for kernel, entries in self._by_kernel.items():
            out.extend(zip((i for i, _ in entries), self.variants_of(kernel)))
        return tuple(v for _, v in sorted(out, key=lambda t: t[0]))

    def __len__(self) -> int:
        if self._summaries is not None:
            return sum(s.variants for s in self._summaries.values())
        return sum(len(e) for e in self._by_kernel.values())

    def targets(self) -> list[str]:
        """Every target (``cuda:90``) some variant is built for, read without parsing every variant."""
        return sorted({t for s in self.summary() for t, _ in s.targets})

    def backends(self) -> set[str]:
        """Backends the variants target, read without parsing every variant."""
        if self._summaries is not None:
            return {t.split(":", 1)[0] for t in self.targets()}
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
        return f"<karchive.Manifest {self.name} {self.version}: {len(self)} variants of {len(self.kernels())} kernels>"
