"""Fixed numbers of the .karc container (spec/FORMAT.md is the normative text)."""

from __future__ import annotations

import struct

#: Archive container version written by this implementation (major, minor). Readers refuse a newer major.
FORMAT_VERSION: tuple[int, int] = (2, 1)
#: Majors this reader reads: 1.x (one manifest, every member in the index) and 2.x (manifest shards).
READABLE_MAJORS: tuple[int, ...] = (1, 2)
#: Highest version of the launch-ABI description inside a variant (spec/FORMAT.md, "Launch ABI") this
#: implementation reads. Version 2 adds ``tensordesc`` parameters; a variant without them is written as 1.
ABI_VERSION: int = 2
#: The version a variant is written with when nothing in it needs version 2 (older readers read it).
ABI_VERSION_PLAIN: int = 1

#: zstd skippable-frame magics (RFC 8878 §3.1.2 reserves 0x184D2A50..0x184D2A5F).
INDEX_FRAME_MAGIC = 0x184D2A5A
FOOTER_FRAME_MAGIC = 0x184D2A5B
ZSTD_FRAME_MAGIC = 0xFD2FB528

FOOTER_TAG = b"KARCFOOT"
#: Footer payload: tag, u16 major, u16 minor, u32 flags, u64 index offset, u64 index length, sha256.
FOOTER_PAYLOAD = struct.Struct("<8sHHIQQ32s")
SKIPPABLE_HEADER = struct.Struct("<II")
FOOTER_SIZE = SKIPPABLE_HEADER.size + FOOTER_PAYLOAD.size  # 72 bytes, always the file's last bytes

TAR_BLOCK = 512

MANIFEST_NAME = "karchive/manifest.json"
DICTIONARY_NAME = "karchive/dictionary.zdict"
#: Format 2: one manifest shard per kernel, ``karchive/shards/<n>.json`` (n counts from 0 in header order).
SHARD_PREFIX = "karchive/shards/"

#: Path sentinel written in place of machine-specific directories inside metadata JSON.
PATH_SENTINEL = "@KARCHIVE_ROOT@"

#: Speculative tail read when opening: footer, index, manifest (format 2: its header) and dictionary
#: usually fit. 128 KiB holds them for 10,000 variants in format 2 (about 90 KB: docs/benchmarks.md).
TAIL_READ = 128 * 1024
