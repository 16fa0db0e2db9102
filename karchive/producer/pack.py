"""Assemble compiled variants into one archive: member layout, file digests, manifest.

Layout (spec/FORMAT.md): ``variants/<key>/kernel.<ext>`` for the binary and metadata (one frame, what a
loader reads), the IR stages of a variant in a second frame, and each distinct module source once
under ``sources/<sha256>.py``.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass, field
from typing import Any, Iterable

from .. import __version__
from ..errors import FormatError
from ..format.constants import ABI_VERSION, FORMAT_VERSION, PATH_SENTINEL
from ..format.writer import ArchiveWriter, DictionaryMode, WriteStats, sha256_hex, source_date_epoch
from .describe import BINARY_EXT, CompiledVariant


def _ref(path: str, data: bytes) -> dict:
    return {"path": path, "size": len(data), "sha256": sha256_hex(data)}


@dataclass
class ArchiveBuilder:
    name: str
    version: str
    produced_by: dict = field(default_factory=dict)
    level: int = 19
    dictionary: DictionaryMode | int = "auto"
    variants: dict[str, CompiledVariant] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. autotune records (capture)

    def add(self, variant: CompiledVariant) -> bool:
        """Add a variant; a second variant with the same key is dropped (same inputs, same binary)."""
        key = variant.entry["key"]
        if key in self.variants:
            return False
        self.variants[key] = variant
        return True

    def extend(self, variants: Iterable[CompiledVariant]) -> None:
        for v in variants:
            self.add(v)

    def manifest_and_writer(self) -> tuple[dict, ArchiveWriter]:
        if not self.name or not self.version:
            raise FormatError("an archive needs a name and a version")
        writer = ArchiveWriter(level=self.level, dictionary=self.dictionary)
        sources: dict[str, bytes] = {}
        entries = []
        for key in sorted(self.variants, key=lambda k: (self.variants[k].entry["kernel"], k)):
            v = self.variants[key]
            backend = v.entry["target"]["backend"]
            base = f"variants/{key}/kernel"
            binary_name = f"{base}.{BINARY_EXT[backend]}"
            meta_name = f"{base}.json"
            files: dict[str, Any] = {
                "binary": _ref(binary_name, v.files["binary"]),
                "metadata": _ref(meta_name, v.files["metadata"]),
            }
            writer.add_group([(binary_name, v.files["binary"]), (meta_name, v.files["metadata"])])
            ir_members = [(f"{base}.{stage}", data) for stage, data in sorted(v.files.items())
                          if stage not in ("binary", "metadata")]
            if ir_members:
                files["ir"] = {name.rsplit(".", 1)[1]: _ref(name, data) for name, data in ir_members}
                writer.add_group(ir_members)
            if v.source_text is not None:
                data = v.source_text.encode()
                path = f"sources/{sha256_hex(data)}.py"
                sources[path] = data
                files["source"] = path
            for text in v.extra_sources:  # helper modules a rebuild imports (provenance.build.sources)
                data = text.encode()
                sources[f"sources/{sha256_hex(data)}.py"] = data
            entries.append({**v.entry, "files": files})
        for path in sorted(sources):
            writer.add_group([(path, sources[path])])
        epoch = os.environ.get("SOURCE_DATE_EPOCH")
        manifest = {
            "format": "karchive",
            "format_version": f"{FORMAT_VERSION[0]}.{FORMAT_VERSION[1]}",
            "abi_version": ABI_VERSION,
            "name": self.name,
            "version": self.version,
            "produced_by": {"karchive": __version__, **self.produced_by},
            "created": (datetime.datetime.fromtimestamp(source_date_epoch(), datetime.timezone.utc)
                        .strftime("%Y-%m-%dT%H:%M:%SZ") if epoch else None),
            "path_sentinel": PATH_SENTINEL,
            "sources": [_ref(p, d) for p, d in sorted(sources.items())],
            "variants": entries,
            **self.extra,
        }
        return manifest, writer

    def to_bytes(self) -> tuple[bytes, WriteStats]:
        manifest, writer = self.manifest_and_writer()
        data = writer.to_bytes(manifest)
        return data, writer.stats

    def write(self, path: str | os.PathLike) -> WriteStats:
        manifest, writer = self.manifest_and_writer()
        return writer.write(path, manifest)
