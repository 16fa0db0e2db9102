"""Triton's on-disk cache: read its entries, describe them as variants, write variants back as entries.

An entry is a directory ``<cache>/<base32(sha256(key))>/`` holding ``<name>.json`` (metadata), the
binary, IR files and ``__grp__<name>.json`` (``{"child_paths": {file: absolute path}}``); Triton counts
a hit when the group file exists and every child path exists. The key starts with ``triton_key()`` (a
hash of the installed Triton's sources and ``libtriton.so``), so entries only help the very same Triton
build: variants carry that build's fingerprint (``provenance.triton_cache``) and export refuses others.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ...core.digest import is_sha256_hex
from ...core.fsio import read_regular
from ...core.grammar import fullmatch
from ...core.jsonio import parse_json
from ...errors import CaptureError, KarchiveError, SchemaError, UnsupportedKernelError
from ...format.autotune import CONFIG_OPTIONS
from ...format.layout import BINARY_EXT, IR_STAGES
from ...format.manifest import Variant, is_ir_stage
from ...format.names import SHORT_NAME, select_kernels, short_name
from ..compile._irtext import enclosed, split_top_level
from ..compile.describe import CompiledVariant, describe_variant
from ..compile.toolchain import backend_hash, build_fingerprint, cache_env_vars

__all__ = [
    "BINARY_EXTS",
    "CacheEntry",
    "ExportResult",
    "ImportResult",
    "TEXT_EXTS",
    "TtirArg",
    "autotune_cache_files",
    "cache_dir_name",
    "check_build",
    "describe_entry",
    "entries_in_dir",
    "entry_from_group",
    "export_archive",
    "export_autotune",
    "import_cache",
    "iter_cache",
    "local_cache_dir",
    "parse_ttir_signature",
    "triton_site_root",
    "write_entry",
]

TEXT_EXTS = ("source", "ttir", "ttgir", "llir", "ptx", "amdgcn")
BINARY_EXTS = tuple(BINARY_EXT.values())


# --- identity of the local Triton build ----------------------------------------------------------
def cache_dir_name(triton_hash: str) -> str:
    """Triton's entry directory name for a metadata ``hash`` (runtime/cache.py ``_base32``)."""
    if not is_sha256_hex(triton_hash):
        raise CaptureError(f"not a Triton cache hash (64 lowercase hex digits): {triton_hash!r}")
    return base64.b32encode(bytes.fromhex(triton_hash)).decode().rstrip("=")


def local_cache_dir() -> str:
    from triton import knobs

    return os.path.abspath(knobs.cache.dir)


def triton_site_root() -> str:
    """The directory holding the ``triton`` package: what the metadata path sentinel stands for."""
    import triton

    return os.path.dirname(os.path.dirname(os.path.abspath(triton.__file__)))


# --- reading entries -----------------------------------------------------------------------------
@dataclass
class CacheEntry:
    """One compiled kernel in a Triton cache directory."""

    directory: str
    stem: str  # file name stem: the kernel's Python name, truncated to 150 characters by Triton
    metadata: dict
    paths: dict[str, str] = field(default_factory=dict)  # extension -> file path

    @property
    def triton_hash(self) -> str | None:
        h = self.metadata.get("hash")
        return h if isinstance(h, str) else None

    def read_asm(self) -> dict[str, Any]:
        """Binary as bytes, IR as text: the same shape as ``CompiledKernel.asm``."""
        asm: dict[str, Any] = {}
        for ext, path in self.paths.items():
            try:  # a directory the user named: a FIFO there is refused, not waited on
                data = read_regular(path, None)
            except OSError as exc:
                raise CaptureError(f"cannot read {path}: {exc}") from exc
            asm[ext] = data if ext in BINARY_EXTS else data.decode("utf-8", "replace")
        return asm


def _load_json(path: str) -> Any:
    """A Triton cache file: Triton's JSON, not canonical (so not strict), but still a karchive error."""
    try:
        raw = read_regular(path, None)
    except OSError as exc:
        raise CaptureError(f"cannot read Triton cache file {path}: {exc}") from exc
    return parse_json(raw, f"Triton cache file {path}", error=CaptureError, strict=False)


