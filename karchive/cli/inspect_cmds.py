"""`karchive inspect` (what is inside), `karchive verify` (is it intact), `karchive extract`."""

from __future__ import annotations

import argparse
import hashlib
import sys
from typing import Any

from ..errors import FormatError, KarchiveError, NotAnArchiveError, TargetError
from ..format.inductor_records import CacheArtifacts, InductorSection, section_of
from ..format.manifest import FileRef, Manifest, Variant
from ..format.names import did_you_mean, kernel_matches, select_kernels
from ..format.reader import ArchiveReader
from ..format.schema import VariantChecker
from ..format.target import Target
from .arg_types import open_named
from .hints import wrong_kind
from .output import emit_json, human_bytes, plural, printable, table


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("inspect", help="show an archive's identity and variants")
    p.add_argument("archive", help="path, URL, or NAME[@VERSION] in the registry")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("-k", "--kernel", action="append", help="only these kernels")
    p.add_argument("-t", "--target", action="append", help="only these targets (cuda:90, hip:gfx942)")
    p.add_argument(
        "--ir",
        metavar="STAGE",
        help="print one IR stage (ttir, ttgir, llir, ptx, amdgcn, source, metadata) "
        "of the single variant selected by --key/--kernel/--target",
    )
    p.add_argument("--key", help="select variants by key prefix")
    p.add_argument(
        "--summary",
        action="store_true",
        help="identity and variant counts per kernel and target only, narrowed by -k/-t, and what the "
        "autotune/heuristics records hold (reads no variant: fast on any size)",
    )
    _registry_args(p)
    p.set_defaults(func=cmd_inspect)

    v = sub.add_parser(
        "verify",
        help="check the schema and every digest (and, with --trust, the signatures); non-zero exit naming what failed",
    )
    v.add_argument("archive", help="path, URL, or NAME[@VERSION] in the registry")
    v.add_argument(
        "--trust",
        metavar="POLICY",
        help="also check the signatures against this trust policy and show who signed what: "
        "ARCHIVE.sig.json beside a file or URL, the registry's for NAME@VERSION (spec/SIGNING.md)",
    )
    _registry_args(v)
    v.add_argument("--json", action="store_true")
    v.set_defaults(func=cmd_verify)

    x = sub.add_parser("extract", help="extract members into a directory (never outside it)")
    x.add_argument("archive", help="path, URL, or NAME[@VERSION] in the registry")
    x.add_argument(
        "-C",
        "--directory",
        required=True,
        help="destination directory (created if missing; existing files are never overwritten)",
    )
    x.add_argument(
        "--restore-paths",
        metavar="ROOT",
        help="replace the path sentinel in metadata JSON with ROOT (e.g. the site-packages holding triton)",
    )
    _registry_args(x)
    x.set_defaults(func=cmd_extract)


def _registry_args(p: argparse.ArgumentParser) -> None:
    """Where a NAME@VERSION argument is looked up, as for pull (ignored for paths and URLs)."""
    p.add_argument(
        "--registry",
        metavar="URL",
        help="registry for NAME@VERSION (default: $KARCHIVE_REGISTRY, else the local registry)",
    )
    p.add_argument(
        "--cache-dir",
        metavar="DIR",
        help="local cache for NAME@VERSION (default: $KARCHIVE_CACHE_DIR, else $XDG_CACHE_HOME/karchive)",
    )


def _target_names(given: list[str] | None) -> set[str] | None:
    """``-t`` values as archives spell them (``CUDA:sm_90`` is ``cuda:90``); a malformed one is kept as typed
    and simply matches nothing (the error then lists the targets the archive has)."""
    if not given:
        return None
    out = set()
    for t in given:
        try:
            out.add(str(Target.parse(t)))
        except TargetError:
            out.add(t)
    return out


