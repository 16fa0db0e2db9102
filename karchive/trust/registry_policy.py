"""The ``[registry]`` section of a trust policy: whether registry loads need signed registry
metadata (spec/SIGNING.md §11), and which keys of the policy's ``[[keys]]`` may sign it, how many must.

Kept apart from :mod:`.policy` so that the metadata roles add a section without changing how the
rest of a policy is read. The keys are the policy's own (``[[keys]]`` by name): revocation and each
key's rotation window apply to metadata signatures exactly as to archive signatures.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import TrustPolicyError

_FIELDS = {"require_signed_metadata", "keys", "threshold", "timestamp_keys", "timestamp_threshold"}


@dataclass(frozen=True)
class MetadataRole:
    """Who may sign one kind of registry metadata: ``threshold`` distinct keys among ``keys`` (names)."""

    role: str  # "snapshot" or "timestamp"
    keys: tuple[str, ...]
    threshold: int


@dataclass(frozen=True)
class RegistryRules:
    """What a policy asks of registry metadata. ``timestamp`` may name other keys than ``snapshot``
    (TUF's online timestamp key: re-signed by a scheduled job, while the snapshot key stays with
    whoever publishes)."""

    require_signed_metadata: bool
    snapshot: MetadataRole
    timestamp: MetadataRole


def _role(
    section: dict,
    role: str,
    key_field: str,
    threshold_field: str,
    known: Sequence[str],
    path: str,
    default: MetadataRole | None,
) -> MetadataRole:
    def bad(msg: str) -> TrustPolicyError:
        return TrustPolicyError(f"{path}: [registry] {msg}", path=path)

    if key_field not in section and default is not None:
        keys = default.keys
    else:
        raw = section.get(key_field)
        if type(raw) is not list or not raw or any(type(n) is not str for n in raw):
            raise bad(f"'{key_field}' must be a non-empty list of key names from [[keys]]")
        missing = [n for n in raw if n not in known]
        if missing:
            raise bad(f"'{key_field}': unknown key name(s) {missing}; [[keys]] defines {list(known)}")
        keys = tuple(dict.fromkeys(raw))
    if threshold_field in section:
        threshold = section[threshold_field]
    else:
        threshold = default.threshold if default is not None and key_field not in section else 1
    if type(threshold) is not int or threshold < 1:
        raise bad(f"'{threshold_field}' must be an integer >= 1 (metadata nobody signs protects nothing)")
    if threshold > len(keys):
        raise bad(f"'{threshold_field}' {threshold} needs more distinct keys than '{key_field}' lists ({len(keys)})")
    return MetadataRole(role, keys, threshold)


def parse_registry_section(section: Any, key_names: Sequence[str], path: str) -> RegistryRules | None:
    """The ``[registry]`` table (None when absent). Every field is typed strictly: a security policy
    with a typo must be an error, never a weaker policy."""
    if section is None:
        return None
    if type(section) is not dict:
        raise TrustPolicyError(f"{path}: [registry] must be a table", path=path)
    unknown_fields(section, _FIELDS, "[registry]", path)
    require = section.get("require_signed_metadata", False)
    if type(require) is not bool:
        raise TrustPolicyError(f"{path}: [registry] 'require_signed_metadata' must be true or false", path=path)
    snapshot = _role(section, "snapshot", "keys", "threshold", key_names, path, None)
    timestamp = _role(section, "timestamp", "timestamp_keys", "timestamp_threshold", key_names, path, snapshot)
    return RegistryRules(require, snapshot, timestamp)


def unknown_fields(obj: dict, allowed: set[str], where: str, path: str) -> None:
    """Refuse a policy table with a field it does not define (a typo must never weaken a policy)."""
    extra = sorted(set(obj) - allowed)
    if extra:
        raise TrustPolicyError(
            f"{path}: {where} has unknown field(s) {', '.join(map(repr, extra))}; "
            f"allowed: {', '.join(sorted(allowed))}",
            path=path,
        )
