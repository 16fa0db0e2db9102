"""Which archived kernel a ``torch.compile`` (Inductor) generated kernel is: an identity that does not depend on
the machine (docs/inductor-notes.md).

Inductor writes each Triton kernel it generates to its own module under its cache directory
(``/tmp/torchinductor_<user>/xy/c<hash>.py``) and loads it as ``torch._inductor.runtime.compile_tasks.c<hash>``:
the module's name and path differ between users, temporary directories and Inductor settings, so neither can
name a kernel in an archive. The identity here is a digest of the module's *source*, after the parts that say
where and with which caches it was generated are replaced by a fixed token:

- file system paths into Inductor's cache (``.../torchinductor_<user>/...``): another user, another tmpdir;
- the device index in ``DeviceProperties(..., index=N, ...)``: ``cuda:1`` generates the same kernel as ``cuda:0``;
- ``inductor_meta`` entries that only say how Inductor caches (``backend_hash``, ``autotune_local_cache``,
  ``autotune_remote_cache``, ``force_disable_caches``): a warm-cache, a cold-cache and a serving run generate
  the same kernel.

Everything else stays: the ``@triton.jit`` function, the size hints and configs Inductor's autotuner starts from,
the device's architecture and multiprocessor count (Inductor's codegen reads them), every other setting. So the
same generated source finds its binary on any machine, and a changed source (another shape, dtype, fusion, torch
version or setting that reaches the source) does not. The archive files the kernel as
``inductor.k<digest prefix>:<function name>`` (a kernel name of spec/FORMAT.md §6.1) and keeps the whole digest in
``provenance.inductor.source_digest``.

Pure functions over text: the producer (capture) and the consumer (serve) share them, and neither needs torch.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from ..core.grammar import IDENTIFIER, fullmatch

#: Version of the normalisation below; part of every digest, so a change can never match old archives silently.
SCHEME = "inductor-source-v1"
#: Hex digits of the digest in the kernel's archive name (the full digest is checked in provenance).
NAME_DIGITS = 24
#: Module part of every Inductor kernel's archive name.
NAME_PREFIX = "inductor.k"

# The shape every Inductor kernel module has: Inductor's runtime imported, a Triton kernel under one of
# triton_heuristics' decorators (pointwise, reduction, persistent_reduction, template, user_autotune, ...).
_RUNTIME_IMPORT = re.compile(r"^from torch\._inductor\.runtime import [^\n]*\btriton_heuristics\b", re.MULTILINE)
_HEURISTIC = re.compile(r"^@triton_heuristics\.([A-Za-z_][A-Za-z0-9_]*)\(", re.MULTILINE)
_CACHE_PATH = re.compile(r"""(?:[A-Za-z]:)?[^\s'"(),]*torchinductor_[^\s/\\'"]*""")
_DEVICE_INDEX = re.compile(r"(DeviceProperties\([^)]*?\bindex=)(?:None|\d+)")
_CACHE_ONLY_META = ("backend_hash", "autotune_local_cache", "autotune_remote_cache", "force_disable_caches")
_IDENT = re.compile(IDENTIFIER)
_HEX = re.compile("[0-9a-f]+")
_META_KEYS = "|".join(_CACHE_ONLY_META)
_META_ENTRY = re.compile(rf"""(['"](?:{_META_KEYS})['"]\s*:\s*)(?:'[^'\n]*'|"[^"\n]*"|True|False|None|-?\d+)""")


@dataclass(frozen=True)
class InductorIdentity:
    """An Inductor kernel as an archive knows it: its archive name, the function's name, the source digest and
    the ``triton_heuristics`` decorator it was generated under (``pointwise``, ``template``, ``user_autotune``...)."""

    name: str
    function: str
    digest: str
    heuristic: str | None


def is_inductor_source(module_source: str) -> bool:
    """Does this module source have the shape of an Inductor-generated kernel module?"""
    return bool(_RUNTIME_IMPORT.search(module_source)) and "@triton.jit" in module_source