def _select(manifest: Manifest, args: argparse.Namespace) -> list[Variant]:
    out = []
    targets = _target_names(args.target)
    # Only the kernels asked for are read (format 2: one manifest shard each).
    # -k takes a qualified name or a short one (format/names.py, kernel_matches).
    pool = (
        [v for k in select_kernels(args.kernel, manifest.kernels()) for v in manifest.variants_of(k)]
        if args.kernel
        else manifest.variants
    )
    for v in pool:
        if targets and str(v.target) not in targets:
            continue
        if getattr(args, "key", None) and not v.key.startswith(args.key):
            continue
        out.append(v)
    return sorted(out, key=lambda v: (v.kernel, str(v.target), _constexpr_text(v), v.abi.num_warps))


def _files(v: Variant, sources: dict[str, FileRef]) -> list[dict]:
    rows = [{"role": "binary", **v.binary.to_json()}, {"role": "metadata", **v.metadata.to_json()}]
    rows += [{"role": stage, **ref.to_json()} for stage, ref in sorted(v.ir.items())]
    if v.source in sources:
        rows.append({"role": "source", **sources[v.source].to_json()})
    return rows


def variant_json(v: Variant, sources: dict[str, FileRef]) -> dict[str, Any]:
    """A variant as ``inspect --json`` shows it: the manifest entry plus the fields people filter on."""
    entry = v.to_json()
    return {
        "kernel": v.kernel,
        "target": str(v.target),
        "warp_size": v.target.warp_size,
        "key": v.key,
        "num_warps": v.options.get("num_warps"),
        "num_stages": v.options.get("num_stages"),
        "num_ctas": v.options.get("num_ctas"),
        "shared": v.abi.shared,
        "params": entry["params"],
        "options": v.options,
        "abi": entry["abi"],
        "files": _files(v, sources),
        "provenance": entry["provenance"],
    }


def _identity(m: Manifest, reader: ArchiveReader) -> dict[str, Any]:
    return {
        "name": m.name,
        "version": m.version,
        "format_version": m.format_version,
        "abi_version": m.abi_version,
        "produced_by": m.produced_by,
        "created": m.created,
        "archive_bytes": reader.source.size,
        "dictionary": reader.has_dictionary,
    }


def _print_identity(m: Manifest, reader: ArchiveReader, shown: int | None = None) -> None:
    print(
        printable(
            f"{m.name} {m.version}  ({human_bytes(reader.source.size)}, {plural(len(m), 'variant')}"
            + (f", {shown} shown" if shown is not None else "")
            + ")"
        )
    )
    # A reproducible build records no time (spec/FORMAT.md §12): say nothing rather than "created unset".
    print(
        printable(
            f"  format {m.format_version}, launch ABI v{m.abi_version}"
            + (f", created {m.created}" if m.created else "")
        )
    )
    print(printable("  produced by " + ", ".join(f"{k} {v}" for k, v in sorted(m.produced_by.items()) if v)))


def _records_of(records: list[dict] | None, args: argparse.Namespace) -> list[dict]:
    """The autotune/heuristics records of the kernels ``-k`` selects (all without ``-k``)."""
    records = records or []
    if not args.kernel:
        return records
    return [r for r in records if any(kernel_matches(q, str(r.get("kernel"))) for q in args.kernel)]


