"""Rebuild an archive's variants from what the archive alone holds, and compare with what it ships.

Every AOT variant records its request in ``provenance.build`` (module, kernel, target, signature,
constexprs, options, codegen environment, and the module sources under their canonical names), and
the archive stores those sources. A rebuild imports the sources from the archive (never from a
checkout), compiles each variant with the local toolchain in a fresh Triton cache, and compares:

- same toolchain (Triton build, ptxas / AMD code generator): every member byte for byte and the
  manifest entry field by field -> ``reproduced``, or ``mismatch`` naming the member and the first
  differing offset (or the field);
- another ptxas / AMD code generator, same Triton: key, options, launch ABI and the IR stages that
  do not depend on that tool (TTIR, TTGIR, LLVM IR) must still match -> ``consistent`` (or ``mismatch``);
- another Triton: the Python signature and the launch ABI must still match -> ``consistent``.

Variants without a build record (JIT capture, Triton-cache import) are ``not-rebuildable`` with the
reason. The rebuild runs the archive's Python source (as every Triton compile runs the kernel's
module), in worker processes so the caller's interpreter never imports it.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import json
import linecache
import os
import re
import shutil
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...core.jsonio import canonical_json
from ...errors import KarchiveError, SpecFileError
from ..compile.buildenv import strip_shell, validate_env
from ..compile.canonical import SCHEME, name_for_module

if TYPE_CHECKING:
    from ...format.reader import ArchiveReader

__all__ = [
    "ArchiveSourceFinder",
    "RebuildReport",
    "VariantCheck",
    "compare_variant",
    "first_difference",
    "rebuild_archive",
    "toolchain_summary",
]

#: Statuses, from best to worst for the exit code: 0 only if every variant is reproduced.
REPRODUCED, CONSISTENT, NOT_REBUILDABLE, FAILED, MISMATCH = (
    "reproduced",
    "consistent",
    "not-rebuildable",
    "failed",
    "mismatch",
)

#: IR stages that do not depend on ptxas (CUDA) or the AMD code generator (HIP). The PTX does: Triton
#: picks the PTX ISA version from the ptxas version.
_TRITON_STAGES = {"cuda": ("ttir", "ttgir", "llir"), "hip": ("ttir", "ttgir", "llir")}
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


@dataclass
class VariantCheck:
    """The outcome for one variant."""

    kernel: str
    key: str
    target: str
    status: str
    reason: str = ""
    differences: list[dict] = field(default_factory=list)  # {"member", "offset", ...} or {"field", ...}
    rebuilt_key: str | None = None

    def to_json(self) -> dict:
        out: dict[str, Any] = {"kernel": self.kernel, "key": self.key, "target": self.target, "status": self.status}
        if self.reason:
            out["reason"] = self.reason
        if self.differences:
            out["differences"] = self.differences
        if self.rebuilt_key is not None:
            out["rebuilt_key"] = self.rebuilt_key
        return out


@dataclass
class RebuildReport:
    archive: str
    name: str
    version: str
    toolchain: dict  # {"archive": produced_by, "local": versions, "differs": [names]}
    variants: list[VariantCheck]

    def counts(self) -> dict[str, int]:
        return dict(Counter(v.status for v in self.variants))

    def exit_code(self) -> int:
        """0 every variant reproduced; 1 any mismatch; 3 nothing wrong found but not all reproduced."""
        statuses = {v.status for v in self.variants}
        if MISMATCH in statuses:
            return 1
        return 0 if statuses == {REPRODUCED} else 3

    def to_json(self) -> dict:
        return {
            "archive": self.archive,
            "name": self.name,
            "version": self.version,
            "toolchain": self.toolchain,
            "counts": self.counts(),
            "exit_code": self.exit_code(),
            "variants": [v.to_json() for v in self.variants],
        }


# --- what a variant needs ------------------------------------------------------------------------
@dataclass
class _Task:
    index: int
    kernel: str  # the archived variant's kernel name (bare in archives from before qualified names)
    record: dict
    modules: dict[str, tuple[str, str, bool]]  # import name -> (canonical name, text, is package)
    include_ir: bool
    cache_dir: str


def _target_text(v: dict) -> str:
    t = v.get("target") or {}
    return f"{t.get('backend')}:{t.get('arch')}"


def _plan(reader: Any, index: int, v: dict, cache_dir: str) -> _Task | VariantCheck:
    """A rebuild task for the variant, or the reason it cannot be rebuilt."""

    def refuse(reason: str) -> VariantCheck:
        return VariantCheck(v["kernel"], v["key"], _target_text(v), NOT_REBUILDABLE, reason)

    prov = v.get("provenance") or {}
    record = prov.get("build")
    if not isinstance(record, dict):
        origin = prov.get("origin")
        why = {
            "triton-cache": "imported from a Triton cache: the archive holds the binary, not the source and "
            "constexpr values it was compiled from",
            "capture": "captured from a JIT run, which records no build request",
        }.get(str(origin), "no build record")
        return refuse(f"{why} (provenance.build is absent)")
    if record.get("scheme") != SCHEME:
        return refuse(f"source naming scheme {record.get('scheme')!r}; this karchive implements scheme {SCHEME}")
    try:
        validate_env(record.get("env"), "provenance.build.env")
    except SpecFileError as exc:
        return refuse(str(exc))
    for name in ("module", "attr", "target"):
        if not isinstance(record.get(name), str):
            return refuse(f"provenance.build.{name} is missing")
    if (
        not isinstance(record.get("constexprs", {}), dict)
        or not isinstance(record.get("options", {}), dict)
        or not isinstance(record.get("signature"), (str, dict))
    ):
        return refuse("provenance.build has a malformed signature, constexprs or options")
    sources = record.get("sources")
    if not isinstance(sources, list) or not all(isinstance(x, dict) for x in sources):
        return refuse("provenance.build.sources is not a list of {module, name, sha256}")
    by_sha = {f.sha256: f.path for f in reader.model.sources}  # the header's: no shard read
    modules: dict[str, tuple[str, str, bool]] = {}
    for src in sources:
        module, name, sha = src.get("module"), src.get("name"), src.get("sha256")
        if not isinstance(module, str) or not _MODULE.fullmatch(module) or module.split(".")[0] == "triton":
            return refuse(f"provenance.build.sources names an invalid module {module!r}")
        is_pkg = name == name_for_module(module, True)
        if name not in (name_for_module(module), name_for_module(module, True)):
            return refuse(f"source {name!r} does not follow the canonical name of module {module!r}")
        if sha not in by_sha:
            return refuse(f"the source of module {module!r} ({name}) is not in the archive")
        try:
            text = reader.read(by_sha[sha]).decode("utf-8")
        except UnicodeDecodeError:
            return refuse(f"the archived source of module {module!r} is not UTF-8 text")
        modules[module] = (name, text, is_pkg)
    if record["module"] not in modules:
        return refuse(f"the kernel's module {record['module']!r} is not among the archived sources")
    return _Task(index, v["kernel"], record, modules, include_ir=bool(v["files"].get("ir")), cache_dir=cache_dir)


# --- importing sources from the archive (worker side) --------------------------------------------
class ArchiveSourceFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves the archived modules by import name, compiled under their canonical file names."""

    def __init__(self, modules: dict[str, tuple[str, str, bool]]) -> None:
        self.modules = modules
        self.packages = {m.rsplit(".", i)[0] for m in modules for i in range(1, m.count(".") + 1)} - set(modules)
        self.synthesized: set[str] = set()

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname in self.modules:
            name, _, is_pkg = self.modules[fullname]
            return importlib.util.spec_from_loader(fullname, self, origin=name, is_package=is_pkg)
        if fullname in self.packages and importlib.machinery.PathFinder.find_spec(fullname, path) is None:
            # A parent package the archive does not hold and this machine lacks: an empty namespace package.
            self.synthesized.add(fullname)
            spec = importlib.machinery.ModuleSpec(fullname, None, is_package=True)
            spec.submodule_search_locations = []
            return spec
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None

    def exec_module(self, module: Any) -> None:
        name, text, _ = self.modules[module.__name__]
        module.__file__ = name
        # mtime None: linecache.checkcache never replaces the entry with a same-named file in the cwd.
        linecache.cache[name] = (len(text), None, text.splitlines(True), name)
        exec(compile(text, name, "exec", dont_inherit=True), module.__dict__)  # noqa: S102 - the archived kernel module

    def get_source(self, fullname: str) -> str:
        return self.modules[fullname][1]

    def install(self) -> None:
        sys.meta_path.insert(0, self)

    def uninstall(self) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        for mod in [*self.modules, *self.synthesized]:
            sys.modules.pop(mod, None)
        for name, _, _ in self.modules.values():
            linecache.cache.pop(name, None)


