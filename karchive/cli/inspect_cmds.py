"""`karchive inspect` (what is inside), `karchive verify` (is it intact), `karchive extract`."""

from __future__ import annotations

import argparse
import hashlib
import sys
from typing import Any

from ..errors import FormatError, KarchiveError
from ..format.manifest import FileRef, Manifest, Variant
from ..format.reader import ArchiveReader
from .output import emit_json, human_bytes, printable, table


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("inspect", help="show an archive's identity and variants")
    p.add_argument("archive", help="path, URL, or NAME[@VERSION] in the registry")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("-k", "--kernel", action="append", help="only these kernels")
    p.add_argument("-t", "--target", action="append", help="only these targets (cuda:90, hip:gfx942)")
    p.add_argument("--ir", metavar="STAGE", help="print one IR stage (ttir, ttgir, llir, ptx, amdgcn, source, metadata) "
                   "of the single variant selected by --key/--kernel/--target")
    p.add_argument("--key", help="select variants by key prefix")
    p.add_argument("--summary", action="store_true",
                   help="identity and variant counts per kernel and target only (reads no variant: fast on any size)")
    p.set_defaults(func=cmd_inspect)

    v = sub.add_parser("verify", help="check the schema and every digest; non-zero exit naming what failed")
    v.add_argument("archive")
    v.add_argument("--json", action="store_true")
    v.set_defaults(func=cmd_verify)

    x = sub.add_parser("extract", help="extract members into a directory (never outside it)")
    x.add_argument("archive")
    x.add_argument("-C", "--directory", required=True, help="destination directory")
    x.add_argument("--restore-paths", metavar="ROOT",
                   help="replace the path sentinel in metadata JSON with ROOT (e.g. the site-packages holding triton)")
    x.set_defaults(func=cmd_extract)


def _open(ref: str):
    from ..resolve import open_reader

    return open_reader(ref)


def _select(manifest: Manifest, args: argparse.Namespace) -> list[Variant]:
    out = []
    # Only the kernels asked for are read (format 2: one manifest shard each).
    pool = [v for k in args.kernel if k in manifest.kernels() for v in manifest.variants_of(k)] if args.kernel \
        else manifest.variants
    for v in pool:
        if args.kernel and v.kernel not in args.kernel:
            continue
        if args.target and str(v.target) not in args.target:
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
    return {"name": m.name, "version": m.version, "format_version": m.format_version,
            "abi_version": m.abi_version, "produced_by": m.produced_by, "created": m.created,
            "archive_bytes": reader.source.size, "dictionary": reader.has_dictionary}


def _print_identity(m: Manifest, reader: ArchiveReader) -> None:
    print(printable(f"{m.name} {m.version}  ({human_bytes(reader.source.size)}, {len(m)} variants)"))
    print(printable(f"  format {m.format_version}, launch ABI v{m.abi_version}, created {m.created or 'unset'}"))
    print(printable("  produced by " + ", ".join(f"{k} {v}" for k, v in sorted(m.produced_by.items()) if v)))


def _print_summary(m: Manifest, reader: ArchiveReader, as_json: bool) -> int:
    """Identity and per-kernel counts: from a format-2 header alone, so it costs the same at any size."""
    kernels = m.summary()
    if as_json:
        emit_json({**_identity(m, reader), "variants": len(m),
                   "kernels": [{"kernel": s.kernel, "variants": s.variants, "targets": dict(s.targets)} for s in kernels],
                   **({"autotune": len(m.autotune)} if m.autotune else {})})
        return 0
    _print_identity(m, reader)
    print(printable(f"  {len(kernels)} kernels, targets {', '.join(m.targets()) or 'none'}"))
    print()
    rows = [[s.kernel, str(s.variants), ", ".join(f"{t} {n}" for t, n in s.targets)] for s in kernels]
    print(table(["kernel", "variants", "per target"], rows, right=["variants"]))
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    reader = _open(args.archive)
    m = reader.model  # every field inspect relies on is checked as it is read: SchemaError
    if args.summary:
        return _print_summary(m, reader, args.json)
    variants = _select(m, args)
    if args.ir:
        return _print_ir(reader, variants, args.ir)
    sources = {s.path: s for s in m.sources}
    if args.json:
        emit_json({
            **_identity(m, reader),
            "variants": [variant_json(v, sources) for v in variants],
            **({"autotune": m.autotune} if m.autotune else {}),
        })
        return 0
    _print_identity(m, reader)
    rows = []
    for v in variants:
        ir = sorted(v.ir)
        rows.append([
            v.kernel, str(v.target), v.key[:12], f"{v.options.get('num_warps')}/{v.options.get('num_stages')}",
            human_bytes(v.abi.shared), human_bytes(v.binary.size), ",".join(ir) if ir else "no",
            ", ".join(str(h.get("name", "?")) for h in v.provenance.hooks) or "-", _constexpr_text(v),
        ])
    print()
    print(table(["kernel", "target", "key", "warps/stages", "shared", "binary", "IR", "hooks", "constexprs"], rows,
                right=["shared", "binary"]))
    if m.autotune:
        print(f"\nautotune records: {sum(len(a.get('entries', [])) for a in m.autotune)} chosen configs "
              f"for {len(m.autotune)} kernel(s)")
    return 0


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
        listing = "\n".join(f"  {v.key[:16]}  {v.kernel}  {v.target}" for v in variants)
        raise KarchiveError(f"--ir needs exactly one variant; {len(variants)} match (narrow with --key):\n{listing}")
    v = variants[0]
    if stage == "source":
        path = v.source
    elif stage == "metadata":
        path = v.metadata.path
    else:
        ref = v.ir.get(stage)
        path = ref.path if ref else None
    if not path:
        raise KarchiveError(f"variant {v.key[:12]} has no {stage!r} stage (it has: {', '.join(sorted(v.ir)) or 'no IR'})")
    sys.stdout.write(printable(reader.read(path).decode("utf-8", errors="replace"), keep="\n\t"))
    return 0


