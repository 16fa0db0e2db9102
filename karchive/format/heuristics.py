"""Heuristics records in the manifest, and the rule that gives a call its ``@triton.heuristics`` values.

``@triton.heuristics({"EVEN": lambda args: args["n"] % args["BLOCK"] == 0})`` computes a meta-parameter
in Python at every call. Python cannot travel in an archive, so JIT capture records, per kernel and per
computed name, the cases it saw: which arguments the function read, what they were, and the value it
returned. At load time a call takes, for each name in order, the value of the first case whose every
input matches the call (spec/FORMAT.md §6.4). Pure data and comparisons, no Triton import: the runtime
uses it. Manifest shape (top-level ``heuristics`` list, one record per kernel)::

    {"kernel": "copy_kernel",
     "names": ["EVEN"],                               # computed names, in Triton's evaluation order
     "cases": {"EVEN": [{"inputs": {"n": 1024, "BLOCK": 128}, "value": true},
                        {"inputs": {"n": 1000, "BLOCK": 128}, "value": false}]}}

An input is what the heuristic read of one argument:

- a JSON scalar (or a list of scalars): the argument's value, compared by value (``True`` is not ``1``);
- ``{"absent": true}``: the heuristic asked for an argument the call did not pass (``args.get(name)``);
- ``{"object": {probe: result}}``: a non-scalar argument (a tensor), described by the probes the heuristic
  used on it: ``dtype`` (``str(x.dtype)``), ``shape``, ``ndim``, ``numel()``, ``dim()``, ``element_size()``,
  ``size()``/``size(i)``, ``stride()``/``stride(i)``; ``{}`` means only ``is None`` was tested;
- ``{"float": "inf" | "-inf" | "nan"}``: a non-finite float argument (JSON has no such numbers);
- ``{"opaque": why}``: used in a way karchive cannot replay (another attribute, arithmetic on the object,
  ``isinstance``): such a case is kept for the record and never matches.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core.grammar import fullmatch
from ..errors import SchemaError
from .autotune import CONFIG_OPTIONS, NONFINITE, nonfinite
from .names import is_param_name
from .probes import ABSENT, NOT_SCALAR, run_probe, scalar
from .probes import PROBE as _PROBE

#: Options Triton takes from a heuristic's result like it takes them from an autotune config.
OPTION_NAMES = CONFIG_OPTIONS
#: Bounds on what a hostile manifest can make the runtime hold or scan.
MAX_NAMES = 64
MAX_CASES = 4096
MAX_INPUTS = 256


# --- matching ------------------------------------------------------------------------------------
def _same(a: Any, b: Any) -> bool:
    """Equal JSON values where ``True`` is not ``1`` (a heuristic may branch on either)."""
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return isinstance(a, bool) == isinstance(b, bool) and a == b


def input_matches(recorded: Any, value: Any) -> bool:
    """Does a call's argument (``ABSENT`` when not passed) match one recorded input?"""
    if isinstance(recorded, dict):
        if "absent" in recorded:
            return value is ABSENT
        if "float" in recorded:
            return nonfinite_input(value) == recorded
        if "opaque" in recorded or value is ABSENT or value is None:
            return False
        if scalar(value) is not NOT_SCALAR:
            return False
        for spelling, want in recorded["object"].items():
            try:
                got = run_probe(value, spelling)
            except Exception:  # noqa: BLE001 - an argument without the probe (a raw pointer): no match
                return False
            if not _same(got, want):
                return False
        return True
    if value is ABSENT:
        return False
    got = scalar(value)
    return got is not NOT_SCALAR and _same(got, recorded)


def nonfinite_input(value: Any) -> dict[str, str] | None:
    """``{"float": ...}`` when ``value`` is a non-finite float (numpy's included), else None."""
    if isinstance(value, float) or (type(value).__module__ == "numpy" and "float" in type(value).__name__):
        try:
            f = float(value)
        except (TypeError, ValueError):
            return None
        return None if f == f and f not in (math.inf, -math.inf) else nonfinite(f)
    return None


def fingerprint(value: Any, spellings: Iterable[str]) -> tuple:
    """What matching can observe of an argument: a hashable key for caching resolutions per call."""
    if value is ABSENT:
        return ("absent",)
    nf = nonfinite_input(value)
    if nf is not None:
        return ("f", nf["float"])
    s = scalar(value)
    if s is not NOT_SCALAR:  # the argument's own type: a numpy integer computes values of its type
        return ("s", type(value).__name__, repr(s))
    out = []
    for spelling in spellings:
        try:
            out.append(repr(run_probe(value, spelling)))
        except Exception:  # noqa: BLE001
            out.append("!")
    return ("o", tuple(out))


