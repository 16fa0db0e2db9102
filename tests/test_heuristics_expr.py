"""Heuristics stored as expression data: translated from source at build time, evaluated without Python
code at run time (issue 23, item 2). Translation needs no Triton for plain lambdas; the evaluator none."""

from __future__ import annotations

import itertools
import json
import math

import pytest

from karchive.errors import SchemaError
from karchive.format.heuristics_expr import ExprError, check, evaluate, is_boolean
from karchive.producer.compile._heuristics_translate import Untranslatable, translate

LIMIT = 4096
TABLE = {"a": 1}


class Dt:
    def __init__(self, s: str) -> None:
        self.s = s

    def __str__(self) -> str:
        return self.s

    def __eq__(self, other: object) -> bool:  # torch.dtype compares with its own kind; str() is what probes see
        return str(self) == str(other)

    __hash__ = None  # type: ignore[assignment]


class T:
    def __init__(self, dtype: str, shape: tuple) -> None:
        self.dtype, self.shape = Dt(dtype), shape

    def stride(self, i: int) -> int:
        return 1 if i == len(self.shape) - 1 else self.shape[-1]

    def numel(self) -> int:
        return math.prod(self.shape)


def _def_style(args):
    """Docstrings are fine."""
    return args.get("G", None) is None or args["x"].shape[0] > 2


