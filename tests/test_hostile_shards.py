"""Format 2's own structures against hostile archives: the manifest header's shard table, the shards
(compact rows, parts, member places), and frames that belong to a shard.

Each case breaks one rule in an archive whose every other digest matches (``put_together`` re-digests
what a test did not mean to break), and asserts the specific karchive error. The container rules both
formats share (frames, tar headers, bombs, names, truncation) are in test_hostile_archives.py; this
file also runs the same fuzz oracle over format 2 archives. No Triton needed.
"""

from __future__ import annotations

import copy
import random

import pytest
from format1_writer import Format1Writer
from hostile_factory import V2Parts, honest_v2, put_together, split, take_apart, zstd_frame

from karchive.errors import (
    FormatError,
    IntegrityError,
    KarchiveError,
    LimitExceededError,
    SchemaError,
    UnsafeMemberError,
)
from karchive.format.constants import MANIFEST_NAME
from karchive.format.manifest import Manifest
from karchive.format.reader import ArchiveReader, Limits
from karchive.format.source import BytesSource
from karchive.format.writer import ArchiveWriter, canonical_json


@pytest.fixture(scope="module")
def v2():
    return honest_v2()


@pytest.fixture(scope="module")
def v2_dict():
    return honest_v2({"alpha": 8, "beta": 9, "gamma": 7}, dictionary="always")


def parts_of(v2) -> V2Parts:
    return take_apart(v2[0])


def shard_path(parts: V2Parts, kernel: str) -> str:
    return next(row["path"] for row in parts.header["shards"] if row["kernel"] == kernel)


def open_bytes(data: bytes, **kw) -> ArchiveReader:
    return ArchiveReader.from_bytes(data, "<forged>", **kw)


def load(data: bytes, kernel: str = "alpha", **kw):
    """Open and read one kernel's variants (what a loader does)."""
    return open_bytes(data, **kw).model.variants_of(kernel)


def variant_paths(manifest: dict, kernel: str) -> list[str]:
    out = []
    for v in manifest["variants"]:
        if v["kernel"] == kernel:
            out += [v["files"]["binary"]["path"], v["files"]["metadata"]["path"]]
    return out


# ==================================================================================================
# Honest archives: what format 2 promises
# ==================================================================================================


def test_honest_v2_reads_back_and_verifies(v2, v2_dict):
    for data, files, manifest in (v2, v2_dict):
        reader = open_bytes(data)
        assert (
            reader.format_version == (2, 1) and reader.sharded
        )  # the writer writes 2.1 (footer), the manifest says 2.0
        assert reader.verify() == []
        assert {n: reader.read(n) for n in files} == files
        assert reader.manifest == manifest  # the logical manifest, assembled from header and shards
        assert Manifest.from_json(manifest).to_json() == manifest
        model = open_bytes(data).model
        assert [v.to_json() for v in model.variants] == manifest["variants"]


def test_opening_reads_no_shard_and_a_kernel_reads_only_its_own():
    data, files, manifest = honest_v2({"alpha": 30, "beta": 30}, per_frame=4)
    source = BytesSource(data)
    reader = ArchiveReader(source)
    model = reader.model
    assert len(model) == 60 and model.kernels() == ["alpha", "beta"]
    assert model.targets() == ["cuda:80", "cuda:90", "hip:gfx942"] and model.backends() == {"cuda", "hip"}
    assert reader._registered == set(), "counts, kernels and targets come from the header"
    alpha = model.variants_of("alpha")
    assert reader._registered == {0}
    reader.read(alpha[0].binary.path)
    assert reader._registered == {0}, "a loaded kernel's members need no other shard"
    assert model.variants_of("nope") == []


def test_a_member_of_a_kernel_not_yet_read_is_found_by_name(v2):
    data, files, manifest = v2
    reader = open_bytes(data)
    name = variant_paths(manifest, "beta")[0]
    assert reader.read(name) == files[name]


