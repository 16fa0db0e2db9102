"""What karchive writes into an OCI registry (spec/REGISTRY.md §10, "OCI registries"): media types,
annotations, and the manifests of an archive and of a signature, built and read back here only.

An archive is an OCI image-spec 1.1 *artifact*: a manifest whose ``artifactType`` is karchive's, whose
config is the empty descriptor, and whose one layer is the ``.karc`` file as one blob. Everything
``karchive ls`` shows is in the manifest's annotations, so listing never downloads a blob. A
signature is a second artifact whose ``subject`` is the archive's manifest (a *referrer*). Everything
read back is untrusted: each field is checked and a malformed document is a
:class:`~karchive.errors.DamagedRegistryError` naming it.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from ..core.digest import is_sha256_hex
from ..core.grammar import fullmatch
from ..core.jsonio import parse_json
from ..errors import DamagedRegistryError, RegistryError, RegistryValueError
from .records import VersionRecord
from .refs import check_name, check_version

MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
INDEX_TYPE = "application/vnd.oci.image.index.v1+json"
EMPTY_TYPE = "application/vnd.oci.empty.v1+json"
EMPTY_BLOB = b"{}"
EMPTY_DIGEST = "sha256:" + hashlib.sha256(EMPTY_BLOB).hexdigest()

ARCHIVE_ARTIFACT = "application/vnd.karchive.archive.v1"
ARCHIVE_LAYER = "application/vnd.karchive.archive.v1+zstd"
SIGNATURE_ARTIFACT = "application/vnd.karchive.signature.v1"
SIGNATURE_LAYER = "application/vnd.dsse.envelope.v1+json"
METADATA_ARTIFACT = "application/vnd.karchive.registry-metadata.v1"

P = "dev.karchive."
A_NAME, A_VERSION, A_FORMAT, A_TARGETS, A_TRITON = P + "name", P + "version", P + "format", P + "targets", P + "triton"
A_INDEX, A_VARIANTS, A_KERNELS, A_KEY = P + "index-sha256", P + "variants", P + "kernels", P + "keyid"
A_CREATED = "org.opencontainers.image.created"
A_TITLE = "org.opencontainers.image.title"

#: Manifests karchive reads are small; a larger one is refused before it is parsed.
MAX_MANIFEST_BYTES = 4 << 20
_REPO_COMPONENT = re.compile(r"[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")
_FALLBACK_TAG = re.compile(r"sha256-[0-9a-f]{64}.*")


def repository_component(name: str) -> str:
    """An archive name as an OCI repository path component (lower case only, as the distribution spec says)."""
    check_name(name)
    if not fullmatch(_REPO_COMPONENT, name):
        raise RegistryValueError(
            f"archive name {name!r} cannot be an OCI repository name: OCI repositories are lower "
            "case letters and digits separated by '.', '_', '__' or '-'; rename the archive",
            value=repr(name)[:200],
        )
    return name


def version_tag(version: str) -> str:
    """A version as an OCI tag: the same string. Tags cannot hold '+' (semver build metadata): refused, never
    rewritten, so two versions can never share a tag."""
    check_version(version)
    if not fullmatch(_TAG, version) or fullmatch(_FALLBACK_TAG, version):
        raise RegistryValueError(
            f"version {version!r} cannot be an OCI tag (letters, digits, '.', '_' and '-' only, "
            "and not the referrers fallback form sha256-...)",
            value=repr(version)[:200],
        )
    return version


def is_version_tag(tag: str) -> bool:
    try:
        version_tag(tag)
        return True
    except RegistryError:
        return False


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def fallback_tag(manifest_digest: str) -> str:
    """The referrers tag schema (distribution-spec 1.1): the index of a manifest's referrers where the
    registry serves no referrers API."""
    return manifest_digest.replace(":", "-", 1)


def descriptor(
    media_type: str, data_digest: str, size: int, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    out: dict[str, Any] = {"mediaType": media_type, "digest": data_digest, "size": size}
    if annotations:
        out["annotations"] = annotations
    return out


def empty_config() -> dict[str, Any]:
    return descriptor(EMPTY_TYPE, EMPTY_DIGEST, len(EMPTY_BLOB))


def encode(doc: dict[str, Any]) -> bytes:
    """The bytes pushed: compact and key-sorted, so the same document always has the same digest."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def archive_manifest(record: VersionRecord, *, format_version: str = "", triton: str = "") -> bytes:
    """The archive's manifest: the record's facts as annotations over the one ``.karc`` layer."""
    notes = {
        A_NAME: record.name,
        A_VERSION: record.version,
        A_INDEX: record.index_sha256,
        A_VARIANTS: str(record.variants),
        A_TARGETS: ",".join(record.targets),
        A_KERNELS: ",".join(record.kernels),
    }
    if record.published:
        notes[A_CREATED] = record.published
    if format_version:
        notes[A_FORMAT] = format_version
    if triton:
        notes[A_TRITON] = triton
    layer = descriptor(
        ARCHIVE_LAYER, "sha256:" + record.sha256, record.size, {A_TITLE: f"{record.name}-{record.version}.karc"}
    )
    return encode(
        {
            "schemaVersion": 2,
            "mediaType": MANIFEST_TYPE,
            "artifactType": ARCHIVE_ARTIFACT,
            "config": empty_config(),
            "layers": [layer],
            "annotations": notes,
        }
    )


