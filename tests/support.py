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


def missing_extra(exc: BaseException) -> bool:
    """A karchive error raised at import because a third-party package of an optional extra is absent (its
    message names the extra): what a consumer-only install (no extras) meets, and says, by design."""
    cause = exc.__cause__
    return (
        isinstance(cause, ModuleNotFoundError)
        and (cause.name or "").split(".")[0] != "karchive"
        and "pip install 'karchive[" in str(exc)
    )


needs_triton = pytest.mark.skipif(
    not have_triton(), reason="the producer tests need triton (pip install karchive[producer])"
)
