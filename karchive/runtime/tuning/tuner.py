"""Tune a set of calls of an archive's autotuned kernels on this device (``karchive tune --keys``).

A tuning run needs real calls, not just keys: the configs are timed on the arguments Triton would see.
A keys file (``karchive-tune-keys/1``, spec/FORMAT.md §6.6, docs/runtime.md) describes each call as data::

    {"format": "karchive-tune-keys/1",
     "calls": [{"kernel": "kernels:matmul",
                "args": {"a": {"tensor": {"shape": [1024, 512], "dtype": "float16"}},
                         "M": 1024,
                         "stride_am": {"expr": ["probe", ["arg", "a"], "stride(0)"]}},
                "grid": [["*", ["call", "cdiv", ["arg", "M"], ["arg", "BLOCK_M"]],
                               ["call", "cdiv", ["arg", "N"], ["arg", "BLOCK_N"]]]],
                "key": [1024, 1024, 512, "torch.float16", "torch.float16", "torch.float16"]}]}

``args`` names the kernel's parameters (tuned meta-parameters and heuristics-computed ones left out: the
tuner supplies them). A tensor is ``{"tensor": {"shape", "dtype", "stride"?, "init"?, "values"?}}`` made on the
device (``init``: ``randn`` (floating-point default; seeded, so every run times the same data), ``zeros``
(integer and bool default: an index tensor of random values would send the kernel out of bounds), ``ones``;
``values``, the elements in row-major order, for small index tensors such as sequence offsets); a
scalar is a JSON scalar, or ``{"expr": NODE}`` in the heuristics expression language
(:mod:`karchive.format.heuristics_expr`) over the tensors and scalars; ``null`` passes None. ``grid`` is
one to three items, each an integer or an expression over the arguments and the config's meta-parameters
(the expression a Triton ``grid`` lambda computes from ``META``). ``key``, when given, must equal the
autotune key the runtime computes for the call (a guard against a file written for another kernel).
``calls_from_records`` makes the same calls from a capture's autotune entries that carry a ``call``.

Each call's key is timed across the kernel's prebuilt configs (:class:`Tuner`, through the resolver's
``time_configs``, the loop on-first-launch tuning uses too); what times a config is a seam (``bench``):
:class:`~.bench.DeviceBench` on the device (the runtime's rule: an estimate, ~25 ms of warm-up, ~100 ms of
timed runs, L2 overwritten before each, CUDA events, median; ``reset_to_zero`` / ``restore_value`` around
every run), a table in the tests.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ...core.jsonio import parse_json
from ...errors import ArgumentError, NoMatchingVariantError, SchemaError, TuneError
from ...format.autotune import normalize_key
from ...format.heuristics_expr import ExprError, check, evaluate
from ...format.tuned import KEY_DTYPES, KEY_MAX_VALUES

# the device's bench (karchive tune's default, the runtime's rule) and its policy, for the CLI and callers
from .bench import DeviceBench as DeviceBench
from .bench import RepPolicy as RepPolicy
from .decisions import as_decision

KEYS_FORMAT = "karchive-tune-keys/1"
MAX_KEYS_BYTES = 8 << 20
MAX_CALLS = 4096
#: Elements of one tensor a keys file may ask for (2**34: 32 GiB of fp16), so a typo cannot exhaust the device.
MAX_NUMEL = 1 << 34
DTYPES = KEY_DTYPES
INITS = ("randn", "zeros", "ones")
MAX_VALUES = KEY_MAX_VALUES


@dataclass(frozen=True)
class TensorSpec:
    shape: tuple[int, ...]
    dtype: str
    stride: tuple[int, ...] | None = None
    init: str = "randn"
    values: tuple | None = None  # the elements, row-major (small integer tensors: offsets, indices)


@dataclass(frozen=True)
class Expr:
    node: list


@dataclass
class TuneCall:
    """One call to tune: kernel, arguments by parameter name (TensorSpec, Expr or a scalar), grid, key."""

    kernel: str
    args: dict[str, Any]
    grid: list[Any]
    key: list | None = None
    index: int = 0


def _fail(msg: str, index: int | None = None, kernel: str | None = None) -> TuneError:
    return TuneError(msg, call=index, kernel=kernel)


def _tensor(obj: Any, where: str, index: int) -> TensorSpec:
    if not isinstance(obj, dict) or set(obj) - {"shape", "dtype", "stride", "init", "values"}:
        raise _fail(f"{where}: a tensor is {{'shape', 'dtype', 'stride'?, 'init'?, 'values'?}}", index)
    shape, dtype = obj.get("shape"), obj.get("dtype")
    if not isinstance(shape, list) or len(shape) > 8 or not all(type(d) is int and d >= 0 for d in shape):
        raise _fail(f"{where}.shape must be a list of at most 8 non-negative integers", index)
    if math.prod(shape) > MAX_NUMEL:
        raise _fail(f"{where}: {math.prod(shape)} elements is more than the {MAX_NUMEL} a keys file may ask for", index)
    if dtype not in DTYPES:
        raise _fail(f"{where}.dtype {dtype!r} is not one of {', '.join(DTYPES)}", index)
    stride = obj.get("stride")
    if stride is not None and (
        not isinstance(stride, list) or len(stride) != len(shape) or not all(type(s) is int and s >= 0 for s in stride)
    ):
        raise _fail(f"{where}.stride must give one non-negative integer per dimension", index)
    floating = dtype.startswith(("float", "bfloat"))
    init = obj.get("init", "randn" if floating else "zeros")
    if init not in INITS:
        raise _fail(f"{where}.init {init!r} is not one of {', '.join(INITS)}", index)
    values = obj.get("values")
    if values is not None:
        ok = (
            isinstance(values, list)
            and len(values) == math.prod(shape) <= MAX_VALUES
            and all(type(v) in (int, bool) or (type(v) is float and math.isfinite(v)) for v in values)
        )
        if not ok:
            raise _fail(
                f"{where}.values must list the tensor's {math.prod(shape)} elements as finite numbers "
                f"(at most {MAX_VALUES})",
                index,
            )
    return TensorSpec(
        tuple(shape),
        dtype,
        tuple(stride) if stride is not None else None,
        init,
        tuple(values) if values is not None else None,
    )


def _arg(value: Any, where: str, index: int) -> Any:
    if value is None or isinstance(value, (bool, int, str)) or (isinstance(value, float) and math.isfinite(value)):
        return value
    if isinstance(value, dict) and set(value) == {"tensor"}:
        return _tensor(value["tensor"], f"{where}.tensor", index)
    if isinstance(value, dict) and set(value) == {"expr"}:
        try:
            check(value["expr"], f"{where}.expr")
        except SchemaError as exc:
            raise _fail(str(exc), index) from None
        return Expr(value["expr"])
    raise _fail(f"{where}: an argument is a JSON scalar, {{'tensor': {{...}}}} or {{'expr': NODE}}", index)


def _grid(value: Any, where: str, index: int) -> list[Any]:
    if not isinstance(value, list) or not 1 <= len(value) <= 3:
        raise _fail(f"{where}: the grid is a list of 1 to 3 items", index)
    out: list[Any] = []
    for i, g in enumerate(value):
        if type(g) is int and g >= 0:
            out.append(g)
        elif isinstance(g, list):
            try:
                check(g, f"{where}[{i}]")
            except SchemaError as exc:
                raise _fail(str(exc), index) from None
            out.append(Expr(g))
        else:
            raise _fail(f"{where}[{i}] is a non-negative integer or an expression", index)
    return out


def parse_call(obj: Any, index: int, where: str = "calls") -> TuneCall:
    w = f"{where}[{index}]"
    if not isinstance(obj, dict) or set(obj) - {"kernel", "args", "grid", "key", "label"}:
        raise _fail(f"{w}: a call is {{'kernel', 'args', 'grid', 'key'?, 'label'?}}", index)
    kernel, args = obj.get("kernel"), obj.get("args")
    if not isinstance(kernel, str) or not kernel:
        raise _fail(f"{w}.kernel must name a kernel of the archive", index)
    if not isinstance(args, dict):
        raise _fail(f"{w}.args must be an object of parameter name -> value", index, kernel)
    key = obj.get("key")
    if key is not None and not isinstance(key, list):
        raise _fail(f"{w}.key must be a list (the autotune key)", index, kernel)
    return TuneCall(
        kernel,
        {str(n): _arg(v, f"{w}.args.{n}", index) for n, v in args.items()},
        _grid(obj.get("grid"), f"{w}.grid", index),
        key,
        index,
    )


def parse_keys_file(raw: bytes, where: str = "keys file") -> list[TuneCall]:
    """The calls of a keys file; :class:`TuneError` names the first thing wrong (nothing is evaluated)."""
    if len(raw) > MAX_KEYS_BYTES:
        raise TuneError(f"{where} is larger than {MAX_KEYS_BYTES} bytes", kernel=None, call=None)
    data = parse_json(raw, where, error=TuneError)
    if not isinstance(data, dict) or data.get("format") != KEYS_FORMAT or not isinstance(data.get("calls"), list):
        raise TuneError(
            f"{where} is not a keys file: expected {{'format': {KEYS_FORMAT!r}, 'calls': [...]}}",
            kernel=None,
            call=None,
        )
    if len(data["calls"]) > MAX_CALLS:
        raise TuneError(f"{where} holds {len(data['calls'])} calls; at most {MAX_CALLS}", kernel=None, call=None)
    return [parse_call(c, i) for i, c in enumerate(data["calls"])]


def calls_from_records(records: Sequence[Mapping[str, Any]], kernels: Sequence[str] | None = None) -> list[TuneCall]:
    """Calls from autotune entries that carry the captured call (``entry["call"]``: args as in a keys file,
    and ``grids``, the concrete grid per config index, which needs no expression)."""
    out: list[TuneCall] = []
    for r in records:
        name = r.get("kernel")
        if not isinstance(name, str) or (kernels and name not in kernels):
            continue
        for e in r.get("entries") or []:
            call = e.get("call") if isinstance(e, Mapping) else None
            if not isinstance(call, Mapping) or not isinstance(call.get("args"), dict):
                continue
            grids = call.get("grids")
            if not isinstance(grids, list):
                continue
            i = len(out)
            tc = TuneCall(
                name,
                {str(n): _arg(v, f"{name}.call.args.{n}", i) for n, v in call["args"].items()},
                [],
                list(e.get("key") or []),
                i,
            )
            # archive data: a grid is used only as 1 to 3 non-negative integers, anything else is "not recorded"
            tc.grid = [
                _PerConfig(
                    [
                        g
                        if isinstance(g, list)
                        and 1 <= len(g) <= 3
                        and all(type(x) is int and 0 <= x < (1 << 31) for x in g)
                        else None
                        for g in grids
                    ]
                )
            ]
            out.append(tc)
    return out


@dataclass(frozen=True)
class _PerConfig:
    """A captured grid: the concrete grid Triton computed for each config index (None where not recorded)."""

    grids: list[list | None]


# -- making the arguments ---------------------------------------------------------------------------------------
class ArgFactory(Protocol):
    def tensor(self, spec: TensorSpec, seed: int) -> Any: ...


class TorchFactory:
    """Tensors made by torch on the current CUDA device (karchive has no allocator of its own)."""

    def __init__(self, device: str = "cuda") -> None:
        try:
            import torch
        except ImportError:
            raise TuneError(
                "tuning makes the keys file's tensors with torch, which is not installed here (pip install torch)",
                kernel=None,
                call=None,
            ) from None

        self.torch = torch
        self.device = device

    def tensor(self, spec: TensorSpec, seed: int) -> Any:
        torch = self.torch
        dtype = getattr(torch, spec.dtype)
        if spec.stride is not None:
            span = 1 + sum((d - 1) * s for d, s in zip(spec.shape, spec.stride)) if all(spec.shape) else 0
            out = torch.as_strided(self._fill(span, dtype, spec.init, seed), spec.shape, spec.stride)
        else:
            out = self._fill(math.prod(spec.shape), dtype, spec.init, seed).reshape(spec.shape)
        if spec.values is not None:
            out.copy_(torch.tensor(spec.values, dtype=dtype, device=self.device).reshape(spec.shape))
        return out

    def _fill(self, n: int, dtype: Any, init: str, seed: int) -> Any:
        torch = self.torch
        if init == "zeros":
            return torch.zeros(n, dtype=dtype, device=self.device)
        if init == "ones":
            return torch.ones(n, dtype=dtype, device=self.device)
        g = torch.Generator(device=self.device).manual_seed(seed)
        if dtype.is_floating_point and dtype.itemsize >= 2:
            return torch.randn(n, generator=g, device=self.device, dtype=dtype)
        if dtype == torch.bool:
            return torch.randint(0, 2, (n,), generator=g, device=self.device).bool()
        if dtype.is_floating_point:  # fp8: no randn of its own
            return torch.randn(n, generator=g, device=self.device).to(dtype)
        return torch.randint(-8, 8, (n,), generator=g, device=self.device, dtype=dtype)


def materialize(call: TuneCall, factory: ArgFactory) -> dict[str, Any]:
    """The call's arguments: tensors made (seeded by call and name), expressions evaluated over them."""
    out: dict[str, Any] = {}
    for n, v in call.args.items():
        if isinstance(v, TensorSpec):
            out[n] = factory.tensor(v, seed=(call.index * 7919 + sum(map(ord, n))) % (1 << 31))
    for n, v in call.args.items():
        if isinstance(v, Expr):
            try:
                out[n] = evaluate(v.node, out)
            except ExprError as exc:
                raise _fail(f"calls[{call.index}].args.{n}: {exc}", call.index, call.kernel) from None
        elif not isinstance(v, TensorSpec):
            out[n] = v
    return out


