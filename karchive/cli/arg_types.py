"""Argument values that several commands take: sizes and ages (``--max-size 2G``, ``--max-age 30d``), a
passphrase named by ``--passphrase-env`` and the keys ``--sign`` names, a worker count (``-j``) and the archive
``-o`` writes. Below every ``*_cmds`` module, so no command module imports another for them.
"""

from __future__ import annotations

import argparse
import os
import re
from typing import Any

from ..errors import KeyFileError, RegistryValueError

__all__ = [
    "add_archive_out",
    "archive_out",
    "open_named",
    "parse_age",
    "parse_size",
    "passphrase",
    "positive_int",
    "registry_named",
    "signing_keys",
]

#: k, m, g, t and their -ib forms are binary; kb, mb, gb, tb decimal.
_SIZE_UNITS = {"": 1, "b": 1} | {
    p + suffix: 1000**i if suffix == "b" else 1 << 10 * i for i, p in enumerate("kmgt", 1) for suffix in ("", "b", "ib")
}
_AGE_UNITS = {"": 1, "s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def _quantity(text: str, units: dict[str, int], bad: str) -> float:
    """``text``, a number and a unit of ``units`` (any case), as a number of the base unit; else ``bad`` says how."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in units:
        raise RegistryValueError(f"bad {bad}", value=repr(text)[:200])
    return float(m.group(1)) * units[m.group(2).lower()]


def parse_size(text: str) -> int:
    return int(_quantity(text, _SIZE_UNITS, f"size {text!r}: use e.g. 500M, 2G, 1.5GiB or a byte count"))


def parse_age(text: str) -> float:
    return _quantity(text, _AGE_UNITS, f"age {text!r}: use e.g. 30d, 12h, 45m or seconds")


def passphrase(var: str | None, key: str) -> bytes | None:
    """Read from the environment, never from argv (argv is visible to every user via ps). ``key`` is the key
    file it unlocks (the first, where one passphrase serves several), named by the error."""
    if not var:
        return None
    value = os.environ.get(var)
    if not value:
        raise KeyFileError(f"--passphrase-env {var}: the variable is not set or empty", path=key)
    return value.encode()


def signing_keys(paths: list[str] | None, passphrase_env: str | None) -> list[Any]:
    """The private keys ``--sign KEY`` (or ``--registry-key``; repeatable) names, loaded (and the passphrase
    ``--passphrase-env`` names read, one for all) up front."""
    if not paths:
        return []
    from ..trust.keys import load_private_key

    secret = passphrase(passphrase_env, paths[0])
    return [load_private_key(path, secret) for path in paths]


def positive_int(text: str) -> int:
    """``-j``: a count of worker processes, at least 1 (``-j 0`` and ``-j -3`` are typos, not requests)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def open_named(ref: str, registry: str | None, **fields: Any) -> Any:
    """The archive a command names (path, URL or NAME[@VERSION] in ``registry``), read with the storage
    credentials of the environment (``$KARCHIVE_STORAGE_OPTIONS``); ``fields``: other open options."""
    from ..registry.config import storage_options_from_env
    from ..resolve import open as open_ref

    return open_ref(ref, registry=registry, storage_options=storage_options_from_env(), **fields)


def registry_named(args: argparse.Namespace, **fields: Any) -> Any:
    """The registry ``--registry`` names, read with the environment's storage credentials, and its cache where the
    command has ``--cache-dir``; ``fields``: other :class:`~karchive.registry.Registry` arguments."""
    from ..registry import Registry
    from ..registry.config import storage_options_from_env

    return Registry(args.registry, storage_options_from_env(), cache=getattr(args, "cache_dir", None), **fields)


def archive_out(path: str, name: str, version: str) -> str:
    """The archive file ``-o`` names, checked (and its directory created) before anything compiles: a build
    must not fail at the end. An existing file is replaced only if it is an archive: ``-o kernels.py``
    (a slip of the tab key) must not turn a source file into zstd frames."""
    from ..core.destination import output_file
    from ..errors import DestinationError, FormatError
    from ..format.open import open_location

    out = output_file(path, default_name=f"{name}-{version}.karc")
    if os.path.isfile(out) and os.path.getsize(out) > 0:
        try:
            open_location(out)
        except FormatError:
            raise DestinationError(
                f"{out} exists and is not a karchive archive; not replacing it (remove it or give another -o)", path=out
            ) from None
    return out


def add_archive_out(p: argparse.ArgumentParser) -> None:
    """``-o/--out``, the archive a producing command writes (its value goes through :func:`archive_out`)."""
    p.add_argument(
        "-o",
        "--out",
        required=True,
        help="archive to write (.karc); a directory (existing, or ending in /) gets NAME-VERSION.karc",
    )