def _print_summary(m: Manifest, reader: ArchiveReader, args: argparse.Namespace) -> int:
    """Identity and per-kernel counts (``-k``/``-t`` honoured): from a format-2 header alone, so it costs the
    same at any size."""
    targets = _target_names(args.target)
    rows_of = []
    for s in m.summary():
        if args.kernel and not select_kernels(args.kernel, [s.kernel]):
            continue
        per_target = [(t, n) for t, n in s.targets if targets is None or t in targets]
        if per_target:
            rows_of.append((s.kernel, sum(n for _, n in per_target), per_target))
    filtered = bool(args.kernel or args.target)
    if filtered and not rows_of:
        raise KarchiveError(_no_match(m, args))
    autotune, heuristics = _records_of(m.autotune, args), _records_of(m.heuristics, args)
    inductor = section_of(m)
    if args.json:
        emit_json(
            {
                **_identity(m, reader),
                "variants": len(m),
                **({"shown": sum(n for _, n, _ in rows_of)} if filtered else {}),
                "kernels": [{"kernel": k, "variants": n, "targets": dict(ts)} for k, n, ts in rows_of],
                **({"autotune": len(autotune)} if autotune else {}),
                **({"heuristics": len(heuristics)} if heuristics else {}),
                **({"inductor_kernels": len(inductor.kernels)} if inductor is not None else {}),
                **(
                    {"inductor_cache_artifacts": inductor.cache_artifacts.to_json()}
                    if inductor is not None and inductor.cache_artifacts is not None
                    else {}
                ),
            }
        )
        return 0
    _print_identity(m, reader, sum(n for _, n, _ in rows_of) if filtered else None)
    shown_targets = sorted({t for _, _, ts in rows_of for t, _ in ts})
    print(
        printable(
            f"  {plural(len(rows_of), 'kernel')}, targets {', '.join(shown_targets) or 'none'}"
            + (f"; {len(inductor.kernels)} generated by torch.compile (Inductor)" if inductor else "")
        )
    )
    print()
    rows = [[k, str(n), ", ".join(f"{t} {c}" for t, c in ts)] for k, n, ts in rows_of]
    print(table(["kernel", "variants", "per target"], rows, right=["variants"]))
    _print_records(autotune, heuristics)
    if inductor is not None and inductor.cache_artifacts is not None:
        print()
        print(printable(_cache_artifacts_line(inductor.cache_artifacts)))
    return 0


def _print_records(autotune: list[dict], heuristics: list[dict]) -> None:
    """The footer: what the autotune and heuristics records of the shown kernels hold, truly (an ahead-of-time
    build records configs and expressions, not chosen configs or cases: never "0" as if they were empty)."""
    if autotune:
        print()
        print(printable(_autotune_line(autotune)))
        from ..format.tuned import tables

        tuned: dict[str, int] = {}  # GPU model -> keys decided (karchive tune)
        for a in autotune:
            for t in tables(a):
                name = str((t.get("device") or {}).get("name"))
                tuned[name] = tuned.get(name, 0) + len(t.get("entries") or [])
        if tuned:
            print(printable("tuning tables: " + ", ".join(f"{n}: {c} keys" for n, c in sorted(tuned.items()))))
    if heuristics:
        print()
        print(printable(_heuristics_line(heuristics)))


def _autotune_line(records: list[dict]) -> str:
    """``@triton.autotune`` records (spec §6.3) in one line: configs, and the choices recorded (or that there
    are none yet: a key is tuned on the device at its first launch)."""
    configs = sum(len(a.get("configs") or []) for a in records)
    chosen = sum(len(a.get("entries") or []) for a in records)
    kernels = ", ".join(sorted(str(a.get("kernel")) for a in records))
    if chosen:
        what = f"{plural(chosen, 'chosen config')} (by autotune key) among {plural(configs, 'config')}"
    else:
        what = (
            f"{plural(configs, 'config')}, none chosen yet (each autotune key is tuned on the device "
            "at its first launch)"
        )
    return f"autotune records: {what}, for {kernels}"


def _no_match(m: Manifest, args: argparse.Namespace) -> str:
    """Why a filter selected nothing, with what the archive has, so the next try can be right (read from
    the manifest header: no shard is loaded for the message)."""
    asked = " ".join(
        [
            *(f"-k {k}" for k in args.kernel or ()),
            *(f"-t {t}" for t in args.target or ()),
            *([f"--key {args.key}"] if args.key else []),
        ]
    )
    kernels, targets = m.kernels(), m.targets()
    hints = "".join(did_you_mean(k, kernels) for k in args.kernel or () if not select_kernels([k], kernels))
    return (
        f"no variant of {m.name} {m.version} matches {asked}{hints}; it has kernels "
        f"{', '.join(kernels) or '(none)'} and targets {', '.join(targets) or '(none)'}"
    )