def grid_for(call: TuneCall, named: Mapping[str, Any], config_index: int | None) -> tuple[int, ...]:
    """The launch grid of ``call`` under a config (its meta-parameters are in ``named``)."""
    if len(call.grid) == 1 and isinstance(call.grid[0], _PerConfig):
        grids = call.grid[0].grids
        g = grids[config_index] if config_index is not None and 0 <= config_index < len(grids) else None
        if g is None:
            raise _fail(
                f"calls[{call.index}]: the capture recorded no grid for config {config_index}", call.index, call.kernel
            )
        return tuple(int(x) for x in g)
    out = []
    for item in call.grid:
        if isinstance(item, Expr):
            try:
                value = evaluate(item.node, named)
            except ExprError as exc:
                raise _fail(f"calls[{call.index}].grid: {exc}", call.index, call.kernel) from None
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise _fail(
                    f"calls[{call.index}].grid: an item evaluated to {value!r}, not a non-negative integer",
                    call.index,
                    call.kernel,
                )
            out.append(value)
        else:
            out.append(int(item))
    return tuple(out)


# -- timing -----------------------------------------------------------------------------------------------------
class Bench(Protocol):
    """Seconds of each timed run of ``launch`` (the median is taken); ``hooks`` go around every run."""

    def __call__(
        self, config: Mapping[str, Any], launch: Callable[[], None], hooks: Any, sync: Callable[[], None]
    ) -> list[float]: ...


