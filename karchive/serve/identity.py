"""Which archived kernel a live ``@triton.jit`` function is, if any: module, qualified name and source digest.

A live kernel matches an archive's kernel only when all three agree:

- the **name**: ``module:qualname`` as producers file it (spec/FORMAT.md §6.1; the same rule as
  ``karchive.producer.canonical.kernel_name``, restated here because a consumer never imports the producer:
  the function's ``__module__``, or for a script run as ``__main__`` the file's stem);
- the **source digest**: with real Triton, Triton's own ``JITFunction.cache_key`` (a hash of the kernel's
  source, the JIT functions it calls and the constexpr globals it reads), compared with each variant's
  ``provenance.source_key``; under the import shim (no Triton), the sha256 of the kernel's module source,
  compared with the variant's stored module source (``sources/<sha256>.py``). An edited kernel therefore
  never gets a stale binary: its digest differs and the call is a miss.

The bare ``__name__`` is never enough: two libraries' ``add_kernel`` stay two kernels.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import sys
from dataclasses import dataclass
from typing import Any

from ..format.layout import source_member
from ..format.names import is_kernel_name, short_name

#: How the live digest was computed (and what it is compared with).
CACHE_KEY = "triton-cache-key"  # JITFunction.cache_key vs provenance.source_key
MODULE_SOURCE = "module-source"  # sha256 of the module's source vs the variant's stored source member
INDUCTOR = "inductor-source"  # torch.compile's generated module, normalised (format/inductor_source) vs provenance


@dataclass(frozen=True)
class LiveIdentity:
    """What a live JIT function is: its archive name, its short name, its digest and how it was computed."""

    name: str
    short: str
    digest: str | None
    kind: str
    triton: str | None = None  # the Triton release that computed ``digest`` (a CACHE_KEY); None: not known


def live_name(jit: Any) -> str:
    """``module:qualname`` of a live JIT function (the name a producer files it under)."""
    inner = getattr(jit, "fn", jit)
    short = getattr(jit, "__name__", None) or getattr(inner, "__name__", "")
    qualname = getattr(inner, "__qualname__", None) or short
    module = getattr(jit, "__module__", None) or getattr(inner, "__module__", None)
    if module in (None, "__main__"):
        code = getattr(inner, "__code__", None)
        stem = os.path.splitext(os.path.basename(str(getattr(code, "co_filename", ""))))[0]
        module = stem if stem.isidentifier() and stem.isascii() else "__main__"
    for candidate in (f"{module}:{qualname}", short):
        if is_kernel_name(candidate):
            return str(candidate)
    return str(short)


def module_digest(jit: Any) -> str | None:
    """sha256 of the source of the module that defines ``jit``, as a producer stores it (``inspect.getsource``)."""
    inner = getattr(jit, "fn", jit)
    module = sys.modules.get(getattr(inner, "__module__", "") or "")
    if module is None:
        return None
    try:
        text = inspect.getsource(module)
    except (OSError, TypeError):
        return None
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def live_identity(jit: Any) -> LiveIdentity:
    """Name and digest of a live JIT function: for a kernel ``torch.compile`` generated, its Inductor identity (the
    normalised module source: the same on every machine, user and cache directory; ``inductor.k<digest>:<fn>``);
    else Triton's cache key where Triton computes one, else (the shim) the module source digest."""
    from ..format.inductor_source import of_function

    generated = of_function(jit)
    if generated is not None:
        return LiveIdentity(generated.name, generated.function, generated.digest, INDUCTOR)
    name = live_name(jit)
    key = None
    kind = MODULE_SOURCE
    release = None
    if not getattr(jit, "_karchive_shim", False):
        kind = CACHE_KEY
        release = getattr(sys.modules.get("triton"), "__version__", None)
        try:
            key = str(jit.cache_key)
        except Exception:  # noqa: BLE001 - Triton could not hash the source: no identity, so never served
            key = None
    else:
        key = module_digest(jit)
    return LiveIdentity(name, short_name(name), key, kind, release if isinstance(release, str) else None)


def variant_digest(variant: Any, kind: str) -> str | None:
    """The digest a variant was built from, in the form ``kind`` compares."""
    if kind == CACHE_KEY:
        return getattr(variant.provenance, "source_key", None)
    if kind == INDUCTOR:
        info = getattr(variant.provenance, "inductor", None)
        digest = info.get("source_digest") if isinstance(info, dict) else None
        return digest if isinstance(digest, str) else None
    src = getattr(variant, "source", None)
    return src if isinstance(src, str) else None


def matches(variant: Any, live: LiveIdentity) -> bool:
    if live.digest is None:
        return False
    have = variant_digest(variant, live.kind)
    if live.kind in (CACHE_KEY, INDUCTOR):
        return have == live.digest
    return have == source_member(live.digest)


def _release_note(versions: list[str], live: str | None) -> str:
    """Why the source keys differ, as far as the releases tell: another Triton release (its keys differ between
    releases), or the same one (then the kernel's own code, a jitted function it calls or its line changed)."""
    if live is not None and set(versions) == {live}:
        return (
            f"; built with this process's Triton {live}: the kernel's code, a @triton.jit function it calls, "
            "or its line in the module changed"
        )
    running = f", this process runs Triton {live}" if live else ""
    return f"; built with Triton {', '.join(versions)}{running}: Triton's source keys differ between releases"


def find(archive: Any, live: LiveIdentity) -> tuple[str | None, list[str]]:
    """(the archive's kernel name for ``live``, or None; why not, one line per near miss)."""
    kernels = archive.kernels()
    label = f"{archive.name}@{archive.version}"
    why: list[str] = []
    if live.name in kernels:
        variants = archive.variants(live.name)
        stale = [v for v in variants if not matches(v, live)]
        if not stale:
            return live.name, []
        have = sorted({str(variant_digest(v, live.kind))[:16] for v in stale})
        versions = sorted({v.provenance.triton_version for v in stale if v.provenance.triton_version})
        why.append(
            f"{label}: {live.name} has {len(stale)} of {len(variants)} variants built from another source "
            f"(archived {', '.join(have)}, live {str(live.digest)[:16]}"
            + (_release_note(versions, live.triton) if versions and live.kind == CACHE_KEY else "")
            + ")"
        )
        return None, why
    same_short = [k for k in kernels if short_name(k) == live.short]
    for k in same_short:
        if ":" not in k or k.rpartition(":")[2] == live.name.rpartition(":")[2]:
            if all(matches(v, live) for v in archive.variants(k)):
                if ":" not in k:  # an archive from before qualified names: the source digest names it
                    return k, []
                why.append(
                    f"{label}: {k} has the same source but another module name than {live.name} "
                    "(the module was imported under another name when the archive was built)"
                )
                continue
        why.append(f"{label}: has {k}, not {live.name}")
    if not why:
        why.append(f"{label}: no kernel named {live.name}")
    return None, why
