"""Format 2.1: a kernel's shard split by target (issue 24 A). A loader for one device reads its target's
shard only; the whole shard stays for 2.0 readers, and a full verification checks that both agree."""

import json
import shutil
import subprocess
import sys
import textwrap

import pytest
from hostile_factory import SOURCE_TEXT, v2_variant

from karchive.core.digest import sha256_hex
from karchive.errors import FormatError, SchemaError
from karchive.format import writer as writer_mod
from karchive.format.manifest import FileRef
from karchive.format.reader import ArchiveReader
from karchive.format.writer import ArchiveWriter

TARGETS = ("cuda:80", "cuda:90", "hip:gfx942")


def _archive(kernels=None, *, per_target_frames: bool = True) -> tuple[bytes, dict]:
    """An archive through the real writer; frames per kernel and target (karchive's layout), or, with
    ``per_target_frames=False``, one launch frame per kernel mixing its targets."""
    kernels = kernels or {"alpha": 6, "beta": 7}
    source = FileRef.for_bytes(f"sources/{sha256_hex(SOURCE_TEXT)}.py", SOURCE_TEXT)
    w = ArchiveWriter(level=3, dictionary="none")
    entries = []
    for kernel, n in sorted(kernels.items()):
        groups: dict[str, list] = {}
        for i in range(n):
            target = TARGETS[i % len(TARGETS)]
            entry, launch, irm = v2_variant(kernel, i, target=target, source=source.path)
            entries.append(entry)
            groups.setdefault(target if per_target_frames else "all", []).append((launch, irm))
        for units in groups.values():
            w.add_group([m for launch, _ in units for m in launch])
            w.add_group([m for _, irm in units for m in irm], use_dict=False)
    w.add_group([(source.path, SOURCE_TEXT)])
    manifest = {
        "format": "karchive",
        "format_version": "2.1",
        "abi_version": 1,
        "name": "split",
        "version": "1",
        "produced_by": {"karchive": "test"},
        "created": None,
        "path_sentinel": "@KARCHIVE_ROOT@",
        "sources": [source.to_json()],
        "variants": sorted(entries, key=lambda e: (e["kernel"], e["key"])),
    }
    return w.to_bytes(manifest), manifest


def _as_2_0_reader(monkeypatch) -> None:
    """This reader without 2.1's per-target shards: what a 2.0 reader reads (the ``split`` field of the
    header is an optional field it does not know)."""
    monkeypatch.setattr(ArchiveReader, "_split_of", lambda self, split, whole, paths, where: [whole])


def test_the_writer_splits_each_kernel_by_target_and_a_loader_reads_one_part():
    data, manifest = _archive()
    reader = ArchiveReader.from_bytes(data)
    assert reader.format_version == (2, 1)
    rows = reader.header["shards"]
    assert [[p["target"] for p in row["split"]] for row in rows] == [list(TARGETS)] * 2
    assert all(sum(p["variants"] for p in row["split"]) == row["variants"] for row in rows)
    one = reader.model.variants_of("beta", "cuda:90")
    assert {str(v.target) for v in one} == {"cuda:90"} and len(one) == 2
    assert len(reader._registered) == 1, "only the cuda:90 shard of beta was read"
    assert reader.read(one[0].binary.path)  # its members are placed by that shard
    assert reader.model.variants_of("beta", "cuda:1") == [] and len(reader._registered) == 1
    # The whole manifest, assembled from the parts, is the one written (manifest order: kernel, key).
    assert reader.manifest["variants"] == manifest["variants"]
    assert reader.verify() == []


def test_a_2_0_reader_reads_a_2_1_archive_through_the_whole_shards(monkeypatch):
    data, manifest = _archive()
    split = ArchiveReader.from_bytes(data)
    expected = [v.to_json() for v in split.model.variants]
    _as_2_0_reader(monkeypatch)
    old = ArchiveReader.from_bytes(data)
    assert all(s.target is None for s in old._shards)
    assert [v.to_json() for v in old.model.variants] == expected
    assert old.manifest["variants"] == manifest["variants"] and old.verify() == []


#: main when this branch began: karchive's 2.0 reader, before per-target shards existed.
READER_2_0 = "8105c3b"


