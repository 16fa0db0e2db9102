"""`karchive tune`: ship on-device tuning decisions between machines of one GPU model (runtime/tuning.py)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..errors import KarchiveError
from .output import emit_json


def register(sub: argparse._SubParsersAction) -> None:
    t = sub.add_parser("tune", help="export or import an archive's on-device tuning decisions (per GPU model and "
                                    "driver), so a fleet launches tuned configs without timing them")
    t.add_argument("archive", help="path, URL, or NAME[@VERSION] in the registry")
    how = t.add_mutually_exclusive_group(required=True)
    how.add_argument("--export", metavar="FILE", help="write this machine's decisions for the archive's kernels")
    how.add_argument("--import", dest="import_", metavar="FILE", help="add decisions from FILE to this machine's cache")
    t.add_argument("--cache-dir", metavar="DIR", help="local cache (default: $KARCHIVE_CACHE_DIR, else "
                                                      "$XDG_CACHE_HOME/karchive)")
    t.add_argument("--registry", metavar="URL", help="registry for a NAME@VERSION archive")
    t.add_argument("--json", action="store_true")
    t.set_defaults(func=cmd_tune)


def cmd_tune(args: argparse.Namespace) -> int:
    from ..core.jsonio import canonical_json, parse_json
    from ..core.paths import cache_dir
    from ..registry.config import storage_options_from_env
    from ..resolve import open as open_ref
    from ..runtime.tuning import export_decisions, import_decisions

    reader = open_ref(args.archive, registry=args.registry, storage_options=storage_options_from_env())
    root = cache_dir(args.cache_dir)
    if args.export:
        data = export_decisions(reader.model, root)
        Path(args.export).write_bytes(canonical_json(data) + b"\n")
        n = sum(len(d["decisions"]) for k in data["kernels"] for d in k["devices"])
        report = {"exported": n, "kernels": [k["kernel"] for k in data["kernels"]], "file": args.export}
    else:
        try:
            raw = Path(args.import_).read_bytes()
        except OSError as exc:
            raise KarchiveError(f"cannot read {args.import_}: {exc.strerror or exc}") from None
        report = import_decisions(reader.model, parse_json(raw, args.import_, error=KarchiveError), root)
    if args.json:
        emit_json(report)
    else:
        print(json.dumps(report), file=sys.stdout)
    return 0
