"""Signed registry metadata in a registry (spec/SIGNING.md §11, REGISTRY.md §3 "Metadata"): where the
snapshot and the timestamp live, how a writer issues new ones safely beside other writers, and how a
client verifies them before it resolves or loads anything.

::

    metadata/snapshots/<N>.json   snapshot version N (a DSSE envelope): created exclusively, never replaced
    metadata/timestamp.json       the current timestamp (a DSSE envelope): replaced on every update

**Writers.** A new snapshot takes the next number and is written with the store's exclusive create
(``link(2)``, ``If-None-Match: *``, ``ifGenerationMatch=0``: the primitive version records use), so two
publishers cannot both issue version N+1: the loser re-reads the records and tries N+2 (compare and
swap). Each snapshot is built from the version records after the writer's own record exists, and must
keep every version (with the same digests) of the newest snapshot the writer's keys signed, so a
record deleted or rewritten in the bucket is refused instead of signed. The timestamp is replaced after
the snapshot exists and re-checked afterwards (the index refresh's write-then-relist loop), so the last
timestamp written names the newest snapshot.

**Clients.** With a policy whose ``[registry]`` section sets ``require_signed_metadata``, every
``NAME@VERSION`` and ``NAME@latest`` load reads the timestamp, checks its signatures, its version
against the highest this cache verified (rollback), its expiry (freeze), then the snapshot it names
(digest and size, signatures, version, expiry), and resolves through the snapshot: ``latest`` is the
snapshot's newest version, a version the snapshot lacks is refused, one it lists that the registry
does not serve is refused (withheld), and the record's digests must equal the snapshot's.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ..core.grammar import fullmatch
from ..core.jsonio import canonical_json
from ..core.units import utc_text
from ..errors import ConflictError, NotFoundError, RegistryError, RegistryMetadataError
from .cache import _write_small, registry_key
from .config import redact_url
from .filelock import FileLock
from .records import VersionRecord
from .refs import Ref, check_name, check_version
from .store_layout import version_record_path
from .versions import newest

if TYPE_CHECKING:  # pragma: no cover - metadata needs cryptography; naming the types does not
    from ..trust.dsse import Envelope
    from ..trust.keys import SigningKey
    from ..trust.metadata import Timestamp
    from ..trust.policy import TrustPolicy
    from .cache import Cache
    from .store import Store

METADATA_DIR = "metadata"
SNAPSHOTS_DIR = f"{METADATA_DIR}/snapshots"
TIMESTAMP_PATH = f"{METADATA_DIR}/timestamp.json"
_SNAPSHOT_FILE = re.compile(r"[1-9][0-9]{0,15}\.json")


class Registry(Protocol):
    """What this module reads of a :class:`karchive.registry.registry.Registry` (which calls it), named
    structurally so that the two do not import each other."""

    url: str
    store: Store
    cache: Cache

    def names(self) -> list[str]: ...

    def _read_record(self, name: str, version: str) -> VersionRecord | None: ...

    def _record_at(self, path: str, data: bytes | None, name: str, version: str) -> VersionRecord | None: ...

    def _read_name_index(self, name: str) -> dict[str, VersionRecord] | None: ...

    def _listed_versions(self, name: str) -> list[str]: ...

    def _missing_version(self, name: str, version: str) -> NotFoundError: ...

    def _ensure_marker(self) -> None: ...


#: Defaults: the snapshot changes with every publish and is re-issued at least monthly; the timestamp
#: is short-lived, so a registry nobody re-signs (a freeze) is noticed within a day.
DEFAULT_SNAPSHOT_EXPIRY = datetime.timedelta(days=30)
DEFAULT_TIMESTAMP_EXPIRY = datetime.timedelta(days=1)
_ENTRY_FIELDS = {"sha256", "size", "index_sha256"}
#: A version record is a few hundred bytes (its kernel and target lists make it longer); far larger is hostile.
MAX_RECORD_BYTES = 1024 * 1024
UTC = datetime.timezone.utc


def snapshot_path(version: int) -> str:
    return f"{SNAPSHOTS_DIR}/{version}.json"


# -- the snapshot document --------------------------------------------------------------------------
@dataclass(frozen=True)
class SnapshotEntry:
    """What the snapshot pins for one NAME@VERSION: its version record's digests."""

    sha256: str
    size: int
    index_sha256: str

    @classmethod
    def of(cls, record: VersionRecord) -> SnapshotEntry:
        return cls(record.sha256, record.size, record.index_sha256)

    def to_json(self) -> dict[str, Any]:
        return {"sha256": self.sha256, "size": self.size, "index_sha256": self.index_sha256}


