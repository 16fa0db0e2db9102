"""One way to turn what a user typed into an archive reader: a path, an fsspec URL, or NAME[@VERSION].

``karchive.open`` and every CLI command that takes an archive go through :func:`open_reader`, so all
accept the same references; :func:`karchive.registry.refs.is_registry_ref` is the rule that tells a
registry reference from a path.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from .core import settings
from .errors import LockfileError, NotFoundError, UnsupportedLocationError
from .format.open import is_url, open_location
from .format.reader import ArchiveReader, Limits
from .registry.refs import is_registry_ref

if TYPE_CHECKING:  # pragma: no cover
    from .registry import Lockfile, Registry
    from .registry.registry import FetchMode
    from .trust.enforce import TrustArg


def open_reader(ref: str | os.PathLike, *, registry: Registry | str | os.PathLike | None = None,
                lockfile: Lockfile | str | os.PathLike | None = None,
                storage_options: dict[str, Any] | None = None, cache_dir: str | os.PathLike | None = None,
                fetch: FetchMode | None = None, limits: Limits | None = None, trust: TrustArg = None,
                allow_downgrade: bool = False) -> ArchiveReader:
    """An :class:`ArchiveReader` for a path, a URL, or ``NAME``/``NAME@VERSION``/``NAME@latest``.

    References resolve through ``registry`` (a :class:`~karchive.registry.Registry` or its URL; default
    ``$KARCHIVE_REGISTRY``, else the local one) and are checked against ``lockfile`` (default
    ``$KARCHIVE_LOCKFILE``). ``storage_options`` go to fsspec for URLs and remote registries.

    ``trust`` (a :class:`~karchive.trust.policy.TrustPolicy` or a policy file; default
    ``$KARCHIVE_TRUST_POLICY``) makes the archive's signatures a condition of opening it: from the
    registry beside the blob, or the sidecar ``ARCHIVE.sig.json`` beside a path or URL. A refusal is a
    :class:`~karchive.errors.TrustError` naming the reason, raised before any reader exists.
    ``allow_downgrade`` accepts a ``NAME@latest`` older than one this cache already verified.
    """
    return open_verified(ref, registry=registry, lockfile=lockfile, storage_options=storage_options,
                         cache_dir=cache_dir, fetch=fetch, limits=limits, trust=trust,
                         allow_downgrade=allow_downgrade)[0]


def open_verified(ref: str | os.PathLike, *, registry: Registry | str | os.PathLike | None = None,
                  lockfile: Lockfile | str | os.PathLike | None = None,
                  storage_options: dict[str, Any] | None = None, cache_dir: str | os.PathLike | None = None,
                  fetch: FetchMode | None = None, limits: Limits | None = None, trust: TrustArg = None,
                  allow_downgrade: bool = False) -> tuple[ArchiveReader, Any]:
    """:func:`open_reader`, and what the trust policy accepted (None without one): a
    :class:`~karchive.registry.verdict.Verdict` for registry references, a
    :class:`~karchive.trust.verify.TrustResult` for paths and URLs."""
    if not isinstance(ref, (str, os.PathLike)):
        raise UnsupportedLocationError(f"an archive reference is a path, a URL or NAME[@VERSION], not {type(ref).__name__} "
                                       f"{ref!r}", location=repr(ref))
    text = os.fspath(ref)
    if is_registry_ref(text):
        from .registry import Registry

        reg = registry if isinstance(registry, Registry) else Registry(registry, storage_options, cache=cache_dir)
        if lockfile is None:
            lockfile = settings.lockfile()
        try:
            return reg.open_verified(text, lockfile=lockfile, fetch=fetch, limits=limits, trust=trust,
                                     allow_downgrade=allow_downgrade)
        except NotFoundError as exc:
            if os.path.isdir(text):
                raise NotFoundError(f"{exc}. (There is a directory {text!r} here, but a directory is not an "
                                    "archive: give the .karc file's path.)", **exc.fields) from None
            raise
    if lockfile is not None:
        # A lockfile pins registry names; silently ignoring it for a path would look like a check that passed.
        raise LockfileError(f"{text} is a path, not a NAME@VERSION reference: a lockfile cannot pin it",
                            lockfile=os.fspath(lockfile) if not hasattr(lockfile, "pins") else None)
    from .trust.enforce import resolve_policy

    policy = resolve_policy(trust)
    if policy is None:
        return open_location(text, storage_options=storage_options, limits=limits), None
    from .trust.enforce import open_trusted_path, open_trusted_url

    if is_url(text) and not text.startswith("file://"):
        return open_trusted_url(text, policy, storage_options, limits)
    return open_trusted_path(text[len("file://"):] if text.startswith("file://") else text, policy, limits)
