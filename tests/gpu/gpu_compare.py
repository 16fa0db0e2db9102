"""Comparing outputs across frameworks (a plain module: test modules do not import each other)."""

from __future__ import annotations

from typing import Any


def same(a: Any, b: Any, *, exact: bool = True, tol: float = 1e-5) -> str:
    """Assert ``a`` equals ``b`` (bit for bit unless ``exact=False``); return ``max|diff|=...`` for the report."""
    import numpy as np

    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    assert a.shape == b.shape, f"shape {a.shape} != {b.shape}"
    diff = float(np.max(np.abs(a - b))) if a.size else 0.0
    if exact:
        assert diff == 0.0, f"max |diff| = {diff} (expected bit-identical)"
    else:
        assert np.allclose(a, b, rtol=tol, atol=tol), f"max |diff| = {diff} > tol {tol}"
    return f"max|diff|={diff:.3g}"
