"""`karchive tune`: tune an archive's autotuned kernels on this device and ship the decisions per GPU model.

- ``--keys FILE`` / ``--from-capture [CAPTURE]``: time the prebuilt configs on the calls of a keys file
  (runtime/tuning/tuner.py) or of a capture's autotune entries, then write the decisions as a new archive
  version (``-o OUT``; producer/build/tune_archive.py) or as a signed sidecar (``--sidecar OUT --sign KEY``;
  runtime/tuning/signed.py).
- ``--export FILE`` / ``--import FILE``: ship this machine's tuning cache (runtime/tuning/decisions.py); ``--import``
  also takes a signed tuning sidecar, verified with ``--key PUB``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from ..errors import KarchiveError
from .arg_types import open_named, signing_keys
from .output import EXIT_NEGATIVE, emit_json

_SLUG = re.compile(r"[^A-Za-z0-9.-]+")


def register(sub: argparse._SubParsersAction) -> None:
    t = sub.add_parser(
        "tune",
        help="tune an archive's autotuned kernels on this GPU and write the decisions as a "
        "new archive version or a signed sidecar; or export/import tuning decisions",
    )
    t.add_argument("archive", help="path, URL, or NAME[@VERSION] in the registry")
    how = t.add_mutually_exclusive_group(required=True)
    how.add_argument("--keys", metavar="FILE", help="a keys file (karchive-tune-keys/1): the calls to tune")
    how.add_argument(
        "--from-capture",
        metavar="CAPTURE",
        nargs="?",
        const="",
        help="tune the calls a capture recorded in its autotune entries (default: ARCHIVE's own)",
    )
    how.add_argument("--export", metavar="FILE", help="write this machine's decisions for the archive's kernels")
    how.add_argument(
        "--import",
        dest="import_",
        metavar="FILE",
        help="add decisions from FILE (an --export file, or a signed sidecar with --key) to this machine's cache",
    )
    t.add_argument("-o", "--out", metavar="OUT.karc", help="write the tuned archive here (a new version)")
    t.add_argument("--version", help="the new version's name (default: VERSION+tuned-<GPU model>)")
    t.add_argument("--sidecar", metavar="FILE", help="write the decisions as a signed sidecar instead (needs --sign)")
    t.add_argument(
        "--sign",
        action="append",
        metavar="KEY",
        help="private key: signs the sidecar, or the new version (ARCHIVE.sig.json); repeatable",
    )
    t.add_argument("--passphrase-env", metavar="VAR", help="environment variable holding the keys' passphrase")
    t.add_argument("--key", action="append", metavar="PUB", help="public key that must verify an imported sidecar")
    t.add_argument(
        "--keep-going",
        action="store_true",
        help="a call that cannot be tuned is reported, the others are still tuned and written",
    )
    t.add_argument(
        "--reps",
        type=int,
        help="exactly this many timed runs per config (median; default: ~100 ms "
        "of runs, at least 10, at most 1000, as the runtime times)",
    )
    t.add_argument(
        "--warmup", type=int, help="exactly this many untimed runs per config first (default: ~25 ms; 1 with --reps)"
    )
    t.add_argument(
        "--cache-dir", metavar="DIR", help="local cache (default: $KARCHIVE_CACHE_DIR, else $XDG_CACHE_HOME/karchive)"
    )
    t.add_argument("--registry", metavar="URL", help="registry for a NAME@VERSION archive")
    t.add_argument("--json", action="store_true")
    t.set_defaults(func=cmd_tune)


def _report(args: argparse.Namespace, report: dict) -> int:
    if args.json:
        emit_json(report)
    else:
        print(json.dumps(report), file=sys.stdout)
    return 0


#: A keys file, a decisions export or a signed sidecar larger than this is refused before it is parsed.
MAX_INPUT_BYTES = 64 << 20


def _read(path: str) -> bytes:
    """A file named on the command line: a regular file (a FIFO is refused, not waited on), bounded."""
    from ..core.fsio import read_bounded

    try:
        return read_bounded(path, MAX_INPUT_BYTES)
    except OSError as exc:
        raise KarchiveError(f"cannot read {path}: {exc.strerror or exc}") from None


def cmd_tune(args: argparse.Namespace) -> int:
    from ..core.jsonio import canonical_json, parse_json
    from ..core.paths import cache_dir
    from ..runtime.tuning.decisions import export_decisions, import_decisions

    reader = open_named(args.archive, args.registry)
    root = cache_dir(args.cache_dir)
    if args.keys is not None or args.from_capture is not None:
        report = tune_from_args(args, reader)
        _report(args, report)
        return EXIT_NEGATIVE if report.get("failed") else 0  # --keep-going with calls left untuned, as build
    if args.export:
        data = export_decisions(reader.model, root)
        Path(args.export).write_bytes(canonical_json(data) + b"\n")
        n = sum(len(d["decisions"]) for k in data["kernels"] for d in k["devices"])
        return _report(args, {"exported": n, "kernels": [k["kernel"] for k in data["kernels"]], "file": args.export})
    raw = _read(args.import_)
    from ..runtime.tuning.signed import import_tables, verify_tuning

    if args.key or _looks_signed(raw):
        from ..trust.keys import load_public_key

        if not args.key:
            raise KarchiveError(f"{args.import_} is a signed tuning sidecar: give --key PUB to verify it")
        doc = verify_tuning(
            raw, [load_public_key(p) for p in args.key], args.import_, f"{reader.model.name}@{reader.model.version}"
        )
        return _report(args, import_tables(reader.model, doc, root, local=_local_device(reader)))
    return _report(args, import_decisions(reader.model, parse_json(raw, args.import_, error=KarchiveError), root))


def _local_device(reader: Any) -> Any:
    """This machine's first GPU (its name and driver), or None where there is none or no driver bindings."""
    from ..runtime.archive import Archive

    try:
        return Archive(reader).backend().device_info(0)
    except Exception:  # noqa: BLE001 - no GPU here: decisions are filed under the driver the table names
        return None


