"""What changed between two archives: kernels and variants added, removed and changed, and how.

Pure data in, data out: :func:`diff_manifests` compares two manifests (dicts); :func:`diff_archives`
does the same for two archive readers and adds what needs the members' bytes — every member of the
compared variants read (so digest-checked) by the reader, registers/stack/spills read from the binaries, and
unified diffs of the kernel source and of one IR stage. ``karchive diff`` only renders the result.

Which variants are "the same" is decided in :mod:`karchive.audit.match`. Archive identity (name,
version, ``created``) is shown but is not a difference: comparing ``kernels@1.4.0`` with
``kernels@1.5.0`` asks what changed inside them.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..core import pysource
from ..core.text import plural
from ..errors import FormatError, KarchiveError, SchemaError
from ..format.names import did_you_mean, select_kernels
from .match import TUNING_OPTIONS, Pair, canonical, pair_variants, specialisation_text, target_text
from .resources import recorded_resources

__all__ = [
    "ArchiveDiff",
    "Change",
    "MAX_TEXT_BYTES",
    "Reader",
    "TEXT_STAGES",
    "TextDiff",
    "VariantDiff",
    "compare_variants",
    "diff_archives",
    "diff_manifests",
]

#: IR stages ``--ir`` accepts (spec/FORMAT.md §4), plus the metadata JSON (shown pretty-printed).
TEXT_STAGES = ("ttir", "ttgir", "llir", "ptx", "amdgcn", "metadata")

#: Texts larger than this are not diffed (difflib is quadratic at worst; an archive is untrusted input).
MAX_TEXT_BYTES = 16 * 1024 * 1024

#: What a variant's record says of the module its kernel lives in, not of the kernel: where only these differ
#: (same key, same binary), another kernel of the module was edited and this one was not.
MODULE_FIELDS = frozenset({"source", "provenance.build.sources"})

#: Options shown under their own name (they shape the launch); other options as ``options.<name>``.
_NAMED_OPTIONS = TUNING_OPTIONS
#: ABI fields that repeat an option: reported only when they differ while the option does not.
_ABI_FROM_OPTIONS = {"num_warps": "num_warps", "num_ctas": "num_ctas", "warp_size": "warp_size"}


class Reader(Protocol):
    """What :func:`diff_archives` needs of an archive (``karchive.format.reader.ArchiveReader``)."""

    manifest: dict

    def read(self, name: str) -> bytes: ...


@dataclass(frozen=True)
class Change:
    """One aspect that differs: ``field`` names it (``num_warps``, ``binary``, ``ir.ptx``, …)."""

    field: str
    a: Any
    b: Any

    def to_json(self) -> dict[str, Any]:
        return {"field": self.field, "a": self.a, "b": self.b}


@dataclass
class VariantDiff:
    status: str  # "added" | "removed" | "changed" | "unchanged"
    kernel: str
    target: str
    specialisation: str
    a: dict | None
    b: dict | None
    matched_by: str | None
    changes: list[Change] = field(default_factory=list)
    #: Registers/stack/spills read from each side's binary (empty when not read or not recorded).
    resources_a: dict[str, int] = field(default_factory=dict)
    resources_b: dict[str, int] = field(default_factory=dict)
    #: Where the kernel's own source was compared (both modules stored): "edited" (its text differs), "moved"
    #: (the same text at other lines, which Triton's key counts) or "callee" (the same text at the same lines:
    #: a jitted function it calls changed); None where not compared.
    code: str | None = None

    @property
    def module_only(self) -> bool:
        """Changed only in the module around the kernel: the same key and binary (another kernel was edited)."""
        return self.status == "changed" and all(c.field in MODULE_FIELDS for c in self.changes)

    def cause(self) -> str | None:
        """What changed in this kernel, in words (None: not changed, or nothing to add to the fields)."""
        if self.status != "changed":
            return None
        if self.module_only:
            return "only the module text around the kernel changed (same key, same binary)"
        if any(c.field == "source_key" for c in self.changes):
            if self.code == "moved":
                return "the kernel's code is the same but moved to other lines (Triton's key counts its line)"
            if self.code == "callee":
                return "the kernel's own text is the same: a @triton.jit function it calls changed"
            return (
                "the kernel's own code changed"
                if self.code == "edited"
                else "the kernel's code (source_key) changed, or its lines moved"
            )
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "kernel": self.kernel,
            "target": self.target,
            "specialisation": self.specialisation,
            "matched_by": self.matched_by,
            "cause": self.cause(),
            "code": self.code,
            "params": (self.a or self.b or {}).get("params"),
            "a": _side_summary(self.a, self.resources_a),
            "b": _side_summary(self.b, self.resources_b),
            "changes": [c.to_json() for c in self.changes],
        }


@dataclass
class TextDiff:
    """A unified diff of one text member between a paired A and B variant (or a note why there is none)."""

    what: str  # "source" or an IR stage
    variants: list[str]  # "kernel target specialisation" of each pair it concerns
    a_path: str | None
    b_path: str | None
    lines: list[str] = field(default_factory=list)
    note: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "what": self.what,
            "variants": self.variants,
            "a_path": self.a_path,
            "b_path": self.b_path,
            "diff": "\n".join(self.lines),
            "note": self.note,
        }


@dataclass
class ArchiveDiff:
    a: dict[str, Any]  # identity of each side: ref, name, version, created, produced_by, variant count
    b: dict[str, Any]
    archive_changes: list[Change]
    variants: list[VariantDiff]
    autotune: list[dict[str, Any]]
    texts: list[TextDiff] = field(default_factory=list)
    members_checked: bool = False

    def count(self, status: str) -> int:
        return sum(1 for v in self.variants if v.status == status)

    @property
    def identical(self) -> bool:
        return not self.archive_changes and not self.autotune and all(v.status == "unchanged" for v in self.variants)

    def kernels(self) -> dict[str, list[str]]:
        """Kernel names added (only in B), removed (only in A), changed (in both, the kernel itself differs),
        module_only (in both, every change is in the module text around it) and unchanged."""
        in_a = {v.kernel for v in self.variants if v.a is not None}
        in_b = {v.kernel for v in self.variants if v.b is not None}
        touched = {v.kernel for v in self.variants if v.status != "unchanged"} | {t["kernel"] for t in self.autotune}
        itself = {v.kernel for v in self.variants if v.status != "unchanged" and not v.module_only} | {
            t["kernel"] for t in self.autotune
        }
        both = in_a & in_b
        return {
            "added": sorted(in_b - in_a),
            "removed": sorted(in_a - in_b),
            "changed": sorted(both & itself),
            "module_only": sorted((both & touched) - itself),
            "unchanged": sorted(both - touched),
        }

    def summary(self) -> str:
        if self.identical:
            checked = ", every member digest checked" if self.members_checked else ""
            return f"identical: {plural(self.count('unchanged'), 'variant')} in both{checked}"
        k = self.kernels()
        parts = [f"{len(k[s])} {s}" for s in ("added", "removed", "changed") if k[s]]
        if k["module_only"]:
            parts.append(f"{len(k['module_only'])} with only the module text around them changed")
        module = sum(1 for v in self.variants if v.module_only)
        text = f"kernels: {', '.join(parts) or 'none added, removed or changed'}; variants: " + ", ".join(
            f"{self.count(s)} {s}" + (f" ({module} only in the module text)" if s == "changed" and module else "")
            for s in ("added", "removed", "changed", "unchanged")
        )
        if self.archive_changes:
            text += f"; archive: {', '.join(c.field for c in self.archive_changes)} differ"
        if self.autotune:
            text += f"; autotune records: {len(self.autotune)} differ"
        return text

    def to_json(self) -> dict[str, Any]:
        counts = {s: self.count(s) for s in ("added", "removed", "changed", "unchanged")}
        return {
            "a": self.a,
            "b": self.b,
            "identical": self.identical,
            "members_checked": self.members_checked,
            "summary": {"text": self.summary(), "variants": counts, "kernels": self.kernels()},
            "archive_changes": [c.to_json() for c in self.archive_changes],
            "variants": [v.to_json() for v in self.variants],
            "autotune": self.autotune,
            "texts": [t.to_json() for t in self.texts],
        }


def _side_summary(v: dict | None, resources: dict[str, int]) -> dict[str, Any] | None:
    if v is None:
        return None
    options = v.get("options") or {}
    return {
        "key": v["key"],
        "num_warps": options.get("num_warps"),
        "num_stages": options.get("num_stages"),
        "shared": (v.get("abi") or {}).get("shared"),
        "binary_sha256": v["files"]["binary"]["sha256"],
        "resources": resources,
    }


# -- comparing one pair ----------------------------------------------------------------------------
def _file_ref(ref: Any) -> dict[str, Any] | None:
    return {"sha256": ref["sha256"], "size": ref["size"]} if isinstance(ref, dict) else None


def _flat(prefix: str, obj: Any) -> dict[str, Any]:
    """``{"a": {"b": 1}}`` → ``{"prefix.a.b": 1}`` (lists and empty dicts stay values), so a
    difference is named by the innermost field. Depth is bounded by the reader's nesting limit."""
    out: dict[str, Any] = {}
    for k, value in (obj or {}).items():
        if isinstance(value, dict) and value:
            out.update(_flat(f"{prefix}.{k}", value))
        else:
            out[f"{prefix}.{k}"] = value
    return out


