"""The local archive cache: content-addressed, verified once, safe under many processes.

Layout under the cache root (spec/REGISTRY.md, "Local cache")::

    blobs/sha256/<digest>.karc   complete, verified archives (read-only to everyone but prune)
    receipts/<digest>.json       "verification passed" bound to the blob's (dev, inode, size, mtime_ns,
                                 ctime_ns), with the index digest and, per trust policy, who signed it
    refs/<registry-key>/<name>/<version>.json   copies of immutable version records (offline resolve)
    ratchet/<registry-key>/<name>.json   the newest versions loaded and verified under a trust policy
    locks/<digest>.lock          flock held while one process downloads or verifies a digest
    locks/<digest>.use           flock held *shared* by every reader of the blob; prune needs it exclusively
    tmp/<digest>.<pid>.<rand>.part   downloads in progress; never read as archives

A blob reaches ``blobs/`` only by ``rename`` after its sha256 and full structure were checked, so a
killed writer leaves at most a ``.part`` file, which nothing reads and ``prune`` removes.

A receipt is bound to the blob's inode *change* time as well as its modification time: a writer can
put back mtime with ``utime(2)`` after changing bytes in place, but the kernel sets ctime to the
current time on every change (including that ``utime`` and the ``chmod`` a read-only blob needs), and
no system call sets it back. A blob whose stat differs from its receipt in any field is verified
again before it is used, and removed if that fails.

Readers and prune (spec/REGISTRY.md §5, "Pruning beside readers"): a reader takes the digest's *use*
lock shared (:meth:`Cache.hold`) **before** it looks the blob up, and keeps it until its reader is
closed; prune removes a blob only while holding that lock exclusively, taken without waiting, so it
skips anything in use and a reader never finds its blob (or receipt) gone between lookup and open.
A reader that arrives while prune holds the lock waits the moment prune needs, then finds no blob and
fetches it again: a pruned entry is a cache miss, never "changed after it was verified".
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import BinaryIO

from .. import __version__
from ..core.fsio import atomic_write, fsync_dir, read_bounded
from ..core.jsonio import canonical_json
from ..core.units import utc_text
from ..errors import CacheError, FormatError, RegistryError
from ..format.check import check_archive_file
from ..format.source import FileSource
from .config import cache_dir, canonical_registry, redact_url
from .filelock import FileLock
from .records import VersionRecord
from .refs import check_name, check_version
from .store_layout import check_digest

Downloader = Callable[[BinaryIO], None]


@dataclass
class CacheEntry:
    sha256: str
    size: int
    last_used: float
    verified: bool
    refs: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {**asdict(self), "last_used": utc_text(self.last_used)}


@dataclass
class PruneReport:
    removed: list[CacheEntry] = field(default_factory=list)
    kept: int = 0
    kept_bytes: int = 0
    partial_files_removed: int = 0
    busy: int = 0

    @property
    def freed(self) -> int:
        return sum(e.size for e in self.removed)


def registry_key(url: str) -> str:
    """Records (and the rollback ratchet) are kept per registry: the same NAME@VERSION may differ
    between registries. Keyed by the registry's canonical identity, never by how its location was
    spelt (a symlink, a ``..`` path, a trailing slash): see :func:`~.config.canonical_registry`."""
    return hashlib.sha256(canonical_registry(url).encode()).hexdigest()[:20]


class HeldFileSource(FileSource):
    """A cached blob opened for reading, holding the cache's use lock until closed (or collected), so
    that ``cache prune`` leaves the file alone while the reader lives."""

    def __init__(self, path: str | os.PathLike, hold: FileLock | None) -> None:
        self._hold = hold
        try:
            super().__init__(path)
        except BaseException:
            self._release_hold()
            raise

    def _release_hold(self) -> None:
        hold, self._hold = self._hold, None
        if hold is not None:
            hold.release()

    def close(self) -> None:
        super().close()
        self._release_hold()


#: Receipts, cached records and marks are a few KiB; a larger file there is not one karchive wrote.
_MAX_SMALL = 4 << 20


def read_small(path: Path) -> bytes:
    """A receipt, record or mark of the cache (under ``KARCHIVE_CACHE_DIR``): a regular file of at most
    :data:`_MAX_SMALL` bytes, read without waiting on a FIFO or reading a device (else ``OSError``)."""
    return read_bounded(path, _MAX_SMALL)


def _write_small(path: Path, data: bytes) -> None:
    """Receipts and cached records: atomic, but not fsynced (they are regenerable from the blobs)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, data, durable=False)