def test_verify_forgets_each_shard_once_checked(v2):
    reader = open_bytes(v2[0])
    assert reader.verify() == []
    assert reader._registered == set() and all(o < 0 for o in reader._owner)
    assert reader.read(variant_paths(v2[2], "alpha")[0]), "and can read them again afterwards"
    assert reader.verify() == [], "verify after loading a shard checks it without forgetting it"


# ==================================================================================================
# The header's shard table
# ==================================================================================================


def _header_edit(v2, edit) -> bytes:
    parts = parts_of(v2)
    edit(parts.header)
    return put_together(parts)


@pytest.mark.parametrize(
    "edit, exc, match",
    [
        (lambda h: h.pop("shards"), SchemaError, "'shards' must be a list"),
        (lambda h: h.__setitem__("shards", {"alpha": 1}), SchemaError, "'shards' must be a list"),
        (lambda h: h["shards"].append(copy.deepcopy(h["shards"][0])), SchemaError, "two shards"),
        (lambda h: h["shards"][0].__setitem__("kernel", 7), SchemaError, "must be strings"),
        (lambda h: h["shards"][0].__setitem__("variants", -1), SchemaError, "a count"),
        (lambda h: h["shards"][0].__setitem__("variants", True), SchemaError, "a count"),
        (lambda h: h["shards"][0]["targets"].__setitem__("cuda:90", 0), SchemaError, "positive counts"),
        (lambda h: h["shards"][0].__setitem__("variants", h["shards"][0]["variants"] + 1), SchemaError, "add up"),
        (lambda h: h["shards"][0].__setitem__("path", MANIFEST_NAME), FormatError, "not a member"),
        (lambda h: h["shards"][0].__setitem__("path", "karchive/shards/99.json"), FormatError, "not a member"),
        (lambda h: h["shards"][1].__setitem__("path", h["shards"][0]["path"]), SchemaError, "share the shard"),
        (lambda h: h.__setitem__("variants", []), SchemaError, "keeps its variants in shards"),
    ],
)
def test_bad_shard_tables_are_refused_at_open(v2, edit, exc, match):
    data = _header_edit(v2, edit)
    with pytest.raises(exc, match=match):
        open_bytes(data).model  # noqa: B018 - building the model is the point


def test_header_counts_that_disagree_with_the_shard(v2):
    def move(h):  # same total, another split across targets
        t = h["shards"][0]["targets"]
        a, b = sorted(t)[:2]
        t[a] += 1
        t[b] -= 1
        if t[b] == 0:
            t[b] = 1
            t[a] -= 1
            t["cuda:70"] = 1
            h["shards"][0]["variants"] += 1

    data = _header_edit(v2, move)
    reader = open_bytes(data)
    with pytest.raises(SchemaError, match="counts in the manifest header"):
        reader.model.variants_of("alpha")
    assert any("counts in the manifest header" in p for p in open_bytes(data).verify())
    assert load(data, "beta"), "the other kernel is still readable"


def test_shard_digest_in_the_header(v2):
    parts = parts_of(v2)
    path = shard_path(parts, "alpha")
    doc = parts.shards[path]
    tampered = canonical_json({**doc, "variants": {k: v[:1] for k, v in doc["variants"].items()}})
    data = put_together(parts, shard_bytes={path: tampered}, fix_header=False)
    with pytest.raises(IntegrityError, match="size or sha256 differs"):
        load(data, "alpha")
    assert load(data, "beta"), "a tampered shard spoils its own kernel only"
    assert any("differs from the manifest" in p for p in open_bytes(data).verify())


def test_shard_over_the_manifest_limit(v2):
    with pytest.raises(LimitExceededError, match="shard of"):
        open_bytes(v2[0], limits=Limits(max_manifest_bytes=1000)).model  # noqa: B018


