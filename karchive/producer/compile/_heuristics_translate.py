"""Translate a ``@triton.heuristics`` function into the expression data of :mod:`karchive.format.heuristics_expr`.

Only the source is read (``ast``), never a call: the function's body must be one expression over its
single argument (a lambda, or a ``def`` whose body is ``return EXPR``). Names other than the argument are
looked up in the function's closure and globals at build time and must be a JSON scalar (a module
constant), a dtype (stored as its ``str()``, which is what a ``dtype`` probe gives) or one of the
functions the evaluator knows. Anything else is refused with the reason, and the build then needs the
name's values from the spec (and only a call site served by karchive.serve, which runs the library's
function, launches it).
"""

from __future__ import annotations

import ast
import builtins
import inspect
import textwrap
from typing import Any

from ...core import pysource
from ...format.heuristics_expr import CALLS, check
from ...format.probes import NOT_SCALAR, PROBE_ATTRS, PROBE_METHODS, probe_name, scalar

_BINOPS: dict[type, str] = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.Pow: "**",
    ast.LShift: "<<",
    ast.RShift: ">>",
    ast.BitAnd: "&",
    ast.BitOr: "|",
    ast.BitXor: "^",
}
_CMPOPS: dict[type, str] = {
    ast.Eq: "==",
    ast.NotEq: "!=",
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.In: "in",
}
_BUILTIN_CALLS = {getattr(builtins, n): n for n in ("min", "max", "abs", "int", "float", "bool", "len")}


class Untranslatable(Exception):
    """The heuristic is not one expression the evaluator can replay (the message says what is not)."""


def _node_for(fn: Any) -> tuple[ast.expr, str]:
    """(the body expression, the argument's name) of a lambda or single-return function."""
    code = getattr(fn, "__code__", None)
    if code is None:
        raise Untranslatable(f"{type(fn).__name__} is not a Python function")
    if code.co_argcount != 1:
        raise Untranslatable("it does not take exactly one argument (the args dict)")
    try:
        lines, start = inspect.findsource(fn)
    except (OSError, TypeError) as exc:
        raise Untranslatable(f"its source cannot be read ({exc})") from None
    try:
        tree = pysource.parse("".join(lines))
    except SyntaxError:
        tree = pysource.parse(textwrap.dedent("".join(lines)))
    # Candidates on the function's first line; a lambda is told from its neighbours by where its body is.
    positions = {(p[0], p[2]) for p in code.co_positions() if p[0] is not None and p[2] is not None}
    found: list[tuple[ast.expr, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Lambda) and node.lineno == code.co_firstlineno:
            if (node.body.lineno, node.body.col_offset) in positions or not found:
                if len(node.args.args) == 1:
                    found.append((node.body, node.args.args[0].arg))
        elif (
            isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.name == fn.__name__
            and (
                node.lineno == code.co_firstlineno or any(d.lineno == code.co_firstlineno for d in node.decorator_list)
            )
        ):
            body = [b for b in node.body if not (isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant))]
            if len(body) != 1 or not isinstance(body[0], ast.Return) or body[0].value is None:
                raise Untranslatable("its body is not a single 'return EXPR'")
            return body[0].value, node.args.args[0].arg
    exact = [f for f in found if (f[0].lineno, f[0].col_offset) in positions]
    if len(exact) == 1:
        return exact[0]
    if len(found) == 1:
        return found[0]
    raise Untranslatable("its source could not be told apart from the other lambdas on its line")


def translate(fn: Any) -> list:
    """The expression data for heuristic ``fn``; raises :class:`Untranslatable` with the reason."""
    body, param = _node_for(fn)
    expr = _Translator(fn, param).visit(body)
    check(expr, "heuristic")
    return expr


