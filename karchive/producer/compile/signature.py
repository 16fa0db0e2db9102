"""Kernel signatures: Triton's ``tools/compile.py`` syntax and a structured form, resolved per kernel.

``"*fp32:16, *fp32:16, i32, 1024"`` lists every parameter in order (``:16`` = divisible by 16,
``:1`` = equal to 1, a bare value = constexpr). A build spec may instead list only the
non-constexpr parameters and give constexprs by name. Both resolve to one :class:`Specialization`.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...errors import SignatureError
from ...format.manifest import POINTER_ELEMENT_TYPES, SCALAR_SIZES
from ._irtext import split_top_level

_TYPE_RE = re.compile(r"\*?(?:k)?[a-z][a-z0-9]*")


@dataclass(frozen=True)
class Token:
    text: str
    type: str | None  # None for a constexpr value
    value: Any = None
    hint: int | None = None  # 16 or 1


@dataclass
class Specialization:
    """Everything Triton's ``ASTSource`` needs, keyed by parameter name, in declaration order."""

    names: list[str]
    types: dict[str, str]  # name -> "*fp32" | "i32" | "constexpr"
    constexprs: dict[str, Any] = field(default_factory=dict)
    divisibility: dict[str, int] = field(default_factory=dict)  # name -> 16
    equal_to_1: dict[str, str] = field(default_factory=dict)  # name -> declared int type, fixed to 1

    def describe(self) -> str:
        parts = []
        for n in self.names:
            if n in self.equal_to_1:
                parts.append(f"{self.equal_to_1[n]}:1")
            elif self.types[n] == "constexpr":
                parts.append(repr(self.constexprs[n]))
            else:
                parts.append(self.types[n] + (":16" if n in self.divisibility else ""))
        return ", ".join(parts)


def _parse_value(text: str) -> Any:
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    try:
        return int(text, 0)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return None


def _check_type(typ: str, where: str, kernel: str, param: str) -> str:
    base = typ[1:] if typ.startswith("*") else typ
    if base.startswith("k"):  # "*kfp32": constant pointer
        base = base[1:]
    known = POINTER_ELEMENT_TYPES if typ.startswith("*") else SCALAR_SIZES
    if base not in known:
        raise SignatureError(
            f"{where}: unknown type {typ!r} (known: {', '.join(sorted(known))})", kernel=kernel, param=param
        )
    return typ


def parse_token(text: str, where: str, kernel: str, param: str) -> Token:
    """One signature entry, for parameter ``param`` of ``kernel`` (both named by the errors)."""

    def refuse(msg: str) -> SignatureError:
        return SignatureError(f"{where}: {msg}", kernel=kernel, param=param)

    raw = text.strip()
    if not raw:
        raise refuse("empty entry")
    if raw.startswith(("tensordesc<", "tensordesc_im2col<")) and raw.endswith(">"):
        # Triton compiles these (im2col: Gluon, Triton 3.9+); whether karchive can launch them is decided from the
        # compiled result.
        return Token(raw, raw)
    body, _, hint_text = raw.partition(":")
    body = body.strip()
    hint = None
    if hint_text:
        if hint_text.strip() not in ("16", "1"):
            raise refuse(f"hint {hint_text.strip()!r} in {raw!r} is not supported (use :16 or :1)")
        hint = int(hint_text)
    is_none = body == "None"  # an argument passed as None: Triton specialises it to the constexpr None
    value = None if is_none else _parse_value(body)
    if (is_none or value is not None) and not _TYPE_RE.fullmatch(body):
        if hint is not None:
            raise refuse(f"a constexpr value cannot carry a hint: {raw!r}")
        return Token(raw, None, value)
    if not _TYPE_RE.fullmatch(body):
        raise refuse(f"cannot parse {raw!r} as a type or a constexpr value")
    typ = _check_type(body, where, kernel, param)
    if hint == 1 and typ.startswith("*"):
        raise refuse(f"':1' applies to integers, not pointers ({raw!r})")
    if hint is not None and typ.startswith(("fp", "bf")):
        raise refuse(f"hints apply to pointers and integers, not {typ!r}")
    return Token(raw, typ, None, hint)


