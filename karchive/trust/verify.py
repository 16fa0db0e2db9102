"""The one verification entry point: archive digests + identity, envelopes, policy -> who signed it,
or an :class:`~karchive.errors.UntrustedArchiveError` naming why not (spec/SIGNING.md §6).

The archive is identified by what the caller could establish about the bytes it will use: the
sha256 of the whole file (when it hashed it), the index digest its reader checked against the footer
(always, for loaders: a ranged reader knows nothing else), or both. A signed statement must agree
with each digest given.

Per signature: find the policy key that verifies it (DSSE's ``keyid`` only chooses which key to try
first), then — using the payload bytes that signature covers and nothing else — the payload type,
the statement, its subject (this archive's name, version and sha256), and last the key's standing
(revoked, rotation window, allowed for this name). Distinct accepted keys are counted against the
rule's threshold.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import TrustError, UntrustedArchiveError
from . import reasons
from .dsse import INTOTO_PAYLOAD_TYPE, Envelope, Signature, verify_signature
from .keys import short_id
from .policy import PolicyKey, Rule, TrustPolicy
from .provenance import Statement, parse_statement, subject_name

_MAX_HINT = 100  # a keyid hint is attacker-chosen text: keep what is echoed short
#: Signature checks per call, and bytes they may hash in all: far above honest use (a few signatures
#: by hinted keys over a statement of a few KiB), far below what would stall a loader.
MAX_VERIFICATIONS = 4096
MAX_VERIFIED_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class Signer:
    """A signature that counts: a policy key that signed a statement about exactly these bytes."""

    key: PolicyKey
    statement: Statement
    envelope: int

    def to_json(self) -> dict[str, Any]:
        return {
            "key_id": self.key.key_id,
            "key_name": self.key.name,
            **self.key.window(),
            "envelope": self.envelope,
            "statement": self.statement.summary(),
        }


@dataclass(frozen=True)
class Rejection:
    """A signature that does not count, and why (``reason`` is a code from :mod:`.reasons`)."""

    reason: str
    detail: str
    key_id: str  # the verifying key's id, or the envelope's unverified keyid hint
    verified: bool  # whether key_id is the key that verified the signature
    key_name: str | None = None
    envelope: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "reason": self.reason,
            "detail": self.detail,
            "key_id": self.key_id,
            "verified": self.verified,
            "key_name": self.key_name,
            "envelope": self.envelope,
        }

    def who(self) -> str:
        if self.key_name:
            return f"key {self.key_name} ({short_id(self.key_id)})"
        return f"key {short_id(self.key_id) or '(no keyid)'}" + ("" if self.verified else " (as the envelope names it)")


@dataclass(frozen=True)
class TrustResult:
    """An archive the policy accepts: which rule applied and who signed."""

    name: str
    version: str | None
    sha256: str | None
    policy: TrustPolicy
    rule: Rule
    signers: tuple[Signer, ...]
    rejected: tuple[Rejection, ...] = field(default=())
    index_sha256: str | None = None

    @property
    def key_ids(self) -> tuple[str, ...]:
        """Signer key ids, sorted (what a lockfile pins)."""
        return tuple(sorted(s.key.key_id for s in self.signers))

    def valid_until(self) -> datetime.datetime | None:
        """When this acceptance may stop holding as time passes alone: the earliest ``not_after`` of the
        counting keys (conservative: the threshold might still be met after it). None: never."""
        ends = [s.key.not_after for s in self.signers if s.key.not_after is not None]
        return min(ends) if ends else None

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": True,
            "archive": subject_name(self.name, self.version or "*"),
            "sha256": self.sha256,
            **({"index_sha256": self.index_sha256} if self.index_sha256 else {}),
            "policy": self.policy.to_json(),
            "rule": {"index": self.rule.index, "names": list(self.rule.names), "threshold": self.rule.threshold},
            "signers": [s.to_json() for s in self.signers],
            "rejected": [r.to_json() for r in self.rejected],
        }


def _check_subject(
    stmt: Statement, name: str, version: str | None, sha256: str | None, index_sha256: str | None
) -> tuple[str, str] | None:
    if stmt.name != name or (version is not None and stmt.version != version):
        return reasons.SWAPPED_ENVELOPE, (
            f"the signed statement is about {subject_name(stmt.name, stmt.version)}, "
            f"not {subject_name(name, version or stmt.version)}"
        )
    if sha256 is not None and stmt.sha256 != sha256:
        return reasons.DIGEST_MISMATCH, (
            f"the signed statement covers sha256 {stmt.sha256}; these bytes are sha256 {sha256}"
        )
    if index_sha256 is not None and stmt.index_sha256 != index_sha256:
        return reasons.DIGEST_MISMATCH, (
            f"the signed statement covers an archive whose index digest is "
            f"{stmt.index_sha256}; this archive's index digest is {index_sha256}"
        )
    return None


def key_standing(
    key: PolicyKey, policy: TrustPolicy, now: datetime.datetime, allowed: tuple[str, ...], signs: str
) -> tuple[str, str] | None:
    """Why ``key`` may not sign ``signs`` at ``now`` (revoked, outside its validity window, or not among the
    ``allowed`` key names), or None. One rule for archive signatures and registry metadata alike
    (spec/SIGNING.md §5, §11)."""
    if key.key_id in policy.revoked:
        return reasons.REVOKED_KEY, f"key {key.name} is revoked by the policy"
    if key.not_before is not None and now < key.not_before:
        return reasons.KEY_NOT_YET_VALID, f"key {key.name} is valid from {key.window()['not_before']}"
    if key.not_after is not None and now > key.not_after:
        return reasons.KEY_EXPIRED, (
            f"key {key.name} was valid until {key.window()['not_after']} (rotated out: re-sign with a current key)"
        )
    if key.name not in allowed:
        return reasons.KEY_NOT_ALLOWED, f"key {key.name} may not sign {signs} (allowed: {', '.join(allowed) or 'none'})"
    return None


def _find_key(envelope: Envelope, sig: Signature, policy: TrustPolicy, budget: list[int]) -> PolicyKey | None:
    """The policy key that verifies ``sig``. DSSE's keyid may only narrow which keys are tried: a
    hint naming a policy key means only that key is tried (a wrong hint can refuse, never accept);
    otherwise every key is. ``budget`` ([checks, bytes] left) bounds the work per call: each check
    hashes the whole payload, so a flood of hint-less signatures over a large payload against a
    large policy must not make verification slow."""
    hinted = policy.key(sig.keyid)
    cost = len(envelope.payload) + len(envelope.payload_type) + 64
    for k in [hinted] if hinted else policy.keys:
        if budget[0] <= 0 or budget[1] < cost:
            return None
        budget[0] -= 1
        budget[1] -= cost
        if verify_signature(envelope, sig, k.public):
            return k
    return None


def _content(envelope: Envelope) -> Statement | tuple[str, str]:
    """The statement in the (already verified) payload bytes, or why it is not acceptable. The type
    is authenticated with the payload (PAE), so it is checked only after a signature verified."""
    if envelope.payload_type != INTOTO_PAYLOAD_TYPE:
        return reasons.WRONG_PAYLOAD_TYPE, (
            f"payloadType is {envelope.payload_type[:_MAX_HINT]!r}, not {INTOTO_PAYLOAD_TYPE!r}"
        )
    try:
        return parse_statement(envelope.payload)
    except TrustError as exc:
        return reasons.MALFORMED_STATEMENT, str(exc)


def verify_archive_signatures(
    *,
    sha256: str | None,
    name: str,
    version: str | None,
    envelopes: Sequence[Envelope],
    policy: TrustPolicy,
    now: datetime.datetime | None = None,
    index_sha256: str | None = None,
    unreadable: Sequence[tuple[str, str]] = (),
) -> TrustResult:
    """Accept or refuse the archive whose bytes hash to ``sha256`` and/or whose reader checked its
    index against ``index_sha256`` (at least one is needed), and whose manifest says ``name`` (and
    ``version``; None accepts any version the signer named). ``now`` decides rotation windows.
    ``unreadable`` lists signature objects that could not be parsed, as ``(keyid hint, why)``: each is
    a rejected ``malformed-envelope`` signature (it cannot count, and it must not hide the others)."""
    if sha256 is None and index_sha256 is None:
        raise TypeError("give sha256 and/or index_sha256: the digests of the bytes that will be used")
    now = now or datetime.datetime.now(datetime.timezone.utc)
    if now.tzinfo is None:
        raise TypeError("now must be timezone-aware (policy windows are instants, not local times)")
    archive = subject_name(name, version) if version else name
    rule = policy.rule_for(name)
    if rule is None:
        raise UntrustedArchiveError(
            f"{archive}: no rule of trust policy {policy.source} covers the name {name!r}",
            reason=reasons.NO_RULE,
            archive=archive,
            policy_sha256=policy.sha256,
            key_id=None,
        )  # no signature was looked at
    signers: dict[str, Signer] = {}
    rejected: list[Rejection] = [
        Rejection(reasons.MALFORMED_ENVELOPE, why[:500], hint[:_MAX_HINT], False, envelope=-1)
        for hint, why in unreadable
    ]
    total = len(rejected)
    budget = [MAX_VERIFICATIONS, MAX_VERIFIED_BYTES]
    for e, envelope in enumerate(envelopes):
        content: Statement | tuple[str, str] | None = None
        for sig in envelope.signatures:
            total += 1
            key = _find_key(envelope, sig, policy, budget)
            if key is None:
                hint = sig.keyid[:_MAX_HINT]
                if sig.keyid in policy.revoked:
                    rejected.append(
                        Rejection(reasons.REVOKED_KEY, "the signature names a revoked key", hint, False, envelope=e)
                    )
                elif (named := policy.key(sig.keyid)) is not None:
                    rejected.append(
                        Rejection(
                            reasons.BAD_SIGNATURE,
                            "the key the signature names does not verify it "
                            "(payload, payloadType or signature altered)",
                            hint,
                            False,
                            named.name,
                            e,
                        )
                    )
                else:
                    rejected.append(
                        Rejection(
                            reasons.UNKNOWN_KEY, "no key in the policy verifies this signature", hint, False, envelope=e
                        )
                    )
                continue
            if content is None:
                content = _content(envelope)
            problem = (
                content if isinstance(content, tuple) else _check_subject(content, name, version, sha256, index_sha256)
            )
            problem = problem or key_standing(key, policy, now, rule.keys, f"this name under {rule.describe()}")
            if problem:
                rejected.append(Rejection(problem[0], problem[1], key.key_id, True, key.name, e))
            elif isinstance(content, Statement) and key.key_id not in signers:
                signers[key.key_id] = Signer(key, content, e)
    if len(signers) >= rule.threshold:
        return TrustResult(name, version, sha256, policy, rule, tuple(signers.values()), tuple(rejected), index_sha256)
    if total == 0:
        reason = reasons.UNSIGNED
    elif signers:
        reason = reasons.THRESHOLD_NOT_MET
    else:
        reason = max(rejected, key=lambda r: reasons.STAGE[r.reason]).reason
    primary = next((r for r in rejected if r.reason == reason), None)
    lines = [
        f"{archive} is not trusted under policy {policy.source} ({rule.describe()}, "
        f"{rule.threshold} signature(s) needed, {len(signers)} valid): {reasons.MEANING[reason]}"
    ]
    lines += [f"  - {r.who()}: {r.reason}: {r.detail}" for r in rejected]
    raise UntrustedArchiveError(
        "\n".join(lines),
        reason=reason,
        archive=archive,
        key_id=primary.key_id if primary else None,
        rejected=tuple(r.to_json() for r in rejected),
        policy_sha256=policy.sha256,
    )
