"""Where signatures live: ``ARCHIVE.sig.json`` beside the archive, one DSSE envelope (spec/SIGNING.md §3).

Never inside the archive: signing must not change a byte of it (builds stay reproducible, digests
and lockfiles stay valid), and more signatures can be added later without a new archive.
"""

from __future__ import annotations

import os
import tempfile
from typing import TYPE_CHECKING, Any

from ..core.fsio import read_regular
from ..errors import EnvelopeError

if TYPE_CHECKING:  # envelopes need cryptography; naming a sidecar does not
    from .dsse import Envelope

SUFFIX = ".sig.json"


def sidecar_path(archive: str | os.PathLike) -> str:
    """``examples.karc`` -> ``examples.karc.sig.json`` (the whole file name is kept, extension included)."""
    return os.fspath(archive) + SUFFIX


def read_sidecar(path: str | os.PathLike) -> Envelope | None:
    """The envelope in ``path``, or None when there is no such file (an unsigned archive)."""
    from .dsse import MAX_ENVELOPE_BYTES, Envelope

    where = os.fspath(path)
    try:  # a regular file only: a FIFO named ARCHIVE.sig.json must not hang the load (issue 20)
        data = read_regular(path, MAX_ENVELOPE_BYTES)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise EnvelopeError(f"cannot read signature file {where}: {exc.strerror or exc}", path=where) from exc
    return Envelope.parse(data, where)


def sidecar_url(url: str) -> str:
    """The sidecar beside a URL: ``https://h/x.karc?t=1`` -> ``https://h/x.karc.sig.json?t=1`` (a query
    such as an access token is kept; a presigned URL signs one object's path and cannot reach another)."""
    base, sep, query = url.partition("?")
    return base + SUFFIX + sep + query


def read_sidecar_url(url: str, storage_options: dict[str, Any] | None = None) -> Envelope | None:
    """The envelope beside the archive at ``url`` (any fsspec URL), or None if there is none. At most
    :data:`~karchive.trust.dsse.MAX_ENVELOPE_BYTES` + 1 bytes are fetched (one ranged request)."""
    import fsspec

    from .dsse import MAX_ENVELOPE_BYTES, Envelope

    where = sidecar_url(url)
    try:
        fs, path = fsspec.core.url_to_fs(where, **(storage_options or {}))
        data = fs.cat_file(path, start=0, end=MAX_ENVELOPE_BYTES + 1)
    except FileNotFoundError:
        return None
    except Exception as exc:
        raise EnvelopeError(f"cannot read signature file {where}: {exc}", path=where) from exc
    return Envelope.parse(bytes(data), where)


def write_sidecar(path: str | os.PathLike, envelope: Envelope) -> None:
    """Atomically: a same-directory temporary file, fsync, rename. A reader sees the old or the new
    envelope, never half of one, and a crash leaves the old one."""
    where = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(where))
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(where) + ".", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(envelope.to_bytes())
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, where)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def split_sidecar(
    path: str | os.PathLike, *, name: str, version: str, sha256: str, index_sha256: str
) -> list[tuple[str, bytes]]:
    """The sidecar's signatures as one-signature envelopes ``(key id, bytes)``, as a registry stores
    them (one object per signer, REGISTRY.md §3). Refused, before anything is stored, if the sidecar
    is not about this archive (a stale sidecar from an earlier build: re-sign it) or a signature has
    no key id karchive can name an object by. The signatures themselves are verified by readers."""
    from ..core.digest import is_sha256_hex
    from ..errors import TrustError
    from . import reasons
    from .dsse import Envelope
    from .provenance import parse_statement, subject_name

    where = os.fspath(path)
    envelope = read_sidecar(where)
    if envelope is None or not envelope.signatures:
        return []
    try:  # not verified here (readers do that): only to catch a stale or outdated sidecar early
        statement = parse_statement(envelope.payload)
    except TrustError as exc:
        raise TrustError(
            f"{where}: {exc}; sign the archive again (karchive sign --replace), or leave the "
            "sidecar out (--no-sidecar)",
            reason=exc.reason,
            archive=subject_name(name, version),
        ) from None
    if (statement.name, statement.version, statement.sha256, statement.index_sha256) != (
        name,
        version,
        sha256,
        index_sha256,
    ):
        raise TrustError(
            f"{where} signs {subject_name(statement.name, statement.version)} sha256 {statement.sha256}, "
            f"not this archive ({subject_name(name, version)} sha256 {sha256}): a stale signature file; "
            "sign the archive again (karchive sign --replace), or leave it out (--no-sidecar)",
            reason=reasons.DIGEST_MISMATCH,
            archive=subject_name(name, version),
        )
    out = []
    for sig in envelope.signatures:
        if not is_sha256_hex(sig.keyid):
            raise TrustError(
                f"{where}: a signature's keyid {sig.keyid[:80]!r} is not a karchive key id (64 hex "
                "digits); the registry stores each signature under its signer's key id",
                reason=reasons.MALFORMED_ENVELOPE,
                archive=subject_name(name, version),
            )
        out.append((sig.keyid, Envelope(envelope.payload_type, envelope.payload, (sig,)).to_bytes()))
    return out
