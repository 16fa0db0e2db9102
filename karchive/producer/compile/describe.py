"""Turn one Triton compile result into a manifest variant: params, options, launch ABI, files.

Used by both the AOT compiler and JIT capture, so both produce the same entries and keys. The
launch ABI is derived from the metadata and then checked against the binary's own entry point
(PTX ``.entry`` or LLVM ``define``): a kernel whose parameters cannot be accounted for is refused.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field, replace
from typing import Any

from ...core.digest import sha256_hex
from ...errors import UnsupportedKernelError
from ...format.constants import ABI_VERSION, ABI_VERSION_PLAIN
from ...format.dtypes import SCALAR_SIZES
from ...format.layout import BINARY_EXT, IR_STAGES, METADATA_EXT, source_member, variant_member
from ...format.manifest import Abi, AbiParam, FileRef, Param, Provenance, Variant
from ...format.sentinel import rewrite_paths
from ...format.target import Target
from ._irtext import enclosed, split_top_level
from .tensordesc_abi import binary_param_sizes, tensordesc_records
from .variant_key import normalize_options, variant_key

__all__ = ["BINARY_EXT", "IR_STAGES", "CompiledVariant", "build_abi", "describe_variant"]

_PTX_SIZES = {"8": 1, "16": 2, "32": 4, "64": 8}
_LLVM_SIZES = {
    "ptr": 8,
    "half": 2,
    "bfloat": 2,
    "float": 4,
    "double": 8,
    "i1": 1,
    "i8": 1,
    "i16": 2,
    "i32": 4,
    "i64": 8,
}


@dataclass
class CompiledVariant:
    """A manifest variant (file refs included) plus the bytes those refs name."""

    variant: Variant
    files: dict[str, bytes]  # role -> bytes: "binary", "metadata", and IR stage names
    source_text: str | None
    warnings: list[str] = field(default_factory=list)
    #: Sources of every module whose JIT functions the kernel uses (source_text's module first), stored
    #: like source_text; provenance.build.sources names them for a rebuild (canonical.py).
    extra_sources: list[str] = field(default_factory=list)
    #: Triton served it from the build cache (``karchive build`` says "from the build cache", not "compiled").
    from_cache: bool = False

    @property
    def key(self) -> str:
        return self.variant.key

    @property
    def kernel(self) -> str:
        return self.variant.kernel

    @classmethod
    def assemble(
        cls,
        variant: Variant,
        files: dict[str, bytes],
        source_text: str | None,
        warnings: list[str] | None = None,
        extra_sources: list[str] | None = None,
    ) -> CompiledVariant:
        """Point ``variant``'s file refs at ``files`` (member names from the format's layout rule)."""
        key, backend = variant.key, variant.target.backend
        ir = {
            stage: FileRef.for_bytes(variant_member(key, stage), data)
            for stage, data in sorted(files.items())
            if stage not in ("binary", "metadata")
        }
        source = source_member(sha256_hex(source_text.encode())) if source_text is not None else None
        complete = replace(
            variant,
            binary=FileRef.for_bytes(variant_member(key, BINARY_EXT[backend]), files["binary"]),
            metadata=FileRef.for_bytes(variant_member(key, METADATA_EXT), files["metadata"]),
            ir=ir,
            source=source,
        )
        return cls(complete, dict(files), source_text, list(warnings or []), list(extra_sources or []))

    def rekeyed(self, key: str, files: dict[str, bytes] | None = None) -> CompiledVariant:
        """The same variant under another key (and optionally other bytes): member names follow the key."""
        return self.replaced(replace(self.variant, key=key), files)

    def replaced(self, variant: Variant, files: dict[str, bytes] | None = None) -> CompiledVariant:
        """Another manifest entry (and optionally other bytes) for the same sources; refs re-derived."""
        return CompiledVariant.assemble(
            variant, files if files is not None else self.files, self.source_text, self.warnings, self.extra_sources
        )


def ptx_entry_param_sizes(ptx: str, entry: str) -> list[int] | None:
    m = re.search(r"\.entry\s+" + re.escape(entry) + r"\s*\((.*?)\)", ptx, re.S)
    if not m:
        return None
    sizes = []
    for decl in m.group(1).split(","):
        decl = decl.strip()
        if not decl:
            continue
        t = re.search(r"\.[busf](8|16|32|64)\b", decl)
        if not t:
            return None
        count = re.search(r"\[(\d+)\]\s*$", decl)
        sizes.append(_PTX_SIZES[t.group(1)] * (int(count.group(1)) if count else 1))
    return sizes


def llvm_entry_param_sizes(llir: str, entry: str) -> list[int] | None:
    m = re.search(r"define\s[^@\n]*@" + re.escape(entry) + r"\(", llir)
    args = enclosed(llir, m.end()) if m else None
    if args is None:
        return None
    out = []
    for decl in split_top_level(args):
        typ = decl.strip().split(" ", 1)[0]
        if typ not in _LLVM_SIZES:
            return None
        out.append(_LLVM_SIZES[typ])
    return out


def _target_json(metadata: dict) -> dict:
    target = metadata["target"]
    if isinstance(target, dict):
        backend, arch, warp = target["backend"], target["arch"], target["warp_size"]
    else:  # GPUTarget dataclass
        backend, arch, warp = target.backend, target.arch, target.warp_size
    return {"backend": backend, "arch": str(arch), "warp_size": int(warp)}


def build_abi(
    *,
    kernel: str,
    param_names: list[str],
    param_types: dict[str, str],
    metadata: dict,
    target: dict,
    asm: dict[str, Any],
) -> Abi:
    """The launch ABI, explicit: the loader follows it and never consults a Triton version."""
    if any(isinstance(t, (tuple, list)) for t in param_types.values()):
        raise UnsupportedKernelError(
            f"{kernel}: tuple parameters are not supported by launch ABI v{ABI_VERSION}", kernel=kernel
        )
    descs = tensordesc_records(kernel, param_names, param_types, metadata)
    params: list[AbiParam] = []
    for i, name in enumerate(param_names):
        typ = param_types[name]
        if typ == "constexpr":
            continue
        if name in descs:
            params.append(AbiParam(name, "tensordesc", typ, i, descs[name].size, descs[name]))
        elif typ.startswith("*"):
            params.append(AbiParam(name, "pointer", typ, i, 8))
        elif typ in SCALAR_SIZES:
            params.append(AbiParam(name, "scalar", typ, i, SCALAR_SIZES[typ]))
        else:
            raise UnsupportedKernelError(
                f"{kernel}: parameter {name!r} has type {typ!r}, which ABI v{ABI_VERSION} cannot pass", kernel=kernel
            )
    entry = metadata["name"]
    backend = target["backend"]
    sizes = None
    if backend == "cuda" and isinstance(asm.get("ptx"), str):
        sizes = ptx_entry_param_sizes(asm["ptx"], entry)
    elif backend == "hip" and isinstance(asm.get("llir"), str):
        sizes = llvm_entry_param_sizes(asm["llir"], entry)
    expected = binary_param_sizes(params)  # a descriptor is several binary parameters
    n_user = len(expected)
    if sizes is not None:
        extra = len(sizes) - n_user
        if (
            extra not in (0, 1, 2)
            or any(s != e for s, e in zip(sizes, expected))
            or any(s != 8 for s in sizes[n_user:])
        ):
            raise UnsupportedKernelError(
                f"{kernel}: the binary's entry takes {len(sizes)} parameters of sizes {sizes}, which karchive cannot map "
                f"onto {n_user} kernel parameters plus scratch pointers; refusing to pack a kernel it would launch wrongly",
                kernel=kernel,
            )
    else:  # binary-only input: follow the documented Triton history (3.3 added one pointer, 3.5 a second)
        major_minor = tuple(int(x) for x in str(metadata.get("triton_version", "3.5")).split(".")[:2])
        extra = 2 if major_minor >= (3, 5) else 1 if major_minor >= (3, 3) else 0
    for name in ("global_scratch", "profile_scratch")[:extra]:
        params.append(AbiParam(name, name, None, None, 8))
    num_ctas = int(metadata.get("num_ctas", 1))
    cluster = [int(c) for c in (metadata.get("cluster_dims") or [num_ctas, 1, 1])]
    return Abi(
        version=ABI_VERSION if descs else ABI_VERSION_PLAIN,
        entry=entry,
        binary_format=BINARY_EXT[backend],
        binary_arch=_binary_arch(metadata, target),
        params=tuple(params),
        shared=int(metadata.get("shared", 0)),
        tmem_size=int(metadata.get("tmem_size", 0) or 0),
        num_warps=int(metadata["num_warps"]),
        warp_size=int(target["warp_size"]),
        num_ctas=num_ctas,
        cluster_dims=(cluster[0], cluster[1], cluster[2]),
        cooperative_grid=bool(metadata.get("launch_cooperative_grid", False)),
        pdl=bool(metadata.get("launch_pdl", False)),
        global_scratch_size=int(metadata.get("global_scratch_size", 0) or 0),
        global_scratch_align=int(metadata.get("global_scratch_align", 1) or 1),
        profile_scratch_size=int(metadata.get("profile_scratch_size", 0) or 0),
        profile_scratch_align=int(metadata.get("profile_scratch_align", 1) or 1),
    )


def _binary_arch(metadata: dict, target: dict) -> str:
    """CUDA: Triton's rule (:attr:`Target.binary_arch`); HIP: the metadata's arch (it may carry features)."""
    if target["backend"] == "cuda":
        return Target(target["backend"], str(target["arch"]), int(target["warp_size"])).binary_arch
    return str(metadata.get("arch") or target["arch"])


_TRITON_MARK = f"{os.sep}triton{os.sep}backends{os.sep}"


def _strings(node: Any):
    if isinstance(node, str):
        yield node
    elif isinstance(node, (list, tuple)):
        for v in node:
            yield from _strings(v)
    elif isinstance(node, dict):
        for v in node.values():
            yield from _strings(v)


def install_roots_in(metadata: Any) -> list[str]:
    """Directories holding a ``triton`` package that the metadata's paths point into.

    Triton's cache key hashes file contents, not locations, so a cache hit can return metadata
    written by another install of the same Triton build: its paths name that install, not ours.
    """
    roots = set()
    for s in _strings(metadata):
        i = s.find(_TRITON_MARK) if os.path.isabs(s) else -1
        if i > 0:
            roots.add(s[:i])
    return sorted(roots)


def triton_roots() -> list[str]:
    """Directories whose paths are machine-specific: the site-packages holding Triton, the cache dir."""
    roots = []
    try:
        import triton

        roots.append(os.path.dirname(os.path.dirname(os.path.abspath(triton.__file__))))
        from triton import knobs

        roots.append(os.path.abspath(knobs.cache.dir))
    except Exception:  # noqa: BLE001 - Triton absent or old: no roots to add
        pass
    return roots


def describe_variant(
    *,
    kernel: str,
    param_names: list[str],
    param_types: dict[str, str],
    constexprs: dict[str, Any],
    divisibility: dict[str, int],
    equal_to_1: dict[str, str],
    metadata: dict,
    asm: dict[str, Any],
    source_key: str,
    source_text: str | None,
    hooks: list[dict],
    origin: str,
    include_ir: bool = True,
    extra_roots: list[str] | None = None,
    provenance_extra: dict | None = None,
    codegen_env: dict[str, str] | None = None,
    signature_defaults: dict[str, tuple[bool, Any]] | None = None,
) -> CompiledVariant:
    """One compile as a manifest variant. ``signature_defaults`` (:func:`signature_defaults`) records
    which parameters have a default in the kernel's Python signature; None where it is not known (a
    Triton-cache import has no function to read it from)."""
    target = _target_json(metadata)
    backend = target["backend"]
    abi = build_abi(
        kernel=kernel, param_names=param_names, param_types=param_types, metadata=metadata, target=target, asm=asm
    )
    params = []
    for name in param_names:
        typ = param_types[name]
        has_default, default = (signature_defaults or {}).get(name, (None, None))
        params.append(
            Param(
                name=name,
                type=equal_to_1.get(name, typ),
                constexpr=_json_value(constexprs[name]) if typ == "constexpr" else None,
                is_constexpr=typ == "constexpr",
                divisibility=divisibility.get(name),
                equal_to_1=name in equal_to_1,
                has_default=has_default,
                default=_json_value(default) if has_default else None,
            )
        )
    options = normalize_options(metadata)
    hint_desc = {n: {"divisibility": d} for n, d in divisibility.items()}
    hint_desc.update({n: {"equal_to_1": True} for n in equal_to_1})
    key = variant_key(
        kernel=kernel,
        source_key=source_key,
        signature={n: param_types[n] for n in param_names},
        constexprs={n: _json_value(v) for n, v in constexprs.items()},
        hints=hint_desc,
        target=target,
        options=options,
        triton_version=str(metadata.get("triton_version", "")),
        hooks=hooks,
        env=codegen_env,
    )
    plain_meta = json.loads(json.dumps(metadata, default=_json_default))
    roots = triton_roots() + install_roots_in(plain_meta) + (extra_roots or [])
    stored_meta = rewrite_paths(plain_meta, roots)
    files: dict[str, bytes] = {
        "binary": _as_bytes(asm[BINARY_EXT[backend]]),
        "metadata": json.dumps(stored_meta, sort_keys=True, separators=(",", ":")).encode(),
    }
    if include_ir:
        for stage in IR_STAGES[backend]:
            if stage in asm and asm[stage] is not None:
                files[stage] = _as_bytes(asm[stage])
    extra = dict(provenance_extra or {})
    provenance = Provenance(
        origin=origin,
        triton_version=str(metadata.get("triton_version", "")),
        triton_hash=metadata.get("hash"),
        source_key=source_key,
        hooks=tuple(hooks),
        triton_cache=extra.pop("triton_cache", None),
        harvested=extra.pop("harvested", None),
        build=extra.pop("build", None),
        extra=extra,
    )
    placeholder = FileRef("", 0, "0" * 64)  # replaced by assemble() once the bytes are final
    variant = Variant(
        kernel=kernel,
        key=key,
        target=Target(target["backend"], target["arch"], target["warp_size"]),
        params=tuple(params),
        options=options,
        abi=abi,
        binary=placeholder,
        metadata=placeholder,
        provenance=provenance,
    )
    return CompiledVariant.assemble(variant, files, source_text)


def signature_defaults(fn: Any) -> dict[str, tuple[bool, Any]] | None:
    """Per parameter of a ``@triton.jit`` function: (has a default in its Python signature, the default).

    The runtime needs it to treat a call that omits a constexpr as Triton does (the default, or a
    refusal when there is none); None when the signature cannot be read.
    """
    import inspect

    params = getattr(fn, "params", None)
    if params is not None and all(hasattr(p, "name") and hasattr(p, "default") for p in params):
        pairs = [(p.name, p.default) for p in params]
    else:
        try:
            pairs = [(p.name, p.default) for p in inspect.signature(getattr(fn, "fn", fn)).parameters.values()]
        except (TypeError, ValueError):
            return None
    return {name: (False, None) if d is inspect.Parameter.empty else (True, d) for name, d in pairs}


def _as_bytes(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


def _json_value(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if hasattr(value, "value"):  # tl.constexpr
        return _json_value(value.value)
    return str(value)


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "__dict__"):
        return vars(obj)
    if hasattr(obj, "_asdict"):
        return obj._asdict()
    return str(obj)