class _Translator:
    def __init__(self, fn: Any, param: str) -> None:
        self.fn = fn
        self.param = param
        closure = {}
        code = fn.__code__
        for name, cell in zip(code.co_freevars, getattr(fn, "__closure__", None) or ()):
            try:
                closure[name] = cell.cell_contents
            except ValueError:
                pass
        self.scope = {**vars(builtins), **getattr(fn, "__globals__", {}), **closure}

    def fail(self, node: ast.AST, why: str) -> Untranslatable:
        return Untranslatable(f"{why}: {ast.unparse(node)[:80]!r}")

    def value_of(self, node: ast.expr) -> Any:
        """A name or attribute chain not rooted at the argument, looked up now (build time)."""
        if isinstance(node, ast.Name):
            if node.id == self.param:
                raise self.fail(node, "the args dict itself is used")
            if node.id not in self.scope:
                raise self.fail(node, "an unknown name")
            return self.scope[node.id]
        if isinstance(node, ast.Attribute):
            return getattr(self.value_of(node.value), node.attr)
        raise self.fail(node, "not a name")

    def rooted(self, node: ast.expr) -> bool:
        return any(isinstance(n, ast.Name) and n.id == self.param for n in ast.walk(node))

    def const(self, value: Any, node: ast.AST) -> list:
        s = scalar(value)
        if s is not NOT_SCALAR:
            return ["const", s]
        if "dtype" in type(value).__name__.lower():  # torch.float16, tl.float16: compared with a dtype probe
            return ["const", str(value)]
        raise self.fail(node, f"a {type(value).__name__} value")

    def visit(self, node: ast.expr) -> list:
        if isinstance(node, ast.Constant):
            return self.const(node.value, node)
        if isinstance(node, (ast.Tuple, ast.List)):
            items = [self.visit(e) for e in node.elts]
            if all(i[0] == "const" for i in items):
                return ["const", [i[1] for i in items]]
            raise self.fail(node, "a tuple of computed values")
        if isinstance(node, ast.Subscript):
            if isinstance(node.value, ast.Name) and node.value.id == self.param:
                if isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
                    return ["arg", node.slice.value]
                raise self.fail(node, "args[...] with a computed name")
            return ["index", self.visit(node.value), self.visit(node.slice)]
        if isinstance(node, ast.Attribute):
            if not self.rooted(node):
                return self.const(self._lookup(node), node)
            if node.attr in PROBE_ATTRS:
                return ["probe", self.visit(node.value), node.attr]
            raise self.fail(node, f"reads .{node.attr} of an argument (only {', '.join(PROBE_ATTRS)} replay)")
        if isinstance(node, ast.Name):
            return self.const(self._lookup(node), node)
        if isinstance(node, ast.BinOp):
            binop = _BINOPS.get(type(node.op))
            if binop is None:
                raise self.fail(node, "an unsupported operator")
            return [binop, self.visit(node.left), self.visit(node.right)]
        if isinstance(node, ast.UnaryOp):
            if isinstance(node.op, ast.Not):
                return ["not", self.visit(node.operand)]
            if isinstance(node.op, ast.USub):
                return ["neg", self.visit(node.operand)]
            if isinstance(node.op, ast.UAdd):
                return self.visit(node.operand)
            raise self.fail(node, "an unsupported unary operator")
        if isinstance(node, ast.BoolOp):
            return ["and" if isinstance(node.op, ast.And) else "or", *[self.visit(v) for v in node.values]]
        if isinstance(node, ast.IfExp):
            return ["if", self.visit(node.test), self.visit(node.body), self.visit(node.orelse)]
        if isinstance(node, ast.Compare):
            parts = []
            left = node.left
            for cmp, right in zip(node.ops, node.comparators):
                if isinstance(cmp, (ast.Is, ast.IsNot)):
                    if not (isinstance(right, ast.Constant) and right.value is None):
                        raise self.fail(node, "'is' with something other than None")
                    parts.append(["is_none" if isinstance(cmp, ast.Is) else "not_none", self.visit(left)])
                elif isinstance(cmp, ast.NotIn):
                    parts.append(["not", ["in", self.visit(left), self.visit(right)]])
                elif type(cmp) in _CMPOPS:
                    parts.append([_CMPOPS[type(cmp)], self.visit(left), self.visit(right)])
                else:
                    raise self.fail(node, "an unsupported comparison")
                left = right
            return parts[0] if len(parts) == 1 else ["and", *parts]
        if isinstance(node, ast.Call):
            return self.call(node)
        raise self.fail(node, f"a {type(node).__name__} expression")

    def _lookup(self, node: ast.expr) -> Any:
        try:
            return self.value_of(node)
        except AttributeError:
            raise self.fail(node, "an attribute that does not exist") from None

    def call(self, node: ast.Call) -> list:
        if node.keywords:
            raise self.fail(node, "a call with keyword arguments")
        func = node.func
        # args.get("name"[, default])
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == self.param:
            if (
                func.attr == "get"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
                and len(node.args) <= 2
            ):
                default = self.visit(node.args[1]) if len(node.args) == 2 else ["const", None]
                return ["get", node.args[0].value, default]
            raise self.fail(node, f"args.{func.attr}()")
        # a probe method on an argument: x.numel(), x.stride(0) ...
        if isinstance(func, ast.Attribute) and self.rooted(func.value):
            if func.attr not in PROBE_METHODS:
                raise self.fail(node, f"calls .{func.attr}() on an argument")
            consts = [a.value for a in node.args if isinstance(a, ast.Constant)]
            spelling = probe_name(func.attr, consts) if len(consts) == len(node.args) else None
            if spelling is None:
                raise self.fail(node, "a probe with computed arguments")
            return ["probe", self.visit(func.value), spelling]
        target = self._lookup(func)
        name = _BUILTIN_CALLS.get(target) if _hashable(target) else None
        if name is None:
            fname = getattr(target, "__name__", "")
            module = getattr(target, "__module__", "") or ""
            if fname in ("next_power_of_2", "cdiv") and module.split(".")[0] == "triton":
                name = fname
        if name is None or name not in CALLS:
            raise self.fail(node, "calls a function the evaluator does not know")
        return ["call", name, *[self.visit(a) for a in node.args]]


def _hashable(obj: Any) -> bool:
    try:
        hash(obj)
    except TypeError:
        return False
    return True
