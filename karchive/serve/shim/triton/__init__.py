"""karchive's import shim of ``triton`` (karchive/serve/shim): decorators and helpers, no compiler."""

from __future__ import annotations

from . import language
from .runtime.autotuner import Autotuner, Config, Heuristics, autotune, heuristics
from .runtime.jit import JITFunction, KernelInterface, jit

__karchive_shim__ = True
__version__ = "0.0.0+karchive.shim"

__all__ = [
    "jit",
    "autotune",
    "heuristics",
    "Config",
    "cdiv",
    "next_power_of_2",
    "language",
    "JITFunction",
    "Autotuner",
    "Heuristics",
    "KernelInterface",
]


def cdiv(x: int, y: int) -> int:
    return (x + y - 1) // y


def next_power_of_2(n: int) -> int:
    """Triton's: the smallest power of two >= n (1 for n <= 1)."""
    n -= 1
    n |= n >> 1
    n |= n >> 2
    n |= n >> 4
    n |= n >> 8
    n |= n >> 16
    n |= n >> 32
    n += 1
    return n if n > 0 else 1