@dataclass(frozen=True)
class Snapshot:
    """Every name's versions and their digests, as the snapshot signers saw the registry at ``issued``."""

    version: int
    issued: datetime.datetime
    expires: datetime.datetime
    names: Mapping[str, Mapping[str, SnapshotEntry]] = field(default_factory=dict)

    def entry(self, name: str, version: str) -> SnapshotEntry | None:
        return self.names.get(name, {}).get(version)

    def versions(self, name: str) -> list[str]:
        return list(self.names.get(name, {}))

    def count(self) -> int:
        return sum(len(v) for v in self.names.values())

    def to_payload(self) -> bytes:
        from ..trust.metadata import SNAPSHOT_KIND, SPEC_VERSION

        return canonical_json(
            {
                "_type": SNAPSHOT_KIND,
                "spec_version": SPEC_VERSION,
                "version": self.version,
                "issued": utc_text(self.issued),
                "expires": utc_text(self.expires),
                "names": {n: {v: e.to_json() for v, e in vs.items()} for n, vs in self.names.items()},
            }
        )

    @classmethod
    def parse(cls, payload: bytes, where: str) -> Snapshot:
        """Untrusted bytes: every field typed, names and versions by the registry's grammar (REGISTRY.md
        §2), digests 64 lowercase hex digits, no unknown fields."""
        from ..trust.metadata import (
            MAX_SNAPSHOT_VALUES,
            SNAPSHOT_FIELDS,
            SNAPSHOT_KIND,
            count_field,
            digest_field,
            exact_fields,
            header_fields,
            malformed,
            parse_payload,
        )

        role = "snapshot"
        obj = exact_fields(
            parse_payload(payload, where, role, MAX_SNAPSHOT_VALUES), SNAPSHOT_FIELDS, "the snapshot", where, role
        )
        version, issued, expires = header_fields(obj, SNAPSHOT_KIND, where, role)
        if type(obj["names"]) is not dict:
            raise malformed(where, "'names' is not an object", role)
        names: dict[str, dict[str, SnapshotEntry]] = {}
        for name, versions in obj["names"].items():
            try:
                check_name(name)
            except RegistryError as exc:
                raise malformed(where, str(exc), role) from None
            if type(versions) is not dict:
                raise malformed(where, f"names[{name!r}] is not an object", role)
            out: dict[str, SnapshotEntry] = {}
            for v, e in versions.items():
                try:
                    check_version(v)
                except RegistryError as exc:
                    raise malformed(where, str(exc), role) from None
                e = exact_fields(e, _ENTRY_FIELDS, f"names[{name!r}][{v!r}]", where, role)
                out[v] = SnapshotEntry(
                    digest_field(e["sha256"], "sha256", where, role),
                    count_field(e["size"], "size", where, role, minimum=0),
                    digest_field(e["index_sha256"], "index_sha256", where, role),
                )
            names[name] = out
        return cls(version, issued, expires, names)