class Cache:
    def __init__(self, root: str | os.PathLike | None = None) -> None:
        self.root = cache_dir(root)
        #: How many full verifications (hash + structure) this object ran; tests and benchmarks read it.
        self.verifications = 0

    # -- paths ------------------------------------------------------------------------------------
    def blob_path(self, digest: str) -> Path:
        return self.root / "blobs" / "sha256" / f"{check_digest(digest)}.karc"

    def _receipt_path(self, digest: str) -> Path:
        return self.root / "receipts" / f"{digest}.json"

    def _lock(self, digest: str) -> FileLock:
        return FileLock(self.root / "locks" / f"{digest}.lock")

    def _use_lock(self, digest: str, *, shared: bool) -> FileLock:
        return FileLock(self.root / "locks" / f"{check_digest(digest)}.use", shared=shared)

    def hold(self, digest: str) -> FileLock | None:
        """Keep ``digest``'s blob from being pruned while the caller uses it: the use lock, shared, or
        None where it cannot be taken (a read-only cache: nothing can prune it from here either).
        Take it before :meth:`lookup` and release it when the reader is closed (module docstring)."""
        lock = self._use_lock(digest, shared=True)
        try:
            lock.acquire()
        except OSError:
            return None
        return lock

    # -- receipts ---------------------------------------------------------------------------------
    @staticmethod
    def _identity(st: os.stat_result) -> dict:
        # ctime_ns: no system call sets it, so bytes changed in place and mtime put back still show (module doc).
        return {
            "dev": st.st_dev,
            "ino": st.st_ino,
            "size": st.st_size,
            "mtime_ns": st.st_mtime_ns,
            "ctime_ns": st.st_ctime_ns,
        }

    def _read_receipt(self, digest: str) -> dict | None:
        try:
            receipt = json.loads(read_small(self._receipt_path(digest)))
        except (OSError, ValueError):
            return None
        return receipt if isinstance(receipt, dict) else None

    def _receipt_matches(self, digest: str, st: os.stat_result) -> bool:
        receipt = self._read_receipt(digest)
        return (
            receipt is not None
            and receipt.get("sha256") == digest
            and receipt.get("file") == self._identity(st)
            and isinstance(receipt.get("index_sha256"), str)
        )

    def _write_receipt(self, digest: str, blob: Path, index_sha256: str) -> None:
        receipt = {
            "sha256": digest,
            "index_sha256": index_sha256,
            "file": self._identity(blob.stat()),
            "verified": utc_text(time.time()),
            "karchive": __version__,
            "trust": {},
        }
        _write_small(self._receipt_path(digest), canonical_json(receipt))

    def receipt(self, digest: str) -> dict | None:
        """The receipt of the cached blob ``digest`` if it still matches the file (else None: not verified)."""
        try:
            st = self.blob_path(digest).stat()
        except (FileNotFoundError, NotADirectoryError):
            return None
        receipt = self._read_receipt(digest)
        if receipt is None or not self._receipt_matches(digest, st):
            return None
        return receipt

    # -- trust verdicts in receipts (spec/REGISTRY.md §5) -------------------------------------------
    def trusted(self, digest: str, policy_sha256: str, now: float | None = None) -> dict | None:
        """What the trust policy with this sha256 accepted about the cached blob, if the receipt still
        matches the file and the verdict has not run out (a signer's key window closing); else None,
        and the caller verifies the signatures again. A different policy never matches: a stricter one
        re-verifies."""
        receipt = self.receipt(digest)
        entry = (receipt.get("trust") or {}).get(policy_sha256) if receipt else None
        if not isinstance(entry, dict):
            return None
        until = entry.get("valid_until_ns")
        if until is not None and (type(until) is not int or (time.time() if now is None else now) * 1e9 > until):
            return None
        return entry

    def record_trust(self, digest: str, policy_sha256: str, entry: dict) -> None:
        """Add a policy's verdict to the receipt, if the receipt still matches the blob (best effort: a
        lost verdict only costs one more verification)."""
        receipt = self.receipt(digest)
        if receipt is None:
            return
        verdicts = receipt.get("trust")
        receipt["trust"] = {
            **(verdicts if isinstance(verdicts, dict) else {}),
            policy_sha256: {**entry, "verified": utc_text(time.time())},
        }
        try:
            _write_small(self._receipt_path(digest), canonical_json(receipt))
        except OSError:
            pass  # a read-only cache still works; every load verifies the signatures again

    def _touch(self, digest: str) -> None:
        try:
            os.utime(self._receipt_path(digest))  # receipt mtime = last use, for prune --max-age / LRU
        except OSError:
            pass

    def _verified_blob(self, digest: str) -> Path | None:
        blob = self.blob_path(digest)
        try:
            st = blob.stat()
        except (FileNotFoundError, NotADirectoryError):
            return None
        return blob if self._receipt_matches(digest, st) else None

    # -- lookups and installs ---------------------------------------------------------------------
    def lookup(
        self, digest: str, size: int | None = None, *, name: str | None = None, version: str | None = None
    ) -> Path | None:
        """The verified blob for ``digest``, or None. A matching receipt means no hashing at all."""
        blob = self._verified_blob(digest)
        if blob is not None:
            self._touch(digest)
            return blob
        if not self.blob_path(digest).exists():
            return None
        try:
            with self._lock(digest):  # a blob without a valid receipt: (re)verify it once
                return self._verify_in_place(digest, size, name, version)
        except OSError as exc:
            raise CacheError(f"local cache {self.root}: {exc}", path=str(self.root)) from None

    def _verify_in_place(self, digest: str, size: int | None, name: str | None, version: str | None) -> Path | None:
        blob = self._verified_blob(digest)
        if blob is not None:
            return blob
        blob = self.blob_path(digest)
        if not blob.exists():
            return None
        self.verifications += 1
        try:
            facts = check_archive_file(blob, sha256=digest, size=size, name=name, version=version)
        except (FormatError, RegistryError, OSError):
            self._evict(digest)  # changed or damaged since it was verified: never serve it
            return None
        self._write_receipt(digest, blob, facts.index_sha256)
        return blob

    def install(
        self, digest: str, size: int, download: Downloader, *, name: str | None = None, version: str | None = None
    ) -> tuple[Path, bool]:
        """Return ``(path, downloaded)``; download, verify and rename into place unless cached.

        One process per digest downloads (flock); the others wait, then find its verified blob.
        """
        try:
            return self._install(digest, size, download, name, version)
        except OSError as exc:  # disk full, read-only or foreign-owned cache directory
            raise CacheError(f"local cache {self.root}: {exc}", path=str(self.root)) from None

    def _install(
        self, digest: str, size: int, download: Downloader, name: str | None, version: str | None
    ) -> tuple[Path, bool]:
        hit = self.lookup(digest, size, name=name, version=version)
        if hit is not None:
            return hit, False
        with self._lock(digest):
            hit = self._verify_in_place(digest, size, name, version)
            if hit is not None:
                self._touch(digest)
                return hit, False
            self._remove_partials(digest)  # we hold the lock: any .part for this digest is from a dead writer
            tmp_dir = self.root / "tmp"
            tmp_dir.mkdir(parents=True, exist_ok=True)
            tmp = tmp_dir / f"{digest}.{os.getpid()}.{secrets.token_hex(4)}.part"
            try:
                with open(tmp, "xb") as fh:
                    download(fh)
                    fh.flush()
                    os.fsync(fh.fileno())
                self.verifications += 1
                facts = check_archive_file(tmp, sha256=digest, size=size, name=name, version=version)
                blob = self.blob_path(digest)
                blob.parent.mkdir(parents=True, exist_ok=True)
                os.chmod(tmp, 0o444)
                os.replace(tmp, blob)
                fsync_dir(blob.parent)
            finally:
                tmp.unlink(missing_ok=True)
            self._write_receipt(digest, blob, facts.index_sha256)
            return blob, True

    def _remove_partials(self, digest: str) -> int:
        removed = 0
        for part in (self.root / "tmp").glob(f"{digest}.*.part"):
            part.unlink(missing_ok=True)
            removed += 1
        return removed

    def _evict(self, digest: str) -> None:
        self.blob_path(digest).unlink(missing_ok=True)
        self._receipt_path(digest).unlink(missing_ok=True)

    # -- cached version records -------------------------------------------------------------------
    def _ref_path(self, registry_url: str, name: str, version: str) -> Path:
        return self.root / "refs" / registry_key(registry_url) / check_name(name) / f"{check_version(version)}.json"

    def remember(self, registry_url: str, record: VersionRecord) -> None:
        """Versions are immutable, so a record once seen answers NAME@VERSION offline forever."""
        path = self._ref_path(registry_url, record.name, record.version)
        if path.exists():
            return
        try:
            _write_small(path, record.to_json())
            marker = path.parent.parent / "registry.json"
            if not marker.exists():
                _write_small(marker, canonical_json({"url": redact_url(registry_url)}))
        except OSError:
            pass  # a read-only cache still works, only without offline resolution

    def recall(self, registry_url: str, name: str, version: str) -> VersionRecord | None:
        path = self._ref_path(registry_url, name, version)
        try:
            data = read_small(path)
        except OSError:
            return None
        try:
            record = VersionRecord.from_json(data, str(path))
        except RegistryError:
            path.unlink(missing_ok=True)
            return None
        return record if (record.name, record.version) == (name, version) else None

    # -- the rollback ratchet (spec/SIGNING.md §9.4) ----------------------------------------------
    def _ratchet_path(self, registry_url: str, name: str) -> Path:
        return self.root / "ratchet" / registry_key(registry_url) / f"{check_name(name)}.json"

    def newest_verified(self, registry_url: str, name: str) -> dict[str, str | None]:
        """``{"final": V, "any": V}``: the newest final release and the newest version of ``name`` from
        this registry that were loaded and verified under a trust policy (None where there is none)."""
        try:
            mark = json.loads(read_small(self._ratchet_path(registry_url, name)))
        except (OSError, ValueError):
            return {"final": None, "any": None}
        if not isinstance(mark, dict):
            return {"final": None, "any": None}
        return {k: mark[k] if isinstance(mark.get(k), str) else None for k in ("final", "any")}

    def raise_mark(self, registry_url: str, name: str, version: str) -> None:
        """Record that ``version`` was loaded and verified under a trust policy: the mark only rises.
        Read-modify-write under a lock, so concurrent loads of different versions cannot lower it."""
        from .versions import is_prerelease, version_key

        path = self._ratchet_path(registry_url, name)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with FileLock(self.root / "locks" / f"ratchet.{registry_key(registry_url)}.{name}.lock"):
                mark = self.newest_verified(registry_url, name)
                new = dict(mark)
                for k in ("any",) if is_prerelease(version) else ("final", "any"):
                    current = new[k]
                    if current is None or version_key(version) > version_key(current):
                        new[k] = version
                if new != mark:
                    _write_small(path, canonical_json({**new, "name": name, "registry": redact_url(registry_url)}))
        except OSError:
            pass  # a read-only cache cannot remember; it also has nothing to compare against

    def _refs_by_digest(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for path in (self.root / "refs").glob("*/*/*.json"):
            try:
                record = VersionRecord.from_json(read_small(path), str(path))
            except (OSError, RegistryError):
                continue
            out.setdefault(record.sha256, []).append(record.ref)
        return {k: sorted(set(v)) for k, v in out.items()}

    # -- listing and pruning ----------------------------------------------------------------------
    def entries(self) -> list[CacheEntry]:
        refs = self._refs_by_digest()
        out = []
        for blob in sorted((self.root / "blobs" / "sha256").glob("*.karc")):
            digest = blob.name[: -len(".karc")]
            try:
                check_digest(digest)
                st = blob.stat()
            except (RegistryError, OSError):
                continue
            try:
                last_used = self._receipt_path(digest).stat().st_mtime
            except OSError:
                last_used = st.st_mtime
            out.append(
                CacheEntry(digest, st.st_size, last_used, self._receipt_matches(digest, st), refs.get(digest, []))
            )
        return out

    def partial_files(self) -> list[Path]:
        return sorted((self.root / "tmp").glob("*.part"))

    def prune(self, max_size: int | None = None, max_age: float | None = None, now: float | None = None) -> PruneReport:
        """Drop blobs unused for longer than ``max_age`` seconds, then least recently used ones until
        the cache holds at most ``max_size`` bytes. Always removes leftovers of dead downloads."""
        now = time.time() if now is None else now
        report = PruneReport()
        for part in self.partial_files():
            digest = part.name.split(".", 1)[0]
            lock = self._lock(digest)
            if lock.acquire(blocking=False):  # nobody is downloading it
                try:
                    part.unlink(missing_ok=True)
                    report.partial_files_removed += 1
                finally:
                    lock.release()
        for receipt in (self.root / "receipts").glob("*.json"):
            try:
                orphan = not self.blob_path(receipt.stem).exists()
            except RegistryError:
                orphan = True
            if orphan:
                receipt.unlink(missing_ok=True)
        entries = sorted(self.entries(), key=lambda e: e.last_used)
        total = sum(e.size for e in entries)
        for entry in entries:
            too_old = max_age is not None and now - entry.last_used > max_age
            too_big = max_size is not None and total > max_size
            if not (too_old or too_big):
                report.kept += 1
                report.kept_bytes += entry.size
                continue
            # Neither being downloaded or verified (the digest lock) nor read (the use lock, which every
            # reader holds shared from before its lookup until it closes): both taken without waiting.
            lock, use = self._lock(entry.sha256), self._use_lock(entry.sha256, shared=False)
            if not lock.acquire(blocking=False):
                busy = True
            else:
                busy = not use.acquire(blocking=False)
                if busy:
                    lock.release()
            if busy:
                report.busy += 1
                report.kept += 1
                report.kept_bytes += entry.size
                continue
            try:
                self._evict(entry.sha256)
            finally:
                use.release()
                lock.release()
            total -= entry.size
            report.removed.append(entry)
        return report
