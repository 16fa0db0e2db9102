"""Constants and markers shared by test modules (a plain module: `conftest` names clash across folders)."""

from __future__ import annotations

import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def have_triton() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


needs_triton = pytest.mark.skipif(not have_triton(), reason="the producer tests need triton (pip install karchive[producer])")