@dataclass(frozen=True)
class TrustedMetadata:
    """A snapshot and the timestamp naming it, both verified under ``policy`` just now."""

    registry: str
    timestamp: Timestamp
    snapshot: Snapshot
    policy_sha256: str
    timestamp_signers: tuple[str, ...] = ()  # key names
    snapshot_signers: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "registry": self.registry,
            "policy_sha256": self.policy_sha256,
            "timestamp": {
                "version": self.timestamp.version,
                "expires": utc_text(self.timestamp.expires),
                "signers": list(self.timestamp_signers),
            },
            "snapshot": {
                "version": self.snapshot.version,
                "expires": utc_text(self.snapshot.expires),
                "sha256": self.timestamp.snapshot_sha256,
                "signers": list(self.snapshot_signers),
                "names": len(self.snapshot.names),
                "versions": self.snapshot.count(),
            },
        }


# -- the client's memory: the newest metadata this cache verified, per registry ------------------------
def _seen_path(reg: Registry) -> Any:
    return reg.cache.root / "metadata" / f"{registry_key(reg.url)}.json"


def seen_versions(reg: Registry) -> tuple[int, int]:
    """(snapshot, timestamp) version numbers this cache verified for the registry; (0, 0) if none."""
    try:
        from .cache import read_small

        mark = json.loads(read_small(_seen_path(reg)))
    except (OSError, ValueError):
        return 0, 0
    if not isinstance(mark, dict):
        return 0, 0
    return tuple(v if type(v) is int and v > 0 else 0 for v in (mark.get("snapshot"), mark.get("timestamp")))  # type: ignore[return-value]


def _raise_seen(reg: Registry, snapshot: int, timestamp: int) -> None:
    """Remember the versions just verified; the marks only rise (read-modify-write under a lock)."""
    path = _seen_path(reg)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(reg.cache.root / "locks" / f"metadata.{registry_key(reg.url)}.lock"):
            old = seen_versions(reg)
            new = (max(old[0], snapshot), max(old[1], timestamp))
            if new != old:
                _write_small(
                    path, canonical_json({"snapshot": new[0], "timestamp": new[1], "registry": redact_url(reg.url)})
                )
    except OSError:
        pass  # a read-only cache cannot remember; expiry still bounds what an old snapshot can do


# -- client: verify ----------------------------------------------------------------------------------
def _refuse(reason: str, msg: str, reg: Registry, policy: TrustPolicy, **fields: Any) -> RegistryMetadataError:
    from ..trust import reasons

    return RegistryMetadataError(
        f"{msg}\n  ({reasons.MEANING[reason]})", reason=reason, registry=reg.url, policy_sha256=policy.sha256, **fields
    )


def load_trusted(reg: Registry, policy: TrustPolicy, now: datetime.datetime | None = None) -> TrustedMetadata:
    """The registry's current timestamp and snapshot, verified under ``policy``'s ``[registry]``
    section (TUF's client workflow, steps for the timestamp then the snapshot): signatures, then
    rollback against this cache's marks, then expiry; the snapshot must be exactly the object the
    timestamp names. Raises :class:`RegistryMetadataError`; on success the marks rise."""
    try:
        return _load_trusted(reg, policy, now)
    except RegistryMetadataError as exc:  # errors from the document layer know no registry or policy
        exc.registry = exc.registry or reg.url
        exc.policy_sha256 = exc.policy_sha256 or policy.sha256
        raise


