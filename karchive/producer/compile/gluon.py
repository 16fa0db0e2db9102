"""Gluon kernels (``triton.experimental.gluon.jit``): which ``ASTSource`` compiles them ahead of time.

Gluon's JIT compiles through ``GluonASTSource``, which sets the module attributes (``ttg.num-warps``,
``ttg.target``...) its explicit layouts are verified against; a plain ``ASTSource`` fails on them
("Could not determine the number of warps per CTA"). The JIT picks it itself, so capture needs nothing.
"""

from __future__ import annotations

from typing import Any


def ast_source_class(fn: Any) -> Any:
    """``GluonASTSource`` for a Gluon kernel (where the installed Triton has Gluon), else ``ASTSource``."""
    from triton.compiler import ASTSource

    is_gluon = getattr(fn, "is_gluon", None)
    if callable(is_gluon) and is_gluon():
        from triton.experimental.gluon._runtime import GluonASTSource

        return GluonASTSource
    return ASTSource
