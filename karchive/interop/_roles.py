"""What each parameter of an archived kernel is to a bridge (torch.library, JAX), across all its variants.

The classification itself has one owner, the launch path's plan (:func:`karchive.runtime.launch._plan.make_plan`:
pointer, int, float, value or mixed per position, over every variant); this module only names those roles
the way the bridges declare parameters, and refuses what no bridge can type.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import ArgumentError, InteropError
from ..runtime.launch._plan import FLOAT, INT, MIXED, PTR, VALUE, make_plan

__all__ = ["Role", "kernel_roles"]

#: The plan's role -> the bridge's kind (an int role over i1/u1 only is a bool).
_KINDS = {PTR: "pointer", INT: "int", FLOAT: "float", VALUE: "constexpr"}


@dataclass(frozen=True)
class Role:
    name: str
    index: int
    kind: str  # "pointer" | "int" | "float" | "bool" | "constexpr"
    types: frozenset  # Triton types seen for it across variants ("constexpr" included)


def kernel_roles(kernel: Any) -> list[Role]:
    """One :class:`Role` per parameter of ``kernel`` (anything with ``.variants`` and ``.param_names``).

    A parameter is ``constexpr`` only if every variant fixed it at compile time (``== 1`` specialised
    ints stay ``int``: the caller still passes them). Variants that disagree on whether a parameter is a
    pointer are refused: no bridge can give that parameter one type.
    """
    variants = getattr(kernel, "variants", None)
    names = getattr(kernel, "param_names", None)
    if not variants or names is None:
        raise ArgumentError(f"expected a karchive kernel (karchive.open(path).kernel(name)), got {type(kernel).__name__}",
                            kernel=None, param="kernel")
    kernel_name = getattr(kernel, "name", "kernel")
    for i, name in enumerate(names):
        if any(v.params[i].type.startswith("tensordesc") for v in variants):
            raise InteropError(f"{kernel_name}: parameter {name!r} is a host tensor descriptor; the torch and JAX "
                               "bridges do not pass descriptors: launch it with "
                               "kernel[grid](karchive.TensorDescriptor(x, block_shape=...), ...)")
    plan = make_plan(kernel_name, variants)
    roles = []
    for i, name in enumerate(names):
        types = frozenset(v.params[i].type for v in variants)
        role = plan.params[i].role
        if role == MIXED:
            # Fixed at compile time in some variants only: the bridge passes it where it is passed, so the
            # variants that take it decide (the plan over them alone).
            passed = [v for v in variants if not (v.params[i].is_constexpr and not v.params[i].equal_to_1)]
            role = make_plan(kernel_name, passed).params[i].role
        if role == MIXED:  # still two kinds among the variants that take it: a pointer and a scalar, or int and float
            if any(v.params[i].type.startswith("*") for v in variants):
                raise ArgumentError(f"{kernel_name}: parameter {name!r} is a pointer in some variants and a scalar "
                                    f"in others ({sorted(types)})", kernel=kernel_name, param=name)
            role = INT  # an int in some variants, a float in others: the caller's number goes through as given
        kind = _KINDS[role]
        if kind == "int" and {t for t in types if t != "constexpr"} <= {"i1", "u1"}:
            kind = "bool"
        roles.append(Role(name, i, kind, types))
    return roles
