"""What each parameter of an archived kernel is to a bridge (torch.library, JAX), across all its variants.

The classification itself has one owner, the launch path's plan (:func:`karchive.runtime.launch._plan.make_plan`:
pointer, int, float, value or mixed per position, over every variant); this module only names those roles
the way the bridges declare parameters, and refuses what no bridge can type.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ArgumentError
from ..runtime.launch._plan import FLOAT, INT, MIXED, PTR, VALUE, make_plan

__all__ = ["DESCRIPTOR_OPTIONS", "Role", "descriptor_options", "kernel_roles"]

#: The plan's role -> the bridge's kind (an int role over i1/u1 only is a bool).
_KINDS = {PTR: "pointer", INT: "int", FLOAT: "float", VALUE: "constexpr"}
#: What a bridge's ``descriptors`` may set per descriptor parameter (karchive.TensorDescriptor's keyword options).
DESCRIPTOR_OPTIONS = (
    "block_shape",
    "padding",
    "round_f32_to_tf32",
    "pixel_box_lower_corner",
    "pixel_box_upper_corner",
    "element_strides",
)


@dataclass(frozen=True)
class Role:
    name: str
    index: int
    kind: str  # "pointer" | "int" | "float" | "bool" | "constexpr" | "tensordesc" (a host tensor descriptor)
    types: frozenset  # Triton types seen for it across variants ("constexpr" included)


def kernel_roles(kernel: Any) -> list[Role]:
    """One :class:`Role` per parameter of ``kernel`` (anything with ``.variants`` and ``.param_names``).

    A parameter is ``constexpr`` only if every variant fixed it at compile time (``== 1`` specialised
    ints stay ``int``: the caller still passes them). A host tensor descriptor (``tensordesc<...>`` in every
    variant) is ``tensordesc``: the torch bridge takes its tensor, the JAX bridge its array (a decomposed
    descriptor as a buffer and scalars; a TMA map jaxlib cannot pass, refused). Variants that disagree on whether a parameter is a pointer (or a descriptor) are refused: no
    bridge can give that parameter one type.
    """
    variants = getattr(kernel, "variants", None)
    names = getattr(kernel, "param_names", None)
    if not variants or names is None:
        raise ArgumentError(
            f"expected a karchive kernel (karchive.open(path).kernel(name)), got {type(kernel).__name__}",
            kernel=None,
            param="kernel",
        )
    kernel_name = getattr(kernel, "name", "kernel")
    descs = set()
    for i, name in enumerate(names):
        is_desc = [v.params[i].type.startswith("tensordesc") for v in variants]
        if any(is_desc) and not all(is_desc):
            raise ArgumentError(
                f"{kernel_name}: parameter {name!r} is a host tensor descriptor in some variants and "
                "not in others; no bridge can give it one type",
                kernel=kernel_name,
                param=name,
            )
        if all(is_desc):
            descs.add(i)
    plan = make_plan(kernel_name, variants)
    roles = []
    for i, name in enumerate(names):
        types = frozenset(v.params[i].type for v in variants)
        if i in descs:  # a tensor to the bridges; each decides whether it can pass a descriptor
            roles.append(Role(name, i, "tensordesc", types))
            continue
        role = plan.params[i].role
        if role == MIXED:
            # Fixed at compile time in some variants only: the bridge passes it where it is passed, so the
            # variants that take it decide (the plan over them alone).
            passed = [v for v in variants if not (v.params[i].is_constexpr and not v.params[i].equal_to_1)]
            role = make_plan(kernel_name, passed).params[i].role
        if role == MIXED:  # still two kinds among the variants that take it: a pointer and a scalar, or int and float
            if any(v.params[i].type.startswith("*") for v in variants):
                raise ArgumentError(
                    f"{kernel_name}: parameter {name!r} is a pointer in some variants and a scalar "
                    f"in others ({sorted(types)})",
                    kernel=kernel_name,
                    param=name,
                )
            role = INT  # an int in some variants, a float in others: the caller's number goes through as given
        kind = _KINDS[role]
        if kind == "int" and {t for t in types if t != "constexpr"} <= {"i1", "u1"}:
            kind = "bool"
        roles.append(Role(name, i, kind, types))
    return roles


def descriptor_options(kernel_name: str, desc_names: Sequence[str], descriptors: Any) -> dict[str, dict[str, Any]]:
    """A bridge's ``descriptors`` argument as keyword options of karchive.TensorDescriptor per descriptor
    parameter (``{}``: the variant's block, no options), checked against the parameters and the options."""

    def refuse(param: str, msg: str) -> ArgumentError:
        return ArgumentError(f"{kernel_name}: {msg}", kernel=kernel_name, param=param)

    out: dict[str, dict[str, Any]] = {n: {} for n in desc_names}
    if descriptors is None:
        return out
    if not isinstance(descriptors, Mapping):
        raise refuse(
            "descriptors",
            f"descriptors must map descriptor parameter names to a block shape or "
            f"a dict of TensorDescriptor options, got {type(descriptors).__name__}",
        )
    for n, spec in descriptors.items():
        if n not in out:
            raise refuse(n, f"descriptors names {n!r}, which is not a tensor-descriptor parameter ({list(desc_names)})")
        if spec is None:
            continue
        if isinstance(spec, Mapping):
            bad = [k for k in spec if k not in DESCRIPTOR_OPTIONS]
            if bad:
                raise refuse(
                    n, f"descriptors[{n!r}] has unknown option(s) {bad} (known: {', '.join(DESCRIPTOR_OPTIONS)})"
                )
            out[n] = dict(spec)
        elif isinstance(spec, (list, tuple)) and all(isinstance(b, int) and not isinstance(b, bool) for b in spec):
            out[n] = {"block_shape": list(spec)}
        else:
            raise refuse(
                n,
                f"descriptors[{n!r}] must be a block shape (list of ints) or a dict of "
                f"TensorDescriptor options, got {spec!r}",
            )
    return out