def test_too_many_shards_or_variants(v2):
    with pytest.raises(LimitExceededError, match="shards; the limit"):
        open_bytes(v2[0], limits=Limits(max_shards=1))

    def claim_many(h):
        h["shards"][0]["variants"] = 2_000_000
        h["shards"][0]["targets"] = {"cuda:90": 2_000_000}

    with pytest.raises(LimitExceededError, match="variants; the limit"):
        open_bytes(_header_edit(v2, claim_many))


# ==================================================================================================
# Shard documents
# ==================================================================================================


def _shard_edit(v2, kernel: str, edit) -> bytes:
    parts = parts_of(v2)
    edit(parts.shards[shard_path(parts, kernel)])
    return put_together(parts)


def _shard_raw(v2, kernel: str, raw: bytes) -> bytes:
    parts = parts_of(v2)
    return put_together(parts, shard_bytes={shard_path(parts, kernel): raw})


@pytest.mark.parametrize(
    "raw, exc, match",
    [
        (b"not json", FormatError, "not valid JSON"),
        (b'{"kernel":"alpha","parts":{},"variants":{"key":[]}} ', SchemaError, "does not match the counts"),
        (b'{"kernel":"alpha","kernel":"alpha","parts":{},"variants":{"key":[]}}', FormatError, "duplicate JSON key"),
        (
            b'{"kernel":"alpha","parts":{"param":[{"a":1,"a":2}]},"variants":{"key":[]}}',
            FormatError,
            "duplicate JSON key",
        ),
        (b'{"kernel":"a\\"lpha","parts":{},"variants":{"key":[]}}', FormatError, "holds kernel"),
        (
            b'{"kernel":"alpha","parts":{},"variants":{"key":[NaN]}}',
            FormatError,
            "JSON constant (NaN|-?Infinity) is not allowed",
        ),
        (
            b'{"kernel":"alpha","parts":{},"variants":{"key":[-Infinity]}}',
            FormatError,
            "JSON constant (NaN|-?Infinity) is not allowed",
        ),
        (b'{"kernel":"alpha","parts":{},"variants":["NaN:Infinity"]}', FormatError, "expected an object"),
        (b'{"kernel":"alpha","parts":{},"variants":{"key":"unclosed]}}', FormatError, "not valid JSON"),
        (b'{"kernel":"alpha","parts":{},"variants":{}}', FormatError, "no key column"),
        (b'{"kernel":"\xc3\xa9"}', FormatError, "not ASCII"),
        (b"[" * 100 + b"]" * 100, LimitExceededError, "nested deeper"),
        (b"[]", FormatError, "parts and variants"),
        (b'{"kernel":"beta","parts":{},"variants":{"key":[]}}', FormatError, "holds kernel 'beta'"),
    ],
)
def test_malformed_shard_json(v2, raw, exc, match):
    with pytest.raises(exc, match=match):
        load(_shard_raw(v2, "alpha", raw))


def test_shard_value_budget(v2):
    with pytest.raises(LimitExceededError, match="JSON values"):
        load(v2[0], limits=Limits(max_json_values=200))


def _col(d: dict, name: str) -> list:
    return d["variants"][name]


def _abi_field(d: dict, key: str, value) -> None:
    """Set one field of the shard's first ABI (stored as indexes into parts.field)."""
    fields, abi = d["parts"]["field"], d["parts"]["abi"][0]
    fields.append([key, value])
    abi[:] = [j for j in abi if fields[j][0] != key] + [len(fields) - 1]


