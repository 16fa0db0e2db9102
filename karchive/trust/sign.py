"""Sign an archive file: provenance statement from its manifest (+ build info), a DSSE signature,
the sidecar written beside it. The archive is only read, never written (spec/SIGNING.md §3).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from ..errors import TrustError
from . import reasons
from .dsse import INTOTO_PAYLOAD_TYPE, Envelope
from .keys import SigningKey
from .provenance import build_statement, parse_statement, statement_bytes, subject_name
from .sidecar import read_sidecar, sidecar_path, write_sidecar

if TYPE_CHECKING:
    from ..format.manifest import Manifest


@dataclass(frozen=True)
class SignOutcome:
    archive: str
    sidecar: str
    name: str
    version: str
    sha256: str
    key_id: str
    cosigned: bool  # True: added a signature to the statement already in the sidecar
    key_ids: tuple[str, ...]  # every keyid in the sidecar now (hints; verification decides)
    statement: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "signatures": len(self.key_ids), "key_ids": list(self.key_ids)}


def _verified_manifest(path: str) -> tuple[str, str, Manifest]:
    """sha256, index digest and manifest of an archive that verifies completely: nobody should sign
    damaged bytes."""
    from ..format.check import check_archive_file
    from ..format.reader import ArchiveReader
    from ..format.source import FileSource

    facts = check_archive_file(path)  # hashes the file, verifies every frame and digest, parses the manifest
    source = FileSource(path)
    try:  # footer -> index -> manifest digests chain this to the bytes hashed (re-checked before writing)
        manifest = ArchiveReader(source).model  # the header: format 2 reads no shard for the statement
    finally:
        source.close()
    return facts.sha256, facts.index_sha256, manifest


@dataclass(frozen=True)
class SignedStatement:
    """A fresh one-signature envelope over the statement for an archive file (see :func:`sign_statement`)."""

    name: str
    version: str
    sha256: str
    index_sha256: str
    envelope: Envelope


def sign_statement(
    archive: str | os.PathLike, key: SigningKey, *, build_info: dict[str, Any] | None = None
) -> SignedStatement:
    """Verify ``archive`` completely, make its statement and sign it: the envelope a registry stores
    as one signer's object (REGISTRY.md §3). Refuses if the file changed while it was being signed."""
    from ..core.digest import sha256_file

    path = os.fspath(archive)
    sha256, index_sha256, manifest = _verified_manifest(path)
    payload = statement_bytes(build_statement(manifest, sha256, build_info, index_sha256=index_sha256))
    envelope = Envelope.create(INTOTO_PAYLOAD_TYPE, payload, key)
    if sha256_file(path)[0] != sha256:
        raise TrustError(
            f"{path} changed while it was being signed",
            reason=reasons.DIGEST_MISMATCH,
            archive=subject_name(manifest.name, manifest.version),
        )
    return SignedStatement(manifest.name, manifest.version, sha256, index_sha256, envelope)


def sign_archive(
    archive: str | os.PathLike,
    key: SigningKey,
    *,
    build_info: dict[str, Any] | None = None,
    replace: bool = False,
    sidecar: str | os.PathLike | None = None,
) -> SignOutcome:
    """Add ``key``'s signature to the archive's sidecar.

    With no sidecar (or ``replace``), a new statement is made and signed. With one, the new
    signature co-signs the statement already there — after checking that statement is about exactly
    these bytes — so that several signers count towards one threshold; a different statement
    (``build_info`` that changes it) needs ``replace``, which drops the earlier signatures.
    """
    from ..core.digest import sha256_file

    path = os.fspath(archive)
    side = os.fspath(sidecar) if sidecar is not None else sidecar_path(path)
    sha256, index_sha256, manifest = _verified_manifest(path)
    name, version = manifest.name, manifest.version
    statement = build_statement(manifest, sha256, build_info, index_sha256=index_sha256)
    payload = statement_bytes(statement)
    existing = None if replace else read_sidecar(side)
    cosigned = False
    if existing is not None and existing.signatures:
        who = subject_name(name, version)
        if existing.payload_type != INTOTO_PAYLOAD_TYPE:
            raise TrustError(
                f"{side} holds a {existing.payload_type!r} payload, not a provenance statement; "
                "use --replace to start a new one",
                reason=reasons.WRONG_PAYLOAD_TYPE,
                archive=who,
            )
        try:
            old = parse_statement(existing.payload)
        except TrustError as exc:  # e.g. a statement without the index digest (made before it was required)
            raise TrustError(
                f"{side}: {exc}; use --replace to start a new statement", reason=exc.reason, archive=who
            ) from None
        if (old.name, old.version, old.sha256, old.index_sha256) != (name, version, sha256, index_sha256):
            raise TrustError(
                f"{side} signs {subject_name(old.name, old.version)} sha256 {old.sha256}, not these bytes "
                f"({who} sha256 {sha256}): the archive was rebuilt; use --replace to sign it anew",
                reason=reasons.DIGEST_MISMATCH,
                archive=who,
            )
        if build_info is not None and existing.payload != payload:
            raise TrustError(
                f"{side} already holds a different provenance statement for {who}; co-signers sign "
                "that statement (leave out --provenance), or use --replace to drop its signatures",
                reason=reasons.STATEMENT_CONFLICT,
                archive=who,
            )
        envelope = existing.add_signature(key)
        statement = old.raw
        cosigned = True
    else:
        envelope = Envelope.create(INTOTO_PAYLOAD_TYPE, payload, key)
    if sha256_file(path)[0] != sha256:  # what was signed must be what is there now
        raise TrustError(
            f"{path} changed while it was being signed",
            reason=reasons.DIGEST_MISMATCH,
            archive=subject_name(name, version),
        )
    write_sidecar(side, envelope)
    return SignOutcome(
        archive=path,
        sidecar=side,
        name=name,
        version=version,
        sha256=sha256,
        key_id=key.key_id,
        cosigned=cosigned,
        key_ids=tuple(s.keyid for s in envelope.signatures),
        statement=statement,
    )
