"""The tools on top of the format read a 2.0 archive through its header and only the shards they need:
signing's provenance statement, the trust identity check, ``diff -k``, ``rebuild -k``'s selection and
``export-triton-cache -k`` — and they give the same answers for a 1.0 archive and its 2.0 repack.

The 2.0 archive is the 1.0 fixture (tests/data, real Triton output) repacked, so both hold the same
variants byte for byte; a shard read is counted by wrapping the reader's ``read`` (every shard is a
member read through it, spec/FORMAT.md §6.5)."""

from __future__ import annotations

from pathlib import Path

import pytest

from karchive.audit.diff import diff_archives
from karchive.format.reader import ArchiveReader
from karchive.trust.enforce import manifest_identity
from karchive.trust.provenance import build_statement

DATA = Path(__file__).resolve().parent / "data"
V1 = DATA / "v1_0-plain.karc"
SHA = "0" * 64


@pytest.fixture(scope="module")
def v2_bytes() -> bytes:
    from karchive.producer.build.pack import ArchiveBuilder
    from karchive.producer.compile.describe import CompiledVariant

    old = ArchiveReader.from_path(V1)
    builder = ArchiveBuilder(
        old.model.name, old.model.version, produced_by=dict(old.model.produced_by), dictionary="none"
    )
    for v in old.model.variants:
        files = {"binary": old.read(v.binary.path), "metadata": old.read(v.metadata.path)}
        files.update({stage: old.read(ref.path) for stage, ref in v.ir.items()})
        builder.add(CompiledVariant(v, files, old.read(v.source).decode() if v.source else None))
    data, _ = builder.to_bytes()
    return data


def _counted(data: bytes) -> tuple[ArchiveReader, list[str]]:
    """A 2.0 reader and the list of shards it reads (appended as they are read)."""
    reader = ArchiveReader.from_bytes(data)
    assert reader.sharded
    shards: list[str] = []
    read = reader.read

    def counting(name: str) -> bytes:
        if name.startswith("karchive/shards/"):
            shards.append(name)
        return read(name)

    reader.read = counting  # type: ignore[method-assign]
    return reader, shards


def test_the_provenance_statement_needs_only_the_header(v2_bytes):
    reader, shards = _counted(v2_bytes)
    statement = build_statement(reader.model, SHA, index_sha256=SHA)
    assert shards == []
    external = statement["predicate"]["buildDefinition"]["externalParameters"]
    assert external["kernels"] == ["add_kernel", "scale_kernel", "softmax_kernel"]
    assert external["targets"] == ["cuda:80", "cuda:90", "hip:gfx942"]
    # The same statement as from the whole manifest, and as from the 1.0 original (but its format).
    whole = build_statement(reader.manifest, SHA, index_sha256=SHA)
    assert whole == statement
    v1 = build_statement(ArchiveReader.from_path(V1).model, SHA, index_sha256=SHA)
    internal = statement["predicate"]["buildDefinition"]["internalParameters"]
    assert internal["variants"] == 4 and internal["format_version"] == "2.1"
    assert v1["predicate"]["buildDefinition"]["internalParameters"] == {**internal, "format_version": "1.0"}
    assert v1["predicate"]["buildDefinition"]["externalParameters"] == external


def test_the_trust_identity_reads_no_shard(v2_bytes):
    reader, shards = _counted(v2_bytes)
    assert manifest_identity(reader, "x.karc") == (reader.model.name, reader.model.version)
    assert shards == []


def test_a_1_0_archive_and_its_2_0_repack_differ_only_in_format(v2_bytes):
    d = diff_archives(ArchiveReader.from_path(V1), ArchiveReader.from_bytes(v2_bytes))
    assert [(c.field, c.a, c.b) for c in d.archive_changes] == [("format_version", "1.0", "2.1")]
    assert len(d.variants) == 4 and d.count("unchanged") == 4 and d.members_checked


def test_diff_of_one_kernel_reads_its_shard_only(v2_bytes):
    a, shards_a = _counted(v2_bytes)
    b, shards_b = _counted(v2_bytes)
    d = diff_archives(a, b, kernels=["scale_kernel"])
    assert d.identical and [v.kernel for v in d.variants] == ["scale_kernel"]
    assert len(set(shards_a)) == 1 and set(shards_a) == set(shards_b)
    # Nothing selected on either side: the error names what the archives hold (all shards read for it).
    from karchive.errors import KarchiveError

    with pytest.raises(KarchiveError, match="add_kernel"):
        diff_archives(*_counted(v2_bytes)[:1], _counted(v2_bytes)[0], kernels=["nosuch"])


def test_manifest_of_selects_kernels_in_manifest_order(v2_bytes):
    reader, shards = _counted(v2_bytes)
    part = reader.manifest_of(["softmax_kernel", "add_kernel"])
    assert [v["kernel"] for v in part["variants"]] == ["add_kernel", "add_kernel", "softmax_kernel"]
    # The shards of those two kernels only (format 2.1: their per-target shards, karchive/shards/<n>/<m>.json).
    assert len({name.rsplit("/", 1)[0] for name in shards}) == 2 and "shards" not in part
    whole = reader.manifest
    assert part["variants"] == [v for v in whole["variants"] if v["kernel"] != "scale_kernel"]
    assert {k: v for k, v in part.items() if k != "variants"} == {k: v for k, v in whole.items() if k != "variants"}
    v1 = ArchiveReader.from_path(V1)
    assert v1.manifest_of(["scale_kernel"])["variants"] == [
        v for v in whole["variants"] if v["kernel"] == "scale_kernel"
    ]
    assert reader.manifest_of(None) == whole and reader.manifest_of(["nosuch"])["variants"] == []