@pytest.mark.parametrize(
    "edit, exc, match",
    [
        (lambda d: d["parts"].__setitem__("colour", []), FormatError, "unknown or malformed part"),
        (lambda d: d["parts"].__setitem__("abi", {}), FormatError, "unknown or malformed part"),
        (lambda d: _col(d, "abi").__setitem__(0, 99), FormatError, "abi: 99 is not an index into its parts"),
        (lambda d: _col(d, "abi").__setitem__(0, -1), FormatError, "abi: -1 is not an index"),
        (lambda d: _col(d, "abi").__setitem__(0, "0"), FormatError, "abi: '0' is not an index"),
        (lambda d: _col(d, "params").__setitem__(0, [0, 999]), FormatError, "params: 999 is not an index"),
        (lambda d: _col(d, "params").__setitem__(0, 0), FormatError, "expected a list of indexes"),
        (lambda d: _abi_field(d, "params", [0]), FormatError, r"parts.abi\[0\].params"),
        (lambda d: _abi_field(d, "params", 99), FormatError, r"parts.abi\[0\].params"),
        (lambda d: d["parts"]["abi"][0].append(d["parts"]["abi"][0][0]), FormatError, "names a key twice"),
        (lambda d: d["parts"]["abi"][0].append(10_000), FormatError, "indexes into parts.field"),
        (lambda d: d["parts"]["field"].append(["x"]), FormatError, r"parts.field\[\d+\] is not a \[key, value\] pair"),
        (lambda d: d["parts"]["options"].__setitem__(0, {"num_warps": 4}), FormatError, "a list of indexes"),
        (lambda d: _col(d, "files.source").__setitem__(0, "sources/x.py"), FormatError, "source: 'sources/x.py'"),
        (lambda d: d["variants"].__setitem__("kernel", ["alpha"] * len(_col(d, "key"))), FormatError, "kernel column"),
        (lambda d: d["variants"].__setitem__("abi", 5), FormatError, "is not a list of"),
        (lambda d: _col(d, "abi").pop(), FormatError, "is not a list of"),
        (
            lambda d: d["variants"].__setitem__("files.extra", [None] * len(_col(d, "key"))),
            FormatError,
            "unknown file column",
        ),
        (lambda d: _col(d, "files.binary").__setitem__(0, ["x"]), FormatError, "expected \\[path"),
        (lambda d: _col(d, "files.binary")[0].__setitem__(3, -2), FormatError, "must be non-negative integers"),
        (lambda d: _col(d, "files.binary")[0].__setitem__(4, 1.5), FormatError, "must be non-negative integers"),
        (lambda d: _col(d, "files.binary").__setitem__(0, 5), FormatError, "expected \\[path"),
        (lambda d: _col(d, "files.ir").__setitem__(0, [1]), FormatError, "expected a map of located files"),
        (lambda d: _abi_field(d, "version", 99), KarchiveError, "newer than this runtime"),
        (lambda d: d["parts"]["param"][0].__setitem__("name", 1), SchemaError, "expected str"),
        (lambda d: _rekey(d, 0, "nothex"), SchemaError, "hex key"),
        (lambda d: _col(d, "files.binary")[0].__setitem__(2, "abc"), SchemaError, "hex sha256"),
        (lambda d: _col(d, "options").__setitem__(0, None), SchemaError, "missing 'options'"),
    ],
)
def test_malformed_shard_rows(v2, edit, exc, match):
    data = _shard_edit(v2, "alpha", edit)
    with pytest.raises(exc, match=match):
        load(data)
    problems = open_bytes(data).verify()
    assert problems, "verify must report what loading refuses"
    assert load(data, "beta"), "the other kernel is still readable"


def _first_binary(doc: dict) -> list:
    return doc["variants"]["files.binary"][0]


def _absolute(key: str, ref: list) -> list:
    """A located file with its ``./`` path spelled out (it would otherwise follow the variant's key)."""
    return [f"variants/{key}/{ref[0][2:]}" if ref[0].startswith("./") else ref[0], *ref[1:]]


def _rekey(doc: dict, i: int, key: str) -> None:
    cols = doc["variants"]
    old = cols["key"][i]
    for name in ("files.binary", "files.metadata"):
        cols[name][i] = _absolute(old, cols[name][i])
    if cols.get("files.ir") and cols["files.ir"][i]:
        cols["files.ir"][i] = {k: _absolute(old, v) for k, v in cols["files.ir"][i].items()}
    cols["key"][i] = key