def split_signature(sig: str | Sequence[str]) -> list[str]:
    """Entries of a signature string; commas inside ``<...>`` (tensor descriptor shapes) do not split."""
    if isinstance(sig, str):
        return split_top_level(sig) if sig.strip() else []
    return [str(s) for s in sig]


def _with_suggestion(name: str, known: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, list(known), n=1)
    return f"{name!r} (did you mean {close[0]!r}?)" if close else repr(name)


def _missing(
    names: Sequence[str], constexpr_params: Sequence[str], entries: Sequence[str], given: Mapping[str, Any]
) -> list[str]:
    """The parameters whose omission would make a signature of ``len(names) - 1`` entries fit the kernel: each
    ``tl.constexpr`` parameter a value, each other one a type (``None`` fits either), and, where the kernel names
    its pointers ``*ptr*``, the pointer types on those. Empty when none does, or an entry does not parse."""
    if len(entries) != len(names) - 1:
        return []
    try:
        toks = [parse_token(e, "", "", "") for e in entries]
    except SignatureError:
        return []
    cx = set(constexpr_params)
    named_ptrs = any("ptr" in n.lower() for n in names)

    def fits(name: str, tok: Token, strict_ptr: bool) -> bool:
        if tok.type is None:
            return tok.value is None or name in cx  # None: an optional argument passed as None
        if name in cx:
            return False
        if strict_ptr and named_ptrs:
            return tok.type.startswith("*") == ("ptr" in name.lower())
        return True

    for strict in (True, False):
        out = [
            m
            for i, m in enumerate(names)
            if m not in given and all(fits(n, t, strict) for n, t in zip([*names[:i], *names[i + 1 :]], toks))
        ]
        if out:
            return out
    return []


def _is_constant(entry: str) -> bool:
    """A bare value other than None (which an optional pointer takes)."""
    try:
        tok = parse_token(entry, "", "", "")
    except SignatureError:
        return False
    return tok.type is None and tok.value is not None


def _missing_text(candidates: Sequence[str]) -> str:
    if len(candidates) == 1:
        return f"{candidates[0]} is missing"
    return f"one of {', '.join(candidates[:-1])} or {candidates[-1]} is missing"


