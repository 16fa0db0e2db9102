"""Archive references: ``NAME``, ``NAME@VERSION``, ``NAME@latest``.

Names and versions become path components in every backend (local directories, S3 keys, URLs), so
they are restricted to a portable alphabet here, once, before any storage sees them.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from ..core.grammar import fullmatch
from ..errors import RegistryValueError

LATEST = "latest"

_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_VERSION_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}")


def check_name(name: object) -> str:
    """An archive name: letters, digits, ``.``, ``_``, ``-``; starts with a letter or digit; ≤ 128."""
    if not isinstance(name, str) or not fullmatch(_NAME_RE, name) or ".." in name:
        raise RegistryValueError(
            f"bad archive name {name!r}: use letters, digits, '.', '_' and '-', starting with a letter or digit",
            value=_shown(name),
        )
    return name


def check_version(version: object) -> str:
    """A concrete version string; ``latest`` is reserved for resolution and cannot be published."""
    if not isinstance(version, str) or not fullmatch(_VERSION_RE, version) or ".." in version:
        raise RegistryValueError(
            f"bad version {version!r}: use letters, digits, '.', '_', '+' and '-', starting with a letter or digit",
            value=_shown(version),
        )
    if version.lower() == LATEST:
        raise RegistryValueError(
            f"{version!r} is reserved: it means 'the newest version' and cannot be published", value=_shown(version)
        )
    return version


@dataclass(frozen=True)
class Ref:
    """A parsed reference; ``version is None`` means the newest version (``latest``)."""

    name: str
    version: str | None = None

    def __str__(self) -> str:
        return f"{self.name}@{self.version or LATEST}"


def parse_ref(text: object) -> Ref:
    if not isinstance(text, str) or not text.strip():
        raise RegistryValueError(
            f"bad archive reference {text!r}: expected NAME, NAME@VERSION or NAME@latest", value=_shown(text)
        )
    name, sep, version = text.strip().partition("@")
    if sep and not version:
        raise RegistryValueError(f"bad archive reference {text!r}: nothing after '@'", value=_shown(text))
    check_name(name)
    if not sep or version.lower() == LATEST:
        return Ref(name, None)
    return Ref(name, check_version(version))


def is_registry_ref(text: str) -> bool:
    """The one rule that tells a registry reference from a path or URL (``karchive.open`` and every CLI
    command that takes an archive use it).

    A path or URL holds ``://``, ``/`` or ``\\``, ends with ``.karc``, or names an existing *file*;
    anything else can only mean ``NAME[@VERSION]``, and resolving it parses it strictly, so a malformed
    reference gets the reference's own error (``nothing after '@'``) rather than "no such file". An
    existing directory does not make a bare name a path (a directory is never an archive, and
    ``karchive pull examples`` must work in a checkout that has an ``examples/`` folder); the resolver
    mentions the directory when the registry has no such name.
    """
    return not ("://" in text or "/" in text or "\\" in text or text.endswith(".karc") or os.path.isfile(text))


def _shown(value: object) -> str:
    """What was given, for the error's ``value`` field: its repr, bounded (the input may be hostile)."""
    return repr(value)[:200]
