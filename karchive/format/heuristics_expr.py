"""Heuristics as data: a small expression language an archive stores instead of Python code.

An ahead-of-time build never sees a call, so it cannot record cases (:mod:`.heuristics`); instead the
producer translates each ``@triton.heuristics`` function whose body is one expression over its ``args``
(``lambda args: args["n"] % args["BLOCK"] == 0``, ``triton.next_power_of_2(args["N"])``, ``8 if
args["x"].dtype == torch.float32 else 4`` ...) into a JSON tree that this module evaluates. Nothing is
executed from the archive: the evaluator knows a closed set of operators, bounds the tree's size and
depth and the size of every value it makes (numbers below 2**:data:`MAX_BITS`, strings of at most
:data:`MAX_CHARS` characters, lists of at most :data:`MAX_ITEMS` items: each checked *before* the value
is made, so ``"x" * 1500000000`` costs nothing), and reads arguments only through the probes of §6.4.

A node is a list whose first item names it (spec/FORMAT.md §6.4)::

    ["arg", NAME]                   args[NAME] (absent: the expression has no value for this call)
    ["get", NAME, NODE]             args.get(NAME, default)
    ["const", SCALAR | [SCALAR..]]  a literal
    ["probe", NODE, PROBE]          a probe of §6.4 on an argument: "dtype", "shape", "numel()", "stride(0)" ...
    ["index", NODE, NODE]           x[i] on a list (a shape)
    [OP, NODE, NODE]                OP in + - * / // % ** << >> & | ^ == != < <= > >= in
    ["and", NODE...] ["or", NODE...] ["not", NODE] ["neg", NODE]
    ["is_none", NODE] ["not_none", NODE]
    ["if", COND, THEN, ELSE]
    ["call", FN, NODE...]           FN in next_power_of_2 cdiv min max abs int float bool len
"""

from __future__ import annotations

import numbers
import operator
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import SchemaError
from .names import is_param_name
from .probes import ABSENT, NOT_SCALAR, run_probe, scalar
from .probes import PROBE as _PROBE

__all__ = [
    "BINARY",
    "BOOLEAN",
    "CALLS",
    "ExprError",
    "MAX_BITS",
    "MAX_CHARS",
    "MAX_DEPTH",
    "MAX_ITEMS",
    "MAX_NODES",
    "check",
    "evaluate",
    "is_boolean",
]

MAX_NODES = 256
MAX_DEPTH = 32
#: Numbers an expression makes stay below 2**MAX_BITS (a hostile ``2 ** 2 ** 60`` is refused, not computed).
MAX_BITS = 128
#: Strings an expression holds or makes stay at most this long (dtype names, a few joined).
MAX_CHARS = 4096
#: Lists an expression holds or makes stay at most this long (shapes and strides: a probe's list of scalars).
MAX_ITEMS = 64
_SEQUENCES = (str, list, tuple)


class ExprError(Exception):
    """An expression has no value for this call (an absent argument, a type it cannot combine)."""


def _next_power_of_2(n: Any) -> Any:
    """``triton.next_power_of_2``, step for step, so a numpy integer stays one (Triton's key then holds its dtype)."""
    if not isinstance(n, numbers.Integral) or isinstance(n, bool) or not -(1 << 64) < int(n) < (1 << 64):
        raise ExprError("next_power_of_2 of a non-integer or of more than 64 bits")
    n -= 1
    for shift in (1, 2, 4, 8, 16, 32):
        n |= n >> shift
    n += 1
    return n


def _cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


def _bounded(v: Any) -> Any:
    if isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > MAX_BITS:
        raise ExprError(f"a number of more than {MAX_BITS} bits")
    if isinstance(v, _SEQUENCES):
        err = _too_long(v, len(v))
        if err is not None:
            raise err
    return v


def _too_long(seq: Any, n: int) -> ExprError | None:
    """The error for a string or list of ``n`` items, if ``n`` is past its bound (None: it may be made)."""
    limit = MAX_CHARS if isinstance(seq, str) else MAX_ITEMS
    return ExprError(f"a {'string' if isinstance(seq, str) else 'list'} longer than {limit}") if n > limit else None


def _sized(head: str, a: Any, b: Any) -> None:
    """Refuse, before it is made, a value of ``a head b`` past the bounds: a repetition (``"x" * 10**9``),
    a concatenation, and ``%`` formatting of a string (``"%0999999999d" % 1``: expressions do not format)."""
    err = None
    if head == "*":
        seq, times = (a, b) if isinstance(a, _SEQUENCES) else (b, a)
        if isinstance(seq, _SEQUENCES) and isinstance(times, numbers.Integral):
            err = _too_long(seq, len(seq) * max(int(times), 0))
    elif head == "+" and isinstance(a, _SEQUENCES) and isinstance(b, _SEQUENCES):
        err = _too_long(a, len(a) + len(b))
    elif head == "%" and isinstance(a, (str, bytes)):
        err = ExprError("% on a string is printf formatting, which an expression does not do")
    if err is not None:
        raise err


