"""Forge .karc archives, honest and hostile, for the reader's robustness tests.

Honest archives come from :class:`karchive.format.writer.ArchiveWriter` itself. Hostile ones are
assembled here from raw parts — hand-built ustar headers (any name, any type flag), zstd frames
(compressed normally, or written byte by byte: RLE-block bombs, lying content sizes, huge windows),
hand-edited index dicts and footers — so a test can break exactly one rule at a time while every
digest that is *not* under test still matches (the reader must not be able to refuse for the wrong
reason).
"""

from __future__ import annotations

import hashlib
import io
import json
import random
import struct
import tarfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field

import zstandard
from format1_writer import Format1Writer

from karchive.errors import FormatError
from karchive.format.constants import (
    DICTIONARY_NAME,
    FOOTER_FRAME_MAGIC,
    FOOTER_PAYLOAD,
    FOOTER_TAG,
    INDEX_FRAME_MAGIC,
    MANIFEST_NAME,
    SKIPPABLE_HEADER,
    TAR_BLOCK,
    ZSTD_FRAME_MAGIC,
)
from karchive.format.tarheader import build_header, padded
from karchive.format.writer import ArchiveWriter, canonical_json, sha256_hex

# --------------------------------------------------------------------------------------------------
# Honest archives (through the real writer)
# --------------------------------------------------------------------------------------------------


def file_entry(name: str, data: bytes) -> dict:
    return {"path": name, "size": len(data), "sha256": sha256_hex(data)}


def manifest_for(files: dict[str, bytes], format_version: str = "1.0", **extra) -> dict:
    """A minimal manifest: the reader only needs ``format_version`` and the file entries."""
    return {"format_version": format_version, "files": [file_entry(n, d) for n, d in sorted(files.items())], **extra}


SMALL_GROUPS: list[list[tuple[str, bytes]]] = [
    [("v0/kernel.cubin", b"\x7fELF" + bytes(range(256)) * 2), ("v0/kernel.json", b'{"name":"add_kernel"}')],
    [("v1/kernel.cubin", b"\x7fELF" + b"\x01" * 700), ("v1/kernel.ptx", b".version 8.0\n" * 20)],
    [("empty.txt", b"")],
]


def honest_archive(groups=None, *, dictionary: str = "none", level: int = 3) -> tuple[bytes, dict[str, bytes]]:
    """(archive bytes, {member name: bytes}) for the given groups (default: a small three-frame archive).

    Format 1.0, whose index lists every member: the container rules these archives break are shared by
    both formats, and 1.0 archives are still read (format 2's own structures: :func:`honest_v2`).
    """
    groups = SMALL_GROUPS if groups is None else groups
    files = {n: d for g in groups for n, d in g}
    w = Format1Writer(level=level, dictionary=dictionary)
    for g in groups:
        w.add_group(g)
    return w.to_bytes(manifest_for(files)), files


def dictionary_groups(n: int = 24, seed: int = 7) -> list[list[tuple[str, bytes]]]:
    """Many similar members, so that a trained dictionary is worth it (``dictionary="always"``)."""
    rng = random.Random(seed)
    words = [b"ld.global.f32", b"st.shared.b32", b"mov.u32", b"add.s32", b"bar.sync", b"mad.lo.s32", b"setp.lt"]
    groups = []
    for i in range(n):
        body = b"".join(rng.choice(words) + b" %r" + str(rng.randrange(64)).encode() + b";\n" for _ in range(400))
        groups.append([(f"v{i}/kernel.ptx", body)])
    return groups


# --------------------------------------------------------------------------------------------------
# Raw building blocks
# --------------------------------------------------------------------------------------------------


def _octal(value: int, width: int) -> bytes:
    return format(value, "o").encode().rjust(width - 1, b"0") + b"\0"


