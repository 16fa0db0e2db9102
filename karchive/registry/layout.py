"""Where things live inside a registry (spec/REGISTRY.md, "Layout"). Paths are relative to its root."""

from __future__ import annotations

from .refs import check_name, check_version

LAYOUT_VERSION = 1
MARKER = "karchive-registry.json"
ROOT_INDEX = "index.json"
NAMES_DIR = "names"
RECORD_SUFFIX = ".json"


def check_digest(digest: object) -> str:
    if not isinstance(digest, str) or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        from ..errors import RegistryError

        raise RegistryError(f"bad sha256 digest {digest!r}: expected 64 lowercase hex digits")
    return digest


def blob_path(digest: str) -> str:
    return f"blobs/sha256/{check_digest(digest)}.karc"


def versions_dir(name: str) -> str:
    return f"{NAMES_DIR}/{check_name(name)}/versions"


def version_record_path(name: str, version: str) -> str:
    return f"{versions_dir(name)}/{check_version(version)}{RECORD_SUFFIX}"


def name_index_path(name: str) -> str:
    return f"{NAMES_DIR}/{check_name(name)}/index.json"
