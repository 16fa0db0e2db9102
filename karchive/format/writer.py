"""Write .karc containers: tar members in independent zstd frames, an index, and a footer.

The writer takes groups of (name, bytes) members, each group becoming one zstd frame (the unit of
random access), plus the manifest as one JSON-able dict, which it splits into a header and one shard
per kernel (spec/FORMAT.md §6.5): the only thing it needs to know about kernels is that each frame
then holds members of one kernel only. It writes format 2 and nothing else; format 1.0 archives are
still read (:mod:`.reader`, frozen, checked against the golden 1.0 files in tests/data), never written.
Output depends only on the inputs (frames are compressed in parallel, each independently), so the
same inputs give byte-identical archives.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal

import zstandard

from ..core.digest import sha256_hex
from ..core.fsio import atomic_writer
from ..core.jsonio import canonical_json
from ..errors import FormatError, SchemaError
from .constants import (
    DICTIONARY_NAME,
    FOOTER_FRAME_MAGIC,
    FOOTER_PAYLOAD,
    FOOTER_TAG,
    FORMAT_VERSION,
    INDEX_FRAME_MAGIC,
    MANIFEST_NAME,
    SHARD_PREFIX,
    SKIPPABLE_HEADER,
    TAR_BLOCK,
)
from .manifest import KernelSummary, target_label
from .shard import encode_shard, file_paths
from .tarheader import build_header, check_member_name, padded

DictionaryMode = Literal["auto", "none", "always"]

#: Below this many dictionary-eligible bytes a trained dictionary costs more than it saves.
_DICT_MIN_BYTES = 96 * 1024
_DICT_MIN_SAMPLES = 12
#: The dictionary: frames hold many members each, so the dictionary only has to prime each frame's
#: first members; a small one (1/16 of the dictionary-eligible bytes, 16-256 KiB) does that and stays
#: cheap to fetch with the index. 4 MiB cost 1/3 of a format-1 archive (docs/benchmarks.md, "Archive size").
_DICT2_MIN, _DICT2_MAX, _DICT2_FRACTION = 16 * 1024, 256 * 1024, 16
#: COVER training time grows with its input: format 2 trains on at most this many bytes, an evenly
#: spaced (so deterministic) selection of the samples.
_DICT2_TRAIN_BYTES = 16 * 1024 * 1024
#: Largest zstd window the writer uses (32 MiB): a frame larger than the level's own window (8 MiB at
#: level 19) is compressed with a window as large as the frame, up to this, and long-distance matching,
#: so that near-copies far apart in it (sibling variants' IR) still match. Readers bound the window
#: they accept (128 MiB by default, spec/FORMAT.md §3); a decoder needs no more memory than the frame.
MAX_WINDOW_LOG = 25


def source_date_epoch() -> int:
    """Tar mtime: 0 unless SOURCE_DATE_EPOCH asks for a timestamp (reproducible-builds convention)."""
    value = os.environ.get("SOURCE_DATE_EPOCH")
    if not value:
        return 0
    try:
        return max(0, int(value))
    except ValueError as exc:
        raise FormatError(f"SOURCE_DATE_EPOCH is not an integer: {value!r}") from exc


@dataclass
class _Group:
    members: list[tuple[str, bytes]]
    use_dict: bool


@dataclass
class WriteStats:
    """What the writer did, for benchmarks and `inspect`."""

    raw_bytes: int = 0  # content members only (not the dictionary or the manifest)
    archive_bytes: int = 0
    frames: int = 0
    dictionary_bytes: int = 0
    members: int = 0


def shard_name(index: int, part: int | None = None) -> str:
    """Member name of the ``index``-th manifest shard (format 2), or of its ``part``-th per-target shard
    (format 2.1, ``karchive/shards/<index>/<part>.json``)."""
    return f"{SHARD_PREFIX}{index}.json" if part is None else f"{SHARD_PREFIX}{index}/{part}.json"


@dataclass
class ArchiveWriter:
    level: int = 19
    dictionary: DictionaryMode | int = "auto"
    #: Threads compressing frames (0: up to 8, one per CPU). Frames are independent: same bytes either way.
    threads: int = 0
    _groups: list[_Group] = field(default_factory=list)
    _names: set[str] = field(default_factory=set)
    stats: WriteStats = field(default_factory=WriteStats)

    def add_group(self, members: Iterable[tuple[str, bytes]], *, use_dict: bool = True) -> None:
        """Add members that are always read together; they share one zstd frame."""
        group = []
        for name, data in members:
            check_member_name(name)
            if name in self._names or name in (MANIFEST_NAME, DICTIONARY_NAME):
                raise FormatError(f"duplicate or reserved member name {name!r}")
            self._names.add(name)
            group.append((name, bytes(data)))
        if group:
            self._groups.append(_Group(group, use_dict))

    # -- encoding ---------------------------------------------------------------------------------
    def _train_dictionary(self) -> bytes | None:
        samples: list[Any] = [data for g in self._groups if g.use_dict for _, data in g.members if len(data) >= 16]
        total = sum(len(s) for s in samples)
        mode = self.dictionary
        if mode == "none" or not samples:
            return None
        if mode == "auto" and (total < _DICT_MIN_BYTES or len(samples) < _DICT_MIN_SAMPLES):
            return None
        size = mode if isinstance(mode, int) else max(_DICT2_MIN, min(_DICT2_MAX, total // _DICT2_FRACTION))
        if total > _DICT2_TRAIN_BYTES:
            step = total / _DICT2_TRAIN_BYTES
            samples = [samples[int(i * step)] for i in range(int(len(samples) / step))]
        try:
            # Fixed k/d and one thread: COVER training is then deterministic.
            trained = zstandard.train_dictionary(size, samples, k=16384, d=8, level=self.level, threads=1)
        except zstandard.ZstdError:
            if mode == "always":
                raise
            return None
        return trained.as_bytes()

    @staticmethod
    def _tar_bytes(members: list[tuple[str, bytes]], mtime: int) -> tuple[bytes, list[tuple[str, int, int]]]:
        out = bytearray()
        placed = []
        for name, data in members:
            out += build_header(name, len(data), mtime)
            placed.append((name, len(out), len(data)))
            out += data
            out += bytes(padded(len(data)) - len(data))
        return bytes(out), placed

    def _compressor(self, dict_bytes: bytes | None, window_log: int = 0) -> zstandard.ZstdCompressor:
        """The level's compressor; with ``window_log``, the level's parameters with that window and
        long-distance matching (for frames larger than the level's window, :meth:`_window_log`)."""
        dict_data = zstandard.ZstdCompressionDict(dict_bytes) if dict_bytes is not None else None
        if window_log:
            params = zstandard.ZstdCompressionParameters.from_level(
                self.level,
                window_log=window_log,
                enable_ldm=True,
                write_checksum=True,
                write_content_size=True,
                write_dict_id=True,
            )
            return zstandard.ZstdCompressor(compression_params=params, dict_data=dict_data)
        return zstandard.ZstdCompressor(
            level=self.level, write_checksum=True, write_content_size=True, write_dict_id=True, dict_data=dict_data
        )

    def _window_log(self, size: int) -> int:
        """0 (the level's own parameters) when the level's window spans ``size`` bytes, else the window
        that does, at most :data:`MAX_WINDOW_LOG`: a function of the size alone, so output stays
        reproducible."""
        default = zstandard.ZstdCompressionParameters.from_level(self.level).window_log
        need = max(size - 1, 1).bit_length()
        return 0 if need <= default else min(need, MAX_WINDOW_LOG)

    def _compress_all(self, jobs: list[tuple[bytes, bool]], dict_bytes: bytes | None) -> list[bytes]:
        """Compress independent frames (``(data, with the dictionary?)``), in parallel where it pays:
        zstd releases the GIL. A compressor is not safe for concurrent use, so each thread has its own."""
        threads = self.threads or min(8, os.cpu_count() or 1)
        local = threading.local()

        def one(job: tuple[bytes, bool]) -> bytes:
            data, use_dict = job
            cache = getattr(local, "c", None)
            if cache is None:
                cache = local.c = {}
            wlog = self._window_log(len(data))
            c = cache.get((use_dict, wlog))
            if c is None:
                c = cache[(use_dict, wlog)] = self._compressor(dict_bytes if use_dict else None, wlog)
            return c.compress(data)

        if threads <= 1 or len(jobs) < 4:
            return [one(job) for job in jobs]
        with ThreadPoolExecutor(max_workers=threads) as pool:
            return list(pool.map(one, jobs))

    def to_bytes(self, manifest: dict) -> bytes:
        """Format 2: content frames, one shard frame per kernel, the dictionary, the manifest header
        (the last frame, with tar's end-of-archive marker), the index and the footer."""
        if not isinstance(manifest, dict) or not isinstance(manifest.get("variants"), list):
            raise SchemaError("manifest: expected an object with a list of variants", where="manifest")
        # Which kernel owns each member: a frame, and the shard that locates its members, is one kernel's.
        by_kernel: dict[str, list[dict]] = {}
        owner: dict[str, str] = {}
        target_of: dict[str, str | None] = {}
        for i, v in enumerate(manifest["variants"]):
            kernel = v.get("kernel") if isinstance(v, dict) else None
            if not isinstance(kernel, str):
                raise SchemaError(f"variants[{i}]: a variant needs a kernel name", where=f"variants[{i}]")
            by_kernel.setdefault(kernel, []).append(v)
            for path in file_paths(v.get("files")):
                if owner.setdefault(path, kernel) != kernel:
                    raise FormatError(f"member {path!r} belongs to variants of two kernels")
                target_of[path] = target_label(v.get("target"))
        # Format 2.1 splits a kernel's shard by target when each of its frames holds one target's members
        # (karchive's own layout): a loader then reads only its device's targets (§6.5).
        mixed: set[str] = set()
        mtime = source_date_epoch()
        dict_bytes = self._train_dictionary()
        stats = WriteStats()
        tars: list[tuple[bytes, bool]] = []
        frames_members: list[list[tuple[str, int, int]]] = []
        placed: dict[str, tuple[int, int]] = {}

        def add_frame(group: list[tuple[str, bytes]], use_dict: bool, trailer: bytes = b"") -> None:
            tar, where = self._tar_bytes(group, mtime)
            for name, offset, _size in where:
                placed[name] = (len(tars), offset)
            tars.append((tar + trailer, use_dict))
            frames_members.append(where)

        for group in self._groups:
            owners = {owner.get(name) for name, _ in group.members}
            if len(owners) > 1:
                names = sorted(str(o) if o is not None else "(none)" for o in owners)
                raise FormatError(
                    f"a frame would hold members of several kernels ({', '.join(names)}); "
                    "format 2 keeps each kernel's members in frames of its own"
                )
            add_frame(group.members, group.use_dict and dict_bytes is not None)
            stats.raw_bytes += sum(len(data) for _, data in group.members)
            (kernel,) = owners
            if kernel is not None and len({target_of.get(name) for name, _ in group.members}) != 1:
                mixed.add(kernel)
        content_frames = len(tars)

        def locate(path: str) -> tuple[int, int]:
            where = placed.get(path)
            if where is None or where[0] >= content_frames:
                raise FormatError(f"the manifest names {path!r}, a member the writer was not given")
            return where

        shards = []
        for n, (kernel, variants) in enumerate(by_kernel.items()):
            doc = canonical_json(encode_shard(kernel, variants, locate))
            summary = KernelSummary.of(kernel, (target_label(v.get("target")) for v in variants))
            name = shard_name(n)
            shard_members = [(name, doc)]
            entry = {
                "kernel": kernel,
                "path": name,
                "size": len(doc),
                "sha256": sha256_hex(doc),
                "variants": summary.variants,
                "targets": dict(summary.targets),
            }
            if kernel not in mixed and None not in summary.targets:
                # The whole shard stays for 2.0 readers; 2.1 readers read the part of their target. They
                # share its frame: the parts' rows repeat the whole's, so they cost a few bytes each there.
                entry["split"] = split = []
                for m, (target, count) in enumerate(summary.targets):
                    part = canonical_json(
                        encode_shard(kernel, [v for v in variants if target_label(v.get("target")) == target], locate)
                    )
                    shard_members.append((shard_name(n, m), part))
                    split.append(
                        {
                            "target": target,
                            "path": shard_name(n, m),
                            "size": len(part),
                            "sha256": sha256_hex(part),
                            "variants": count,
                        }
                    )
            add_frame(shard_members, False)
            shards.append(entry)
        if dict_bytes is not None:
            add_frame([(DICTIONARY_NAME, dict_bytes)], False)
            stats.dictionary_bytes = len(dict_bytes)
        header = {k: v for k, v in manifest.items() if k != "variants"}
        header["shards"] = shards
        header_bytes = canonical_json(header)
        add_frame([(MANIFEST_NAME, header_bytes)], False, trailer=bytes(2 * TAR_BLOCK))

        blobs = self._compress_all(tars, dict_bytes)
        out = bytearray()
        frames: list[list[int]] = []
        members: list[list] = []
        for i, (blob, (tar, use_dict), where) in enumerate(zip(blobs, tars, frames_members)):
            frames.append([len(out), len(blob), len(tar), 1 if use_dict else 0])
            out += blob
            for name, offset, size in where:
                stats.members += 1
                if name not in owner:  # the kernels' members are located by their shards
                    members.append([name, i, offset, size])
        self._finish(out, frames, members, header_bytes, dict_bytes, stats)
        return bytes(out)

    def _finish(
        self,
        out: bytearray,
        frames: list,
        members: list,
        manifest_bytes: bytes,
        dict_bytes: bytes | None,
        stats: WriteStats,
    ) -> None:
        """Append the index frame (spec §3) and the footer; record the totals."""
        index = {
            "frames": frames,
            "members": members,
            "manifest": MANIFEST_NAME,
            "manifest_sha256": sha256_hex(manifest_bytes),
            "dictionary": DICTIONARY_NAME if dict_bytes is not None else None,
            "dictionary_sha256": sha256_hex(dict_bytes) if dict_bytes is not None else None,
        }
        index_payload = zstandard.ZstdCompressor(level=19, write_content_size=True, write_checksum=True).compress(
            canonical_json(index)
        )
        index_offset = len(out)
        out += SKIPPABLE_HEADER.pack(INDEX_FRAME_MAGIC, len(index_payload)) + index_payload
        payload = FOOTER_PAYLOAD.pack(
            FOOTER_TAG,
            FORMAT_VERSION[0],
            FORMAT_VERSION[1],
            0,
            index_offset,
            SKIPPABLE_HEADER.size + len(index_payload),
            hashlib.sha256(index_payload).digest(),
        )
        out += SKIPPABLE_HEADER.pack(FOOTER_FRAME_MAGIC, len(payload)) + payload
        stats.frames = len(frames)
        stats.archive_bytes = len(out)
        self.stats = stats

    def write(self, path: str | os.PathLike, manifest: dict) -> WriteStats:
        """Write atomically: a temporary file in the same directory, then rename."""
        data = self.to_bytes(manifest)
        with atomic_writer(path) as fh:
            fh.write(data)
        return self.stats