@dataclass
class Decision:
    """The config a call's key takes on this device, and what every config measured (ms; None: not run)."""

    kernel: str
    key: list
    config: int
    record: int  # index among the kernel's autotune records
    timings_ms: list[float | None] = field(default_factory=list)
    skipped: dict[int, str] = field(default_factory=dict)  # config index -> why it was not timed
    call: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "kernel": self.kernel,
            "key": self.key,
            "config": self.config,
            "call": self.call,
            "timings_ms": self.timings_ms,
            "skipped": {str(k): v for k, v in sorted(self.skipped.items())},
        }


class Tuner:
    """Times every prebuilt config of an archive's autotuned kernels on calls, one decision per key."""

    def __init__(
        self,
        archive: Any,
        *,
        bench: Bench | None = None,
        make_bench: Callable[[Any], Bench] | None = None,
        factory: ArgFactory | None = None,
    ) -> None:
        self.archive = archive
        self._bench = bench
        self._make_bench = make_bench or DeviceBench  # made for the device of the first call (its L2 flush)
        self._factory = factory
        self.bench_info: dict[str, Any] = {}
        self.device: Any = None
        self.failed: list[dict[str, Any]] = []  # calls a keep_going run could not tune, with why

    def _kernel(self, call: TuneCall) -> Any:
        from ..autotuned import AutotuneResolver

        try:
            k = self.archive.kernel(call.kernel).resolver  # one Kernel type: an autotuned one has this resolver
        except NoMatchingVariantError as exc:
            raise _fail(f"calls[{call.index}]: {exc}", call.index, call.kernel) from None
        if not isinstance(k, AutotuneResolver):
            raise _fail(
                f"calls[{call.index}]: {call.kernel} is not an autotuned kernel (no autotune record): "
                "there is nothing to choose",
                call.index,
                call.kernel,
            )
        return k

    def tune(self, calls: Sequence[TuneCall], *, keep_going: bool = False) -> list[Decision]:
        """One decision per distinct (kernel, key); a key given twice is timed once (the first call). With
        ``keep_going`` a call that cannot be tuned is listed in ``self.failed`` and the others still are."""
        seen: set[tuple[str, str]] = set()
        out = []
        self.failed = []
        for call in calls:
            try:
                k = self._kernel(call)
                args = materialize(call, self._factory or TorchFactory())
                key = self._key(k, call, args)
                ident = (k.name, repr(key))
                if ident in seen:
                    continue
                seen.add(ident)
                out.append(self._tune_one(k, call, args, key))
            except TuneError as exc:
                if not keep_going:
                    raise
                self.failed.append({"call": call.index, "kernel": call.kernel, "error": str(exc)})
        return out

    def _key(self, k: Any, call: TuneCall, args: Mapping[str, Any]) -> list:
        positional = [args[n] for n in k.param_names if n in args]
        unknown = sorted(set(args) - set(k.param_names))
        if unknown:
            raise _fail(f"calls[{call.index}]: {k.name} has no parameter(s) {unknown}", call.index, k.name)
        key: list = k.tuning_key(*positional)
        if call.key is not None and normalize_key(call.key) != key:
            raise _fail(
                f"calls[{call.index}]: the file says key {call.key}, the runtime computes {key} for these "
                "arguments (the file was written for another kernel or argument list)",
                call.index,
                k.name,
            )
        return key

    def _bench_for(self, device: Any) -> Bench:
        if self._bench is None:
            self._bench = self._make_bench(device)
        describe = getattr(self._bench, "describe", None)
        self.bench_info = describe() if callable(describe) else {}
        return self._bench

    def _tune_one(self, k: Any, call: TuneCall, args: Mapping[str, Any], key: list) -> Decision:
        names = list(k.param_names)
        positional = [args[n] for n in names if n in args]
        named = dict(zip([n for n in names if n in args], positional))
        outer = k._outer(dict(named))
        device = k._device_of(positional, {})
        if self.device is None:
            self.device = device
        bench = self._bench_for(device)
        record_index, record = 0, k.records[0].raw  # the record as stored (configs by index)
        configs = [as_decision(raw) for raw in record.get("configs") or []]

        def bind(i: int, kernel: Any, cx: dict) -> Any:
            return kernel.bind(grid_for(call, {**named, **cx}, i), *positional, **cx)

        best, times, skipped = k.time_configs(
            configs, named, outer, bind, bench, skip=(NoMatchingVariantError, ArgumentError)
        )
        timings = [round(t * 1000.0, 6) if t is not None and math.isfinite(t) else None for t in times]
        if best is None:
            why = "; ".join(f"config {i}: {w}" for i, w in sorted(skipped.items()))
            raise _fail(
                f"calls[{call.index}]: no prebuilt config of {k.name} can run key {key} here ({why})",
                call.index,
                k.name,
            )
        return Decision(k.name, key, best, record_index, timings, skipped, call.index)
