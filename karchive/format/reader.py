"""Read .karc containers from untrusted bytes: bounded, digest-checked, random access.

Opening costs one tail read (footer, index, dictionary, manifest) — two if the tail is larger than
:data:`TAIL_READ` — and each member costs one read of its frame. Nothing is decompressed before its
declared size has been checked against the limits, and no member is returned before its sha256
matches the manifest.

Format 2 (spec/FORMAT.md §6.5) keeps each kernel's variants, and where their members lie, in a shard
of its own: opening reads the manifest's header only, and a kernel's shard is read (one more range,
digest-checked against the header) the first time that kernel's variants or members are asked for.
"""

from __future__ import annotations

import gc
import hashlib
import threading
from array import array
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import chain, groupby
from operator import add, itemgetter, le
from typing import Any, NamedTuple

import zstandard

from ..core.jsonio import canonical_json, parse_json
from ..errors import (
    DigestMismatchError,
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
    READABLE_MAJORS,
    SKIPPABLE_HEADER,
    TAIL_READ,
    TAR_BLOCK,
    ZSTD_FRAME_MAGIC,
)
from .manifest import KernelSummary, Manifest, Variant, check_kernel_name, target_label, target_labels
from .names import select_kernels
from .shard import Located, decode_shard, int_column, shard_variants
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
    #: Format 2: manifest shards (one per kernel), each at most ``max_manifest_bytes``.
    max_shards: int = 100_000


class Member(NamedTuple):
    name: str
    frame: int
    offset: int  # of the data in the decompressed frame (its tar header is the 512 bytes before)
    size: int


class Frame(NamedTuple):
    offset: int
    length: int
    size: int  # decompressed
    uses_dict: bool


class FrameTable(Sequence[Frame]):
    """The index's frames as four columns, a :class:`Frame` made when one is asked for: an archive of
    10,000 variants has a thousand frames or more, opened for one or two of them. The columns are
    arrays of machine integers where the values fit (they do, once checked against the file's size):
    no int object per field kept alive, and nothing for the garbage collector to walk."""

    def __init__(
        self, offsets: Sequence[int], lengths: Sequence[int], sizes: Sequence[int], flags: Sequence[int]
    ) -> None:
        columns: tuple[Sequence[int], ...] = (offsets, lengths, sizes, flags)
        try:
            columns = tuple(array("q", c) for c in columns)
        except OverflowError:  # a size past 2**63 (only under limits raised that far): keep the lists
            pass
        self._columns = columns

    def __len__(self) -> int:
        return len(self._columns[0])

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        o, n, s, f = self._columns
        return Frame(o[i], n[i], s[i], bool(f[i]))

    def __iter__(self) -> Iterator[Frame]:
        o, n, s, f = self._columns
        return map(Frame, o, n, s, map(bool, f))

    def size_of(self, i: int) -> int:
        """Frame ``i``'s decompressed size, without making its :class:`Frame`."""
        return self._columns[2][i]

    def any_dictionary(self) -> bool:
        """Whether some frame uses the dictionary, without making a Frame per frame."""
        return any(self._columns[3])


class _FrameMembers(dict):
    """Frame number -> the members listed for it, [] for a frame nothing lists yet: filled as the
    index and the shards are read, so that opening an archive of many frames allocates nothing per frame."""

    def __missing__(self, frame: int) -> list[Member]:
        return []


def parse_version(text: Any) -> tuple[int, int]:
    major, _, minor = text.partition(".") if isinstance(text, str) and len(text) <= 21 else ("", "", "")
    if not (major.isascii() and major.isdigit() and minor.isascii() and minor.isdigit()):
        raise SchemaError(f"bad format_version {text!r}", where="format_version")
    return int(major), int(minor)


def check_format_version(found: tuple[int, int], what: str = "archive format") -> None:
    if found[0] > max(READABLE_MAJORS):
        raise UnsupportedVersionError(
            f"{what} version {found[0]}.{found[1]} is newer than this reader supports "
            f"({FORMAT_VERSION[0]}.{FORMAT_VERSION[1]}); upgrade karchive",
            found=f"{found[0]}.{found[1]}",
            supported=f"{FORMAT_VERSION[0]}.{FORMAT_VERSION[1]}",
        )
    if found[0] not in READABLE_MAJORS:
        raise UnsupportedVersionError(
            f"{what} version {found[0]}.{found[1]} is not supported",
            found=f"{found[0]}.{found[1]}",
            supported=f"{FORMAT_VERSION[0]}.{FORMAT_VERSION[1]}",
        )


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
            raise LimitExceededError(f"manifest is nested deeper than {max_depth} levels", limit=max_depth, value=depth)
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


def load_json(raw: bytes, what: str, limits: Limits) -> Any:
    """Parse untrusted canonical JSON (ASCII, no duplicate keys, no NaN) within the value budget."""
    return parse_json(
        raw,
        what,
        error=FormatError,
        strict=True,
        max_values=limits.max_json_values,
        limit_error=LimitExceededError,
        max_depth=limits.max_json_depth,
    )


def compress_bound(size: int) -> int:
    """zstd's ZSTD_COMPRESSBOUND plus some slack: no honest frame of ``size`` bytes is longer."""
    return size + (size >> 8) + ((128 * 1024 - size) >> 11 if size < 128 * 1024 else 0) + 1024


def _as_int(value: Any, what: str) -> int:
    if type(value) is not int or value < 0:
        raise FormatError(f"index: {what} must be a non-negative integer, got {value!r}")
    return value


#: Of a located member (name, frame, offset, size, sha256): where it is placed, and what it must hash to.
_PLACED, _EXPECTED = itemgetter(0, 1, 2, 3), itemgetter(3, 4)

#: Frame owners (format 2): not yet claimed by a loaded shard, or listed by the index itself.
_UNCLAIMED, _ROOT = -1, -2


@dataclass(frozen=True)
class ShardEntry:
    """A shard the reader loads: one row of a format-2 header's ``shards`` table (``target`` None: the
    kernel's whole shard), or one part of a 2.1 row's ``split`` (the kernel's variants of ``target``).
    ``summary`` counts what it holds. Each owns the frames its variants' members lie in."""

    kernel: str
    path: str
    summary: KernelSummary
    target: str | None = None