def _rebuild_one(task: _Task) -> tuple[int, Any, str | None]:
    """Worker entry: (index, CompiledVariant or None, error text)."""
    from ..compile.aot import VariantRequest, compile_variant

    finder = ArchiveSourceFinder(task.modules)
    for mod in task.modules:  # a module left by a previous task of this worker, maybe another version
        sys.modules.pop(mod, None)
    finder.install()
    try:
        r = task.record
        req = VariantRequest(
            kernel_ref=f"{r['module']}:{r['attr']}",
            signature=r.get("signature"),
            target=r["target"],
            constexprs=dict(r.get("constexprs") or {}),
            options=dict(r.get("options") or {}),
            include_ir=task.include_ir,
            env=dict(r.get("env") or {}),
            kernel_name=task.kernel,
        )
        return task.index, compile_variant(req, cache_dir=task.cache_dir, always_compile=True), None
    except KarchiveError as exc:
        return task.index, None, str(exc)
    except Exception as exc:  # noqa: BLE001 - the archive's module failed to import or compile
        return task.index, None, f"{type(exc).__name__}: {exc}"
    finally:
        finder.uninstall()


# --- comparing -----------------------------------------------------------------------------------
def first_difference(a: bytes, b: bytes) -> int | None:
    """Offset of the first differing byte (the shorter length if one is a prefix of the other)."""
    if a == b:
        return None
    n = min(len(a), len(b))
    lo = 0
    step = 4096
    while lo < n and a[lo : lo + step] == b[lo : lo + step]:
        lo += step
    for i in range(lo, min(lo + step, n)):
        if a[i] != b[i]:
            return i
    return n


