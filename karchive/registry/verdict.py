"""Trust checks a registry load makes (spec/SIGNING.md §6.1 and §9, REGISTRY.md §6-§7): signatures
stored beside the blob against the policy, the verdict remembered in the cache receipt, signer pins
from a lockfile, and the rollback ratchet for ``NAME@latest``.

Every function here runs before the registry hands out a reader, so a refusal means no byte of the
archive ever reaches the runtime.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import DowngradeError, PinnedSignerError, TrustError
from .records import VersionRecord
from .signatures import read_signatures
from .versions import is_prerelease, version_key

if TYPE_CHECKING:  # pragma: no cover - a policy needs cryptography; naming the types does not
    from ..trust.policy import TrustPolicy
    from ..trust.verify import TrustResult
    from .cache import Cache
    from .lockfile import Lockfile
    from .store import Store


@dataclass(frozen=True)
class Verdict:
    """A trust policy accepted one archive: now (``result`` holds who signed what) or earlier, as the
    cache receipt records (``from_receipt``; only the signers' key ids and names are kept)."""

    ref: str
    sha256: str
    index_sha256: str
    policy_sha256: str
    policy_source: str
    signers: tuple[tuple[str, str], ...]  # (key id, key name), sorted by key id
    from_receipt: bool
    result: TrustResult | None = None

    @property
    def key_ids(self) -> tuple[str, ...]:
        return tuple(k for k, _ in self.signers)

    def to_json(self) -> dict[str, Any]:
        if self.result is not None:
            return {**self.result.to_json(), "from_receipt": False}
        return {"ok": True, "archive": self.ref, "sha256": self.sha256, "index_sha256": self.index_sha256,
                "policy": {"source": self.policy_source, "sha256": self.policy_sha256}, "from_receipt": True,
                "signers": [{"key_id": k, "key_name": n} for k, n in self.signers], "rejected": []}

    def describe(self) -> str:
        who = ", ".join(f"{n} ({k[:16]})" for k, n in self.signers) or "nobody (the policy allows unsigned)"
        how = "verified before (cache receipt)" if self.from_receipt else "verified now"
        return f"trusted under policy {self.policy_source} (sha256 {self.policy_sha256[:16]}): signed by {who}; {how}"


def _ns(t: datetime.datetime | None) -> int | None:
    return None if t is None else int(t.timestamp()) * 10**9


def verify_record(store: Store, policy: TrustPolicy, record: VersionRecord, *, index_sha256: str,
                  sha256: str | None, cache: Cache | None = None, reuse: bool = True) -> Verdict:
    """Accept or refuse the archive ``record`` names, read by a reader that checked ``index_sha256``
    (and, with ``sha256``, hashed to it), against the signatures stored beside its blob.

    With ``cache`` (the blob is in it and its receipt matched), a verdict the receipt already holds
    for this exact policy is reused while its signers' key windows are open; a fresh verdict is
    added to the receipt."""
    if cache is not None and reuse:
        entry = cache.trusted(record.sha256, policy.sha256)
        if (entry is not None and entry.get("index_sha256") == index_sha256
                and entry.get("archive") == record.ref and isinstance(entry.get("signers"), list)):
            signers = tuple((s[0], s[1]) for s in entry["signers"] if isinstance(s, list) and len(s) == 2)
            return Verdict(record.ref, record.sha256, index_sha256, policy.sha256, policy.source, signers, True)
    from ..trust.verify import verify_archive_signatures

    sigs = read_signatures(store, record.sha256, prefer=[k.key_id for k in policy.keys])
    result = verify_archive_signatures(sha256=sha256, index_sha256=index_sha256, name=record.name,
                                       version=record.version, envelopes=sigs.envelopes, unreadable=sigs.unreadable,
                                       policy=policy)
    signers = tuple(sorted((s.key.key_id, s.key.name) for s in result.signers))
    if cache is not None:
        cache.record_trust(record.sha256, policy.sha256, {
            "archive": record.ref, "index_sha256": index_sha256, "signers": [list(s) for s in signers],
            "valid_until_ns": _ns(result.valid_until())})
    return Verdict(record.ref, record.sha256, index_sha256, policy.sha256, policy.source, signers, False, result)


def check_pinned_signers(lock: Lockfile | None, record: VersionRecord, verdict: Verdict | None) -> None:
    """A lockfile pin that names signers needs every one of them among the signatures that count now."""
    if lock is None:
        return
    pin = lock.pins.get(record.name)
    if pin is None or not pin.signers:
        return
    label = lock.path or "the lockfile"
    if verdict is None:
        raise PinnedSignerError(
            f"{record.ref}: {label} pins its signers ({', '.join(k[:16] for k in pin.signers)}), which only a trust "
            "policy can check; give one (trust=POLICY, --trust POLICY or $KARCHIVE_TRUST_POLICY)",
            reason="policy-required", archive=record.ref, lockfile=label, pinned=pin.signers)
    missing = [k for k in pin.signers if k not in verdict.key_ids]
    if missing:
        raise PinnedSignerError(
            f"{record.ref}: {label} pins signer(s) {', '.join(k[:16] for k in missing)}, whose signature does not "
            f"count now (counting: {', '.join(k[:16] for k in verdict.key_ids) or 'none'}): the signature is gone, "
            "or the key was revoked or rotated out. Re-run `karchive lock` to accept the current signers",
            archive=record.ref, key_id=missing[0], lockfile=label, pinned=pin.signers, found=verdict.key_ids,
            policy_sha256=verdict.policy_sha256)


def check_downgrade(cache: Cache, registry_url: str, record: VersionRecord) -> None:
    """Refuse a ``latest`` below what this cache already verified (spec/SIGNING.md §9.4): a final
    release must not be older than the newest verified final release; a pre-release (``latest`` picks
    one only when no final release is listed) not older than the newest verified version at all."""
    mark = cache.newest_verified(registry_url, record.name)
    bound = mark["any"] if is_prerelease(record.version) else mark["final"]
    if bound is not None and version_key(record.version) < version_key(bound):
        raise DowngradeError(
            f"{record.name}@latest resolves to {record.version} in {registry_url}, but this cache already loaded and "
            f"verified {record.name}@{bound}: the registry may be hiding newer versions (a rollback). Load "
            f"{record.name}@{record.version} explicitly, or allow it with allow_downgrade=True / --allow-downgrade",
            archive=record.ref, registry=registry_url, newest_seen=bound, resolved=record.version)


def refusal_json(exc: TrustError) -> dict[str, Any]:
    """A refusal in the shape of a trust report (``verify --trust --json``)."""
    return {"ok": False, "reason": exc.reason, "error": str(exc), "rejected": list(getattr(exc, "rejected", ()) or ())}