def compare_variants(
    va: dict,
    vb: dict,
    sources_a: dict[str, dict],
    sources_b: dict[str, dict],
    resources_a: dict[str, Any] | None = None,
    resources_b: dict[str, Any] | None = None,
) -> list[Change]:
    """Every aspect in which ``vb`` differs from ``va``, most telling first.

    ``sources_*`` map a source member name to its file object (the manifest's ``sources``);
    ``resources_*`` are registers/spills where recorded (:mod:`karchive.audit.resources`).
    """
    changes: list[Change] = []

    def check(name: str, a: Any, b: Any) -> None:
        if canonical(a) != canonical(b):
            changes.append(Change(name, a, b))

    opt_a, opt_b = va.get("options") or {}, vb.get("options") or {}
    abi_a, abi_b = va.get("abi") or {}, vb.get("abi") or {}
    prov_a, prov_b = va.get("provenance") or {}, vb.get("provenance") or {}
    check("key", va["key"], vb["key"])
    for name in _NAMED_OPTIONS:
        check(name, opt_a.get(name), opt_b.get(name))
    check("shared", abi_a.get("shared"), abi_b.get("shared"))
    res_a, res_b = resources_a or {}, resources_b or {}
    for name in sorted(set(res_a) | set(res_b)):
        check(name, res_a.get(name), res_b.get(name))
    files_a, files_b = va["files"], vb["files"]
    check("binary", _file_ref(files_a.get("binary")), _file_ref(files_b.get("binary")))
    check(
        "source",
        _file_ref(sources_a.get(files_a.get("source") or "")),
        _file_ref(sources_b.get(files_b.get("source") or "")),
    )
    check("source_key", prov_a.get("source_key"), prov_b.get("source_key"))
    check("triton", prov_a.get("triton_version"), prov_b.get("triton_version"))
    check(
        "backend",
        (prov_a.get("triton_cache") or {}).get("backend_hash"),
        (prov_b.get("triton_cache") or {}).get("backend_hash"),
    )
    check("hooks", prov_a.get("hooks"), prov_b.get("hooks"))
    for name in sorted(set(abi_a) | set(abi_b)):
        if name == "shared":
            continue
        option = _ABI_FROM_OPTIONS.get(name)
        if (
            option
            and canonical(abi_a.get(name)) == canonical(opt_a.get(option))
            and canonical(abi_b.get(name)) == canonical(opt_b.get(option))
        ):
            continue  # the same difference is already reported under the option's name
        check(f"abi.{name}", abi_a.get(name), abi_b.get(name))
    for name in sorted(set(opt_a) | set(opt_b)):
        if name not in _NAMED_OPTIONS:
            check(f"options.{name}", opt_a.get(name), opt_b.get(name))
    flat_a, flat_b = _flat("provenance", prov_a), _flat("provenance", prov_b)
    shown = {
        "provenance.source_key",
        "provenance.triton_version",
        "provenance.triton_cache.backend_hash",
        "provenance.hooks",
    }
    for name in sorted((set(flat_a) | set(flat_b)) - shown):
        check(name, flat_a.get(name), flat_b.get(name))
    ir_a, ir_b = files_a.get("ir") or {}, files_b.get("ir") or {}
    for stage in sorted(set(ir_a) | set(ir_b)):
        check(f"ir.{stage}", _file_ref(ir_a.get(stage)), _file_ref(ir_b.get(stage)))
    check("metadata", _file_ref(files_a.get("metadata")), _file_ref(files_b.get("metadata")))
    return changes


