"""A format 1.0 writer, for tests only: karchive writes format 2 and nothing else (issue 24), but it still
*reads* 1.0 archives, and the reader's hostile-input tests need 1.0 bytes to break. This is the 1.0 encoder
karchive shipped until then, frozen (one frame per member group, the whole manifest as one frame, the index
listing every member); ``tests/test_format_compat.py`` checks that it reproduces, byte for byte, the golden
1.0 archives in tests/data that the old writer produced, so what it writes is what old writers wrote.
"""

from __future__ import annotations

import hashlib
from typing import Any

import zstandard

from karchive.core.digest import sha256_hex
from karchive.core.jsonio import canonical_json
from karchive.format.constants import (
    DICTIONARY_NAME,
    FOOTER_FRAME_MAGIC,
    FOOTER_PAYLOAD,
    FOOTER_TAG,
    INDEX_FRAME_MAGIC,
    MANIFEST_NAME,
    SKIPPABLE_HEADER,
    TAR_BLOCK,
)
from karchive.format.writer import ArchiveWriter, WriteStats, source_date_epoch

V1 = (1, 0)


class Format1Writer(ArchiveWriter):
    """``ArchiveWriter``'s interface (``add_group``, ``to_bytes``, ``write``), writing format 1.0."""

    def _dictionary_size(self, total: int) -> int:
        # One frame per variant: sibling variants share long runs, so a large dictionary keeps paying (a
        # quarter of the content, up to 4 MiB).
        mode = self.dictionary
        return mode if isinstance(mode, int) else max(16 * 1024, min(4 * 1024 * 1024, total // 4))

    def _train_dictionary(self) -> bytes | None:
        samples: list[Any] = [data for g in self._groups if g.use_dict for _, data in g.members if len(data) >= 16]
        total = sum(len(s) for s in samples)
        mode = self.dictionary
        if mode == "none" or not samples:
            return None
        if mode == "auto" and (total < 96 * 1024 or len(samples) < 12):
            return None
        try:
            trained = zstandard.train_dictionary(
                self._dictionary_size(total), samples, k=16384, d=8, level=self.level, threads=1
            )
        except zstandard.ZstdError:
            if mode == "always":
                raise
            return None
        return trained.as_bytes()

    def to_bytes(self, manifest: dict) -> bytes:
        mtime = source_date_epoch()
        dict_bytes = self._train_dictionary()
        plain = self._compressor(None)
        with_dict = self._compressor(dict_bytes) if dict_bytes is not None else plain
        out = bytearray()
        frames: list[list[int]] = []
        members: list[list] = []
        stats = WriteStats()

        def emit(
            group: list[tuple[str, bytes]],
            compressor: zstandard.ZstdCompressor,
            dict_flag: int,
            trailer: bytes = b"",
            content: bool = True,
        ) -> None:
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
        emit([(MANIFEST_NAME, manifest_bytes)], plain, 0, trailer=bytes(2 * TAR_BLOCK), content=False)
        index = {
            "frames": frames,
            "members": members,
            "manifest": MANIFEST_NAME,
            "manifest_sha256": sha256_hex(manifest_bytes),
            "dictionary": DICTIONARY_NAME if dict_bytes is not None else None,
            "dictionary_sha256": sha256_hex(dict_bytes) if dict_bytes is not None else None,
        }
        payload_index = zstandard.ZstdCompressor(level=19, write_content_size=True, write_checksum=True).compress(
            canonical_json(index)
        )
        index_offset = len(out)
        out += SKIPPABLE_HEADER.pack(INDEX_FRAME_MAGIC, len(payload_index)) + payload_index
        footer = FOOTER_PAYLOAD.pack(
            FOOTER_TAG,
            V1[0],
            V1[1],
            0,
            index_offset,
            SKIPPABLE_HEADER.size + len(payload_index),
            hashlib.sha256(payload_index).digest(),
        )
        out += SKIPPABLE_HEADER.pack(FOOTER_FRAME_MAGIC, len(footer)) + footer
        stats.frames = len(frames)
        stats.archive_bytes = len(out)
        self.stats = stats
        return bytes(out)


def build_format1(builder: Any) -> tuple[bytes, WriteStats]:
    """What ``ArchiveBuilder(..., format_version=(1, 0))`` wrote: the builder's manifest labelled 1.0, one
    frame per variant for its launch members and one for its IR, then each module source."""
    manifest = builder.manifest().to_json()
    manifest["format_version"] = f"{V1[0]}.{V1[1]}"
    writer = Format1Writer(level=builder.level, dictionary=builder.dictionary)
    model = builder.manifest()
    for v in model.variants:
        files = builder.variants[v.key].files
        writer.add_group([(v.binary.path, files["binary"]), (v.metadata.path, files["metadata"])])
        if v.ir:
            writer.add_group([(v.ir[stage].path, files[stage]) for stage in sorted(v.ir)])
    sources = builder._sources()
    for ref in model.sources:
        writer.add_group([(ref.path, sources[ref.path])])
    return writer.to_bytes(manifest), writer.stats
