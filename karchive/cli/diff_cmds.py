"""`karchive diff A B`: what changed between two archives or two published versions.

The comparison is :func:`karchive.audit.diff.diff_archives`; this module opens the two refs and
renders the result as a table for people or JSON for machines. Exit status as ``diff``: 0 when
identical, 1 when different, 2 on error.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from typing import Any

from ..core.digest import is_sha256_hex
from ..errors import KarchiveError
from .arg_types import open_named
from .output import EXIT_NEGATIVE, EXIT_OK, emit_json, human_bytes, printable, table

_MATCHING_HELP = """\
matching: variants are paired by kernel name, target and specialisation (the signature's types and
divisibility/==1 hints, and the constexpr values); a new constexpr value, type or hint is a removed
plus an added variant. Inside one such slot, variants that differ only in options (e.g. num_warps 4
and 8) are paired by, in turn: the same key; the same options; the same num_warps/num_stages/num_ctas
(and other tuning options); the one variant left on each side. A variant whose options changed is
shown as changed when it pairs this way, else as removed plus added.

Archive name, version and creation time are shown but are not differences. Exit status: 0 when the
archives hold the same kernels, variants and bytes, 1 when they differ, 2 on error.
"""

_BYTES_FIELDS = {"shared", "stack"}
_FILE_FIELDS = {"binary", "source", "metadata"}
_SHORT_FIELDS = {"key", "source_key"}
_MAX_LISTED = 5


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "diff",
        help="show what changed between two archives (exit 0 identical, 1 different, 2 error)",
        description="Compare two archives: kernels and variants added, removed and changed, and for changed\n"
        "ones what differs (binary, ABI, shared memory, warps/stages, registers/stack, toolchain,\n"
        "source). Details: docs/audit.md.",
        epilog=_MATCHING_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("a", metavar="A", help="the old archive: path, fsspec URL, or NAME@VERSION in the registry")
    p.add_argument("b", metavar="B", help="the new archive: path, fsspec URL, or NAME@VERSION in the registry")
    p.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    p.add_argument(
        "--source",
        action="store_true",
        help="add a unified diff of the kernel source of each changed variant whose source differs",
    )
    from ..audit.diff import TEXT_STAGES

    p.add_argument(
        "--ir",
        metavar="STAGE",
        choices=TEXT_STAGES,
        help=f"add a unified diff of one stage ({', '.join(TEXT_STAGES)}) of each changed variant where it differs",
    )
    p.add_argument(
        "--stat",
        action="store_true",
        help="one line per kernel: how many variants were added, removed, changed, and which fields changed",
    )
    p.add_argument(
        "-U",
        "--context",
        type=int,
        default=3,
        metavar="N",
        help="lines of context in unified diffs (default: %(default)s)",
    )
    p.add_argument("-k", "--kernel", action="append", help="compare only these kernels (repeatable)")
    p.add_argument("-t", "--target", action="append", help="compare only these targets, e.g. cuda:90 (repeatable)")
    p.add_argument(
        "--manifest-only",
        action="store_true",
        help="compare what the manifests record without reading the members: faster on remote "
        "archives, but a damaged member goes unnoticed and registers/stack are not compared",
    )
    p.add_argument(
        "--registry",
        metavar="URL",
        help="registry for NAME@VERSION refs (default: $KARCHIVE_REGISTRY, else the local registry)",
    )
    p.add_argument(
        "--cache-dir",
        metavar="DIR",
        help="local cache for NAME@VERSION refs (default: $KARCHIVE_CACHE_DIR, else $XDG_CACHE_HOME/karchive)",
    )
    p.set_defaults(func=cmd_diff)


def cmd_diff(args: argparse.Namespace) -> int:
    from ..audit.diff import diff_archives

    if args.context < 0:
        raise KarchiveError("--context must be 0 or more")
    reader_a = open_named(args.a, args.registry, cache_dir=args.cache_dir)
    reader_b = open_named(args.b, args.registry, cache_dir=args.cache_dir)
    result = diff_archives(
        reader_a,
        reader_b,
        refs=(args.a, args.b),
        kernels=args.kernel,
        targets=args.target,
        check_members=not args.manifest_only,
        source=args.source,
        ir=args.ir,
        context=args.context,
    )
    if args.stat:
        stats = kernel_stats(result)
        if args.json:
            emit_json(
                {
                    "a": result.a,
                    "b": result.b,
                    "identical": result.identical,
                    "kernels": stats,
                    "summary": result.summary(),
                }
            )
        else:
            print(render_stat(result, stats))
    elif args.json:
        emit_json(result.to_json())
    else:
        print(render(result))
    return EXIT_OK if result.identical else EXIT_NEGATIVE


def kernel_stats(result: Any) -> list[dict[str, Any]]:
    """Per kernel: variant counts by status and the fields that changed (most frequent first)."""
    stats: dict[str, dict[str, Any]] = {}
    fields: dict[str, Counter] = {}
    causes: dict[str, Counter] = {}

    def new(kernel: str) -> dict[str, Any]:
        return {"kernel": kernel, "added": 0, "removed": 0, "changed": 0, "module_only": 0, "unchanged": 0}

    for v in result.variants:
        row = stats.setdefault(v.kernel, new(v.kernel))
        row[v.status] += 1
        row["module_only"] += v.module_only
        fields.setdefault(v.kernel, Counter()).update(c.field for c in v.changes if c.field != "key")
        if v.cause() and not v.module_only:
            causes.setdefault(v.kernel, Counter())[v.cause()] += 1
    for t in result.autotune:
        stats.setdefault(t["kernel"], new(t["kernel"]))
        fields.setdefault(t["kernel"], Counter())["autotune"] += 1
    return [
        {
            **row,
            "fields": [f for f, _ in fields.get(k, Counter()).most_common()],
            "causes": [c for c, _ in causes.get(k, Counter()).most_common()],
        }
        for k, row in sorted(stats.items())
    ]


def render_stat(result: Any, stats: list[dict[str, Any]]) -> str:
    out = [
        printable(f"{label}: {side['name']} {side['version']}  ({side['ref']})")
        for label, side in (("A", result.a), ("B", result.b))
    ]
    rows = []
    for row in stats:
        counts = ", ".join(f"{row[s]} {s}" for s in ("added", "removed", "changed") if row[s]) or "unchanged"
        what = ", ".join(row["fields"][:_MAX_LISTED]) + (
            f", +{len(row['fields']) - _MAX_LISTED} more" if len(row["fields"]) > _MAX_LISTED else ""
        )
        if row["module_only"] and row["module_only"] == row["changed"] and not row["added"] + row["removed"]:
            what = f"only the module text around it ({what})"
        elif row["causes"]:
            what = f"{'; '.join(row['causes'])}: {what}"
        rows.append([row["kernel"], counts, str(row["unchanged"]), what or "-"])
    out += [
        "",
        table(["kernel", "variants", "unchanged", "changes"], rows, right=["unchanged"]),
        "",
        printable(result.summary()),
    ]
    return "\n".join(out)


# -- rendering for people --------------------------------------------------------------------------
def _ptxas(text: str) -> str:
    m = re.search(r"release ([\d.]+), V([\d.]+)", text)
    return f"ptxas V{m.group(2)}" if m else text.splitlines()[0][:60] if text else text


def fmt_value(name: str, value: Any) -> str:
    """One side of a change, short and readable (``--json`` has the full values)."""
    import json

    if value is None:
        return "-"
    if (name in _FILE_FIELDS or name.startswith("ir.")) and isinstance(value, dict):
        return f"sha256:{str(value.get('sha256'))[:12]} ({human_bytes(value.get('size'))})"
    if name in _BYTES_FIELDS and isinstance(value, int):
        return human_bytes(value)
    if isinstance(value, str) and (name in _SHORT_FIELDS or is_sha256_hex(value)):
        return value[:12]
    if name == "backend" and isinstance(value, str):
        return _ptxas(value)
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text if len(text) <= 80 else text[:77] + "..."


def _warps(v: dict | None) -> str:
    if v is None:
        return ""
    o = v.get("options") or {}
    return f"{o.get('num_warps')}/{o.get('num_stages')}"


def _row(v: Any) -> list[str]:
    a, b = v.a, v.b
    if v.status == "changed":
        warps = _warps(a) if _warps(a) == _warps(b) else f"{_warps(a)} -> {_warps(b)}"
        key = a["key"][:12] if a["key"] == b["key"] else f"{a['key'][:12]} -> {b['key'][:12]}"
        names = [c.field for c in v.changes if c.field != "key"]
        what = ", ".join(names[:_MAX_LISTED]) + (
            f", +{len(names) - _MAX_LISTED} more" if len(names) > _MAX_LISTED else ""
        )
        if v.module_only:
            what = f"only the module text around it ({what})"
    else:
        one = a if a is not None else b
        warps, key, what = _warps(one), one["key"][:12], ""
    return [v.status, v.kernel, v.target, v.specialisation or "-", warps, key, what]


def render(result: Any) -> str:
    out: list[str] = []
    for label, side in (("A", result.a), ("B", result.b)):
        out.append(
            printable(
                f"{label}: {side['name']} {side['version']}  ({side['ref']}, "
                f"{side['variants']} variant{'' if side['variants'] == 1 else 's'})"
            )
        )
    rows = [_row(v) for v in result.variants if v.status != "unchanged"]
    if rows:
        out += ["", table(["status", "kernel", "target", "specialisation", "warps/stages", "key", "changes"], rows)]
    # A variant whose kernel did not change (only the module text around it) is its table row; the
    # details are for the kernels that changed.
    changed = [v for v in result.variants if v.status == "changed" and not v.module_only]
    for v in changed:
        spec = f" {v.specialisation}" if v.specialisation else ""
        warps = _warps(v.a) if _warps(v.a) == _warps(v.b) else f"{_warps(v.a)} -> {_warps(v.b)}"
        out += ["", printable(f"~ {v.kernel} {v.target}{spec}, warps/stages {warps}  (paired by {v.matched_by})")]
        if v.cause():
            out.append(printable(f"    {v.cause()}"))
        width = max(len(c.field) for c in v.changes)
        for c in v.changes:
            out.append(printable(f"    {c.field.ljust(width)}  {fmt_value(c.field, c.a)} -> {fmt_value(c.field, c.b)}"))
    if result.archive_changes:
        out += ["", "archive:"]
        width = max(len(c.field) for c in result.archive_changes)
        for c in result.archive_changes:
            out.append(printable(f"    {c.field.ljust(width)}  {fmt_value(c.field, c.a)} -> {fmt_value(c.field, c.b)}"))
    if result.autotune:
        out += ["", "autotune records:"]
        for t in result.autotune:
            detail = ""
            if t["status"] == "changed":
                detail = (
                    f" (configs {t['configs'][0]} -> {t['configs'][1]}, entries {t['entries'][0]} -> {t['entries'][1]})"
                )
            out.append(printable(f"    {t['kernel']}  {t['status']}{detail}"))
    for t in result.texts:
        out += ["", printable(f"{t.what} of {'; '.join(t.variants)}:")]
        if t.note:
            out.append(printable(f"    ({t.note})"))
        else:
            out.append(printable("\n".join(t.lines), keep="\n\t"))
    out += ["", printable(result.summary())]
    return "\n".join(out)
