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

from collections.abc import Callable
from typing import Any


def refuse_triton_bundles(on_refused: Callable[[], None]) -> Callable[[], None] | None:
    """Make ``TritonBundler.read_and_emit`` restore nothing (``on_refused()`` for each bundle that held kernels);
    the undo, or None where this torch has no Triton bundler (then it restores none)."""
    try:
        from torch._inductor.triton_bundler import TritonBundler
    except Exception:  # noqa: BLE001 - an Inductor without a Triton bundler restores none
        return None
    orig = TritonBundler.__dict__["read_and_emit"]

    def read_and_emit(bundle: Any) -> None:
        if getattr(bundle, "kernel_artifacts", None) or getattr(bundle, "static_autotuners", None):
            on_refused()
        return None

    TritonBundler.read_and_emit = staticmethod(read_and_emit)

    def undo() -> None:
        if TritonBundler.__dict__.get("read_and_emit") is not orig:
            TritonBundler.read_and_emit = orig

    return undo


__all__ = ["refuse_triton_bundles"]