def _load_trusted(reg: Registry, policy: TrustPolicy, now: datetime.datetime | None) -> TrustedMetadata:
    from ..trust import reasons
    from ..trust.metadata import (
        MAX_SNAPSHOT_BYTES,
        MAX_TIMESTAMP_BYTES,
        SNAPSHOT_TYPE,
        TIMESTAMP_TYPE,
        Timestamp,
        parse_envelope,
        verify_envelope,
    )

    rules = policy.registry
    if rules is None:
        raise TypeError("the policy has no [registry] section")
    now = now or datetime.datetime.now(UTC)

    def refuse(reason: str, msg: str, **fields: Any) -> RegistryMetadataError:
        return _refuse(reason, msg, reg, policy, **fields)

    store = reg.store
    where = f"{reg.url}/{TIMESTAMP_PATH}"
    data = _read_bounded(store, TIMESTAMP_PATH, MAX_TIMESTAMP_BYTES, "timestamp")
    if data is None:
        raise refuse(
            reasons.METADATA_MISSING,
            f"{reg.url} has no signed registry metadata ({TIMESTAMP_PATH}), and "
            f"trust policy {policy.source} requires it ([registry] require_signed_metadata); a publisher "
            "creates it with `karchive publish --registry-key KEY` or `karchive registry-meta refresh "
            "--snapshot --key KEY`",
            role="timestamp",
        )
    envelope = parse_envelope(data, where, "timestamp", MAX_TIMESTAMP_BYTES)
    ts_keys = verify_envelope(envelope, TIMESTAMP_TYPE, rules.timestamp, policy, now, where)
    ts = Timestamp.parse(envelope.payload, where)
    seen_snapshot, seen_timestamp = seen_versions(reg)
    if ts.version < seen_timestamp:
        raise refuse(
            reasons.METADATA_ROLLBACK,
            f"{where}: timestamp version {ts.version} is older than version "
            f"{seen_timestamp}, which this cache already verified: the registry is serving old metadata",
            role="timestamp",
            version=ts.version,
            seen=seen_timestamp,
        )
    if ts.snapshot_version < seen_snapshot:
        raise refuse(
            reasons.METADATA_ROLLBACK,
            f"{where}: the timestamp names snapshot version {ts.snapshot_version}, "
            f"older than version {seen_snapshot}, which this cache already verified (a rollback)",
            role="snapshot",
            version=ts.snapshot_version,
            seen=seen_snapshot,
        )
    if now >= ts.expires:
        raise refuse(
            reasons.METADATA_EXPIRED,
            f"{where}: the timestamp (version {ts.version}) expired at "
            f"{utc_text(ts.expires)}: the registry's metadata has not been re-signed since (a freeze, or a "
            "stalled `karchive registry-meta refresh`)",
            role="timestamp",
            version=ts.version,
            expires=utc_text(ts.expires),
        )
    spath = snapshot_path(ts.snapshot_version)
    swhere = f"{reg.url}/{spath}"
    sdata = _read_bounded(store, spath, MAX_SNAPSHOT_BYTES, "snapshot")
    if sdata is None:
        raise refuse(
            reasons.METADATA_MISSING,
            f"{swhere}: the snapshot the timestamp names is missing",
            role="snapshot",
            version=ts.snapshot_version,
        )
    if len(sdata) != ts.snapshot_size or hashlib.sha256(sdata).hexdigest() != ts.snapshot_sha256:
        raise refuse(
            reasons.METADATA_MISMATCH,
            f"{swhere}: sha256 {hashlib.sha256(sdata).hexdigest()} "
            f"({len(sdata)} bytes) is not the snapshot the timestamp signs (sha256 {ts.snapshot_sha256}, "
            f"{ts.snapshot_size} bytes): mix-and-match",
            role="snapshot",
            version=ts.snapshot_version,
        )
    senvelope = parse_envelope(sdata, swhere, "snapshot", MAX_SNAPSHOT_BYTES)
    snap_keys = verify_envelope(senvelope, SNAPSHOT_TYPE, rules.snapshot, policy, now, swhere)
    snap = Snapshot.parse(senvelope.payload, swhere)
    if snap.version != ts.snapshot_version:
        raise refuse(
            reasons.METADATA_MISMATCH,
            f"{swhere}: says it is snapshot version {snap.version}; the timestamp names version {ts.snapshot_version}",
            role="snapshot",
            version=snap.version,
        )
    if now >= snap.expires:
        raise refuse(
            reasons.METADATA_EXPIRED,
            f"{swhere}: the snapshot (version {snap.version}) expired at "
            f"{utc_text(snap.expires)}; a publisher re-issues it with `karchive registry-meta refresh "
            "--snapshot`",
            role="snapshot",
            version=snap.version,
            expires=utc_text(snap.expires),
        )
    _raise_seen(reg, snap.version, ts.version)
    return TrustedMetadata(
        reg.url, ts, snap, policy.sha256, tuple(k.name for k in ts_keys), tuple(k.name for k in snap_keys)
    )


