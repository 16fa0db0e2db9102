"""Typed, validated views of the manifest that the runtime and the CLI consume.

The producer writes plain dicts (canonical JSON); consumers parse them through these classes, which
check every field they rely on, so a hostile manifest fails here with a :class:`SchemaError` instead
of deep inside a launch. The full JSON Schema (``manifest.schema.json``) is checked by ``verify``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import SchemaError, UnsupportedVersionError
from .constants import ABI_VERSION
from .target import Target

#: Scalar parameter types and their byte width as the binary takes them (ABI v1).
SCALAR_SIZES: dict[str, int] = {
    "i1": 1, "i8": 1, "i16": 2, "i32": 4, "i64": 8,
    "u1": 1, "u8": 1, "u16": 2, "u32": 4, "u64": 8,
    "fp16": 2, "bf16": 2, "fp32": 4, "fp64": 8,
}
POINTER_ELEMENT_TYPES = frozenset(
    ["i1", "i8", "i16", "i32", "i64", "u1", "u8", "u16", "u32", "u64", "fp16", "bf16", "fp32", "fp64",
     "fp8e4nv", "fp8e5", "fp8e4b15", "fp8e4b8", "fp8e5b16", "fp8e8m0", "fp4"]
)
ABI_KINDS = ("pointer", "scalar", "global_scratch", "profile_scratch")


def _req(obj: dict, key: str, typ: type | tuple[type, ...], where: str) -> Any:
    if not isinstance(obj, dict) or key not in obj:
        raise SchemaError(f"{where}: missing {key!r}")
    value = obj[key]
    if isinstance(value, bool) and typ in (int, (int,)):
        raise SchemaError(f"{where}.{key}: expected integer, got boolean")
    if not isinstance(value, typ):
        raise SchemaError(f"{where}.{key}: expected {typ}, got {type(value).__name__}")
    return value


def _opt(obj: dict, key: str, typ: type, where: str) -> Any:
    """An optional field: absent or null gives None, anything else must have the type."""
    value = obj.get(key)
    if value is None:
        return None
    if (isinstance(value, bool) and typ is int) or not isinstance(value, typ):
        raise SchemaError(f"{where}.{key}: expected {typ.__name__}, got {type(value).__name__}")
    return value


@dataclass(frozen=True)
class Param:
    """One parameter of the Python kernel signature, in call order."""

    name: str
    type: str  # "*fp32", "i32", "constexpr", ...
    constexpr: Any = None  # the value when the parameter was fixed at compile time
    is_constexpr: bool = False
    divisibility: int | None = None  # 16 for ':16' pointers/ints
    equal_to_1: bool = False  # ints specialised to 1 (fixed at compile time, not passed)


@dataclass(frozen=True)
class AbiParam:
    """One parameter exactly as the binary takes it."""

    name: str
    kind: str  # pointer | scalar | global_scratch | profile_scratch
    type: str | None  # "*fp32" / "i32" / None for scratch
    arg: int | None  # index into the call's arguments; None for scratch
    size: int  # bytes in the parameter buffer


@dataclass(frozen=True)
class Abi:
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


@dataclass(frozen=True)
class FileRef:
    path: str
    size: int
    sha256: str


@dataclass(frozen=True)
class Variant:
    kernel: str
    key: str
    target: Target
    params: tuple[Param, ...]
    options: dict
    abi: Abi
    binary: FileRef
    metadata: FileRef
    ir: dict[str, FileRef] = field(default_factory=dict)
    source: str | None = None
    provenance: dict = field(default_factory=dict)

    @property
    def constexprs(self) -> dict[str, Any]:
        return {p.name: p.constexpr for p in self.params if p.is_constexpr and not p.equal_to_1}


def _file(obj: Any, where: str) -> FileRef:
    path = _req(obj, "path", str, where)
    size = _req(obj, "size", int, where)
    digest = _req(obj, "sha256", str, where)
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise SchemaError(f"{where}.sha256: not a lowercase hex sha256")
    return FileRef(path, size, digest)


def _abi(obj: Any, n_params: int, where: str) -> Abi:
    version = _req(obj, "version", int, where)
    if version > ABI_VERSION:
        raise UnsupportedVersionError(
            f"{where}: launch ABI version {version} is newer than this runtime supports ({ABI_VERSION})"
        )
    params = []
    for i, p in enumerate(_req(obj, "params", list, where)):
        w = f"{where}.params[{i}]"
        kind = _req(p, "kind", str, w)
        if kind not in ABI_KINDS:
            raise SchemaError(f"{w}: unknown kind {kind!r}")
        typ = p.get("type")
        arg = p.get("arg")
        if kind in ("pointer", "scalar"):
            if not isinstance(typ, str) or not isinstance(arg, int) or isinstance(arg, bool) or not 0 <= arg < n_params:
                raise SchemaError(f"{w}: pointer/scalar params need a type and a valid arg index")
            if kind == "scalar" and typ not in SCALAR_SIZES:
                raise SchemaError(f"{w}: unsupported scalar type {typ!r}")
            if kind == "pointer" and not typ.startswith("*"):
                raise SchemaError(f"{w}: pointer type must start with '*'")
        size = 8 if kind != "scalar" else SCALAR_SIZES[typ]
        if _req(p, "size", int, w) != size:
            raise SchemaError(f"{w}: size {p['size']} does not match type {typ!r}")
        params.append(AbiParam(_req(p, "name", str, w), kind, typ, arg, size))
    gs = _req(obj, "global_scratch", dict, where)
    ps = _req(obj, "profile_scratch", dict, where)
    cluster = _req(obj, "cluster_dims", list, where)
    if len(cluster) != 3 or not all(isinstance(c, int) and c >= 1 for c in cluster):
        raise SchemaError(f"{where}.cluster_dims: three positive integers expected")
    return Abi(
        version=version,
        entry=_req(obj, "entry", str, where),
        binary_format=_req(obj, "binary_format", str, where),
        binary_arch=_req(obj, "binary_arch", str, where),
        params=tuple(params),
        shared=_req(obj, "shared", int, where),
        num_warps=_req(obj, "num_warps", int, where),
        warp_size=_req(obj, "warp_size", int, where),
        num_ctas=_req(obj, "num_ctas", int, where),
        cluster_dims=(cluster[0], cluster[1], cluster[2]),
        cooperative_grid=_req(obj, "cooperative_grid", bool, where),
        pdl=_req(obj, "pdl", bool, where),
        global_scratch_size=_req(gs, "size", int, where + ".global_scratch"),
        global_scratch_align=_req(gs, "align", int, where + ".global_scratch"),
        profile_scratch_size=_req(ps, "size", int, where + ".profile_scratch"),
        profile_scratch_align=_req(ps, "align", int, where + ".profile_scratch"),
        tmem_size=_opt(obj, "tmem_size", int, where) or 0,
    )


def parse_variant(obj: Any, where: str) -> Variant:
    params = []
    for i, p in enumerate(_req(obj, "params", list, where)):
        w = f"{where}.params[{i}]"
        name, typ = _req(p, "name", str, w), _req(p, "type", str, w)
        hints = _opt(p, "hints", dict, w) or {}
        divisibility = _opt(hints, "divisibility", int, w + ".hints")
        params.append(
            Param(
                name=name,
                type=typ,
                constexpr=p.get("value"),
                is_constexpr="value" in p,
                divisibility=divisibility,
                equal_to_1=_opt(hints, "equal_to_1", bool, w + ".hints") is True,
            )
        )
    files = _req(obj, "files", dict, where)
    ir = {stage: _file(ref, f"{where}.files.ir.{stage}")
          for stage, ref in (_opt(files, "ir", dict, where + ".files") or {}).items()}
    return Variant(
        kernel=_req(obj, "kernel", str, where),
        key=_req(obj, "key", str, where),
        target=Target.from_json(_req(obj, "target", dict, where), where + ".target"),
        params=tuple(params),
        options=_req(obj, "options", dict, where),
        abi=_abi(_req(obj, "abi", dict, where), len(params), where + ".abi"),
        binary=_file(files.get("binary"), f"{where}.files.binary"),
        metadata=_file(files.get("metadata"), f"{where}.files.metadata"),
        ir=ir,
        source=_opt(files, "source", str, where + ".files"),
        provenance=_opt(obj, "provenance", dict, where) or {},
    )


@dataclass(frozen=True)
class Manifest:
    name: str
    version: str
    format_version: str
    produced_by: dict
    variants: tuple[Variant, ...]
    raw: dict

    @classmethod
    def from_json(cls, obj: dict) -> "Manifest":
        variants = tuple(parse_variant(v, f"variants[{i}]") for i, v in enumerate(_req(obj, "variants", list, "manifest")))
        keys = [v.key for v in variants]
        if len(set(keys)) != len(keys):
            raise SchemaError("manifest: duplicate variant keys")
        return cls(
            name=_req(obj, "name", str, "manifest"),
            version=_req(obj, "version", str, "manifest"),
            format_version=_req(obj, "format_version", str, "manifest"),
            produced_by=_req(obj, "produced_by", dict, "manifest"),
            variants=variants,
            raw=obj,
        )

    def kernels(self) -> list[str]:
        return sorted({v.kernel for v in self.variants})