def _binary_name(d: dict, i: int) -> str:
    return _absolute(_col(d, "key")[i], _col(d, "files.binary")[i])[0]


def _set(d: dict, i: int, field: int, value) -> set[str]:
    """Change one field of variant ``i``'s located binary; its old name is then listed by no one."""
    old = _binary_name(d, i)
    _col(d, "files.binary")[i] = _absolute(_col(d, "key")[i], _col(d, "files.binary")[i])
    _col(d, "files.binary")[i][field] = value
    return {old}


@pytest.mark.parametrize(
    "edit, exc, match",
    [
        (lambda d: _set(d, 0, 0, "../escape"), UnsafeMemberError, "escape"),
        (lambda d: _set(d, 0, 0, "/abs"), UnsafeMemberError, "abs"),
        (lambda d: _set(d, 0, 3, 10_000), FormatError, "outside its frame"),
        (lambda d: _set(d, 0, 4, 100), FormatError, "outside its frame"),
        (lambda d: _set(d, 0, 4, 0), FormatError, "outside its frame"),
        (lambda d: _set(d, 0, 1, 1 << 40), FormatError, "outside its frame"),
        # Two variants naming the same member.
        (lambda d: _set(d, 1, 0, _binary_name(d, 0)), FormatError, "listed twice"),
        # Two members at the same place: the second's header would be inside the first's data.
        (lambda d: _col(d, "files.metadata")[0].__setitem__(4, _first_binary(d)[4]) or set(), FormatError, "overlap"),
    ],
)
def test_member_places_in_a_shard(v2, edit, exc, match):
    parts = parts_of(v2)
    unlisted = edit(parts.shards[shard_path(parts, "alpha")])
    data = put_together(parts, unlisted=unlisted)
    with pytest.raises(exc, match=match):
        reader = open_bytes(data)
        for v in reader.model.variants_of("alpha"):  # a member's place is checked when its frame is first read
            reader.read(v.binary.path)
            reader.read(v.metadata.path)
    assert open_bytes(data).verify()


def test_a_shard_must_not_claim_a_frame_of_the_index(v2):
    """The module source lies in a frame the index lists: a shard placing a member there is refused."""
    parts = parts_of(v2)
    source_frame = next(i for i, (entries, _) in enumerate(parts.content) if entries[0][0].startswith("sources/"))
    size = len(parts.content[source_frame][0][0][1])
    _first_binary(parts.shards[shard_path(parts, "alpha")])[1:] = [size, "0" * 64, source_frame, 512]
    data = put_together(parts)
    with pytest.raises(FormatError, match="holds members listed elsewhere"):
        load(data)


def test_two_shards_claiming_one_frame(v2):
    parts = parts_of(v2)
    a = parts.shards[shard_path(parts, "alpha")]
    b = parts.shards[shard_path(parts, "beta")]
    _first_binary(b)[3] = _first_binary(a)[3]
    data = put_together(parts)
    reader = open_bytes(data)
    reader.model.variants_of("alpha")
    with pytest.raises(FormatError, match="holds members listed elsewhere"):
        reader.model.variants_of("beta")
    assert any("listed elsewhere" in p for p in open_bytes(data).verify())


def test_a_shard_listing_only_part_of_a_frame(v2):
    """A frame holds two variants' launch members; a shard that drops one of them leaves tar entries
    in the frame that nothing lists: refused when the frame is read."""
    parts = parts_of(v2)
    doc = parts.shards[shard_path(parts, "alpha")]
    cols = doc["variants"]
    frame_of = [b[3] for b in cols["files.binary"]]
    keep = next(i for i, f in enumerate(frame_of) if frame_of.count(f) > 1)
    drop = next(i for i, f in enumerate(frame_of) if f == frame_of[keep] and i != keep)
    key = cols["key"][drop]
    gone = {_absolute(key, cols[c][drop])[0] for c in ("files.binary", "files.metadata")} | {
        _absolute(key, ref)[0] for ref in (cols.get("files.ir") or [{}] * len(frame_of))[drop].values()
    }
    label = "{backend}:{arch}".format(**doc["parts"]["target"][cols["target"][drop]])
    for col in cols.values():
        col.pop(drop)
    row = next(r for r in parts.header["shards"] if r["kernel"] == "alpha")
    row["variants"] -= 1
    row["targets"][label] -= 1
    if not row["targets"][label]:
        del row["targets"][label]
    reader = open_bytes(put_together(parts, unlisted=gone))
    kept_key = cols["key"][keep if keep < drop else keep - 1]
    kept = next(v for v in reader.model.variants_of("alpha") if v.key == kept_key)
    with pytest.raises(FormatError, match="not listed by its shard"):
        reader.read(kept.binary.path)