def _read_bounded(store: Store, path: str, limit: int, role: str | None) -> bytes | None:
    """The object, or None if absent; never more than ``limit + 1`` bytes are fetched (one ranged read:
    a stat would also work, but fsspec answers it from a listing cache that can predate the object).
    ``role``: the metadata document read (None: a version record), for the error."""
    from ..trust import reasons

    data: bytes | None
    try:
        data = store.read_range(path, 0, limit + 1)
    except FileNotFoundError:
        return None
    except Exception:  # noqa: BLE001 - a backend without ranged reads of this object: read it whole, with retries
        data = store.read(path)
    if data is None:
        return None
    if len(data) > limit:
        # read before anything is parsed: no version; load_trusted adds the policy
        raise RegistryMetadataError(
            f"{store.url}/{path} is larger than {limit} bytes; registry metadata is at most {limit}",
            reason=reasons.METADATA_MALFORMED,
            registry=store.url,
            role=role,
            policy_sha256=None,
            archive=None,
            version=None,
            seen=None,
            expires=None,
        )
    return data


def check_record(meta: TrustedMetadata, record: VersionRecord, reg: Registry, policy: TrustPolicy) -> None:
    """The record must be what the snapshot pins: present, and with the same sha256, size and index digest."""
    from ..trust import reasons

    entry = meta.snapshot.entry(record.name, record.version)
    if entry is None:
        listed = ", ".join(sorted(meta.snapshot.versions(record.name))) or "none"
        raise _refuse(
            reasons.VERSION_NOT_IN_SNAPSHOT,
            f"{record.ref} is in {reg.url}, but not in its signed snapshot "
            f"(version {meta.snapshot.version}; versions of {record.name} there: {listed}): it was added "
            "without the metadata key, or by someone else",
            reg,
            policy,
            role="snapshot",
            version=meta.snapshot.version,
            archive=record.ref,
        )
    if entry != SnapshotEntry.of(record):
        raise _refuse(
            reasons.METADATA_MISMATCH,
            f"{record.ref}: the registry's record (sha256 {record.sha256}, "
            f"{record.size} bytes, index {record.index_sha256}) differs from the signed snapshot's (sha256 "
            f"{entry.sha256}, {entry.size} bytes, index {entry.index_sha256}): the record was rewritten",
            reg,
            policy,
            role="snapshot",
            version=meta.snapshot.version,
            archive=record.ref,
        )


def _read_record(reg: Registry, name: str, version: str) -> VersionRecord | None:
    """The version record by one ranged read. (A whole-object read through s3fs first stats the object,
    and the stat is answered from the listing cache an earlier listing in this process left: a record
    created since would read as absent, and a withheld-version alarm would be false.)"""
    path = version_record_path(name, version)
    data = _read_bounded(reg.store, path, MAX_RECORD_BYTES, None)  # a version record: no metadata role
    return reg._record_at(path, data, name, version)


def resolve_with_metadata(reg: Registry, ref: Ref, policy: TrustPolicy) -> VersionRecord:
    """``NAME@VERSION`` or ``NAME@latest`` resolved through the verified snapshot (never through the
    registry's own listing, which a writer-compromised bucket controls)."""
    from ..trust import reasons

    meta = load_trusted(reg, policy)
    if ref.version is None:
        version = newest(meta.snapshot.versions(ref.name))
        if version is None:
            raise _refuse(
                reasons.VERSION_NOT_IN_SNAPSHOT,
                f"{ref.name}: no version of this name is in the signed "
                f"snapshot of {reg.url} (version {meta.snapshot.version})",
                reg,
                policy,
                role="snapshot",
                version=meta.snapshot.version,
                archive=str(ref),
            )
    else:
        version = ref.version
    record = reg.cache.recall(reg.url, ref.name, version) or _read_record(reg, ref.name, version)
    if record is None:
        if meta.snapshot.entry(ref.name, version) is not None:
            raise _refuse(
                reasons.VERSION_WITHHELD,
                f"{ref.name}@{version} is in the signed snapshot of {reg.url} "
                f"(version {meta.snapshot.version}), but the registry does not serve its record: it is "
                "withheld (or was deleted)",
                reg,
                policy,
                role="snapshot",
                version=meta.snapshot.version,
                archive=f"{ref.name}@{version}",
            )
        raise reg._missing_version(ref.name, version)
    check_record(meta, record, reg, policy)
    return record


