"""``oci://HOST[:PORT]/NAMESPACE``: a registry on an OCI distribution registry, behind the same
:class:`~.store.Store` interface as a directory or a bucket (spec/REGISTRY.md §10).

The registry's layout paths map onto OCI objects, so :mod:`.registry` keeps one copy of the logic
(publish order, immutability, conflicts, signatures, trust) for every backend:

=====================================================  =====================================================
layout path                                            OCI object
=====================================================  =====================================================
``names/`` (listing)                                   ``GET /v2/_catalog``, repositories under NAMESPACE
``names/NAME/versions/`` (listing)                     ``GET /v2/NAMESPACE/NAME/tags/list``
``names/NAME/versions/VERSION.json`` (the record)      the archive manifest tagged VERSION (annotations)
``blobs/sha256/D.karc``                                the blob ``sha256:D`` (HEAD, ranged GET, upload)
``blobs/sha256/D.karc.sigs/KEYID.json``                a signature referrer of the archive manifest
``index.json``, name and signature indexes, marker     derived: the registry answers them itself
=====================================================  =====================================================

Blobs live in the archive's repository (``NAMESPACE/NAME``): the registry learns which repository a
digest belongs to from the record it read or was given (:meth:`OciStore.bind`). A tag is written
only where it does not exist, and read back after: OCI distribution has no conditional tag write, so
of racing publishers the one whose manifest the tag names wins and the others see a conflict.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from ..core.grammar import fullmatch
from ..errors import DamagedRegistryError, IntegrityError, RegistryError, RegistryValueError, TransferError
from . import oci_layout as L
from .config import redact_url
from .deadline import current as current_deadline
from .metadata_store import SNAPSHOTS_DIR, TIMESTAMP_PATH
from .oci_client import OciClient, OciHttpError, retry_after
from .records import VersionRecord, encode_marker
from .retry import RetryPolicy
from .store import ProgressFn, Store
from .store_layout import MARKER, NAMES_DIR, ROOT_INDEX, SIGNATURE_INDEX, SIGNATURE_SUFFIX

log = logging.getLogger(__name__)

_RECORD = re.compile(r"names/([^/]+)/versions/([^/]+)\.json")
_VERSIONS = re.compile(r"names/([^/]+)/versions")
_NAME_INDEX = re.compile(r"names/([^/]+)/index\.json")
_BLOB = re.compile(r"blobs/sha256/([0-9a-f]{64})\.karc")
_SIGS = re.compile(r"blobs/sha256/([0-9a-f]{64})\.karc\.sigs")
_SIG = re.compile(r"blobs/sha256/([0-9a-f]{64})\.karc\.sigs/([0-9a-f]{64})\.json")
_SNAPSHOT = re.compile(re.escape(SNAPSHOTS_DIR) + r"/([1-9][0-9]{0,15})\.json")
#: The repository (under the namespace) holding signed registry metadata: two path components, so it is
#: never an archive's repository (``NAMESPACE/NAME``).
METADATA_REPO = "karchive/metadata"
_SIG_INDEX = re.compile(r"blobs/sha256/([0-9a-f]{64})\.karc\.sigs/" + re.escape(SIGNATURE_INDEX))
#: Listings read at most this many entries (pages of the catalog, tags or referrers).
MAX_LISTED = 10_000
#: Blobs larger than this go up in chunks (PATCH per chunk) instead of one PUT read into memory.
CHUNKED_ABOVE = 64 << 20
#: Seconds between writing a version's tag and reading it back (:meth:`OciStore._create_record`).
SETTLE = 1.5
_LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")


@dataclass
class _Subject:
    """Where an archive blob lives: its repository, its version's tag, and its manifest once known."""

    repo: str
    tag: str
    manifest: str = ""  # sha256:<hex>
    manifest_size: int = 0


