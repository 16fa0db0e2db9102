""" "Did you mean": the wrong kind of input, recognised after the command refused it.

A Python file or a build spec where an archive goes, ``NAME:VER`` or ``NAME==VER`` (docker's and pip's
spellings) where ``NAME@VER`` goes, a Python file where a spec goes. The hint is added to the error the
command raised (same class, same exit status), never a guess that replaces it.
"""

from __future__ import annotations

import argparse
import os
import re

from ..errors import KarchiveError, NotAnArchiveError, RegistryError, SpecFileError

#: Namespace attributes that hold an archive reference, in the commands that take one.
ARCHIVE_ARGS = ("archive", "a", "b", "ref", "refs", "reuse")

_OTHER_SPELLING = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)(?:==|:)([A-Za-z0-9][A-Za-z0-9._+-]*)")


def archive_values(args: argparse.Namespace) -> list[str]:
    values: list[str] = []
    for name in ARCHIVE_ARGS:
        value = getattr(args, name, None)
        values += value if isinstance(value, list) else [value] if isinstance(value, str) else []
    return values


def wrong_kind(path: str) -> str:
    """What to run instead when ``path`` is a local Python file or build spec given as an archive ('' if not)."""
    if not os.path.isfile(path):
        return ""
    if path.endswith(".py"):
        return f"{path} is Python source, not an archive: did you mean `karchive compile {path} -n KERNEL ...`?"
    if path.endswith(".toml"):
        return f"{path} looks like a build spec, not an archive: did you mean `karchive build {path} -o out/`?"
    return ""


def suggest(exc: KarchiveError, args: argparse.Namespace) -> str:
    """Text to append to ``exc``'s message ('' when there is nothing useful to add)."""
    if isinstance(exc, NotAnArchiveError):
        for value in archive_values(args):
            if hint := wrong_kind(value):
                return f"\n  {hint}"
    if isinstance(exc, RegistryError) and str(exc).startswith(("bad archive name", "bad archive reference")):
        for value in archive_values(args):
            m = _OTHER_SPELLING.fullmatch(value)
            if m:
                return f"\n  did you mean '{m.group(1)}@{m.group(2)}'? (a version is given with '@')"
    if isinstance(exc, SpecFileError) and getattr(args, "command", None) == "build" and args.spec.endswith(".py"):
        return (
            f"\n  {args.spec} is Python source, not a build spec (TOML, spec/BUILD.md): "
            f"did you mean `karchive compile {args.spec} -n KERNEL -s SIGNATURE -t TARGET -o OUT`?"
        )
    return ""