# -- comparing manifests ---------------------------------------------------------------------------
def _select(manifest: dict, kernels: Iterable[str] | None, targets: Iterable[str] | None) -> list[dict]:
    ks, ts = set(kernels or ()), set(targets or ())
    return [
        v
        for v in manifest["variants"]
        if (not ks or select_kernels(ks, [v["kernel"]])) and (not ts or target_text(v) in ts)
    ]


def _identity(manifest: dict, ref: str | None, variants: list[dict]) -> dict[str, Any]:
    return {
        "ref": ref,
        "name": manifest.get("name"),
        "version": manifest.get("version"),
        "created": manifest.get("created"),
        "produced_by": manifest.get("produced_by"),
        "variants": len(variants),
    }


def _archive_changes(ma: dict, mb: dict) -> list[Change]:
    pa, pb = ma.get("produced_by") or {}, mb.get("produced_by") or {}
    pairs = [(name, ma.get(name), mb.get(name)) for name in ("format_version", "abi_version")]
    pairs += [(f"produced_by.{name}", pa.get(name), pb.get(name)) for name in sorted(set(pa) | set(pb))]
    return [Change(name, a, b) for name, a, b in pairs if canonical(a) != canonical(b)]


def _autotune_changes(ma: dict, mb: dict, kernels: set[str] | None) -> list[dict[str, Any]]:
    """Autotune records (spec/FORMAT.md §6.3) per kernel: added, removed or changed."""

    def records(m: dict) -> dict[str, dict]:
        out = {}
        for r in m.get("autotune") or []:
            if (
                isinstance(r, dict)
                and isinstance(r.get("kernel"), str)
                and (not kernels or select_kernels(kernels, [r["kernel"]]))
            ):
                out[r["kernel"]] = r
        return out

    ra, rb = records(ma), records(mb)
    out = []
    for name in sorted(set(ra) | set(rb)):
        a, b = ra.get(name), rb.get(name)
        if a is not None and b is not None and canonical(a) == canonical(b):
            continue
        status = "added" if a is None else "removed" if b is None else "changed"
        out.append(
            {
                "kernel": name,
                "status": status,
                "configs": [len(r.get("configs") or []) if r else None for r in (a, b)],
                "entries": [len(r.get("entries") or []) if r else None for r in (a, b)],
            }
        )
    return out