def _pow(a: Any, b: Any) -> Any:
    if isinstance(b, int) and not isinstance(b, bool) and abs(b) > MAX_BITS:
        raise ExprError("an exponent out of range")
    if isinstance(a, int) and isinstance(b, int) and b > 0 and abs(a) > 1 and a.bit_length() * b > MAX_BITS:
        raise ExprError(f"a number of more than {MAX_BITS} bits")
    return a**b


def _shift(a: Any, b: Any) -> Any:
    if not isinstance(b, int) or not 0 <= b <= MAX_BITS:
        raise ExprError("a shift out of range")
    return a << b


BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": operator.truediv,
    "//": operator.floordiv,
    "%": operator.mod,
    "**": _pow,
    "<<": _shift,
    ">>": operator.rshift,
    "&": operator.and_,
    "|": operator.or_,
    "^": operator.xor,
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "in": lambda a, b: a in b,
}
CALLS: dict[str, tuple[Callable[..., Any], int, int]] = {  # name -> (function, min args, max args)
    "next_power_of_2": (_next_power_of_2, 1, 1),
    "cdiv": (_cdiv, 2, 2),
    "min": (min, 1, 8),
    "max": (max, 1, 8),
    "abs": (abs, 1, 1),
    "int": (int, 1, 1),
    "float": (float, 1, 1),
    "bool": (bool, 1, 1),
    "len": (len, 1, 1),
}
#: Operators whose value is a boolean whatever their operands (a build compiles both values of such a name).
BOOLEAN = frozenset({"==", "!=", "<", "<=", ">", ">=", "in", "and", "or", "not", "is_none", "not_none"})


def is_boolean(node: Any) -> bool:
    """Is the expression's value always True or False (so its two values are all a build needs)?"""
    if not isinstance(node, list) or not node:
        return False
    head = node[0]
    if head == "const":
        return isinstance(node[1], bool)
    if head in ("and", "or"):
        return all(is_boolean(n) for n in node[1:])
    if head == "if":
        return is_boolean(node[2]) and is_boolean(node[3])
    if head == "call":
        return node[1] == "bool"
    return head in BOOLEAN


def check(node: Any, where: str) -> None:
    """Refuse a malformed or oversized tree (an archive is untrusted input): ``SchemaError``."""
    count = [0]

    def walk(n: Any, depth: int, w: str) -> None:
        count[0] += 1
        if count[0] > MAX_NODES:
            raise SchemaError(f"{where}: more than {MAX_NODES} nodes", where=where)
        if depth > MAX_DEPTH:
            raise SchemaError(f"{where}: nested deeper than {MAX_DEPTH}", where=where)
        if not isinstance(n, list) or not n or not isinstance(n[0], str):
            raise SchemaError(f"{w}: a node is a list that starts with its operator", where=w)
        head, rest = n[0], n[1:]
        if head == "arg":
            if len(rest) != 1 or not is_param_name(rest[0]):
                raise SchemaError(f"{w}: ['arg', NAME] (NAME a parameter name)", where=w)
        elif head == "get":
            if len(rest) != 2 or not is_param_name(rest[0]):
                raise SchemaError(f"{w}: ['get', NAME, DEFAULT] (NAME a parameter name)", where=w)
            walk(rest[1], depth + 1, w + "[2]")
        elif head == "const":
            if len(rest) != 1 or scalar(rest[0]) is NOT_SCALAR:
                raise SchemaError(f"{w}: ['const', a JSON scalar or list of scalars]", where=w)
            if isinstance(rest[0], _SEQUENCES) and _too_long(rest[0], len(rest[0])) is not None:
                raise SchemaError(f"{w}: {_too_long(rest[0], len(rest[0]))}", where=w)
        elif head == "probe":
            if len(rest) != 2 or not isinstance(rest[1], str) or not _PROBE.match(rest[1]):
                raise SchemaError(f"{w}: ['probe', NODE, one of the probes of spec/FORMAT.md §6.4]", where=w)
            walk(rest[0], depth + 1, w + "[1]")
        elif head in BINARY or head == "index":
            if len(rest) != 2:
                raise SchemaError(f"{w}: [{head!r}, NODE, NODE]", where=w)
            for i, r in enumerate(rest):
                walk(r, depth + 1, f"{w}[{i + 1}]")
        elif head in ("and", "or"):
            if len(rest) < 2:
                raise SchemaError(f"{w}: [{head!r}, NODE, NODE, ...]", where=w)
            for i, r in enumerate(rest):
                walk(r, depth + 1, f"{w}[{i + 1}]")
        elif head in ("not", "neg", "is_none", "not_none"):
            if len(rest) != 1:
                raise SchemaError(f"{w}: [{head!r}, NODE]", where=w)
            walk(rest[0], depth + 1, w + "[1]")
        elif head == "if":
            if len(rest) != 3:
                raise SchemaError(f"{w}: ['if', COND, THEN, ELSE]", where=w)
            for i, r in enumerate(rest):
                walk(r, depth + 1, f"{w}[{i + 1}]")
        elif head == "call":
            if not rest or rest[0] not in CALLS:
                raise SchemaError(f"{w}: ['call', one of {sorted(CALLS)}, ...]", where=w)
            _fn, low, high = CALLS[rest[0]]
            if not low <= len(rest) - 1 <= high:
                raise SchemaError(f"{w}: {rest[0]} takes {low} to {high} arguments", where=w)
            for i, r in enumerate(rest[1:]):
                walk(r, depth + 1, f"{w}[{i + 2}]")
        else:
            raise SchemaError(f"{w}: unknown operator {head!r}", where=w)

    walk(node, 0, where)


