"""The trust decision, in one function: :func:`decide` (spec/SIGNING.md §6, §6.1, §9; REGISTRY.md §6-§7).

Every route that opens an archive calls it, with or without a policy, before a reader is handed out:
a path (the sidecar ``ARCHIVE.sig.json``, :mod:`.enforce`), a URL (the sidecar beside it,
:mod:`.enforce`), a registry reference (the signatures stored beside the blob,
:mod:`karchive.registry.registry`) and ``karchive verify --trust``. A route's only job is to
establish what it knows about the bytes its reader will use (:class:`Subject`) and to say where the
signatures are (a function returning :class:`Evidence`, called only when they are needed); the
decision itself is here:

1. no policy: nothing to decide, unless a lockfile pins signers (then ``policy-required``);
2. a verdict the cache receipt holds for this exact policy, these digests and this archive is reused
   while its signers' key windows are open (``receipts``; ``reuse=False`` verifies anew);
3. otherwise the signatures are verified against the policy (:func:`.verify.verify_archive_signatures`,
   which raises :class:`~karchive.errors.UntrustedArchiveError` naming why) and the verdict is
   written to the receipt;
4. every signer a lockfile pins must be among the signers that count now.

The trust layer never imports the registry (``tests/test_layers.py``): the registry calls down into
this module with plain values, and the cache is reached through the :class:`Receipts` protocol.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import PinnedSignerError, TrustError
from . import reasons

if TYPE_CHECKING:  # pragma: no cover - a policy needs cryptography; naming the types does not
    from .dsse import Envelope
    from .policy import TrustPolicy
    from .verify import TrustResult


@dataclass(frozen=True)
class Subject:
    """What a route established about the archive its reader will use.

    ``archive`` is ``NAME@VERSION`` as the route names it (a registry's record, or the manifest the
    reader opened); ``sha256`` is the digest of the whole file where the route hashed it (or a record
    the cache verified it against; None for ranged reads); ``index_sha256`` is the digest the reader
    itself checked against the footer it opened from (§6.1)."""

    archive: str
    name: str
    version: str | None
    sha256: str | None
    index_sha256: str


@dataclass(frozen=True)
class Evidence:
    """The signatures a route found: parsed envelopes, and objects that could not be parsed as
    ``(keyid hint, why)`` (each counts as a rejected ``malformed-envelope`` signature)."""

    envelopes: tuple[Envelope, ...] = ()
    unreadable: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Pins:
    """Signers a lockfile pins for this archive (key ids), and how to name the lockfile in errors."""

    signers: tuple[str, ...]
    lockfile: str = "the lockfile"


class Receipts(Protocol):
    """Where verdicts are remembered between loads (the registry cache's receipts, spec/REGISTRY.md §5)."""

    def trusted(self, digest: str, policy_sha256: str) -> dict | None: ...

    def record_trust(self, digest: str, policy_sha256: str, entry: dict) -> None: ...


@dataclass(frozen=True)
class Verdict:
    """A trust policy accepted one archive: now (``result`` holds who signed what) or earlier, as a
    cache receipt records (``from_receipt``; only the signers' key ids and names are kept)."""

    ref: str
    sha256: str | None
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
        return {
            "ok": True,
            "archive": self.ref,
            "sha256": self.sha256,
            "index_sha256": self.index_sha256,
            "policy": {"source": self.policy_source, "sha256": self.policy_sha256},
            "from_receipt": True,
            "signers": [{"key_id": k, "key_name": n} for k, n in self.signers],
            "rejected": [],
        }

    def describe(self) -> str:
        who = ", ".join(f"{n} ({k[:16]})" for k, n in self.signers) or "nobody (the policy allows unsigned)"
        how = "verified before (cache receipt)" if self.from_receipt else "verified now"
        return f"trusted under policy {self.policy_source} (sha256 {self.policy_sha256[:16]}): signed by {who}; {how}"


def decide(
    policy: TrustPolicy | None,
    subject: Subject,
    signatures: Callable[[TrustPolicy], Evidence],
    *,
    receipts: Receipts | None = None,
    receipt_key: str | None = None,
    reuse: bool = True,
    pins: Pins | None = None,
    now: datetime.datetime | None = None,
) -> Verdict | None:
    """Accept ``subject`` under ``policy`` (a :class:`Verdict`), or raise a :class:`TrustError`
    subclass naming why not; None when there is no policy and nothing is pinned.

    ``signatures(policy)`` gathers the evidence (called only when a verification is needed: a
    reused receipt reads no signature). ``receipts`` and ``receipt_key`` (the cached blob's sha256)
    reuse and remember verdicts. ``pins`` are a lockfile's signers for this archive; ``now`` decides
    key windows (default: the current time)."""
    if policy is None:
        if pins is not None and pins.signers:
            raise PinnedSignerError(
                f"{subject.archive}: {pins.lockfile} pins its signers ({', '.join(k[:16] for k in pins.signers)}), "
                "which only a trust policy can check; give one (trust=POLICY, --trust POLICY or "
                "$KARCHIVE_TRUST_POLICY)",
                reason=reasons.POLICY_REQUIRED,
                archive=subject.archive,
                key_id=pins.signers[0],
                lockfile=pins.lockfile,
                pinned=pins.signers,
                policy_sha256=None,
            )  # no policy was given: that is the refusal
        return None
    verdict = _remembered(policy, subject, receipts, receipt_key) if reuse else None
    if verdict is None:
        verdict = _verify(policy, subject, signatures(policy), now)
        if receipts is not None and receipt_key is not None:
            assert verdict.result is not None
            until = verdict.result.valid_until()
            receipts.record_trust(
                receipt_key,
                policy.sha256,
                {
                    "archive": subject.archive,
                    "index_sha256": subject.index_sha256,
                    "signers": [list(s) for s in verdict.signers],
                    "valid_until_ns": None if until is None else int(until.timestamp()) * 10**9,
                },
            )
    if pins is not None and pins.signers:
        _check_pins(pins, subject, verdict)
    return verdict


def _remembered(
    policy: TrustPolicy, subject: Subject, receipts: Receipts | None, receipt_key: str | None
) -> Verdict | None:
    """The receipt's verdict for this policy, if it is about these digests and this archive."""
    if receipts is None or receipt_key is None:
        return None
    entry = receipts.trusted(receipt_key, policy.sha256)
    if (
        entry is None
        or entry.get("index_sha256") != subject.index_sha256
        or entry.get("archive") != subject.archive
        or not isinstance(entry.get("signers"), list)
    ):
        return None
    signers = tuple((s[0], s[1]) for s in entry["signers"] if isinstance(s, list) and len(s) == 2)
    return Verdict(subject.archive, subject.sha256, subject.index_sha256, policy.sha256, policy.source, signers, True)


def _verify(policy: TrustPolicy, subject: Subject, evidence: Evidence, now: datetime.datetime | None) -> Verdict:
    from . import verify  # by module: tests count verifications by wrapping verify_archive_signatures

    result = verify.verify_archive_signatures(
        sha256=subject.sha256,
        index_sha256=subject.index_sha256,
        name=subject.name,
        version=subject.version,
        envelopes=evidence.envelopes,
        unreadable=evidence.unreadable,
        policy=policy,
        now=now,
    )
    signers = tuple(sorted((s.key.key_id, s.key.name) for s in result.signers))
    return Verdict(
        subject.archive, subject.sha256, subject.index_sha256, policy.sha256, policy.source, signers, False, result
    )


def _check_pins(pins: Pins, subject: Subject, verdict: Verdict) -> None:
    """A lockfile pin that names signers needs every one of them among the signatures that count now."""
    missing = [k for k in pins.signers if k not in verdict.key_ids]
    if missing:
        raise PinnedSignerError(
            f"{subject.archive}: {pins.lockfile} pins signer(s) {', '.join(k[:16] for k in missing)}, whose signature "
            f"does not count now (counting: {', '.join(k[:16] for k in verdict.key_ids) or 'none'}): the signature "
            "is gone, or the key was revoked or rotated out. Re-run `karchive lock` to accept the current signers",
            archive=subject.archive,
            key_id=missing[0],
            lockfile=pins.lockfile,
            pinned=pins.signers,
            found=verdict.key_ids,
            policy_sha256=verdict.policy_sha256,
        )


def sidecar_evidence(envelope: Envelope | None) -> Evidence:
    """A sidecar's envelope as evidence (none: an unsigned archive)."""
    return Evidence((envelope,) if envelope is not None else ())


def refusal_json(exc: TrustError) -> dict[str, Any]:
    """A refusal in the shape of a trust report (``verify --trust --json``)."""
    return {"ok": False, "reason": exc.reason, "error": str(exc), "rejected": list(getattr(exc, "rejected", ()) or ())}