def entry_from_group(metadata_group: Mapping[str, str], directory: str | None = None) -> CacheEntry:
    """An entry from a group map (``{file name: path}``), as the compilation listener receives it.

    Paths that no longer exist are looked up by file name in ``directory`` (a copied cache dir).
    """
    paths: dict[str, str] = {}
    stem = None
    meta_path = None
    for filename, path in metadata_group.items():
        if directory is not None and not os.path.exists(path):
            path = os.path.join(directory, os.path.basename(filename))
        base, _, ext = filename.rpartition(".")
        if ext == "json":
            stem, meta_path = base, path
        elif ext in TEXT_EXTS or ext in BINARY_EXTS:
            paths[ext] = path
    if meta_path is None or stem is None:
        raise CaptureError(f"Triton cache group has no metadata file: {sorted(metadata_group)}")
    metadata = _load_json(meta_path)
    if not isinstance(metadata, dict) or "target" not in metadata:
        raise CaptureError(f"{meta_path} is not Triton kernel metadata")
    return CacheEntry(directory or os.path.dirname(meta_path), stem, metadata, paths)


def entries_in_dir(entry_dir: str) -> list[CacheEntry]:
    """Kernel entries of one cache directory; other entries (launchers, autotune results) give none."""
    try:
        names = os.listdir(entry_dir)
    except OSError:
        return []
    out = []
    for name in sorted(names):
        if not (name.startswith("__grp__") and name.endswith(".json")):
            continue
        group = _load_json(os.path.join(entry_dir, name))
        child = group.get("child_paths") if isinstance(group, dict) else None
        if not isinstance(child, dict) or not any(k.endswith(".json") for k in child):
            continue
        try:
            out.append(entry_from_group(child, entry_dir))
        except CaptureError:
            continue  # not kernel metadata (e.g. a launcher group)
    return out


def iter_cache(cache_dir: str) -> Iterator[CacheEntry]:
    if not os.path.isdir(cache_dir):
        raise CaptureError(f"not a directory: {cache_dir}")
    for name in sorted(os.listdir(cache_dir)):
        path = os.path.join(cache_dir, name)
        if os.path.isdir(path) and not name.startswith("tmp."):
            yield from entries_in_dir(path)


# --- describing an entry without its Python source -----------------------------------------------
_MLIR_TYPES = {
    "i1": "i1",
    "i8": "i8",
    "i16": "i16",
    "i32": "i32",
    "i64": "i64",
    "f16": "fp16",
    "bf16": "bf16",
    "f32": "fp32",
    "f64": "fp64",
    "f8E4M3FN": "fp8e4nv",
    "f8E5M2": "fp8e5",
    "f8E4M3FNUZ": "fp8e4b8",
    "f8E5M2FNUZ": "fp8e5b16",
    "f8E4M3B11FNUZ": "fp8e4b15",
}


@dataclass(frozen=True)
class TtirArg:
    name: str
    type: str
    divisibility: int | None


def _mlir_type(text: str, where: str, kernel: str) -> str:
    text = text.strip()
    m = re.match(r"^!tt\.ptr<\s*([^,>]+)", text)
    if m:
        return "*" + _mlir_type(m.group(1), where, kernel)
    if text in _MLIR_TYPES:
        return _MLIR_TYPES[text]
    raise UnsupportedKernelError(
        f"{where}: parameter type {text!r} cannot be described by karchive's launch ABI", kernel=kernel
    )


def parse_ttir_signature(ttir: str, kernel: str) -> list[TtirArg]:
    """The public function's parameters as the binary takes them: names (from ``loc``), types, hints."""
    m = re.search(r"tt\.func\s+public\s+@" + re.escape(kernel) + r"\s*\(", ttir) or re.search(
        r"tt\.func\s+public\s+@[\w$.]+\s*\(", ttir
    )
    if not m:
        raise CaptureError(f"{kernel}: no public tt.func in the Triton IR")
    params = enclosed(ttir, m.end())
    if params is None:
        raise CaptureError(f"{kernel}: unbalanced parameter list in the Triton IR")
    args = []
    for i, decl in enumerate(split_top_level(params)):
        dm = re.match(r"\s*%([\w$.]+)\s*:\s*(.*)$", decl, re.S)
        if not dm:
            raise CaptureError(f"{kernel}: cannot parse parameter {decl.strip()!r}")
        ssa, rest = dm.groups()
        type_text = re.split(r"\s(?:\{|loc\()", rest, maxsplit=1)[0]
        loc = re.search(r'loc\("([^"]+)"', rest)
        name = loc.group(1) if loc else (ssa if not re.fullmatch(r"arg\d+", ssa) else f"arg{i}")
        div = re.search(r"tt\.divisibility\s*=\s*(\d+)", rest)
        args.append(
            TtirArg(name, _mlir_type(type_text, f"{kernel} parameter {i}", kernel), int(div.group(1)) if div else None)
        )
    return args