def evaluate(node: list, named: Mapping[str, Any]) -> Any:
    """The expression's value on a call's named arguments; ``ExprError`` if it has none. ``node`` must have
    passed :func:`check`. The value is a scalar of the type Python gives (a numpy integer argument keeps
    its type through arithmetic, as in Triton, where it then adds its dtype to the autotune key)."""
    value = _eval(node, named)
    if scalar(value) is NOT_SCALAR and not isinstance(value, float):
        raise ExprError(f"the value is a {type(value).__name__}, not a scalar")
    return value


def _eval(n: list, named: Mapping[str, Any]) -> Any:
    head = n[0]
    try:
        if head == "const":
            return n[1]
        if head == "arg":
            value = named.get(n[1], ABSENT)
            if value is ABSENT:
                raise ExprError(f"argument {n[1]!r} was not passed")
            return _arg(value)
        if head == "get":
            value = named.get(n[1], ABSENT)
            return _eval(n[2], named) if value is ABSENT else _arg(value)
        if head == "probe":
            obj = _eval(n[1], named)
            if obj is None or scalar(obj) is not NOT_SCALAR:
                raise ExprError(f"probe {n[2]} of a {type(obj).__name__}")
            try:
                return run_probe(obj, n[2])
            except Exception as exc:  # noqa: BLE001 - the caller's object has no such probe: no value, said why
                raise ExprError(f"probe {n[2]}: {type(exc).__name__}: {exc}") from None
        if head == "index":
            seq, i = _eval(n[1], named), _eval(n[2], named)
            if not isinstance(seq, list) or not isinstance(i, int):
                raise ExprError("indexing needs a list and an integer")
            return seq[i]
        if head in BINARY:
            a, b = _eval(n[1], named), _eval(n[2], named)
            for v in (a, b):
                if scalar(v) is NOT_SCALAR and not isinstance(v, float):  # inf and nan are numbers here
                    raise ExprError(f"{head} on a {type(v).__name__}")
            _sized(head, a, b)
            return _bounded(BINARY[head](a, b))
        if head == "and":
            out: Any = True
            for arg in n[1:]:
                out = _eval(arg, named)
                if not out:
                    return out
            return out
        if head == "or":
            out = False
            for arg in n[1:]:
                out = _eval(arg, named)
                if out:
                    return out
            return out
        if head == "not":
            return not _eval(n[1], named)
        if head == "neg":
            return -_eval(n[1], named)
        if head == "is_none":
            return _eval(n[1], named) is None
        if head == "not_none":
            return _eval(n[1], named) is not None
        if head == "if":
            return _eval(n[2], named) if _eval(n[1], named) else _eval(n[3], named)
        if head == "call":
            fn, _low, _high = CALLS[n[1]]
            args = [_eval(a, named) for a in n[2:]]
            if any(scalar(a) is NOT_SCALAR for a in args):
                raise ExprError(f"{n[1]}() of a non-scalar")
            return _bounded(fn(*args))
    except ExprError:
        raise
    except (ArithmeticError, TypeError, ValueError, IndexError, OverflowError) as exc:
        raise ExprError(f"{head}: {type(exc).__name__}: {exc}") from None
    raise ExprError(f"unknown operator {head!r}")


def _arg(value: Any) -> Any:
    """An argument as the evaluator holds it: the value itself (a number keeps its type; an object is only
    probed or tested against None)."""
    return value
