"""Read .karc containers from untrusted bytes: bounded, digest-checked, random access.

Opening costs one tail read (footer, index, dictionary, manifest) — two if the tail is larger than
:data:`TAIL_READ` — and each member costs one read of its frame. Nothing is decompressed before its
declared size has been checked against the limits, and no member is returned before its sha256
matches the manifest.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import zstandard

from ..core.jsonio import parse_json
from ..errors import (
    FormatError,
    IntegrityError,
    LimitExceededError,
    NotAnArchiveError,
    SchemaError,
    UnsafeMemberError,
    UnsupportedVersionError,
)
from .constants import (
    DICTIONARY_NAME,
    FOOTER_FRAME_MAGIC,
    FOOTER_PAYLOAD,
    FOOTER_SIZE,
    FOOTER_TAG,
    FORMAT_VERSION,
    INDEX_FRAME_MAGIC,
    MANIFEST_NAME,
    SKIPPABLE_HEADER,
    TAIL_READ,
    TAR_BLOCK,
    ZSTD_FRAME_MAGIC,
)
from .source import BytesSource, RangeSource
from .tarheader import check_member_name, padded, parse_header


@dataclass(frozen=True)
class Limits:
    """Upper bounds a reader enforces before allocating; raise them only for archives you trust more."""

    max_frame_bytes: int = 512 * 1024 * 1024
    max_index_bytes: int = 64 * 1024 * 1024
    max_manifest_bytes: int = 64 * 1024 * 1024
    max_dictionary_bytes: int = 8 * 1024 * 1024
    max_members: int = 1_000_000
    max_window_bytes: int = 1 << 27
    #: JSON values (numbers, strings, arrays, objects) in the index or the manifest. Parsed JSON costs
    #: up to ~60 bytes per value however short its text, so this, not the byte limits, bounds memory.
    max_json_values: int = 2_000_000
    #: Nesting depth of the manifest (walkers of it recurse).
    max_json_depth: int = 64
    #: Decompressed frames kept in the reader's cache, in bytes.
    max_cache_bytes: int = 256 * 1024 * 1024


@dataclass(frozen=True)
class Member:
    name: str
    frame: int
    offset: int
    size: int


@dataclass(frozen=True)
class Frame:
    offset: int
    length: int
    size: int
    uses_dict: bool


def parse_version(text: Any) -> tuple[int, int]:
    if not isinstance(text, str) or text.count(".") != 1 or len(text) > 21:
        raise SchemaError(f"bad format_version {text!r}")
    major, minor = text.split(".")
    if not (major.isascii() and major.isdigit() and minor.isascii() and minor.isdigit()):
        raise SchemaError(f"bad format_version {text!r}")
    return int(major), int(minor)


def check_format_version(found: tuple[int, int], what: str = "archive format") -> None:
    if found[0] > FORMAT_VERSION[0]:
        raise UnsupportedVersionError(
            f"{what} version {found[0]}.{found[1]} is newer than this reader supports "
            f"({FORMAT_VERSION[0]}.{FORMAT_VERSION[1]}); upgrade karchive",
            found=f"{found[0]}.{found[1]}", supported=f"{FORMAT_VERSION[0]}.{FORMAT_VERSION[1]}")
    if found[0] < 1:
        raise UnsupportedVersionError(f"{what} version {found[0]}.{found[1]} is not supported",
                                      found=f"{found[0]}.{found[1]}",
                                      supported=f"{FORMAT_VERSION[0]}.{FORMAT_VERSION[1]}")


def scan_manifest(root: Any, max_depth: int) -> list[dict]:
    """Every ``{"path", "size", "sha256"}`` object in a manifest, wherever it sits, in one pass that
    also enforces the nesting limit. Iterative, so a deeply nested hostile manifest cannot exhaust
    the interpreter's stack; written as a plain loop because it runs on every open."""
    found: list[dict] = []
    stack: list[tuple[Any, int]] = [(root, 1)]
    pop, push, containers = stack.pop, stack.append, (dict, list)
    while stack:
        node, depth = pop()
        if depth > max_depth:
            raise LimitExceededError(f"manifest is nested deeper than {max_depth} levels")
        if type(node) is dict:
            if "sha256" in node and "size" in node and type(node.get("path")) is str:
                found.append(node)
            children = node.values()
        else:
            children = node
        for child in children:
            if type(child) in containers:
                push((child, depth + 1))
    return found


