"""`karchive registry-meta refresh | show`: the registry's signed snapshot and timestamp (spec/SIGNING.md §11).

`publish` and `sign NAME@VERSION` issue them too, given ``--registry-key KEY`` (or
``$KARCHIVE_REGISTRY_KEY``); ``refresh`` is what a scheduled job runs so the short-lived timestamp never
lapses (freeze protection needs it re-signed before it expires), and ``refresh --snapshot`` issues a
snapshot from the records (the first one for an existing registry, or one that is about to expire).
"""

from __future__ import annotations

import argparse
import datetime
from typing import Any

from ..core import settings
from ..core.units import utc_text
from ..errors import RegistryError, RegistryValueError
from .arg_types import parse_age, registry_named, signing_keys
from .output import emit_json, printable

#: A registry-metadata key for every `publish` / `sign NAME@VERSION` without --registry-key (CI sets it once).
REGISTRY_KEY_ENV = settings.REGISTRY_KEY.name


def registry_keys(paths: list[str] | None, passphrase_env: str | None) -> list[Any]:
    """The private keys that sign registry metadata: ``--registry-key`` (repeatable), else the key file
    ``$KARCHIVE_REGISTRY_KEY`` names, else none (metadata is left as it is)."""
    key = settings.registry_key()
    return signing_keys(paths or ([key] if key else []), passphrase_env)


def add_registry_key_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--registry-key",
        action="append",
        metavar="KEY",
        help="then issue the registry's next signed snapshot and timestamp with this private key "
        f"(repeatable, for a threshold; default: ${REGISTRY_KEY_ENV} if set; spec/SIGNING.md §11)",
    )


def metadata_lines(update: Any) -> list[str]:
    snap = (
        f"snapshot {update.snapshot_version} issued ({update.versions} versions of {update.names} names, "
        f"expires {update.snapshot_expires})"
        if update.snapshot_created
        else f"snapshot {update.snapshot_version} kept (expires {update.snapshot_expires})"
    )
    lines = [f"  registry metadata: {snap}; timestamp {update.timestamp_version} (expires {update.timestamp_expires})"]
    if update.attempts > 1:
        lines.append(
            f"  (another writer issued a snapshot meanwhile: took number {update.snapshot_version} "
            f"after {update.attempts} tries)"
        )
    return lines


def _duration(text: str) -> datetime.timedelta:
    seconds = parse_age(text)
    if seconds <= 0:
        raise RegistryValueError(
            f"bad expiry {text!r}: give a positive duration such as 1d, 12h or 7d", value=repr(text)[:200]
        )
    return datetime.timedelta(seconds=seconds)