def raw_tar_header(
    name: bytes | str,
    size: int,
    *,
    typeflag: bytes = b"0",
    prefix: bytes | str = b"",
    linkname: bytes | str = b"",
    magic: bytes = b"ustar\x0000",
    size_field: bytes | None = None,
    fix_checksum: bool = True,
) -> bytes:
    """A ustar header with *no* validation: any name, prefix, type flag or link target."""
    enc = lambda v: v.encode("latin-1") if isinstance(v, str) else v  # noqa: E731
    h = bytearray(TAR_BLOCK)
    h[0:100] = enc(name)[:100].ljust(100, b"\0")
    h[100:108] = _octal(0o644, 8)
    h[108:116] = _octal(0, 8)
    h[116:124] = _octal(0, 8)
    h[124:136] = size_field if size_field is not None else _octal(size, 12)
    h[136:148] = _octal(0, 12)
    h[148:156] = b" " * 8
    h[156:157] = typeflag
    h[157:257] = enc(linkname)[:100].ljust(100, b"\0")
    h[257:265] = magic
    h[329:337] = _octal(0, 8)
    h[337:345] = _octal(0, 8)
    h[345:500] = enc(prefix)[:155].ljust(155, b"\0")
    if fix_checksum:
        h[148:156] = format(sum(h), "06o").encode() + b"\0 "
    return bytes(h)


def honest_header(name: str, size: int) -> bytes:
    """The writer's own header where the name is valid (ustar prefix split included), else a raw one."""
    try:
        return build_header(name, size)
    except FormatError:
        return raw_tar_header(name, size)


@dataclass
class Entry:
    """One tar entry of a forged frame.

    ``header`` defaults to an honest header for ``name``; ``index_name`` is what the index calls it
    (default: ``name``); ``in_index=False`` leaves it out of the index; ``in_manifest=False`` leaves
    it out of the manifest's file list.
    """

    name: str
    data: bytes
    header: bytes | None = None
    index_name: str | None = None
    in_index: bool = True
    in_manifest: bool = True


def tar_bytes(entries: list[Entry]) -> tuple[bytes, list[tuple[Entry, int]]]:
    out = bytearray()
    placed = []
    for e in entries:
        out += e.header if e.header is not None else honest_header(e.name, len(e.data))
        placed.append((e, len(out)))
        out += e.data + bytes(padded(len(e.data)) - len(e.data))
    return bytes(out), placed


def zstd_frame(
    data: bytes, *, level: int = 3, content_size: bool = True, checksum: bool = True, dict_data: bytes | None = None
) -> bytes:
    kw = dict(level=level, write_content_size=content_size, write_checksum=checksum)
    if dict_data is not None:
        kw["dict_data"] = zstandard.ZstdCompressionDict(dict_data)
    return zstandard.ZstdCompressor(**kw).compress(data)


def rle_frame(
    total: int,
    *,
    byte: int = 0,
    declared: int | None = None,
    window_log: int = 17,
    single_segment: bool = False,
    block: int = 128 * 1024,
) -> bytes:
    """A zstd frame written by hand: ``total`` copies of ``byte`` as RLE blocks of 4 bytes each.

    ``declared`` is the content size the header claims (``None``: no content size field at all), so
    1 GiB of zeros costs 32 KiB and the header may lie about it. ``window_log`` sets the window
    descriptor (ignored for single-segment frames, whose window is the content size).
    """
    fhd = 0
    fcs = b""
    if declared is not None:
        fcs_code = 3  # always an 8-byte field: simplest, and valid for any size
        fcs = struct.pack("<Q", declared)
        fhd |= fcs_code << 6
    if single_segment:
        if declared is None:
            raise ValueError("a single-segment frame needs a content size")
        fhd |= 1 << 5
        wd = b""
    else:
        if not 10 <= window_log <= 41:
            raise ValueError("window_log out of range")
        wd = bytes([(window_log - 10) << 3])
    out = bytearray(struct.pack("<I", ZSTD_FRAME_MAGIC) + bytes([fhd]) + wd + fcs)
    left = total
    block = min(block, 128 * 1024, 1 << window_log if not single_segment else 128 * 1024)
    while True:
        n = min(left, block)
        left -= n
        last = 1 if left == 0 else 0
        out += (last | (1 << 1) | (n << 3)).to_bytes(3, "little") + bytes([byte])
        if last:
            break
    return bytes(out)


def skippable(magic: int, payload: bytes) -> bytes:
    return SKIPPABLE_HEADER.pack(magic, len(payload)) + payload


def compress_index(index: dict | bytes) -> bytes:
    raw = index if isinstance(index, bytes) else canonical_json(index)
    return zstandard.ZstdCompressor(level=3, write_content_size=True, write_checksum=True).compress(raw)


def footer(
    index_offset: int,
    index_length: int,
    digest: bytes,
    *,
    major: int = 1,
    minor: int = 0,
    flags: int = 0,
    tag: bytes = FOOTER_TAG,
) -> bytes:
    payload = FOOTER_PAYLOAD.pack(tag, major, minor, flags, index_offset, index_length, digest)
    return skippable(FOOTER_FRAME_MAGIC, payload)