def _check_manifest(m: Any, label: str) -> None:
    from ..format.manifest import Manifest

    if not isinstance(m, dict):
        raise SchemaError(f"{label}: manifest is not a JSON object", where="manifest")
    try:
        Manifest.from_json(m)  # every field the diff relies on, checked: SchemaError, not a traceback
    except SchemaError as exc:
        raise SchemaError(f"{label}: {exc}", where="manifest") from None


def diff_manifests(
    ma: dict,
    mb: dict,
    *,
    kernels: Iterable[str] | None = None,
    targets: Iterable[str] | None = None,
    refs: tuple[str | None, str | None] = (None, None),
    resources: tuple[dict[str, dict], dict[str, dict]] | None = None,
) -> ArchiveDiff:
    """Compare what two manifests record. ``kernels``/``targets`` restrict both sides (an empty
    selection on both sides is an error, not an empty diff); ``resources`` maps variant keys to the
    registers/spills found per side."""
    _check_manifest(ma, refs[0] or "A")
    _check_manifest(mb, refs[1] or "B")
    return _compare_checked(ma, mb, kernels, targets, refs, resources)


def _compare_checked(
    ma: dict,
    mb: dict,
    kernels: Iterable[str] | None,
    targets: Iterable[str] | None,
    refs: tuple[str | None, str | None],
    resources: tuple[dict[str, dict], dict[str, dict]] | None,
) -> ArchiveDiff:
    """:func:`diff_manifests` on manifests already checked by :func:`_check_manifest`."""
    try:
        kernels = list(kernels or [])
        targets = list(targets or [])
        va, vb = _select(ma, kernels, targets), _select(mb, kernels, targets)
        if (kernels or targets) and not va and not vb:
            have = sorted({f"{v['kernel']} ({target_text(v)})" for m in (ma, mb) for v in m["variants"]})
            names = {v["kernel"] for m in (ma, mb) for v in m["variants"]}
            hints = "".join(did_you_mean(k, names) for k in kernels if not select_kernels([k], names))
            raise KarchiveError(
                f"no variant in either archive matches the selection{hints}; they hold: {', '.join(have) or 'none'}"
            )
        sources_a = {s["path"]: s for s in ma.get("sources") or []}
        sources_b = {s["path"]: s for s in mb.get("sources") or []}
        res_a, res_b = resources or ({}, {})
        pairs = pair_variants(va, vb)
        # Show the full signature only where the short form would make two slots look alike.
        short_slots: dict[tuple[str, str, str], set[str]] = {}
        for p in pairs:
            v = p.variant
            short_slots.setdefault((p.kernel, target_text(v), specialisation_text(v)), set()).add(p.slot)
        rows = []
        for p in pairs:
            v = p.variant
            full = len(short_slots[(p.kernel, target_text(v), specialisation_text(v))]) > 1
            rows.append(_row(p, specialisation_text(v, full=full), sources_a, sources_b, res_a, res_b))
        return ArchiveDiff(
            a=_identity(ma, refs[0], va),
            b=_identity(mb, refs[1], vb),
            archive_changes=_archive_changes(ma, mb),
            variants=rows,
            autotune=_autotune_changes(ma, mb, set(kernels) if kernels else None),
        )
    except (KeyError, TypeError, AttributeError, ValueError, IndexError) as exc:
        raise SchemaError(
            f"manifest does not follow the schema ({type(exc).__name__}: {exc}); 'karchive verify' lists every problem",
            where="manifest",
        ) from exc