def cmd_inspect(args: argparse.Namespace) -> int:
    reader = open_named(args.archive, args.registry, cache_dir=args.cache_dir)
    m = reader.model  # every field inspect relies on is checked as it is read: SchemaError
    if args.summary:
        return _print_summary(m, reader, args)
    variants = _select(m, args)
    filtered = bool(args.kernel or args.target or args.key)
    if filtered and not variants and not args.ir:  # a filter naming nothing is a mistake: exit 2, as in diff
        raise KarchiveError(_no_match(m, args))
    if args.ir:
        return _print_ir(reader, variants, args.ir)
    sources = {s.path: s for s in m.sources}
    if args.json:
        emit_json(
            {
                **_identity(m, reader),
                "variants": [variant_json(v, sources) for v in variants],
                **({"autotune": m.autotune} if m.autotune else {}),
                **({"heuristics": m.heuristics} if m.heuristics else {}),
                **({"inductor": inductor.to_json()} if (inductor := section_of(m)) is not None else {}),
            }
        )
        return 0
    _print_identity(m, reader, len(variants) if filtered else None)
    rows = [
        [
            v.kernel,
            str(v.target),
            v.key[:12],
            f"{v.options.get('num_warps')}/{v.options.get('num_stages')}",
            human_bytes(v.abi.shared),
            human_bytes(v.binary.size),
            ",".join(sorted(v.ir)) or "no",
            ", ".join(str(h.get("name", "?")) for h in v.provenance.hooks) or "-",
            _constexpr_text(v),
        ]
        for v in variants
    ]
    print()
    # "specialisation": constexpr values and the ints fixed to 1 (stride==1): what this variant was compiled for.
    print(
        table(
            ["kernel", "target", "key", "warps/stages", "shared", "binary", "IR", "hooks", "specialisation"],
            rows,
            right=["shared", "binary"],
        )
    )
    _print_records(_records_of(m.autotune, args), _records_of(m.heuristics, args))
    inductor = section_of(m)
    if inductor is not None:
        _print_inductor(inductor)
    return 0


def _print_inductor(section: InductorSection) -> None:
    """Which kernels torch.compile (Inductor) generated, the config each launched with, and their graphs."""
    print()
    print(
        printable(
            f"torch.compile (Inductor): {plural(len(section.kernels), 'kernel')} with recorded autotune "
            f"decisions, {plural(sum(t.calls for t in section.templates), 'template selection')} answered"
        )
    )
    rows = []
    for d in section.kernels:
        cfg = d.config
        kwargs = ",".join(f"{k}={v}" for k, v in sorted(cfg["kwargs"].items()))
        rows.append(
            [
                d.kernel.rpartition(":")[2],
                d.kernel.partition(":")[0][len("inductor.k") :][:12],
                d.heuristic or "-",
                f"{kwargs} w{cfg.get('num_warps')}/s{cfg.get('num_stages')}"
                + (" (coordesc)" if d.found_by_coordesc else ""),
                "-" if d.configs_compiled is None else str(d.configs_compiled),
                "; ".join(d.graphs) or "-",
            ]
        )
    if rows:
        print(table(["function", "source", "heuristic", "chosen config", "configs", "graphs"], rows, right=["configs"]))
    if section.cache_artifacts is not None:
        print(printable(_cache_artifacts_line(section.cache_artifacts)))


def _cache_artifacts_line(c: CacheArtifacts) -> str:
    """The archive carries torch's own cache artifacts: how large, what they need to be used (a serving process
    loads them only from a signed archive, docs/inductor-notes.md)."""
    entries = ", ".join(f"{n} {k}" for k, n in sorted(c.entries.items())) or "no entries listed"
    device = f", {c.device} (sm {c.capability})" if c.device else ""
    return (
        f"torch cache artifacts: {human_bytes(c.size)} ({entries}) for torch {c.torch}, "
        f"Triton {c.triton or '?'}{device}; loaded by karchive.serve only from a signed archive"
    )


def _heuristics_line(records: list[dict]) -> str:
    """``@triton.heuristics`` records (spec §6.4) in one line: which values are computed, from how many
    recorded cases, for which kernels (the records themselves are in ``--json``)."""
    names = sorted({str(n) for r in records for n in (r.get("names") or [])})
    cases = sum(len(c) for r in records for c in (r.get("cases") or {}).values() if isinstance(c, list))
    exprs = sum(len(r.get("exprs") or {}) for r in records if isinstance(r.get("exprs"), dict))
    held = [
        x
        for x in (
            (plural(exprs, "stored expression") if exprs else ""),
            (plural(cases, "recorded case") if cases else ""),
        )
        if x
    ]
    kernels = ", ".join(sorted(str(r.get("kernel")) for r in records))
    return (
        f"heuristics records: {' and '.join(held) or 'no expression and no recorded case'} computing "
        f"{', '.join(names) or '(nothing)'} for {kernels}"
    )


