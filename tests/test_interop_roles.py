"""The bridges' parameter roles come from the launch path's plan (one classification, runtime/plan.py).

interop/_roles.py used to classify parameters itself; now it names the plan's roles. These tests pin the
kinds the bridges rely on, and check on every two-variant combination of parameter forms that the result is
the one the bridges' own classification gave before (kept below as the reference).
"""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest

from karchive.errors import ArgumentError
from karchive.format.manifest import Param
from karchive.interop._roles import kernel_roles

FORMS = {
    "ptr": Param("x", "*fp32"),
    "ptr16": Param("x", "*fp16", divisibility=16),
    "i32": Param("x", "i32"),
    "i32:16": Param("x", "i32", divisibility=16),
    "i64": Param("x", "i64"),
    "eq1": Param("x", "i32", constexpr=1, is_constexpr=True, equal_to_1=True),
    "i1": Param("x", "i1"),
    "fp32": Param("x", "fp32"),
    "constexpr": Param("x", "constexpr", constexpr=128, is_constexpr=True),
}


def kernel(*forms: str) -> SimpleNamespace:
    """A kernel of one parameter ``x`` whose variants take it in the given forms."""
    return SimpleNamespace(name="k", param_names=["x"], variants=[SimpleNamespace(params=[FORMS[f]]) for f in forms])


def reference_kind(variants: list) -> str:
    """interop/_roles.py's own classification before it used the plan (the behaviour to keep)."""
    ps = [v.params[0] for v in variants]
    runtime = [p for p in ps if not (p.is_constexpr and not p.equal_to_1)]
    if not runtime:
        return "constexpr"
    ptr = {p.type.startswith("*") for p in runtime}
    if len(ptr) > 1:
        return "refused"
    rt = {p.type for p in runtime}
    if ptr == {True}:
        return "pointer"
    if rt <= {"fp16", "bf16", "fp32", "fp64"}:
        return "float"
    if rt <= {"i1", "u1"}:
        return "bool"
    return "int"


@pytest.mark.parametrize(
    ("forms", "kind"),
    [
        (("ptr", "ptr16"), "pointer"),
        (("i32", "i32:16", "eq1"), "int"),  # == 1 specialised ints are still passed by the caller
        (("i1",), "bool"),
        (("fp32",), "float"),
        (("constexpr",), "constexpr"),
        (("constexpr", "ptr16"), "pointer"),  # constexpr in one variant only: the variants that take it decide
        (("constexpr", "i1"), "bool"),
    ],
)
def test_the_kinds_the_bridges_declare(forms, kind):
    assert kernel_roles(kernel(*forms))[0].kind == kind


def test_a_parameter_that_is_a_pointer_in_one_variant_and_a_scalar_in_another_is_refused():
    with pytest.raises(ArgumentError, match="pointer in some variants") as err:
        kernel_roles(kernel("ptr", "i32"))
    assert err.value.kernel == "k" and err.value.param == "x"


def test_every_combination_of_two_variants_keeps_the_bridges_previous_roles():
    checked = 0
    for a, b in itertools.product(FORMS, repeat=2):
        k = kernel(a, b)
        want = reference_kind(k.variants)
        if want == "refused":
            with pytest.raises(ArgumentError):
                kernel_roles(k)
        else:
            role = kernel_roles(k)[0]
            assert role.kind == want, (a, b)
            assert role.types == frozenset(p.type for p in (FORMS[a], FORMS[b]))
        checked += 1
    assert checked == len(FORMS) ** 2


def test_not_a_kernel_is_an_argument_error():
    with pytest.raises(ArgumentError, match="expected a karchive kernel"):
        kernel_roles(object())
