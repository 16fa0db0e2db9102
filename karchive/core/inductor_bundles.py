"""Inductor's Triton bundles kept out while capturing and serving (docs/inductor-notes.md).

An FX graph cache hit restores the entry's Triton bundle: its cubins are written into Triton's cache and its
statically launchable autotuners are handed to Inductor, so those kernels launch without ``triton.compile``. A
capture then never sees them compiled (it could only harvest the cache entries, under Triton's plain function
names instead of their Inductor identity), and a serving process would launch binaries that never came from an
archive. Capture and serve both answer ``TritonBundler.read_and_emit`` with nothing: every kernel of a cache
hit is compiled through ``triton.compile``, where the capture records it and the serving boundary answers it.
Not a config switch: ``bundle_triton_into_fx_graph_cache`` is part of the FX graph cache key. Here because the
producer and the consumer both need it and neither may import the other (tests/test_layers.py).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

_lock = threading.Lock()
#: One entry per refusal in force (a capture's, a serving session's), whichever order they open and close in.
_refusals: list[Callable[[], None]] = []
#: While any refusal is in force: (the class, ``read_and_emit`` as it was found, the one installed here).
_installed: list[tuple[Any, Any, Any]] = []


def _refusing(cls: Any, orig: Any) -> Any:
    """``read_and_emit`` restoring nothing while a refusal is in force, ``orig`` when none is (where a wrapper
    someone installed on top kept this one in its chain after the last refusal ended)."""

    def read_and_emit(bundle: Any) -> Any:
        with _lock:
            refusals = list(_refusals)
        if not refusals:
            return orig.__get__(None, cls)(bundle)
        if getattr(bundle, "kernel_artifacts", None) or getattr(bundle, "static_autotuners", None):
            for on_refused in refusals:
                on_refused()
        return None

    return staticmethod(read_and_emit)


def refuse_triton_bundles(on_refused: Callable[[], None]) -> Callable[[], None] | None:
    """Make ``TritonBundler.read_and_emit`` restore nothing until the returned undo is called (``on_refused()``
    for each bundle that held kernels); None where this torch has no Triton bundler (then it restores none).
    Refusals are counted: the first installs the refusal, the last undo puts back what it replaced, whichever order
    captures and serving sessions open and close in; an undo called twice does nothing more."""
    try:
        from torch._inductor.triton_bundler import TritonBundler
    except Exception:  # noqa: BLE001 - an Inductor without a Triton bundler restores none
        return None
    entry = lambda: on_refused()  # noqa: E731 - one object per refusal: its undo removes it and no other
    with _lock:
        if not _installed:
            orig = TritonBundler.__dict__["read_and_emit"]
            ours = _refusing(TritonBundler, orig)
            _installed.append((TritonBundler, orig, ours))
            TritonBundler.read_and_emit = ours
        _refusals.append(entry)

    def undo() -> None:
        with _lock:
            if not any(e is entry for e in _refusals):
                return
            _refusals[:] = [e for e in _refusals if e is not entry]
            if _refusals:
                return
            cls, orig, ours = _installed.pop()
            if cls.__dict__.get("read_and_emit") is ours:  # else wrapped since: theirs stays, ours passes through
                cls.read_and_emit = orig

    return undo


__all__ = ["refuse_triton_bundles"]
