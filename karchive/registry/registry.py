"""The registry client: publish, resolve, list, pull and open archives by NAME@VERSION.

Authoritative state is one immutable *version record* per NAME@VERSION, created with an exclusive
write after the content-addressed blob it points at is complete; so readers never see a version
whose bytes are not all there, and of two racing publishers exactly one creates the record (the
other gets a no-op for identical bytes or a :class:`ConflictError`). Name and root indexes are
derived from the records (for backends that cannot list) and are rebuilt after each publish.

Signatures are additive metadata beside the blob, one object per signing key
(:mod:`.signatures`); with a trust policy, :meth:`Registry.open` and :meth:`Registry.pull` check them
(:func:`karchive.trust.decide.decide`, through :mod:`.verdict`) before handing anything out.
"""

from __future__ import annotations

import builtins
import dataclasses
import functools
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ..core import settings
from ..core.destination import output_file
from ..core.fsio import atomic_writer
from ..core.units import utc_text
from ..errors import (
    ConflictError,
    DestinationError,
    IntegrityError,
    KarchiveError,
    NotFoundError,
    RegistryError,
    RegistryValueError,
)
from ..format.check import ArchiveFacts, check_archive_file
from ..format.reader import ArchiveReader, Limits
from .cache import Cache
from .config import registry_url
from .deadline import check_timeout, operation
from .filelock import FileLock
from .lockfile import Lockfile, load_lockfile
from .options import FetchMode, OpenOptions  # noqa: F401 - FetchMode re-exported
from .progress import make_progress
from .records import (
    VersionRecord,
    check_marker,
    decode_name_index,
    decode_root_index,
    encode_marker,
    encode_name_index,
    encode_root_index,
)
from .refs import Ref, check_name, check_version, parse_ref
from .retry import RetryPolicy
from .signatures import put_signature, refresh_signature_index, signer_ids
from .store import Store, open_store
from .store_layout import (
    MARKER,
    NAMES_DIR,
    RECORD_SUFFIX,
    ROOT_INDEX,
    blob_path,
    name_index_path,
    version_record_path,
    versions_dir,
)
from .store_source import StoreSource
from .transfer import download
from .verdict import Verdict, check_downgrade, decide_record
from .versions import newest, sort_versions, version_key

log = logging.getLogger(__name__)

_M = TypeVar("_M", bound=Callable[..., Any])


def _operation(method: _M) -> _M:
    """One registry operation: its requests, retries and backoff share one deadline (:mod:`.deadline`);
    an operation inside another (``pull`` resolving a name) shares the outer one."""

    @functools.wraps(method)
    def bounded(self: Registry, *args: Any, **kwargs: Any) -> Any:
        with operation(self.retry.timeout):
            return method(self, *args, **kwargs)

    return bounded  # type: ignore[return-value]


if TYPE_CHECKING:  # pragma: no cover - signing needs cryptography; naming the types does not
    from ..trust.keys import SigningKey
    from ..trust.policy import TrustPolicy
    from .metadata_store import MetadataUpdate


@dataclass(frozen=True)
class StoredSignature:
    key_id: str  # the signer's key id (the object's name)
    created: bool  # False: the identical signature was already stored
    source: str  # "key" (signed now) or "sidecar" (copied from ARCHIVE.sig.json)


@dataclass(frozen=True)
class PublishResult:
    record: VersionRecord
    created: bool  # False: this exact archive was already published under that version (no-op)
    registry: str
    index_current: bool = True  # False: the derived indexes could not be refreshed (records are fine)
    signatures: tuple[StoredSignature, ...] = ()
    metadata: MetadataUpdate | None = None  # with registry_keys: the snapshot and timestamp issued


@dataclass(frozen=True)
class PullResult:
    record: VersionRecord
    path: Path  # the verified archive in the cache (or the copy at -o PATH)
    downloaded: bool  # False: served from the local cache
    trust: Verdict | None = None  # with a trust policy: who signed it
    #: While this result lives (or until :meth:`release`), ``cache prune`` leaves ``path`` alone
    #: (the cache's shared use lock, spec/REGISTRY.md §5); None for a copy at ``dest``.
    hold: FileLock | None = field(default=None, repr=False, compare=False)

    def release(self) -> None:
        """Let ``cache prune`` remove the cached file again (also happens when the result is dropped)."""
        if self.hold is not None:
            self.hold.release()


@dataclass(frozen=True)
class SignResult:
    record: VersionRecord
    signature: StoredSignature
    registry: str
    index_current: bool = True  # False: the derived signature index could not be refreshed
    metadata: MetadataUpdate | None = None  # with registry_keys: the snapshot and timestamp issued