def test_the_same_member_name_in_two_shards(v2):
    parts = parts_of(v2)
    a = parts.shards[shard_path(parts, "alpha")]
    b = parts.shards[shard_path(parts, "beta")]
    # beta's first binary renamed to alpha's, in the tar header too (same bytes, another frame).
    old = _absolute(b["variants"]["key"][0], _first_binary(b))[0]
    new = _absolute(a["variants"]["key"][0], _first_binary(a))[0]
    for entries, _ in parts.content:
        for i, (name, data) in enumerate(entries):
            if name == old:
                entries[i] = (new, data)
    _first_binary(b)[0] = new
    data = put_together(parts)
    reader = open_bytes(data)
    reader.model.variants_of("alpha")
    with pytest.raises(FormatError, match="duplicate member|listed twice"):
        reader.model.variants_of("beta")
    assert any("appears twice" in p or "listed twice" in p for p in open_bytes(data).verify())


def test_a_frame_no_one_lists(v2):
    parts = parts_of(v2)
    parts.content.append(([("orphan/x.bin", b"hidden")], False))
    data = put_together(parts, unlisted={"orphan/x.bin"})
    assert load(data), "nothing refers to it, so loading never sees it"
    assert any("holds no member" in p for p in open_bytes(data).verify())


def test_format_2_footer_over_a_format_1_manifest(v2):
    """A 1.0 writer's archive relabelled 2.0: its manifest has variants and no shard table."""
    data, files, manifest = v2
    w = Format1Writer(level=3, dictionary="none")
    for name, blob in files.items():
        w.add_group([(name, blob)])
    v1 = w.to_bytes({**manifest, "format_version": "2.0"})
    body, index, _ = split(v1)
    from hostile_factory import assemble

    with pytest.raises(SchemaError, match="'shards' must be a list"):
        open_bytes(assemble(body, index, major=2, minor=0))


def test_a_newer_minor_is_read(v2):
    parts = parts_of(v2)
    parts.footer_version = (2, 9)
    parts.header["format_version"] = "2.9"
    parts.header["future_field"] = {"x": 1}
    reader = open_bytes(put_together(parts))
    assert reader.verify() == []
    assert reader.model.extra == {"future_field": {"x": 1}}


# ==================================================================================================
# The writer refuses what format 2 cannot say
# ==================================================================================================


def test_writer_refuses_frames_mixing_kernels(v2):
    data, files, manifest = v2
    w = ArchiveWriter(level=1, dictionary="none")
    a, b = variant_paths(manifest, "alpha")[0], variant_paths(manifest, "beta")[0]
    w.add_group([(a, files[a]), (b, files[b])])
    for name, blob in files.items():
        if name not in (a, b):
            w.add_group([(name, blob)])
    with pytest.raises(FormatError, match="several kernels"):
        w.to_bytes(manifest)