def _looks_signed(raw: bytes) -> bool:
    from ..runtime.tuning.signed import is_envelope

    return is_envelope(raw)


def tune_from_args(args: argparse.Namespace, reader: Any) -> dict[str, Any]:
    from ..runtime.tuning.tuner import DeviceBench, RepPolicy, calls_from_records, parse_keys_file

    if not args.out and not args.sidecar:
        raise KarchiveError(
            "say where the decisions go: -o OUT.karc (a new archive version) or --sidecar FILE "
            "--sign KEY (a signed sidecar)"
        )
    if args.out and args.sidecar:
        raise KarchiveError("-o and --sidecar are two ways to ship the decisions: give one")
    if args.sidecar and not args.sign:
        raise KarchiveError("a tuning sidecar is signed: give --sign KEY")
    if (args.reps is not None and args.reps < 1) or (args.warmup is not None and args.warmup < 0):
        raise KarchiveError("--reps must be at least 1 and --warmup at least 0")
    # counts given: exactly those; else the runtime's rule (by time where CUDA events exist)
    policy = (
        RepPolicy()
        if args.reps is None and args.warmup is None
        else RepPolicy.counts(
            1 if args.warmup is None else args.warmup, RepPolicy().reps if args.reps is None else args.reps
        )
    )
    if args.keys is not None:
        calls = parse_keys_file(_read(args.keys), args.keys)
    else:
        src = reader if not args.from_capture else open_named(args.from_capture, args.registry)
        calls = calls_from_records(src.model.autotune or [])
        if not calls:
            raise KarchiveError(
                f"{args.from_capture or args.archive}: no autotune entry records its call (a "
                "capture by this karchive records them); write a keys file instead"
            )
    signers = signing_keys(args.sign, args.passphrase_env)
    return tune_archive(
        reader,
        calls,
        ref=args.archive,
        out=args.out,
        version=args.version,
        sidecar=args.sidecar,
        signers=signers,
        make_bench=lambda device: DeviceBench(device, policy),
        keep_going=args.keep_going,
    )