def _row(p: Pair, spec: str, sources_a: dict, sources_b: dict, res_a: dict, res_b: dict) -> VariantDiff:
    v = p.variant
    ra = res_a.get(p.a["key"], {}) if p.a is not None else {}
    rb = res_b.get(p.b["key"], {}) if p.b is not None else {}
    if p.a is None or p.b is None:
        status, changes = ("added" if p.a is None else "removed"), []
    else:
        changes = compare_variants(p.a, p.b, sources_a, sources_b, ra, rb)
        if p.a["kernel"] != p.b["kernel"]:  # a bare name paired with its qualified name (match.py)
            changes.insert(0, Change("kernel", p.a["kernel"], p.b["kernel"]))
        status = "changed" if changes else "unchanged"
    return VariantDiff(status, p.kernel, target_text(v), spec, p.a, p.b, p.matched_by, changes, ra, rb)


# -- comparing archives (member bytes) -------------------------------------------------------------
def _read_members(reader: Reader, variants: list[dict], sources: dict[str, dict]) -> dict[str, dict]:
    """Read (so digest-check) every member of ``variants`` and the sources they name; returns the
    registers/stack/spills each variant's binary records (:mod:`.resources`), by variant key."""
    found: dict[str, dict] = {}
    seen_sources: set[str] = set()
    for v in variants:
        files = v["files"]
        binary = reader.read(files["binary"]["path"])
        reader.read(files["metadata"]["path"])
        for ref in (files.get("ir") or {}).values():
            reader.read(ref["path"])
        src = files.get("source")
        if src and src not in seen_sources:
            if src not in sources:
                raise SchemaError(
                    f"variant {v['key'][:12]} names source {src!r}, which the manifest does not list",
                    where="variants.files.source",
                )
            reader.read(src)
            seen_sources.add(src)
        res = recorded_resources(v, binary)
        if res:
            found[v["key"]] = res
    return found