def assemble(
    body: bytes,
    index: dict | bytes,
    *,
    index_payload: bytes | None = None,
    major: int = 1,
    minor: int = 0,
    flags: int = 0,
) -> bytes:
    """Frames + index frame + footer; the footer's digest always matches the index payload given."""
    payload = compress_index(index) if index_payload is None else index_payload
    index_frame = skippable(INDEX_FRAME_MAGIC, payload)
    return (
        body
        + index_frame
        + footer(len(body), len(index_frame), hashlib.sha256(payload).digest(), major=major, minor=minor, flags=flags)
    )


def split(archive: bytes) -> tuple[bytes, dict, bytes]:
    """(frames body, decoded index, footer) of a well-formed archive."""
    _, _, _, _, off, length, _ = FOOTER_PAYLOAD.unpack_from(archive, len(archive) - FOOTER_PAYLOAD.size)
    payload = archive[off + SKIPPABLE_HEADER.size : off + length]
    index = json.loads(zstandard.ZstdDecompressor().decompress(payload))
    return archive[:off], index, archive[-(SKIPPABLE_HEADER.size + FOOTER_PAYLOAD.size) :]


def reindex(archive: bytes, edit: Callable[[dict], object], **kw) -> bytes:
    """Re-assemble an archive after ``edit(index)``; the footer digest is recomputed (a 'consistent' forgery)."""
    body, index, _ = split(archive)
    edit(index)
    return assemble(body, index, **kw)


# --------------------------------------------------------------------------------------------------
# The general forger
# --------------------------------------------------------------------------------------------------


@dataclass
class Forged:
    data: bytes
    files: dict[str, bytes]  # what an honest reader would return for each manifest-listed name
    index: dict
    manifest: dict


@dataclass
class Forge:
    """Build an archive frame by frame, breaking whatever rule a test wants broken.

    ``groups`` are lists of :class:`Entry`; each becomes one zstd frame (or ``blobs[i]`` if given).
    The manifest frame (with the end-of-archive blocks) goes last, the index is derived from what
    was placed, and every digest is computed over what was actually written.
    """

    groups: list[list[Entry]] = field(default_factory=list)
    manifest: dict | None = None
    manifest_bytes: bytes | None = None
    format_version: str = "1.0"
    footer_version: tuple[int, int] = (1, 0)
    blobs: dict[int, bytes] = field(default_factory=dict)
    usizes: dict[int, int] = field(default_factory=dict)
    edit_index: Callable[[dict], object] | None = None

    def build(self) -> Forged:
        body = bytearray()
        frames: list[list[int]] = []
        members: list[list] = []
        files: dict[str, bytes] = {}
        listed: list[dict] = []
        for gi, group in enumerate(self.groups):
            tar, placed = tar_bytes(group)
            blob = self.blobs.get(gi) or zstd_frame(tar)
            usize = len(tar)
            if gi in self.blobs:  # a hand-made blob: by default the index tells the truth about it
                try:
                    declared = zstandard.get_frame_parameters(blob).content_size
                except zstandard.ZstdError:
                    declared = -1
                usize = declared if 0 <= declared < 1 << 40 else len(tar)
            frames.append([len(body), len(blob), self.usizes.get(gi, usize), 0])
            body += blob
            for e, off in placed:
                name = e.index_name if e.index_name is not None else e.name
                if e.in_index:
                    members.append([name, gi, off, len(e.data)])
                if e.in_manifest:
                    files[name] = e.data
                    listed.append(file_entry(name, e.data))
        manifest = (
            self.manifest if self.manifest is not None else {"format_version": self.format_version, "files": listed}
        )
        mbytes = self.manifest_bytes if self.manifest_bytes is not None else canonical_json(manifest)
        tar, placed = tar_bytes([Entry(MANIFEST_NAME, mbytes)])
        tar += bytes(2 * TAR_BLOCK)
        blob = zstd_frame(tar)
        frames.append([len(body), len(blob), len(tar), 0])
        members.append([MANIFEST_NAME, len(frames) - 1, placed[0][1], len(mbytes)])
        body += blob
        index = {
            "frames": frames,
            "members": members,
            "manifest": MANIFEST_NAME,
            "manifest_sha256": sha256_hex(mbytes),
            "dictionary": None,
            "dictionary_sha256": None,
        }
        if self.edit_index is not None:
            self.edit_index(index)
        data = assemble(bytes(body), index, major=self.footer_version[0], minor=self.footer_version[1])
        return Forged(data, files, index, manifest)