@dataclass(frozen=True)
class Case:
    inputs: Mapping[str, Any]
    value: Any
    #: The device a concretely recorded case ran on (``{"target": "cuda:90", "name": ...}``), else None.
    device: Mapping[str, str] | None = None

    def matches(self, named: Mapping[str, Any], device: Any = None) -> bool:
        if not self.device_matches(device):
            return False
        return all(input_matches(rec, named.get(arg, ABSENT)) for arg, rec in self.inputs.items())

    def device_matches(self, device: Any) -> bool:
        """``device``: None (unknown: not checked), a target string, or a DeviceInfo-like object."""
        if self.device is None or device is None:
            return True
        target = (
            device if isinstance(device, str) else f"{getattr(device, 'backend', '')}:{getattr(device, 'arch', '')}"
        )
        want = self.device.get("target")
        if want is not None and want != target:
            return False
        name = getattr(device, "name", "") if not isinstance(device, str) else ""
        return not (name and self.device.get("name") and self.device["name"] != name)

    def differences(self, named: Mapping[str, Any]) -> list[str]:
        """The inputs this call does not match, each with the recorded value and the call's."""
        out = []
        for arg, rec in self.inputs.items():
            value = named.get(arg, ABSENT)
            if input_matches(rec, value):
                continue
            out.append(f"{arg} (recorded {_show(rec)}, this call {_show_value(value, rec)})")
        return out

    def describe(self) -> str:
        ins = ", ".join(f"{k}={_show(v)}" for k, v in self.inputs.items())
        on = f" on {self.device.get('target', '?')}" if self.device else ""
        return f"({ins}){on} -> {self.value!r}"


def _show(v: Any) -> str:
    if isinstance(v, dict):
        if "absent" in v:
            return "<not passed>"
        if "opaque" in v:
            return f"<opaque: {v['opaque']}>"
        if "float" in v:
            return f"float({v['float']!r})"
        return "<object " + ", ".join(f"{k}={p!r}" for k, p in v["object"].items()) + ">"
    return repr(v)


def _show_value(value: Any, rec: Any) -> str:
    """A call's argument as the recorded input would show it (the probes the record used)."""
    if value is ABSENT:
        return "<not passed>"
    s = scalar(value)
    if s is not NOT_SCALAR or value is None:
        return repr(s if value is not None else None)
    if isinstance(rec, dict) and "object" in rec:
        parts = []
        for spelling in rec["object"]:
            try:
                parts.append(f"{spelling}={run_probe(value, spelling)!r}")
            except Exception:  # noqa: BLE001 - the probe cannot be read from this argument
                parts.append(f"{spelling}=<cannot be read>")
        return "<object " + ", ".join(parts) + ">"
    return f"<{type(value).__name__}>"


@dataclass(frozen=True)
class HeuristicsRecord:
    """One kernel's recorded heuristics: the computed names in order, their cases, and the expressions
    (:mod:`.heuristics_expr`) an ahead-of-time build stores for the names it could translate."""

    kernel: str
    names: tuple[str, ...]
    cases: Mapping[str, tuple[Case, ...]]
    exprs: Mapping[str, list] = field(default_factory=dict)
    _probes: dict = field(default_factory=dict, compare=False, repr=False)

    def probes(self) -> dict[str, tuple[str, ...]]:
        """Per argument read by any case: the probe spellings any case used on it (for fingerprints)."""
        if not self._probes:
            seen: dict[str, list[str]] = {}
            for cases in self.cases.values():
                for case in cases:
                    for arg, rec in case.inputs.items():
                        spellings = seen.setdefault(arg, [])
                        if isinstance(rec, dict) and "object" in rec:
                            spellings.extend(s for s in rec["object"] if s not in spellings)
            for expr in self.exprs.values():
                _expr_reads(expr, seen)
            self._probes.update({k: tuple(v) for k, v in sorted(seen.items())})
        return self._probes

    def call_key(self, named: Mapping[str, Any]) -> tuple:
        return tuple((arg, fingerprint(named.get(arg, ABSENT), spellings)) for arg, spellings in self.probes().items())