def describe_entry(
    entry: CacheEntry, *, origin: str = "triton-cache", include_ir: bool = True, provenance_extra: dict | None = None
) -> CompiledVariant:
    """Describe a cache entry from what it holds: the binary's own parameters, no constexpr values.

    The params are the kernel's runtime arguments only (constexprs and ``== 1`` specialisations are
    baked in and unknown), named from the IR's ``loc`` info; the key's source identity is Triton's
    own cache hash, so these keys are install-specific and never equal AOT or capture keys.
    """
    asm = entry.read_asm()
    ttir = asm.get("ttir") or asm.get("source")
    if not isinstance(ttir, str):
        raise CaptureError(f"{entry.directory}: entry has no Triton IR (.ttir/.source); cannot derive the signature")
    args = parse_ttir_signature(ttir, entry.stem)
    names = [a.name for a in args]
    if len(set(names)) != len(names):
        names = [f"arg{i}" for i in range(len(args))]
    backend = entry.metadata["target"]["backend"] if isinstance(entry.metadata["target"], dict) else ""
    if backend not in BINARY_EXT or BINARY_EXT[backend] not in asm:
        raise CaptureError(f"{entry.directory}: no {BINARY_EXT.get(backend, 'binary')} file in the entry")
    asm = {k: v for k, v in asm.items() if k in IR_STAGES[backend] or k == BINARY_EXT[backend]}
    divisibility = {n: a.divisibility for n, a in zip(names, args) if a.divisibility}
    h = entry.triton_hash
    return describe_variant(
        kernel=entry.stem,
        param_names=names,
        param_types={n: a.type for n, a in zip(names, args)},
        constexprs={},
        divisibility=divisibility,
        equal_to_1={},
        metadata=entry.metadata,
        asm=asm,
        source_key=f"triton-cache:{h}",
        source_text=None,
        hooks=[],
        origin=origin,
        include_ir=include_ir,
        provenance_extra=provenance_extra,
    )


# --- writing entries -----------------------------------------------------------------------------
@dataclass
class ExportResult:
    kernel: str
    key: str
    status: str  # written | exists | mismatch | unverified | skipped
    detail: str = ""
    path: str | None = None


def check_build(variant: Variant) -> tuple[str, str]:
    """("ok"|"mismatch"|"unverified", why): can this Triton install hit the variant's cache entry?"""
    prov = variant.provenance
    recorded = prov.triton_cache
    if not prov.triton_hash:
        return "unverified", "no Triton cache hash recorded"
    if not isinstance(recorded, dict) or not recorded.get("triton_key_sha256"):
        return "unverified", "no Triton build fingerprint recorded (provenance.triton_cache)"
    local = build_fingerprint(variant.target.to_json())
    if recorded["triton_key_sha256"] != local["triton_key_sha256"]:
        return "mismatch", (
            f"built by Triton {prov.triton_version or '?'} build "
            f"{recorded['triton_key_sha256'][:12]}, this is Triton {_local_version()} build "
            f"{(local['triton_key_sha256'] or 'unknown')[:12]}; Triton would never look these entries up"
        )
    if recorded.get("backend_hash") != local["backend_hash"]:
        return "mismatch", (
            f"backend hash differs (recorded {recorded.get('backend_hash')!r}, local "
            f"{local['backend_hash']!r}: another ptxas/ROCm toolchain)"
        )
    if (recorded.get("env_vars") or {}) != local["env_vars"]:
        return "ok", (
            f"note: cache-invalidating environment differs (recorded {recorded.get('env_vars')}, "
            f"now {local['env_vars']}); Triton only hits the entry under the recorded environment"
        )
    return "ok", ""