def _constexpr_text(v: Variant) -> str:
    parts = []
    for p in v.params:
        if p.equal_to_1:
            parts.append(f"{p.name}==1")
        elif p.is_constexpr:
            parts.append(f"{p.name}={p.constexpr}")
    return " ".join(parts)


def _print_ir(reader: ArchiveReader, variants: list[Variant], stage: str) -> int:
    if len(variants) != 1:
        listing = "\n".join(f"  {v.key[:16]}  {v.kernel}  {v.target}  {_constexpr_text(v)}" for v in variants)
        raise KarchiveError(
            f"--ir needs exactly one variant; {len(variants)} match"
            + (f" (narrow with --key, -k, -t):\n{listing}" if variants else "")
        )
    v = variants[0]
    if stage == "source":
        path = v.source
    elif stage == "metadata":
        path = v.metadata.path
    else:
        ref = v.ir.get(stage)
        path = ref.path if ref else None
    if not path:
        raise KarchiveError(
            f"variant {v.key[:12]} has no {stage!r} stage (it has: {', '.join(sorted(v.ir)) or 'no IR'})"
        )
    sys.stdout.write(printable(reader.read(path).decode("utf-8", errors="replace"), keep="\n\t"))
    return 0


def schema_problems(manifest: dict | ArchiveReader) -> list[str]:
    """The manifest's problems: the typed model's (:class:`Manifest`), and every violation of
    manifest.schema.json. Variants are checked by :class:`~karchive.format.schema.VariantChecker` (the
    schema's own rules, in jsonschema's words, at a fraction of a generic engine's cost); the top-level
    fields by ``jsonschema`` when it is installed (one small document).

    Given a format-2 reader, the manifest is checked one shard at a time (memory bounded by a shard,
    not the archive): the header's fields with the model, each kernel's variants against the schema
    (the model parses them in the reader's own verify()).
    """
    if isinstance(manifest, ArchiveReader):
        if manifest.sharded:
            return _sharded_schema_problems(manifest)
        manifest = manifest.manifest
    problems = []
    try:
        Manifest.from_json(manifest)
    except KarchiveError as exc:
        problems.append(f"manifest: {exc}")
    found: list[tuple[list, str]] = []
    variants = manifest.get("variants") if isinstance(manifest, dict) else None
    whole = _validator()
    if whole is not None:
        doc = {**manifest, "variants": []} if isinstance(variants, list) else manifest
        found += [(list(e.absolute_path), e.message) for e in whole.iter_errors(doc)]
    if isinstance(variants, list):
        checker = VariantChecker()
        for i, entry in enumerate(variants):
            found += [(["variants", i, *path], message) for path, message in checker.problems(entry)]
    for path, message in sorted(found, key=lambda f: f[0]):
        problems.append(f"schema: {'/'.join(str(p) for p in path) or '(root)'}: {message}")
    return problems


def _validator() -> Any:
    """A jsonschema validator of the whole manifest (used on everything but the variants), or None."""
    try:
        import jsonschema
    except ImportError:
        return None
    from ..format.schema import load_schema

    return jsonschema.Draft202012Validator(load_schema())