def forge(*groups: list[Entry], **kw) -> Forged:
    return Forge(groups=list(groups), **kw).build()


def with_dictionary(
    dict_bytes: bytes, members: list[tuple[str, bytes]], *, dict_flag: int = 1, compress_with: bytes | None = None
) -> tuple[bytes, dict[str, bytes]]:
    """An archive whose first frame uses ``dict_bytes`` as its (index-declared) dictionary."""
    files = dict(members)
    tar1, placed1 = tar_bytes([Entry(n, d) for n, d in members])
    blob1 = zstd_frame(tar1, dict_data=compress_with if compress_with is not None else dict_bytes)
    tar2, placed2 = tar_bytes([Entry(DICTIONARY_NAME, dict_bytes)])
    blob2 = zstd_frame(tar2)
    mbytes = canonical_json(manifest_for(files))
    tar3, placed3 = tar_bytes([Entry(MANIFEST_NAME, mbytes)])
    tar3 += bytes(2 * TAR_BLOCK)
    blob3 = zstd_frame(tar3)
    body = blob1 + blob2 + blob3
    frames = [
        [0, len(blob1), len(tar1), dict_flag],
        [len(blob1), len(blob2), len(tar2), 0],
        [len(blob1) + len(blob2), len(blob3), len(tar3), 0],
    ]
    mem = [[e.name, 0, off, len(e.data)] for e, off in placed1]
    mem.append([DICTIONARY_NAME, 1, placed2[0][1], len(dict_bytes)])
    mem.append([MANIFEST_NAME, 2, placed3[0][1], len(mbytes)])
    index = {
        "frames": frames,
        "members": mem,
        "manifest": MANIFEST_NAME,
        "manifest_sha256": sha256_hex(mbytes),
        "dictionary": DICTIONARY_NAME,
        "dictionary_sha256": sha256_hex(dict_bytes),
    }
    return assemble(body, index), files


# --------------------------------------------------------------------------------------------------
# Things that are not archives
# --------------------------------------------------------------------------------------------------