def _local_version() -> str:
    import triton

    return str(triton.__version__)


def _inside(directory: str, path: str) -> bool:
    """True when ``path`` resolves to a direct child of ``directory`` (after symlinks and ``..``)."""
    return os.path.dirname(os.path.realpath(path)) == os.path.realpath(directory)


def write_entry(cache_dir: str, triton_hash: str, stem: str, files: Mapping[str, bytes]) -> tuple[str, str]:
    """Write one entry atomically (temporary dir + rename); an existing non-empty entry is left alone.

    ``files`` maps extensions (``json``, ``cubin``, ``ptx`` ...) to bytes. Returns (status, path).
    ``stem`` and the extensions come from an archive: each must be a plain name (an identifier, an IR
    stage name), and every path written is checked to stay inside ``cache_dir`` (issue 20: a kernel
    named ``../../x`` once wrote two directories above it).
    """
    if not fullmatch(SHORT_NAME, stem):
        raise SchemaError(f"not a Triton cache file stem (an identifier): {ascii(stem)[:80]}", where="kernel")
    for ext in files:
        if not is_ir_stage(ext):
            raise SchemaError(f"not a Triton cache file extension: {ascii(ext)[:40]}", where="files.ir")
    final = os.path.join(cache_dir, cache_dir_name(triton_hash))
    if not _inside(cache_dir, final):
        raise CaptureError(f"Triton cache entry {final} would lie outside {cache_dir}")
    if os.path.isdir(final) and os.listdir(final):
        return "exists", final
    os.makedirs(cache_dir, exist_ok=True)
    tmp = os.path.join(cache_dir, f"tmp.karchive_{os.getpid()}_{uuid.uuid4().hex}")
    os.makedirs(tmp)
    try:
        child_paths = {}
        for ext, data in files.items():
            filename = f"{stem}.{ext}"
            target = os.path.join(tmp, filename)
            if not _inside(tmp, target):  # cannot happen with the names checked above; never trust that alone
                raise CaptureError(f"Triton cache file {filename!r} would lie outside {tmp}")
            with open(target, "xb") as fh:
                fh.write(data)
            child_paths[filename] = os.path.join(final, filename)
        with open(os.path.join(tmp, f"__grp__{stem}.json"), "w", encoding="utf-8") as fh:
            json.dump({"child_paths": child_paths}, fh)
        if os.path.isdir(final):
            try:
                os.rmdir(final)  # Triton creates entry dirs eagerly on a lookup; an empty one is ours to fill
            except OSError:
                return "exists", final
        try:
            os.rename(tmp, final)
        except OSError:
            if os.path.isdir(final) and os.listdir(final):
                return "exists", final  # another writer won the race
            raise
        return "written", final
    finally:
        if os.path.isdir(tmp):
            for name in os.listdir(tmp):
                os.unlink(os.path.join(tmp, name))
            os.rmdir(tmp)


def export_archive(
    reader: Any, cache_dir: str | None = None, *, allow_unverified: bool = False, kernels: list[str] | None = None
) -> list[ExportResult]:
    """Write every variant of an open archive into a Triton cache directory (default: Triton's own)."""
    from ...format.sentinel import restore_json_bytes

    cache_dir = os.path.abspath(cache_dir or local_cache_dir())
    root = triton_site_root()
    results = []
    model = reader.model  # format 2: only the selected kernels' shards are read
    for v in (v for k in select_kernels(kernels, model.kernels()) for v in model.variants_of(k)):
        status, why = check_build(v)
        if status == "mismatch" or (status == "unverified" and not allow_unverified):
            results.append(ExportResult(v.kernel, v.key, status, why))
            continue
        triton_hash = v.provenance.triton_hash
        if not triton_hash:
            results.append(ExportResult(v.kernel, v.key, "skipped", "no Triton cache hash recorded"))
            continue
        files = {
            BINARY_EXT[v.target.backend]: reader.read(v.binary.path),
            "json": restore_json_bytes(reader.read(v.metadata.path), root),
        }
        for stage, ref in v.ir.items():
            if stage not in files:  # a stage named like the binary or metadata must not replace them
                files[stage] = reader.read(ref.path)
        # Triton names an entry's files after the function's __name__ (the short name), truncated to 150
        # characters; the model checked the whole name's grammar, write_entry checks the stem again.
        stem = short_name(v.kernel)[:150]
        try:
            written, path = write_entry(cache_dir, triton_hash, stem, files)
        except OSError as exc:
            raise CaptureError(f"cannot write Triton cache entries under {cache_dir}: {exc}") from exc
        detail = why if written == "written" else "entry already present; left alone"
        results.append(ExportResult(v.kernel, v.key, written, detail, path))
    # The decisions of the kernels whose binaries are in the cache now (a decision alone would make Triton
    # compile the chosen config; for a refused build it would never be looked up).
    exported = sorted({r.kernel for r in results if r.status in ("written", "exists")})
    if getattr(model, "autotune", None) and exported:
        manifest = {
            "variants": [v.to_json() for k in exported for v in model.variants_of(k)],
            "autotune": model.autotune,
        }
        results.extend(export_autotune(manifest, cache_dir, exported))
    return results