def _listing(names: list[str], limit: int = 20) -> str:
    if not names:
        return "none"
    shown = ", ".join(names[:limit])
    return shown + (f", ... ({len(names) - limit} more)" if len(names) > limit else "")


class Registry:
    """A registry at a local directory or an fsspec URL (``s3://``, ``gs://``, ``memory://``, ``http(s)://``).

    ``storage_options`` go to fsspec unchanged (credentials, endpoints); karchive never stores them.
    """

    def __init__(
        self,
        url: str | os.PathLike | None = None,
        storage_options: dict[str, Any] | None = None,
        *,
        cache: Cache | str | os.PathLike | None = None,
        retry: RetryPolicy | None = None,
        progress: bool | None = False,
        timeout: float | None = None,
    ) -> None:
        self.retry = retry or RetryPolicy.from_env()
        if timeout is not None:  # the deadline of each operation (default $KARCHIVE_REGISTRY_TIMEOUT, 60 s)
            self.retry = dataclasses.replace(self.retry, timeout=check_timeout(timeout))
        #: The default local registry may not exist yet (a fresh machine): it reads as empty. Any other
        #: location must hold a registry: a mistyped path is an error, not an empty listing.
        self.is_default = not url and not settings.registry()
        self.store: Store = open_store(registry_url(url), storage_options, self.retry)
        self.url = self.store.url
        self.cache = cache if isinstance(cache, Cache) else Cache(cache)
        self.progress = progress
        #: Entries under ``names/`` that are no archive name or version record (``bad name.json``, a
        #: non-UTF-8 file name, a stray editor file): skipped by listings, reported here and as a warning.
        self.stray: builtins.list[str] = []

    def __repr__(self) -> str:
        return f"Registry({self.url!r})"

    # -- reading records --------------------------------------------------------------------------
    def _where(self, path: str) -> str:
        return f"{self.url}/{path}"

    def _read_record(self, name: str, version: str) -> VersionRecord | None:
        path = version_record_path(name, version)
        return self._record_at(path, self.store.read(path), name, version)

    def _record_at(self, path: str, data: bytes | None, name: str, version: str) -> VersionRecord | None:
        """The record ``data`` (read from ``path``; None: absent) holds, refused unless it is ``name@version``'s."""
        if data is None:
            return None
        record = VersionRecord.from_json(data, self._where(path))
        if (record.name, record.version) != (name, version):
            raise RegistryError(
                f"{self._where(path)}: record describes {record.ref}, not {name}@{version} (damaged registry)",
                registry=self.url,
            )
        return record

    def _read_name_index(self, name: str) -> dict[str, VersionRecord] | None:
        path = name_index_path(name)
        data = self.store.read(path)
        return None if data is None else decode_name_index(data, name, self._where(path))

    def _skip_stray(self, directory: str, entry: str) -> None:
        """Note an entry a listing skips: one stray file must not break ``ls`` for the whole registry."""
        where = f"{directory}/{ascii(entry)[1:-1]}"  # escaped: the name may hold control or non-UTF-8 bytes
        if where not in self.stray:
            self.stray.append(where)
            log.warning("registry %s: skipped %s (not an archive name or version record)", self.url, where)

    def _listed_versions(self, name: str) -> list[str]:
        directory = versions_dir(name)
        out = []
        for entry in self.store.list_dir(directory):
            version = entry[: -len(RECORD_SUFFIX)] if entry.endswith(RECORD_SUFFIX) else None
            try:
                out.append(check_version(version))
            except RegistryError:
                self._skip_stray(directory, entry)
        return out

    @_operation
    def names(self) -> list[str]:
        """Every archive name in the registry, sorted."""
        if self.store.can_list:
            found = []
            for entry in self.store.list_dir(NAMES_DIR):
                try:
                    found.append(check_name(entry))
                except RegistryError:
                    self._skip_stray(NAMES_DIR, entry)
        else:
            data = self.store.read(ROOT_INDEX)
            found = [] if data is None else decode_root_index(data, self._where(ROOT_INDEX))
        if not found:
            self.require_registry()
        return sorted(found)

    @_operation
    def require_registry(self) -> None:
        """Refuse a location that holds no registry (no ``karchive-registry.json``, which the first publish
        writes): reading a mistyped path must not look like reading an empty registry. The default local
        registry before its first publish is the exception: it is simply empty."""
        if self.store.read(MARKER) is not None:
            return
        if self.is_default and self.store.is_local and not Path(self.url).exists():
            return
        raise NotFoundError(
            f"{self.url} is not a karchive registry (it has no {MARKER}): a mistyped location? "
            "A registry is created by its first `karchive publish` (--create-registry)",
            registry=self.url,
            name=None,
            version=None,
        )  # no name was missing: the location holds no registry

    @_operation
    def versions(self, name: str) -> list[VersionRecord]:
        """The versions of ``name``, oldest first; :class:`NotFoundError` if there are none."""
        check_name(name)
        if self.store.can_list:
            listed = self._listed_versions(name)
            index = self._read_name_index(name) or {}
            records = []
            for version in listed:
                record = index.get(version) or self._read_record(name, version)
                if record is not None:
                    records.append(record)
        else:
            records = list((self._read_name_index(name) or {}).values())
        if not records:
            raise self._missing_name(name)
        return sorted(records, key=lambda r: version_key(r.version))

    @_operation
    def list(self, name: str | None = None) -> list[VersionRecord]:
        """Version records of one name, or of every name (sorted by name, then version)."""
        if name is not None:
            return self.versions(name)
        out: list[VersionRecord] = []
        for n in self.names():
            try:
                out.extend(self.versions(n))
            except NotFoundError:
                continue  # a name directory without records (an interrupted first publish)
        return out

    @_operation
    def resolve(self, ref: str | Ref) -> VersionRecord:
        """NAME@VERSION → its record; NAME or NAME@latest → the newest version's record."""
        ref = parse_ref(ref) if isinstance(ref, str) else ref
        if ref.version is not None:
            record = self._read_record(ref.name, ref.version)
            if record is None:
                raise self._missing_version(ref.name, ref.version)
            return record
        if self.store.can_list:
            versions = self._listed_versions(ref.name)
        else:
            versions = list((self._read_name_index(ref.name) or {}).keys())
        latest = newest(versions)
        if latest is None:
            raise self._missing_name(ref.name)
        record = self._read_record(ref.name, latest)
        if record is None:
            raise RegistryError(
                f"{self._where(version_record_path(ref.name, latest))} is listed but missing (damaged index)",
                registry=self.url,
            )
        return record

    def _missing_name(self, name: str) -> NotFoundError:
        names = self.names()
        return NotFoundError(
            f"no archive named {name!r} in registry {self.url}; it has: {_listing(names)}",
            registry=self.url,
            name=name,
            version=None,
            available=tuple(names),
        )

    def _missing_version(self, name: str, version: str) -> NotFoundError:
        try:
            versions = [r.version for r in self.versions(name)]
        except NotFoundError as exc:
            return NotFoundError(str(exc), **{**exc.fields, "version": version})
        return NotFoundError(
            f"{name}@{version} is not in registry {self.url}; versions of {name}: "
            f"{_listing(sort_versions(versions)[::-1])} (latest: {newest(versions)})",
            registry=self.url,
            name=name,
            version=version,
            available=tuple(sort_versions(versions)),
        )

    # -- publishing -------------------------------------------------------------------------------
    @_operation
    def publish(
        self,
        archive: str | os.PathLike,
        *,
        sign: Sequence[SigningKey] = (),
        build_info: dict[str, Any] | None = None,
        sidecar: bool = True,
        registry_keys: Sequence[SigningKey] = (),
        create: bool = True,
    ) -> PublishResult:
        """Verify ``archive`` and publish it under the name and version in its manifest; with
        ``registry_keys``, then issue the registry's next signed snapshot and timestamp (spec/SIGNING.md
        §11), which list it.

        Each key in ``sign`` signs it (``build_info`` goes into the provenance statement), and with
        ``sidecar`` the signatures in ``ARCHIVE.sig.json`` are stored too, each beside the blob as
        its signer's object (REGISTRY.md §3). Signing an already published, identical version adds
        the signatures; the version itself is never changed. ``create=False`` refuses a location that holds no
        registry yet (``NotFoundError``, nothing written): the CLI's default for a named location."""
        result = self._publish(archive, sign=sign, build_info=build_info, sidecar=sidecar, create=create)
        if registry_keys:
            result = dataclasses.replace(result, metadata=self.update_metadata(registry_keys))
        return result

    @_operation
    def update_metadata(self, keys: Sequence[SigningKey], **options: Any) -> MetadataUpdate:
        """Issue a new signed snapshot and timestamp (:func:`karchive.registry.metadata_store.update_metadata`)."""
        from .metadata_store import update_metadata

        return update_metadata(self, keys, **options)

    def _publish(
        self,
        archive: str | os.PathLike,
        *,
        sign: Sequence[SigningKey],
        build_info: dict[str, Any] | None,
        sidecar: bool,
        create: bool = True,
    ) -> PublishResult:
        if not self.store.writable:
            raise RegistryError(
                f"registry {self.url} is read-only; publish to the directory or bucket it serves", registry=self.url
            )
        source = Path(archive)
        if not source.is_file():
            raise RegistryError(f"no such archive file: {source}", registry=self.url)
        with tempfile.TemporaryDirectory(prefix="karchive-publish-") as tmp:
            snapshot = Path(tmp) / "archive.karc"  # what we hash is exactly what we upload
            shutil.copyfile(source, snapshot)
            try:
                facts = check_archive_file(snapshot)
            except KarchiveError as exc:  # name the user's file, not our private copy of it
                raise _renamed(exc, str(snapshot), str(source)) from None
            record = VersionRecord(
                name=check_name(facts.name),
                version=check_version(facts.version),
                sha256=facts.sha256,
                size=facts.size,
                index_sha256=facts.index_sha256,
                published=utc_text(),
                variants=facts.variants,
                kernels=facts.kernels,
                targets=facts.targets,
            )
            # Signed before anything is written: a bad key or a stale sidecar leaves the registry untouched.
            envelopes = self._signatures_to_store(snapshot, source, facts, sign, build_info, sidecar)
            self._ensure_marker(create)
            existing = self._read_record(record.name, record.version)
            if existing is not None:
                return self._store_signatures(self._same_or_conflict(existing, record), envelopes)
            self.store.bind(record)
            self._put_blob(record, snapshot)
        if not self.store.create(version_record_path(record.name, record.version), record.to_json()):
            existing = self._read_record(record.name, record.version)
            if existing is None:
                raise RegistryError(
                    f"{record.ref}: the backend refused to create the record but it does not exist", registry=self.url
                )
            return self._store_signatures(self._same_or_conflict(existing, record), envelopes)
        current = _refreshed(lambda: self._refresh_indexes(record.name))
        return self._store_signatures(PublishResult(record, True, self.url, current), envelopes)

    def _signatures_to_store(
        self,
        snapshot: Path,
        source: Path,
        facts: ArchiveFacts,
        keys: Sequence[SigningKey],
        build_info: dict[str, Any] | None,
        sidecar: bool,
    ) -> tuple[tuple[str, bytes, str], ...]:
        """``(key id, envelope bytes, source)`` for every signature publish stores: one fresh
        envelope per key, then the sidecar's signatures, each as a one-signature envelope."""
        out: builtins.list[tuple[str, bytes, str]] = []
        if keys:
            from ..trust.sign import sign_statement

            for key in keys:
                signed = sign_statement(snapshot, key, build_info=build_info)
                if signed.sha256 != facts.sha256:
                    raise IntegrityError(f"{source} changed while it was being published", source=str(source))
                out.append((key.key_id, signed.envelope.to_bytes(), "key"))
        from ..trust.sidecar import sidecar_path

        side = sidecar_path(source)
        if sidecar and os.path.exists(side):
            from ..trust.sidecar import split_sidecar

            for key_id, data in split_sidecar(
                side, name=facts.name, version=facts.version, sha256=facts.sha256, index_sha256=facts.index_sha256
            ):
                if key_id not in {k for k, _, _ in out}:
                    out.append((key_id, data, "sidecar"))
        return tuple(out)

    def _store_signatures(self, result: PublishResult, envelopes: tuple[tuple[str, bytes, str], ...]) -> PublishResult:
        if not envelopes:
            return result
        stored = tuple(
            StoredSignature(
                key_id, put_signature(self.store, result.record.sha256, key_id, data, result.record.ref), origin
            )
            for key_id, data, origin in envelopes
        )
        current = _refreshed(lambda: refresh_signature_index(self.store, result.record.sha256)) and result.index_current
        return dataclasses.replace(result, signatures=stored, index_current=current)

    @_operation
    def sign(
        self,
        ref: str | Ref,
        key: SigningKey,
        *,
        build_info: dict[str, Any] | None = None,
        registry_keys: Sequence[SigningKey] = (),
    ) -> SignResult:
        """Add ``key``'s signature to the published ``NAME@VERSION`` (REGISTRY.md §3).

        The archive is pulled into the cache and verified first (its sha256 must be the record's), so
        the signer signs the bytes the registry serves. The version stays immutable: a signature is a
        separate object, created exclusively, so signers working at once never lose one another's.
        With ``registry_keys``, the registry's signed snapshot and timestamp are then issued anew."""
        if not self.store.writable:
            raise RegistryError(
                f"registry {self.url} is read-only; sign in the directory or bucket it serves", registry=self.url
            )
        ref = parse_ref(ref) if isinstance(ref, str) else ref
        if ref.version is None:
            raise RegistryError(
                f"sign {ref.name}@VERSION: say which version to sign ('latest' can change "
                "between reading it and signing it)",
                registry=self.url,
            )
        from ..trust.sign import sign_statement

        record = self.resolve(ref)
        hold = self.cache.hold(record.sha256)  # prune must not remove the file while it is hashed and signed
        try:
            path, _ = self.fetch(record)
            signed = sign_statement(path, key, build_info=build_info)
        finally:
            if hold is not None:
                hold.release()
        if (signed.name, signed.version, signed.sha256) != (record.name, record.version, record.sha256):
            raise IntegrityError(
                f"{record.ref}: the cached archive is {signed.name}@{signed.version} sha256 "
                f"{signed.sha256}, the record says sha256 {record.sha256}; refusing to sign",
                source=str(path),
            )
        created = put_signature(self.store, record.sha256, key.key_id, signed.envelope.to_bytes(), record.ref)
        current = _refreshed(lambda: refresh_signature_index(self.store, record.sha256))
        metadata = self.update_metadata(registry_keys) if registry_keys else None
        return SignResult(record, StoredSignature(key.key_id, created, "key"), self.url, current, metadata)

    @_operation
    def signers(self, ref: str | Ref) -> builtins.list[str]:
        """Key ids that have a signature object for ``ref`` (claimed, not verified: see :meth:`open`)."""
        return signer_ids(self.store, self.resolve(ref).sha256)

    def _same_or_conflict(self, existing: VersionRecord, record: VersionRecord) -> PublishResult:
        if existing.sha256 == record.sha256:
            return PublishResult(existing, False, self.url)
        raise ConflictError(
            f"{record.ref} already exists in {self.url} with different bytes: published sha256 {existing.sha256} "
            f"({existing.size} bytes), this archive sha256 {record.sha256} ({record.size} bytes). "
            "Versions are immutable; publish under a new version",
            registry=self.url,
            ref=record.ref,
            existing_digest=existing.sha256,
            new_digest=record.sha256,
        )

    def _ensure_marker(self, create: bool = True) -> None:
        data = self.store.read(MARKER)
        if data is None and not create:
            raise NotFoundError(
                f"{self.url} holds no karchive registry (no {MARKER}): a mistyped location? To make "
                "a new registry there, publish with --create-registry",
                registry=self.url,
                name=None,
                version=None,
            )  # the location holds no registry
        if data is None:
            self.store.create(MARKER, encode_marker())
        else:
            check_marker(data, self._where(MARKER))

    def _put_blob(self, record: VersionRecord, snapshot: Path) -> None:
        path = blob_path(record.sha256)
        progress = make_progress(self.progress, f"publish {record.ref}", record.size)
        try:
            self.store.upload(path, str(snapshot), progress.update)
        finally:
            progress.close()
        size = self.store.size(path)
        if size != record.size:
            raise RegistryError(
                f"{self._where(path)} holds {size} bytes, expected {record.size} (damaged registry blob)",
                registry=self.url,
            )

    # -- derived indexes --------------------------------------------------------------------------
    def _refresh_indexes(self, name: str, full: bool = False, rounds: int = 5) -> None:
        """Rewrite the name and root indexes until a fresh listing matches what was written.

        Racing publishers each rewrite after their own record exists, and re-check after writing;
        so the last write always reflects every record that existed before it.
        """
        for _ in range(rounds):
            listed = set(self._listed_versions(name))
            try:
                old = {} if full else (self._read_name_index(name) or {})
            except RegistryError:
                old = {}  # a corrupt index is rebuilt from the records
            records = []
            for version in sorted(listed, key=version_key):
                record = old.get(version) or self._read_record(name, version)
                if record is not None:
                    records.append(record)
            self.store.replace(name_index_path(name), encode_name_index(name, records))
            if set(self._listed_versions(name)) == listed:
                break
        for _ in range(rounds):
            names = self.names()
            self.store.replace(ROOT_INDEX, encode_root_index(names))
            if self.names() == names:
                break

    def _records_of(self, name: str) -> builtins.list[VersionRecord]:
        try:
            return self.versions(name)
        except NotFoundError:
            return []

    @_operation
    def reindex(self, name: str | None = None) -> builtins.list[str]:
        """Rebuild derived indexes from the version records (all names by default)."""
        if not self.store.writable:
            raise RegistryError(f"registry {self.url} is read-only", registry=self.url)
        names = [check_name(name)] if name else self.names()
        for n in names:
            self._refresh_indexes(n, full=True)
            for record in self._records_of(n):
                if signer_ids(self.store, record.sha256):
                    refresh_signature_index(self.store, record.sha256)
        if not names:
            self.store.replace(ROOT_INDEX, encode_root_index([]))
        return names

    # -- pulling and opening ----------------------------------------------------------------------
    @_operation
    def record_for(
        self,
        ref: str | Ref,
        lockfile: Lockfile | str | os.PathLike | None = None,
        *,
        allow_downgrade: bool = False,
        policy: TrustPolicy | None = None,
    ) -> VersionRecord:
        """Resolve, preferring what needs no network: a lockfile pin or a cached (immutable) record.

        ``NAME@latest`` that resolves below a version this cache already verified under a trust
        policy is refused (:class:`~karchive.errors.DowngradeError`) unless ``allow_downgrade``. Under a
        ``policy`` that requires signed registry metadata, references without a lockfile resolve through
        the verified snapshot (:mod:`.metadata`; a lockfile pin is already the chosen version)."""
        ref = parse_ref(ref) if isinstance(ref, str) else ref
        lock = load_lockfile(lockfile)
        if lock is not None:
            pin = lock.pin_for(ref.name, ref.version)
            if self.cache.lookup(pin.sha256, pin.size) is not None:
                record = VersionRecord(
                    pin.name, pin.version, pin.sha256, pin.size, pin.index_sha256, manifest=pin.manifest
                )
                self.store.bind(record)
                return record
            record = self.cache.recall(self.url, pin.name, pin.version) or self.resolve(Ref(pin.name, pin.version))
            lock.check(record)
        elif policy is not None and policy.registry is not None and policy.registry.require_signed_metadata:
            from .metadata_store import resolve_with_metadata

            record = resolve_with_metadata(self, ref, policy)
            if ref.version is None and not allow_downgrade:
                check_downgrade(self.cache, self.url, record)
        elif ref.version is not None:
            record = self.cache.recall(self.url, ref.name, ref.version) or self.resolve(ref)
        else:
            record = self.resolve(ref)
            if not allow_downgrade:
                check_downgrade(self.cache, self.url, record)
        self.cache.remember(self.url, record)
        self.store.bind(record)
        return record

    @_operation
    def fetch(self, record: VersionRecord) -> tuple[Path, bool]:
        """The verified archive for ``record`` in the local cache; downloads only on a miss."""
        self.store.bind(record)

        def fill(out: Any) -> None:
            progress = make_progress(self.progress, f"pull {record.ref}", record.size)
            download(self.store, blob_path(record.sha256), record.size, out, retry=self.retry, progress=progress)

        return self.cache.install(record.sha256, record.size, fill, name=record.name, version=record.version)

    @_operation
    def pull(
        self, ref: str | Ref, dest: str | os.PathLike | None = None, options: OpenOptions | None = None
    ) -> PullResult:
        """Fetch ``ref`` into the cache (verified), and with a trust policy (``options.trust`` or
        ``$KARCHIVE_TRUST_POLICY``) check its signatures; ``dest`` gets a copy only if all passed.

        ``options`` is the :class:`OpenOptions` :meth:`open` takes (``OpenOptions(trust=policy,
        lockfile=path)``); pull reads ``lockfile``, ``trust``, ``allow_downgrade``, ``limits`` and
        ``reuse_verdict``. It always fetches the whole archive, so ``fetch`` is not read, and
        ``registry``, ``cache_dir`` and ``storage_options`` belong to this registry, as for :meth:`open`."""
        from ..trust.enforce import resolve_policy

        opts = OpenOptions.of(options)
        policy = resolve_policy(opts.trust)
        lock = load_lockfile(opts.lockfile)
        record = self.record_for(ref, lock, allow_downgrade=opts.allow_downgrade, policy=policy)
        # Held from before the lookup: prune cannot remove the blob between fetch and open, nor while
        # the caller uses the returned path (until the result is released or dropped).
        hold = self.cache.hold(record.sha256)
        try:
            path, downloaded = self.fetch(record)
            if policy is not None:
                reader, verdict = self._open_cached(
                    record, path, opts.limits or Limits(), policy, lock, opts.reuse_verdict
                )
                _close(reader)
            else:  # nothing to verify, but a lockfile that pins signers is refused without a policy
                verdict = decide_record(
                    self.store, None, record, index_sha256=record.index_sha256, sha256=record.sha256, lock=lock
                )
            if verdict is not None:
                self.cache.raise_mark(self.url, record.name, record.version)
            if dest is not None:
                path = _copy_out(path, dest, record)  # not Path(dest): it would drop a trailing '/'
        except BaseException:
            if hold is not None:
                hold.release()
            raise
        if dest is not None and hold is not None:
            hold.release()  # the copy is the caller's; the cached file may go
            hold = None
        return PullResult(record, path, downloaded, verdict, hold)

    @_operation
    def open(self, ref: str | Ref, options: OpenOptions | None = None, **fields: Any) -> ArchiveReader:
        """An :class:`ArchiveReader` for ``ref``, opened as ``options`` say (:class:`OpenOptions`; keyword
        arguments replace single fields: ``reg.open(ref, trust=policy, fetch="lazy")``). ``registry``,
        ``cache_dir`` and ``storage_options`` belong to this registry and are not read here.

        ``auto`` fetch (default, or ``$KARCHIVE_FETCH``): a cached archive is read from disk; a local
        registry is pulled into the cache; a remote one is read lazily with range requests (the tail,
        then one request per frame used). ``full`` always pulls; ``lazy`` never does.

        With a trust policy (``trust``, else ``$KARCHIVE_TRUST_POLICY``) the archive's signatures must
        satisfy it before the reader is returned (:func:`karchive.trust.decide.decide`); the reader's
        ``verdict`` says who signed it (None without a policy). They are checked against the digests
        the returned reader itself verified: the cached file's sha256 and index digest, or, for a lazy
        (ranged) read, the index digest of the footer it opened from (spec/SIGNING.md §6.1). A refusal
        raises before any reader is returned.
        """
        from ..trust.enforce import resolve_policy

        opts = OpenOptions.of(options, **fields)
        mode = opts.fetch_mode()
        policy = resolve_policy(opts.trust)
        lock = load_lockfile(opts.lockfile)
        record = self.record_for(ref, lock, allow_downgrade=opts.allow_downgrade, policy=policy)
        limits = opts.limits or Limits()
        # The use lock, shared, from before the lookup until the reader is closed: prune never removes
        # the blob in between (no false "changed after it was verified"), and a blob pruned before we
        # got the lock is simply a miss, fetched again (spec/REGISTRY.md §5).
        hold = self.cache.hold(record.sha256)
        try:
            cached = self.cache.lookup(record.sha256, record.size, name=record.name, version=record.version)
            if cached is None and (mode == "full" or (mode == "auto" and self.store.is_local)):
                cached = self.fetch(record)[0]
            if cached is not None:
                reader, verdict = self._open_cached(record, cached, limits, policy, lock, opts.reuse_verdict, hold)
                hold = None  # the reader's source releases it when closed
        finally:
            if hold is not None:
                hold.release()
        if cached is None:
            reader = self.open_lazy(record, limits)
            try:
                verdict = self._verify_lazy(record, reader, policy, lock)
            except BaseException:
                _close(reader)
                raise
        if verdict is not None:
            self.cache.raise_mark(self.url, record.name, record.version)
        reader.verdict = verdict
        return reader

    def open_verified(self, ref: str | Ref, **fields: Any) -> tuple[ArchiveReader, Verdict | None]:
        """Deprecated: ``reader = reg.open(ref, ...)``; ``reader.verdict`` is the second value this returned."""
        import warnings

        warnings.warn(
            "Registry.open_verified(ref, ...) is deprecated: use reg.open(ref, ...) and its reader's .verdict",
            DeprecationWarning,
            stacklevel=2,
        )
        reader = self.open(ref, **fields)
        return reader, reader.verdict

    def _open_cached(
        self,
        record: VersionRecord,
        path: Path,
        limits: Limits,
        policy: TrustPolicy | None,
        lock: Lockfile | None = None,
        reuse_verdict: bool = True,
        hold: FileLock | None = None,
    ) -> tuple[ArchiveReader, Verdict | None]:
        """Open the cached blob so that the reader is bound to what the cache verified: the index digest
        of the footer the reader opened from must be the one the receipt recorded when the file was
        hashed (a file swapped or changed after the receipt check is refused, never trusted). ``hold``
        (the cache's use lock) is handed to the reader's source, which releases it when closed."""
        from ..trust.bind import open_recorded
        from .cache import HeldFileSource

        source = HeldFileSource(path, hold)
        try:
            reader, index = open_recorded(source, limits)
            receipt = self.cache.receipt(record.sha256)
            if receipt is None or receipt.get("index_sha256") != index:
                raise IntegrityError(
                    f"{path} changed after it was verified (its cache receipt no longer matches); "
                    "refusing it: load it again to verify it anew",
                    source=str(path),
                )
            verdict = decide_record(
                self.store,
                policy,
                record,
                index_sha256=index,
                sha256=record.sha256,
                lock=lock,
                cache=self.cache,
                reuse=reuse_verdict,
            )
        except BaseException:
            source.close()
            raise
        return reader, verdict

    def _verify_lazy(
        self, record: VersionRecord, reader: ArchiveReader, policy: TrustPolicy | None, lock: Lockfile | None
    ) -> Verdict | None:
        """A ranged reader never hashes the whole blob: bind the signature to the footer it opened from
        (already compared with the record by :meth:`open_lazy`) and to its manifest's identity."""
        if policy is not None:
            manifest = reader.header  # the identity, without reading a format-2 archive's shards
            if (manifest.get("name"), manifest.get("version")) != (record.name, record.version):
                raise IntegrityError(
                    f"{record.ref}: the blob's manifest says {manifest.get('name')}@"
                    f"{manifest.get('version')} (tampered or wrong blob)",
                    source=self._where(blob_path(record.sha256)),
                )
        return decide_record(
            self.store, policy, record, index_sha256=record.index_sha256, sha256=record.sha256, lock=lock
        )

    @_operation
    def open_lazy(self, record: VersionRecord, limits: Limits | None = None) -> ArchiveReader:
        """Range reads only: the tail, then one request per frame used; authenticated via the index digest."""
        self.store.bind(record)
        source = StoreSource(self.store, blob_path(record.sha256), record.size, self.retry)
        reader = ArchiveReader(source, limits=limits or Limits())
        found = source.footer_index_sha256()
        if found != record.index_sha256:
            raise IntegrityError(
                f"{source.describe()}: index digest {found} differs from {record.ref}'s record "
                f"{record.index_sha256} (tampered or wrong blob)",
                source=source.describe(),
            )
        return reader

    @_operation
    def lock(
        self, refs: Sequence[str | Ref], options: OpenOptions | None = None
    ) -> tuple[Lockfile, dict[str, Verdict]]:
        """A lockfile pinning each reference's digests and, with a trust policy (``options.trust`` or
        ``$KARCHIVE_TRUST_POLICY``), its signers (the key ids whose signatures count now). Each archive
        is then pulled and verified (:meth:`pull`, with the same ``options``) to learn them.
        ``options.allow_downgrade`` is read as by :meth:`pull`; ``options.lockfile`` is refused: this
        makes a lockfile, and pinning it to another would be a second, silent source of versions."""
        from ..trust.enforce import resolve_policy
        from .lockfile import Lockfile

        opts = OpenOptions.of(options)
        if opts.lockfile is not None:
            raise RegistryValueError(
                "Registry.lock makes a lockfile; it does not read one (options.lockfile is set)",
                value=repr(opts.lockfile)[:200],
            )
        policy = resolve_policy(opts.trust)
        records, verdicts = [], {}
        for ref in refs:
            if policy is None:
                records.append(self.record_for(ref, allow_downgrade=opts.allow_downgrade))
                continue
            result = self.pull(ref, options=OpenOptions.of(opts, trust=policy))  # resolved once, for every ref
            records.append(result.record)
            if result.trust is not None:
                verdicts[result.record.name] = result.trust
        signers = {name: v.key_ids for name, v in verdicts.items()}
        return Lockfile.from_records(records, self.url, signers), verdicts