def cmd_refresh(args: argparse.Namespace) -> int:
    keys = registry_keys(args.key, args.passphrase_env)
    reg = registry_named(args)  # first: the error below names the registry
    if not keys:
        raise RegistryError(f"registry-meta refresh needs --key KEY (or ${REGISTRY_KEY_ENV})", registry=reg.url)
    update = reg.update_metadata(
        keys,
        snapshot=args.snapshot,
        timestamp_expires=_duration(args.expires),
        snapshot_expires=_duration(args.snapshot_expires),
    )
    if args.json:
        emit_json(update.to_json())
        return 0
    print(printable(f"re-signed the registry metadata of {update.registry}"))
    print("\n".join(printable(line) for line in metadata_lines(update)))
    if not update.snapshot_created and update.snapshot_expires < update.timestamp_expires:
        print(
            f"warning: the snapshot expires ({update.snapshot_expires}) before this timestamp; "
            "issue a new one with --snapshot"
        )
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    reg = registry_named(args)
    if args.trust:
        from ..registry.metadata_store import load_trusted
        from ..trust.policy import TrustPolicy

        policy = TrustPolicy.load(args.trust)
        if policy.registry is None:
            raise RegistryError(
                f"{args.trust} has no [registry] section: nothing says who signs registry metadata", registry=reg.url
            )
        meta = load_trusted(reg, policy)
        ts: Any = meta.timestamp
        snap: Any = meta.snapshot
        verified: dict[str, Any] | None = meta.to_json()
    else:
        from ..registry.metadata_store import read_current

        ts, snap, _, _ = read_current(reg)
        verified = None
        if ts is None:
            raise RegistryError(
                f"{reg.url} has no signed registry metadata (`karchive registry-meta refresh --snapshot "
                "--key KEY` issues it)",
                registry=reg.url,
            )
    doc: dict[str, Any] = {
        "registry": reg.url,
        "verified": verified is not None,
        "timestamp": {
            "version": ts.version,
            "issued": utc_text(ts.issued),
            "expires": utc_text(ts.expires),
            "snapshot_version": ts.snapshot_version,
            "snapshot_sha256": ts.snapshot_sha256,
        },
    }
    if snap is not None:
        doc["snapshot"] = {
            "version": snap.version,
            "issued": utc_text(snap.issued),
            "expires": utc_text(snap.expires),
            "names": {n: sorted(vs) for n, vs in snap.names.items()},
        }
    if verified is not None:
        doc["signers"] = {"timestamp": verified["timestamp"]["signers"], "snapshot": verified["snapshot"]["signers"]}
    if args.json:
        emit_json(doc)
        return 0
    how = f"verified under {args.trust}" if verified is not None else "NOT verified (give --trust POLICY to check it)"
    print(printable(f"registry metadata of {reg.url}: {how}"))
    print(
        f"  timestamp {ts.version}: issued {utc_text(ts.issued)}, expires {utc_text(ts.expires)}, names snapshot "
        f"{ts.snapshot_version} (sha256 {ts.snapshot_sha256[:16]})"
    )
    if snap is not None:
        print(
            f"  snapshot {snap.version}: issued {utc_text(snap.issued)}, expires {utc_text(snap.expires)}, "
            f"{snap.count()} versions of {len(snap.names)} names"
        )
        for name, versions in snap.names.items():
            print(printable(f"    {name}: {', '.join(versions)}"))
    if verified is not None:
        print(
            printable(
                f"  signed by: timestamp {', '.join(doc['signers']['timestamp'])}; "
                f"snapshot {', '.join(doc['signers']['snapshot'])}"
            )
        )
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser(
        "registry-meta",
        help="the registry's signed snapshot and timestamp (rollback and freeze protection, spec/SIGNING.md §11)",
    )
    msub = p.add_subparsers(dest="meta_command", metavar="ACTION", help="refresh or show")
    r = msub.add_parser(
        "refresh",
        help="re-sign the timestamp (run it regularly: clients refuse an expired one); "
        "--snapshot also issues a new snapshot from the version records",
    )
    r.add_argument(
        "--key",
        action="append",
        metavar="KEY",
        help=f"private key that signs (repeatable, for a threshold; default: ${REGISTRY_KEY_ENV})",
    )
    r.add_argument("--passphrase-env", metavar="VAR", help="the keys' passphrase is in $VAR")
    r.add_argument("--expires", default="1d", metavar="AGE", help="the timestamp's lifetime, e.g. 12h, 1d, 7d")
    r.add_argument("--snapshot", action="store_true", help="also issue a new snapshot (signed by the same keys)")
    r.add_argument("--snapshot-expires", default="30d", metavar="AGE", help="the new snapshot's lifetime")
    r.add_argument("--registry", metavar="URL", help="registry directory or fsspec URL (default: $KARCHIVE_REGISTRY)")
    r.add_argument("--json", action="store_true")
    r.set_defaults(func=cmd_refresh)
    s = msub.add_parser("show", help="print the current timestamp and snapshot; with --trust, verify them first")
    s.add_argument("--trust", metavar="POLICY", help="verify under this trust policy's [registry] section")
    s.add_argument("--registry", metavar="URL", help="registry directory or fsspec URL (default: $KARCHIVE_REGISTRY)")
    s.add_argument("--cache-dir", metavar="DIR", help="the cache that remembers the newest metadata verified")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_show)