def normalize(module_source: str) -> str:
    """The module source with the machine- and cache-specific parts replaced by ``*`` (see the module doc)."""
    text = module_source.replace("\r\n", "\n")
    text = _CACHE_PATH.sub("<inductor-cache>", text)
    text = _DEVICE_INDEX.sub(r"\1*", text)
    return _META_ENTRY.sub(r"\1*", text)


def source_digest(module_source: str) -> str:
    """sha256 of the normalised module source (hex), under :data:`SCHEME`."""
    return hashlib.sha256(f"{SCHEME}\n{normalize(module_source)}".encode()).hexdigest()


def archive_name(digest: str, function: str) -> str:
    """``inductor.k<digest prefix>:<function>``: the name an Inductor kernel is filed under."""
    return f"{NAME_PREFIX}{digest[:NAME_DIGITS]}:{function}"


def is_inductor_name(name: str) -> bool:
    """Is ``name`` an Inductor kernel's archive name (:func:`archive_name`)?"""
    module, sep, function = name.partition(":")
    return (
        bool(sep)
        and module.startswith(NAME_PREFIX)
        and len(module) == len(NAME_PREFIX) + NAME_DIGITS
        and fullmatch(_HEX, module[len(NAME_PREFIX) :])
        and fullmatch(_IDENT, function)
    )


def identity(module_source: str, function: str) -> InductorIdentity | None:
    """The identity of ``function`` defined in ``module_source``, or None when the module is not Inductor's or
    does not define it with ``def``."""
    if not isinstance(module_source, str) or not fullmatch(_IDENT, function):
        return None
    if not is_inductor_source(module_source):
        return None
    if not re.search(rf"^def {re.escape(function)}\s*\(", module_source, re.MULTILINE):
        return None
    digest = source_digest(module_source)
    heuristic = _HEURISTIC.search(module_source)
    return InductorIdentity(archive_name(digest, function), function, digest, heuristic.group(1) if heuristic else None)


#: Largest Inductor kernel module read to compute an identity (generated modules are a few KiB).
MAX_MODULE_BYTES = 8 << 20
_MEMO: dict[int, tuple[object, InductorIdentity | None]] = {}


def read_module(path: str) -> str | None:
    """The text of a generated module's file (at most :data:`MAX_MODULE_BYTES`), or None."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_MODULE_BYTES + 1)
        return data.decode("utf-8") if len(data) <= MAX_MODULE_BYTES else None
    except (OSError, UnicodeDecodeError):
        return None


def module_digest(module: object) -> str | None:
    """:func:`source_digest` of a loaded generated module (Inductor's benchmark modules), from its file; None
    when it is not an Inductor module."""
    path = getattr(module, "__file__", None)
    text = read_module(path) if isinstance(path, str) else None
    return source_digest(text) if text is not None and is_inductor_source(text) else None


def of_function(jit: object) -> InductorIdentity | None:
    """The identity of a live ``@triton.jit`` function (a ``JITFunction`` or the Python function under it) whose
    module Inductor generated: that module's source is read from its file (``__file__`` of the function's globals,
    which Inductor sets when it loads the module) once per function. None for any other function."""
    inner = getattr(jit, "fn", jit)
    hit = _MEMO.get(id(inner))
    if hit is not None and hit[0] is inner:
        return hit[1]
    result = None
    glb = getattr(inner, "__globals__", None)
    path = glb.get("__file__") if isinstance(glb, dict) else None
    name = getattr(inner, "__name__", None)
    if isinstance(path, str) and isinstance(name, str) and "triton_heuristics" in (glb or {}):
        text = read_module(path)
        result = identity(text, name) if text is not None else None
    if len(_MEMO) > 65536:
        _MEMO.clear()
    _MEMO[id(inner)] = (inner, result)
    return result


__all__ = [
    "InductorIdentity",
    "SCHEME",
    "NAME_PREFIX",
    "NAME_DIGITS",
    "is_inductor_source",
    "normalize",
    "source_digest",
    "archive_name",
    "is_inductor_name",
    "identity",
    "of_function",
    "MAX_MODULE_BYTES",
    "read_module",
    "module_digest",
]