def _refreshed(refresh: Callable[[], object]) -> bool:
    """Whether a derived index could be refreshed after a write; the write stands either way (a version or a
    signature stored), and `karchive reindex` repairs the index."""
    try:
        refresh()
    except RegistryError:
        return False
    return True


def _close(reader: ArchiveReader) -> None:
    close = getattr(reader.source, "close", None)
    if callable(close):
        close()


def _copy_out(path: Path, dest: str | os.PathLike, record: VersionRecord) -> Path:
    """Copy the verified archive to ``dest``: a file, or a directory (existing, or any path ending in
    ``/``) to put ``NAME-VERSION.karc`` in; missing parent directories are created."""
    target = Path(output_file(dest, default_name=f"{record.name}-{record.version}.karc"))
    try:
        with open(path, "rb") as src, atomic_writer(target) as out:
            shutil.copyfileobj(src, out, 1 << 20)
    except DestinationError:
        raise
    except OSError as exc:
        raise DestinationError(f"cannot write {target}: {exc.strerror or exc}", path=str(target)) from None
    return target


def _renamed(exc: KarchiveError, private: str, public: str) -> KarchiveError:
    """The same error, naming ``public`` wherever it named the ``private`` path."""
    fields = {k: (v.replace(private, public) if isinstance(v, str) else v) for k, v in exc.fields.items()}
    return type(exc)(str(exc).replace(private, public), **fields)