def test_writer_refuses_manifests_it_cannot_shard(v2):
    data, files, manifest = v2
    w = ArchiveWriter(level=1, dictionary="none")
    for name, blob in files.items():
        w.add_group([(name, blob)])
    with pytest.raises(SchemaError, match="kernel name"):
        w.to_bytes({**manifest, "variants": [{**manifest["variants"][0], "kernel": 3}]})
    with pytest.raises(SchemaError, match="list of variants"):
        w.to_bytes({**manifest, "variants": {}})
    missing = copy.deepcopy(manifest)
    missing["variants"][0]["files"]["binary"]["path"] = "variants/none/kernel.cubin"
    with pytest.raises(FormatError, match="was not given"):
        w.to_bytes(missing)


# ==================================================================================================
# Fuzz: only karchive errors, never wrong bytes
# ==================================================================================================


def _outcome(data: bytes, files: dict[str, bytes], check_verify: bool) -> str:
    try:
        reader = open_bytes(data)
        kernels = reader.model.kernels()
    except KarchiveError as exc:
        assert str(exc)
        return type(exc).__name__
    worst = "ok"
    for kernel in kernels:
        try:
            reader.model.variants_of(kernel)
        except KarchiveError as exc:
            worst = type(exc).__name__
    for name, original in files.items():
        try:
            got = reader.read(name)
        except KarchiveError as exc:
            assert str(exc)
            worst = type(exc).__name__
            continue
        assert got == original, f"{name}: the reader returned bytes that differ from the original"
    if check_verify:
        problems = open_bytes(data).verify()
        if worst != "ok":
            assert problems, "a member failed to read but verify() found nothing"
    return worst


def _mutate_json(node, rng: random.Random) -> None:
    values = [None, -1, 0, 1, 2**40, "x", "../x", [], {}, [0, 0, 0, 0, 0], True]
    for _ in range(rng.randint(1, 3)):
        target = node
        path = []
        while isinstance(target, (dict, list)) and target and rng.random() < 0.8:
            key = rng.choice(list(target)) if isinstance(target, dict) else rng.randrange(len(target))
            path.append((target, key))
            target = target[key]
        if path:
            parent, key = path[-1]
            parent[key] = copy.deepcopy(rng.choice(values))


def test_fuzz_format_2(v2, v2_dict, tmp_path):
    rng = random.Random(20261123)
    seen: dict[str, int] = {}
    cases = 0
    for base, files, _manifest in (v2, v2_dict):
        parts = take_apart(base)
        for _ in range(600):
            kind = rng.random()
            if kind < 0.4:  # raw bytes
                data = bytearray(base)
                for _ in range(rng.randint(1, 4)):
                    data[rng.randrange(len(data))] = rng.randrange(256)
                data = bytes(data)
            elif kind < 0.8:  # a shard's JSON, every digest fixed up: only structural checks can refuse it
                p = copy.deepcopy(parts)
                path = rng.choice(sorted(p.shards))
                _mutate_json(p.shards[path], rng)
                data = put_together(p)
            else:  # the header, re-digested in the index
                p = copy.deepcopy(parts)
                _mutate_json(p.header, rng)
                data = put_together(p, fix_header=False)
            try:
                result = _outcome(data, files, check_verify=rng.random() < 0.5)
            except AssertionError:
                raise
            except Exception as exc:  # the point of the test: nothing else may escape
                pytest.fail(f"{type(exc).__name__} escaped the reader: {exc!r}")
            seen[result] = seen.get(result, 0) + 1
            cases += 1
    assert cases == 1200
    for kind in ("FormatError", "IntegrityError", "SchemaError"):
        assert seen.get(kind, 0) > 0, seen
    assert seen.get("ok", 0) < cases // 3, seen


def test_frames_of_shards_are_bounded_before_decoding(v2):
    """A shard frame claiming a huge decompressed size is refused by the frame limit, not decoded."""
    parts = parts_of(v2)
    path = shard_path(parts, "alpha")

    def lie(index):
        for m in index["members"]:
            if m[0] == path:
                index["frames"][m[1]][2] = 600 * 1024 * 1024

    with pytest.raises(LimitExceededError):
        open_bytes(put_together(parts, edit_index=lie))
    assert zstd_frame  # the factory's frames are real zstd frames (used above through put_together)
