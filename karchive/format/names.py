"""The grammar of kernel names inside an archive (spec/FORMAT.md, "Kernel names").

A kernel is named either by its *qualified name*, ``module:qualname`` (``pkg.ops.norm:rms_norm_fwd``,
``model:Block.<locals>.kernel``), which is what a producer records, so that two kernels that share a
``__name__`` in different modules stay two kernels; or, in archives written before qualified names, by
the bare ``__name__`` (an identifier). The *short name* is the last identifier of either form: the
name Triton gives the compiled entry and its cache files.

Names come from untrusted archives and end up in file names (``export-triton-cache``) and terminals,
so the model refuses anything outside this grammar; the checks use whole-string matching
(:func:`karchive.core.grammar.fullmatch`).

A *parameter name* (a variant's ``params`` and its launch ABI's) is what the bridges declare as a
Python parameter (``karchive.interop.torch.custom_op`` builds the op's signature from them) and what
calls pass as keywords: an ASCII identifier that is not a Python keyword, at most
:data:`MAX_PARAM_NAME` characters (:func:`is_param_name`).
"""

from __future__ import annotations

import difflib
import functools
import keyword
import re
from collections.abc import Iterable
from typing import Any

from karchive.core.grammar import IDENTIFIER, fullmatch

#: Longest kernel name accepted (qualified names of deeply nested modules fit well inside it).
MAX_KERNEL_NAME = 512

_SEGMENT = rf"(?:{IDENTIFIER}|<locals>)"
_MODULE = rf"{IDENTIFIER}(?:\.{IDENTIFIER})*"
_QUALNAME = rf"(?:{_SEGMENT}\.)*{IDENTIFIER}"
KERNEL_NAME = re.compile(rf"(?:{_MODULE}:)?{_QUALNAME}")
SHORT_NAME = re.compile(IDENTIFIER)
#: Longest parameter name accepted.
MAX_PARAM_NAME = 256


def is_param_name(value: Any) -> bool:
    """An ASCII identifier that is not a Python keyword (``class``, ``None``), at most :data:`MAX_PARAM_NAME`
    characters: a name that can be a Python parameter, so no name from an archive is ever more than that."""
    return type(value) is str and _param_ok(value)


@functools.lru_cache(maxsize=4096)  # a shard checks the same few names on every distinct parameter
def _param_ok(value: str) -> bool:
    return len(value) <= MAX_PARAM_NAME and fullmatch(SHORT_NAME, value) and not keyword.iskeyword(value)


def is_kernel_name(value: Any) -> bool:
    """A bare identifier or ``module:qualname``, at most :data:`MAX_KERNEL_NAME` characters."""
    return fullmatch(KERNEL_NAME, value) and len(value) <= MAX_KERNEL_NAME


def short_name(name: str) -> str:
    """The last identifier of a kernel name: ``pkg.mod:Outer.<locals>.k`` → ``k``; ``k`` → ``k``."""
    return name.rpartition(":")[2].rpartition(".")[2]


def is_qualified(name: str) -> bool:
    """True for ``module:qualname``; False for a bare ``__name__`` (an archive from before qualified names)."""
    return ":" in name


class KernelIndex:
    """:func:`find_kernel` over a fixed list of kernels, with the short names indexed once (an archive's
    lookups: a cold start over many kernels must not scan them all for each)."""

    def __init__(self, kernels: Iterable[str]) -> None:
        self.names = list(kernels)
        self._all = set(self.names)
        self._short: dict[str, list[str]] = {}
        for k in sorted(self.names):
            self._short.setdefault(short_name(k), []).append(k)

    def find(self, name: Any) -> list[str]:
        if not isinstance(name, str):
            return []
        if fullmatch(SHORT_NAME, name):
            return list(self._short.get(name, ()))
        return [name] if name in self._all else []


def find_kernel(name: Any, kernels: Iterable[str]) -> list[str]:
    """The archive's kernels that ``name`` asks for: a qualified name finds itself; a short name finds
    every kernel whose short name it is (``add_kernel`` finds ``pkg.a:add_kernel`` and ``pkg.b:add_kernel``,
    and a bare ``add_kernel`` of an archive from before qualified names, or one imported from a Triton
    cache): the caller refuses more than one, listing them. Empty when nothing fits."""
    return KernelIndex(kernels).find(name)


def kernel_matches(query: str, kernel: str) -> bool:
    """Does a ``-k``/``--kernel`` filter ``query`` select ``kernel``? The same name; a short name selects
    every kernel of that short name (``add_kernel`` selects ``a:add_kernel`` and ``b:add_kernel``); and a
    qualified name selects a bare-named kernel of the same short name (an archive from before qualified
    names does not know the module), so one filter works on an old and a new version of an archive."""
    if query == kernel:
        return True
    if not (isinstance(query, str) and isinstance(kernel, str)):
        return False
    if is_qualified(query) and is_qualified(kernel):
        return False
    return short_name(query) == short_name(kernel)


def select_kernels(queries: Iterable[str] | None, kernels: Iterable[str]) -> list[str]:
    """The ``kernels`` any of ``queries`` selects (:func:`kernel_matches`), in their order; all for none."""
    qs = list(queries or ())
    return [k for k in kernels if not qs or any(kernel_matches(q, k) for q in qs)]


def did_you_mean(query: str, kernels: Iterable[str]) -> str:
    """``; did you mean 'mod:second'?`` for a ``-k`` filter that selects none of ``kernels`` but is close to
    one (by qualified or by short name), else ''."""
    names = sorted(kernels)
    close = difflib.get_close_matches(query, names, n=1)
    if not close:
        shorts = {short_name(k): k for k in names}
        close = [shorts[c] for c in difflib.get_close_matches(short_name(query), list(shorts), n=1)]
    return f"; did you mean '{close[0]}'?" if close else ""