def _nearest(cases: Sequence[Case], named: Mapping[str, Any], device: Any) -> str:
    """Which inputs the closest recorded case (fewest differing inputs) differs in, as text."""
    best: list[str] | None = None
    for case in cases[:MAX_CASES]:
        diff = case.differences(named)
        if not case.device_matches(device):
            diff = [f"the device (recorded {case.device.get('target') if case.device else '?'})"] + diff
        if diff and (best is None or len(diff) < len(best)):
            best = diff
    return ", ".join(best) if best else ""


def _expr_reads(node: Any, seen: dict[str, list[str]], depth: int = 0) -> None:
    """The arguments (and probes on them) an expression reads, for the call fingerprint."""
    if not isinstance(node, list) or not node or depth > 64:
        return
    if node[0] in ("arg", "get") and len(node) > 1 and isinstance(node[1], str):
        seen.setdefault(node[1], [])
    if node[0] == "probe" and len(node) == 3 and isinstance(node[1], list) and node[1][:1] in (["arg"], ["get"]):
        spellings = seen.setdefault(str(node[1][1]), [])
        if node[2] not in spellings:
            spellings.append(node[2])
    for child in node[1:]:
        _expr_reads(child, seen, depth + 1)


def resolve(
    record: HeuristicsRecord, named: Mapping[str, Any], skip: Iterable[str] = (), device: Any = None
) -> tuple[dict[str, Any], dict[str, str]]:
    """Values for the record's names (in order) that are not in ``skip``, and why each unresolved one is.

    Each name takes the first case whose inputs all match the call; a resolved value is visible to
    the names after it (Triton evaluates heuristics in order and each sees the earlier results).
    """
    skip = set(skip)
    current = dict(named)
    values: dict[str, Any] = {}
    unresolved: dict[str, str] = {}
    for name in record.names:
        if name in skip:
            continue
        cases = record.cases.get(name, ())
        hit = next((c for c in cases if c.matches(current, device)), None)
        if hit is None and name in record.exprs:
            from .heuristics_expr import ExprError, evaluate

            try:
                values[name] = current[name] = evaluate(record.exprs[name], current)
            except ExprError as exc:
                unresolved[name] = f"its stored expression has no value for this call ({exc})"
            continue
        if hit is None:
            shown = "; ".join(c.describe() for c in cases[:8])
            if len(cases) > 8:
                shown += f"; ... ({len(cases)} cases)"
            unresolved[name] = f"no recorded case matches this call (recorded: {shown or 'none'})"
            near = _nearest(cases, current, device)
            if near:
                unresolved[name] += f"; the nearest recorded case differs in {near}"
            continue
        values[name] = current[name] = hit.value
    return values, unresolved


def missing_inputs(record: HeuristicsRecord, name: str, named: Mapping[str, Any]) -> list[str]:
    """The arguments the heuristic for ``name`` reads as ``args[NAME]`` that the call does not pass.

    Triton's heuristic fails on such a call (a ``KeyError`` in its lambda), so the missing argument, not the
    computed value, is what the caller must be told about. An argument some case recorded as absent (the
    heuristic read it with ``args.get``), or that an expression reads only through ``get``, is not missing.
    """
    reads: dict[str, bool] = {}  # argument -> may be absent
    for case in record.cases.get(name, ()):
        for arg, rec in case.inputs.items():
            reads[arg] = reads.get(arg, False) or (isinstance(rec, dict) and "absent" in rec)
    stack = [record.exprs[name]] if name in record.exprs else []
    while stack and len(stack) < 10_000:
        node = stack.pop()
        if not isinstance(node, list) or not node:
            continue
        if node[0] == "arg" and len(node) == 2 and isinstance(node[1], str):
            reads.setdefault(node[1], False)
        stack.extend(child for child in node[1:] if isinstance(child, list))
    return [arg for arg, may_be_absent in sorted(reads.items()) if not may_be_absent and arg not in named]


# --- parsing (an archive is untrusted input) -----------------------------------------------------
def _check_scalar(value: Any, where: str) -> Any:
    s = scalar(value)
    if s is NOT_SCALAR or (isinstance(value, list) and not isinstance(s, list)):
        raise SchemaError(f"{where}: not a JSON scalar or list of scalars", where=where)
    return value


