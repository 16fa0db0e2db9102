"""Everything karchive checks about an archive file before trusting it: digest, size, structure.

Publishing, caching and signing all go through :func:`check_archive_file`, so an archive enters a
registry or the local cache, or gets signed, only after its sha256 is known and every frame and member
has been verified.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..core.digest import sha256_file
from ..errors import DigestMismatchError, FormatError, IntegrityError
from .constants import FOOTER_PAYLOAD, FOOTER_SIZE, SKIPPABLE_HEADER
from .manifest import Manifest
from .reader import ArchiveReader
from .source import FileSource


@dataclass(frozen=True)
class ArchiveFacts:
    name: str
    version: str
    sha256: str
    size: int
    index_sha256: str
    variants: int
    kernels: tuple[str, ...]
    targets: tuple[str, ...]


def index_sha256_from_footer(footer: bytes) -> str:
    """The index digest stored in the 72-byte footer; it authenticates the index, which pins the manifest."""
    if len(footer) != FOOTER_SIZE:
        raise FormatError("footer has the wrong size")
    fields = FOOTER_PAYLOAD.unpack_from(footer, SKIPPABLE_HEADER.size)
    return bytes(fields[-1]).hex()


def check_archive_file(
    path: str | os.PathLike,
    *,
    sha256: str | None = None,
    size: int | None = None,
    name: str | None = None,
    version: str | None = None,
) -> ArchiveFacts:
    """Hash, open and fully verify an archive; compare with what a record says when given."""
    where = os.fspath(path)
    digest, actual_size = sha256_file(path)
    if size is not None and actual_size != size:
        raise DigestMismatchError(
            f"{where}: {actual_size} bytes, the registry record says {size} (truncated or tampered)",
            source=where,
            expected=str(size),
            actual=str(actual_size),
        )
    if sha256 is not None and digest != sha256:
        raise DigestMismatchError(
            f"{where}: sha256 {digest} differs from the registry record's {sha256} (tampered or corrupt)",
            source=where,
            expected=sha256,
            actual=digest,
        )
    source = FileSource(path)
    try:
        reader = ArchiveReader(source)
        problems = reader.verify()
        if problems:
            shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
            raise IntegrityError(f"{where}: archive does not verify: {shown}", source=where)
        manifest = reader.model  # identity and counts; format 2 answers them from the header
        if not manifest.is_sharded:  # format 2: verify() parsed every shard's variants, one shard at a time
            Manifest.from_json(reader.manifest)
        footer = source.read(source.size - FOOTER_SIZE, FOOTER_SIZE)
    finally:
        source.close()
    if name is not None and (manifest.name, manifest.version) != (name, version):
        raise DigestMismatchError(
            f"{where}: archive says it is {manifest.name}@{manifest.version}, the registry record says {name}@{version}",
            source=where,
            expected=f"{name}@{version}",
            actual=f"{manifest.name}@{manifest.version}",
        )
    return ArchiveFacts(
        name=manifest.name,
        version=manifest.version,
        sha256=digest,
        size=actual_size,
        index_sha256=index_sha256_from_footer(footer),
        variants=len(manifest),
        kernels=tuple(manifest.kernels()),
        targets=tuple(manifest.targets()),
    )