# -- writers: issue a snapshot and a timestamp -----------------------------------------------------------
@dataclass(frozen=True)
class MetadataUpdate:
    """What a writer issued: a new snapshot (``snapshot_created``) or only a new timestamp."""

    registry: str
    snapshot_version: int
    snapshot_created: bool
    timestamp_version: int
    snapshot_expires: str
    timestamp_expires: str
    names: int
    versions: int
    attempts: int = 1  # > 1: another writer issued a snapshot meanwhile, and this one took the next number
    timestamp_snapshot: int = 0  # the snapshot the timestamp names: the newest (another writer's, after a race)

    def to_json(self) -> dict[str, Any]:
        return {
            "registry": self.registry,
            "snapshot": {
                "version": self.snapshot_version,
                "created": self.snapshot_created,
                "expires": self.snapshot_expires,
            },
            "timestamp": {
                "version": self.timestamp_version,
                "expires": self.timestamp_expires,
                "snapshot": self.timestamp_snapshot,
            },
            "names": self.names,
            "versions": self.versions,
            "attempts": self.attempts,
        }


def _listed_snapshots(store: Store) -> list[int]:
    return sorted(int(n[: -len(".json")]) for n in store.list_dir(SNAPSHOTS_DIR) if fullmatch(_SNAPSHOT_FILE, n))


def _newest_snapshot(store: Store) -> tuple[int, bytes | None]:
    listed = _listed_snapshots(store)
    if not listed:
        return 0, None
    return listed[-1], store.read(snapshot_path(listed[-1]))


def _current_timestamp_version(store: Store) -> int:
    """The version of the stored timestamp, as a hint for the next one (not verified: a bogus one only
    makes this writer's next number larger, or makes clients refuse the registry, which a bucket writer
    can do anyway)."""
    from ..trust.metadata import MAX_TIMESTAMP_BYTES, Timestamp, parse_envelope

    data = store.read(TIMESTAMP_PATH)
    if data is None:
        return 0
    try:
        return Timestamp.parse(
            parse_envelope(data, TIMESTAMP_PATH, "timestamp", MAX_TIMESTAMP_BYTES).payload, TIMESTAMP_PATH
        ).version
    except RegistryMetadataError:
        return 0


def _collect(reg: Registry) -> dict[str, dict[str, SnapshotEntry]]:
    """Every version record, from the listing (writers can always list); the derived name index only
    saves reads, and a damaged one is ignored rather than trusted or fatal."""
    names: dict[str, dict[str, SnapshotEntry]] = {}
    try:
        all_names = reg.names()
    except NotFoundError:
        all_names = []
    for name in all_names:
        try:
            index = reg._read_name_index(name) or {}
        except RegistryError:
            index = {}
        for version in reg._listed_versions(name):  # checked versions: stray files are skipped there
            record = index.get(version) or reg._read_record(name, version)
            if record is not None:
                names.setdefault(name, {})[version] = SnapshotEntry.of(record)
    return {n: dict(sorted(vs.items())) for n, vs in sorted(names.items())}


