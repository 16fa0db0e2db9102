"""Signed registry metadata (spec/SIGNING.md §11): the *snapshot* of every name's versions and their
digests, and the short-lived *timestamp* that signs the snapshot's version and digest (TUF's snapshot
and timestamp roles, without its root and targets roles).

This module holds what needs no registry: the timestamp document, the strict field parsers both
documents use (untrusted payloads), signing with Ed25519 in DSSE envelopes (:mod:`.dsse`), and
verification against a trust policy's ``[registry]`` section (:mod:`.registry_policy`) with the
policy's own keys, revocations and key windows. The snapshot document names registry names and
versions, so it lives with them in :mod:`karchive.registry.metadata_store` (the trust layer does not import
the registry), as do where the documents are stored and the client's memory of the newest it verified.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..core.digest import is_sha256_hex
from ..core.grammar import fullmatch
from ..core.jsonio import canonical_json, parse_json
from ..core.units import UTC_TIME, utc_text
from ..errors import EnvelopeError, RegistryMetadataError
from . import reasons
from .dsse import MAX_ENVELOPE_BYTES, Envelope, verify_signature
from .keys import PublicKey, SigningKey, short_id
from .policy import PolicyKey, TrustPolicy
from .registry_policy import MetadataRole
from .verify import MAX_VERIFICATIONS, MAX_VERIFIED_BYTES, _find_key, key_standing

#: DSSE payload types: PAE authenticates the type with the payload, so a timestamp can never be
#: presented as a snapshot (or an archive statement as either).
SNAPSHOT_TYPE = "application/vnd.karchive.registry-snapshot+json"
TIMESTAMP_TYPE = "application/vnd.karchive.registry-timestamp+json"
_ROLE_OF = {SNAPSHOT_TYPE: "snapshot", TIMESTAMP_TYPE: "timestamp"}
SNAPSHOT_KIND = "karchive-registry-snapshot"
TIMESTAMP_KIND = "karchive-registry-timestamp"
SPEC_VERSION = 1

#: A snapshot envelope is at most what any DSSE envelope may be (4 MiB: some 15,000 versions); a
#: timestamp is a few hundred bytes. Far larger is hostile, and is refused before it is parsed.
MAX_SNAPSHOT_BYTES = MAX_ENVELOPE_BYTES
MAX_TIMESTAMP_BYTES = 64 * 1024
MAX_SNAPSHOT_VALUES = 400_000
#: Version numbers stay far below 2**53 so every JSON reader reads them exactly.
MAX_VERSION = 2**53 - 1

_TIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z")
SNAPSHOT_FIELDS = {"_type", "spec_version", "version", "issued", "expires", "names"}
_TIMESTAMP_FIELDS = {"_type", "spec_version", "version", "issued", "expires", "snapshot"}
_POINTER_FIELDS = {"version", "sha256", "size"}

UTC = datetime.timezone.utc


def malformed(where: str, msg: str, role: str) -> RegistryMetadataError:
    # The document layer knows neither registry nor policy (``where`` names the document; load_trusted adds
    # them); a malformed document has no version to trust, and no other reason's fields apply.
    return RegistryMetadataError(
        f"{where}: {msg}",
        reason=reasons.METADATA_MALFORMED,
        role=role,
        registry=None,
        policy_sha256=None,
        archive=None,
        version=None,
        seen=None,
        expires=None,
    )


def parse_time(value: Any, what: str, where: str, role: str) -> datetime.datetime:
    if not fullmatch(_TIME, value):
        raise malformed(where, f"'{what}' must be a UTC time YYYY-MM-DDTHH:MM:SSZ, got {str(value)[:40]!r}", role)
    try:
        return datetime.datetime.strptime(value, UTC_TIME).replace(tzinfo=UTC)
    except ValueError as exc:
        raise malformed(where, f"'{what}' is not a real time: {exc}", role) from None


def count_field(value: Any, what: str, where: str, role: str, minimum: int = 1) -> int:
    if type(value) is not int or not minimum <= value <= MAX_VERSION:
        raise malformed(
            where, f"'{what}' must be an integer from {minimum} to {MAX_VERSION}, got {str(value)[:40]!r}", role
        )
    return value


def digest_field(value: Any, what: str, where: str, role: str) -> str:
    if not is_sha256_hex(value):
        raise malformed(where, f"'{what}' must be 64 lowercase hex digits", role)
    return value


def exact_fields(obj: Any, allowed: set[str], what: str, where: str, role: str) -> dict:
    if type(obj) is not dict:
        raise malformed(where, f"{what} is not a JSON object", role)
    if set(obj) != allowed:
        missing, extra = sorted(allowed - set(obj)), sorted(set(obj) - allowed)
        raise malformed(
            where, f"{what}: missing field(s) {missing}, unknown field(s) {[e[:40] for e in extra][:5]}", role
        )
    return obj


def header_fields(obj: dict, kind: str, where: str, role: str) -> tuple[int, datetime.datetime, datetime.datetime]:
    if obj["_type"] != kind:
        raise malformed(where, f"'_type' is {str(obj['_type'])[:60]!r}, not {kind!r}", role)
    if type(obj["spec_version"]) is not int or obj["spec_version"] != SPEC_VERSION:
        raise malformed(
            where,
            f"spec_version {str(obj['spec_version'])[:20]!r} is not {SPEC_VERSION}: a newer "
            "karchive wrote it (upgrade karchive)",
            role,
        )
    version = count_field(obj["version"], "version", where, role)
    issued = parse_time(obj["issued"], "issued", where, role)
    expires = parse_time(obj["expires"], "expires", where, role)
    if expires <= issued:
        raise malformed(where, "'expires' must be later than 'issued'", role)
    return version, issued, expires


def parse_payload(payload: bytes, where: str, role: str, max_values: int) -> Any:
    """Strict JSON (ASCII, no duplicate keys, no NaN), its size bounded before it is parsed."""
    try:
        return parse_json(payload, where, error=RegistryMetadataError, max_values=max_values)
    except RegistryMetadataError as exc:
        raise malformed(where, str(exc).removeprefix(f"{where}: ").removeprefix(where).strip(), role) from None


@dataclass(frozen=True)
class Timestamp:
    """Names the current snapshot by version, sha256 and size of its stored object; short-lived, so
    that a client notices when nobody re-signs it (a freeze)."""

    version: int
    issued: datetime.datetime
    expires: datetime.datetime
    snapshot_version: int
    snapshot_sha256: str
    snapshot_size: int

    def to_payload(self) -> bytes:
        return canonical_json(
            {
                "_type": TIMESTAMP_KIND,
                "spec_version": SPEC_VERSION,
                "version": self.version,
                "issued": utc_text(self.issued),
                "expires": utc_text(self.expires),
                "snapshot": {
                    "version": self.snapshot_version,
                    "sha256": self.snapshot_sha256,
                    "size": self.snapshot_size,
                },
            }
        )

    @classmethod
    def parse(cls, payload: bytes, where: str) -> Timestamp:
        role = "timestamp"
        obj = exact_fields(parse_payload(payload, where, role, 64), _TIMESTAMP_FIELDS, "the timestamp", where, role)
        version, issued, expires = header_fields(obj, TIMESTAMP_KIND, where, role)
        pointer = exact_fields(obj["snapshot"], _POINTER_FIELDS, "'snapshot'", where, role)
        return cls(
            version,
            issued,
            expires,
            count_field(pointer["version"], "snapshot.version", where, role),
            digest_field(pointer["sha256"], "snapshot.sha256", where, role),
            count_field(pointer["size"], "snapshot.size", where, role, minimum=0),
        )


# -- signing ----------------------------------------------------------------------------------------
def sign_payload(payload_type: str, payload: bytes, keys: Sequence[SigningKey]) -> Envelope:
    """One envelope with one signature per key (several keys meet a threshold > 1)."""
    if not keys:
        raise RegistryMetadataError(
            "signing registry metadata needs at least one key",
            reason=reasons.METADATA_SIGNATURE,
            role=_ROLE_OF.get(payload_type),
            registry=None,
            policy_sha256=None,
            archive=None,
            version=None,
            seen=None,
            expires=None,
        )  # a writer's mistake: nothing read yet
    envelope = Envelope(payload_type, payload)
    for key in keys:
        envelope = envelope.add_signature(key)
    return envelope


def signed_by_any(envelope: Envelope, keys: Sequence[PublicKey]) -> bool:
    """Whether one of ``keys`` signed ``envelope`` (a writer checking its own earlier metadata)."""
    return any(
        verify_signature(envelope, sig, key)
        for sig in envelope.signatures
        for key in keys
        if sig.keyid in ("", key.key_id)
    )


# -- verification -----------------------------------------------------------------------------------
def parse_envelope(data: bytes, where: str, role: str, limit: int) -> Envelope:
    if len(data) > limit:
        raise malformed(where, f"the {role} is larger than {limit} bytes", role)
    try:
        return Envelope.parse(data, where)
    except EnvelopeError as exc:
        raise malformed(where, f"not a DSSE envelope: {exc}", role) from None


def verify_envelope(
    envelope: Envelope, payload_type: str, role: MetadataRole, policy: TrustPolicy, now: datetime.datetime, where: str
) -> tuple[PolicyKey, ...]:
    """The keys whose signatures count for ``role``; refuses (``metadata-signature``) below its
    threshold, listing every signature that did not count and why (the reasons of SIGNING.md §7)."""
    budget = [MAX_VERIFICATIONS, MAX_VERIFIED_BYTES]
    signers: dict[str, PolicyKey] = {}
    rejected: list[dict[str, Any]] = []
    for sig in envelope.signatures:
        key = _find_key(envelope, sig, policy, budget)
        hint = sig.keyid[:100]
        if key is None:
            named = policy.key(sig.keyid)
            reason = (
                reasons.REVOKED_KEY
                if sig.keyid in policy.revoked
                else reasons.BAD_SIGNATURE
                if named is not None
                else reasons.UNKNOWN_KEY
            )
            rejected.append(
                {
                    "reason": reason,
                    "key_id": hint,
                    "verified": False,
                    "key_name": named.name if named else None,
                    "detail": reasons.MEANING[reason],
                }
            )
            continue
        problem: tuple[str, str] | None = None
        if envelope.payload_type != payload_type:
            problem = (
                reasons.WRONG_PAYLOAD_TYPE,
                (f"payloadType is {envelope.payload_type[:100]!r}, not {payload_type!r}"),
            )
        problem = problem or key_standing(key, policy, now, role.keys, f"the registry {role.role}")
        if problem:
            rejected.append(
                {
                    "reason": problem[0],
                    "key_id": key.key_id,
                    "verified": True,
                    "key_name": key.name,
                    "detail": problem[1],
                }
            )
        else:
            signers.setdefault(key.key_id, key)
    if len(signers) >= role.threshold:
        return tuple(signers.values())
    lines = [
        f"{where}: the registry {role.role} has {len(signers)} valid signature(s) by the keys the trust policy "
        f"names for it ({', '.join(role.keys)}), {role.threshold} needed"
    ]
    lines += [
        f"  - key {r['key_name'] or short_id(r['key_id']) or '(no keyid)'}: {r['reason']}: {r['detail']}"
        for r in rejected
    ]
    # signatures are checked before the payload is read: no version yet; load_trusted adds the registry
    raise RegistryMetadataError(
        "\n".join(lines),
        reason=reasons.METADATA_SIGNATURE,
        role=role.role,
        rejected=tuple(rejected),
        policy_sha256=policy.sha256,
        registry=None,
        archive=None,
        version=None,
        seen=None,
        expires=None,
    )
