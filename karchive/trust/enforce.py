"""The path and URL routes of a load: the policy to apply (:func:`resolve_policy`), and opening an
archive so that what the reader returns is what the signature covers (spec/SIGNING.md §6.1), then
asking :func:`karchive.trust.decide.decide` about it.

The registry route (signatures stored beside its blobs) calls the same ``decide``;
:func:`karchive.resolve.open` picks the route. Every check runs before a reader is handed out, so a
refused archive never reaches the runtime.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Union

from ..core import settings
from ..errors import SettingsError, TrustError, TrustPolicyError
from . import reasons

if TYPE_CHECKING:  # pragma: no cover - a policy needs cryptography; naming the type does not
    from ..format.reader import ArchiveReader, Limits
    from .decide import Verdict
    from .policy import TrustPolicy

TrustArg = Union["TrustPolicy", str, os.PathLike, bool, None]


def policy_from_env() -> str | None:
    """``$KARCHIVE_TRUST_POLICY``: None when unset; set but empty (or blank) is an error, never "no
    policy": ``KARCHIVE_TRUST_POLICY=`` once switched enforcement off and an unsigned archive loaded
    (issue 20). Unset the variable to run without a policy."""
    try:
        return settings.trust_policy()  # set but empty is refused there, as for every guarded variable
    except SettingsError as exc:  # ... and reported as the policy error spec/SIGNING.md §6.1 names
        raise TrustPolicyError(f"{exc}; unset it to load without a trust policy", path="") from None


def resolve_policy(trust: TrustArg) -> TrustPolicy | None:
    """``trust`` (a :class:`TrustPolicy` or the path of one) if given, else ``$KARCHIVE_TRUST_POLICY``
    if set, else None (no enforcement). ``False`` means no policy even when the variable is set (for
    callers that check signatures themselves, as ``karchive verify`` does). Loading a policy needs
    ``cryptography``; without it this fails closed with ``missing-dependency``."""
    if trust is False:
        return None
    if trust is None:
        trust = policy_from_env()
        if trust is None:
            return None
    from .policy import TrustPolicy

    if isinstance(trust, TrustPolicy):
        return trust
    if isinstance(trust, bool) or not isinstance(trust, (str, os.PathLike)):
        raise TypeError(f"trust must be a TrustPolicy or the path of a policy file, not {type(trust).__name__}")
    return TrustPolicy.load(trust)


def manifest_identity(reader: ArchiveReader, where: str) -> tuple[str, str]:
    """NAME and VERSION from the reader's manifest (authentic: the index digest pins the manifest)."""
    # The header (format 2) or the whole manifest (1.0): both carry the identity; no shard is read.
    name, version = reader.header.get("name"), reader.header.get("version")
    if not isinstance(name, str) or not isinstance(version, str):
        raise TrustError(
            f"{where}: the manifest has no usable name and version", reason=reasons.DAMAGED_ARCHIVE, archive=None
        )  # no NAME@VERSION to give: ``where`` names the file
    return name, version


def open_trusted_path(
    path: str, policy: TrustPolicy, limits: Limits | None = None
) -> tuple[ArchiveReader, Verdict | None]:
    """A local archive whose sidecar (``PATH.sig.json``) satisfies ``policy`` (:func:`.decide.decide`).
    The file is hashed through the reader's own descriptor, so the sha256 and the index digest checked
    describe the bytes the reader uses; a refusal closes the file and raises."""
    from ..format.source import FileSource
    from .bind import hash_source, open_recorded
    from .decide import Subject, decide, sidecar_evidence
    from .sidecar import read_sidecar, sidecar_path

    source = FileSource(path)
    try:
        reader, index = open_recorded(source, limits)
        sha256 = hash_source(source, index)
        name, version = manifest_identity(reader, path)
        verdict = decide(
            policy,
            Subject(f"{name}@{version}", name, version, sha256, index),
            lambda _: sidecar_evidence(read_sidecar(sidecar_path(path))),
        )
    except BaseException:
        source.close()
        raise
    return reader, verdict


def open_trusted_url(
    url: str, policy: TrustPolicy, storage_options: dict[str, Any] | None = None, limits: Limits | None = None
) -> tuple[ArchiveReader, Verdict | None]:
    """A remote archive (any fsspec URL, read with ranged requests) whose sidecar beside the URL
    satisfies ``policy`` (:func:`.decide.decide`). Nothing hashes the whole object, so the signature is
    bound through the index digest of the footer the reader opened from (SIGNING.md §6.1); a frame
    altered later is caught by ``read()`` (member digests), before its bytes are used."""
    import fsspec

    from ..format.open import open_location
    from ..format.source import FsspecSource
    from .bind import open_recorded
    from .decide import Subject, decide, sidecar_evidence
    from .sidecar import read_sidecar_url

    try:
        fs, path = fsspec.core.url_to_fs(url, **(storage_options or {}))
    except (ImportError, ValueError, TypeError):
        open_location(url, storage_options=storage_options, limits=limits)  # raises the format layer's error
        raise
    source = FsspecSource(fs, path)
    try:
        reader, index = open_recorded(source, limits)
        name, version = manifest_identity(reader, url)
        verdict = decide(
            policy,
            Subject(f"{name}@{version}", name, version, None, index),
            lambda _: sidecar_evidence(read_sidecar_url(url, storage_options)),
        )
    except BaseException:
        getattr(source, "close", lambda: None)()
        raise
    return reader, verdict
