"""`karchive publish | pull | ls | lock | reindex | cache ls | cache prune`: the registry from a shell.

Signing touches these through ``publish --sign KEY`` (signatures stored beside the blob),
``pull --trust POLICY`` and ``lock --trust POLICY`` (signer key ids pinned); cryptography is imported
only when one of them is used.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.paths import BUILD_CACHE
from .arg_types import parse_age, parse_size, registry_named, signing_keys
from .output import emit_json, human_bytes, plural, printable, table


def _common(p: argparse.ArgumentParser, *, registry: bool = True, cache: bool = True, progress: bool = True) -> None:
    if registry:
        p.add_argument(
            "--registry",
            metavar="URL",
            help="registry directory or fsspec URL (default: $KARCHIVE_REGISTRY, else the local "
            "registry under $XDG_DATA_HOME/karchive/registry)",
        )
    if cache:
        p.add_argument(
            "--cache-dir",
            metavar="DIR",
            help="local cache (default: $KARCHIVE_CACHE_DIR, else $XDG_CACHE_HOME/karchive)",
        )
    p.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    if not progress:  # nothing is transferred (cache ls/prune): no progress flags to offer
        p.set_defaults(progress=None)
        return
    p.add_argument(
        "--progress",
        dest="progress",
        action="store_const",
        const=True,
        default=None,
        help="show transfer progress on stderr (default: only when stderr is a terminal)",
    )
    p.add_argument("--no-progress", dest="progress", action="store_const", const=False, help="no progress output")


def _record_row(r: Any, latest: str | None = None) -> list[Any]:
    mark = " (latest)" if r.version == latest else ""
    return [r.name, r.version + mark, r.sha256[:12], human_bytes(r.size), r.variants, ",".join(r.targets), r.published]


# -- commands -------------------------------------------------------------------------------------
def cmd_publish(args: argparse.Namespace) -> int:
    reg = registry_named(args, progress=args.progress)
    keys = signing_keys(args.sign, args.passphrase_env)
    info = None
    if args.provenance:
        from ..trust.buildinfo import load_build_info

        info = load_build_info(args.provenance)
    from .regmeta_cmds import metadata_lines, registry_keys

    meta_keys = registry_keys(args.registry_key, args.passphrase_env)
    # A named location (--registry, $KARCHIVE_REGISTRY) must hold a registry already unless --create-registry:
    # a mistyped one would otherwise become a new registry holding only this archive. The default local
    # registry is karchive's own directory, made by its first publish (the README's commands on a fresh machine).
    result = reg.publish(
        args.archive,
        sign=keys,
        build_info=info,
        sidecar=not args.no_sidecar,
        registry_keys=meta_keys,
        create=args.create_registry or reg.is_default,
    )
    sigs = [{"key_id": s.key_id, "created": s.created, "source": s.source} for s in result.signatures]
    if args.json:
        emit_json(
            {
                "registry": result.registry,
                "created": result.created,
                "index_current": result.index_current,
                "signatures": sigs,
                **result.record.to_dict(),
                **({"metadata": result.metadata.to_json()} if result.metadata else {}),
            }
        )
    else:
        stored_now = any(sig.created for sig in result.signatures)  # then there was something to do after all
        verb = (
            "published"
            if result.created
            else "already published (identical bytes):"
            if stored_now
            else "already published (identical bytes, nothing to do):"
        )
        print(
            f"{verb} {result.record.ref} sha256:{result.record.sha256} ({human_bytes(result.record.size)}) "
            f"to {result.registry}"
        )
        for s in result.signatures:
            how = "stored" if s.created else "already stored"
            print(
                f"  signature by key {s.key_id[:16]} ({'signed now' if s.source == 'key' else 'from the sidecar'}): {how}"
            )
        if result.metadata is not None:
            print("\n".join(printable(line) for line in metadata_lines(result.metadata)))
        if not result.index_current:
            print("warning: the derived indexes could not be refreshed; run `karchive reindex`", file=sys.stderr)
    return 0


def _open_options(args: argparse.Namespace) -> Any:
    """The flags of `pull` and `lock` as the one :class:`~karchive.registry.OpenOptions` value the registry
    takes (the one place the CLI's flags become it; `lock` has no --lockfile: it writes one)."""
    from ..registry.options import OpenOptions

    return OpenOptions(lockfile=getattr(args, "lockfile", None), trust=args.trust, allow_downgrade=args.allow_downgrade)


def cmd_pull(args: argparse.Namespace) -> int:
    reg = registry_named(args, progress=args.progress)
    result = reg.pull(args.ref, args.output, _open_options(args))
    if args.json:
        emit_json(
            {
                "path": str(result.path),
                "downloaded": result.downloaded,
                **result.record.to_dict(),
                **({"trust": result.trust.to_json()} if result.trust else {}),
            }
        )
    else:
        how = "downloaded" if result.downloaded else "from cache"
        print(f"{result.record.ref} sha256:{result.record.sha256} ({how}) -> {result.path}")
        if result.trust is not None:
            print(printable(f"  {result.trust.describe()}"))
    return 0


def cmd_ls(args: argparse.Namespace) -> int:
    from ..registry.versions import newest

    reg = registry_named(args, progress=args.progress)
    records = reg.list(args.name)
    if args.json:  # stray entries were skipped (and warned about on stderr); --json lists them too
        emit_json({"registry": reg.url, "archives": [r.to_dict() for r in records], "skipped": reg.stray})
        return 0
    if not records:
        print(f"registry {reg.url} is empty")
        return 0
    headers = ["NAME", "VERSION", "SHA256", "SIZE", "VARIANTS", "TARGETS", "PUBLISHED"]
    if args.name:
        latest = newest([r.version for r in records])
        rows = [_record_row(r, latest) for r in reversed(records)]
    else:
        by_name: dict[str, list[Any]] = {}
        for r in records:
            by_name.setdefault(r.name, []).append(r)
        rows = []
        for _name, recs in sorted(by_name.items()):
            latest = newest([r.version for r in recs])
            row = _record_row(next(r for r in recs if r.version == latest), latest)
            row[1] = f"{latest} ({plural(len(recs), 'version')})"
            rows.append(row)
    print(f"registry: {reg.url}")
    print(table(headers, rows, right=["SIZE", "VARIANTS"]))
    return 0


def cmd_lock(args: argparse.Namespace) -> int:
    from ..core.destination import output_file

    output = output_file(args.output)  # checked (parents made) before anything is resolved
    reg = registry_named(args, progress=args.progress)
    lock, verdicts = reg.lock(args.refs, _open_options(args))
    lock.write(output)
    if args.json:
        emit_json(
            {
                "lockfile": args.output,
                "archives": {n: p.to_json() for n, p in sorted(lock.pins.items())},
                "signer_names": {n: dict(v.signers) for n, v in sorted(verdicts.items())},
            }
        )
    else:
        for pin in sorted(lock.pins.values(), key=lambda p: p.name):
            print(f"pinned {pin.name}@{pin.version} sha256:{pin.sha256}")
            names = dict(verdicts[pin.name].signers) if pin.name in verdicts else {}
            for key_id in pin.signers:
                print(printable(f"  signer {names.get(key_id, '?')} (key {key_id[:16]})"))
            if pin.name in verdicts and not pin.signers:
                print("  no signer pinned: the policy allows this name unsigned")
        if not verdicts:
            print(
                "no signers pinned: give --trust POLICY (or set $KARCHIVE_TRUST_POLICY) to pin who signed each archive"
            )
        print(f"wrote {args.output}")
    return 0


def cmd_reindex(args: argparse.Namespace) -> int:
    reg = registry_named(args, progress=args.progress)
    names = reg.reindex(args.name)
    if args.json:
        emit_json({"registry": reg.url, "reindexed": names})
    else:
        print(f"rebuilt indexes of {plural(len(names), 'name')} in {reg.url}")
    return 0


@dataclass
class BuildEntry:
    """One entry of the producer's Triton build cache (``<cache>/triton-build/<namespace>/<hash>/``)."""

    path: Path
    size: int
    written: float  # newest mtime of its files: Triton never rewrites an entry, so this is when it was made

    def to_json(self) -> dict[str, Any]:
        return {"path": str(self.path), "size": self.size, "written": self.written}


def build_cache_entries(root: Path) -> list[BuildEntry]:
    """Every entry of the build cache under the cache root ``root`` (none when no build ran here)."""
    out = []
    for entry in sorted((root / BUILD_CACHE).glob("*/*")):
        if entry.is_symlink() or not entry.is_dir():
            continue
        size, written = 0, 0.0
        for f in entry.rglob("*"):
            try:
                st = f.lstat()
            except OSError:  # removed meanwhile (another prune, Triton's own temp files)
                continue
            size += st.st_size
            written = max(written, st.st_mtime)
        out.append(BuildEntry(entry, size, written or entry.stat().st_mtime))
    return out


def _tree_bytes(path: Path) -> int:
    total = 0
    for f in path.rglob("*"):
        try:
            total += f.lstat().st_size if f.is_file() or f.is_symlink() else 0
        except OSError:
            continue
    return total


def cmd_cache_ls(args: argparse.Namespace) -> int:
    from ..registry import Cache

    cache = Cache(args.cache_dir)
    entries = cache.entries()
    partial = cache.partial_files()
    build = build_cache_entries(cache.root)
    archive_bytes, build_bytes = sum(e.size for e in entries), sum(b.size for b in build)
    on_disk = _tree_bytes(cache.root) if cache.root.exists() else 0
    other = max(0, on_disk - archive_bytes - build_bytes)  # receipts, refs, locks, partial downloads
    if args.json:
        emit_json(
            {
                "cache": str(cache.root),
                "archives": [e.to_json() for e in entries],
                "total_bytes": archive_bytes,
                "partial_downloads": len(partial),
                "build_cache": {"path": str(cache.root / BUILD_CACHE), "entries": len(build), "bytes": build_bytes},
                "other_bytes": other,
                "disk_bytes": on_disk,
            }
        )
        return 0
    print(f"cache: {cache.root}")
    if not entries:
        print("no cached archives")
    else:
        now = time.time()
        rows = [
            [
                e.sha256[:12],
                ", ".join(e.refs) or "-",
                human_bytes(e.size),
                "yes" if e.verified else "no",
                _ago(now - e.last_used),
            ]
            for e in entries
        ]
        print(table(["SHA256", "ARCHIVES", "SIZE", "VERIFIED", "LAST USED"], rows, right=["SIZE"]))
        print(f"{plural(len(entries), 'archive')}, {human_bytes(archive_bytes)}")
    if partial:
        print(
            f"{plural(len(partial), 'partial download')} in {cache.root / 'tmp'} (`karchive cache prune` removes dead ones)"
        )
    print(
        f"build cache: {plural(len(build), 'compiled variant')}, {human_bytes(build_bytes)} in {cache.root / BUILD_CACHE} "
        "(Triton's cache for karchive build: safe to prune, a build compiles again what is gone)"
    )
    print(f"total on disk: {human_bytes(on_disk)} ({human_bytes(other)} of receipts, references and partial downloads)")
    return 0


def _ago(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit} ago"
    return "just now"


def _remove_build_entry(entry: BuildEntry) -> None:
    shutil.rmtree(entry.path, ignore_errors=True)
    try:
        entry.path.parent.rmdir()  # the namespace, once empty
    except OSError:
        pass  # not empty: other entries live there


def cmd_cache_prune(args: argparse.Namespace) -> int:
    """Archives and build-cache entries are pruned by one rule: older than --max-age goes, then the least
    recently used (an archive's last use, a build entry's creation) until the total fits --max-size."""
    from ..registry import Cache

    max_size = parse_size(args.max_size) if args.max_size else None
    max_age = parse_age(args.max_age) if args.max_age else None
    cache = Cache(args.cache_dir)
    now = time.time()
    build = build_cache_entries(cache.root)
    doomed = [b for b in build if max_age is not None and now - b.written > max_age]
    kept_build = [b for b in build if b not in doomed]
    archive_budget = None
    if max_size is not None:
        # One LRU order over both kinds: walk oldest first, dropping until the rest fits.
        archives = [e for e in cache.entries() if max_age is None or now - e.last_used <= max_age]
        items: list[tuple[float, Any]] = sorted(
            [(b.written, b) for b in kept_build] + [(e.last_used, e) for e in archives], key=lambda t: t[0]
        )
        total = sum(b.size for b in kept_build) + sum(e.size for e in archives)
        for _when, item in items:
            if total <= max_size:
                break
            if isinstance(item, BuildEntry):
                doomed.append(item)
                kept_build.remove(item)
            total -= item.size
        archive_budget = max(0, max_size - sum(b.size for b in kept_build))
    for b in doomed:
        _remove_build_entry(b)
    report = cache.prune(max_size=archive_budget, max_age=max_age)
    freed_build = sum(b.size for b in doomed)
    if args.json:
        emit_json(
            {
                "removed": [e.to_json() for e in report.removed],
                "freed_bytes": report.freed,
                "kept": report.kept,
                "kept_bytes": report.kept_bytes,
                "busy": report.busy,
                "partial_files_removed": report.partial_files_removed,
                "build_cache": {
                    "removed": len(doomed),
                    "freed_bytes": freed_build,
                    "kept": len(kept_build),
                    "kept_bytes": sum(b.size for b in kept_build),
                },
            }
        )
    else:
        print(
            f"removed {plural(len(report.removed), 'archive')} ({human_bytes(report.freed)}), kept {report.kept} "
            f"({human_bytes(report.kept_bytes)}), removed {plural(report.partial_files_removed, 'partial download')}"
            + (f", {report.busy} in use" if report.busy else "")
        )
        print(
            f"build cache: removed {plural(len(doomed), 'compiled variant')} ({human_bytes(freed_build)}), kept "
            f"{len(kept_build)} ({human_bytes(sum(b.size for b in kept_build))})"
        )
        if max_size is None and max_age is None:
            print(
                "nothing is pruned by size or age without --max-size SIZE or --max-age AGE "
                "(only dead partial downloads were removed)",
                file=sys.stderr,
            )
    return 0


# -- registration ---------------------------------------------------------------------------------
def _trust_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--trust",
        metavar="POLICY",
        help="refuse an archive whose signatures this trust policy does not accept (spec/SIGNING.md; "
        "default: $KARCHIVE_TRUST_POLICY)",
    )
    p.add_argument(
        "--allow-downgrade",
        action="store_true",
        help="accept a NAME@latest older than a version this cache already verified (rollback check)",
    )