def _check_carried(
    reg: Registry,
    previous: bytes | None,
    number: int,
    names: Mapping[str, Mapping[str, SnapshotEntry]],
    keys: Sequence[SigningKey],
) -> None:
    """Every version of the newest snapshot this writer's keys signed stays, with the same digests: a
    record deleted or rewritten in the bucket is refused, never signed into the next snapshot."""
    from ..trust.metadata import MAX_SNAPSHOT_BYTES, parse_envelope, signed_by_any

    if previous is None:
        return
    where = f"{reg.url}/{snapshot_path(number)}"
    try:
        envelope = parse_envelope(previous, where, "snapshot", MAX_SNAPSHOT_BYTES)
        if not signed_by_any(envelope, [k.public for k in keys]):
            return  # another key's snapshot (a rotation): nothing this writer vouched for
        old = Snapshot.parse(envelope.payload, where)
    except RegistryMetadataError:
        return
    for name, versions in old.names.items():
        for version, entry in versions.items():
            now = names.get(name, {}).get(version)
            if now is None:
                raise RegistryError(
                    f"{name}@{version} is in snapshot {number} (signed by this key) but its record is "
                    f"gone from {reg.url}: refusing to sign a snapshot without it (versions are never "
                    "deleted; restore the record)",
                    registry=reg.url,
                )
            if now != entry:
                raise ConflictError(
                    f"{name}@{version}: the record in {reg.url} (sha256 {now.sha256}) differs from "
                    f"snapshot {number}'s (sha256 {entry.sha256}), which this key signed: the record "
                    "was rewritten; refusing to sign it",
                    registry=reg.url,
                    ref=f"{name}@{version}",
                    existing_digest=entry.sha256,
                    new_digest=now.sha256,
                )


def update_metadata(
    reg: Registry,
    keys: Sequence[SigningKey],
    *,
    snapshot: bool = True,
    timestamp_keys: Sequence[SigningKey] | None = None,
    snapshot_expires: datetime.timedelta = DEFAULT_SNAPSHOT_EXPIRY,
    timestamp_expires: datetime.timedelta = DEFAULT_TIMESTAMP_EXPIRY,
    now: datetime.datetime | None = None,
    rounds: int = 20,
) -> MetadataUpdate:
    """Issue a new snapshot from the registry's records (``snapshot=True``; signed by ``keys``) and a
    new timestamp naming the newest snapshot (signed by ``timestamp_keys``, default ``keys``).
    ``snapshot=False`` re-signs only the timestamp (what a scheduled job runs: freeze protection needs
    it re-signed before it expires). ``now`` is the issue time (tests sign in the past)."""
    from ..trust.metadata import MAX_SNAPSHOT_BYTES, SNAPSHOT_TYPE, sign_payload

    if not reg.store.writable:
        raise RegistryError(
            f"registry {reg.url} is read-only; sign its metadata in the directory or bucket it serves", registry=reg.url
        )
    if snapshot_expires <= datetime.timedelta(0) or timestamp_expires <= datetime.timedelta(0):
        raise RegistryError("metadata expiry must be in the future", registry=reg.url)
    now = (now or datetime.datetime.now(UTC)).replace(microsecond=0)
    store = reg.store
    attempts = 0
    created = False
    snap: Snapshot | None = None
    if snapshot:
        if not keys:
            raise RegistryError("issuing a snapshot needs a signing key (--registry-key KEY)", registry=reg.url)
        reg._ensure_marker()
        while attempts < rounds:
            attempts += 1
            number, previous = _newest_snapshot(store)
            names = _collect(reg)
            _check_carried(reg, previous, number, names, keys)
            snap = Snapshot(number + 1, now, now + snapshot_expires, names)
            data = sign_payload(SNAPSHOT_TYPE, snap.to_payload(), keys).to_bytes()
            if len(data) > MAX_SNAPSHOT_BYTES:
                raise RegistryError(
                    f"the snapshot of {reg.url} would be {len(data)} bytes, more than the "
                    f"{MAX_SNAPSHOT_BYTES} a client reads ({snap.count()} versions)",
                    registry=reg.url,
                )
            if store.create(snapshot_path(snap.version), data):
                created = True
                break
        else:
            # contention, not a conflict over one immutable version (ConflictError): no ref, no two digests
            raise RegistryError(
                f"{reg.url}: other writers issued {rounds} snapshots while this one tried; try again", registry=reg.url
            )
    ts_keys = list(timestamp_keys or keys)
    if not ts_keys:
        raise RegistryError("re-signing the timestamp needs a signing key (--key KEY)", registry=reg.url)
    ts_version, current = _write_timestamp(reg, ts_keys, now, timestamp_expires, rounds)
    mine = (
        snap if created and snap is not None else current
    )  # a racing writer's newer snapshot may be the one the timestamp names
    return MetadataUpdate(
        reg.url,
        mine.version,
        created,
        ts_version,
        utc_text(mine.expires),
        utc_text(now + timestamp_expires),
        len(mine.names),
        mine.count(),
        max(attempts, 1),
        current.version,
    )


