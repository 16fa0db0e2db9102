"""`karchive rebuild --check ARCHIVE|NAME@VERSION`: rebuild every variant from the archive alone and compare."""

from __future__ import annotations

import argparse
import sys

from ..format.names import select_kernels
from .arg_types import positive_int
from .output import emit_json, plural, printable, table


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "rebuild",
        help="rebuild every variant from the archive's own sources with the local toolchain and compare",
        description="Rebuilds each variant from the sources and build record the archive holds (no checkout "
        "needed) in a fresh Triton cache, and compares: identical bytes -> reproduced. Runs the "
        "archive's Python source, as any Triton compile of it would. Exit status: 0 every variant "
        "reproduced, 1 a mismatch, 3 no mismatch but not everything reproduced (toolchain differs, "
        "variants that cannot be rebuilt), 2 error.",
    )
    p.add_argument("archive", help="path, URL, or NAME[@VERSION] in the registry")
    p.add_argument("--check", action="store_true", required=True, help="compare with the archive (the only mode)")
    p.add_argument("-k", "--kernel", action="append", help="only these kernels")
    p.add_argument("-j", "--jobs", type=positive_int, default=None, help="worker processes (default: CPU count)")
    p.add_argument("--json", action="store_true", help="machine-readable report")
    p.set_defaults(func=cmd_rebuild)


def _detail(check) -> str:
    if check.differences:
        d = check.differences[0]
        if "member" in d:
            sizes = f"{d['archived_size']} vs {d['rebuilt_size']} bytes"
            text = f"{d['member'].rsplit('/', 1)[-1]} differs at byte {d['offset']} ({sizes})"
        else:
            text = f"{d['field']}: {d['archived']!r} -> {d['rebuilt']!r}"
        more = len(check.differences) - 1
        return text + (f" (+{more} more)" if more else "")
    return check.reason


def _print(report) -> None:
    tc = report.toolchain
    print(f"{printable(report.name)} {printable(report.version)}: rebuilt from the archive's own sources")
    if tc["differs"]:
        changes = ", ".join(
            f"{n} {tc['archive'].get(n)} (archive) -> {tc['local'].get(n)} (here)" for n in tc["differs"]
        )
        print(f"toolchain differs: {printable(changes)}")
    else:
        print(
            "toolchain: " + ", ".join(f"{n} {v}" for n, v in sorted(tc["local"].items()) if v) + " (as in the archive)"
        )
    rows = [
        (c.kernel, c.target, c.key[:12], c.status, _detail(c))
        for c in sorted(report.variants, key=lambda c: (c.kernel, c.target, c.key))
    ]
    print(table(["KERNEL", "TARGET", "KEY", "STATUS", "DETAIL"], rows))
    counts = report.counts()
    total = len(report.variants)
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    verdict = {
        0: "every variant reproduced byte for byte",
        1: "MISMATCH: the archive does not match its sources",
        3: "not everything could be reproduced byte for byte",
    }[report.exit_code()]
    print(f"{plural(total, 'variant')}: {summary} -- {verdict}")


def cmd_rebuild(args: argparse.Namespace) -> int:
    from ..producer.build.rebuild import rebuild_archive
    from ..producer.compile.buildenv import strip_shell
    from ..resolve import open as open_ref

    if "triton" not in sys.modules:
        strip_shell()  # the rebuild applies each variant's recorded environment, never the shell's
    reader = open_ref(args.archive)
    done = [0]
    counts = {s.kernel: s.variants for s in reader.model.summary()}  # the header's counts: no shard read
    total = sum(counts[k] for k in select_kernels(args.kernel, counts))  # short or qualified names
    if args.kernel and not total:  # "-k nosuch" is a typo, not "0 variants, not everything reproduced"
        from ..errors import KarchiveError

        have = sorted(counts)
        raise KarchiveError(
            f"{args.archive} has no kernel {', '.join(map(repr, args.kernel))}; "
            f"it has: {printable(', '.join(have)) or '(none)'}"
        )

    def progress(check) -> None:
        done[0] += 1
        if not args.json:
            print(
                f"[{done[0]}/{total}] {check.status:<15} {printable(check.kernel)}[{check.target}] {check.key[:12]}",
                file=sys.stderr,
                flush=True,
            )

    report = rebuild_archive(
        reader, label=str(args.archive), jobs=args.jobs or 0, kernels=args.kernel, on_result=progress
    )
    if args.json:
        emit_json(report.to_json())
    else:
        _print(report)
    return report.exit_code()