@contextmanager
def _gc_paused() -> Iterator[None]:
    """No cyclic garbage collection while a shard or the index is parsed: they allocate tens of thousands
    of small objects that hold no cycle (the index's are freed before it resumes), and the collector's
    passes over them cost a fifth of the parse. Only delays collection (it resumes, as it was, right
    after); any thread may re-enable it meanwhile."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


class ArchiveReader:
    """Random access to one archive. Thread-safe; decompressed frames are cached (a few, LRU)."""

    def __init__(self, source: RangeSource, limits: Limits = Limits(), frame_cache: int = 16) -> None:
        self.source = source
        self.limits = limits
        #: What a trust policy accepted when this archive was opened (a :class:`karchive.trust.decide.Verdict`,
        #: set by the loader before the reader is handed out); None: opened without a policy.
        self.verdict: Any = None
        self._lock = threading.Lock()
        self._shard_lock = threading.RLock()
        self._cache: OrderedDict[int, bytes] = OrderedDict()
        self._cache_size = frame_cache
        self._cache_bytes = 0
        self._tail_start = 0
        self._tail = b""
        self._members: dict[str, Member] = {}
        self._digests: dict[str, tuple[int, str]] = {}
        self._shards: list[ShardEntry] = []  # what the reader loads: whole shards, or 2.1 per-target parts
        self._shard_of: dict[str, list[int]] = {}  # kernel -> its entries in _shards
        self._kernels: list[ShardEntry] = []  # the header's rows (each kernel's whole shard), in order
        self._registered: set[int] = set()  # shards whose members are known (placed, perhaps not yet checked)
        self._pending: dict[int, list[Located]] = {}  # frame -> members (as a shard places them) to check on first use
        self._pending_names: dict[str, int] = {}
        self._all_loaded = True
        self._manifest: dict | None = None
        self._model: Manifest | None = None
        self._verified_count: int | None = None
        self._open()

    # -- construction -----------------------------------------------------------------------------
    @classmethod
    def from_bytes(cls, data: bytes, label: str = "<bytes>", **kw: Any) -> ArchiveReader:
        return cls(BytesSource(data, label), **kw)

    @classmethod
    def from_path(cls, path: Any, **kw: Any) -> ArchiveReader:
        from .source import FileSource

        return cls(FileSource(path), **kw)

    @property
    def sharded(self) -> bool:
        """True for format 2 and later: variants live in per-kernel shards (spec/FORMAT.md §6.5)."""
        return bool(self.format_version[0] >= 2)

    def _bytes_at(self, offset: int, length: int) -> bytes:
        if offset >= self._tail_start and offset + length <= self._tail_start + len(self._tail):
            start = offset - self._tail_start
            return self._tail[start : start + length]
        return self.source.read(offset, length)

    def _open(self) -> None:
        size = self.source.size
        where = self.source.describe()
        if size < FOOTER_SIZE:
            raise NotAnArchiveError(f"{where}: {size} bytes is too small to be a karchive archive", source=where)
        tail_len = min(size, TAIL_READ)
        self._tail_start = size - tail_len
        self._tail = self.source.read(self._tail_start, tail_len)
        footer = self._tail[-FOOTER_SIZE:]
        magic, length = SKIPPABLE_HEADER.unpack_from(footer)
        if magic != FOOTER_FRAME_MAGIC or length != FOOTER_PAYLOAD.size:
            raise NotAnArchiveError(f"{where}: no karchive footer (not a .karc archive, or truncated)", source=where)
        tag, major, minor, _flags, index_offset, index_length, index_digest = FOOTER_PAYLOAD.unpack_from(
            footer, SKIPPABLE_HEADER.size
        )
        if tag != FOOTER_TAG:
            raise NotAnArchiveError(f"{where}: footer tag mismatch (not a .karc archive)", source=where)
        self.format_version = (major, minor)
        check_format_version(self.format_version)
        if index_offset + index_length != size - FOOTER_SIZE or index_length < SKIPPABLE_HEADER.size:
            raise FormatError(f"{where}: footer points outside the file (truncated or corrupt)")
        if index_length > self.limits.max_index_bytes:
            raise LimitExceededError(
                f"{where}: index of {index_length} bytes exceeds the limit",
                limit=self.limits.max_index_bytes,
                value=index_length,
            )
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
            raise DigestMismatchError(
                f"{where}: index digest does not match the footer (corrupt or tampered)",
                source=where,
                expected=index_digest.hex(),
                actual=hashlib.sha256(payload).hexdigest(),
            )
        with _gc_paused():  # the parsed index (a list per frame) is garbage once its columns are taken
            self._parse_index(self._decompress(payload, self.limits.max_index_bytes, None, "index"), index_offset)
        self._load_dictionary_and_manifest()

    def _parse_index(self, raw: bytes, index_offset: int) -> None:
        index = load_json(raw, "index", self.limits)
        if (
            not isinstance(index, dict)
            or not isinstance(index.get("frames"), list)
            or not isinstance(index.get("members"), list)
        ):
            raise FormatError("index lacks frames/members")
        if index.get("manifest") != MANIFEST_NAME:
            raise FormatError(f"index: manifest must be {MANIFEST_NAME!r}, got {index.get('manifest')!r}")
        if index.get("dictionary") not in (None, DICTIONARY_NAME):
            raise FormatError(f"index: dictionary must be {DICTIONARY_NAME!r} or null, got {index.get('dictionary')!r}")
        if len(index["frames"]) > self.limits.max_members + 2:
            raise LimitExceededError(
                f"index lists {len(index['frames'])} frames; the limit is {self.limits.max_members + 2}",
                limit=self.limits.max_members + 2,
                value=len(index["frames"]),
            )
        frames = self._frames_fast(index["frames"], index_offset)
        if frames is None:
            frames = self._frames_checked(index["frames"], index_offset)
        if len(index["members"]) > self.limits.max_members:
            raise LimitExceededError(
                f"index lists {len(index['members'])} members; the limit is {self.limits.max_members}",
                limit=self.limits.max_members,
                value=len(index["members"]),
            )
        self.frames = frames
        self._frame_members: dict[int, list[Member]] = _FrameMembers()
        self._owner = array("q", [_UNCLAIMED]) * len(frames)  # an array: nothing for the collector to walk
        members = index["members"]
        if (
            set(map(type, members)) <= {list}
            and set(map(len, members)) <= {4}
            and all(int_column(list(map(itemgetter(i), members)), 1 << 63) for i in (1, 2, 3))
        ):
            placed = list(map(tuple, members))  # the usual index, checked a column at a time
        else:
            placed = []
            for entry in members:
                if not isinstance(entry, list) or len(entry) != 4:
                    raise FormatError(f"index: bad member entry {entry!r}")
                name = entry[0]
                frame, offset, size = (_as_int(v, "member field") for v in entry[1:])
                placed.append((name, frame, offset, size))
        self._register(placed, _ROOT, "index")
        # A format-1 index lists every member, so every frame must hold one; format 2's shards list the
        # rest of them, and verify() checks the same once every shard has been read.
        if not self.sharded and _UNCLAIMED in self._owner:
            raise FormatError(f"index: frame {self._owner.index(_UNCLAIMED)} holds no member")
        # Keep only what later steps consult, not a hostile index's extra keys.
        self._index = {k: index.get(k) for k in ("manifest", "manifest_sha256", "dictionary", "dictionary_sha256")}

    def _frames_fast(self, entries: list, index_offset: int) -> list[Frame] | None:
        """The frame table when it is valid, checked with C-speed passes (an archive of 10,000 variants
        has a thousand frames or more, and they are checked on every open); None otherwise, and
        :meth:`_frames_checked` says what is wrong."""
        if (
            not entries
            or len(entries) > self.limits.max_members + 2
            or set(map(type, entries)) != {list}
            or set(map(len, entries)) != {4}
        ):
            return None
        flat = list(chain.from_iterable(entries))
        if list(map(type, flat)).count(int) != len(flat):  # every field an int (a bool is not): no set to hash into
            return None
        offs, lens, sizes, flags = flat[0::4], flat[1::4], flat[2::4], flat[3::4]
        # Offsets need no sign check of their own: the first is 0 and each next one is the previous
        # end, past a length of at least 1.
        if min(lens) < 1 or min(sizes) < 0 or not set(flags) <= {0, 1} or max(sizes) > self.limits.max_frame_bytes:
            return None
        ends = list(map(add, offs, lens))
        if offs[0] != 0 or offs[1:] != ends[:-1] or ends[-1] != index_offset:
            return None
        # length <= size (a frame that compresses at all: one pass), or <= size + size/256 + 1 KiB, are
        # within compress_bound(size) (which adds a little more).
        if (
            not all(map(le, lens, sizes))
            and not all(map(le, lens, [n + (n >> 8) + 1024 for n in sizes]))
            and not all(map(le, lens, map(compress_bound, sizes)))
        ):
            return None
        return FrameTable(offs, lens, sizes, flags)  # type: ignore[return-value]

    def _frames_checked(self, entries: list, index_offset: int) -> list[Frame]:
        frames: list[Frame] = []
        expected = 0
        for entry in entries:
            if not isinstance(entry, list) or len(entry) != 4:
                raise FormatError(f"index: bad frame entry {entry!r}")
            off, length, usize, flag = (_as_int(v, "frame field") for v in entry)
            if off != expected or length == 0:
                raise FormatError("index: frames are not contiguous from the start of the file")
            if flag not in (0, 1):
                raise FormatError(f"index: bad dictionary flag {flag!r}")
            if usize > self.limits.max_frame_bytes:
                raise LimitExceededError(
                    f"frame {len(frames)} claims {usize} decompressed bytes; the limit is {self.limits.max_frame_bytes}",
                    limit=self.limits.max_frame_bytes,
                    value=usize,
                )
            if length > compress_bound(usize):
                # Reading a frame costs its compressed length in memory: bound it by what it may decode to.
                raise LimitExceededError(
                    f"frame {len(frames)} is {length} bytes long, more than any zstd frame of {usize} bytes needs",
                    limit=compress_bound(usize),
                    value=length,
                )
            frames.append(Frame(off, length, usize, bool(flag)))
            expected = off + length
        if expected != index_offset:
            raise FormatError("index: frames do not end where the index begins")
        return frames

    def _register(self, placed: Sequence[tuple[Any, ...]], owner: int, what: str) -> list[int]:
        """Add members (name, frame, data offset, size[, sha256]) that ``owner`` (the index, or shard n) lists.

        Each frame belongs to one owner, which must list all of its members: a frame claimed twice, a
        name listed twice, a member outside its frame or overlapping another is refused. Returns the
        frames newly claimed. Members are only added once every check has passed.
        """
        if len(self._members) + len(placed) > self.limits.max_members:
            raise LimitExceededError(
                f"{what} brings the archive past {self.limits.max_members} members",
                limit=self.limits.max_members,
                value=len(self._members) + len(placed),
            )
        frames = self.frames
        n_frames = len(frames)
        size_of = frames.size_of if isinstance(frames, FrameTable) else lambda i: frames[i].size
        added: dict[str, Member] = {}
        claimed: dict[int, list[Member]] = {}
        listed, new = self._frame_members.get, tuple.__new__  # .get: no __missing__ call per member
        for name, frame, offset, size in map(_PLACED, placed):
            check_member_name(name)
            if frame >= n_frames or offset % TAR_BLOCK or offset < TAR_BLOCK or offset + size > size_of(frame):
                raise FormatError(f"{what}: member {name!r} lies outside its frame")
            if name in added or name in self._members:
                raise FormatError(f"{what}: duplicate member {name!r}")
            if self._owner[frame] not in (_UNCLAIMED, owner) or listed(frame):
                raise FormatError(
                    f"{what}: member {name!r} is in frame {frame}, which holds members listed "
                    "elsewhere (each frame belongs to the index or to one shard)"
                )
            m = new(Member, (name, frame, offset, size))  # a named tuple, without its Python-level __new__
            added[name] = m
            claimed.setdefault(frame, []).append(m)
        # Each member's header and data must lie apart from every other's; otherwise one member's
        # bytes would be another's content when the frame is read as the tar stream it claims to be.
        for ms in claimed.values():
            ms.sort(key=lambda m: m.offset)
            for previous, m in zip(ms, ms[1:]):
                if m.offset - TAR_BLOCK < previous.offset + padded(previous.size):
                    raise FormatError(f"{what}: members {previous.name!r} and {m.name!r} overlap")
        for frame, ms in claimed.items():
            self._owner[frame] = owner
            self._frame_members[frame] = ms
        self._members.update(added)
        return sorted(claimed)

    def _unregister(self, frames: list[int]) -> None:
        """Forget the members of ``frames`` (verify() streams shard by shard)."""
        for frame in frames:
            for m in self._frame_members[frame]:
                self._members.pop(m.name, None)
                self._digests.pop(m.name, None)
            for name, *_ in self._pending.pop(frame, ()):
                self._pending_names.pop(name, None)
                self._digests.pop(name, None)
            self._frame_members.pop(frame, None)
            self._owner[frame] = _UNCLAIMED
            self._cache.pop(frame, None)

    def _register_frame(self, frame: int) -> None:
        """Check and add the members a loaded shard places in ``frame`` (done when the frame is first
        needed: loading a kernel's shard does not pay for its members' checks)."""
        with self._shard_lock:
            placed = self._pending.get(frame)
            if placed is None:
                return
            self._register(placed, self._owner[frame], f"shard of {self._shards[self._owner[frame]].kernel!r}")
            del self._pending[frame]
            for name, *_ in placed:
                self._pending_names.pop(name, None)

    def _load_dictionary_and_manifest(self) -> None:
        index = self._index
        dict_name = index.get("dictionary")
        maybe = [self._members.get(MANIFEST_NAME)] + ([self._members.get(dict_name)] if dict_name is not None else [])
        needed = [m for m in maybe if m is not None]
        if len(needed) != len(maybe):
            raise FormatError("index names a manifest or dictionary member that does not exist")
        # Their frames are decoded whole while opening: bound them by the member limits, not the frame limit.
        limit_of = {MANIFEST_NAME: self.limits.max_manifest_bytes, DICTIONARY_NAME: self.limits.max_dictionary_bytes}
        for m in needed:
            frame = self.frames[m.frame]
            if frame.uses_dict:
                raise FormatError(f"{m.name} must be in a frame compressed without the dictionary")
            if m.size > limit_of[m.name] or frame.size > limit_of[m.name] + 4 * TAR_BLOCK:
                raise LimitExceededError(
                    f"{m.name} ({m.size} bytes in a frame of {frame.size}) exceeds the limit of {limit_of[m.name]} bytes",
                    limit=limit_of[m.name],
                    value=m.size,
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
            dict_bytes = self._index_checked(self._members[dict_name], "dictionary")
            try:
                self._dctx_dict = zstandard.ZstdDecompressor(
                    dict_data=zstandard.ZstdCompressionDict(dict_bytes), max_window_size=self.limits.max_window_bytes
                )
            except zstandard.ZstdError as exc:
                raise FormatError(f"{dict_name} is not a usable zstd dictionary: {exc}") from exc
            self._dict_bytes = dict_bytes
        elif (
            self.frames.any_dictionary()
            if isinstance(self.frames, FrameTable)
            else any(f.uses_dict for f in self.frames)
        ):
            raise FormatError("frames need a dictionary but the index names none")
        raw = self._index_checked(self._members[MANIFEST_NAME], "manifest")
        manifest = load_json(raw, "manifest", self.limits)
        if not isinstance(manifest, dict):
            raise SchemaError("manifest is not a JSON object", where="manifest")
        found = parse_version(manifest.get("format_version"))
        check_format_version(found, "manifest format")
        if found[0] != self.format_version[0]:
            raise SchemaError(
                f"manifest says format {found[0]}.{found[1]}, the footer "
                f"{self.format_version[0]}.{self.format_version[1]}",
                where="format_version",
            )
        entries = scan_manifest(manifest, self.limits.max_json_depth)
        #: ``karchive/manifest.json`` as stored: the whole manifest (format 1) or its header (format 2).
        self.header_bytes = raw
        self.header = manifest
        for entry in entries:
            path, ref = entry["path"], (entry["size"], entry["sha256"])
            if self._digests.setdefault(path, ref) != ref:
                raise SchemaError(f"manifest lists {path!r} twice with different sizes or digests", where="files")
        if self.sharded:
            self._parse_shard_table(manifest)
            # Honest archives put the shards just before the dictionary and the header: what the tail
            # read already holds costs no further request, so keep it (it is at most TAIL_READ + the
            # header and dictionary, which were bounded above).
            return
        self._manifest = manifest
        # The tail buffer only served opening; keep memory bounded afterwards.
        self._tail = b""
        self._tail_start = self.source.size

    def _parse_shard_table(self, header: dict) -> None:
        table = header.get("shards")
        if not isinstance(table, list):
            raise SchemaError("manifest header: 'shards' must be a list (format 2)", where="shards")
        if len(table) > self.limits.max_shards:
            raise LimitExceededError(
                f"manifest header lists {len(table)} shards; the limit is {self.limits.max_shards}",
                limit=self.limits.max_shards,
                value=len(table),
            )
        total = 0
        paths: set[str] = set()
        for i, row in enumerate(table):
            where = f"manifest.shards[{i}]"
            if not isinstance(row, dict):
                raise SchemaError(f"{where}: expected an object", where=where)
            kernel, path, n, targets = row.get("kernel"), row.get("path"), row.get("variants"), row.get("targets")
            if not isinstance(kernel, str) or not isinstance(path, str):
                raise SchemaError(f"{where}: kernel and path must be strings", where=where)
            check_kernel_name(kernel, f"{where}.kernel")  # names reach file names (export-triton-cache)
            if (
                type(n) is not int
                or n < 0
                or not isinstance(targets, dict)
                or not all(isinstance(t, str) and type(c) is int and c > 0 for t, c in targets.items())
            ):
                raise SchemaError(
                    f"{where}: variants must be a count and targets a map of positive counts", where=where
                )
            if sum(targets.values()) != n:
                raise SchemaError(f"{where}: the per-target counts do not add up to {n} variants", where=where)
            if kernel in self._shard_of:
                raise SchemaError(f"{where}: kernel {kernel!r} has two shards", where=where)
            self._shard_member(path, where)
            if path in paths:
                raise SchemaError(f"{where}: two kernels share the shard {path!r}", where=where)
            paths.add(path)
            total += n
            whole = ShardEntry(kernel, path, KernelSummary(kernel, n, tuple(sorted(targets.items()))))
            self._kernels.append(whole)
            parts = self._split_of(row.get("split"), whole, paths, where) if "split" in row else [whole]
            if len(self._shards) + len(parts) > self.limits.max_shards:
                raise LimitExceededError(
                    f"manifest header lists more than {self.limits.max_shards} shards",
                    limit=self.limits.max_shards,
                    value=len(self._shards) + len(parts),
                )
            self._shard_of[kernel] = list(range(len(self._shards), len(self._shards) + len(parts)))
            self._shards.extend(parts)
        if total > self.limits.max_members:
            raise LimitExceededError(
                f"manifest header counts {total} variants; the limit is {self.limits.max_members}",
                limit=self.limits.max_members,
                value=total,
            )
        self._all_loaded = not self._shards

    def _shard_member(self, path: Any, where: str) -> None:
        """``path`` must name a shard member: listed by the index with a digest, within the manifest limit."""
        member = self._members.get(path) if isinstance(path, str) else None
        if member is None or path in (MANIFEST_NAME, DICTIONARY_NAME) or path not in self._digests:
            raise FormatError(f"{where}: shard {path!r} is not a member the index lists with a digest")
        if member.size > self.limits.max_manifest_bytes:
            raise LimitExceededError(
                f"{where}: shard of {member.size} bytes exceeds the manifest limit",
                limit=self.limits.max_manifest_bytes,
                value=member.size,
            )

    def _split_of(self, split: Any, whole: ShardEntry, paths: set[str], where: str) -> list[ShardEntry]:
        """Format 2.1: a row's per-target shards, one per target the row counts, each counting as many
        variants as the row says that target has. The reader loads these instead of the whole shard
        (kept for 2.0 readers; :meth:`verify` checks that both say the same)."""
        targets = dict(whole.summary.targets)
        if not isinstance(split, list) or len(split) != len(targets):
            raise SchemaError(f"{where}.split: expected one entry per target of the kernel", where=f"{where}.split")
        parts: list[ShardEntry] = []
        for j, part in enumerate(split):
            w = f"{where}.split[{j}]"
            if not isinstance(part, dict):
                raise SchemaError(f"{w}: expected an object", where=w)
            target, path, n = part.get("target"), part.get("path"), part.get("variants")
            if not isinstance(target, str) or target not in targets or any(p.target == target for p in parts):
                raise SchemaError(f"{w}: target {target!r} is not one of the kernel's, or comes twice", where=w)
            if type(n) is not int or n != targets[target]:
                raise SchemaError(f"{w}: counts {n!r} variants; the kernel has {targets[target]} for {target}", where=w)
            self._shard_member(path, w)
            assert isinstance(path, str)  # _shard_member refuses anything else
            if path in paths:
                raise SchemaError(f"{w}: shard {path!r} is listed twice", where=w)
            paths.add(path)
            parts.append(ShardEntry(whole.kernel, path, KernelSummary(whole.kernel, n, ((target, n),)), target))
        return parts

    # -- the manifest ------------------------------------------------------------------------------
    @property
    def model(self) -> Manifest:
        """The manifest as the typed model. Format 2: built from the header alone; a kernel's shard is
        read when its variants are first asked for (``model.variants_of(kernel)``)."""
        model = self._model
        if model is None:
            if self.sharded:
                model = Manifest.sharded(
                    self.header,
                    [s.summary for s in self._kernels],
                    self.shard_variants,
                    skip=frozenset({"shards"}),
                    target_loader=self._target_variants,
                )
            else:
                model = Manifest.from_json(self.manifest, lazy=True)
            self._model = model
        return model

    @property
    def manifest(self) -> dict:
        """The whole manifest as JSON (spec/FORMAT.md §6). Format 2 assembles it from the header and
        every shard on first use: prefer :attr:`model`, which reads only the shards it needs."""
        manifest = self._manifest
        if manifest is None:
            with self._shard_lock:
                manifest = self._manifest
                if manifest is None:
                    manifest = {k: v for k, v in self.header.items() if k != "shards"}
                    manifest["variants"] = [e for s in self._kernels for e in self.shard_entries(s.kernel)]
                    self._manifest = manifest
        return manifest

    def manifest_of(self, kernels: Iterable[str] | None) -> dict:
        """The manifest as JSON with only ``kernels``' variants (all of them for None or empty), in
        manifest order: what a tool comparing or rebuilding a few kernels needs. Format 2 reads only
        those kernels' shards; the raw entries are the ones :attr:`manifest` holds."""
        queries = list(kernels or ())
        if not queries:
            return self.manifest
        # A short name selects every kernel of that short name (format/names.py, kernel_matches).
        if not self.sharded:
            return {
                **self.manifest,
                "variants": [
                    v
                    for v in self.manifest.get("variants") or []
                    if isinstance(v, dict) and select_kernels(queries, [str(v.get("kernel"))])
                ],
            }
        out = {k: v for k, v in self.header.items() if k != "shards"}
        out["variants"] = [
            e for s in self._kernels if select_kernels(queries, [s.kernel]) for e in self.shard_entries(s.kernel)
        ]
        return out

    @property
    def manifest_bytes(self) -> bytes:
        """The whole manifest's canonical JSON (format 2: assembled, see :attr:`manifest`)."""
        return self.header_bytes if not self.sharded else canonical_json(self.manifest)

    def shard_entries(self, kernel: str, *, keep: bool = True) -> list[dict]:
        """Format 2: the raw manifest entries of ``kernel``'s variants (one shard read, digest-checked);
        their members become readable unless ``keep`` is false (a caller streaming through every
        shard, whose memory should not grow with them). [] for a kernel the archive does not have."""
        out: list[dict] = []
        with self._shard_lock:
            for i in self._shard_of.get(kernel, ()):
                entries, located = decode_shard(self._shard_doc(i), self._shards[i].kernel)
                self._check_counts(i, (target_label(e.get("target")) for e in entries))
                if keep:
                    self._claim(i, located)
                out.extend(entries)
        return _in_key_order(out, len(self._shard_of.get(kernel, ())), lambda e: str(e.get("key")))

    def shard_variants(self, kernel: str, target: str | None = None) -> list[Variant]:
        """Format 2: ``kernel``'s variants (only those built for ``target``, e.g. ``cuda:90``, when given),
        checked by the manifest model, from its shard (what :attr:`model` loads); their members become
        readable. A 2.1 archive keeps a shard per kernel and target, and only ``target``'s is read.
        [] for a kernel the archive does not have."""
        ids = self._shard_of.get(kernel, [])
        if target is not None and not any(self._shards[i].target is None for i in ids):
            ids = [i for i in ids if self._shards[i].target == target]
        out: list[Variant] = []
        with self._shard_lock, _gc_paused():
            for i in ids:
                variants, located = shard_variants(self._shard_doc(i), self._shards[i].kernel)
                self._check_counts(i, target_labels(variants))
                self._claim(i, located)
                out.extend(variants)
        if target is not None and any(self._shards[i].target is None for i in ids):
            out = [v for v in out if str(v.target) == target]  # a whole shard: its variants of that target
        return _in_key_order(out, len(ids), lambda v: v.key)

    def split_by_target(self, kernel: str) -> bool:
        """Whether ``kernel``'s variants of each target are stored in a shard of their own (format 2.1), so
        that reading one target's leaves the others' unread."""
        ids = self._shard_of.get(kernel, [])
        return bool(ids) and all(self._shards[i].target is not None for i in ids)

    def _target_variants(self, kernel: str, target: str) -> list[Variant] | None:
        """``kernel``'s variants of ``target`` from its per-target shard (format 2.1); None when the
        kernel has none (its whole shard is read instead)."""
        ids = self._shard_of.get(kernel, [])
        if not ids or any(self._shards[i].target is None for i in ids):
            return None
        return self.shard_variants(kernel, target)

    def _shard_doc(self, i: int | ShardEntry) -> Any:
        shard = self._shards[i] if isinstance(i, int) else i
        # Depth is bounded on the text before parsing: a shard is not walked as scan_manifest walks format 1.
        return load_json(self.read(shard.path), f"shard {shard.path}", self.limits)

    def _check_counts(self, i: int, targets: Iterable[str | None]) -> None:
        shard = self._shards[i]
        if KernelSummary.of(shard.kernel, targets) != shard.summary:
            raise SchemaError(
                f"shard of {shard.kernel!r} does not match the counts in the manifest header", where=f"shards[{i}]"
            )

    def _claim(self, i: int, located: list[tuple[str, int, int, int, Any]]) -> list[int]:
        """Take the frames shard ``i`` places its members in (each frame belongs to one owner) and
        remember the members, to be checked frame by frame when first needed. Returns the frames."""
        if i in self._registered:
            return []
        what = f"shard of {self._shards[i].kernel!r}"
        if len(self._members) + len(self._pending_names) + len(located) > self.limits.max_members:
            raise LimitExceededError(
                f"{what} brings the archive past {self.limits.max_members} members",
                limit=self.limits.max_members,
                value=len(self._members) + len(self._pending_names) + len(located),
            )
        # Column by column at C speed: a shard places thousands of members (most of them IR, never read).
        names = list(map(itemgetter(0), located))
        frame_of = dict(zip(names, map(itemgetter(1), located)))
        twice = len(frame_of) != len(names) or not self._digests.keys().isdisjoint(frame_of)
        if twice:
            seen: set[str] = set()
            name = next(n for n in names if n in seen or n in self._digests or seen.add(n))  # type: ignore[func-returns-value]
            raise FormatError(f"{what}: member {name!r} is listed twice")
        by_frame: dict[int, list[Located]] = {}
        for frame, group in groupby(sorted(located, key=itemgetter(1)), key=itemgetter(1)):
            placed = list(group)  # kept as placed; _register reads the first four fields when the frame is needed
            if frame >= len(self.frames):
                raise FormatError(f"{what}: member {placed[0][0]!r} lies outside its frame")
            if self._owner[frame] != _UNCLAIMED:
                raise FormatError(
                    f"{what}: member {placed[0][0]!r} is in frame {frame}, which holds members "
                    "listed elsewhere (each frame belongs to the index or to one shard)"
                )
            by_frame[frame] = placed
        for frame, placed in by_frame.items():
            self._owner[frame] = i
            self._pending[frame] = placed
        self._pending_names.update(frame_of)
        self._digests.update(zip(names, map(_EXPECTED, located)))
        self._registered.add(i)
        self._all_loaded = len(self._registered) == len(self._shards)
        return sorted(by_frame)

    def _load_all(self) -> None:
        with self._shard_lock:
            for i, shard in enumerate(self._shards):
                if i not in self._registered:
                    self.shard_entries(shard.kernel)

    def member_count(self) -> int:
        """How many members the archive holds. Format 2: counted shard by shard without keeping them
        (after :meth:`verify`, which counts them as it goes, without reading anything again)."""
        if not self.sharded or self._all_loaded:
            return len(self._members) + len(self._pending_names)
        if self._verified_count is not None:
            return self._verified_count
        root = sum(len(self._frame_members[f]) for f, owner in enumerate(self._owner) if owner == _ROOT)
        with self._shard_lock:
            return root + sum(len(decode_shard(self._shard_doc(i), s.kernel)[1]) for i, s in enumerate(self._shards))

    @property
    def members(self) -> dict[str, Member]:
        """Every member, by name (format 2: reads every shard first)."""
        if not self._all_loaded:
            self._load_all()
        for frame in list(self._pending):
            self._register_frame(frame)
        return self._members

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
            raise LimitExceededError(
                f"{what}: frame declares {size} bytes, more than the {declared} allowed", limit=declared, value=size
            )
        # One-shot decompression does not apply max_window_size itself: check the header here.
        if params.window_size > self.limits.max_window_bytes:
            raise LimitExceededError(
                f"{what}: frame needs a {params.window_size}-byte window; the limit is {self.limits.max_window_bytes}",
                limit=self.limits.max_window_bytes,
                value=params.window_size,
            )
        dctx = dctx or zstandard.ZstdDecompressor(max_window_size=self.limits.max_window_bytes)
        try:
            out = dctx.decompress(blob, max_output_size=size, allow_extra_data=False)
        except zstandard.ZstdError as exc:
            raise FormatError(f"{what}: zstd decompression failed: {exc}") from exc
        if len(out) != size:
            raise FormatError(f"{what}: decompressed {len(out)} bytes, frame declared {size}")
        return out

    def frame_bytes(self, index: int, *, cache: bool = True) -> bytes:
        """One frame, decompressed and checked against the members listed for it (and cached)."""
        with self._lock:
            cached = self._cache.get(index)
            if cached is not None:
                self._cache.move_to_end(index)
                return cached
        if index in self._pending:
            self._register_frame(index)
        frame = self.frames[index]
        blob = self._bytes_at(frame.offset, frame.length)
        dctx = self._dctx_dict if frame.uses_dict else self._dctx_plain
        with self._lock:  # zstd contexts are not safe for concurrent use
            data = self._decompress(blob, frame.size, dctx, f"frame {index}")
            if len(data) != frame.size:
                raise FormatError(f"frame {index}: size differs from the index")
            self._check_layout(index, data)
            if cache and index not in self._cache and len(data) <= self.limits.max_cache_bytes:
                self._cache[index] = data
                self._cache_bytes += len(data)
                while len(self._cache) > self._cache_size or self._cache_bytes > self.limits.max_cache_bytes:
                    self._cache_bytes -= len(self._cache.popitem(last=False)[1])
        return data

    def _check_layout(self, index: int, data: bytes) -> None:
        """The frame must be exactly the tar entries listed for it: nothing hidden between, before or
        after them (a link, a pax header, a second copy of a name), zero padding, and the end-of-archive
        marker only at the end of the last frame. So any frame the reader accepts also means the same
        thing to ``tar``."""

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

        listed = "listed in the index" if self._owner[index] == _ROOT or not self.sharded else "listed by its shard"
        pos = 0
        for m in self._frame_members[index]:
            if m.offset - TAR_BLOCK != pos:
                raise FormatError(f"frame {index}: {stray(pos)} at {pos} is not {listed}")
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
                raise FormatError(f"frame {index}: {stray(pos)} after its last member, not {listed}")
        elif rest < 2 * TAR_BLOCK or rest % TAR_BLOCK or data[pos:].count(0) != rest:
            if rest >= TAR_BLOCK and data[pos : pos + TAR_BLOCK].count(0) != TAR_BLOCK:
                raise FormatError(f"frame {index}: {stray(pos)} after its last member, not {listed}")
            raise FormatError(f"frame {index}: the last frame must end with the tar end-of-archive marker")

    def _index_checked(self, member: Member, what: str) -> bytes:
        """The manifest's or the dictionary's bytes, checked against the digest the index gives them."""
        data = self._member_unchecked(member)
        expected, actual = self._index.get(f"{what}_sha256"), hashlib.sha256(data).hexdigest()
        if actual != expected:
            raise DigestMismatchError(
                f"{what} digest does not match the index (corrupt or tampered)",
                source=self.source.describe(),
                expected=expected,
                actual=actual,
            )
        return data

    def _member_unchecked(self, member: Member) -> bytes:
        frame = self.frame_bytes(member.frame)
        header = parse_header(frame[member.offset - TAR_BLOCK : member.offset])
        if header is None or header.name != member.name or header.size != member.size:
            raise FormatError(f"tar header of {member.name!r} does not match the index")
        return frame[member.offset : member.offset + member.size]

    def _lookup(self, name: str) -> Member:
        member = self._members.get(name)
        if member is None and not self._all_loaded and name not in self._pending_names:
            self._load_all()  # format 2: a name no loaded shard lists may be in one not yet read
        if member is None and name in self._pending_names:
            self._register_frame(self._pending_names[name])
            member = self._members.get(name)
        if member is None:
            raise FormatError(f"no member {name!r} in {self.source.describe()}")
        return member

    def read(self, name: str) -> bytes:
        """A member's bytes, verified against the manifest's size and sha256.

        The manifest and the dictionary, which the index's digests cover, are returned as verified
        when the archive was opened; any other member the manifest does not list is refused.
        """
        member = self._lookup(name)
        if name == MANIFEST_NAME:
            return self.header_bytes
        if name == DICTIONARY_NAME and self._dict_bytes is not None:
            return self._dict_bytes
        expected = self._digests.get(name)
        if expected is None:
            raise IntegrityError(
                f"member {name!r} has no digest in the manifest; refusing to trust it", source=self.source.describe()
            )
        return self._checked(member, self._member_unchecked(member), expected)

    def _checked(self, member: Member, data: bytes, expected: tuple[int, str]) -> bytes:
        digest = hashlib.sha256(data).hexdigest()
        if len(data) != expected[0] or digest != expected[1]:
            raise DigestMismatchError(
                f"member {member.name!r}: size or sha256 differs from the manifest (corrupt or tampered)",
                source=self.source.describe(),
                expected=expected[1],
                actual=digest,
            )
        return data

    # -- full check --------------------------------------------------------------------------------
    def verify(self) -> list[str]:
        """Decode every frame, check it holds exactly the members listed for it, and check every
        member's digest; return the problems (empty means intact).

        Streams: frames are decoded one at a time and not cached; a format-2 archive is checked shard
        by shard, each shard's members forgotten once checked, so memory stays bounded by the largest
        frame and shard whatever the archive's size.
        """
        if self.sharded:
            return self._verify_sharded()
        problems: list[str] = []
        seen: set[str] = set()
        for i in range(len(self.frames)):
            problems.extend(self._verify_frame_v1(i, seen))
        missing = set(self._members) - seen
        problems.extend(f"index member {name!r} has no tar header" for name in sorted(missing))
        for name in sorted(self._digests):
            if name not in self._members:
                problems.append(f"manifest file {name!r} is missing from the archive")
        unlisted = set(self._members) - set(self._digests) - {MANIFEST_NAME, self._index.get("dictionary")}
        problems.extend(f"member {name!r} is not listed in the manifest" for name in sorted(unlisted))
        return problems

    def _verify_frame_v1(self, i: int, seen: set[str]) -> list[str]:
        """Format 1: walk frame ``i``'s tar stream and report what disagrees with the index; check the
        digests of the members it holds."""
        problems: list[str] = []
        try:
            data = self.frame_bytes(i, cache=False)
        except FormatError as exc:
            return [str(exc)]
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
            member = self._members.get(header.name)
            if member is None or member.frame != i or member.offset != pos + TAR_BLOCK or member.size != header.size:
                problems.append(f"frame {i}: tar member {header.name!r} is not where the index says")
            if header.name in seen:
                problems.append(f"duplicate tar member {header.name!r}")
            seen.add(header.name)
            pos += TAR_BLOCK + padded(header.size)
        if end_blocks and i != len(self.frames) - 1:
            problems.append(f"frame {i}: end-of-archive marker before the last frame")
        problems.extend(self._verify_digests(i, data))
        return problems

    def _verify_digests(self, i: int, data: bytes) -> list[str]:
        problems = []
        for m in self._frame_members[i]:
            expected = self._digests.get(m.name)
            if expected is None or m.name in (MANIFEST_NAME, DICTIONARY_NAME):
                continue
            try:
                self._checked(m, data[m.offset : m.offset + m.size], expected)
            except FormatError as exc:
                problems.append(str(exc))
        return problems

    def _verify_frames(self, frames: list[int]) -> list[str]:
        """Format 2: each frame decodes to exactly its listed members (``frame_bytes`` checks the
        layout), whose digests match."""
        problems = []
        for i in frames:
            try:
                data = self.frame_bytes(i, cache=False)
            except FormatError as exc:
                problems.append(str(exc))
                continue
            problems.extend(self._verify_digests(i, data))
        return problems

    def _verify_sharded(self) -> list[str]:
        problems = self._verify_frames([i for i, owner in enumerate(self._owner) if owner == _ROOT])
        unlisted = [m for m in self._members if m not in self._digests and m not in (MANIFEST_NAME, DICTIONARY_NAME)]
        problems.extend(f"member {name!r} is not listed in the manifest" for name in sorted(unlisted))
        # Names and variant keys must be unique across shards; remember 8-byte hashes of them, not the
        # names, so that memory grows by a few bytes per member rather than by whole entries.
        names: set[bytes] = {
            _short(m.name) for f, owner in enumerate(self._owner) if owner == _ROOT for m in self._frame_members[f]
        }
        keys: set[bytes] = set()
        checked = bytearray(len(self.frames))  # frames some owner claimed
        with self._shard_lock:
            for i, shard in enumerate(self._shards):
                keep = i in self._registered  # loaded before verify() was called: leave it loaded
                where = f"shard of {shard.kernel!r}"
                try:
                    entries, located = decode_shard(self._shard_doc(i), shard.kernel)
                    self._check_counts(i, (target_label(e.get("target")) for e in entries))
                    self._claim(i, located)
                except FormatError as exc:
                    problems.append(str(exc))
                    continue
                memo: dict = {}
                for n, e in enumerate(entries):
                    key = _short(str(e.get("key")))
                    if key in keys:
                        problems.append(f"{where}: variant key {e.get('key')!r} appears twice")
                    keys.add(key)
                    try:  # the rows must be variants the model accepts (what a loader will parse)
                        Variant.from_json(e, f"{where}: variants[{n}]", memo)
                    except FormatError as exc:
                        problems.append(str(exc))
                del memo, entries, located
                frames = [f for f, owner in enumerate(self._owner) if owner == i]
                for frame in frames:
                    if checked[frame]:
                        problems.append(f"frame {frame} holds members listed elsewhere ({where} and another)")
                    checked[frame] = 1
                    try:
                        self._register_frame(frame)
                    except FormatError as exc:
                        problems.append(str(exc))
                        continue
                    for m in self._frame_members[frame]:
                        h = _short(m.name)
                        if h in names:
                            problems.append(f"{where}: member {m.name!r} appears twice")
                        names.add(h)
                problems.extend(self._verify_frames([f for f in frames if not self._pending.get(f)]))
                if not keep:  # forget what was only read to be checked
                    self._unregister(frames)
                    self._registered.discard(i)
                    self._all_loaded = False
            problems.extend(self._verify_splits())
        self._verified_count = len(names)
        empty = [i for i, owner in enumerate(self._owner) if owner == _UNCLAIMED and not checked[i]]
        if empty:
            problems.append(
                f"frame {empty[0]} holds no member any shard or the index lists"
                + (f" (and {len(empty) - 1} more)" if len(empty) > 1 else "")
            )
        return problems

    def _verify_splits(self) -> list[str]:
        """Format 2.1: a kernel's whole shard (what a 2.0 reader reads) must say what its per-target
        shards (what this reader reads) say: the same variants, their members in the same places."""
        problems = []
        for whole in self._kernels:
            parts = self._shard_of.get(whole.kernel, [])
            if [self._shards[i] for i in parts] == [whole]:
                continue
            where = f"shard of {whole.kernel!r}"
            try:
                entries, located = decode_shard(self._shard_doc(whole), whole.kernel)
                if KernelSummary.of(whole.kernel, (target_label(e.get("target")) for e in entries)) != whole.summary:
                    raise SchemaError(f"{where} does not match the counts in the manifest header", where=where)
                split_entries: list[dict] = []
                split_located: list[Located] = []
                for i in parts:
                    e, loc = decode_shard(self._shard_doc(i), whole.kernel)
                    split_entries.extend(e)
                    split_located.extend(loc)
            except FormatError as exc:
                problems.append(str(exc))
                continue
            by_key = sorted(map(canonical_json, entries)) != sorted(map(canonical_json, split_entries))
            if by_key or sorted(located) != sorted(split_located):
                problems.append(
                    f"{where}: the whole shard {whole.path!r} and the per-target shards differ "
                    "(a 2.0 reader would read other variants than this one)"
                )
        return problems

    def iter_members(self) -> Iterator[tuple[str, bytes]]:
        """Every member, verified, in archive order: each frame is decoded once, which makes this the
        way to read a whole archive (``read`` in name order would decode a shared frame many times)."""
        members = self.members
        for m in sorted(members.values(), key=lambda m: (m.frame, m.offset)):
            yield m.name, self.read(m.name)


def _in_key_order(items: list, parts: int, key: Callable[[Any], str]) -> list:
    """Variants read from several per-target shards, back in manifest order (by key: §4); one shard's
    are in that order already."""
    return items if parts <= 1 else sorted(items, key=key)


def _short(text: str) -> bytes:
    return hashlib.blake2b(text.encode(), digest_size=8).digest()
