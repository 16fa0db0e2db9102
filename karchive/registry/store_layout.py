"""Where things live inside a registry (spec/REGISTRY.md, "Layout"). Paths are relative to its root."""

from __future__ import annotations

from ..core.digest import is_sha256_hex
from ..errors import RegistryValueError
from .refs import check_name, check_version

LAYOUT_VERSION = 1
MARKER = "karchive-registry.json"
ROOT_INDEX = "index.json"
NAMES_DIR = "names"
RECORD_SUFFIX = ".json"


def check_digest(digest: object) -> str:
    if not is_sha256_hex(digest):
        raise RegistryValueError(
            f"bad sha256 digest {digest!r}: expected 64 lowercase hex digits", value=repr(digest)[:200]
        )
    return digest


def blob_path(digest: str) -> str:
    return f"blobs/sha256/{check_digest(digest)}.karc"


def versions_dir(name: str) -> str:
    return f"{NAMES_DIR}/{check_name(name)}/versions"


def version_record_path(name: str, version: str) -> str:
    return f"{versions_dir(name)}/{check_version(version)}{RECORD_SUFFIX}"


def name_index_path(name: str) -> str:
    return f"{NAMES_DIR}/{check_name(name)}/index.json"


# -- signatures (spec/REGISTRY.md §3, "Signatures") --------------------------------------------------
SIGNATURE_INDEX = "index.json"
SIGNATURE_SUFFIX = ".json"


def signatures_dir(digest: str) -> str:
    """Beside the blob: one object per signing key, named by its key id."""
    return f"{blob_path(digest)}.sigs"


def signature_path(digest: str, key_id: str) -> str:
    if not is_sha256_hex(key_id):
        raise RegistryValueError(
            f"bad key id {key_id!r}: expected 64 lowercase hex digits (karchive keygen prints it)",
            value=repr(key_id)[:200],
        )
    return f"{signatures_dir(digest)}/{key_id}{SIGNATURE_SUFFIX}"


def signature_index_path(digest: str) -> str:
    return f"{signatures_dir(digest)}/{SIGNATURE_INDEX}"