def register(sub: Any) -> None:
    p = sub.add_parser("publish", help="verify an archive and publish it to a registry (and sign it)")
    p.add_argument("archive", help="the .karc file; its manifest gives the name and version")
    p.add_argument(
        "--sign",
        action="append",
        metavar="KEY",
        help="sign it with this private key (repeatable); the signature is stored beside the blob",
    )
    p.add_argument("--passphrase-env", metavar="VAR", help="the signing keys' passphrase is in $VAR")
    p.add_argument("--provenance", metavar="BUILDINFO", help="build info (JSON) for the statement --sign signs")
    p.add_argument(
        "--no-sidecar",
        action="store_true",
        help="do not store the signatures of ARCHIVE.sig.json (stored by default when it exists)",
    )
    from .regmeta_cmds import add_registry_key_arg

    add_registry_key_arg(p)
    p.add_argument(
        "--create-registry",
        action="store_true",
        help="make a new registry at --registry / $KARCHIVE_REGISTRY if none is there (without it, a "
        "location that holds no registry is refused: a typo never becomes a new registry; the "
        "default local registry is made by its first publish)",
    )
    _common(p, cache=False)
    p.set_defaults(func=cmd_publish)

    p = sub.add_parser("pull", help="fetch NAME[@VERSION] into the local cache (and optionally copy it out)")
    p.add_argument("ref", metavar="NAME[@VERSION]", help="archive name, with a version or @latest (default: latest)")
    p.add_argument("-o", "--output", metavar="PATH", help="also write the archive to PATH (file or directory)")
    p.add_argument("--lockfile", metavar="FILE", help="refuse anything whose digest differs from FILE's pin")
    _trust_args(p)
    _common(p)
    p.set_defaults(func=cmd_pull)

    p = sub.add_parser("ls", help="list archive names, or the versions of one name")
    p.add_argument("name", nargs="?", metavar="NAME", help="list this name's versions (default: every name)")
    _common(p, cache=False)
    p.set_defaults(func=cmd_ls)

    p = sub.add_parser("lock", help="pin NAME@VERSION ... to their digests (and, with --trust, their signers)")
    p.add_argument("refs", nargs="+", metavar="NAME@VERSION")
    p.add_argument("-o", "--output", default="karchive.lock", metavar="PATH", help="lockfile to write")
    _trust_args(p)
    _common(p)
    p.set_defaults(func=cmd_lock)

    p = sub.add_parser("reindex", help="rebuild a registry's derived indexes from its version records")
    p.add_argument("name", nargs="?", metavar="NAME", help="only this name's index (default: every name)")
    _common(p, cache=False)
    p.set_defaults(func=cmd_reindex)

    p = sub.add_parser("cache", help="inspect or prune the local cache: pulled archives and the build cache")
    csub = p.add_subparsers(dest="cache_command", metavar="ACTION", help="ls or prune")
    csub.required = True
    c = csub.add_parser("ls", help="list cached archives, and the build cache's size")
    _common(c, registry=False, progress=False)
    c.set_defaults(func=cmd_cache_ls)
    c = csub.add_parser(
        "prune",
        help="remove unused archives and build-cache entries by age and/or total size, and dead partial downloads",
    )
    c.add_argument(
        "--max-size",
        metavar="SIZE",
        help="keep at most SIZE bytes of archives and build cache together "
        "(e.g. 2G), dropping the least recently used first",
    )
    c.add_argument(
        "--max-age",
        metavar="AGE",
        help="drop archives unused, and build-cache entries written, longer "
        "than AGE ago (e.g. 30d, 12h; 0 empties both)",
    )
    _common(c, registry=False, progress=False)
    c.set_defaults(func=cmd_cache_prune)