def diff_archives(
    a: Reader,
    b: Reader,
    *,
    refs: tuple[str | None, str | None] = (None, None),
    kernels: Iterable[str] | None = None,
    targets: Iterable[str] | None = None,
    check_members: bool = True,
    source: bool = False,
    ir: str | None = None,
    context: int = 3,
) -> ArchiveDiff:
    """:func:`diff_manifests` plus what needs the bytes. With ``check_members`` every member of the
    compared variants is read through the reader, so "identical" means the same *verified* bytes
    and a damaged member is an error rather than a silent match. ``source`` adds a unified diff of
    the module source of each changed pair whose source differs, ``ir`` one of that IR stage."""
    if ir is not None and ir not in TEXT_STAGES:
        raise KarchiveError(f"unknown IR stage {ir!r}; choose one of: {', '.join(TEXT_STAGES)}")
    if context < 0:
        raise KarchiveError("the number of context lines must be >= 0")
    kernels, targets = list(kernels or []), list(targets or [])
    ma, mb = _manifest(a, kernels), _manifest(b, kernels)
    if kernels and not (ma.get("variants") or mb.get("variants")):
        ma, mb = a.manifest, b.manifest  # nothing selected: the error names what both archives hold
    _check_manifest(ma, refs[0] or "A")
    _check_manifest(mb, refs[1] or "B")
    resources = None
    if check_members:
        try:
            sel_a, sel_b = _select(ma, kernels, targets), _select(mb, kernels, targets)
            src_a = {s["path"]: s for s in ma.get("sources") or []}
            src_b = {s["path"]: s for s in mb.get("sources") or []}
        except (KeyError, TypeError, AttributeError) as exc:
            raise SchemaError(
                f"manifest does not follow the schema ({type(exc).__name__}: {exc})", where="manifest"
            ) from exc
        resources = (_read_members(a, sel_a, src_a), _read_members(b, sel_b, src_b))
    result = _compare_checked(ma, mb, kernels, targets, refs, resources)
    result.members_checked = check_members
    changed = [v for v in result.variants if v.status == "changed"]
    labels = (refs[0] or "A", refs[1] or "B")
    if check_members:
        _compare_code(a, b, changed)
    if source:
        result.texts += _source_diffs(a, b, changed, labels, context)
    if ir:
        result.texts += _stage_diffs(a, b, changed, ir, labels, context)
    return result


def _kernel_text(module: bytes, qualname: str) -> tuple[str, int] | None:
    """The source text of ``qualname``'s definition (decorators included) in ``module``, and its first line;
    None where the module does not parse or holds no such definition. Parsed, never run."""
    import ast

    try:
        tree = pysource.parse(module.decode("utf-8"))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    nodes: list[Any] = tree.body if isinstance(tree, ast.Module) else []  # exec mode: always a Module
    found: Any = None
    for part in qualname.split("."):
        found = next(
            (
                n
                for n in nodes
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name == part
            ),
            None,
        )
        if found is None:
            return None
        nodes = found.body
    first = min([found.lineno] + [d.lineno for d in found.decorator_list])
    lines = module.decode("utf-8").splitlines()[first - 1 : found.end_lineno]
    return "\n".join(lines), first


def _compare_code(a: Reader, b: Reader, changed: list[VariantDiff]) -> None:
    """Set ``code`` of each changed pair whose key source differs: its own text edited, or the same text moved.
    Each (module pair, kernel) is parsed once; modules over :data:`MAX_TEXT_BYTES` are not."""
    seen: dict[tuple[str, str, str], str | None] = {}
    for v in changed:
        if v.module_only or not any(c.field == "source_key" for c in v.changes):
            continue
        assert v.a is not None and v.b is not None
        pa, pb = v.a["files"].get("source"), v.b["files"].get("source")
        qualname = v.kernel.rpartition(":")[2]
        if not pa or not pb:
            continue
        ident = (pa, pb, qualname)
        if ident not in seen:
            data_a, data_b = a.read(pa), b.read(pb)
            ta = _kernel_text(data_a, qualname) if len(data_a) <= MAX_TEXT_BYTES else None
            tb = _kernel_text(data_b, qualname) if len(data_b) <= MAX_TEXT_BYTES else None
            seen[ident] = (
                None
                if ta is None or tb is None
                else "edited"
                if ta[0] != tb[0]
                else "moved"
                if ta[1] != tb[1]
                else "callee"
            )
        v.code = seen[ident]


def _manifest(reader: Reader, kernels: list[str]) -> dict:
    """The manifest with the selected kernels' variants: a format-2 archive reads only their shards
    (``ArchiveReader.manifest_of``); any other reader gives its whole manifest, filtered later."""
    of = getattr(reader, "manifest_of", None)
    return of(kernels) if of is not None and kernels else reader.manifest


