"""Write .karc containers: tar members in independent zstd frames, an index, and a footer.

The writer knows nothing about kernels: it takes groups of (name, bytes) members, each group becoming
one zstd frame (the unit of random access), plus the manifest as a JSON-able dict. Output depends only
on its inputs, so the same inputs give byte-identical archives.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from typing import Iterable, Literal

import zstandard

from ..core.digest import sha256_hex
from ..core.fsio import atomic_writer
from ..core.jsonio import canonical_json
from ..errors import FormatError
from .constants import (
    DICTIONARY_NAME,
    FOOTER_FRAME_MAGIC,
    FOOTER_PAYLOAD,
    FOOTER_TAG,
    FORMAT_VERSION,
    INDEX_FRAME_MAGIC,
    MANIFEST_NAME,
    SKIPPABLE_HEADER,
    TAR_BLOCK,
)
from .tarheader import build_header, check_member_name, padded

DictionaryMode = Literal["auto", "none", "always"]

#: Below this many dictionary-eligible bytes a trained dictionary costs more than it saves.
_DICT_MIN_BYTES = 96 * 1024
_DICT_MIN_SAMPLES = 12


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


@dataclass
class ArchiveWriter:
    level: int = 19
    dictionary: DictionaryMode | int = "auto"
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
        samples = [data for g in self._groups if g.use_dict for _, data in g.members if len(data) >= 16]
        total = sum(len(s) for s in samples)
        mode = self.dictionary
        if mode == "none" or not samples:
            return None
        if mode == "auto" and (total < _DICT_MIN_BYTES or len(samples) < _DICT_MIN_SAMPLES):
            return None
        # Measured on Triton output (tools/bench_archive.py, docs/benchmarks.md): sibling variants share
        # long runs, so a large dictionary keeps paying (it compresses several-fold in its own frame);
        # a quarter of the content, up to 4 MiB, brought 270 variants from 1.54x to ~1.28x of solid zstd.
        size = mode if isinstance(mode, int) else max(16 * 1024, min(4 * 1024 * 1024, total // 4))
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

    def _compressor(self, dict_bytes: bytes | None) -> zstandard.ZstdCompressor:
        params = dict(level=self.level, write_checksum=True, write_content_size=True, write_dict_id=True)
        if dict_bytes is not None:
            return zstandard.ZstdCompressor(dict_data=zstandard.ZstdCompressionDict(dict_bytes), **params)
        return zstandard.ZstdCompressor(**params)

    def to_bytes(self, manifest: dict) -> bytes:
        """Encode every group, the dictionary, the manifest, the index and the footer."""
        mtime = source_date_epoch()
        dict_bytes = self._train_dictionary()
        plain = self._compressor(None)
        with_dict = self._compressor(dict_bytes) if dict_bytes is not None else plain

        out = bytearray()
        frames: list[list[int]] = []
        members: list[list] = []
        stats = WriteStats()

        def emit(group: list[tuple[str, bytes]], compressor: zstandard.ZstdCompressor, dict_flag: int,
                 trailer: bytes = b"", content: bool = True) -> None:
            tar, placed = self._tar_bytes(group, mtime)
            tar += trailer
            blob = compressor.compress(tar)
            index = len(frames)
            frames.append([len(out), len(blob), len(tar), dict_flag])
            for name, offset, size in placed:
                members.append([name, index, offset, size])
                stats.members += 1
                if content:
                    stats.raw_bytes += size
            out.extend(blob)

        for group in self._groups:
            use = group.use_dict and dict_bytes is not None
            emit(group.members, with_dict if use else plain, 1 if use else 0)
        if dict_bytes is not None:
            emit([(DICTIONARY_NAME, dict_bytes)], plain, 0, content=False)
            stats.dictionary_bytes = len(dict_bytes)
        manifest_bytes = canonical_json(manifest)
        # The manifest frame also carries tar's end-of-archive marker (two zero blocks).
        emit([(MANIFEST_NAME, manifest_bytes)], plain, 0, trailer=bytes(2 * TAR_BLOCK), content=False)

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
            FOOTER_TAG, FORMAT_VERSION[0], FORMAT_VERSION[1], 0, index_offset,
            SKIPPABLE_HEADER.size + len(index_payload), hashlib.sha256(index_payload).digest(),
        )
        out += SKIPPABLE_HEADER.pack(FOOTER_FRAME_MAGIC, len(payload)) + payload
        stats.frames = len(frames)
        stats.archive_bytes = len(out)
        self.stats = stats
        return bytes(out)

    def write(self, path: str | os.PathLike, manifest: dict) -> WriteStats:
        """Write atomically: a temporary file in the same directory, then rename."""
        data = self.to_bytes(manifest)
        with atomic_writer(path) as fh:
            fh.write(data)
        return self.stats
