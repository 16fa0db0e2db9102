"""Record what ``@triton.heuristics`` computed, per captured launch, while a capture is active.

Triton's ``Heuristics.run`` evaluates each ``values[name](args)`` in order and passes the results on
as keyword arguments. Capture learns the results exactly (the ``JITFunction.run`` wrapper reads them
from the keyword arguments Triton passes, see :mod:`karchive.producer.capture.jit_capture`), and learns which
arguments each function depends on by evaluating it once more on a mapping that notes every key it
reads; tensor-like arguments are handed over behind a probe that notes the attributes used (``dtype``,
``shape``, ``numel()`` ...). When the second evaluation does not reproduce Triton's value (a function
that is not pure: a device query, a tuning table) or used an argument in a way no probe replays, the
case is recorded concretely (:func:`concrete_inputs`): every kernel argument of the call and the device
it ran on, so that very call replays and any other is refused naming the input that differs. Manifest shape and matching: :mod:`karchive.format.heuristics`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from ...format.heuristics import MAX_CASES, fingerprint, nonfinite_input
from ...format.probes import ABSENT, NOT_SCALAR, PROBE_ATTRS, PROBE_METHODS, probe_name, probe_value, run_probe, scalar
from ..compile.canonical import kernel_name
from ._autotune_log import innermost_jit

if TYPE_CHECKING:  # the view types dict's own keys()/values()/items() return (typeshed names them here)
    from _collections_abc import dict_items, dict_keys, dict_values

_UNKNOWN: Any = object()


class _Probe:
    """Stands in for a non-scalar argument while a heuristic runs; notes what the heuristic asks of it."""

    __slots__ = ("_obj", "_seen")

    def __init__(self, obj: Any, seen: dict) -> None:
        object.__setattr__(self, "_obj", obj)
        object.__setattr__(self, "_seen", seen)

    def _opaque(self, why: str) -> None:
        object.__getattribute__(self, "_seen").setdefault("?", why)

    def __getattr__(self, name: str) -> Any:
        obj = object.__getattribute__(self, "_obj")
        seen = object.__getattribute__(self, "_seen")
        value = getattr(obj, name)
        if name in PROBE_ATTRS:
            seen[name] = probe_value(value)
            return value
        if name in PROBE_METHODS and callable(value):

            def call(*args: Any, **kwargs: Any) -> Any:
                result = value(*args, **kwargs)
                spelling = None if kwargs else probe_name(name, args)
                if spelling is None:
                    seen.setdefault("?", f"calls {name}() with arguments karchive cannot replay")
                else:
                    seen[spelling] = probe_value(result)
                return result

            return call
        seen.setdefault("?", f"reads .{name}")
        return value

    # Anything else done to the object itself cannot be replayed from probes: note it, then behave as the object.
    def __bool__(self) -> bool:
        self._opaque("tests the object's truth value")
        return bool(object.__getattribute__(self, "_obj"))

    def __len__(self) -> int:
        self._opaque("takes len() of the object")
        return len(object.__getattribute__(self, "_obj"))

    def __eq__(self, other: Any) -> Any:
        self._opaque("compares the object with ==")
        return object.__getattribute__(self, "_obj") == other

    def __ne__(self, other: Any) -> Any:
        self._opaque("compares the object with !=")
        return object.__getattribute__(self, "_obj") != other

    def __hash__(self) -> int:
        self._opaque("hashes the object")
        return hash(object.__getattribute__(self, "_obj"))

    def __iter__(self) -> Iterator[Any]:
        self._opaque("iterates over the object")
        return iter(object.__getattribute__(self, "_obj"))

    def __getitem__(self, key: Any) -> Any:
        self._opaque("indexes the object")
        return object.__getattribute__(self, "_obj")[key]


class _Reads(dict):
    """The ``args`` dict a heuristic receives, noting every key it reads (``get``, ``[]``, ``in``)."""

    def __init__(self, named: dict, probes: bool) -> None:
        super().__init__(named)
        self.read: dict[str, Any] = {}  # arg -> ("scalar", value) | ("object", seen) | ("absent",)
        self.everything = False
        self._probes = probes

    def _note(self, key: Any) -> Any:
        value = dict.__getitem__(self, key)
        if not isinstance(key, str):
            return value
        if value is None or scalar(value) is not NOT_SCALAR or nonfinite_input(value) is not None:
            self.read[key] = ("scalar", value)
            return value
        prev = self.read.get(key)
        seen = prev[1] if prev and prev[0] == "object" else {}
        self.read[key] = ("object", seen)
        return _Probe(value, seen) if self._probes else value

    def __getitem__(self, key: Any) -> Any:
        if not dict.__contains__(self, key):
            if isinstance(key, str):
                self.read[key] = ("absent",)
            raise KeyError(key)
        return self._note(key)

    def get(self, key: Any, default: Any = None) -> Any:
        if not dict.__contains__(self, key):
            if isinstance(key, str):
                self.read[key] = ("absent",)
            return default
        return self._note(key)

    def __contains__(self, key: Any) -> bool:
        if dict.__contains__(self, key):
            self._note(key)
            return True
        if isinstance(key, str):
            self.read[key] = ("absent",)
        return False

    def _all(self) -> None:
        self.everything = True

    def keys(self) -> dict_keys[Any, Any]:
        self._all()
        return dict.keys(self)

    def values(self) -> dict_values[Any, Any]:
        self._all()
        return dict.values(self)

    def items(self) -> dict_items[Any, Any]:
        self._all()
        return dict.items(self)

    def __iter__(self) -> Iterator[Any]:
        self._all()
        return dict.__iter__(self)

    def __len__(self) -> int:
        self._all()
        return dict.__len__(self)


def _encode(read: tuple, opaque_objects: str | None) -> Any:
    if read[0] == "absent":
        return {"absent": True}
    if read[0] == "scalar":
        nf = nonfinite_input(read[1])
        return nf if nf is not None else scalar(read[1])
    seen = read[1]
    if opaque_objects:
        return {"opaque": opaque_objects}
    if "?" in seen:
        return {"opaque": seen["?"]}
    return {"object": dict(sorted(seen.items()))}


def trace_heuristic(
    fn: Callable[[dict], Any], named: dict, expected: Any = _UNKNOWN
) -> tuple[Any, dict[str, Any], bool]:
    """Evaluate ``fn`` on a noting copy of ``named``: (value, recorded inputs, ok).

    First with probes around non-scalar arguments; if that raises or does not give ``expected`` (Triton's
    value), again on the plain objects, whose inputs are then opaque. ``ok`` is False when no evaluation
    gives ``expected`` (or none succeeds): the function is not a pure function of its arguments.
    """
    last: tuple[Any, dict[str, Any]] | None = None
    for probes in (True, False):
        reads = _Reads(named, probes)
        try:
            value = fn(reads)
        except Exception:  # noqa: BLE001 - the heuristic failed on the probe: try without
            continue
        if reads.everything:  # it iterated over the arguments: every one is an input, objects opaquely
            for k, v in dict.items(reads):
                if isinstance(k, str) and k not in reads.read:
                    scalar_like = v is None or scalar(v) is not NOT_SCALAR or nonfinite_input(v) is not None
                    reads.read[k] = ("scalar", v) if scalar_like else ("object", {"?": "iterates over the arguments"})
        why = (
            None
            if probes
            else "used in a way karchive cannot replay (the heuristic needs the object itself, "
            "e.g. isinstance or arithmetic)"
        )
        last = (value, {k: _encode(r, why) for k, r in sorted(reads.read.items())})
        if expected is _UNKNOWN or _equal(value, expected):
            return last[0], last[1], True
    if last is None:
        return None, {}, False
    return last[0], last[1], False


class HeuristicsLog:
    """Heuristics records of one capture: per kernel, per computed name, the distinct cases seen."""

    def __init__(self) -> None:
        self.records: dict[str, dict] = {}  # kernel -> {"names": [...], "cases": {name: {repr: case}}}
        self.warnings: list[str] = []
        # Per (heuristic, name): the arguments and probes its recorded cases read, and the fingerprints of calls
        # already traced. A call that agrees with a traced one on every argument any case read runs the (pure)
        # heuristic down the same path: same reads, same value; tracing it again would record nothing new.
        self._memo: dict[tuple[int, str], dict] = {}

    def observe(self, heur: Any, args: tuple, kwargs: dict, produced: dict | None) -> None:
        """One ``Heuristics.run`` call: ``produced`` is what Triton passed on (None if not seen)."""
        fn = innermost_jit(heur)
        kernel = kernel_name(fn)  # the variants' name: module:qualname
        named = {**dict(zip(heur.arg_names, args)), **kwargs}
        record = self.records.setdefault(kernel, {"names": [], "cases": {}})
        for name, func in heur.values.items():
            given = produced.get(name, _UNKNOWN) if produced is not None else _UNKNOWN  # Triton's value, if seen
            known = given is not _UNKNOWN
            memo = self._memo.setdefault((id(heur), name), {"heur": heur, "reads": {}, "traced": set(), "off": False})
            call = self._fingerprint(memo, named, given) if known and not memo["off"] else None
            if call is not None and call in memo["traced"]:
                named[name] = given
                continue
            value, inputs, ok = trace_heuristic(func, named, given)
            device = None
            if known:
                if not ok or any(isinstance(v, dict) and "opaque" in v for v in inputs.values()):
                    # Not a pure function of what it read (a device query, a tuning table) or it used an argument
                    # in a way no probe replays: record what it returned for this very call on this device, so
                    # the captured calls replay and any other call is refused, naming the input that differs.
                    inputs = concrete_inputs(named, heur.arg_names, name)
                    device = self._device()
                    memo["off"] = True
                value = given
            elif not ok:
                self._warn(f"{kernel}: heuristic {name!r} raised when re-evaluated; its value is not recorded")
                continue
            json_value = scalar(value)
            if json_value is NOT_SCALAR or isinstance(json_value, list):
                self._warn(
                    f"{kernel}: heuristic {name!r} returned {type(value).__name__}, which an archive cannot "
                    "store; callers must pass it"
                )
                named[name] = value
                continue
            if name not in record["names"]:
                record["names"].append(name)
            case = {"inputs": {k: v for k, v in inputs.items() if k != name}, "value": json_value}
            if device is not None:
                case["device"] = device
            cases = record["cases"].setdefault(name, {})
            if len(cases) < MAX_CASES:
                cases.setdefault(repr(case), case)
            else:
                self._warn(
                    f"{kernel}: heuristic {name!r}: more than {MAX_CASES} distinct cases; later ones are not recorded"
                )
            if known and not memo["off"]:
                self._learn(memo, inputs)
                call = self._fingerprint(memo, named, value) if not memo["off"] else None
                if call is not None:
                    memo["traced"].add(call)
            named[name] = value

    @staticmethod
    def _learn(memo: dict, inputs: dict) -> None:
        for arg, rec in inputs.items():
            if isinstance(rec, dict) and "opaque" in rec:
                memo["off"] = True  # what it used of the object is unknown: no fingerprint can stand for it
                return
            spellings = memo["reads"].setdefault(arg, [])
            if isinstance(rec, dict) and "object" in rec:
                spellings.extend(s for s in rec["object"] if s not in spellings)

    @staticmethod
    def _fingerprint(memo: dict, named: dict, value: Any) -> tuple | None:
        try:
            return (
                tuple(
                    (arg, fingerprint(named.get(arg, ABSENT), spellings))
                    for arg, spellings in sorted(memo["reads"].items())
                ),
                repr(value),
            )
        except Exception:  # noqa: BLE001 - an argument that cannot be fingerprinted: trace every time
            return None

    @staticmethod
    def _device() -> dict[str, str]:
        """The device the call ran on: Triton's current target, and the GPU's name where torch knows it."""
        out: dict[str, str] = {}
        try:
            from triton.runtime.driver import driver

            t = driver.active.get_current_target()
            out["target"] = f"{t.backend}:{t.arch}"
        except Exception:  # noqa: BLE001 - no active driver: the device is simply not recorded
            pass
        torch = sys.modules.get("torch")
        try:
            if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
                out["name"] = str(torch.cuda.get_device_name())
        except Exception:  # noqa: BLE001 - torch without a usable CUDA: the target says enough
            pass
        return out

    def _warn(self, msg: str) -> None:
        if msg not in self.warnings:
            self.warnings.append(msg)

    def to_json(self) -> list[dict]:
        out = []
        for kernel, rec in sorted(self.records.items()):
            if rec["names"]:
                out.append(
                    {
                        "kernel": kernel,
                        "names": list(rec["names"]),
                        "cases": {n: list(rec["cases"].get(n, {}).values()) for n in rec["names"]},
                    }
                )
        return out


#: Probes that describe an argument concretely (those the object has are recorded).
CONCRETE_PROBES = ("dtype", "shape", "stride()")


def concrete_inputs(named: dict, arg_names: Any, name: str) -> dict[str, Any]:
    """Every kernel argument of the call as a recorded input: scalars by value, objects by their dtype,
    shape and strides (where they have them). A case made of them matches this call and its equals only."""
    params = set(arg_names or ())
    out: dict[str, Any] = {}
    for k, v in named.items():
        if not isinstance(k, str) or k == name or (params and k not in params):
            continue
        nf = nonfinite_input(v)
        if nf is not None:
            out[k] = nf
        elif v is None or scalar(v) is not NOT_SCALAR:
            out[k] = scalar(v) if v is not None else None
        else:
            seen: dict[str, Any] = {}
            for spelling in CONCRETE_PROBES:
                try:
                    seen[spelling] = run_probe(v, spelling)
                except Exception:  # noqa: BLE001 - an object without that probe: described by the others
                    continue
            if not seen and not hasattr(v, "data_ptr"):
                # Neither a tensor nor a pointer (a dtype, a config object): "any object" would match other values
                # of it, so the case is kept for the record and matches nothing.
                out[k] = {"opaque": f"a {type(v).__name__} argument that no probe describes"}
            else:
                out[k] = {"object": seen}
    return dict(sorted(out.items()))


def _equal(a: Any, b: Any) -> bool:
    try:
        return bool(a == b) and isinstance(a, bool) == isinstance(b, bool)
    except Exception:  # noqa: BLE001 - e.g. comparing arrays
        return a is b
