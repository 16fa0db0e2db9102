"""``karchive.lock``: names pinned to exact archive digests.

With a lockfile, loading NAME gives exactly the pinned bytes or an error: a registry that now serves
other bytes for that version (re-pushed, tampered, another registry) is refused, and the error
shows both digests. A pin may also name the signers (key ids) whose signatures counted when it was
written; a locked load then needs all of them to count again under the trust policy
(spec/SIGNING.md §9.2). The file is JSON, sorted and indented, so it diffs well in review.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.digest import is_sha256_hex
from ..core.fsio import atomic_write, read_bounded
from ..core.jsonio import parse_json
from ..errors import (
    DestinationError,
    LockfileError,
    LockfileMismatchError,
    LockfilePinError,
    RegistryError,
    RegistryValueError,
)
from .config import redact_url
from .records import VersionRecord
from .refs import check_name, check_version
from .store_layout import check_digest

LOCKFILE_VERSION = 1
DEFAULT_NAME = "karchive.lock"
#: A lockfile larger than this is refused before it is parsed (a pin is ~300 bytes: 50,000 pins fit).
MAX_LOCKFILE_BYTES = 16 << 20


@dataclass(frozen=True)
class Pin:
    name: str
    version: str
    sha256: str
    size: int
    index_sha256: str
    signers: tuple[str, ...] = ()  # key ids (sorted) that must sign validly; () pins no signer
    manifest: str = ""  # an OCI registry's manifest digest (sha256:<hex>); "" elsewhere

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "version": self.version,
            "sha256": self.sha256,
            "size": self.size,
            "index_sha256": self.index_sha256,
        }
        if self.signers:  # absent rather than empty: lockfiles without signing read exactly as before
            out["signers"] = list(self.signers)
        if self.manifest:  # an OCI registry's manifest (spec/REGISTRY.md §10): absent elsewhere
            out["manifest"] = self.manifest
        return out

    @classmethod
    def from_record(cls, record: VersionRecord, signers: Iterable[str] = ()) -> Pin:
        return cls(
            record.name,
            record.version,
            record.sha256,
            record.size,
            record.index_sha256,
            tuple(sorted(set(signers))),
            record.manifest,
        )


@dataclass
class Lockfile:
    pins: dict[str, Pin]
    registry: str | None = None
    path: str | None = None

    @classmethod
    def from_records(
        cls,
        records: Iterable[VersionRecord],
        registry: str | None = None,
        signers: Mapping[str, Iterable[str]] | None = None,
    ) -> Lockfile:
        """Pins for ``records``; ``signers`` maps a name to the key ids to pin with it."""
        pins: dict[str, Pin] = {}
        for record in records:
            existing = pins.get(record.name)
            if existing is not None and existing.version != record.version:
                raise LockfilePinError(
                    f"{record.name} is asked for twice, at {existing.version} and {record.version}; "
                    "a lockfile pins one version per name",
                    lockfile="the lockfile being made",
                    name=record.name,
                )
            pins[record.name] = Pin.from_record(record, (signers or {}).get(record.name, ()))
        return cls(pins, redact_url(registry) if registry else None)

    # -- (de)serialisation ------------------------------------------------------------------------
    def to_json(self) -> bytes:
        doc: dict[str, Any] = {
            "lockfile_version": LOCKFILE_VERSION,
            "archives": {n: p.to_json() for n, p in sorted(self.pins.items())},
        }
        if self.registry:
            doc["registry"] = self.registry
        return (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()

    def write(self, path: str | os.PathLike) -> None:
        target = Path(path)
        try:
            atomic_write(target, self.to_json())
        except DestinationError as exc:  # already "cannot write <target>: <why>"
            raise LockfileError(str(exc), lockfile=str(target)) from None
        except OSError as exc:
            raise LockfileError(f"cannot write {target}: {exc}", lockfile=str(target)) from None
        self.path = str(target)

    @classmethod
    def load(cls, path: str | os.PathLike) -> Lockfile:
        where = os.fspath(path)
        try:  # a path from configuration: a FIFO must not hang the load, nor /dev/zero fill memory (issue 34)
            raw = read_bounded(where, MAX_LOCKFILE_BYTES)
        except OSError as exc:
            raise LockfileError(f"cannot read lockfile {where}: {exc.strerror or exc}", lockfile=where) from None
        doc = parse_json(raw, f"lockfile {where}", error=LockfileError)
        if not isinstance(doc, dict) or not isinstance(doc.get("archives"), dict):
            raise LockfileError(f"lockfile {where}: expected an object with an 'archives' object", lockfile=where)
        version = doc.get("lockfile_version")
        if type(version) is not int or version < 1:
            raise LockfileError(f"lockfile {where}: missing or bad lockfile_version", lockfile=where)
        if version > LOCKFILE_VERSION:
            raise LockfileError(
                f"lockfile {where}: version {version} is newer than this karchive reads ({LOCKFILE_VERSION})",
                lockfile=where,
            )
        pins = {}
        for name, entry in doc["archives"].items():
            try:
                check_name(name)
                if not isinstance(entry, dict):
                    raise RegistryValueError("entry is not an object", value=repr(entry)[:200])
                size = entry.get("size")
                if type(size) is not int or size < 0:
                    raise RegistryValueError(f"bad size {size!r}", value=repr(size)[:200])
                signers = entry.get("signers", [])
                if not isinstance(signers, list):
                    raise RegistryValueError("signers must be a list of key ids", value=repr(signers)[:200])
                pins[name] = Pin(
                    name,
                    check_version(entry.get("version")),
                    check_digest(entry.get("sha256")),
                    size,
                    check_digest(entry.get("index_sha256")),
                    tuple(sorted({_check_key_id(k) for k in signers})),
                    _check_manifest(entry.get("manifest", "")),
                )
            except RegistryError as exc:
                raise LockfilePinError(
                    f"lockfile {where}: archive {name!r}: {exc}", lockfile=where, name=str(name)
                ) from None
        registry = doc.get("registry")
        return cls(pins, registry if isinstance(registry, str) else None, where)

    # -- checks -----------------------------------------------------------------------------------
    def _label(self) -> str:
        return self.path or DEFAULT_NAME

    def pin_for(self, name: str, version: str | None = None) -> Pin:
        pin = self.pins.get(name)
        if pin is None:
            pinned = ", ".join(sorted(self.pins)) or "none"
            raise LockfilePinError(
                f"{name} is not pinned in {self._label()} (it pins: {pinned}); add it with `karchive lock`",
                lockfile=self._label(),
                name=name,
            )
        if version is not None and version != pin.version:
            raise LockfilePinError(
                f"{name}@{version} was asked for, but {self._label()} pins {name}@{pin.version} (sha256 {pin.sha256})",
                lockfile=self._label(),
                name=name,
            )
        return pin

    def check(self, record: VersionRecord) -> Pin:
        """Refuse a record whose bytes differ from the pin; the message shows both digests."""
        pin = self.pin_for(record.name, record.version)
        if record.sha256 != pin.sha256 or record.size != pin.size:
            raise LockfileMismatchError(
                f"{record.ref}: the registry serves sha256 {record.sha256} ({record.size} bytes) but "
                f"{self._label()} pins sha256 {pin.sha256} ({pin.size} bytes); refusing to load it",
                lockfile=self._label(),
                name=record.name,
                pinned_digest=pin.sha256,
                actual_digest=record.sha256,
            )
        if pin.manifest and record.manifest and record.manifest != pin.manifest:
            raise LockfileMismatchError(
                f"{record.ref}: the registry's tag now names manifest {record.manifest}, but "
                f"{self._label()} pins manifest {pin.manifest} (the tag was moved); refusing "
                "to load it",
                lockfile=self._label(),
                name=record.name,
                pinned_digest=pin.manifest,
                actual_digest=record.manifest,
            )
        if record.index_sha256 != pin.index_sha256:
            raise LockfileMismatchError(
                f"{record.ref}: index digest {record.index_sha256} differs from the pinned "
                f"{pin.index_sha256} in {self._label()}; refusing to load it",
                lockfile=self._label(),
                name=record.name,
                pinned_digest=pin.index_sha256,
                actual_digest=record.index_sha256,
            )
        return pin


def _check_manifest(value: object) -> str:
    if value == "":
        return ""
    if not isinstance(value, str) or not value.startswith("sha256:"):
        raise RegistryValueError(
            f"bad manifest digest {value!r}: expected sha256:<64 hex digits>", value=repr(value)[:200]
        )
    check_digest(value[7:])
    return value


def _check_key_id(value: object) -> str:
    if not is_sha256_hex(value):
        raise RegistryValueError(
            f"bad signer key id {value!r}: expected 64 lowercase hex digits", value=repr(value)[:200]
        )
    return value


def load_lockfile(value: Lockfile | str | os.PathLike | None) -> Lockfile | None:
    if value is None or isinstance(value, Lockfile):
        return value
    return Lockfile.load(value)