FUNCTIONS = [
    lambda args: args["n"] % args["BLOCK"] == 0,
    lambda args: 8 if args["n"] >= LIMIT and args["x"].stride(1) == 1 else 4,
    lambda args: args["b"] is not None,
    lambda args: min(max(args["n"] // 64, 1), 16) * 2**2,
    lambda args: args["x"].numel() <= LIMIT < args["n"] or not args["flag"],
    lambda args: args["n"] in (1000, 4096),
    lambda args: -args["n"] if args["flag"] else args["n"] << 1,
    lambda args: args["x"].shape[-1] * args["x"].shape[0],
    _def_style,
]


@pytest.mark.parametrize("fn", FUNCTIONS)
def test_translated_expressions_agree_with_python(fn):
    expr = translate(fn)
    check(expr, "e")
    for n, flag, b, g, shape in itertools.product(
        (1, 1000, 4096, 8192), (True, False), (None, 0), (None, 5), ((4, 8), (1, 4096))
    ):
        named = {"n": n, "BLOCK": 128, "flag": flag, "b": b, "x": T("torch.float16", shape)}
        if g is not None:
            named["G"] = g
        assert evaluate(expr, named) == fn(named), (fn, named)


def test_boolean_expressions_are_told_apart():
    assert is_boolean(translate(FUNCTIONS[0])) and is_boolean(translate(FUNCTIONS[2]))
    assert not is_boolean(translate(FUNCTIONS[1])) and not is_boolean(translate(FUNCTIONS[3]))


def test_next_power_of_2_and_cdiv_from_triton():
    triton = pytest.importorskip("triton")
    e = translate(lambda args: triton.next_power_of_2(args["N"]) // triton.cdiv(args["N"], 64))
    for n in (1, 2, 3, 100, 4096, 4097):
        assert evaluate(e, {"N": n}) == triton.next_power_of_2(n) // triton.cdiv(n, 64)


@pytest.mark.parametrize(
    "fn,why",
    [
        (lambda args: isinstance(args["x"], int), "calls a function the evaluator does not know"),
        (lambda args: TABLE[args["n"]], "a dict value"),
        (lambda args: args["x"].data_ptr() % 16 == 0, "calls .data_ptr()"),
        (lambda args: args["x"].device.type == "cuda", "reads .type of an argument"),
        (lambda args: [a for a in args], "ListComp"),
        (lambda a, b: a, "exactly one argument"),
    ],
)
def test_what_cannot_be_replayed_is_refused_with_the_reason(fn, why):
    with pytest.raises(Untranslatable, match=why):
        translate(fn)


def test_two_lambdas_on_one_line_are_told_apart():
    h = {"A": lambda args: args["n"] + 1, "B": lambda args: args["n"] * 3}
    assert translate(h["A"]) == ["+", ["arg", "n"], ["const", 1]]
    assert translate(h["B"]) == ["*", ["arg", "n"], ["const", 3]]


@pytest.mark.parametrize(
    "bad",
    [
        ["exec", "x"],
        ["call", "eval", ["const", 1]],
        "n",
        [],
        [1, 2],
        ["arg", 3],
        ["probe", ["arg", "x"], "__class__"],
        ["const", {"a": 1}],
        ["+", ["const", 1]],
        ["call", "min"],
        ["arg", "__class__.x"],
        ["get", "a b", ["const", 1]],
    ],
)
def test_hostile_trees_are_refused(bad):
    with pytest.raises(SchemaError):
        check(bad, "e")


def test_size_depth_and_number_bounds():
    deep: list = ["const", 1]
    for _ in range(40):
        deep = ["neg", deep]
    with pytest.raises(SchemaError, match="deeper"):
        check(deep, "e")
    wide = ["and"] + [["const", True]] * 300
    with pytest.raises(SchemaError, match="nodes"):
        check(wide, "e")
    with pytest.raises(ExprError):
        evaluate(["**", ["const", 2], ["**", ["const", 2], ["const", 60]]], {})
    with pytest.raises(ExprError):
        evaluate(["<<", ["const", 1], ["const", 10**6]], {})
    with pytest.raises(ExprError, match="not passed"):
        evaluate(["arg", "n"], {})
    assert evaluate(["get", "n", ["const", 7]], {}) == 7
    with pytest.raises(ExprError, match="probe"):
        evaluate(["probe", ["arg", "x"], "stride(0)"], {"x": object()})
    assert evaluate(["*", ["arg", "eps"], ["const", 2]], {"eps": math.inf}) == math.inf


def test_records_with_hostile_expressions_are_refused_when_parsed():
    from karchive.format.heuristics import parse_record

    good = {"kernel": "k", "names": ["EVEN"], "cases": {}, "exprs": {"EVEN": ["==", ["arg", "n"], ["const", 1]]}}
    assert parse_record(good, "h").exprs["EVEN"][0] == "=="
    for bad in (
        {**good, "exprs": {"EVEN": ["exec", "rm -rf /"]}},
        {**good, "exprs": {"OTHER": ["const", 1]}},
        {**good, "exprs": ["EVEN"]},
    ):
        with pytest.raises(SchemaError):
            parse_record(bad, "h")


def _doubling(leaf: list, times: int) -> list:
    """``x + x`` nested ``times`` deep: 2 ** times copies of ``leaf`` (2 ** (times + 1) - 1 nodes)."""
    node = leaf
    for _ in range(times):
        node = ["+", node, node]
    return json.loads(json.dumps(node))  # a tree, as a manifest gives it: no shared subtrees


@pytest.mark.parametrize(
    "expr",
    [
        ["*", ["const", "x"], ["const", 1500000000]],  # issue 34: a 1.5 GB string
        ["*", ["const", 1500000000], ["const", "x"]],
        ["*", ["const", [0]], ["const", 400000000]],  # issue 34: a 3.2 GB list
        ["*", ["const", 400000000], ["const", [0, 1]]],
        ["*", ["const", "xy"], ["*", ["const", 40000], ["const", 40000]]],
        ["%", ["const", "%0999999999d"], ["const", 1]],  # printf formatting: a GB from a short template
        ["%", ["const", "%s"], ["const", "x"]],
        ["+", ["const", "x" * 3000], ["const", "y" * 3000]],
        ["+", ["const", list(range(40))], ["const", list(range(40))]],
    ],
)
def test_sequences_an_expression_makes_are_bounded_before_they_are_made(expr):
    """Issue 34, item 4: only integers were bounded; a string or list repetition allocated gigabytes (and
    a ``%`` format builds a string from a width). Every value an expression makes is bounded *before*
    it is made: the evaluation refuses with ExprError and allocates next to nothing."""
    import tracemalloc

    check(expr, "e")  # a well-formed tree: the bound is the evaluator's, on values
    tracemalloc.start()
    try:
        with pytest.raises(ExprError, match="longer than|format"):
            evaluate(expr, {})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, peak


def test_doubling_tree_is_bounded():
    """``x + x`` nested 7 deep (255 nodes, the most a tree may have) makes 128 copies of its leaf: with a
    leaf of 1000 characters or 40 items, past the bounds; with a leaf past them, refused when read."""
    from karchive.format.heuristics_expr import MAX_CHARS, MAX_ITEMS

    for leaf in (["const", "x" * 1000], ["const", list(range(40))]):
        expr = _doubling(leaf, 7)
        check(expr, "e")
        with pytest.raises(ExprError, match="longer than"):
            evaluate(expr, {})
    for leaf in (["const", "x" * (MAX_CHARS + 1)], ["const", [0] * (MAX_ITEMS + 1)]):
        with pytest.raises(SchemaError, match="longer than|scalar"):
            check(leaf, "e")


def test_values_inside_the_bounds_still_evaluate():
    """The bounds refuse only what no heuristic needs: short strings and lists still combine."""
    from karchive.format.heuristics_expr import MAX_CHARS, MAX_ITEMS

    assert (
        evaluate(["+", ["const", "torch."], ["probe", ["arg", "x"], "dtype"]], {"x": T("float16", (2, 3))})
        == "torch.float16"
    )
    assert evaluate(["*", ["const", "ab"], ["const", MAX_CHARS // 2]], {}) == "ab" * (MAX_CHARS // 2)
    assert evaluate(["*", ["const", [0]], ["const", MAX_ITEMS]], {}) == [0] * MAX_ITEMS
    assert evaluate(["+", ["probe", ["arg", "x"], "shape"], ["const", [4]]], {"x": T("float16", (2, 3))}) == [2, 3, 4]
    assert evaluate(["*", ["const", "x"], ["const", -5]], {}) == ""
    assert evaluate(["%", ["const", 7], ["const", 3]], {}) == 1