def _sharded_schema_problems(reader: ArchiveReader) -> list[str]:
    problems = []
    header = {k: v for k, v in reader.header.items() if k != "shards"}
    try:
        Manifest._top(header)
        kernels = reader.model.kernels()
    except KarchiveError as exc:  # the header's fields: a problem of this archive (exit 1), as in format 1
        problems.append(f"manifest: {exc}")
        kernels = sorted(row["kernel"] for row in reader.header["shards"])  # (the reader checked the table)
    whole = _validator()
    if whole is not None:
        for e in sorted(whole.iter_errors({**header, "variants": []}), key=lambda e: list(e.absolute_path)):
            where = "/".join(str(p) for p in e.absolute_path) or "(root)"
            problems.append(f"schema: {where}: {e.message}")
    checker = VariantChecker()
    for kernel in kernels:
        try:
            entries = reader.shard_entries(kernel, keep=False)
        except KarchiveError as exc:
            problems.append(f"manifest: {exc}")
            continue
        for i, entry in enumerate(entries):
            for path, message in sorted(checker.problems(entry), key=lambda f: list(f[0])):
                where = "/".join(str(p) for p in path) or "(root)"
                problems.append(f"schema: shard of {kernel}: variants/{i}/{where}: {message}")
    return problems


def cmd_verify(args: argparse.Namespace) -> int:
    from ..trust.enforce import policy_from_env

    policy = args.trust or policy_from_env()  # the variable applies to every load, verify's too
    if policy:  # a missing or malformed policy is an error (exit 2), said before any digest is checked
        from ..trust.policy import TrustPolicy

        TrustPolicy.load(policy)
    result: dict[str, Any] = {"archive": args.archive, "ok": False, "problems": []}
    try:
        # Digests first, with no policy (trust=False: not even $KARCHIVE_TRUST_POLICY), so that a damaged
        # archive shows its damage; the signatures are checked below and reported beside it.
        reader = open_named(args.archive, args.registry, cache_dir=args.cache_dir, trust=False)
    except FileNotFoundError:
        raise  # nothing to verify: an error (exit 2), as in every command, not "damaged" (exit 1)
    except FormatError as exc:
        if isinstance(exc, NotAnArchiveError) and wrong_kind(args.archive):
            raise  # a spec or a .py given by mistake: the error with its "did you mean" (exit 2)
        result["problems"].append(str(exc))
    else:
        result["problems"] += schema_problems(reader)  # format 2: one shard at a time
        result["problems"] += reader.verify()
        result["name"], result["version"] = reader.header.get("name"), reader.header.get("version")
        result["members"] = reader.member_count()  # format 2: counted by verify(), not loaded
        if hasattr(reader.source, "path") and not getattr(reader.source, "fs", None):
            h = hashlib.sha256()
            for off in range(0, reader.source.size, 1 << 22):
                h.update(reader.source.read(off, min(1 << 22, reader.source.size - off)))
            result["sha256"] = h.hexdigest()
    if policy:
        from .trust_cmds import trust_report_for

        result["trust"] = trust_report_for(args.archive, policy, registry=args.registry, cache_dir=args.cache_dir)
        if not result["trust"]["ok"]:
            result["problems"].append(f"trust: {result['trust']['reason']}")
    result["ok"] = not result["problems"]
    if args.json:
        emit_json(result)
    else:
        if result["ok"]:
            print(
                printable(
                    f"OK {args.archive}: {result['name']} {result['version']}, {result['members']} members, "
                    "every digest matches"
                )
                + (f"\nsha256 {result['sha256']}" if "sha256" in result else "")
            )
        else:
            print(printable(f"FAILED {args.archive}:"))
            for p in result["problems"]:
                print(f"  - {printable(p)}")
        if "trust" in result:
            from .trust_cmds import trust_lines

            print("\n".join(trust_lines(result["trust"])))
    return 0 if result["ok"] else 1


def cmd_extract(args: argparse.Namespace) -> int:
    from ..core.destination import output_dir
    from ..format.extract import extract_all
    from ..format.sentinel import restore_json_bytes

    # Checked first (a file there, no permission), created only once the archive proved intact.
    output_dir(args.directory, create=False)
    reader = open_named(args.archive, args.registry, cache_dir=args.cache_dir)
    metadata_paths = {v.metadata.path for v in reader.model.variants}
    transform = None
    if args.restore_paths:
        root = args.restore_paths
        transform = lambda name, data: restore_json_bytes(data, root) if name in metadata_paths else data  # noqa: E731
    written = extract_all(reader, args.directory, transform)
    print(f"extracted {plural(len(written), 'member')} into {args.directory}")
    return 0
