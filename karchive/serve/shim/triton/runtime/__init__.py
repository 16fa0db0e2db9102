"""karchive's import shim: ``triton.runtime`` (jit, autotuner; no driver: code that asks the driver needs Triton)."""

from .autotuner import Autotuner, Config, Heuristics, autotune, heuristics  # noqa: F401
from .jit import JITFunction, KernelInterface  # noqa: F401