def _parse_input(rec: Any, where: str) -> Any:
    if not isinstance(rec, dict):
        return _check_scalar(rec, where)
    if len(rec) != 1:
        raise SchemaError(
            f"{where}: an input object has exactly one of 'absent', 'float', 'object', 'opaque'", where=where
        )
    ((kind, body),) = rec.items()
    if kind == "absent":
        if body is not True:
            raise SchemaError(f"{where}.absent: must be true", where=where)
    elif kind == "float":
        if body not in NONFINITE:
            raise SchemaError(f"{where}.float: one of {', '.join(NONFINITE)}", where=where)
    elif kind == "opaque":
        if not isinstance(body, str):
            raise SchemaError(f"{where}.opaque: must be a string", where=where)
    elif kind == "object":
        if not isinstance(body, dict) or len(body) > 32:
            raise SchemaError(f"{where}.object: an object of at most 32 probes expected", where=where)
        for spelling, result in body.items():
            if not fullmatch(_PROBE, spelling):
                raise SchemaError(f"{where}.object: {spelling!r} is not a probe karchive replays", where=where)
            if not isinstance(result, str):
                _check_scalar(result, f"{where}.object.{spelling}")
    else:
        raise SchemaError(f"{where}: unknown input kind {kind!r}", where=where)
    return rec


def parse_record(obj: Any, where: str) -> HeuristicsRecord:
    if not isinstance(obj, dict):
        raise SchemaError(f"{where}: a heuristics record must be an object", where=where)
    kernel = obj.get("kernel")
    names = obj.get("names")
    cases = obj.get("cases")
    if not isinstance(kernel, str) or not kernel:
        raise SchemaError(f"{where}.kernel: a non-empty string expected", where=where)
    if (
        not isinstance(names, list)
        or not names
        or len(names) > MAX_NAMES
        or not all(map(is_param_name, names))
        or len(set(names)) != len(names)
    ):
        raise SchemaError(
            f"{where}.names: 1 to {MAX_NAMES} distinct parameter names expected (identifiers)", where=where
        )
    if not isinstance(cases, dict) or set(cases) - set(names):
        raise SchemaError(f"{where}.cases: an object keyed by the record's names expected", where=where)
    parsed: dict[str, tuple[Case, ...]] = {}
    for name, items in cases.items():
        w = f"{where}.cases.{name}"
        if not isinstance(items, list) or len(items) > MAX_CASES:
            raise SchemaError(f"{w}: a list of at most {MAX_CASES} cases expected", where=where)
        out = []
        for i, case in enumerate(items):
            if not isinstance(case, dict) or not isinstance(case.get("inputs"), dict) or "value" not in case:
                raise SchemaError(f"{w}[{i}]: a case needs 'inputs' (object) and 'value'", where=where)
            if len(case["inputs"]) > MAX_INPUTS:
                raise SchemaError(f"{w}[{i}].inputs: more than {MAX_INPUTS} inputs", where=where)
            bad = next((k for k in case["inputs"] if not is_param_name(k)), None)
            if bad is not None:
                raise SchemaError(f"{w}[{i}].inputs: {ascii(bad)[:80]} is not a parameter name", where=where)
            inputs = {str(k): _parse_input(v, f"{w}[{i}].inputs.{k}") for k, v in case["inputs"].items()}
            device = case.get("device")
            if device is not None and (
                not isinstance(device, dict)
                or set(device) - {"target", "name"}
                or not all(isinstance(x, str) and len(x) <= 256 for x in device.values())
            ):
                raise SchemaError(
                    f"{w}[{i}].device: an object with string 'target' and/or 'name' expected", where=where
                )
            out.append(Case(inputs, _check_scalar(case["value"], f"{w}[{i}].value"), device))
        parsed[name] = tuple(out)
    exprs = obj.get("exprs", {})
    if not isinstance(exprs, dict) or set(exprs) - set(names):
        raise SchemaError(f"{where}.exprs: an object keyed by the record's names expected", where=where)
    from .heuristics_expr import check

    for name, expr in exprs.items():
        check(expr, f"{where}.exprs.{name}")
    return HeuristicsRecord(kernel, tuple(names), parsed, dict(exprs))


def records_for(manifest: Mapping[str, Any] | Sequence[Any] | None, kernel: str) -> list[HeuristicsRecord]:
    """The parsed heuristics records of one kernel, from a manifest dict or its ``heuristics`` list
    (``SchemaError`` on a malformed list or record)."""
    raw = manifest.get("heuristics") if isinstance(manifest, Mapping) else manifest
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise SchemaError("manifest.heuristics: a list expected", where="heuristics")
    return [
        parse_record(r, f"heuristics[{i}]")
        for i, r in enumerate(raw)
        if isinstance(r, dict) and r.get("kernel") == kernel
    ]