def load_json(raw: bytes, what: str, limits: "Limits") -> Any:
    """Parse untrusted canonical JSON (ASCII, no duplicate keys, no NaN) within the value budget."""
    return parse_json(raw, what, error=FormatError, strict=True, max_values=limits.max_json_values,
                      limit_error=LimitExceededError)


def compress_bound(size: int) -> int:
    """zstd's ZSTD_COMPRESSBOUND plus some slack: no honest frame of ``size`` bytes is longer."""
    return size + (size >> 8) + ((128 * 1024 - size) >> 11 if size < 128 * 1024 else 0) + 1024


def _as_int(value: Any, what: str) -> int:
    if type(value) is not int or value < 0:
        raise FormatError(f"index: {what} must be a non-negative integer, got {value!r}")
    return value


class ArchiveReader:
    """Random access to one archive. Thread-safe; decompressed frames are cached (a few, LRU)."""

    def __init__(self, source: RangeSource, limits: Limits = Limits(), frame_cache: int = 4) -> None:
        self.source = source
        self.limits = limits
        self._lock = threading.Lock()
        self._cache: OrderedDict[int, bytes] = OrderedDict()
        self._cache_size = frame_cache
        self._cache_bytes = 0
        self._tail_start = 0
        self._tail = b""
        self._open()

    # -- construction -----------------------------------------------------------------------------
    @classmethod
    def from_bytes(cls, data: bytes, label: str = "<bytes>", **kw: Any) -> "ArchiveReader":
        return cls(BytesSource(data, label), **kw)

    @classmethod
    def from_path(cls, path: Any, **kw: Any) -> "ArchiveReader":
        from .source import FileSource

        return cls(FileSource(path), **kw)

    def _bytes_at(self, offset: int, length: int) -> bytes:
        if offset >= self._tail_start and offset + length <= self._tail_start + len(self._tail):
            start = offset - self._tail_start
            return self._tail[start : start + length]
        return self.source.read(offset, length)

    def _open(self) -> None:
        size = self.source.size
        where = self.source.describe()
        if size < FOOTER_SIZE:
            raise NotAnArchiveError(f"{where}: {size} bytes is too small to be a karchive archive")
        tail_len = min(size, TAIL_READ)
        self._tail_start = size - tail_len
        self._tail = self.source.read(self._tail_start, tail_len)
        footer = self._tail[-FOOTER_SIZE:]
        magic, length = SKIPPABLE_HEADER.unpack_from(footer)
        if magic != FOOTER_FRAME_MAGIC or length != FOOTER_PAYLOAD.size:
            raise NotAnArchiveError(f"{where}: no karchive footer (not a .karc archive, or truncated)")
        tag, major, minor, _flags, index_offset, index_length, index_digest = FOOTER_PAYLOAD.unpack_from(
            footer, SKIPPABLE_HEADER.size
        )
        if tag != FOOTER_TAG:
            raise NotAnArchiveError(f"{where}: footer tag mismatch (not a .karc archive)")
        self.format_version = (major, minor)
        check_format_version(self.format_version)
        if index_offset + index_length != size - FOOTER_SIZE or index_length < SKIPPABLE_HEADER.size:
            raise FormatError(f"{where}: footer points outside the file (truncated or corrupt)")
        if index_length > self.limits.max_index_bytes:
            raise LimitExceededError(f"{where}: index of {index_length} bytes exceeds the limit")
        if index_offset < self._tail_start:
            # A large index: fetch everything from the index on in one more read.
            self._tail_start = index_offset
            self._tail = self.source.read(index_offset, size - index_offset)
        raw_index = self._bytes_at(index_offset, index_length)
        magic, payload_len = SKIPPABLE_HEADER.unpack_from(raw_index)
        if magic != INDEX_FRAME_MAGIC or payload_len != index_length - SKIPPABLE_HEADER.size:
            raise FormatError(f"{where}: index frame header is corrupt")
        payload = raw_index[SKIPPABLE_HEADER.size :]
        if hashlib.sha256(payload).digest() != index_digest:
            raise IntegrityError(f"{where}: index digest does not match the footer (corrupt or tampered)")
        self._parse_index(self._decompress(payload, self.limits.max_index_bytes, None, "index"), index_offset)
        self._load_dictionary_and_manifest()

    def _parse_index(self, raw: bytes, index_offset: int) -> None:
        index = load_json(raw, "index", self.limits)
        if not isinstance(index, dict) or not isinstance(index.get("frames"), list) or not isinstance(
            index.get("members"), list
        ):
            raise FormatError("index lacks frames/members")
        if index.get("manifest") != MANIFEST_NAME:
            raise FormatError(f"index: manifest must be {MANIFEST_NAME!r}, got {index.get('manifest')!r}")
        if index.get("dictionary") not in (None, DICTIONARY_NAME):
            raise FormatError(f"index: dictionary must be {DICTIONARY_NAME!r} or null, got {index.get('dictionary')!r}")
        if len(index["frames"]) > self.limits.max_members + 2:
            raise LimitExceededError(f"index lists {len(index['frames'])} frames; the limit is {self.limits.max_members + 2}")
        frames = []
        expected = 0
        for entry in index["frames"]:
            if not isinstance(entry, list) or len(entry) != 4:
                raise FormatError(f"index: bad frame entry {entry!r}")
            off, length, usize, flag = (_as_int(v, "frame field") for v in entry)
            if off != expected or length == 0:
                raise FormatError("index: frames are not contiguous from the start of the file")
            if flag not in (0, 1):
                raise FormatError(f"index: bad dictionary flag {flag!r}")
            if usize > self.limits.max_frame_bytes:
                raise LimitExceededError(
                    f"frame {len(frames)} claims {usize} decompressed bytes; the limit is {self.limits.max_frame_bytes}"
                )
            if length > compress_bound(usize):
                # Reading a frame costs its compressed length in memory: bound it by what it may decode to.
                raise LimitExceededError(
                    f"frame {len(frames)} is {length} bytes long, more than any zstd frame of {usize} bytes needs"
                )
            frames.append(Frame(off, length, usize, bool(flag)))
            expected = off + length
        if expected != index_offset:
            raise FormatError("index: frames do not end where the index begins")
        if len(index["members"]) > self.limits.max_members:
            raise LimitExceededError(f"index lists {len(index['members'])} members; the limit is {self.limits.max_members}")
        members: dict[str, Member] = {}
        for entry in index["members"]:
            if not isinstance(entry, list) or len(entry) != 4:
                raise FormatError(f"index: bad member entry {entry!r}")
            name = check_member_name(entry[0])
            frame, offset, size = (_as_int(v, "member field") for v in entry[1:])
            if frame >= len(frames) or offset % TAR_BLOCK or offset < TAR_BLOCK or offset + size > frames[frame].size:
                raise FormatError(f"index: member {name!r} lies outside its frame")
            if name in members:
                raise FormatError(f"index: duplicate member {name!r}")
            members[name] = Member(name, frame, offset, size)
        # Each member's header and data must lie apart from every other's; otherwise one member's
        # bytes would be another's content when the frame is read as the tar stream it claims to be.
        previous: Member | None = None
        by_frame: list[list[Member]] = [[] for _ in frames]
        for m in sorted(members.values(), key=lambda m: (m.frame, m.offset)):
            if previous is not None and previous.frame == m.frame and m.offset - TAR_BLOCK < previous.offset + padded(previous.size):
                raise FormatError(f"index: members {previous.name!r} and {m.name!r} overlap")
            by_frame[m.frame].append(m)
            previous = m
        if any(not listed for listed in by_frame):
            raise FormatError(f"index: frame {[bool(x) for x in by_frame].index(False)} holds no member")
        self._frame_members = by_frame
        self.frames = frames
        self.members = members
        # Keep only what later steps consult, not a hostile index's extra keys.
        self._index = {k: index.get(k) for k in ("manifest", "manifest_sha256", "dictionary", "dictionary_sha256")}

    def _load_dictionary_and_manifest(self) -> None:
        index = self._index
        needed = [self.members.get(MANIFEST_NAME)]
        dict_name = index.get("dictionary")
        if dict_name is not None:
            needed.append(self.members.get(dict_name))
        if any(m is None for m in needed):
            raise FormatError("index names a manifest or dictionary member that does not exist")
        # Their frames are decoded whole while opening: bound them by the member limits, not the frame limit.
        limit_of = {MANIFEST_NAME: self.limits.max_manifest_bytes, DICTIONARY_NAME: self.limits.max_dictionary_bytes}
        for m in needed:
            frame = self.frames[m.frame]
            if frame.uses_dict:
                raise FormatError(f"{m.name} must be in a frame compressed without the dictionary")
            if m.size > limit_of[m.name] or frame.size > limit_of[m.name] + 4 * TAR_BLOCK:
                raise LimitExceededError(
                    f"{m.name} ({m.size} bytes in a frame of {frame.size}) exceeds the limit of {limit_of[m.name]} bytes"
                )
        # Honest archives put them right before the index: fetch them with the tail in one read, but
        # never a range wider than the frames themselves.
        spans = {m.frame: self.frames[m.frame] for m in needed}
        first = min(f.offset for f in spans.values())
        if first < self._tail_start and self._tail_start - first <= sum(f.length for f in spans.values()):
            self._tail = self.source.read(first, self._tail_start - first) + self._tail
            self._tail_start = first
        self._dctx_plain = zstandard.ZstdDecompressor(max_window_size=self.limits.max_window_bytes)
        self._dctx_dict = None
        self._dict_bytes: bytes | None = None
        if dict_name is not None:
            dict_bytes = self._member_unchecked(self.members[dict_name])
            if hashlib.sha256(dict_bytes).hexdigest() != index.get("dictionary_sha256"):
                raise IntegrityError("dictionary digest does not match the index (corrupt or tampered)")
            try:
                self._dctx_dict = zstandard.ZstdDecompressor(
                    dict_data=zstandard.ZstdCompressionDict(dict_bytes), max_window_size=self.limits.max_window_bytes
                )
            except zstandard.ZstdError as exc:
                raise FormatError(f"{dict_name} is not a usable zstd dictionary: {exc}") from exc
            self._dict_bytes = dict_bytes
        elif any(f.uses_dict for f in self.frames):
            raise FormatError("frames need a dictionary but the index names none")
        raw = self._member_unchecked(self.members[MANIFEST_NAME])
        if hashlib.sha256(raw).hexdigest() != index.get("manifest_sha256"):
            raise IntegrityError("manifest digest does not match the index (corrupt or tampered)")
        manifest = load_json(raw, "manifest", self.limits)
        if not isinstance(manifest, dict):
            raise SchemaError("manifest is not a JSON object")
        check_format_version(parse_version(manifest.get("format_version")), "manifest format")
        entries = scan_manifest(manifest, self.limits.max_json_depth)
        self.manifest = manifest
        self.manifest_bytes = raw
        self._digests: dict[str, tuple[int, str]] = {}
        for entry in entries:
            path, ref = entry["path"], (entry["size"], entry["sha256"])
            if self._digests.setdefault(path, ref) != ref:
                raise SchemaError(f"manifest lists {path!r} twice with different sizes or digests")
        # The tail buffer only served opening; keep memory bounded afterwards.
        self._tail = b""
        self._tail_start = self.source.size

    @property
    def has_dictionary(self) -> bool:
        return self._dict_bytes is not None

    # -- frames and members ------------------------------------------------------------------------
    def _decompress(self, blob: bytes, declared: int, dctx: zstandard.ZstdDecompressor | None, what: str) -> bytes:
        if len(blob) < 4 or int.from_bytes(blob[:4], "little") != ZSTD_FRAME_MAGIC:
            raise FormatError(f"{what}: not a zstd frame")
        try:
            params = zstandard.get_frame_parameters(blob)
        except zstandard.ZstdError as exc:
            raise FormatError(f"{what}: bad zstd frame header: {exc}") from exc
        size = params.content_size
        if size in (zstandard.CONTENTSIZE_UNKNOWN, zstandard.CONTENTSIZE_ERROR):
            raise FormatError(f"{what}: zstd frame does not declare its size")
        if size > declared:
            raise LimitExceededError(f"{what}: frame declares {size} bytes, more than the {declared} allowed")
        # One-shot decompression does not apply max_window_size itself: check the header here.
        if params.window_size > self.limits.max_window_bytes:
            raise LimitExceededError(
                f"{what}: frame needs a {params.window_size}-byte window; the limit is {self.limits.max_window_bytes}"
            )
        dctx = dctx or zstandard.ZstdDecompressor(max_window_size=self.limits.max_window_bytes)
        try:
            out = dctx.decompress(blob, max_output_size=size, allow_extra_data=False)
        except zstandard.ZstdError as exc:
            raise FormatError(f"{what}: zstd decompression failed: {exc}") from exc
        if len(out) != size:
            raise FormatError(f"{what}: decompressed {len(out)} bytes, frame declared {size}")
        return out

    def frame_bytes(self, index: int) -> bytes:
        """One frame, decompressed (and cached)."""
        with self._lock:
            cached = self._cache.get(index)
            if cached is not None:
                self._cache.move_to_end(index)
                return cached
        frame = self.frames[index]
        blob = self._bytes_at(frame.offset, frame.length)
        dctx = self._dctx_dict if frame.uses_dict else self._dctx_plain
        with self._lock:  # zstd contexts are not safe for concurrent use
            data = self._decompress(blob, frame.size, dctx, f"frame {index}")
            if len(data) != frame.size:
                raise FormatError(f"frame {index}: size differs from the index")
            self._check_layout(index, data)
            if index not in self._cache and len(data) <= self.limits.max_cache_bytes:
                self._cache[index] = data
                self._cache_bytes += len(data)
                while len(self._cache) > self._cache_size or self._cache_bytes > self.limits.max_cache_bytes:
                    self._cache_bytes -= len(self._cache.popitem(last=False)[1])
        return data

    def _check_layout(self, index: int, data: bytes) -> None:
        """The frame must be exactly the tar entries the index lists for it: nothing hidden between,
        before or after them (a link, a pax header, a second copy of a name), zero padding, and the
        end-of-archive marker only at the end of the last frame. So any frame the reader accepts also
        means the same thing to ``tar``."""
        def stray(pos: int) -> str:
            """What sits at ``pos`` where nothing should; raises the specific error for links, pax, bad names."""
            if len(data) - pos < TAR_BLOCK:
                return f"{len(data) - pos} stray bytes"
            try:
                header = parse_header(data[pos : pos + TAR_BLOCK])
            except UnsafeMemberError:
                raise
            except FormatError:
                return "bytes that are not a tar header"
            return f"tar entry {header.name!r}" if header is not None else "a zero block"

        pos = 0
        for m in self._frame_members[index]:
            if m.offset - TAR_BLOCK != pos:
                raise FormatError(f"frame {index}: {stray(pos)} at {pos} is not listed in the index")
            header = parse_header(data[pos : pos + TAR_BLOCK])
            if header is None or header.name != m.name or header.size != m.size:
                raise FormatError(f"tar header of {m.name!r} does not match the index")
            end = m.offset + m.size
            pos = m.offset + padded(m.size)
            if data[end:pos].count(0) != pos - end:
                raise FormatError(f"frame {index}: padding after {m.name!r} is not zero")
        rest = len(data) - pos
        if index != len(self.frames) - 1:
            if rest:
                raise FormatError(f"frame {index}: {stray(pos)} after its last member, not listed in the index")
        elif rest < 2 * TAR_BLOCK or rest % TAR_BLOCK or data[pos:].count(0) != rest:
            if rest >= TAR_BLOCK and data[pos : pos + TAR_BLOCK].count(0) != TAR_BLOCK:
                raise FormatError(f"frame {index}: {stray(pos)} after its last member, not listed in the index")
            raise FormatError(f"frame {index}: the last frame must end with the tar end-of-archive marker")

    def _member_unchecked(self, member: Member) -> bytes:
        frame = self.frame_bytes(member.frame)
        header = parse_header(frame[member.offset - TAR_BLOCK : member.offset])
        if header is None or header.name != member.name or header.size != member.size:
            raise FormatError(f"tar header of {member.name!r} does not match the index")
        return frame[member.offset : member.offset + member.size]

    def read(self, name: str) -> bytes:
        """A member's bytes, verified against the manifest's size and sha256.

        The manifest and the dictionary, which the index's digests cover, are returned as verified
        when the archive was opened; any other member the manifest does not list is refused.
        """
        member = self.members.get(name)
        if member is None:
            raise FormatError(f"no member {name!r} in {self.source.describe()}")
        if name == MANIFEST_NAME:
            return self.manifest_bytes
        if name == DICTIONARY_NAME and self._dict_bytes is not None:
            return self._dict_bytes
        expected = self._digests.get(name)
        if expected is None:
            raise IntegrityError(f"member {name!r} has no digest in the manifest; refusing to trust it")
        data = self._member_unchecked(member)
        digest = hashlib.sha256(data).hexdigest()
        if len(data) != expected[0] or digest != expected[1]:
            raise IntegrityError(f"member {name!r}: size or sha256 differs from the manifest (corrupt or tampered)",
                                 source=self.source.describe(), member=name, expected=expected[1], actual=digest)
        return data

    # -- full check --------------------------------------------------------------------------------
    def verify(self) -> list[str]:
        """Decode every frame and walk its tar stream; return problems (empty means intact)."""
        problems: list[str] = []
        seen: set[str] = set()
        for i, frame in enumerate(self.frames):
            try:
                data = self.frame_bytes(i)
            except FormatError as exc:
                problems.append(str(exc))
                continue
            pos = 0
            end_blocks = 0
            while pos < len(data):
                try:
                    header = parse_header(data[pos : pos + TAR_BLOCK])
                except FormatError as exc:
                    problems.append(f"frame {i} at {pos}: {exc}")
                    break
                if header is None:
                    end_blocks += 1
                    pos += TAR_BLOCK
                    continue
                if end_blocks:
                    problems.append(f"frame {i}: data after the end-of-archive marker")
                    break
                member = self.members.get(header.name)
                if member is None or member.frame != i or member.offset != pos + TAR_BLOCK or member.size != header.size:
                    problems.append(f"frame {i}: tar member {header.name!r} is not where the index says")
                if header.name in seen:
                    problems.append(f"duplicate tar member {header.name!r}")
                seen.add(header.name)
                pos += TAR_BLOCK + padded(header.size)
            if end_blocks and i != len(self.frames) - 1:
                problems.append(f"frame {i}: end-of-archive marker before the last frame")
        missing = set(self.members) - seen
        problems.extend(f"index member {name!r} has no tar header" for name in sorted(missing))
        for name in sorted(self._digests):
            if name not in self.members:
                problems.append(f"manifest file {name!r} is missing from the archive")
                continue
            try:
                self.read(name)
            except FormatError as exc:
                problems.append(str(exc))
        unlisted = set(self.members) - set(self._digests) - {MANIFEST_NAME, self._index.get("dictionary")}
        problems.extend(f"member {name!r} is not listed in the manifest" for name in sorted(unlisted))
        return problems
