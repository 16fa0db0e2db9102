"""How to open an archive, as one value: :class:`OpenOptions`.

``karchive.open``, :func:`karchive.resolve.open` and :meth:`karchive.registry.Registry.open` take
the same options; they travel whole from the caller to the route that uses them, so adding one
changes this class and the route that reads it, not every signature on the way (issue 24: the same
eight to ten keyword arguments were once forwarded through four layers).

The environment fills what the caller left out when the option is *used* (:meth:`OpenOptions.fetch_mode`,
:meth:`OpenOptions.lockfile_or_env`; the trust policy in :func:`karchive.trust.enforce.resolve_policy`),
never when the value is made, so one ``OpenOptions`` follows the environment of the call that uses it.
It lives in the registry layer because its fields name registry types; paths and URLs use a subset.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from ..core import settings
from ..errors import RegistryValueError

if TYPE_CHECKING:  # pragma: no cover - naming the types imports nothing at run time
    from ..format.reader import ArchiveReader, Limits
    from ..trust.enforce import TrustArg
    from .lockfile import Lockfile

FetchMode = Literal["auto", "lazy", "full"]
FETCH_MODES = ("auto", "lazy", "full")


class Registry(Protocol):
    """A registry object (:class:`karchive.registry.Registry`) as an open uses it, named structurally so that
    this module, which the registry imports, does not import it back."""

    def open(self, ref: Any, options: OpenOptions | None = None, **fields: Any) -> ArchiveReader: ...


@dataclass(frozen=True)
class OpenOptions:
    """Everything that decides how a reference (a path, a URL, ``NAME[@VERSION]``) becomes a reader.

    - ``registry``: a :class:`~karchive.registry.Registry` or its location, for ``NAME[@VERSION]``
      (default ``$KARCHIVE_REGISTRY``, else the local registry); ``cache_dir`` its cache.
    - ``storage_options``: passed to fsspec for URLs and remote registries, unchanged.
    - ``lockfile``: registry references must match its pins (default ``$KARCHIVE_LOCKFILE``); a path
      or URL with a lockfile is refused, since a lockfile cannot pin it.
    - ``fetch``: ``auto`` / ``lazy`` / ``full`` (default ``$KARCHIVE_FETCH``, else ``auto``).
    - ``limits``: the reader's bounds on hostile input.
    - ``trust``: a trust policy or its file (default ``$KARCHIVE_TRUST_POLICY``); ``False``: none.
    - ``allow_downgrade``: accept a ``NAME@latest`` older than one this cache already verified.
    - ``reuse_verdict``: accept the verdict a cache receipt holds for this policy (``False``: verify
      the signatures again, as ``karchive verify --trust`` does to show them).
    """

    registry: Registry | str | os.PathLike | None = None
    storage_options: Mapping[str, Any] | None = field(default=None, hash=False)
    cache_dir: str | os.PathLike | None = None
    lockfile: Lockfile | str | os.PathLike | None = None
    fetch: FetchMode | None = None
    limits: Limits | None = None
    trust: TrustArg = None
    allow_downgrade: bool = False
    reuse_verdict: bool = True

    def __post_init__(self) -> None:
        if self.fetch is not None and self.fetch not in FETCH_MODES:
            raise RegistryValueError(
                f"fetch mode must be auto, lazy or full, not {self.fetch!r}", value=repr(self.fetch)[:200]
            )

    @classmethod
    def of(cls, options: OpenOptions | None = None, **fields: Any) -> OpenOptions:
        """``options`` (default: all defaults) with ``fields`` replacing some: the bridge from the keyword
        API (``karchive.open(ref, trust=..., fetch=...)``). An unknown name is a ``TypeError``, as a
        misspelt keyword argument is."""
        base = options if options is not None else cls()
        if not isinstance(base, OpenOptions):
            raise TypeError(f"options must be an OpenOptions, not {type(base).__name__}")
        if not fields:
            return base
        unknown = sorted(set(fields) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise TypeError(
                f"unknown open option(s) {', '.join(unknown)}; OpenOptions has: "
                f"{', '.join(f.name for f in dataclasses.fields(cls))}"
            )
        return dataclasses.replace(base, **fields)

    def fetch_mode(self) -> FetchMode:
        """``fetch``, else ``$KARCHIVE_FETCH``, else ``auto``; a bad value in the environment is refused."""
        mode = self.fetch or settings.fetch() or "auto"
        if mode not in FETCH_MODES:
            raise RegistryValueError(
                f"fetch mode must be auto, lazy or full, not {mode!r} (${settings.FETCH.name})", value=repr(mode)[:200]
            )
        return mode  # type: ignore[return-value]

    def lockfile_or_env(self) -> Lockfile | str | os.PathLike | None:
        """``lockfile``, else ``$KARCHIVE_LOCKFILE`` (registry references only: paths ignore the variable)."""
        return self.lockfile if self.lockfile is not None else settings.lockfile()