def _key_value(v: Any) -> Any:
    """A stored key part back as Triton held it (a non-finite float is stored as ``{"float": ...}``)."""
    if isinstance(v, dict) and v.get("float") in ("inf", "-inf", "nan"):
        return float(v["float"])
    return v


def _triton_config(c: Mapping[str, Any]) -> Any:
    """The ``triton.Config`` a stored config describes (None where it cannot be rebuilt exactly)."""
    import triton

    if c.get("pre_hook") or c.get("ir_override") or not isinstance(c.get("kwargs"), dict):
        return None  # Triton does not read its disk cache for configs with pre_hooks; overrides are files
    opts = {k: c[k] for k in CONFIG_OPTIONS if c.get(k) is not None}
    return triton.Config(dict(c["kwargs"]), **opts)


def autotune_cache_files(manifest: Mapping[str, Any], kernels: list[str] | None = None) -> list[tuple[str, str, Any]]:
    """``(kernel, cache key, file text or why not)`` per recorded autotune decision: the files Triton's
    ``Autotuner.check_disk_cache`` reads (``<cache>/<base32 key>/<fn name>.autotune.json``), keyed as this
    Triton install keys them (``triton_key()``, the backend's hash, the JIT function's ``cache_key``, the
    cache-invalidating environment, ``str(key)``, ``str(config)`` of the configs it benchmarked)."""
    from triton.runtime.cache import triton_key

    out: list[tuple[str, str, Any]] = []
    by_kernel: dict[str, list[Mapping[str, Any]]] = {}
    for v in manifest.get("variants", []):
        by_kernel.setdefault(v.get("kernel"), []).append(v)
    env = str(sorted(cache_env_vars().items()))
    for record in manifest.get("autotune") or []:
        kernel = record.get("kernel")
        if kernels and kernel not in kernels:
            continue
        variants = {v.get("key"): v for v in by_kernel.get(kernel, [])}
        configs = [_triton_config(c) for c in record.get("configs", [])]
        fn_name = str(kernel).rpartition(":")[2].rpartition(".")[2]
        for entry in record.get("entries", []):
            index = entry.get("config")
            variant = variants.get(entry.get("variant")) or next(iter(variants.values()), None)
            source_key = ((variant or {}).get("provenance") or {}).get("source_key")
            if not isinstance(index, int) or not 0 <= index < len(configs) or configs[index] is None:
                out.append((kernel, "", "its chosen config cannot be rebuilt (a pre_hook or ir_override)"))
                continue
            if variant is None or not source_key or source_key.startswith("triton-cache:"):
                out.append((kernel, "", "no variant with the JIT function's cache key recorded"))
                continue
            timings = entry.get("timings_ms")
            # The configs Triton benchmarked for this key (after pruning): those with a timing; all without timings.
            picked = (
                [i for i, t in enumerate(timings) if t is not None]
                if isinstance(timings, list) and len(timings) == len(configs)
                else list(range(len(configs)))
            )
            if index not in picked or any(configs[i] is None for i in picked):
                out.append((kernel, "", "a benchmarked config cannot be rebuilt (a pre_hook or ir_override)"))
                continue
            t = variant["target"]
            backend = backend_hash(t["backend"], str(t["arch"]), int(t["warp_size"]))
            if backend is None:
                out.append((kernel, "", f"this Triton has no backend for {t['backend']}:{t['arch']}"))
                continue
            key = tuple(_key_value(k) for k in entry.get("key", []))
            parts = [triton_key(), backend, source_key, env, str(key)] + [str(configs[i]) for i in picked]
            cache_key = hashlib.sha256("-".join(parts).encode("utf-8")).hexdigest()
            # Triton takes the minimum: the recorded timings where they make the recorded choice win, else 0
            # for the choice and 1 for the others (the decision is what is exported, not the measurements).
            times = {
                i: (timings[i] if isinstance(timings, list) and isinstance(timings[i], (int, float)) else None)
                for i in picked
            }
            chosen_t = times[index]
            honest = chosen_t is not None and all(times[i] is None or times[i] > chosen_t for i in picked if i != index)
            rows = []
            for i in picked:
                ms = times[i] if honest and times[i] is not None else (0.0 if i == index else 1.0)
                if honest and times[i] is None:
                    ms = chosen_t + 1.0 if chosen_t is not None else 1.0
                rows.append((dict(vars(configs[i])), [ms, ms, ms]))
            text = json.dumps({"key": list(key), "configs_timings": rows})
            out.append((kernel, cache_key, (fn_name[:150] + ".autotune.json", text)))
    return out