def parse_oci_url(url: str) -> tuple[str, str]:
    """``oci://host[:port][/namespace]`` → ``(host[:port], namespace)``."""
    parts = urlsplit(url)
    if parts.scheme.lower() != "oci" or not parts.hostname or parts.query or parts.fragment:
        raise RegistryValueError(
            f"bad OCI registry {redact_url(url)!r}: expected oci://HOST[:PORT][/NAMESPACE]",
            value=repr(redact_url(url))[:200],
        )
    namespace = parts.path.strip("/")
    for part in namespace.split("/") if namespace else ():
        if not fullmatch(L._REPO_COMPONENT, part):
            raise RegistryValueError(
                f"bad OCI namespace {namespace!r} in {redact_url(url)}: lower-case path components "
                "of letters and digits separated by '.', '_' or '-'",
                value=repr(namespace)[:200],
            )
    host = parts.netloc.rpartition("@")[2].lower()
    return host, namespace


class OciStore(Store):
    """An OCI registry namespace as a karchive registry (see the module docstring for the mapping).

    ``storage_options``: ``username`` and ``password`` (else Docker's credential configuration),
    ``plain_http`` (default: on for loopback hosts only), ``tls_verify`` (bool or a CA bundle path).
    """

    def __init__(self, url: str, options: dict[str, Any] | None, retry: RetryPolicy) -> None:
        opts = dict(options or {})
        unknown = set(opts) - {"username", "password", "plain_http", "tls_verify"}
        if unknown:
            raise RegistryValueError(
                f"unknown storage options for an OCI registry: {', '.join(sorted(unknown))} "
                "(known: username, password, plain_http, tls_verify)",
                value=repr(sorted(unknown)),
            )
        self.host, self.namespace = parse_oci_url(url)
        self.url = redact_url(url).rstrip("/")
        self.retry = retry
        hostname = urlsplit(url).hostname or ""
        plain = opts.get("plain_http", hostname in _LOOPBACK)
        self.client = OciClient(
            self.host,
            url=self.url,
            plain_http=bool(plain),
            username=opts.get("username"),
            password=opts.get("password"),
            tls_verify=opts.get("tls_verify", True),
        )
        self._subjects: dict[str, _Subject] = {}
        self._facts: dict[str, dict[str, str]] = {}
        self._referrers_api: bool | None = None
        self._listed: dict[str, tuple[Any, dict[str, dict[str, Any]]]] = {}
        self._lock = threading.Lock()

    # -- helpers ------------------------------------------------------------------------------------
    def _repo(self, name: str) -> str:
        component = L.repository_component(name)
        return f"{self.namespace}/{component}" if self.namespace else component

    def _call(self, fn: Any, what: str) -> Any:
        return self.retry.call(fn, f"{what} {self.url}", registry=self.url)

    def _get(self, path: str, what: str, accept: str | None = None, ok: tuple[int, ...] = (200,)) -> Any:
        headers = {"Accept": accept} if accept else {}
        return self._call(lambda: self.client.request("GET", path, headers=headers, ok=ok), what)

    def _subject(self, digest: str) -> _Subject:
        with self._lock:
            subject = self._subjects.get(digest)
        if subject is None:  # a record always comes first (read, or bound from a lockfile or the cache)
            raise RegistryError(
                f"{self.url}: no archive record names blob sha256:{digest} in this session; resolve NAME@VERSION first",
                registry=self.url,
            )
        return subject

    def bind(self, record: VersionRecord) -> None:
        with self._lock:
            known = self._subjects.get(record.sha256)
            if known is None or (record.manifest and not known.manifest):
                self._subjects[record.sha256] = _Subject(
                    self._repo(record.name), L.version_tag(record.version), record.manifest
                )

    def _unmapped(self, path: str) -> RegistryError:
        return RegistryError(f"{self.url}: {path} has no place on an OCI registry (internal error)", registry=self.url)

    # -- manifests ----------------------------------------------------------------------------------
    def manifest(self, repo: str, reference: str, what: str) -> tuple[bytes, str] | None:
        """A manifest's bytes and digest (by tag, or by digest: then the bytes must hash to it)."""
        try:
            response = self._get(
                f"{repo}/manifests/{reference}",
                f"read manifest {repo}:{reference} from",
                accept=f"{L.MANIFEST_TYPE}, {L.INDEX_TYPE}",
            )
        except FileNotFoundError:
            return None
        data = response.content
        if len(data) > L.MAX_MANIFEST_BYTES:
            raise DamagedRegistryError(
                f"{self.url}/{repo}:{reference}: manifest larger than {L.MAX_MANIFEST_BYTES} bytes",
                where=f"{self.url}/{repo}",
            )
        digest = L.digest_of(data)
        if reference.startswith("sha256:") and digest != reference:
            raise IntegrityError(
                f"{self.url}/{repo}@{reference}: the registry served a manifest whose digest is "
                f"{digest} ({what}); refusing it",
                source=f"{self.url}/{repo}@{reference}",
            )
        return data, digest

    def _read_record(self, name: str, version: str) -> bytes | None:
        try:
            tag = L.version_tag(version)
        except RegistryError:
            return None  # no such tag can exist
        repo = self._repo(name)
        got = self.manifest(repo, tag, "an archive manifest")
        if got is None:
            return None
        data, digest = got
        record = L.record_from_manifest(data, f"{self.url}/{repo}:{tag}", digest)
        with self._lock:
            self._subjects[record.sha256] = _Subject(repo, tag, digest, len(data))
        return record.to_json()

    def push_bytes(self, repo: str, data: bytes) -> None:
        digest = L.digest_of(data)

        def push() -> None:
            try:
                self.client.request("HEAD", f"{repo}/blobs/{digest}")
                return
            except FileNotFoundError:
                pass
            start = self.client.request("POST", f"{repo}/blobs/uploads/", ok=(202,))
            location = _absolute(start.headers.get("Location", ""), self.client)
            self.client.request(
                "PUT",
                location,
                params={"digest": digest},
                data=data,
                headers={"Content-Type": "application/octet-stream"},
                ok=(201,),
            )

        self._call(push, f"upload {digest[:19]} to {repo} in")

    def put_manifest(self, repo: str, reference: str, data: bytes, media_type: str = L.MANIFEST_TYPE) -> None:
        self._call(
            lambda: self.client.request(
                "PUT", f"{repo}/manifests/{reference}", data=data, headers={"Content-Type": media_type}, ok=(201, 200)
            ),
            f"write manifest {repo}:{reference} in",
        )

    def _create_record(self, data: bytes) -> bool:
        # The manifest is a function of the archive alone (no publish time), so publishing the same bytes
        # twice, or from two machines at once, names the same manifest and is a no-op.
        record = dataclasses.replace(VersionRecord.from_json(data, "the record being published"), published="")
        repo, tag = self._repo(record.name), L.version_tag(record.version)
        facts = self._facts.get(record.sha256, {})
        manifest = L.archive_manifest(record, format_version=facts.get("format", ""), triton=facts.get("triton", ""))
        digest = L.digest_of(manifest)
        if not self._create_tag(repo, tag, manifest, record.ref):
            return False
        with self._lock:
            self._subjects[record.sha256] = _Subject(repo, tag, digest, len(manifest))
        return True

    def _create_tag(self, repo: str, tag: str, manifest: bytes, what: str) -> bool:
        """Point ``tag`` at ``manifest`` only if it names nothing yet; True if this call's manifest won.

        OCI distribution has no conditional tag write, so this is Fischer's timed mutual exclusion with
        the tag as the shared register: check that the tag is absent, write it, wait SETTLE, read it
        back; the writer whose manifest it then names wins, the others get False (the registry then
        reports a conflict, or a no-op for the same bytes). Safe while every writer's check-to-write
        takes less than SETTLE; one that took longer says so (spec/REGISTRY.md §10). A registry with tag
        immutability turned on (Harbor, ECR, ACR, Artifact Registry) refuses the second write itself."""
        self.push_bytes(repo, L.EMPTY_BLOB)
        digest = L.digest_of(manifest)
        started = time.monotonic()
        if self.manifest(repo, tag, "a manifest") is not None:
            return False  # an existing tag is never moved
        try:
            self.put_manifest(repo, tag, manifest)
        except TransferError as exc:
            if isinstance(exc.__cause__, OciHttpError) and exc.__cause__.status in (400, 409, 412):
                return False  # an immutable tag, refused by the registry: the caller reads what it holds
            raise
        took = time.monotonic() - started
        # the wait outlasts any writer's check-to-write as this one saw it (a loaded host slows them all alike)
        time.sleep(max(SETTLE, 3 * took))
        now = self.manifest(repo, tag, "a manifest")
        if now is None or now[1] != digest:
            return False
        if took > SETTLE / 2:
            log.warning(
                "registry %s: writing tag %s:%s took %.1f s after checking it was free, more than %.1f s: "
                "another writer of %s may also have been told it won; check with `karchive pull`",
                self.url,
                repo,
                tag,
                took,
                SETTLE / 2,
                what,
            )
        return True

    # -- signed registry metadata (spec/SIGNING.md §11): one small artifact per document -----------
    def _metadata(self, path: str) -> tuple[str, str] | None:
        """``(repository, tag)`` of a metadata document: ``NAMESPACE/karchive/metadata`` (two components,
        so no archive's repository can be it), tags ``timestamp`` and ``snapshot-N``."""
        repo = f"{self.namespace}/{METADATA_REPO}" if self.namespace else METADATA_REPO
        if path == TIMESTAMP_PATH:
            return repo, "timestamp"
        if m := _SNAPSHOT.fullmatch(path):
            return repo, f"snapshot-{m.group(1)}"
        return None

    def _read_document(self, repo: str, tag: str) -> bytes | None:
        got = self.manifest(repo, tag, "a registry metadata document")
        if got is None:
            return None
        where = f"{self.url}/{repo}:{tag}"
        doc = L.load_manifest(got[0], where)
        layers = doc.get("layers")
        if doc.get("artifactType") != L.METADATA_ARTIFACT or not isinstance(layers, list) or len(layers) != 1:
            raise DamagedRegistryError(f"{where}: not a karchive registry metadata document", where=where)
        blob, size = L._sha256_of(layers[0], where)
        if size > L.MAX_MANIFEST_BYTES:
            raise DamagedRegistryError(f"{where}: document larger than {L.MAX_MANIFEST_BYTES} bytes", where=where)
        data: bytes = self._get(f"{repo}/blobs/sha256:{blob}", f"read {tag} from").content
        if L.digest_of(data) != f"sha256:{blob}":
            raise IntegrityError(
                f"{where}: the registry served a document that does not hash to sha256:{blob}", source=where
            )
        return data

    def _document_manifest(self, repo: str, data: bytes) -> bytes:
        self.push_bytes(repo, L.EMPTY_BLOB)
        self.push_bytes(repo, data)
        return L.encode(
            {
                "schemaVersion": 2,
                "mediaType": L.MANIFEST_TYPE,
                "artifactType": L.METADATA_ARTIFACT,
                "config": L.empty_config(),
                "layers": [L.descriptor(L.SIGNATURE_LAYER, L.digest_of(data), len(data))],
            }
        )

    # -- referrers (signatures) ---------------------------------------------------------------------
    def _subject_manifest(self, digest: str) -> _Subject:
        subject = self._subject(digest)
        if not subject.manifest or not subject.manifest_size:
            got = self.manifest(subject.repo, subject.manifest or subject.tag, "an archive manifest")
            if got is None:
                raise RegistryError(f"{self.url}/{subject.repo}:{subject.tag} is gone", registry=self.url)
            if L.archive_layer(L.load_manifest(got[0], subject.repo), subject.repo)[0] != digest:
                raise IntegrityError(
                    f"{self.url}/{subject.repo}:{subject.tag} now names other bytes than sha256:"
                    f"{digest} (the tag was moved)",
                    source=f"{self.url}/{subject.repo}",
                )
            subject.manifest, subject.manifest_size = got[1], len(got[0])
        return subject

    def _referrers(self, subject: _Subject) -> list[dict[str, Any]]:
        """The signature descriptors referring to the subject: the referrers API, else the fallback tag."""
        where = f"{self.url}/{subject.repo}@{subject.manifest}"
        doc: Any = None
        if self._referrers_api is not False:
            try:
                response = self._get(
                    f"{subject.repo}/referrers/{subject.manifest}",
                    f"list referrers of {where} in",
                    accept=L.INDEX_TYPE,
                    ok=(200,),
                )
                if response.headers.get("Content-Type", "").startswith(L.INDEX_TYPE):
                    self._referrers_api = True
                    doc = L.load_manifest(response.content, where)
                else:
                    self._referrers_api = False
            except FileNotFoundError:
                self._referrers_api = False
        if doc is None:
            got = self.manifest(subject.repo, L.fallback_tag(subject.manifest), "a referrers index")
            doc = {} if got is None else L.load_manifest(got[0], where)
        found = doc.get("manifests") or []
        if not isinstance(found, list):
            raise DamagedRegistryError(f"{where}: referrers index without a manifests list", where=where)
        return [d for d in found[:MAX_LISTED] if isinstance(d, dict) and d.get("artifactType") == L.SIGNATURE_ARTIFACT]

    def _signature_descriptors(self, digest: str, fresh: bool = False) -> dict[str, dict[str, Any]]:
        """Key id → referrer descriptor. Listed once per registry operation (the listing, then one read
        per signer, asks once), afresh in the next; ``fresh`` lists again (before writing)."""
        operation = current_deadline()
        cached = self._listed.get(digest)
        if not fresh and operation is not None and cached is not None and cached[0] is operation:
            return cached[1]
        subject = self._subject_manifest(digest)
        out: dict[str, dict[str, Any]] = {}
        for desc in self._referrers(subject):
            key = (desc.get("annotations") or {}).get(L.A_KEY)
            if isinstance(key, str) and key not in out:
                out[key] = desc
        if operation is not None:
            self._listed[digest] = (operation, out)
        return out

    def _read_signature(self, digest: str, key_id: str) -> bytes | None:
        from ..trust.dsse import MAX_ENVELOPE_BYTES

        desc = self._signature_descriptors(digest).get(key_id)
        if desc is None:
            return None
        subject = self._subject(digest)
        reference = desc.get("digest")
        if not isinstance(reference, str) or not reference.startswith("sha256:"):
            raise DamagedRegistryError(
                f"{self.url}/{subject.repo}: bad referrer digest {reference!r}", where=subject.repo
            )
        got = self.manifest(subject.repo, reference, "a signature referrer")
        if got is None:
            return None
        where = f"{self.url}/{subject.repo}@{reference}"
        doc = L.load_manifest(got[0], where)
        key, blob, size = L.signature_key(doc, where)
        target = doc.get("subject") or {}
        if key != key_id or not isinstance(target, dict) or target.get("digest") != subject.manifest:
            raise IntegrityError(
                f"{where}: a signature referrer listed for key {key_id[:16]} of {subject.manifest} "
                f"is for key {key[:16]} of {target.get('digest') if isinstance(target, dict) else None} "
                "(swapped referrer); refusing it",
                source=where,
            )
        if size > MAX_ENVELOPE_BYTES:
            return b"\0" * (MAX_ENVELOPE_BYTES + 1)  # reported as too large by the reader, never fetched
        response = self._get(f"{subject.repo}/blobs/sha256:{blob}", f"read signature {blob[:12]} from")
        data: bytes = response.content
        if L.digest_of(data) != f"sha256:{blob}":
            raise IntegrityError(
                f"{where}: the signature blob the registry served does not hash to sha256:{blob}; refusing it",
                source=where,
            )
        return data

    def _create_signature(self, digest: str, key_id: str, envelope: bytes) -> bool:
        subject = self._subject_manifest(digest)
        if key_id in self._signature_descriptors(digest, fresh=True):
            return False
        self._listed.pop(digest, None)
        self.push_bytes(subject.repo, L.EMPTY_BLOB)
        self.push_bytes(subject.repo, envelope)
        manifest = L.signature_manifest(
            L.descriptor(L.MANIFEST_TYPE, subject.manifest, subject.manifest_size), key_id, envelope
        )
        reference = L.digest_of(manifest)
        self.put_manifest(subject.repo, reference, manifest)
        if self._referrers_api:
            return True
        entry = L.descriptor(L.MANIFEST_TYPE, reference, len(manifest), {L.A_KEY: key_id})
        entry["artifactType"] = L.SIGNATURE_ARTIFACT
        tag = L.fallback_tag(subject.manifest)
        for _ in range(5):  # read-modify-write of the fallback index, read back until ours is listed
            got = self.manifest(subject.repo, tag, "a referrers index")
            old = L.load_manifest(got[0], tag).get("manifests", []) if got else []
            listed = [d for d in old if isinstance(d, dict) and d.get("digest") != reference]
            index = L.encode({"schemaVersion": 2, "mediaType": L.INDEX_TYPE, "manifests": listed + [entry]})
            self.put_manifest(subject.repo, tag, index, L.INDEX_TYPE)
            if any(d.get("annotations", {}).get(L.A_KEY) == key_id for d in self._referrers(subject)):
                return True
        raise RegistryError(
            f"{self.url}/{subject.repo}: could not list the signature in the referrers tag {tag} "
            "(concurrent signers); sign again",
            registry=self.url,
        )

    # -- the Store interface ------------------------------------------------------------------------
    def read(self, path: str) -> bytes | None:
        if path == MARKER:  # no marker object: a namespace holding no archive is "not a registry" (mistyped?)
            try:
                return encode_marker() if self._names() else None
            except TransferError:
                raise
            except RegistryError:
                return encode_marker()  # a registry that does not list: it cannot tell, so no refusal
        if m := _RECORD.fullmatch(path):
            return self._read_record(m.group(1), m.group(2))
        if m := _SIG.fullmatch(path):
            return self._read_signature(m.group(1), m.group(2))
        if path == ROOT_INDEX or _NAME_INDEX.fullmatch(path) or _SIG_INDEX.fullmatch(path):
            return None  # derived indexes: the registry lists itself
        if meta := self._metadata(path):
            return self._read_document(*meta)
        if _BLOB.fullmatch(path):
            raise RegistryError(f"{self.url}: blobs are read by range (internal error)", registry=self.url)
        raise self._unmapped(path)

    def size(self, path: str) -> int | None:
        m = _BLOB.fullmatch(path)
        if not m:
            raise self._unmapped(path)
        subject = self._subject(m.group(1))
        try:
            response = self._call(
                lambda: self.client.request("HEAD", f"{subject.repo}/blobs/sha256:{m.group(1)}"),
                f"stat blob {m.group(1)[:12]} in",
            )
        except FileNotFoundError:
            return None
        length = response.headers.get("Content-Length", "")
        return int(length) if length.isdigit() else None

    def read_range(self, path: str, start: int, end: int) -> bytes:
        m = _BLOB.fullmatch(path)
        if not m and (meta := self._metadata(path)):
            data = self._read_document(*meta)  # small documents, read whole (bounded)
            if data is None:
                raise FileNotFoundError(path)
            return data[start:end]
        if not m:
            raise self._unmapped(path)
        subject = self._subject(m.group(1))
        if end <= start:
            return b""
        response = self.client.request(
            "GET",
            f"{subject.repo}/blobs/sha256:{m.group(1)}",
            headers={"Range": f"bytes={start}-{end - 1}"},
            ok=(206, 200),
        )
        body: bytes = response.content
        return body[start:end] if response.status_code == 200 else body

    def create(self, path: str, data: bytes) -> bool:
        if path == MARKER:
            return True
        if _RECORD.fullmatch(path):
            return self._create_record(data)
        if m := _SIG.fullmatch(path):
            return self._create_signature(m.group(1), m.group(2), data)
        if meta := self._metadata(path):
            return self._create_tag(meta[0], meta[1], self._document_manifest(meta[0], data), path)
        raise self._unmapped(path)

    def replace(self, path: str, data: bytes) -> None:
        if path == ROOT_INDEX or _NAME_INDEX.fullmatch(path) or _SIG_INDEX.fullmatch(path):
            return  # derived indexes: nothing to keep
        if meta := self._metadata(path):
            self.put_manifest(meta[0], meta[1], self._document_manifest(meta[0], data))
            return
        raise self._unmapped(path)

    def upload(self, path: str, local: str, progress: ProgressFn) -> bool:
        m = _BLOB.fullmatch(path)
        if not m:
            raise self._unmapped(path)
        digest = m.group(1)
        self._facts[digest] = _archive_facts(local)
        subject = self._subject(digest)
        if self.size(path) is not None:
            return False
        self.push_file(subject.repo, local, f"sha256:{digest}", L.ARCHIVE_LAYER)
        progress(os.path.getsize(local))
        return True

    def push_file(self, repo: str, local: str, digest: str, media_type: str) -> None:
        """Upload a local file as the blob ``digest`` of ``repo`` (the registry checks the digest)."""
        size = os.path.getsize(local)
        layer = L.descriptor(media_type, digest, size)

        def push() -> None:
            client = self.client.client
            container = client.get_container(f"{self.host}/{repo}")
            response = client.upload_blob(local, container, layer, do_chunked=size > CHUNKED_ABOVE)
            if response.status_code not in (200, 201, 202):
                raise OciHttpError(
                    response.status_code,
                    f"upload of {digest} to {repo}: HTTP {response.status_code} {response.text[:200]}",
                    retry_after(response.headers.get("Retry-After")),
                )

        self._call(push, f"upload {digest[:19]} to {repo} in")

    def list_dir(self, path: str) -> list[str]:
        if path == NAMES_DIR:
            return self._names()
        if m := _VERSIONS.fullmatch(path):
            try:
                repo = self._repo(m.group(1))
            except RegistryError:
                return []
            return sorted(f"{t}.json" for t in self._tags(repo) if L.is_version_tag(t))
        if m := _SIGS.fullmatch(path):
            return sorted(f"{k}{SIGNATURE_SUFFIX}" for k in self._signature_descriptors(m.group(1)))
        if path == SNAPSHOTS_DIR:
            repo = self._metadata(TIMESTAMP_PATH)[0]  # type: ignore[index]
            return sorted(f"{t[len('snapshot-') :]}.json" for t in self._tags(repo) if t.startswith("snapshot-"))
        raise self._unmapped(path)

    def _paged(self, path: str, key: str, what: str) -> list[str]:
        out: list[str] = []
        url: str | None = f"{path}?n=1000"
        while url and len(out) < MAX_LISTED:
            response = self._get(url, what)
            body = L.load_manifest(response.content, f"{self.url} ({what})")
            items = body.get(key) or []
            out.extend(i for i in items if isinstance(i, str))
            link = response.links.get("next", {}).get("url") if hasattr(response, "links") else None
            url = _absolute(link, self.client) if link else None
        return out

    def _tags(self, repo: str) -> list[str]:
        try:
            return self._paged(f"{repo}/tags/list", "tags", f"list tags of {repo} in")
        except FileNotFoundError:
            return []

    def _names(self) -> list[str]:
        prefix = f"{self.namespace}/" if self.namespace else ""
        try:
            repos = self._paged("_catalog", "repositories", "list repositories of")
        except FileNotFoundError:
            raise RegistryError(
                f"registry {self.url} does not list its repositories (no /v2/_catalog); name the "
                "archive (NAME@VERSION) instead of listing every name",
                registry=self.url,
            ) from None
        except TransferError:
            raise
        except RegistryError as exc:
            if not self.client.has_credentials():
                raise
            raise RegistryError(
                f"{exc}; or it does not let this account list repositories (/v2/_catalog): name "
                "the archive (NAME@VERSION) instead of listing every name",
                registry=self.url,
            ) from None
        names = {r[len(prefix) :] for r in repos if r.startswith(prefix) and "/" not in r[len(prefix) :]}
        return sorted(n for n in names if n)


def _absolute(location: str, client: OciClient) -> str:
    if location.startswith("http"):
        return location
    return f"{client.scheme}://{client.host}{location}"


def _archive_facts(local: str) -> dict[str, str]:
    """The archive's format version and producing Triton, for the manifest's annotations."""
    from ..format.reader import ArchiveReader, Limits
    from ..format.source import FileSource

    source = FileSource(local)
    try:
        reader = ArchiveReader(source, limits=Limits())
        variants = reader.manifest.get("variants") or []
        tritons = {
            str((v.get("provenance") or {}).get("triton_version") or "") for v in variants if isinstance(v, dict)
        }
        return {
            "format": str(reader.header.get("format_version", "")),
            "triton": ",".join(sorted(t for t in tritons if t)),
        }
    except Exception:  # noqa: BLE001 - the archive was fully verified before; annotations are optional
        return {}
    finally:
        source.close()
