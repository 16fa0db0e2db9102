"""A new archive version holding tuning decisions (``karchive tune ARCHIVE --keys FILE -o OUT``).

The new version has the same variants, members byte for byte, the same sources, heuristics and
produced_by, and its autotune records gain a tuning table for the GPU model the decisions were made on
(:mod:`karchive.format.tuned`; spec/FORMAT.md §6.3). The table's ``provenance`` says which tool made it,
on which driver, with which benchmark settings, from which archive (name, version, sha256). Timings are
not stored, and the writer is deterministic, so the same decisions on the same input give the same bytes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from ... import __version__
from ...errors import SchemaError
from ...format.tuned import device_label, key_text, merge_table
from ..compile.describe import CompiledVariant
from .pack import ArchiveBuilder


def tuned_records(
    records: Sequence[Mapping[str, Any]],
    decisions: Sequence[Mapping[str, Any]],
    *,
    device_name: str,
    target: str | None,
    provenance: Mapping[str, Any],
) -> list[dict[str, Any]]:
    """``records`` with each decision (``{"kernel", "key", "config", "record"?}``) merged into its kernel's
    table for this GPU model. A decision for a kernel with no record is an error (nothing to attach it to)."""
    per: dict[tuple[str, int], dict[str, int]] = {}
    for d in decisions:
        per.setdefault((str(d["kernel"]), int(d.get("record", 0))), {})[key_text(d["key"])] = int(d["config"])
    out = [dict(r) for r in records]
    device = device_label(device_name, target)
    for (kernel, which), entries in sorted(per.items()):
        mine = [i for i, r in enumerate(out) if r.get("kernel") == kernel]
        if which >= len(mine):
            raise SchemaError(
                f"{kernel}: tuning decisions for autotune record {which}, but the archive has "
                f"{len(mine)} for this kernel",
                where="autotune",
            )
        i = mine[which]
        out[i] = merge_table(out[i], device, entries, provenance)
    return out


def provenance(*, source: Mapping[str, Any], driver: int | None, bench: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"by": "karchive tune", "karchive": __version__, "from": dict(source), "bench": dict(bench)}
    if driver is not None:
        out["driver"] = driver
    return out


def _variants(reader: Any) -> list[CompiledVariant]:
    """Every variant of ``reader`` with its members as stored (each read checks size and sha256); all of the
    archive's module sources ride on the first variant (the builder stores each source once, by digest)."""
    model = reader.model
    sources = [reader.read(ref.path).decode("utf-8") for ref in model.sources]
    out = []
    for i, v in enumerate(model.variants):
        files = {"binary": reader.read(v.binary.path), "metadata": reader.read(v.metadata.path)}
        files.update({stage: reader.read(ref.path) for stage, ref in v.ir.items()})
        text = reader.read(v.source).decode("utf-8") if v.source else None
        out.append(CompiledVariant(v, files, text, extra_sources=sources if i == 0 else []))
    return out


def write_tuned_version(
    reader: Any, out: str | os.PathLike, *, version: str, records: list[dict[str, Any]]
) -> dict[str, Any]:
    """Write ``reader``'s archive as ``version`` with ``records`` as its autotune records; returns a summary."""
    model = reader.model
    # written in format 2 whatever the source's format (karchive writes format 2 only)
    builder = ArchiveBuilder(
        model.name,
        version,
        produced_by=dict(model.produced_by),
        autotune=records,
        heuristics=model.heuristics,
        extra=dict(model.extra),
    )
    builder.extend(_variants(reader))
    builder.carry_members(reader)  # e.g. Inductor's cache artifacts, named in the extra fields
    manifest, writer = builder.manifest_and_writer()
    manifest["created"] = model.created  # the variants' build time, not the tuning run's
    stats = writer.write(out, manifest)
    return {
        "archive": os.fspath(out),
        "name": model.name,
        "version": version,
        "variants": len(builder.variants),
        "bytes": stats.archive_bytes,
    }
