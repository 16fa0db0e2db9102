"""Where signatures live: ``ARCHIVE.sig.json`` beside the archive, one DSSE envelope (spec/SIGNING.md §3).

Never inside the archive: signing must not change a byte of it (builds stay reproducible, digests
and lockfiles stay valid), and more signatures can be added later without a new archive.
"""

from __future__ import annotations

import os
import tempfile
from typing import TYPE_CHECKING

from ..errors import EnvelopeError

if TYPE_CHECKING:  # envelopes need cryptography; naming a sidecar does not
    from .dsse import Envelope

SUFFIX = ".sig.json"


def sidecar_path(archive: str | os.PathLike) -> str:
    """``examples.karc`` -> ``examples.karc.sig.json`` (the whole file name is kept, extension included)."""
    return os.fspath(archive) + SUFFIX


def read_sidecar(path: str | os.PathLike) -> "Envelope | None":
    """The envelope in ``path``, or None when there is no such file (an unsigned archive)."""
    from .dsse import MAX_ENVELOPE_BYTES, Envelope

    where = os.fspath(path)
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_ENVELOPE_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise EnvelopeError(f"cannot read signature file {where}: {exc.strerror or exc}", path=where) from exc
    return Envelope.parse(data, where)


def write_sidecar(path: str | os.PathLike, envelope: "Envelope") -> None:
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