def schema_problems(manifest: dict | ArchiveReader) -> list[str]:
    """Validate against manifest.schema.json when jsonschema is installed, else the built-in parser only.

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
    validator = _validator()
    if validator is None:
        return problems
    for e in sorted(validator.iter_errors(manifest), key=lambda e: list(e.absolute_path)):
        where = "/".join(str(p) for p in e.absolute_path) or "(root)"
        problems.append(f"schema: {where}: {e.message}")
    return problems


def _validator(definition: str | None = None) -> Any:
    try:
        import jsonschema
    except ImportError:
        return None
    from ..format.schema import load_schema

    schema = load_schema()
    if definition is not None:
        schema = {**schema, "$ref": f"#/$defs/{definition}"}
        for k in ("properties", "required", "additionalProperties", "type"):
            schema.pop(k, None)
    return jsonschema.Draft202012Validator(schema)


def _sharded_schema_problems(reader: ArchiveReader) -> list[str]:
    problems = []
    header = {k: v for k, v in reader.header.items() if k != "shards"}
    try:
        Manifest._top(header)
    except KarchiveError as exc:
        problems.append(f"manifest: {exc}")
    whole, variant = _validator(), _validator("variant")
    if whole is None or variant is None:
        return problems
    for e in sorted(whole.iter_errors({**header, "variants": []}), key=lambda e: list(e.absolute_path)):
        where = "/".join(str(p) for p in e.absolute_path) or "(root)"
        problems.append(f"schema: {where}: {e.message}")
    for kernel in reader.model.kernels():
        try:
            entries = reader.shard_entries(kernel, keep=False)
        except KarchiveError as exc:
            problems.append(f"manifest: {exc}")
            continue
        for i, entry in enumerate(entries):
            for e in sorted(variant.iter_errors(entry), key=lambda e: list(e.absolute_path)):
                where = "/".join(str(p) for p in e.absolute_path) or "(root)"
                problems.append(f"schema: shard of {kernel}: variants/{i}/{where}: {e.message}")
    return problems


def cmd_verify(args: argparse.Namespace) -> int:
    result: dict[str, Any] = {"archive": args.archive, "ok": False, "problems": []}
    try:
        reader = _open(args.archive)
    except (FormatError, FileNotFoundError) as exc:
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
    result["ok"] = not result["problems"]
    if args.json:
        emit_json(result)
    elif result["ok"]:
        print(printable(f"OK {args.archive}: {result['name']} {result['version']}, {result['members']} members, "
                        "every digest matches") + (f"\nsha256 {result['sha256']}" if "sha256" in result else ""))
    else:
        print(printable(f"FAILED {args.archive}:"))
        for p in result["problems"]:
            print(f"  - {printable(p)}")
    return 0 if result["ok"] else 1


def cmd_extract(args: argparse.Namespace) -> int:
    from ..format.extract import extract_all
    from ..format.sentinel import restore_json_bytes

    reader = _open(args.archive)
    metadata_paths = {v.metadata.path for v in reader.model.variants}
    transform = None
    if args.restore_paths:
        root = args.restore_paths
        transform = lambda name, data: restore_json_bytes(data, root) if name in metadata_paths else data  # noqa: E731
    written = extract_all(reader, args.directory, transform)
    print(f"extracted {len(written)} members into {args.directory}")
    return 0