def test_karchive_s_own_2_0_reader_reads_a_2_1_archive(tmp_path):
    """The 2.0 reader itself (taken from this repository's history, run as itself in a child process)
    reads a 2.1 archive: the same variants, members readable, verify() clean. Skipped without the history."""
    from registry_servers import ROOT, subprocess_env

    if (
        shutil.which("git") is None
        or subprocess.run(
            ["git", "cat-file", "-e", f"{READER_2_0}^{{commit}}"], cwd=ROOT, capture_output=True
        ).returncode
        != 0
    ):
        pytest.skip(f"needs git and commit {READER_2_0} to take the 2.0 reader from history")
    old = tmp_path / "old"
    old.mkdir()
    tar = subprocess.run(
        ["git", "archive", "--format=tar", READER_2_0, "karchive"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(old)], input=tar, check=True)
    data, manifest = _archive()
    (tmp_path / "a.karc").write_bytes(data)
    code = textwrap.dedent(f"""
        import json
        from karchive.format.constants import FORMAT_VERSION
        from karchive.format.reader import ArchiveReader
        r = ArchiveReader.from_path({str(tmp_path / "a.karc")!r})
        vs = r.model.variants_of("beta")
        print(json.dumps({{"writes": list(FORMAT_VERSION), "footer": list(r.format_version),
                          "variants": [v.to_json() for v in r.model.variants], "verify": r.verify(),
                          "binary": r.read(vs[0].binary.path).hex()}}))
    """)
    env = {**subprocess_env(), "PYTHONPATH": str(old)}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["writes"] == [2, 0] and out["footer"] == [2, 1] and out["verify"] == []
    new = ArchiveReader.from_bytes(data)
    assert out["variants"] == [v.to_json() for v in new.model.variants]
    assert bytes.fromhex(out["binary"]) == new.read(new.model.variants_of("beta")[0].binary.path)


def test_kernels_whose_frames_mix_targets_keep_one_shard():
    data, manifest = _archive(per_target_frames=False)
    reader = ArchiveReader.from_bytes(data)
    assert all("split" not in row for row in reader.header["shards"])
    assert [v.key for v in reader.model.variants_of("alpha", "hip:gfx942")] == [
        e["key"] for e in manifest["variants"] if e["kernel"] == "alpha" and e["target"]["backend"] == "hip"
    ]
    assert reader.verify() == []


def _edited_header(monkeypatch, edit) -> bytes:
    """An archive whose header's shard table ``edit`` changed (digests of the header follow: the
    writer computes them after the edit)."""
    real = writer_mod.canonical_json

    def canonical(obj):
        if isinstance(obj, dict) and "shards" in obj and "variants" not in obj:
            edit(obj["shards"])
        return real(obj)

    monkeypatch.setattr(writer_mod, "canonical_json", canonical)
    data, _ = _archive()
    monkeypatch.setattr(writer_mod, "canonical_json", real)
    return data


@pytest.mark.parametrize(
    "edit, error, words",
    [
        (lambda rows: rows[0]["split"].pop(), SchemaError, "one entry per target"),
        (lambda rows: rows[0]["split"][0].update(target="cuda:70"), SchemaError, "not one of the kernel's"),
        (lambda rows: rows[0]["split"][1].update(target=rows[0]["split"][0]["target"]), SchemaError, "comes twice"),
        (lambda rows: rows[0]["split"][0].update(variants=1), SchemaError, "counts 1 variants"),
        (lambda rows: rows[0]["split"][0].update(path="karchive/shards/9/9.json"), FormatError, "not a member"),
        (lambda rows: rows[0]["split"][0].update(path=rows[0]["path"]), SchemaError, "twice"),
        (lambda rows: rows[1]["split"][0].update(path=rows[0]["split"][0]["path"]), SchemaError, "twice"),
        (lambda rows: rows[0].update(split={"cuda:80": 1}), SchemaError, "one entry per target"),
    ],
)
def test_a_malformed_split_is_refused_when_the_archive_is_opened(monkeypatch, edit, error, words):
    data = _edited_header(monkeypatch, edit)
    with pytest.raises(error, match=words):
        ArchiveReader.from_bytes(data)


def test_parts_swapped_between_targets_are_refused_when_read(monkeypatch):
    def swap(rows):
        a, b = rows[0]["split"][0], rows[0]["split"][1]
        a["path"], b["path"], a["size"], b["size"], a["sha256"], b["sha256"] = (
            b["path"],
            a["path"],
            b["size"],
            a["size"],
            b["sha256"],
            a["sha256"],
        )

    reader = ArchiveReader.from_bytes(_edited_header(monkeypatch, swap))
    with pytest.raises(SchemaError, match="counts"):
        reader.model.variants_of("alpha", "cuda:80")


def test_a_part_that_says_other_than_the_whole_shard_fails_verification(monkeypatch):
    """Both are digest-checked, so each is what its writer meant; but a 2.0 reader (whole shard) and this
    one (parts) must not see different variants: verify() compares them."""
    real = writer_mod.encode_shard

    def encode(kernel, variants, locate):
        if kernel == "alpha" and len(variants) < 6:  # a part, not the whole: other options, same counts
            variants = [{**v, "options": {**v["options"], "num_stages": 99}} for v in variants]
        return real(kernel, variants, locate)

    monkeypatch.setattr(writer_mod, "encode_shard", encode)
    data, _ = _archive()
    monkeypatch.setattr(writer_mod, "encode_shard", real)
    reader = ArchiveReader.from_bytes(data)
    assert {v.options.get("num_stages") for v in reader.model.variants_of("alpha", "cuda:80")} == {99}
    problems = ArchiveReader.from_bytes(data).verify()
    assert any("whole shard" in p and "differ" in p for p in problems), problems


def test_same_inputs_same_bytes():
    assert _archive()[0] == _archive()[0]
