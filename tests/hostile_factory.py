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
from dataclasses import dataclass, field
from typing import Callable

import zstandard

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
from karchive.errors import FormatError
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
    """(archive bytes, {member name: bytes}) for the given groups (default: a small three-frame archive)."""
    groups = SMALL_GROUPS if groups is None else groups
    files = {n: d for g in groups for n, d in g}
    w = ArchiveWriter(level=level, dictionary=dictionary)
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


def raw_tar_header(name: bytes | str, size: int, *, typeflag: bytes = b"0", prefix: bytes | str = b"",
                   linkname: bytes | str = b"", magic: bytes = b"ustar\x0000", size_field: bytes | None = None,
                   fix_checksum: bool = True) -> bytes:
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


def zstd_frame(data: bytes, *, level: int = 3, content_size: bool = True, checksum: bool = True,
               dict_data: bytes | None = None) -> bytes:
    kw = dict(level=level, write_content_size=content_size, write_checksum=checksum)
    if dict_data is not None:
        kw["dict_data"] = zstandard.ZstdCompressionDict(dict_data)
    return zstandard.ZstdCompressor(**kw).compress(data)


def rle_frame(total: int, *, byte: int = 0, declared: int | None = None, window_log: int = 17,
              single_segment: bool = False, block: int = 128 * 1024) -> bytes:
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


def footer(index_offset: int, index_length: int, digest: bytes, *, major: int = 1, minor: int = 0,
           flags: int = 0, tag: bytes = FOOTER_TAG) -> bytes:
    payload = FOOTER_PAYLOAD.pack(tag, major, minor, flags, index_offset, index_length, digest)
    return skippable(FOOTER_FRAME_MAGIC, payload)


def assemble(body: bytes, index: dict | bytes, *, index_payload: bytes | None = None, major: int = 1,
             minor: int = 0, flags: int = 0) -> bytes:
    """Frames + index frame + footer; the footer's digest always matches the index payload given."""
    payload = compress_index(index) if index_payload is None else index_payload
    index_frame = skippable(INDEX_FRAME_MAGIC, payload)
    return body + index_frame + footer(len(body), len(index_frame), hashlib.sha256(payload).digest(),
                                       major=major, minor=minor, flags=flags)


def split(archive: bytes) -> tuple[bytes, dict, bytes]:
    """(frames body, decoded index, footer) of a well-formed archive."""
    _, _, _, _, off, length, _ = FOOTER_PAYLOAD.unpack_from(archive, len(archive) - FOOTER_PAYLOAD.size)
    payload = archive[off + SKIPPABLE_HEADER.size : off + length]
    index = json.loads(zstandard.ZstdDecompressor().decompress(payload))
    return archive[:off], index, archive[-(SKIPPABLE_HEADER.size + FOOTER_PAYLOAD.size):]


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
        manifest = self.manifest if self.manifest is not None else {"format_version": self.format_version,
                                                                    "files": listed}
        mbytes = self.manifest_bytes if self.manifest_bytes is not None else canonical_json(manifest)
        tar, placed = tar_bytes([Entry(MANIFEST_NAME, mbytes)])
        tar += bytes(2 * TAR_BLOCK)
        blob = zstd_frame(tar)
        frames.append([len(body), len(blob), len(tar), 0])
        members.append([MANIFEST_NAME, len(frames) - 1, placed[0][1], len(mbytes)])
        body += blob
        index = {"frames": frames, "members": members, "manifest": MANIFEST_NAME,
                 "manifest_sha256": sha256_hex(mbytes), "dictionary": None, "dictionary_sha256": None}
        if self.edit_index is not None:
            self.edit_index(index)
        data = assemble(bytes(body), index, major=self.footer_version[0], minor=self.footer_version[1])
        return Forged(data, files, index, manifest)


def forge(*groups: list[Entry], **kw) -> Forged:
    return Forge(groups=list(groups), **kw).build()


def with_dictionary(dict_bytes: bytes, members: list[tuple[str, bytes]], *, dict_flag: int = 1,
                    compress_with: bytes | None = None) -> tuple[bytes, dict[str, bytes]]:
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
    frames = [[0, len(blob1), len(tar1), dict_flag], [len(blob1), len(blob2), len(tar2), 0],
              [len(blob1) + len(blob2), len(blob3), len(tar3), 0]]
    mem = [[e.name, 0, off, len(e.data)] for e, off in placed1]
    mem.append([DICTIONARY_NAME, 1, placed2[0][1], len(dict_bytes)])
    mem.append([MANIFEST_NAME, 2, placed3[0][1], len(mbytes)])
    index = {"frames": frames, "members": mem, "manifest": MANIFEST_NAME, "manifest_sha256": sha256_hex(mbytes),
             "dictionary": DICTIONARY_NAME, "dictionary_sha256": sha256_hex(dict_bytes)}
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
