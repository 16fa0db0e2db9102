"""karchive's import shim: ``triton.runtime`` (jit, autotuner, and a driver that only answers questions, from torch)."""

from .autotuner import Autotuner, Config, Heuristics, autotune, heuristics  # noqa: F401
from .driver import driver  # noqa: F401
from .jit import JITFunction, KernelInterface  # noqa: F401
