"""The registry route's part of a trust decision (spec/SIGNING.md §6.1 and §9, REGISTRY.md §6-§7):
the evidence (signatures stored beside the blob), the lockfile's signer pins, and the rollback
ratchet for ``NAME@latest``. The decision itself is :func:`karchive.trust.decide.decide`, which the
path and URL routes call too; this module only gathers what the registry knows and hands it down
(the registry imports the trust layer, never the reverse).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import DowngradeError
from ..trust.decide import Evidence, Pins, Subject, Verdict, decide, refusal_json  # noqa: F401 - re-exported
from .records import VersionRecord
from .signatures import read_signatures
from .versions import is_prerelease, version_key

if TYPE_CHECKING:  # pragma: no cover - a policy needs cryptography; naming the types does not
    from ..trust.policy import TrustPolicy
    from .cache import Cache
    from .lockfile import Lockfile
    from .store import Store


def decide_record(
    store: Store,
    policy: TrustPolicy | None,
    record: VersionRecord,
    *,
    index_sha256: str,
    sha256: str | None,
    lock: Lockfile | None = None,
    cache: Cache | None = None,
    reuse: bool = True,
) -> Verdict | None:
    """:func:`~karchive.trust.decide.decide` for the archive ``record`` names, read by a reader that
    checked ``index_sha256`` (and, with ``sha256``, hashed to it or found it in the cache), with the
    signatures stored beside its blob as the evidence. With ``cache`` (the blob is in it and its
    receipt matched) the receipt's verdict is reused and a fresh one remembered."""

    def evidence(p: TrustPolicy) -> Evidence:
        sigs = read_signatures(store, record.sha256, prefer=[k.key_id for k in p.keys])
        return Evidence(sigs.envelopes, sigs.unreadable)

    return decide(
        policy,
        Subject(record.ref, record.name, record.version, sha256, index_sha256),
        evidence,
        receipts=cache,
        receipt_key=record.sha256 if cache is not None else None,
        reuse=reuse,
        pins=pins_for(lock, record),
    )


def pins_for(lock: Lockfile | None, record: VersionRecord) -> Pins | None:
    """The signers ``lock`` pins for ``record``'s name (None: no lockfile, no pin, or no signers)."""
    if lock is None:
        return None
    pin = lock.pins.get(record.name)
    if pin is None or not pin.signers:
        return None
    return Pins(tuple(pin.signers), lock.path or "the lockfile")


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
            archive=record.ref,
            registry=registry_url,
            newest_seen=bound,
            resolved=record.version,
        )