def plain_tar_zst(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tf:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return zstd_frame(buf.getvalue())


def zip_bytes(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return buf.getvalue()


# --------------------------------------------------------------------------------------------------
# Format 2: manifest shards
# --------------------------------------------------------------------------------------------------


def v2_variant(
    kernel: str, i: int, *, target: str = "cuda:90", ir: bool = True, source: str | None = None
) -> tuple[dict, list[tuple[str, bytes]], list[tuple[str, bytes]]]:
    """A variant the manifest model accepts (no Triton needed): (entry, launch members, IR members)."""
    from karchive.format.manifest import Abi, AbiParam, FileRef, Param, Provenance, Target, Variant

    key = hashlib.sha256(f"{kernel}-{target}-{i}".encode()).hexdigest()
    rng = random.Random(key)
    binary = b"\x7fELF" + bytes(rng.randrange(256) for _ in range(300 + 40 * i)) + b"\0" * 200
    meta = canonical_json({"name": kernel, "num_warps": 4, "i": i})
    ptx = (f".version 8.0\n.target sm_90a\n// {kernel} {i}\n" + "mov.u32 %r1, %r2;\n" * (20 + i)).encode()
    backend, arch = target.split(":")
    t = Target(backend, arch, 64 if backend == "hip" else 32)
    base = f"variants/{key}/kernel"
    abi = Abi(
        version=1,
        entry=kernel,
        binary_format="hsaco" if backend == "hip" else "cubin",
        binary_arch=arch if backend == "hip" else f"sm_{arch}a",
        params=(AbiParam("x", "pointer", "*fp32", 0, 8), AbiParam("n", "scalar", "i32", 1, 4)),
        shared=128 * (i % 3),
        num_warps=4,
        warp_size=t.warp_size,
        num_ctas=1,
        cluster_dims=(1, 1, 1),
        cooperative_grid=False,
        pdl=False,
        global_scratch_size=0,
        global_scratch_align=1,
        profile_scratch_size=0,
        profile_scratch_align=1,
    )
    v = Variant(
        kernel=kernel,
        key=key,
        target=t,
        params=(
            Param("x", "*fp32", divisibility=16),
            Param("n", "i32"),
            Param("BLOCK", "constexpr", constexpr=64 << (i % 4), is_constexpr=True),
        ),
        options={"num_warps": 4, "num_stages": 1 + i % 3},
        abi=abi,
        binary=FileRef.for_bytes(f"{base}.{abi.binary_format}", binary),
        metadata=FileRef.for_bytes(f"{base}.json", meta),
        ir={"ptx": FileRef.for_bytes(f"{base}.ptx", ptx)} if ir else {},
        source=source,
        provenance=Provenance("aot", "3.9.0"),
    )
    launch = [(v.binary.path, binary), (v.metadata.path, meta)]
    return v.to_json(), launch, ([(v.ir["ptx"].path, ptx)] if ir else [])


SOURCE_TEXT = b"@triton.jit\ndef k(x, n, BLOCK: tl.constexpr):\n    pass\n"


def honest_v2(
    kernels: dict[str, int] | None = None,
    *,
    dictionary: str = "none",
    ir: bool = True,
    per_frame: int = 2,
    level: int = 3,
) -> tuple[bytes, dict[str, bytes], dict]:
    """A format-2 archive through the real writer: (bytes, {member: bytes}, logical manifest).

    ``kernels`` maps kernel names to variant counts (default: two kernels, three targets between
    them); launch members share frames ``per_frame`` variants at a time, IR one frame per kernel.
    """
    from karchive.format.manifest import FileRef

    kernels = kernels if kernels is not None else {"alpha": 3, "beta": 4}
    source = FileRef.for_bytes(f"sources/{sha256_hex(SOURCE_TEXT)}.py", SOURCE_TEXT)
    targets = ("cuda:80", "cuda:90", "hip:gfx942")
    w = ArchiveWriter(level=level, dictionary=dictionary)
    files: dict[str, bytes] = {source.path: SOURCE_TEXT}
    entries = []
    for kernel, n in sorted(kernels.items()):
        launch_units, ir_units = [], []
        for i in range(n):
            entry, launch, irm = v2_variant(kernel, i, target=targets[i % len(targets)], ir=ir, source=source.path)
            entries.append(entry)
            launch_units.append(launch)
            ir_units.extend(irm)
            files.update(launch)
            files.update(irm)
        for j in range(0, len(launch_units), per_frame):
            w.add_group([m for unit in launch_units[j : j + per_frame] for m in unit])
        if ir_units:
            w.add_group(ir_units, use_dict=False)
    w.add_group([(source.path, SOURCE_TEXT)])
    manifest = {
        "format": "karchive",
        "format_version": "2.0",
        "abi_version": 1,
        "name": "hostile",
        "version": "2",
        "produced_by": {"karchive": "test"},
        "created": None,
        "path_sentinel": "@KARCHIVE_ROOT@",
        "sources": [source.to_json()],
        "variants": sorted(entries, key=lambda e: (e["kernel"], e["key"])),
    }
    return w.to_bytes(manifest), files, manifest


@dataclass
class V2Parts:
    """A format-2 archive taken apart: frames as member lists, the shard documents, the header."""

    content: list[tuple[list[tuple[str, bytes]], bool]]  # content frames: (members, uses the dictionary)
    shards: dict[str, dict]  # shard member name -> decoded document
    dictionary: bytes | None
    header: dict
    footer_version: tuple[int, int] = (2, 0)


def _frame_entries(tar: bytes) -> list[tuple[str, bytes]]:
    from karchive.format.tarheader import parse_header

    out, pos = [], 0
    while pos + TAR_BLOCK <= len(tar):
        h = parse_header(tar[pos : pos + TAR_BLOCK])
        if h is None:
            break
        out.append((h.name, tar[pos + TAR_BLOCK : pos + TAR_BLOCK + h.size]))
        pos += TAR_BLOCK + padded(h.size)
    return out


def take_apart(archive: bytes) -> V2Parts:
    body, index, _ = split(archive)
    dict_bytes = None
    raw = []
    for off, length, _usize, _flag in index["frames"]:
        raw.append(body[off : off + length])
    # The dictionary frame is plain: find it first so that dictionary frames can be decoded.
    plain = zstandard.ZstdDecompressor()
    decoded: list[bytes | None] = []
    for blob, (_o, _l, _u, flag) in zip(raw, index["frames"]):
        decoded.append(None if flag else plain.decompress(blob))
    for tar in decoded:
        for name, data in _frame_entries(tar or b""):
            if name == DICTIONARY_NAME:
                dict_bytes = data
    with_dict = zstandard.ZstdDecompressor(dict_data=zstandard.ZstdCompressionDict(dict_bytes)) if dict_bytes else None
    content, shards, header = [], {}, None
    for blob, tar, (_o, _l, _u, flag) in zip(raw, decoded, index["frames"]):
        entries = _frame_entries(tar if tar is not None else with_dict.decompress(blob))
        names = [n for n, _ in entries]
        if names == [MANIFEST_NAME]:
            header = json.loads(entries[0][1])
        elif names == [DICTIONARY_NAME]:
            continue
        elif names and all(n.startswith("karchive/shards/") for n in names):  # 2.1: a whole shard and its parts
            shards.update((n, json.loads(d)) for n, d in entries)
        else:
            content.append((entries, bool(flag)))
    return V2Parts(content, shards, dict_bytes, header)


def put_together(
    parts: V2Parts,
    *,
    shard_bytes: dict[str, bytes] | None = None,
    header_bytes: bytes | None = None,
    fix_header: bool = True,
    edit_index: Callable[[dict], object] | None = None,
    unlisted: set[str] = frozenset(),
) -> bytes:
    """Re-assemble ``parts`` (edited or not). Shard bytes default to the canonical JSON of the
    documents; with ``fix_header`` the header's shard sizes and digests follow them, so a test breaks
    exactly the rule it means to. Members no shard locates are listed by the index, except ``unlisted``."""
    from karchive.format.shard import LOCATED

    located: set[str] = set()
    for doc in parts.shards.values():
        cols = doc.get("variants") if isinstance(doc, dict) else None
        cols = cols if isinstance(cols, dict) else {}
        keys = cols.get("key") if isinstance(cols.get("key"), list) else []
        for name in ("files.binary", "files.metadata", "files.ir"):
            col = cols.get(name)
            for key, value in zip(keys, col if isinstance(col, list) else []):
                refs = [value] if isinstance(value, list) else list(value.values()) if isinstance(value, dict) else []
                located.update(
                    f"variants/{key}/" + r[0][2:] if r[0].startswith("./") else r[0]
                    for r in refs
                    if isinstance(r, list) and len(r) == LOCATED and isinstance(r[0], str)
                )
    frames: list[tuple[bytes, bool, list]] = []
    for entries, flag in parts.content:
        tar, placed = tar_bytes([Entry(n, d) for n, d in entries])
        frames.append((tar, flag and parts.dictionary is not None, placed))
    header = json.loads(json.dumps(parts.header))
    shard_bytes = shard_bytes or {}
    for name, doc in parts.shards.items():
        raw = shard_bytes.get(name, canonical_json(doc))
        tar, placed = tar_bytes([Entry(name, raw)])
        frames.append((tar, False, placed))
        table = header.get("shards") if isinstance(header, dict) else None
        if fix_header and isinstance(table, list):
            for row in table:
                if isinstance(row, dict) and row.get("path") == name:
                    row["size"], row["sha256"] = len(raw), sha256_hex(raw)
    if parts.dictionary is not None:
        tar, placed = tar_bytes([Entry(DICTIONARY_NAME, parts.dictionary)])
        frames.append((tar, False, placed))
    hbytes = header_bytes if header_bytes is not None else canonical_json(header)
    tar, placed = tar_bytes([Entry(MANIFEST_NAME, hbytes)])
    frames.append((tar + bytes(2 * TAR_BLOCK), False, placed))
    body = bytearray()
    index_frames, members = [], []
    for i, (tar, flag, placed) in enumerate(frames):
        blob = zstd_frame(tar, dict_data=parts.dictionary if flag else None)
        index_frames.append([len(body), len(blob), len(tar), int(flag)])
        body += blob
        for e, off in placed:
            if e.name not in located and e.name not in unlisted:
                members.append([e.name, i, off, len(e.data)])
    index = {
        "frames": index_frames,
        "members": members,
        "manifest": MANIFEST_NAME,
        "manifest_sha256": sha256_hex(hbytes),
        "dictionary": DICTIONARY_NAME if parts.dictionary is not None else None,
        "dictionary_sha256": sha256_hex(parts.dictionary) if parts.dictionary is not None else None,
    }
    if edit_index is not None:
        edit_index(index)
    return assemble(bytes(body), index, major=parts.footer_version[0], minor=parts.footer_version[1])
