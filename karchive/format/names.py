"""The grammar of kernel names inside an archive (spec/FORMAT.md, "Kernel names").

A kernel is named either by its *qualified name*, ``module:qualname`` (``pkg.ops.norm:rms_norm_fwd``,
``model:Block.<locals>.kernel``), which is what a producer records, so that two kernels that share a
``__name__`` in different modules stay two kernels; or, in archives written before qualified names, by
the bare ``__name__`` (an identifier). The *short name* is the last identifier of either form: the
name Triton gives the compiled entry and its cache files.

Names come from untrusted archives and end up in file names (``export-triton-cache``) and terminals,
so the model refuses anything outside this grammar; the checks use whole-string matching
(:func:`karchive.core.grammar.fullmatch`).
"""

from __future__ import annotations

import re
from typing import Any

from karchive.core.grammar import IDENTIFIER, fullmatch

#: Longest kernel name accepted (qualified names of deeply nested modules fit well inside it).
MAX_KERNEL_NAME = 512

_SEGMENT = rf"(?:{IDENTIFIER}|<locals>)"
_MODULE = rf"{IDENTIFIER}(?:\.{IDENTIFIER})*"
_QUALNAME = rf"(?:{_SEGMENT}\.)*{IDENTIFIER}"
KERNEL_NAME = re.compile(rf"(?:{_MODULE}:)?{_QUALNAME}")
SHORT_NAME = re.compile(IDENTIFIER)


def is_kernel_name(value: Any) -> bool:
    """A bare identifier or ``module:qualname``, at most :data:`MAX_KERNEL_NAME` characters."""
    return fullmatch(KERNEL_NAME, value) and len(value) <= MAX_KERNEL_NAME


def short_name(name: str) -> str:
    """The last identifier of a kernel name: ``pkg.mod:Outer.<locals>.k`` → ``k``; ``k`` → ``k``."""
    return name.rpartition(":")[2].rpartition(".")[2]


def is_qualified(name: str) -> bool:
    """True for ``module:qualname``; False for a bare ``__name__`` (an archive from before qualified names)."""
    return ":" in name
