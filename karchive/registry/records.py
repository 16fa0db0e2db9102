"""The JSON documents a registry stores: version records (authoritative) and name indexes (derived).

A version record is created once, exclusively, and never changed: it binds NAME@VERSION to the
sha256 of the archive's bytes. Name indexes and the root index are caches of the records for
backends that cannot list (plain HTTP); they are rebuilt from the records after every publish.
Everything read from a registry is untrusted: each field is checked, and anything malformed is a
:class:`RegistryError` naming the document, never a ``KeyError`` deep inside.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..core.jsonio import canonical_json, parse_json
from ..errors import DamagedRegistryError, RegistryError
from .refs import check_name, check_version
from .store_layout import LAYOUT_VERSION, check_digest

RECORD_KIND = "karchive-version"
NAME_INDEX_KIND = "karchive-name-index"
ROOT_INDEX_KIND = "karchive-root-index"
MARKER_KIND = "karchive-registry"


@dataclass(frozen=True)
class VersionRecord:
    name: str
    version: str
    sha256: str  # of the whole archive file
    size: int
    index_sha256: str  # from the archive footer: authenticates lazy (ranged) reads
    published: str = ""  # UTC, ISO 8601; informational
    variants: int = 0
    kernels: tuple[str, ...] = field(default_factory=tuple)
    targets: tuple[str, ...] = field(default_factory=tuple)
    #: On an OCI registry, the digest (``sha256:<hex>``) of the archive's manifest, which its tag named
    #: when this record was read; lockfiles pin it (spec/REGISTRY.md §10). Empty elsewhere.
    manifest: str = ""
    #: On an OCI registry, from the manifest's annotations (read without the blob): the archive's format
    #: version and the Triton release(s) that compiled it. Empty elsewhere.
    format_version: str = ""
    triton: str = ""

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.version}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": RECORD_KIND,
            "layout": LAYOUT_VERSION,
            "name": self.name,
            "version": self.version,
            "sha256": self.sha256,
            "size": self.size,
            "index_sha256": self.index_sha256,
            "published": self.published,
            "variants": self.variants,
            "kernels": list(self.kernels),
            "targets": list(self.targets),
            **({"manifest": self.manifest} if self.manifest else {}),
            **({"format_version": self.format_version} if self.format_version else {}),
            **({"triton": self.triton} if self.triton else {}),
        }

    def to_json(self) -> bytes:
        return canonical_json(self.to_dict())

    @classmethod
    def from_dict(cls, obj: Any, where: str) -> VersionRecord:
        if not isinstance(obj, dict):
            raise DamagedRegistryError(f"{where}: version record is not a JSON object", where=where)
        _check_layout(obj, where)
        try:
            record = cls(
                name=check_name(obj.get("name")),
                version=check_version(obj.get("version")),
                sha256=check_digest(obj.get("sha256")),
                size=_nonneg_int(obj.get("size"), "size"),
                index_sha256=check_digest(obj.get("index_sha256")),
                published=_str(obj.get("published", ""), "published"),
                variants=_nonneg_int(obj.get("variants", 0), "variants"),
                kernels=tuple(_str_list(obj.get("kernels", []), "kernels")),
                targets=tuple(_str_list(obj.get("targets", []), "targets")),
                manifest=_manifest_digest(obj.get("manifest", "")),
                format_version=_str(obj.get("format_version", ""), "format_version")[:64],
                triton=_str(obj.get("triton", ""), "triton")[:256],
            )
        except RegistryError as exc:
            raise DamagedRegistryError(f"{where}: corrupt version record: {exc}", where=where) from None
        return record

    @classmethod
    def from_json(cls, data: bytes, where: str) -> VersionRecord:
        return cls.from_dict(load_json(data, where), where)


def load_json(data: bytes, where: str) -> Any:
    """A registry document: canonical JSON that karchive wrote; anything else means a damaged registry."""
    return parse_json(data, where, error=RegistryError, note=" (corrupt registry file)")


def _check_layout(obj: dict, where: str) -> None:
    layout = obj.get("layout")
    if type(layout) is not int:
        raise DamagedRegistryError(f"{where}: missing or bad 'layout' field", where=where)
    if layout > LAYOUT_VERSION:
        raise DamagedRegistryError(
            f"{where}: registry layout {layout} is newer than this karchive understands ({LAYOUT_VERSION}); upgrade karchive",
            where=where,
        )


def _nonneg_int(value: Any, what: str) -> int:
    if type(value) is not int or value < 0:
        raise DamagedRegistryError(f"{what} must be a non-negative integer, got {value!r}", where=what)
    return value


def _str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise DamagedRegistryError(f"{what} must be a string, got {value!r}", where=what)
    return value


def _manifest_digest(value: Any) -> str:
    if value == "":
        return ""
    if not isinstance(value, str) or not value.startswith("sha256:"):
        raise DamagedRegistryError(f"manifest must be 'sha256:<64 hex>', got {value!r}"[:300], where="manifest")
    check_digest(value[7:])
    return value


def _str_list(value: Any, what: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise DamagedRegistryError(f"{what} must be a list of strings", where=what)
    return value


# -- derived indexes -------------------------------------------------------------------------------
def encode_name_index(name: str, records: list[VersionRecord]) -> bytes:
    return canonical_json(
        {
            "kind": NAME_INDEX_KIND,
            "layout": LAYOUT_VERSION,
            "name": name,
            "versions": {r.version: r.to_dict() for r in records},
        }
    )


def decode_name_index(data: bytes, name: str, where: str) -> dict[str, VersionRecord]:
    def refuse(msg: str) -> DamagedRegistryError:
        return DamagedRegistryError(f"{where}: {msg}", where=where)

    obj = load_json(data, where)
    if not isinstance(obj, dict) or obj.get("kind") != NAME_INDEX_KIND:
        raise refuse(f"corrupt name index (not a {NAME_INDEX_KIND} document); rebuild it with `karchive reindex`")
    _check_layout(obj, where)
    versions = obj.get("versions")
    if obj.get("name") != name or not isinstance(versions, dict):
        raise refuse("corrupt name index (wrong name or no versions); rebuild it with `karchive reindex`")
    out: dict[str, VersionRecord] = {}
    for version, rec in versions.items():
        record = VersionRecord.from_dict(rec, f"{where} [{version}]")
        if record.version != version or record.name != name:
            raise refuse(f"entry {version!r} describes {record.ref}; rebuild it with `karchive reindex`")
        out[version] = record
    return out


def encode_root_index(names: list[str]) -> bytes:
    return canonical_json({"kind": ROOT_INDEX_KIND, "layout": LAYOUT_VERSION, "names": sorted(names)})


def decode_root_index(data: bytes, where: str) -> list[str]:
    obj = load_json(data, where)
    if not isinstance(obj, dict) or obj.get("kind") != ROOT_INDEX_KIND or not isinstance(obj.get("names"), list):
        raise DamagedRegistryError(f"{where}: corrupt root index; rebuild it with `karchive reindex`", where=where)
    _check_layout(obj, where)
    try:
        return [check_name(n) for n in obj["names"]]
    except RegistryError as exc:
        raise DamagedRegistryError(f"{where}: corrupt root index: {exc}", where=where) from None


def encode_marker() -> bytes:
    return canonical_json({"kind": MARKER_KIND, "layout": LAYOUT_VERSION})


def check_marker(data: bytes, where: str) -> None:
    obj = load_json(data, where)
    if not isinstance(obj, dict) or obj.get("kind") != MARKER_KIND:
        raise DamagedRegistryError(f"{where}: not a karchive registry marker", where=where)
    _check_layout(obj, where)
