"""The reader against hostile and broken archives (issue 2, "Hostile and broken archives").

Every case asserts the specific karchive error and what its message says. Archives are forged by
``hostile_factory``: each case breaks one rule while every digest not under test still matches, so
the reader cannot pass a test by refusing for the wrong reason. No Triton needed.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
import textwrap

import pytest
import zstandard
from hostile_factory import (
    Entry,
    assemble,
    compress_index,
    dictionary_groups,
    forge,
    honest_archive,
    plain_tar_zst,
    raw_tar_header,
    reindex,
    rle_frame,
    split,
    tar_bytes,
    with_dictionary,
    zip_bytes,
    zstd_frame,
)

from karchive.errors import (
    FormatError,
    IntegrityError,
    KarchiveError,
    LimitExceededError,
    NotAnArchiveError,
    SchemaError,
    UnsafeMemberError,
    UnsupportedVersionError,
)
from karchive.format.constants import (
    DICTIONARY_NAME,
    FOOTER_PAYLOAD,
    FOOTER_SIZE,
    FORMAT_VERSION,
    MANIFEST_NAME,
)
from karchive.format.extract import extract_all
from karchive.format.open import open_location as open_reader
from karchive.format.reader import ArchiveReader, Limits
from karchive.format.source import FileSource
from karchive.format.writer import canonical_json, sha256_hex

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GiB = 1 << 30


@pytest.fixture(scope="module")
def small():
    return honest_archive()


@pytest.fixture(scope="module")
def with_dict():
    return honest_archive(dictionary_groups(), dictionary="always")


def open_bytes(data: bytes, **kw) -> ArchiveReader:
    return ArchiveReader.from_bytes(data, "<forged>", **kw)


def read_everything(data: bytes, names, **kw) -> dict[str, bytes]:
    reader = open_bytes(data, **kw)
    return {n: reader.read(n) for n in names}


def refused(exc_type, data: bytes, match: str | None = None, *, read=(), **kw) -> Exception:
    """Open ``data`` (and read ``read``) expecting exactly ``exc_type`` (or a subclass) with ``match``."""
    with pytest.raises(exc_type, match=match) as info:
        reader = open_bytes(data, **kw)
        for name in read:
            reader.read(name)
    return info.value


def outcome(data: bytes, files: dict[str, bytes], *, check_verify: bool = True) -> str:
    """The fuzz oracle: open, read every file, verify. Only karchive errors may escape, and every
    read that succeeds must give back exactly the original bytes. Returns 'ok' or the error class."""
    try:
        reader = open_bytes(data)
    except KarchiveError as exc:
        assert str(exc), "errors must say something"
        return type(exc).__name__
    worst = "ok"
    for name, original in files.items():
        try:
            got = reader.read(name)
        except KarchiveError as exc:
            assert str(exc)
            worst = type(exc).__name__
            continue
        assert got == original, f"{name}: the reader returned bytes that differ from the original"
    if check_verify:
        problems = reader.verify()
        assert isinstance(problems, list)
        if worst != "ok":
            assert problems, "a member failed to read but verify() found nothing"
    return worst


# ==================================================================================================
# Sanity: the forger makes archives the reader accepts, so refusals below are about the one broken rule
# ==================================================================================================


def test_honest_and_forged_archives_read_back(small, with_dict):
    for data, files in (small, with_dict):
        reader = open_bytes(data)
        assert reader.verify() == []
        assert {n: reader.read(n) for n in files} == files
    forged = forge([Entry("a/b.bin", b"x" * 700), Entry("c", b"")], [Entry("d", b"hi")])
    assert read_everything(forged.data, forged.files) == forged.files
    assert open_bytes(forged.data).verify() == []
    # Hand-written RLE frames are valid zstd (used by the bomb tests).
    frame = rle_frame(300_000, byte=7, declared=300_000)
    assert zstandard.ZstdDecompressor().decompress(frame) == b"\x07" * 300_000
    # The manifest and the dictionary read back through read() too, verified by the index digests.
    reader = open_bytes(with_dict[0])
    assert reader.read(MANIFEST_NAME) == reader.manifest_bytes
    assert hashlib.sha256(reader.read(DICTIONARY_NAME)).hexdigest() == split(with_dict[0])[1]["dictionary_sha256"]


# ==================================================================================================
# Not archives at all
# ==================================================================================================

NOT_ARCHIVES = {
    "empty": b"",
    "one byte": b"\x00",
    "71 zero bytes": bytes(71),
    "72 zero bytes": bytes(72),
    "random 4 KiB": random.Random(1).randbytes(4096),
    "json": json.dumps({"format_version": "1.0", "files": []}).encode() * 8,
    "plain tar.zst": plain_tar_zst({"karchive/manifest.json": b"{}", "a.cubin": b"\x7fELF" * 100}),
    "zip": zip_bytes({"karchive/manifest.json": b"{}", "a.cubin": b"\x7fELF" * 100}),
    "bare zstd frame": zstd_frame(b"hello" * 100),
    "text": b"#!/bin/sh\necho not an archive\n" * 4,
}


@pytest.mark.parametrize("label", sorted(NOT_ARCHIVES))
def test_non_archives_are_not_archives(label):
    data = NOT_ARCHIVES[label]
    exc = refused(NotAnArchiveError, data)
    assert "not a .karc archive" in str(exc) or "too small" in str(exc)
    assert "<forged>" in str(exc), "the message names the file"


def test_footer_alone_points_outside_the_file():
    from hostile_factory import footer

    data = footer(0, 0, bytes(32))
    refused(FormatError, data, "footer points outside the file")
    refused(FormatError, footer(0, 8, bytes(32)), "footer points outside the file")


def test_files_that_are_not_regular_files(tmp_path):
    refused_dir = tmp_path / "dir.karc"
    refused_dir.mkdir()
    with pytest.raises(NotAnArchiveError, match="is a directory, not an archive"):
        open_reader(refused_dir)
    fifo = tmp_path / "pipe.karc"
    os.mkfifo(fifo)
    with pytest.raises(NotAnArchiveError, match="not a regular file"):  # and does not hang
        open_reader(fifo)
    empty = tmp_path / "empty.karc"
    empty.write_bytes(b"")
    with pytest.raises(NotAnArchiveError, match="too small"):
        open_reader(empty)


# ==================================================================================================
# Truncation
# ==================================================================================================


def test_truncation_at_every_offset(small):
    data, _ = small
    for n in range(len(data)):
        with pytest.raises(NotAnArchiveError) as info:
            open_bytes(data[:n])
        assert "truncated" in str(info.value) or "too small" in str(info.value), n


def test_truncation_at_dense_offsets_with_dictionary(with_dict):
    data, _ = with_dict
    for n in list(range(0, len(data), 97)) + list(range(len(data) - 300, len(data))):
        with pytest.raises(NotAnArchiveError):
            open_bytes(data[:n])


def test_truncated_body_with_the_footer_put_back(small):
    """Bytes lost in the middle (footer intact): the footer no longer points at the index."""
    data, _ = small
    body_end = len(data) - FOOTER_SIZE
    tail = data[body_end:]
    for n in range(0, body_end, 7):
        exc = refused(FormatError, data[:n] + tail)
        assert "footer points outside the file" in str(exc), n
    # And bytes cut out of the middle of the frames or of the index.
    for start in range(0, body_end - 16, 41):
        cut = data[:start] + data[start + 16 :]
        exc = refused(FormatError, cut)
        assert not isinstance(exc, NotAnArchiveError)


def test_truncated_frame_with_a_consistent_index(small):
    """Frame 1 loses its last bytes and the index is rewritten to match: zstd decoding fails."""
    data, files = small
    body, index, _ = split(data)
    frames = index["frames"]
    off, length, usize, flag = frames[1]
    for cut in (1, 4, 5, 9, length // 2, length - 5):
        blob = body[off : off + length - cut]
        new_body = body[:off] + blob + body[off + length :]
        new_index = json.loads(json.dumps(index))
        new_index["frames"][1][1] = length - cut
        for f in new_index["frames"][2:]:
            f[0] -= cut
        forged = assemble(new_body, new_index)
        reader = open_bytes(forged)
        victims = [m[0] for m in index["members"] if m[1] == 1]
        for name in victims:
            with pytest.raises(FormatError, match="frame 1"):
                reader.read(name)
        for name in set(files) - set(victims):
            assert reader.read(name) == files[name]


def test_file_shrinking_after_open(small, tmp_path):
    data, files = small
    path = tmp_path / "a.karc"
    path.write_bytes(data)
    source = FileSource(path)
    reader = ArchiveReader(source)
    with open(path, "r+b") as fh:
        fh.truncate(100)
    with pytest.raises(FormatError, match="short read|changed while it was read"):
        for name in files:
            reader._cache.clear()
            reader.read(name)
    source.close()


# ==================================================================================================
# Flipped bytes
# ==================================================================================================


def _undetectable_positions(data: bytes) -> set[int]:
    """Footer bytes no digest covers: the flags word and the minor version (newer minors are accepted)."""
    start = len(data) - FOOTER_PAYLOAD.size
    minor = range(start + 10, start + 12)
    flags = range(start + 12, start + 16)
    return set(minor) | set(flags)


def _assert_quiet_flips_are_harmless(data: bytes, flips: dict[int, bytes]) -> None:
    """A flip the reader accepted must be in a footer field no digest covers, or inside a zstd frame
    that still decodes to exactly the original content (zstd's entropy coding has some slack: unused
    bits, equivalent encodings), so nothing anyone could read from the archive changed."""
    body, index, _ = split(data)
    dctx = zstandard.ZstdDecompressor()
    if index["dictionary"]:
        dict_bytes = open_bytes(data).read(DICTIONARY_NAME)
        ddctx = zstandard.ZstdDecompressor(dict_data=zstandard.ZstdCompressionDict(dict_bytes))
    for pos, forged in flips.items():
        if pos in _undetectable_positions(data):
            continue
        frame = next((f for f in index["frames"] if f[0] <= pos < f[0] + f[1]), None)
        assert frame is not None, f"flip at {pos} outside every frame went unnoticed"
        off, length = frame[0], frame[1]
        d = ddctx if frame[3] else dctx
        assert d.decompress(forged[off : off + length]) == d.decompress(data[off : off + length]), pos


@pytest.mark.parametrize("mask", [0x01, 0x80])
def test_flipped_bits_at_every_position(small, mask):
    data, files = small
    quiet = {}
    for pos in range(len(data)):
        forged = bytearray(data)
        forged[pos] ^= mask
        if outcome(bytes(forged), files, check_verify=False) == "ok":
            quiet[pos] = bytes(forged)
    # Wherever a flip was not caught, the bytes read were the original ones (outcome() asserts it),
    # and the flip changed nothing readable.
    _assert_quiet_flips_are_harmless(data, quiet)
    assert len(quiet) < len(data) // 50


def test_flipped_bytes_in_a_dictionary_archive(with_dict):
    data, files = with_dict
    rng = random.Random(5)
    positions = sorted(set(rng.randrange(len(data)) for _ in range(400)) | set(range(len(data) - 200, len(data))))
    quiet = {}
    for pos in positions:
        forged = bytearray(data)
        forged[pos] ^= 1 << rng.randrange(8)
        if outcome(bytes(forged), files, check_verify=False) == "ok":
            quiet[pos] = bytes(forged)
    _assert_quiet_flips_are_harmless(data, quiet)


def test_flip_in_the_index_is_an_integrity_error(small):
    data, _ = small
    index_start = len(data) - FOOTER_SIZE - 1
    forged = bytearray(data)
    forged[index_start - 3] ^= 0x10
    refused(IntegrityError, bytes(forged), "index digest does not match the footer")


# ==================================================================================================
# Wrong digests and sizes
# ==================================================================================================


def _files_of(forged_manifest) -> list[dict]:
    return forged_manifest["files"]


def test_wrong_member_digest_in_the_manifest():
    good = b"the real bytes"
    man = {
        "format_version": "1.0",
        "files": [
            {"path": "a", "size": len(good), "sha256": sha256_hex(b"other")},
            {"path": "b", "size": 1, "sha256": sha256_hex(b"b")},
        ],
    }
    forged = forge([Entry("a", good), Entry("b", b"b")], manifest=man)
    reader = open_bytes(forged.data)
    with pytest.raises(IntegrityError, match=r"member 'a': size or sha256 differs from the manifest"):
        reader.read("a")
    assert reader.read("b") == b"b"
    problems = reader.verify()
    assert any("'a'" in p and "sha256" in p for p in problems)


def test_wrong_member_size_in_the_manifest():
    data = b"12345"
    man = {"format_version": "1.0", "files": [{"path": "a", "size": 4, "sha256": sha256_hex(data)}]}
    forged = forge([Entry("a", data)], manifest=man)
    refused(IntegrityError, forged.data, "size or sha256 differs", read=["a"])


def test_index_size_differs_from_the_tar_header():
    # The index says 3 bytes, the tar header says 5: the header check catches it before any digest.
    forged = forge([Entry("a", b"12345")], edit_index=lambda ix: ix["members"][0].__setitem__(3, 3))
    refused(FormatError, forged.data, "tar header of 'a' does not match the index", read=["a"])


def test_manifest_digest_in_the_index():
    forged = forge([Entry("a", b"x")], edit_index=lambda ix: ix.__setitem__("manifest_sha256", sha256_hex(b"no")))
    refused(IntegrityError, forged.data, "manifest digest does not match the index")


def test_index_digest_in_the_footer(small):
    data, _ = small
    forged = bytearray(data)
    forged[-1] ^= 0xFF  # last byte of the footer's sha256
    refused(IntegrityError, bytes(forged), "index digest does not match the footer")


def test_manifest_listing_one_path_twice_with_different_digests():
    man = {
        "format_version": "1.0",
        "files": [
            {"path": "a", "size": 1, "sha256": sha256_hex(b"a")},
            {"path": "a", "size": 1, "sha256": sha256_hex(b"b")},
        ],
    }
    refused(SchemaError, forge([Entry("a", b"a")], manifest=man).data, "lists 'a' twice")


def test_members_the_manifest_does_not_list_are_not_trusted():
    forged = forge([Entry("a", b"a"), Entry("ghost", b"unverified", in_manifest=False)])
    reader = open_bytes(forged.data)
    assert reader.read("a") == b"a"
    with pytest.raises(IntegrityError, match="'ghost' has no digest in the manifest"):
        reader.read("ghost")
    assert any("'ghost' is not listed in the manifest" in p for p in reader.verify())
    with pytest.raises(FormatError, match="no member 'nope'"):
        reader.read("nope")


def test_manifest_file_missing_from_the_archive():
    man = {"format_version": "1.0", "files": [{"path": "gone", "size": 1, "sha256": sha256_hex(b"g")}]}
    reader = open_bytes(forge([Entry("a", b"a", in_manifest=False)], manifest=man).data)
    assert "manifest file 'gone' is missing from the archive" in reader.verify()


# ==================================================================================================
# Member names: in the index and in the tar headers
# ==================================================================================================

BAD_NAMES = [
    "../evil",
    "a/../../evil",
    "..",
    ".",
    "./a",
    "a/./b",
    "a/..",
    "/etc/passwd",
    "/abs",
    "a\\b",
    "..\\..\\evil",
    "C:\\x",
    "C:/x",
    "a//b",
    "a/",
    "/",
    "",
    "a\x00b",
    "caf\u00e9",
    "a b",
    "a\nb",
    "a\n",
    "v0/kernel.cubin\n",
    "~/x",
    "x" * 300,
]


@pytest.mark.parametrize("name", BAD_NAMES, ids=[repr(n)[:24] for n in BAD_NAMES])
def test_bad_names_in_the_index(small, name):
    data, _ = small
    forged = reindex(data, lambda ix: ix["members"][0].__setitem__(0, name))
    exc = refused(UnsafeMemberError, forged, "member name")
    assert repr(name)[:40] in str(exc) or len(name) > 255


@pytest.mark.parametrize("name", BAD_NAMES, ids=[repr(n)[:24] for n in BAD_NAMES])
def test_bad_names_in_both_index_and_tar_header(name):
    header = raw_tar_header(name.encode("utf-8")[:100], 3)
    forged = forge([Entry("ok", b"abc", header=header, index_name=name)])
    refused(UnsafeMemberError, forged.data)


@pytest.mark.parametrize(
    "raw,prefix",
    [
        (b"../../evil", b""),
        (b"/etc/passwd", b""),
        (b"a\\b", b""),
        (b"evil", b"../.."),
        (b"evil", b"/abs"),
        (b"x", b"a//b"),
        (b"caf\xc3\xa9", b""),
        (b"\xff", b""),
        (b"a/", b""),
        (b"fine\n", b""),
    ],
)
def test_bad_names_in_the_tar_header_only(raw, prefix):
    """The index names a fine member, but the header at its offset says otherwise."""
    header = raw_tar_header(raw, 3, prefix=prefix)
    forged = forge([Entry("fine", b"abc", header=header)])
    reader = open_bytes(forged.data)
    with pytest.raises(UnsafeMemberError, match="member name"):
        reader.read("fine")
    assert reader.verify()


def test_long_names_through_the_ustar_prefix_round_trip():
    name = "d" * 90 + "/" + "e" * 90 + "/f.bin"
    forged = forge([Entry(name, b"long")])
    assert read_everything(forged.data, [name]) == {name: b"long"}


# ==================================================================================================
# Links, devices, pax and GNU headers inside a frame
# ==================================================================================================

TYPEFLAGS = {
    b"1": "hard link",
    b"2": "symlink",
    b"3": "char device",
    b"4": "block device",
    b"5": "directory",
    b"6": "fifo",
    b"7": "contiguous",
    b"x": "pax header",
    b"g": "pax global header",
    b"L": "GNU long name",
    b"K": "GNU long link",
    b"S": "GNU sparse",
    b"D": "GNU dumpdir",
    b"V": "GNU volume",
    b"M": "GNU multivolume",
    b"A": "unknown",
}


@pytest.mark.parametrize("flag", sorted(TYPEFLAGS), ids=[TYPEFLAGS[k] for k in sorted(TYPEFLAGS)])
def test_non_regular_tar_members_are_refused(flag):
    header = raw_tar_header("link", 0, typeflag=flag, linkname="../../../etc/passwd")
    forged = forge([Entry("link", b"", header=header)])
    exc = refused(UnsafeMemberError, forged.data, read=["link"])
    assert repr(flag) in str(exc) and "only regular files" in str(exc)


@pytest.mark.parametrize("flag", [b"x", b"L", b"2", b"1", b"g"])
def test_hidden_entries_before_a_listed_member_are_refused(flag):
    """A pax/GNU header or link that the index skips over would change what ``tar`` extracts (a pax
    ``path=../../evil`` applies to the next member), so a frame holding one is refused whole."""
    pax = b"30 path=../../../../tmp/evil\n"
    hidden = Entry(
        "hidden", pax, header=raw_tar_header("hidden", len(pax), typeflag=flag), in_index=False, in_manifest=False
    )
    forged = forge([hidden, Entry("victim", b"data")])
    exc = refused(UnsafeMemberError, forged.data, read=["victim"])
    assert repr(flag) in str(exc)


def test_unlisted_regular_entries_in_a_frame_are_refused():
    for entries in (
        [Entry("stowaway", b"zzz", in_index=False, in_manifest=False), Entry("a", b"a")],
        [Entry("a", b"a"), Entry("stowaway", b"zzz", in_index=False, in_manifest=False), Entry("b", b"b")],
        [Entry("a", b"a"), Entry("stowaway", b"zzz", in_index=False, in_manifest=False)],
    ):
        forged = forge(entries)
        exc = refused(FormatError, forged.data, read=["a"])
        assert "'stowaway'" in str(exc) and "not listed in the index" in str(exc)


def test_data_hidden_in_padding_or_after_the_end_marker():
    tar, placed = tar_bytes([Entry("a", b"abc")])
    dirty = bytearray(tar)
    dirty[placed[0][1] + 3] = 0x41  # inside the member's zero padding
    forged = forge([Entry("a", b"abc")], blobs={0: zstd_frame(bytes(dirty))})
    refused(FormatError, forged.data, "padding after 'a' is not zero", read=["a"])
    # A trailing block of junk in a middle frame.
    forged = forge([Entry("a", b"abc")], [Entry("b", b"b")], blobs={0: zstd_frame(tar + b"J" * 512)})
    refused(FormatError, forged.data, "after its last member", read=["a"])
    # The last frame without the end marker.
    man_tar, _ = tar_bytes([Entry(MANIFEST_NAME, b"{}")])
    body = zstd_frame(man_tar)
    index = {
        "frames": [[0, len(body), len(man_tar), 0]],
        "members": [[MANIFEST_NAME, 0, 512, 2]],
        "manifest": MANIFEST_NAME,
        "manifest_sha256": sha256_hex(b"{}"),
        "dictionary": None,
        "dictionary_sha256": None,
    }
    refused(FormatError, assemble(body, index), "end-of-archive marker")


# ==================================================================================================
# Duplicates
# ==================================================================================================


def test_duplicate_names_in_the_index():
    forged = forge([Entry("a", b"1"), Entry("a", b"2")])
    refused(FormatError, forged.data, "duplicate member 'a'")
    forged = forge([Entry("a", b"1")], [Entry("a", b"2")])
    refused(FormatError, forged.data, "duplicate member 'a'")


def test_duplicate_names_in_tar_but_not_in_the_index():
    forged = forge([Entry("a", b"first"), Entry("a", b"second", in_index=False, in_manifest=False)])
    refused(FormatError, forged.data, "tar entry 'a' after its last member, not listed in the index", read=["a"])


def test_two_index_entries_for_the_same_bytes():
    def alias(ix):
        name, frame, off, size = ix["members"][0]
        ix["members"].append(["alias", frame, off, size])

    refused(FormatError, forge([Entry("a", b"x" * 600)], edit_index=alias).data, "overlap")

    def inside(ix):  # a member whose "header" lies inside another's data
        ix["members"].append(["inner", 0, ix["members"][0][2] + 1024, 10])

    refused(FormatError, forge([Entry("a", b"x" * 3000)], edit_index=inside).data, "overlap")


def test_duplicate_json_keys():
    man = b'{"files":[],"format_version":"1.0","format_version":"2.0"}'
    refused(
        FormatError,
        forge([Entry("a", b"a", in_manifest=False)], manifest_bytes=man).data,
        "duplicate JSON key 'format_version'",
    )
    data, _ = honest_archive()
    body, index, _ = split(data)
    raw = canonical_json(index)
    doubled = raw[:-1] + b',"frames":[]}'
    refused(FormatError, assemble(body, doubled), "duplicate JSON key 'frames'")


# ==================================================================================================
# Frame geometry in the index
# ==================================================================================================


def _edit_frames(fn):
    def edit(ix):
        fn(ix["frames"])

    return edit


def test_frame_geometry(small):
    data, _ = small
    cases = [
        (_edit_frames(lambda f: f[0].__setitem__(0, 1)), "not contiguous"),
        (_edit_frames(lambda f: f[1].__setitem__(0, f[1][0] - 1)), "not contiguous"),  # overlap
        (_edit_frames(lambda f: f[1].__setitem__(0, f[1][0] + 1)), "not contiguous"),  # gap
        (_edit_frames(lambda f: f[-1].__setitem__(1, f[-1][1] + 10)), "do not end where the index begins"),
        (_edit_frames(lambda f: f[-1].__setitem__(1, f[-1][1] + 10**12)), "more than any zstd frame"),  # past EOF
        (_edit_frames(lambda f: f.pop()), "do not end where the index begins"),
        (_edit_frames(lambda f: f.append([f[-1][0] + f[-1][1], 0, 0, 0])), "not contiguous"),
        (_edit_frames(lambda f: f[0].__setitem__(3, 2)), "dictionary flag"),
        (_edit_frames(lambda f: f[0].__setitem__(0, -0)), None),  # no-op, must still open
        (_edit_frames(lambda f: f[0].__setitem__(2, -5)), "non-negative integer"),
        (_edit_frames(lambda f: f[0].__setitem__(2, 1.5)), "non-negative integer"),
        (_edit_frames(lambda f: f[0].__setitem__(2, True)), "non-negative integer"),
        (_edit_frames(lambda f: f[0].__setitem__(2, "10")), "non-negative integer"),
        (_edit_frames(lambda f: f[0].pop()), "bad frame entry"),
        (_edit_frames(lambda f: f.__setitem__(0, {"offset": 0})), "bad frame entry"),
        (lambda ix: ix.__setitem__("frames", {}), "lacks frames/members"),
        (lambda ix: ix.pop("members"), "lacks frames/members"),
    ]
    for edit, match in cases:
        forged = reindex(data, edit)
        if match is None:
            open_bytes(forged)
        else:
            refused(FormatError, forged, match)


def test_member_geometry(small):
    data, _ = small
    for field, value, match in [
        (1, 99, "outside its frame"),
        (2, 0, "outside its frame"),
        (2, 513, "outside its frame"),
        (3, 10**9, "outside its frame"),
        (1, -1, "non-negative"),
        (2, "512", "non-negative"),
        (3, None, "non-negative"),
        (0, 7, "bad member name"),
    ]:
        forged = reindex(data, lambda ix, field=field, value=value: ix["members"][0].__setitem__(field, value))
        exc = refused(FormatError, forged, match)
        assert not isinstance(exc, (NotAnArchiveError,))
    refused(FormatError, reindex(data, lambda ix: ix["members"].append(["x", 0])), "bad member entry")
    refused(FormatError, reindex(data, lambda ix: ix["members"].append("x")), "bad member entry")
    # A frame no member points at (junk the random-access reader would never look at).
    drop = lambda ix: ix.__setitem__("members", [m for m in ix["members"] if m[1] != 1])  # noqa: E731
    refused(FormatError, reindex(data, drop), "frame 1 holds no member")


def test_multi_frame_blob_is_refused_not_read_halfway():
    """A frame entry whose bytes are two zstd frames: the reader must not return the first one."""
    tar_a, _ = tar_bytes([Entry("a", b"first")])
    tar_b = b"B" * 512
    for blob, usize in [
        (zstd_frame(tar_a) + zstd_frame(tar_b), len(tar_a)),
        (zstd_frame(tar_a) + zstd_frame(tar_b), len(tar_a) + 512),
        (zstd_frame(tar_a) + b"\x50\x2a\x4d\x18" + (4).to_bytes(4, "little") + b"skip", len(tar_a)),
        (zstd_frame(tar_a) + b"junk", len(tar_a)),
    ]:
        forged = forge([Entry("a", b"first")], blobs={0: blob}, usizes={0: usize})
        exc = refused(FormatError, forged.data, "frame 0", read=["a"])
        assert "unused data" in str(exc) or "declared" in str(exc) or "differs" in str(exc), str(exc)
    # A skippable frame first, then the real frame.
    blob = b"\x50\x2a\x4d\x18" + (4).to_bytes(4, "little") + b"skip" + zstd_frame(tar_a)
    forged = forge([Entry("a", b"first")], blobs={0: blob}, usizes={0: len(tar_a)})
    refused(FormatError, forged.data, "not a zstd frame", read=["a"])


def test_frames_without_checksum_or_with_a_lying_content_size():
    tar, _ = tar_bytes([Entry("a", b"abc")])
    # No checksum: accepted (the member's sha256 still guards the bytes).
    forged = forge([Entry("a", b"abc")], blobs={0: zstd_frame(tar, checksum=False)})
    assert read_everything(forged.data, ["a"]) == {"a": b"abc"}
    # Content size absent.
    forged = forge([Entry("a", b"abc")], blobs={0: zstd_frame(tar, content_size=False)})
    refused(FormatError, forged.data, "does not declare its size", read=["a"])
    # Content size smaller than the index's: 'declares' fewer bytes than the frame is said to hold.
    forged = forge([Entry("a", b"abc")], blobs={0: zstd_frame(tar[:512])}, usizes={0: len(tar)})
    refused(FormatError, forged.data, "frame 0", read=["a"])


# ==================================================================================================
# Versions
# ==================================================================================================


CURRENT = f"{FORMAT_VERSION[0]}.{FORMAT_VERSION[1]}"


@pytest.mark.parametrize("major,minor", [(FORMAT_VERSION[0] + 1, 0), (FORMAT_VERSION[0] + 1, 7), (65535, 65535)])
def test_newer_footer_major_names_both_versions(small, major, minor):
    data, _ = small
    body, index, _ = split(data)
    exc = refused(UnsupportedVersionError, assemble(body, index, major=major, minor=minor))
    assert f"{major}.{minor}" in str(exc) and CURRENT in str(exc) and "upgrade" in str(exc)


def test_major_zero_and_newer_minor(small):
    data, files = small
    body, index, _ = split(data)
    refused(UnsupportedVersionError, assemble(body, index, major=0, minor=9), "0.9")
    assert read_everything(assemble(body, index, minor=9), files) == files  # minor bumps stay readable


@pytest.mark.parametrize("version", [f"{FORMAT_VERSION[0] + 1}.0", "17.3"])
def test_newer_manifest_major_names_both_versions(version):
    forged = forge([Entry("a", b"a")], format_version=version)
    exc = refused(UnsupportedVersionError, forged.data)
    assert f"manifest format version {version}" in str(exc) and f"({CURRENT})" in str(exc)


def test_manifest_and_footer_must_agree_on_the_major():
    """A 1.0 footer over a manifest that says 2.0 (or the reverse) is refused: either could be the lie."""
    forged = forge([Entry("a", b"a")], format_version="2.0")
    refused(SchemaError, forged.data, "manifest says format 2.0, the footer 1.0")


@pytest.mark.parametrize(
    "version", [None, "", "1", "1.0.0", "v1.0", "1.x", 1.0, 1, ["1", "0"], "\u0661.0", "9" * 30 + ".0"]
)
def test_malformed_manifest_versions(version):
    man = {"files": []} if version is None else {"format_version": version, "files": []}
    refused(SchemaError, forge([Entry("a", b"a", in_manifest=False)], manifest=man).data, "format_version")


def test_manifest_that_is_not_an_object():
    refused(SchemaError, forge([Entry("a", b"a", in_manifest=False)], manifest_bytes=b"[]").data, "not a JSON object")


# ==================================================================================================
# Index and manifest JSON
# ==================================================================================================


@pytest.mark.parametrize(
    "raw,exc_type,match",
    [
        (b"not json", FormatError, "not valid JSON"),
        (b"[]", FormatError, "lacks frames/members"),
        (b'{"frames":[],"members":[]', FormatError, "not valid JSON"),
        (b'{"frames":NaN,"members":[]}', FormatError, "NaN"),
        (b'{"frames":[],"members":[],"x":"\xc3\xa9"}', FormatError, "not ASCII"),
        (b"\xef\xbb\xbf{}", FormatError, "not ASCII"),
        (b"[" * 100_000 + b"]" * 100_000, FormatError, "nested deeper than 64 levels"),
        (b'{"frames":[],"members":[],"n":' + b"9" * 5000 + b"}", FormatError, "not valid JSON"),
        (b'{"frames":[],"members":[],"manifest":"other.json"}', FormatError, "manifest must be"),
    ],
)
def test_malformed_index_json(small, raw, exc_type, match):
    body, _, _ = split(small[0])
    refused(exc_type, assemble(body, raw), match)


@pytest.mark.parametrize("value", [["x"], {"a": 1}, 5, "karchive/other.zdict", "v0/kernel.cubin"])
def test_index_dictionary_name_must_be_the_dictionary(small, value):
    forged = reindex(small[0], lambda ix: ix.__setitem__("dictionary", value))
    refused(FormatError, forged, "dictionary must be")


def test_index_payload_that_is_not_zstd(small):
    body, index, _ = split(small[0])
    refused(FormatError, assemble(body, index, index_payload=canonical_json(index)), "index: not a zstd frame")
    refused(FormatError, assemble(body, index, index_payload=b""), "index: not a zstd frame")
    two = compress_index(index) + compress_index(index)
    refused(FormatError, assemble(body, index, index_payload=two), "index: zstd decompression failed")


def test_manifest_json_malformations():
    for raw, match in [
        (b"{", "not valid JSON"),
        (b'{"format_version":"1.0","x":"\xff"}', "not ASCII"),
        (b"[" * 50_000 + b"]" * 50_000, "nested deeper than 64 levels"),
        (b'{"format_version":"1.0","x":Infinity}', "Infinity"),
    ]:
        refused(FormatError, forge([Entry("a", b"a", in_manifest=False)], manifest_bytes=raw).data, match)
    deep = {"format_version": "1.0", "x": json.loads("[" * 200 + "]" * 200)}
    refused(LimitExceededError, forge([Entry("a", b"a", in_manifest=False)], manifest=deep).data, "nested deeper")


# ==================================================================================================
# Dictionaries
# ==================================================================================================


def test_dictionary_problems():
    members = [("a", b"hello dictionary " * 40)]
    real = zstandard.train_dictionary(4096, [bytes([i]) * 64 + b"common-prefix" * 20 for i in range(64)]).as_bytes()
    data, files = with_dictionary(real, members)
    assert read_everything(data, files) == files
    # Bytes that claim to be a zstd dictionary (magic) but are not one.
    bogus = b"\x37\xa4\x30\xec" + bytes(200)
    refused(FormatError, with_dictionary(bogus, members, compress_with=real)[0], "not a usable zstd dictionary")
    # A frame compressed with a different dictionary than the archive's.
    other = zstandard.train_dictionary(4096, [bytes([i]) * 64 + b"other-prefix!" * 20 for i in range(64)]).as_bytes()
    refused(FormatError, with_dictionary(other, members, compress_with=real)[0], "frame 0", read=["a"])
    # The dictionary's digest.
    forged = reindex(data, lambda ix: ix.__setitem__("dictionary_sha256", sha256_hex(b"x")))
    refused(IntegrityError, forged, "dictionary digest does not match the index")
    # Frames that need a dictionary the index does not name.
    forged = reindex(data, lambda ix: (ix.__setitem__("dictionary", None), ix.__setitem__("dictionary_sha256", None)))
    refused(FormatError, forged, "need a dictionary but the index names none")
    # The dictionary frame itself flagged as needing the dictionary.
    forged = reindex(data, lambda ix: ix["frames"][1].__setitem__(3, 1))
    refused(FormatError, forged, "compressed without the dictionary")
    # The dictionary member missing.
    forged = reindex(data, lambda ix: ix["members"].__setitem__(1, ["zz", 1, 512, ix["members"][1][3]]))
    refused(FormatError, forged, "does not exist")


# ==================================================================================================
# Decompression bombs and other resource claims
# ==================================================================================================


def _bomb_forge(blob: bytes, usize: int) -> bytes:
    """An archive whose first frame is ``blob``, the index claiming ``usize`` decompressed bytes."""
    return forge([Entry("bomb", b"")], blobs={0: blob}, usizes={0: usize}).data


def bomb_cases():
    """(label, archive, expected error, message, members to read); each tiny on disk."""
    small_tar, _ = tar_bytes([Entry("bomb", b"")])
    n = len(small_tar)
    u = 1 << 16  # what the index claims for the frames below: above their compressed length
    json_bomb = b'{"frames":[],"members":[' + b"[]," * (20 * 1024 * 1024) + b"[]]}"
    json_bomb_payload = zstandard.ZstdCompressor(level=3, write_content_size=True).compress(json_bomb)
    body, index, _ = split(honest_archive()[0])
    man_bomb = b'{"format_version":"1.0","x":[' + b"{}," * (10 * 1024 * 1024) + b"{}]}"
    return [
        (
            "index claims a 1 GiB frame",
            _bomb_forge(rle_frame(GiB, declared=GiB), GiB),
            LimitExceededError,
            "claims 1073741824 decompressed bytes",
            [],
        ),
        (
            "frame header declares 1 GiB",
            _bomb_forge(rle_frame(GiB, declared=GiB), u),
            LimitExceededError,
            "declares 1073741824 bytes",
            ["bomb"],
        ),
        (
            "frame header declares 1 TiB",
            _bomb_forge(rle_frame(1024, declared=1 << 40), n),
            LimitExceededError,
            "declares 1099511627776 bytes",
            ["bomb"],
        ),
        (
            "header lies: declares 64 KiB, expands to 1 GiB",
            _bomb_forge(rle_frame(GiB, declared=u), u),
            FormatError,
            "zstd decompression failed",
            ["bomb"],
        ),
        (
            "no content size, expands to 1 GiB",
            _bomb_forge(rle_frame(GiB, declared=None), u),
            FormatError,
            "does not declare its size",
            ["bomb"],
        ),
        (
            "window of 1 GiB",
            _bomb_forge(rle_frame(n, declared=n, window_log=30), n),
            LimitExceededError,
            "1073741824-byte window",
            ["bomb"],
        ),
        (
            "window of 2 TiB (beyond what zstd can decode)",
            _bomb_forge(rle_frame(n, declared=n, window_log=41), n),
            FormatError,
            "too much memory",
            ["bomb"],
        ),
        (
            "index expands to 1 GiB",
            assemble(body, b"", index_payload=rle_frame(GiB, byte=0x20, declared=GiB)),
            LimitExceededError,
            "index: frame declares 1073741824 bytes",
            [],
        ),
        (
            "index of 20 M empty members (60 MiB JSON)",
            assemble(body, b"", index_payload=json_bomb_payload),
            LimitExceededError,
            "index holds up to",
            [],
        ),
        (
            "manifest of 10 M empty objects",
            forge([Entry("a", b"a", in_manifest=False)], manifest_bytes=man_bomb).data,
            LimitExceededError,
            "manifest holds up to",
            [],
        ),
        (
            "manifest frame of 100 MiB",
            forge([Entry("a", b"a")], edit_index=lambda ix: ix["frames"][-1].__setitem__(2, 100 << 20)).data,
            LimitExceededError,
            "exceeds the limit",
            [],
        ),
        (
            "compressed frame far longer than it may decode to",
            _bomb_forge(rle_frame(n, declared=n, block=1), n),
            LimitExceededError,
            "more than any zstd frame",
            [],
        ),
    ]


@pytest.fixture(scope="module")
def bombs():
    return bomb_cases()


def test_decompression_bombs_in_process(bombs):
    for label, data, exc_type, match, reads in bombs:
        assert len(data) < 400_000, label  # tiny files...
        with pytest.raises(exc_type, match=match):
            reader = open_bytes(data)
            for name in reads:
                reader.read(name)


def test_decompression_bombs_stay_in_bounded_memory():
    """The same bombs in a child process whose address space is capped at 1.5 GiB (so a reader that
    allocated what a bomb claims would die with MemoryError), reporting its peak resident memory."""
    script = textwrap.dedent(
        """
        import json, resource, sys
        resource.setrlimit(resource.RLIMIT_AS, (1536 << 20, 1536 << 20))
        sys.path[:0] = [ROOT, ROOT + "/tests"]
        from test_hostile_archives import bomb_cases, open_bytes
        from karchive.errors import KarchiveError
        results = {}
        for label, data, exc_type, match, reads in bomb_cases():
            try:
                reader = open_bytes(data)
                for name in reads:
                    reader.read(name)
                results[label] = "no error"
            except KarchiveError as exc:
                results[label] = type(exc).__name__ if isinstance(exc, exc_type) else "wrong " + repr(exc)
            except BaseException as exc:
                results[label] = "escaped " + repr(exc)[:200]
        # VmHWM belongs to this process image; ru_maxrss would also count the forking parent
        # (Linux folds the pre-exec peak into it), i.e. the whole pytest process.
        try:
            with open("/proc/self/status") as fh:
                peak = next(int(l.split()[1]) for l in fh if l.startswith("VmHWM:")) * 1024
        except (OSError, StopIteration):
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        print(json.dumps({"results": results, "peak": peak}))
        """
    ).replace("ROOT", repr(ROOT))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    bad = {k: v for k, v in report["results"].items() if not v.endswith("Error") or " " in v}
    assert not bad, bad
    # Building the 60 MiB JSON bomb costs ~130 MiB in the child itself; the reader adds little.
    assert report["peak"] < 512 << 20, f"peak RSS {report['peak'] >> 20} MiB"
    print(f"bomb child peak RSS: {report['peak'] >> 20} MiB")


def test_member_and_frame_count_limits(small):
    data, files = small
    refused(LimitExceededError, data, "index lists 6 members; the limit is 3", limits=Limits(max_members=3))
    refused(LimitExceededError, data, "frames; the limit is", limits=Limits(max_members=1))
    refused(LimitExceededError, data, "JSON values", limits=Limits(max_json_values=20))
    refused(LimitExceededError, data, "index of .* bytes exceeds the limit", limits=Limits(max_index_bytes=16))
    refused(LimitExceededError, data, "claims .* decompressed bytes", limits=Limits(max_frame_bytes=1024))
    refused(LimitExceededError, data, "exceeds the limit", limits=Limits(max_manifest_bytes=64))
    # The window limit applies to frames that need a window beyond it.
    forged = _bomb_forge(
        rle_frame(1024, declared=None, window_log=20)[:0] + rle_frame(1024, declared=1024, window_log=20), 1024
    )
    refused(LimitExceededError, forged, "window", read=["bomb"], limits=Limits(max_window_bytes=1 << 19))


def test_frame_cache_is_bounded_in_bytes():
    groups = [[(f"m{i}", bytes([i]) * 300_000)] for i in range(6)]
    data, files = honest_archive(groups)
    reader = open_bytes(data, limits=Limits(max_cache_bytes=700_000))
    for name in files:
        assert reader.read(name) == files[name]
        assert reader._cache_bytes <= 700_000 and sum(map(len, reader._cache.values())) == reader._cache_bytes


def test_opening_reads_only_the_tail_even_if_the_manifest_frame_is_first():
    """A hostile layout (manifest frame first, big frames after it) must not make opening read
    everything in between."""
    big = random.Random(3).randbytes(400_000)
    mbytes = canonical_json(
        {"format_version": "1.0", "files": [{"path": "big", "size": len(big), "sha256": sha256_hex(big)}]}
    )
    man_tar, man_placed = tar_bytes([Entry(MANIFEST_NAME, mbytes)])
    big_tar, big_placed = tar_bytes([Entry("big", big)])
    big_tar += bytes(1024)
    f0, f1 = zstd_frame(man_tar), zstd_frame(big_tar, level=1)
    index = {
        "frames": [[0, len(f0), len(man_tar), 0], [len(f0), len(f1), len(big_tar), 0]],
        "members": [[MANIFEST_NAME, 0, 512, len(mbytes)], ["big", 1, 512, len(big)]],
        "manifest": MANIFEST_NAME,
        "manifest_sha256": sha256_hex(mbytes),
        "dictionary": None,
        "dictionary_sha256": None,
    }
    data = assemble(f0 + f1, index)
    reader = open_bytes(data)
    assert reader.source.bytes_read < len(f0) + 300_000  # tail (256 KiB at most) + the manifest frame
    assert reader.read("big") == big


# ==================================================================================================
# Safe extraction
# ==================================================================================================


def _tree(path) -> set[str]:
    out = set()
    for root, dirs, files in os.walk(path, followlinks=False):
        for n in dirs + files:
            out.add(os.path.relpath(os.path.join(root, n), path))
    return out


def test_extract_honest(small, tmp_path):
    data, files = small
    dest = tmp_path / "out"
    written = extract_all(open_bytes(data), dest)
    assert set(written) >= set(files)
    for name, content in files.items():
        assert (dest / name).read_bytes() == content
    assert not any(os.path.islink(dest / p) for p in _tree(dest))


def test_extract_does_not_follow_planted_symlinks(small, tmp_path):
    data, files = small
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim").write_bytes(b"precious")
    before = _tree(tmp_path)
    # A directory the archive writes into is a symlink to outside.
    dest = tmp_path / "d1"
    dest.mkdir()
    os.symlink(outside, dest / "v0")
    with pytest.raises(UnsafeMemberError, match="'v0'"):
        extract_all(open_bytes(data), dest)
    # A file the archive writes is a symlink (live or dangling) to outside.
    for target in (outside / "victim", outside / "new"):
        d = tmp_path / f"d-{target.name}"
        d.mkdir()
        os.symlink(target, d / "empty.txt")
        with pytest.raises(UnsafeMemberError, match="already exists"):
            extract_all(open_bytes(data), d)
    assert (outside / "victim").read_bytes() == b"precious"
    assert _tree(outside) == {"victim"}
    assert before <= _tree(tmp_path)


def test_extract_file_then_directory_of_the_same_name(tmp_path):
    forged = forge([Entry("a", b"file"), Entry("a/b", b"under a file")])
    with pytest.raises(UnsafeMemberError):
        extract_all(open_bytes(forged.data), tmp_path / "out")
    assert (tmp_path / "out" / "a").read_bytes() == b"file"


def test_extract_tampered_member_is_not_written(tmp_path):
    man = {
        "format_version": "1.0",
        "files": [
            {"path": "a", "size": 1, "sha256": sha256_hex(b"a")},
            {"path": "z", "size": 1, "sha256": sha256_hex(b"not z")},
        ],
    }
    forged = forge([Entry("a", b"a"), Entry("z", b"z")], manifest=man)
    with pytest.raises(IntegrityError, match="'z'"):
        extract_all(open_bytes(forged.data), tmp_path / "out")
    assert not (tmp_path / "out" / "z").exists()


def test_extract_refuses_members_the_manifest_does_not_list(tmp_path):
    forged = forge([Entry("a", b"a"), Entry("ghost", b"unverified", in_manifest=False)])
    with pytest.raises(IntegrityError, match="'ghost'"):
        extract_all(open_bytes(forged.data), tmp_path / "out")
    assert not (tmp_path / "out" / "ghost").exists()


@pytest.mark.parametrize("name", ["../evil", "/abs/evil", "a/../../evil", "a\\..\\evil"])
def test_extract_of_hostile_names_writes_nothing(tmp_path, name):
    header = raw_tar_header(name, 4)
    forged = forge([Entry("x", b"evil", header=header, index_name=name)])
    dest = tmp_path / "deep" / "out"
    with pytest.raises(UnsafeMemberError):
        extract_all(open_bytes(forged.data), dest)
    assert _tree(tmp_path) <= {"deep", os.path.join("deep", "out")}


# ==================================================================================================
# Fuzz: seeded random mutations, raw and "consistent" (digests recomputed around the damage)
# ==================================================================================================


def _mutate_raw(data: bytes, rng: random.Random) -> bytes:
    buf = bytearray(data)
    kind = rng.randrange(7)
    pos = rng.randrange(len(buf))
    if kind == 0:
        for _ in range(rng.randint(1, 4)):
            buf[rng.randrange(len(buf))] ^= 1 << rng.randrange(8)
    elif kind == 1:
        n = rng.randint(1, 64)
        buf[pos : pos + n] = rng.randbytes(min(n, len(buf) - pos))
    elif kind == 2:
        del buf[pos : pos + rng.randint(1, 64)]
    elif kind == 3:
        buf[pos:pos] = rng.randbytes(rng.randint(1, 64))
    elif kind == 4:
        n = rng.randint(1, 128)
        buf[pos:pos] = buf[pos : pos + n]
    elif kind == 5:
        buf = buf[: rng.randrange(len(buf))]
    else:
        buf[pos] = rng.choice([0, 0xFF, 0x7F, 0x80])
    return bytes(buf)


def _mutate_json(node, rng: random.Random):
    """Change one random leaf or container in parsed JSON."""
    path = []
    while isinstance(node, (list, dict)) and node and rng.random() < 0.8:
        key = rng.randrange(len(node)) if isinstance(node, list) else rng.choice(sorted(node))
        path.append((node, key))
        node = node[key]
    if not path:
        return
    parent, key = path[-1]
    choices = [
        None,
        True,
        -1,
        0,
        1,
        511,
        512,
        513,
        2**63,
        10**18,
        "",
        "..",
        "/etc/passwd",
        "a" * 300,
        MANIFEST_NAME,
        DICTIONARY_NAME,
        [],
        {},
        [0, 0, 0, 0],
        1.5,
    ]
    if isinstance(node, int) and not isinstance(node, bool):
        choices += [node + 1, node - 1, node * 2, node + 512, node - 512]
    action = rng.randrange(4)
    if action == 0 and isinstance(parent, list):
        parent.pop(key)
    elif action == 1 and isinstance(parent, list):
        parent.insert(key, json.loads(json.dumps(parent[key])))
    else:
        parent[key] = rng.choice(choices)


def _mutate_consistent(data: bytes, rng: random.Random) -> bytes:
    body, index, _ = split(data)
    kind = rng.randrange(3)
    if kind == 0:  # the index, re-digested
        _mutate_json(index, rng)
        return assemble(body, index)
    frames = index["frames"]
    fi = rng.randrange(len(frames))
    off, length, usize, flag = frames[fi]
    if flag:
        return _mutate_raw(data, rng)
    content = bytearray(zstandard.ZstdDecompressor().decompress(body[off : off + length]))
    if kind == 1:  # a frame's tar content, recompressed, index fixed up
        for _ in range(rng.randint(1, 3)):
            p = rng.randrange(len(content))
            content[p] = rng.randrange(256)
    else:  # the manifest, re-digested in the index
        m = next(m for m in index["members"] if m[0] == MANIFEST_NAME)
        if m[1] != fi:
            return _mutate_raw(data, rng)
        manifest = json.loads(bytes(content[m[2] : m[2] + m[3]]))
        _mutate_json(manifest, rng)
        mbytes = canonical_json(manifest)
        tar, _ = tar_bytes([Entry(MANIFEST_NAME, mbytes)])
        content = bytearray(tar + bytes(1024))
        m[3] = len(mbytes)
        index["manifest_sha256"] = sha256_hex(mbytes)
    blob = zstd_frame(bytes(content))
    delta = len(blob) - length
    frames[fi] = [off, len(blob), len(content), 0]
    for f in frames[fi + 1 :]:
        f[0] += delta
    return assemble(body[:off] + blob + body[off + length :], index)


def _extract_contained(data: bytes, tmp_path, i: int) -> None:
    """Extraction of a mutated archive: only karchive errors, and nothing lands outside ``dest``."""
    box = tmp_path / f"box{i}"
    dest = box / "dest"
    try:
        extract_all(open_bytes(data), dest)
    except KarchiveError:
        pass
    assert _tree(box) <= {"dest"} | {os.path.join("dest", p) for p in _tree(dest)}
    for p in _tree(dest):
        assert not os.path.islink(dest / p)


def test_fuzz_only_karchive_errors_and_never_wrong_bytes(small, with_dict, tmp_path):
    rng = random.Random(20240229)
    seen: dict[str, int] = {}
    cases = 0
    for base, files, n in ((small[0], small[1], 4000), (with_dict[0], with_dict[1], 1000)):
        for _ in range(n):
            mutated = _mutate_consistent(base, rng) if rng.random() < 0.5 else _mutate_raw(base, rng)
            try:
                result = outcome(mutated, files, check_verify=rng.random() < 0.3)
                if result == "ok" or rng.random() < 0.02:
                    _extract_contained(mutated, tmp_path, cases)
            except AssertionError:
                raise
            except Exception as exc:
                pytest.fail(f"{type(exc).__name__} escaped the reader: {exc!r}")
            seen[result] = seen.get(result, 0) + 1
            cases += 1
    assert cases == 5000
    # The mutations reach every layer: each kind of refusal shows up, and few mutants survive.
    for kind in (
        "FormatError",
        "NotAnArchiveError",
        "IntegrityError",
        "SchemaError",
        "UnsafeMemberError",
        "LimitExceededError",
    ):
        assert seen.get(kind, 0) > 0, seen
    assert seen.get("ok", 0) < cases // 5, seen


def test_remote_sources_truncated_or_lying(small):
    """Over fsspec: a truncated object, and a server that answers ranges with the wrong length."""
    fsspec = pytest.importorskip("fsspec")
    from karchive.format.source import FsspecSource

    data, files = small
    fs = fsspec.filesystem("memory")
    fs.pipe("/hostile/truncated.karc", data[:-10])
    with pytest.raises(NotAnArchiveError, match="truncated"):
        open_reader("memory:///hostile/truncated.karc")

    class Lying:
        def size(self, path):
            return len(data)

        def cat_file(self, path, start, end):
            return data[start:end][:-1] if end - start > 1000 else data[start:end]

    with pytest.raises(FormatError, match="short range read"):
        reader = ArchiveReader(FsspecSource(Lying(), "lying.karc"))
        for name in files:
            reader.read(name)