def export_autotune(
    manifest: Mapping[str, Any], cache_dir: str, kernels: list[str] | None = None
) -> list[ExportResult]:
    """Write the archive's autotune decisions into a Triton cache (see :func:`autotune_cache_files`). Triton
    reads them for autotuners with ``cache_results=True``, or every autotuner under ``TRITON_CACHE_AUTOTUNING=1``:
    a fresh process then benchmarks nothing for the recorded keys."""
    results = []
    for kernel, cache_key, what in autotune_cache_files(manifest, kernels):
        if isinstance(what, str):
            results.append(ExportResult(kernel, "autotune", "unexportable", what))
            continue
        name, text = what
        directory = os.path.join(cache_dir, cache_dir_name(cache_key))
        path = os.path.join(directory, name)
        if os.path.exists(path):
            results.append(ExportResult(kernel, cache_key, "exists", "autotune decision already present", path))
            continue
        try:
            os.makedirs(directory, exist_ok=True)
            tmp = f"{path}.tmp.karchive_{os.getpid()}_{uuid.uuid4().hex}"
            with open(tmp, "w", encoding="utf-8") as fh:
                fh.write(text)
            os.replace(tmp, path)
        except OSError as exc:
            raise CaptureError(f"cannot write Triton autotune cache files under {cache_dir}: {exc}") from exc
        results.append(
            ExportResult(
                kernel,
                cache_key,
                "written",
                "autotune decision (read under cache_results=True or TRITON_CACHE_AUTOTUNING=1)",
                path,
            )
        )
    return results


@dataclass
class ImportResult:
    variants: list[CompiledVariant]
    skipped: list[str]  # "<entry dir>: why"
    duplicates: int = 0


def import_cache(cache_dir: str, *, same_build: bool = False, include_ir: bool = True) -> ImportResult:
    """Describe every kernel entry of a Triton cache directory (see :func:`describe_entry`).

    ``same_build`` records this Triton install's fingerprint, i.e. the caller vouches that the cache
    was written by this very install; without it the variants have none and export refuses them.
    """
    cache_dir = os.path.abspath(cache_dir)
    result = ImportResult([], [])
    seen: set[str] = set()
    for entry in iter_cache(cache_dir):
        extra: dict[str, Any] = {}
        try:
            if same_build:
                target = entry.metadata["target"]
                extra["triton_cache"] = build_fingerprint(target)
            variant = describe_entry(entry, origin="triton-cache", include_ir=include_ir, provenance_extra=extra)
        except (KarchiveError, KeyError, TypeError, ValueError) as exc:
            result.skipped.append(f"{os.path.relpath(entry.directory, cache_dir)} ({entry.stem}): {exc}")
            continue
        if variant.key in seen:
            result.duplicates += 1
            continue
        seen.add(variant.key)
        result.variants.append(variant)
    return result