def _write_timestamp(
    reg: Registry, keys: Sequence[SigningKey], now: datetime.datetime, expires: datetime.timedelta, rounds: int
) -> tuple[int, Snapshot]:
    """Replace the timestamp with one naming the newest snapshot, then re-list: if a newer snapshot
    appeared meanwhile (its writer's timestamp may have been overwritten by ours), write again. The
    last timestamp written therefore names the newest snapshot."""
    from ..trust.metadata import MAX_SNAPSHOT_BYTES, TIMESTAMP_TYPE, Timestamp, parse_envelope, sign_payload

    store = reg.store
    for _ in range(rounds):
        number, data = _newest_snapshot(store)
        if number == 0 or data is None:
            raise RegistryError(
                f"{reg.url} has no snapshot to timestamp: issue one first (`karchive registry-meta "
                "refresh --snapshot --key KEY`, or publish with --registry-key)",
                registry=reg.url,
            )
        where = f"{reg.url}/{snapshot_path(number)}"
        snap = Snapshot.parse(parse_envelope(data, where, "snapshot", MAX_SNAPSHOT_BYTES).payload, where)
        version = _current_timestamp_version(store) + 1
        ts = Timestamp(version, now, now + expires, number, hashlib.sha256(data).hexdigest(), len(data))
        store.replace(TIMESTAMP_PATH, sign_payload(TIMESTAMP_TYPE, ts.to_payload(), keys).to_bytes())
        if _listed_snapshots(store)[-1:] == [number]:
            return version, snap
    raise RegistryError(
        f"{reg.url}: snapshots kept changing while the timestamp was written; try again", registry=reg.url
    )  # contention (as in update_metadata), not a ConflictError


def read_current(reg: Registry) -> tuple[Timestamp | None, Snapshot | None, Envelope | None, Envelope | None]:
    """The stored timestamp and the snapshot it names, parsed but NOT verified (for `registry-meta show`
    without a policy); None where absent."""
    from ..trust.metadata import MAX_SNAPSHOT_BYTES, MAX_TIMESTAMP_BYTES, Timestamp, parse_envelope

    data = _read_bounded(reg.store, TIMESTAMP_PATH, MAX_TIMESTAMP_BYTES, "timestamp")
    if data is None:
        return None, None, None, None
    where = f"{reg.url}/{TIMESTAMP_PATH}"
    envelope = parse_envelope(data, where, "timestamp", MAX_TIMESTAMP_BYTES)
    ts = Timestamp.parse(envelope.payload, where)
    sdata = _read_bounded(reg.store, snapshot_path(ts.snapshot_version), MAX_SNAPSHOT_BYTES, "snapshot")
    if sdata is None:
        return ts, None, envelope, None
    swhere = f"{reg.url}/{snapshot_path(ts.snapshot_version)}"
    senvelope = parse_envelope(sdata, swhere, "snapshot", MAX_SNAPSHOT_BYTES)
    return ts, Snapshot.parse(senvelope.payload, swhere), envelope, senvelope
