"""What each parameter of an archived kernel is, across all its variants (shared by the bridges)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import ArgumentError

_FLOATS = frozenset({"fp16", "bf16", "fp32", "fp64"})


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
    roles = []
    for i, name in enumerate(names):
        ps = [v.params[i] for v in variants]
        types = frozenset(p.type for p in ps)
        runtime = [p for p in ps if not (p.is_constexpr and not p.equal_to_1)]
        if not runtime:
            kind = "constexpr"
        else:
            ptr = {p.type.startswith("*") for p in runtime}
            if len(ptr) > 1:
                raise ArgumentError(f"{kernel.name}: parameter {name!r} is a pointer in some variants and a scalar "
                                    f"in others ({sorted(types)})", kernel=kernel.name, param=name)
            rt = {p.type for p in runtime}
            if ptr == {True}:
                kind = "pointer"
            elif rt <= _FLOATS:
                kind = "float"
            elif rt <= {"i1", "u1"}:
                kind = "bool"
            else:
                kind = "int"
        roles.append(Role(name, i, kind, types))
    return roles