def _field_differences(a: Any, b: Any, path: str, out: list[dict], limit: int = 8) -> None:
    if len(out) >= limit:
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            _field_differences(a.get(k), b.get(k), f"{path}.{k}" if path else k, out, limit)
    elif a != b:
        out.append({"field": path, "archived": a, "rebuilt": b})


def _member_differences(reader: Any, v: dict, files: dict[str, bytes], stages: tuple[str, ...] | None) -> list[dict]:
    """Member byte comparisons: every member (``stages`` None) or only the named IR stages."""
    refs: dict[str, dict] = {}
    if stages is None:
        refs["binary"] = v["files"]["binary"]
        refs["metadata"] = v["files"]["metadata"]
    for stage, ref in sorted((v["files"].get("ir") or {}).items()):
        if stages is None or stage in stages:
            refs[stage] = ref
    out = []
    for role, ref in refs.items():
        archived = reader.read(ref["path"])
        rebuilt = files.get(role)
        if rebuilt is None:
            out.append({"member": ref["path"], "offset": 0, "archived_size": len(archived), "rebuilt_size": None})
            continue
        off = first_difference(archived, rebuilt)
        if off is not None:
            out.append(
                {"member": ref["path"], "offset": off, "archived_size": len(archived), "rebuilt_size": len(rebuilt)}
            )
    return out


def _toolchain_differences(v: dict, produced_by: dict, local: dict, rebuilt_entry: dict) -> tuple[bool, list[str]]:
    """(same Triton build?, names of the tools that differ) for one variant."""
    backend = v["target"]["backend"]
    differs = []
    archived_fp = (v.get("provenance") or {}).get("triton_cache") or {}
    local_fp = (rebuilt_entry.get("provenance") or {}).get("triton_cache") or {}
    same_triton = str(produced_by.get("triton")) == str(local.get("triton")) and archived_fp.get(
        "triton_key_sha256"
    ) == local_fp.get("triton_key_sha256")
    if not same_triton:
        differs.append("triton")
    tool = "ptxas" if backend == "cuda" else "amd_codegen"
    # backend_hash is Triton's own description of the tool that compiled this variant (the ptxas
    # version for its arch: Triton uses one ptxas below sm_90 and another from sm_90 on).
    if archived_fp.get("backend_hash") and local_fp.get("backend_hash"):
        if archived_fp["backend_hash"] != local_fp["backend_hash"]:
            differs.append(tool)
    elif produced_by.get(tool) != local.get(tool):
        differs.append(tool)
    return same_triton, differs


def _as_recorded(archived: dict, rebuilt: dict) -> None:
    """Leave out of ``rebuilt`` what this karchive records and the archive's producer did not: the
    signature record (``default`` / ``required`` of each parameter, spec/FORMAT.md §6.1) is absent
    from archives written before it, and its absence is no difference in what was built."""
    old, new = archived.get("params"), rebuilt.get("params")
    if not (isinstance(old, list) and isinstance(new, list) and len(old) == len(new)):
        return
    for a, b in zip(old, new):
        if isinstance(a, dict) and isinstance(b, dict) and "default" not in a and "required" not in a:
            b.pop("default", None)
            b.pop("required", None)


