"""One way to turn what a user typed into an archive reader: a path, an fsspec URL, or NAME[@VERSION].

``karchive.open`` and every CLI command that takes an archive go through :func:`open`, so all accept
the same references and the same :class:`OpenOptions`; :func:`karchive.registry.refs.is_registry_ref`
is the rule that tells a registry reference from a path.
"""

from __future__ import annotations

import os
from typing import Any

from .core import settings
from .errors import LockfileError, NotFoundError, RegistryValueError, UnsupportedLocationError
from .format.open import is_url, open_location
from .format.reader import ArchiveReader
from .registry.options import OpenOptions
from .registry.refs import is_registry_ref

__all__ = ["OpenOptions", "open"]


def open(ref: str | os.PathLike, options: OpenOptions | None = None, **fields: Any) -> ArchiveReader:
    """An :class:`ArchiveReader` for a path, a URL, or ``NAME``/``NAME@VERSION``/``NAME@latest``, opened as
    ``options`` say (:class:`OpenOptions`; keyword arguments replace single fields).

    References resolve through ``options.registry`` (a :class:`~karchive.registry.Registry` or its URL;
    default ``$KARCHIVE_REGISTRY``, else the local one) and are checked against ``options.lockfile``
    (default ``$KARCHIVE_LOCKFILE``). ``storage_options`` go to fsspec for URLs and remote registries.

    ``trust`` (a :class:`~karchive.trust.policy.TrustPolicy` or a policy file; default
    ``$KARCHIVE_TRUST_POLICY``) makes the archive's signatures a condition of opening it: from the
    registry beside the blob, or the sidecar ``ARCHIVE.sig.json`` beside a path or URL; every route
    asks :func:`karchive.trust.decide.decide`. A refusal is a :class:`~karchive.errors.TrustError`
    naming the reason, raised before any reader exists; the reader's ``verdict`` is what the policy
    accepted (None without one).
    """
    opts = OpenOptions.of(options, **fields)
    if not isinstance(ref, (str, os.PathLike)):
        raise UnsupportedLocationError(
            f"an archive reference is a path, a URL or NAME[@VERSION], not {type(ref).__name__} {ref!r}",
            location=repr(ref),
        )
    text = os.fspath(ref)
    if is_registry_ref(text):
        return _open_registry(text, opts)
    if opts.lockfile is not None:
        # A lockfile pins registry names; silently ignoring it for a path would look like a check that passed.
        lockfile = opts.lockfile
        raise LockfileError(
            f"{text} is a path, not a NAME@VERSION reference: a lockfile cannot pin it",
            lockfile=(getattr(lockfile, "path", None) or "the lockfile given")
            if hasattr(lockfile, "pins")
            else os.fspath(lockfile),
        )
    storage = dict(opts.storage_options) if opts.storage_options is not None else None
    if opts.trust is False or (opts.trust is None and settings.TRUST_POLICY.raw() is None):
        # No policy given or configured (what resolve_policy answers None for without reading anything):
        # the enforcement module is not even imported on the way to a plain open.
        return open_location(text, storage_options=storage, limits=opts.limits)
    from .trust.enforce import open_trusted_path, open_trusted_url, resolve_policy

    policy = resolve_policy(opts.trust)
    if policy is None:
        return open_location(text, storage_options=storage, limits=opts.limits)
    if is_url(text) and not text.startswith("file://"):
        reader, verdict = open_trusted_url(text, policy, storage, opts.limits)
    else:
        reader, verdict = open_trusted_path(
            text[len("file://") :] if text.startswith("file://") else text, policy, opts.limits
        )
    reader.verdict = verdict
    return reader


def _open_registry(text: str, opts: OpenOptions) -> ArchiveReader:
    from .registry import Registry

    reg = opts.registry
    if reg is None or isinstance(reg, (str, os.PathLike)):  # else a Registry (anything with its open())
        storage = dict(opts.storage_options) if opts.storage_options is not None else None
        reg = Registry(reg, storage, cache=opts.cache_dir)
    elif not callable(getattr(reg, "open", None)):
        raise RegistryValueError(
            f"registry= takes a Registry, its URL or its path; got an object of type {type(reg).__name__}",
            value=repr(reg)[:200],
        )
    try:
        return reg.open(text, OpenOptions.of(opts, lockfile=opts.lockfile_or_env()))
    except NotFoundError as exc:
        if os.path.isdir(text):
            raise NotFoundError(
                f"{exc}. (There is a directory {text!r} here, but a directory is not an "
                "archive: give the .karc file's path.)",
                **exc.fields,
            ) from None
        raise