def signature_manifest(subject: dict[str, Any], key_id: str, envelope: bytes) -> bytes:
    layer = descriptor(SIGNATURE_LAYER, digest_of(envelope), len(envelope))
    return encode(
        {
            "schemaVersion": 2,
            "mediaType": MANIFEST_TYPE,
            "artifactType": SIGNATURE_ARTIFACT,
            "config": empty_config(),
            "layers": [layer],
            "subject": subject,
            "annotations": {A_KEY: key_id},
        }
    )


def load_manifest(data: bytes, where: str) -> dict[str, Any]:
    if len(data) > MAX_MANIFEST_BYTES:
        raise DamagedRegistryError(f"{where}: manifest larger than {MAX_MANIFEST_BYTES} bytes", where=where)
    doc = parse_json(data, where, error=DamagedRegistryError)
    if not isinstance(doc, dict):
        raise DamagedRegistryError(f"{where}: not a JSON object", where=where)
    return doc


def _sha256_of(desc: Any, where: str) -> tuple[str, int]:
    """``(hex digest, size)`` of a descriptor; only sha256 digests are accepted."""
    if not isinstance(desc, dict):
        raise DamagedRegistryError(f"{where}: bad descriptor", where=where)
    digest, size = desc.get("digest"), desc.get("size")
    if not isinstance(digest, str) or not digest.startswith("sha256:") or not is_sha256_hex(digest[7:]):
        raise DamagedRegistryError(f"{where}: descriptor digest {digest!r} is not sha256:<64 hex>", where=where)
    if type(size) is not int or size < 0:
        raise DamagedRegistryError(f"{where}: descriptor size {size!r} is not a non-negative integer", where=where)
    return digest[7:], size


def archive_layer(doc: dict[str, Any], where: str) -> tuple[str, int]:
    """The ``.karc`` layer's ``(sha256 hex, size)`` of an archive manifest (refused if it is not one)."""
    if doc.get("artifactType") != ARCHIVE_ARTIFACT:
        raise DamagedRegistryError(
            f"{where}: not a karchive archive (artifactType {doc.get('artifactType')!r}, expected {ARCHIVE_ARTIFACT})",
            where=where,
        )
    layers = doc.get("layers")
    if (
        not isinstance(layers, list)
        or len(layers) != 1
        or not isinstance(layers[0], dict)
        or layers[0].get("mediaType") != ARCHIVE_LAYER
    ):
        raise DamagedRegistryError(f"{where}: an archive manifest has exactly one {ARCHIVE_LAYER} layer", where=where)
    return _sha256_of(layers[0], where)


def record_from_manifest(data: bytes, where: str, manifest_digest: str) -> VersionRecord:
    """The version record an archive manifest stands for (its annotations and its layer), checked."""
    doc = load_manifest(data, where)
    sha256, size = archive_layer(doc, where)
    notes = doc.get("annotations")
    if not isinstance(notes, dict) or not all(isinstance(v, str) for v in notes.values()):
        raise DamagedRegistryError(f"{where}: archive manifest without string annotations", where=where)

    def split(key: str) -> tuple[str, ...]:
        return tuple(v for v in notes.get(key, "").split(",") if v)

    variants = notes.get(A_VARIANTS, "0")
    if not variants.isdigit():
        raise DamagedRegistryError(f"{where}: {A_VARIANTS} annotation {variants!r} is not a count", where=where)
    obj = {
        "kind": "karchive-version",
        "layout": 1,
        "name": notes.get(A_NAME),
        "version": notes.get(A_VERSION),
        "sha256": sha256,
        "size": size,
        "index_sha256": notes.get(A_INDEX),
        "published": notes.get(A_CREATED, ""),
        "variants": int(variants),
        "kernels": list(split(A_KERNELS)),
        "targets": list(split(A_TARGETS)),
        "manifest": manifest_digest,
        "format_version": notes.get(A_FORMAT, ""),
        "triton": notes.get(A_TRITON, ""),
    }
    return VersionRecord.from_dict(obj, where)


def signature_key(doc: dict[str, Any], where: str) -> tuple[str, str, int]:
    """``(key id, envelope sha256 hex, size)`` of a signature referrer."""
    if doc.get("artifactType") != SIGNATURE_ARTIFACT:
        raise DamagedRegistryError(f"{where}: not a karchive signature", where=where)
    notes = doc.get("annotations") or {}
    key_id = notes.get(A_KEY) if isinstance(notes, dict) else None
    layers = doc.get("layers")
    if not is_sha256_hex(key_id) or not isinstance(layers, list) or len(layers) != 1:
        raise DamagedRegistryError(
            f"{where}: a signature referrer names one key id and holds one envelope", where=where
        )
    digest, size = _sha256_of(layers[0], where)
    return str(key_id), digest, size