def tune_archive(
    reader: Any,
    calls: list,
    *,
    ref: str,
    out: str | None = None,
    version: str | None = None,
    sidecar: str | None = None,
    signers: list | None = None,
    bench: Any = None,
    make_bench: Any = None,
    factory: Any = None,
    archive: Any = None,
    keep_going: bool = False,
) -> dict[str, Any]:
    """Tune ``calls`` on this device and write the decisions (a new version at ``out``, or a signed sidecar).

    ``bench`` (a :class:`~karchive.runtime.tuning.tuner.Bench`) or ``make_bench`` (device -> Bench; default the
    device's DeviceBench) times a config and ``factory`` makes the tensors: the seams the CPU tests replace;
    ``archive`` is a runtime Archive over ``reader`` (made here when None)."""
    from ..producer.build.tune_archive import provenance, tuned_records, write_tuned_version
    from ..registry.refs import check_version
    from ..runtime.archive import Archive
    from ..runtime.tuning.tuner import TuneError, Tuner

    arc = archive if archive is not None else Archive(reader, ref=ref)
    tuner = Tuner(arc, bench=bench, make_bench=make_bench, factory=factory)
    decisions = tuner.tune(calls, keep_going=keep_going)
    if not decisions:
        raise TuneError(
            "no call could be tuned: " + "; ".join(f["error"] for f in tuner.failed)[:2000], kernel=None, call=None
        )  # every call failed: none is the one at fault
    device = tuner.device
    if device is None or not getattr(device, "name", ""):
        raise TuneError(
            "the device the calls ran on has no name: tuning tables are filed per GPU model", kernel=None, call=None
        )
    model = reader.model
    target = f"{device.backend}:{device.arch}"
    source = {"name": model.name, "version": model.version}
    path = getattr(getattr(reader, "source", None), "path", None)
    if isinstance(path, str) and os.path.isfile(path):
        from ..core.digest import sha256_file

        source["sha256"] = sha256_file(path)[0]
    info = tuner.bench_info
    prov = provenance(source=source, driver=getattr(device, "driver_version", None), bench=info)
    records = tuned_records(
        model.autotune or [],
        [d.to_json() | {"record": d.record} for d in decisions],
        device_name=device.name,
        target=target,
        provenance=prov,
    )
    report: dict[str, Any] = {
        "device": {"name": device.name, "target": target, "driver": getattr(device, "driver_version", None)},
        "bench": info,
        "decisions": [d.to_json() for d in decisions],
    }
    if tuner.failed:
        report["failed"] = tuner.failed
    if out:
        new_version = version or f"{model.version}+tuned-{_SLUG.sub('-', device.name).strip('-')}"[:128]
        check_version(new_version)
        report["written"] = write_tuned_version(reader, out, version=new_version, records=records)
        if signers:
            from ..trust.sign import sign_archive

            # the signed statement says what made this version: `karchive tune` of which archive, on which GPU model
            info = {"command": "tune", "parameters": {"from": source, "device": report["device"]}}
            report["signed"] = [sign_archive(out, k, build_info=info).to_json()["sidecar"] for k in signers]
    else:
        from ..core.fsio import atomic_write
        from ..runtime.tuning.signed import sign_tuning, tables_document

        doc = tables_document(model, records, device.name, source)
        env = sign_tuning(doc, signers or [])
        atomic_write(str(sidecar), env.to_bytes())
        report["sidecar"] = {
            "file": sidecar,
            "kernels": [k["kernel"] for k in doc["kernels"]],
            "key_ids": [s.keyid for s in env.signatures],
        }
    return report