def resolve(
    kernel_params: Sequence[str],
    constexpr_params: Sequence[str],
    signature: str | Sequence[str] | Mapping[str, str],
    constexprs: Mapping[str, Any] | None = None,
    kernel_name: str = "kernel",
) -> Specialization:
    """Map a signature onto a kernel's parameters.

    ``kernel_params`` are all parameter names in order; ``constexpr_params`` those annotated
    ``tl.constexpr``. A string/list signature may cover all parameters (compile.py style) or only
    the non-constexpr ones (with ``constexprs`` giving the rest); a mapping names parameters.
    """

    def refuse(param: str | None, msg: str) -> SignatureError:
        return SignatureError(f"{kernel_name}: {msg}", kernel=kernel_name, param=param)

    constexprs = dict(constexprs or {})
    names = list(kernel_params)
    runtime_params = [n for n in names if n not in constexpr_params]
    unknown_cx = [k for k in constexprs if k not in names]
    if unknown_cx:  # before anything else: a typo ("BLOCKK") would otherwise surface as "BLOCK: no value given"
        raise refuse(
            unknown_cx[0],
            f"unknown constexpr{'' if len(unknown_cx) == 1 else 's'} "
            f"{', '.join(_with_suggestion(k, names) for k in unknown_cx)}: not a parameter of "
            f"{kernel_name}, whose parameters are {', '.join(names)}",
        )
    if not isinstance(signature, (str, Mapping, list, tuple)):
        raise refuse(
            None,
            f"a signature is a string such as '*fp32:16, i32', a list of those "
            f"entries or a table name -> type, not {type(signature).__name__}",
        )  # the signature as a whole
    if isinstance(signature, Mapping):
        unknown = set(signature) - set(names)
        if unknown:
            raise refuse(
                sorted(unknown)[0], f"signature names unknown parameters {sorted(unknown)}; parameters are {names}"
            )
        assigned = {n: str(signature[n]) for n in names if n in signature}
    else:
        entries = split_signature(signature)
        # One parameter left out of a signature of every parameter, or of every one the constexprs table does not give.
        covered, table = names, ""
        missing = _missing(names, constexpr_params, entries, constexprs)
        if not missing and constexprs:
            covered, table = [n for n in names if n not in constexprs], " the constexprs table does not give"
            missing = _missing(covered, constexpr_params, entries, constexprs)
        shifted = (
            (
                f"{kernel_name}: signature has {len(entries)} entries for the {len(covered)} parameters{table} "
                f"({', '.join(covered)}): {_missing_text(missing)} (without it, each entry fits its parameter: a "
                "value for each tl.constexpr, a type for the others); give one entry per parameter, or name them "
                f'(signature = {{ {names[0]} = "...", ... }})'
            )
            if missing
            else ""
        )
        if len(entries) == len(names):
            assigned = dict(zip(names, entries))
        elif len(entries) == len(runtime_params):
            assigned = dict(zip(runtime_params, entries))
            # Read as the non-constexpr parameters, a constant value would land on a parameter that is not
            # tl.constexpr, or a constexpr would be left without one, while the entries fit the kernel exactly
            # with one parameter left out: the types have shifted; say which parameter is missing.
            values_on_runtime = any(_is_constant(e) for e in entries)
            unset = [n for n in constexpr_params if n in names and n not in constexprs]
            if missing and (values_on_runtime or unset):
                raise SignatureError(shifted, kernel=kernel_name, param=missing[0] if len(missing) == 1 else None)
        elif missing:
            raise SignatureError(shifted, kernel=kernel_name, param=missing[0] if len(missing) == 1 else None)
        else:
            raise refuse(
                None,
                f"signature has {len(entries)} entries, but the kernel has {len(names)} parameters "
                f"({', '.join(names)}) of which {len(runtime_params)} are not constexpr "
                f"({', '.join(runtime_params)}); give one entry per parameter or per non-constexpr parameter",
            )  # the count is wrong, not one parameter
    spec = Specialization(names=names, types={})
    for i, name in enumerate(names):
        where = f"{kernel_name}: parameter {i} ({name})"
        if name in assigned:
            if name in constexprs:
                raise SignatureError(
                    f"{where}: given both in the signature and in constexprs", kernel=kernel_name, param=name
                )
            tok = parse_token(assigned[name], where, kernel_name, name)
            if tok.type is None:
                spec.types[name] = "constexpr"
                spec.constexprs[name] = tok.value
            elif name in constexpr_params:
                raise SignatureError(
                    f"{where}: is tl.constexpr, so it needs a value, not the type {tok.type!r}",
                    kernel=kernel_name,
                    param=name,
                )
            elif tok.hint == 1:
                spec.types[name] = "constexpr"
                spec.constexprs[name] = 1
                spec.equal_to_1[name] = tok.type
            else:
                spec.types[name] = tok.type
                if tok.hint == 16:
                    spec.divisibility[name] = 16
        elif name in constexprs:
            spec.types[name] = "constexpr"
            spec.constexprs[name] = constexprs.pop(name)
        else:
            raise SignatureError(f"{where}: no type or constexpr value given", kernel=kernel_name, param=name)
    if constexprs:
        raise refuse(sorted(constexprs)[0], f"constexprs name unknown or already-typed parameters {sorted(constexprs)}")
    return spec