def compare_variant(reader: Any, v: dict, rebuilt: Any, produced_by: dict, local: dict) -> VariantCheck:
    """Compare one rebuilt variant with the archived one under the rules in the module docstring."""
    check = VariantCheck(v["kernel"], v["key"], _target_text(v), REPRODUCED, rebuilt_key=rebuilt.key)
    archived_entry = {k: val for k, val in v.items() if k != "files"}
    # As the manifest would hold it (lists, not tuples); files are compared member by member below.
    entry = {k: val for k, val in json.loads(canonical_json(rebuilt.variant.to_json())).items() if k != "files"}
    _as_recorded(archived_entry, entry)
    same_triton, differs = _toolchain_differences(v, produced_by, local, entry)
    diffs: list[dict] = []
    if not differs:
        _field_differences(archived_entry, entry, "", diffs)
        diffs += _member_differences(reader, v, rebuilt.files, None)
    elif same_triton:
        must = {k: archived_entry.get(k) for k in ("key", "target", "params", "options", "abi")}
        _field_differences(must, {k: entry.get(k) for k in must}, "", diffs)
        diffs += _member_differences(reader, v, rebuilt.files, _TRITON_STAGES[v["target"]["backend"]])
        check.reason = (
            f"{', '.join(differs)} differs: compared key, options, launch ABI, TTIR, TTGIR and LLVM IR; "
            "not the PTX and binary, which depend on it"
        )
    else:
        must = {
            "target": archived_entry.get("target"),
            "params": archived_entry.get("params"),
            "abi": {
                k: (archived_entry.get("abi") or {}).get(k) for k in ("entry", "binary_format", "binary_arch", "params")
            },
        }
        got = {
            "target": entry.get("target"),
            "params": entry.get("params"),
            "abi": {k: entry["abi"].get(k) for k in ("entry", "binary_format", "binary_arch", "params")},
        }
        _field_differences(must, got, "", diffs)
        check.reason = (
            f"{', '.join(differs)} differs: compared the signature and launch ABI; the key and the bytes "
            "depend on the Triton version"
        )
    if diffs:
        check.status = MISMATCH
        check.differences = diffs
    elif differs:
        check.status = CONSISTENT
    return check


# --- the whole archive ---------------------------------------------------------------------------
def toolchain_summary(produced_by: dict, local: dict) -> dict:
    names = sorted(set(produced_by) | set(local))
    return {
        "archive": dict(produced_by),
        "local": dict(local),
        "differs": [n for n in names if produced_by.get(n) != local.get(n)],
    }


def rebuild_archive(
    reader: ArchiveReader,
    *,
    label: str = "",
    jobs: int = 1,
    kernels: list[str] | None = None,
    on_result: Callable[[VariantCheck], None] | None = None,
) -> RebuildReport:
    """Rebuild every (selected) variant of an open archive and compare; see the module docstring."""
    from ... import __version__
    from ..compile.aot import toolchain_versions

    produced_by = dict(reader.model.produced_by)
    local = {
        **{k: (None if val is None else str(val)) for k, val in toolchain_versions().items()},
        "karchive": __version__,
    }
    # The selected kernels' raw entries only (format 2: their shards), as the manifest holds them.
    variants = reader.manifest_of(kernels).get("variants") or []
    results: list[VariantCheck | None] = [None] * len(variants)
    cache_dir = tempfile.mkdtemp(prefix="karchive-rebuild-")
    try:
        tasks: list[_Task] = []
        for i, v in enumerate(variants):
            planned = _plan(reader, i, v, cache_dir)
            if isinstance(planned, VariantCheck):
                results[i] = planned
                if on_result:
                    on_result(planned)
            else:
                tasks.append(planned)
        if tasks:
            # Always in worker processes: the archive's modules are imported there, never here.
            from .executors import worker_context

            workers = max(1, min(jobs or os.cpu_count() or 1, len(tasks)))
            with ProcessPoolExecutor(max_workers=workers, mp_context=worker_context(), initializer=strip_shell) as pool:
                futures = [pool.submit(_rebuild_one, t) for t in tasks]
                for fut in as_completed(futures):
                    i, rebuilt, error = fut.result()
                    v = variants[i]
                    if rebuilt is None:
                        check = VariantCheck(
                            v["kernel"], v["key"], _target_text(v), FAILED, f"could not rebuild here: {error}"
                        )
                    else:
                        check = compare_variant(reader, v, rebuilt, produced_by, local)
                    results[i] = check
                    if on_result:
                        on_result(check)
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)
    return RebuildReport(
        label,
        reader.model.name,
        reader.model.version,
        toolchain_summary(produced_by, local),
        [r for r in results if r is not None],
    )
