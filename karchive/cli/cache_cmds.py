"""`karchive export-triton-cache` and `karchive import-triton-cache`: interop with Triton's own cache dir."""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter

from ..errors import CaptureError, KarchiveError
from ..format.names import select_kernels
from .arg_types import add_archive_out, archive_out, open_named
from .output import emit_json, human_bytes, plural, table


def register(sub: argparse._SubParsersAction) -> None:
    e = sub.add_parser(
        "export-triton-cache",
        help="write an archive's variants into Triton's cache layout, so plain Triton JIT hits them",
    )
    e.add_argument("archive", help="path, URL, or NAME[@VERSION] in the registry")
    e.add_argument("--cache-dir", help="Triton cache directory (default: TRITON_CACHE_DIR or ~/.triton/cache)")
    e.add_argument("-k", "--kernel", action="append", help="only these kernels")
    e.add_argument(
        "--allow-unverified",
        action="store_true",
        help="also write variants that carry no Triton build fingerprint (they may never be hit)",
    )
    e.add_argument(
        "--registry",
        metavar="URL",
        help="registry for a NAME@VERSION archive (default: $KARCHIVE_REGISTRY, else the local registry)",
    )
    e.add_argument("--json", action="store_true", help="machine-readable output")
    e.set_defaults(func=cmd_export)

    i = sub.add_parser("import-triton-cache", help="turn a Triton cache directory into an archive")
    i.add_argument("cache_dir", metavar="DIR", help="a Triton cache directory (e.g. ~/.triton/cache)")
    add_archive_out(i)
    i.add_argument("--name", help="archive name (default: triton-cache)")
    i.add_argument("--version", dest="archive_version", default="0.0.0", help="archive version")
    i.add_argument(
        "--same-build",
        action="store_true",
        help="the cache was written by this Triton install: record its fingerprint so the archive "
        "can be exported back into a Triton cache",
    )
    i.add_argument("--no-ir", action="store_true", help="leave IR stages out")
    i.add_argument("--json", action="store_true", help="machine-readable output")
    i.set_defaults(func=cmd_import)


def cmd_export(args: argparse.Namespace) -> int:
    from ..core.destination import output_dir
    from ..producer.capture.triton_cache import export_archive, local_cache_dir

    cache_dir = os.path.abspath(output_dir(args.cache_dir or local_cache_dir(), create=False))
    reader = open_named(args.archive, args.registry)
    if args.kernel:  # a -k that matches nothing is a typo: say what there is rather than export nothing
        have = reader.model.kernels()  # the header: no shard read
        missing = [k for k in args.kernel if not select_kernels([k], have)]  # short or qualified names
        if missing:
            raise KarchiveError(
                f"{args.archive} has no kernel {', '.join(map(repr, missing))}; it has: {', '.join(have) or '(none)'}"
            )
    results = export_archive(reader, cache_dir, allow_unverified=args.allow_unverified, kernels=args.kernel)
    counts = Counter(r.status for r in results)
    if args.json:
        emit_json(
            {
                "archive": args.archive,
                "cache_dir": cache_dir,
                "counts": dict(counts),
                "variants": [vars(r) for r in results],
            }
        )
    else:
        rows = [(r.kernel, r.key[:16], r.status, r.detail) for r in results]
        print(table(["kernel", "key", "status", "detail"], rows))
        print(
            f"{cache_dir}: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
            if counts
            else f"{args.archive}: no variants selected"
        )
    refused = counts.get("mismatch", 0) + counts.get("unverified", 0)
    if refused and not (counts.get("written", 0) + counts.get("exists", 0)):
        print(
            "karchive: nothing exported: every variant was built by a different Triton build or carries no "
            "build fingerprint (see 'detail'); entries written for another build would never be hit",
            file=sys.stderr,
        )
        return 2
    return 1 if refused or counts.get("skipped") else 0


def cmd_import(args: argparse.Namespace) -> int:
    from ..producer.build.pack import ArchiveBuilder
    from ..producer.capture.triton_cache import import_cache
    from ..producer.compile.aot import toolchain_versions

    out = archive_out(args.out, args.name or "triton-cache", args.archive_version)
    result = import_cache(args.cache_dir, same_build=args.same_build, include_ir=not args.no_ir)
    if not result.variants:
        raise CaptureError(
            f"{args.cache_dir}: no kernel entries could be imported"
            + ("".join(f"\n  {s}" for s in result.skipped[:20]) if result.skipped else "")
        )
    produced = {k: (None if v is None else str(v)) for k, v in toolchain_versions().items()}
    builder = ArchiveBuilder(args.name or "triton-cache", args.archive_version, produced_by=produced)
    builder.extend(result.variants)
    stats = builder.write(out)
    summary = {
        "archive": out,
        "variants": len(result.variants),
        "duplicates": result.duplicates,
        "skipped": result.skipped,
        "kernels": sorted({v.kernel for v in result.variants}),
        "archive_bytes": stats.archive_bytes,
        "raw_bytes": stats.raw_bytes,
        "fingerprint": "this Triton install" if args.same_build else None,
    }
    if args.json:
        emit_json(summary)
    else:
        kernels = {v.kernel for v in result.variants}
        print(
            f"imported {plural(len(result.variants), 'variant')} of {plural(len(kernels), 'kernel')} from "
            f"{args.cache_dir}" + (f", {plural(result.duplicates, 'duplicate')} dropped" if result.duplicates else "")
        )
        for s in result.skipped:
            print(f"  skipped {s}")
        print(f"wrote {out}: {human_bytes(stats.archive_bytes)}")
        if not args.same_build:
            print(
                "note: no Triton build fingerprint recorded (pass --same-build if this install wrote the cache); "
                "export-triton-cache will refuse these variants"
            )
    return 0
