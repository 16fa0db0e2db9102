"""Assemble compiled variants into one archive: member groups (frames), sources, the manifest.

Layout (spec/FORMAT.md §4): what a loader reads (a variant's binary and metadata) lies apart from its
IR stages, and each distinct module source is stored once under ``sources/<sha256>.py``. Format 2 packs
the launch members of one kernel and target into frames of up to :data:`LAUNCH_FRAME` bytes, and the IR
of one kernel and target into frames of up to :data:`IR_FRAME` (compressed with a window that spans the
frame): siblings share long runs, so a frame of several compresses far better than one each, while
reading a variant still decodes one small frame. (Format 1.0
is read, never written: :mod:`karchive.format.writer`.)
Member names come from the variants' file refs (:mod:`karchive.format.layout`), the manifest from the
typed model (:class:`karchive.format.manifest.Manifest`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ... import __version__
from ...core.digest import sha256_hex
from ...core.units import utc_text
from ...errors import BuildError, FormatError
from ...format.layout import source_member
from ...format.manifest import FileRef, Manifest, Variant
from ...format.reader import scan_manifest
from ...format.writer import ArchiveWriter, DictionaryMode, WriteStats, source_date_epoch
from ..compile.describe import CompiledVariant

__all__ = ["ArchiveBuilder", "IR_FRAME", "LAUNCH_FRAME"]

#: Format 2 frame sizes (decompressed): launch members of one kernel and target (a loader decodes one:
#: kept small), IR of one kernel and target (never on the load path: large, so that every sibling's IR
#: compresses against the others; the writer gives such a frame a window as large as itself, and
#: :data:`karchive.format.writer.MAX_WINDOW_LOG` bounds it). Measured on Triton output
#: (tools/bench_archive.py, docs/benchmarks.md "Archive size").
LAUNCH_FRAME = 256 * 1024
IR_FRAME = 32 * 1024 * 1024


@dataclass
class ArchiveBuilder:
    name: str
    version: str
    produced_by: dict = field(default_factory=dict)
    level: int = 19
    dictionary: DictionaryMode | int = "auto"
    variants: dict[str, CompiledVariant] = field(default_factory=dict)
    autotune: list[dict] | None = None  # autotune records (capture)
    heuristics: list[dict] | None = None  # heuristics records (capture)
    extra: dict[str, Any] = field(default_factory=dict)  # other optional top-level manifest fields
    #: other members (path -> bytes), each named with its size and sha256 by a file object in ``extra`` (the
    #: reader refuses a member the manifest does not list): Inductor's cache artifacts (spec/FORMAT.md §6.7)
    members: dict[str, bytes] = field(default_factory=dict)

    def add(self, variant: CompiledVariant) -> bool:
        """Add a variant; a second variant with the same key is dropped (same inputs, same binary)."""
        if variant.key in self.variants:
            return False
        self.variants[variant.key] = variant
        return True

    def extend(self, variants: Iterable[CompiledVariant]) -> None:
        for v in variants:
            self.add(v)

    def carry_members(self, reader: Any) -> None:
        """The members the file objects in ``extra`` name, read (digests checked) from ``reader``: what an archive
        rewritten with its extra fields kept (``karchive tune``) must keep too."""
        for f in scan_manifest(self.extra, 64):
            self.members[f["path"]] = reader.read(f["path"])

    def manifest(self) -> Manifest:
        if not self.name or not self.version:
            raise FormatError("an archive needs a name and a version")
        self._check_kernel_identity()
        sources = self._sources()
        created = None
        if os.environ.get("SOURCE_DATE_EPOCH"):  # a timestamp only when the user asks for one
            created = utc_text(source_date_epoch())
        return Manifest.build(
            self.name,
            self.version,
            (v.variant for v in self.variants.values()),
            produced_by={"karchive": __version__, **self.produced_by},
            created=created,
            sources=[FileRef.for_bytes(path, data) for path, data in sources.items()],
            autotune=self.autotune,
            heuristics=self.heuristics,
            extra=self.extra,
        )

    def _check_kernel_identity(self) -> None:
        """Refuse two different kernels under one name. A kernel is filed as ``module:qualname``; two
        functions can still share that (two files ``kernels.py`` in different directories of one build
        spec, a module edited and re-imported during a capture), and their variants under one name
        would let selection pick between different code. The kernel's source key (Triton's hash of
        its source and what it calls) tells them apart; Triton-cache imports record none of their own."""
        keys: dict[str, dict[str, str]] = {}
        for cv in self.variants.values():
            v = cv.variant
            sk = v.provenance.source_key
            if sk and not sk.startswith("triton-cache:"):
                keys.setdefault(v.kernel, {}).setdefault(sk, _where(v))
        clash = {k: found for k, found in keys.items() if len(found) > 1}
        if clash:
            kernel, found = sorted(clash.items())[0]
            detail = "; ".join(f"source key {sk[:12]} from {where}" for sk, where in sorted(found.items()))
            msg = (
                f"two different kernels would be archived as {kernel!r} ({detail}): a kernel is named by its "
                "module and qualified name, and these share both (two modules of one name, e.g. two files "
                "kernels.py in different directories, or a module changed between compiles); rename one"
            )
            raise BuildError(msg, failures=tuple((k, f"{len(f)} different sources") for k, f in sorted(clash.items())))

    def manifest_and_writer(self) -> tuple[dict[str, Any], ArchiveWriter]:
        """The manifest as it will be written (JSON dict) and a writer holding every member group."""
        manifest = self.manifest()
        writer = ArchiveWriter(level=self.level, dictionary=self.dictionary)
        self._add_chunked(writer, manifest)
        sources = self._sources()
        for ref in manifest.sources:
            writer.add_group([(ref.path, sources[ref.path])])
        named = {f["path"]: (f["size"], f["sha256"]) for f in scan_manifest(self.extra, 64)}
        for path, data in sorted(self.members.items()):
            if named.get(path) != (len(data), sha256_hex(data)):
                raise FormatError(f"member {path!r}: no file object in the manifest names it with its size and sha256")
            writer.add_group([(path, data)], use_dict=False)  # one frame of its own, read only by who needs it
        missing = sorted(set(named) - set(self.members))
        if missing:  # a rewritten archive that kept the extra fields must keep their members (carry_members)
            raise FormatError(f"the manifest names {missing[0]!r}, a member the builder was not given")
        return manifest.to_json(), writer

    def _add_chunked(self, writer: ArchiveWriter, manifest: Manifest) -> None:
        """Frames, kernel by kernel: launch members per target, then the IR per target. IR is grouped
        by target too: stages of one target (PTX of sm_90 variants) resemble each other far more than
        those of another, and a frame then holds what one kind of device's variants need."""
        for kernel in manifest.kernels():
            variants = manifest.variants_of(kernel)
            by_target: dict[str, list[Variant]] = {}
            for v in variants:
                by_target.setdefault(str(v.target), []).append(v)
            for target in sorted(by_target):
                units = [
                    [
                        (v.binary.path, self.variants[v.key].files["binary"]),
                        (v.metadata.path, self.variants[v.key].files["metadata"]),
                    ]
                    for v in by_target[target]
                ]
                for group in _chunks(units, LAUNCH_FRAME):
                    writer.add_group(group)
            for target in sorted(by_target):
                units = [
                    [(v.ir[stage].path, self.variants[v.key].files[stage]) for stage in sorted(v.ir)]
                    for v in by_target[target]
                    if v.ir
                ]
                for group in _chunks(units, IR_FRAME):
                    writer.add_group(group, use_dict=False)

    def _sources(self) -> dict[str, bytes]:
        """Every module source the variants need, once: each kernel's module, and the helper modules a
        rebuild imports (``provenance.build.sources``), by member name."""
        out: dict[str, bytes] = {}
        for c in self.variants.values():
            for text in ([c.source_text] if c.source_text is not None else []) + list(c.extra_sources):
                data = text.encode()
                out[source_member(sha256_hex(data))] = data
        return out

    def to_bytes(self) -> tuple[bytes, WriteStats]:
        manifest, writer = self.manifest_and_writer()
        data = writer.to_bytes(manifest)
        return data, writer.stats

    def write(self, path: str | os.PathLike) -> WriteStats:
        manifest, writer = self.manifest_and_writer()
        return writer.write(path, manifest)


def _where(v: Variant) -> str:
    """Where a variant's kernel came from, for an error: its origin and stored module source (named by digest)."""
    return f"{v.provenance.origin}, {v.source or 'no stored source'}"


def _chunks(units: list[list[tuple[str, bytes]]], limit: int) -> list[list[tuple[str, bytes]]]:
    """Consecutive units (one variant's members each, never split) joined into groups of about
    ``limit`` bytes of tar: a group closes before the unit that would take it past the limit."""
    groups: list[list[tuple[str, bytes]]] = []
    current: list[tuple[str, bytes]] = []
    size = 0
    for unit in units:
        n = sum(512 + len(data) for _, data in unit)
        if current and size + n > limit:
            groups.append(current)
            current, size = [], 0
        current.extend(unit)
        size += n
    if current:
        groups.append(current)
    return groups