def _text(data: bytes) -> list[str]:
    return data.decode("utf-8", errors="replace").splitlines()


def _too_large(*sizes: int) -> str | None:
    if max(sizes) > MAX_TEXT_BYTES:
        return (
            f"too large for a text diff ({max(sizes)} bytes; the limit is {MAX_TEXT_BYTES}): "
            "print each side with 'karchive inspect --ir'"
        )
    return None


def _unified(a_lines: list[str], b_lines: list[str], a_label: str, b_label: str, context: int) -> list[str]:
    return list(difflib.unified_diff(a_lines, b_lines, a_label, b_label, n=context, lineterm=""))


def _describe(v: VariantDiff) -> str:
    return " ".join(x for x in (v.kernel, v.target, v.specialisation) if x)


def _source_diffs(
    a: Reader, b: Reader, changed: list[VariantDiff], labels: tuple[str, str], context: int
) -> list[TextDiff]:
    """One diff per distinct (A source, B source): a module holding several kernels is shown once."""
    groups: dict[tuple[str | None, str | None], list[str]] = {}
    for v in changed:
        assert v.a is not None and v.b is not None
        pa, pb = v.a["files"].get("source"), v.b["files"].get("source")
        if pa != pb or pa is None:
            names = groups.setdefault((pa, pb), [])
            if _describe(v) not in names:
                names.append(_describe(v))
    out = []
    for (pa, pb), names in groups.items():
        if pa is None or pb is None:
            missing = " and ".join(lbl for lbl, p in zip(labels, (pa, pb)) if p is None)
            out.append(TextDiff("source", names, pa, pb, note=f"the kernel source is not stored in {missing}"))
            continue
        data_a, data_b = a.read(pa), b.read(pb)
        note = _too_large(len(data_a), len(data_b))
        lines = (
            [] if note else _unified(_text(data_a), _text(data_b), f"{labels[0]}:{pa}", f"{labels[1]}:{pb}", context)
        )
        out.append(TextDiff("source", names, pa, pb, lines, note))
    return out


def _stage_text(reader: Reader, path: str, stage: str) -> list[str]:
    data = reader.read(path)
    if stage == "metadata":
        from ..format.reader import Limits, load_json

        try:
            return json.dumps(load_json(data, "metadata", Limits()), indent=1, sort_keys=True).splitlines()
        except FormatError:
            pass  # not canonical JSON: show it as it is
    return _text(data)


def _stage_diffs(
    a: Reader, b: Reader, changed: list[VariantDiff], stage: str, labels: tuple[str, str], context: int
) -> list[TextDiff]:
    out = []
    for v in changed:
        assert v.a is not None and v.b is not None

        def ref(x: dict) -> dict | None:
            return x["files"]["metadata"] if stage == "metadata" else (x["files"].get("ir") or {}).get(stage)

        ra, rb = ref(v.a), ref(v.b)
        if ra is None and rb is None:
            if (
                v.a["target"]["backend"] == "cuda"
                and stage == "amdgcn"
                or v.a["target"]["backend"] == "hip"
                and stage == "ptx"
            ):
                continue  # the stage does not exist for this backend: nothing to say
            out.append(TextDiff(stage, [_describe(v)], None, None, note=f"no {stage} stage stored in either archive"))
            continue
        if ra is not None and rb is not None and ra["sha256"] == rb["sha256"]:
            continue  # the same text
        if ra is None or rb is None:
            missing = labels[0] if ra is None else labels[1]
            out.append(
                TextDiff(
                    stage,
                    [_describe(v)],
                    ra["path"] if ra is not None else None,
                    rb["path"] if rb is not None else None,
                    note=f"no {stage} stage stored in {missing}",
                )
            )
            continue
        note = _too_large(ra["size"], rb["size"])
        lines = (
            []
            if note
            else _unified(
                _stage_text(a, ra["path"], stage),
                _stage_text(b, rb["path"], stage),
                f"{labels[0]}:{ra['path']}",
                f"{labels[1]}:{rb['path']}",
                context,
            )
        )
        out.append(TextDiff(stage, [_describe(v)], ra["path"], rb["path"], lines, note))
    return out
