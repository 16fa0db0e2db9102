"""Record what ``@triton.autotune`` chose, per autotune key, while a capture is active.

Triton 3.8+ reports each tuning through ``knobs.autotuning.listener``; older versions do not, so
karchive also wraps ``Autotuner.run`` and reads the tuner's ``cache`` dict after the call. The run's
return value is the ``CompiledKernel`` Triton launched with the chosen config, which names the variant.
The manifest shape and the selection rule live in :mod:`karchive.format.autotune`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...format.autotune import FALLBACK_RULE, json_number, json_scalar, normalize_key
from ..compile.canonical import kernel_name
from ..compile.kernel_ref import config_json


def innermost_jit(obj: Any) -> Any:
    """Autotuner -> (Heuristics ->) JITFunction; a JITFunction has ``params`` and ``cache_key``."""
    for _ in range(8):
        if hasattr(obj, "params") and hasattr(obj, "cache_key"):
            return obj
        if not hasattr(obj, "fn"):
            break
        obj = obj.fn
    return obj


def call_args(tuner: Any, args: tuple, kwargs: dict) -> dict[str, Any]:
    """The named arguments Triton's Autotuner.run builds its key from."""
    all_args = {**dict(zip(tuner.arg_names, args)), **kwargs}
    return {k: v for k, v in all_args.items() if k in tuner.arg_names}


def tuning_key(tuner: Any, named: dict[str, Any]) -> tuple:
    """Autotuner.run's key: the key arguments' values, then ``str(dtype)`` of every argument with one."""
    key = [named[k] for k in tuner.keys if k in named]
    key += [str(v.dtype) for v in named.values() if hasattr(v, "dtype")]
    return tuple(key)


@dataclass
class AutotuneRecord:
    kernel: str
    key_names: list[str]
    dtype_args: list[str]
    configs: list[dict]
    entries: dict[str, dict] = field(default_factory=dict)  # canonical key text -> entry
    outer_heuristics: list[str] = field(default_factory=list)  # computed above the tuner: part of its key
    reset_to_zero: list[str] = field(default_factory=list)
    restore_value: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "kernel": self.kernel,
            "key_names": self.key_names,
            "dtype_args": self.dtype_args,
            "configs": self.configs,
            "entries": list(self.entries.values()),
            "fallback": FALLBACK_RULE,
            "outer_heuristics": list(self.outer_heuristics),
            "reset_to_zero": list(self.reset_to_zero),
            "restore_value": list(self.restore_value),
        }


class AutotuneLog:
    """Autotune records of one capture, merged per (kernel, key names, configs)."""

    def __init__(self) -> None:
        self.records: dict[tuple, AutotuneRecord] = {}
        self.warnings: list[str] = []
        self._known: dict[tuple, Any] = {}  # (tuner, key, chosen config, variant) already recorded -> the tuner

    def observe(
        self,
        tuner: Any,
        args: tuple,
        kwargs: dict,
        *,
        key: tuple | None,
        chosen: Any,
        timings: dict | None,
        variant_key: str | None,
        outer: list[str] | None = None,
    ) -> None:
        if key is None:
            key = tuning_key(tuner, call_args(tuner, args, kwargs))
        known: tuple | None
        try:  # every launch of a tuned kernel comes here: the same choice again is recorded once
            known = (id(tuner), tuple(key), id(chosen), variant_key)
            if not timings and self._known.get(known) is tuner:
                return
        except TypeError:  # an unhashable key part
            known = None
        fn = innermost_jit(tuner)
        kernel = kernel_name(fn)  # the variants' name: module:qualname
        named = call_args(tuner, args, kwargs)
        configs = [config_json(c) for c in tuner.configs]
        rec_id = (kernel, tuple(tuner.keys), repr(configs))
        record = self.records.get(rec_id)
        if record is None:
            if any(r.kernel == kernel for r in self.records.values()):
                self.warnings.append(
                    f"{kernel}: two autotuners with different keys/configs wrap this kernel; "
                    "both records are kept and the runtime sees two records for one kernel"
                )
            record = AutotuneRecord(
                kernel,
                list(tuner.keys),
                [n for n, v in named.items() if hasattr(v, "dtype")],
                configs,
                reset_to_zero=[str(n) for n in getattr(tuner, "reset_to_zero", None) or []],
                restore_value=[str(n) for n in getattr(tuner, "restore_value", None) or []],
            )
            self.records[rec_id] = record
        for name in outer or ():
            if name not in record.outer_heuristics:
                record.outer_heuristics.append(name)
        if any(c.get("pre_hook") for c in configs):
            msg = f"{kernel}: autotune configs have pre_hooks; the runtime launches the binary but cannot run the hook"
            if any(hasattr(v, "block_shape") and hasattr(v, "base") for v in named.values()):  # issue 21
                msg += (
                    "; its tensor descriptors take each variant's compiled block shape (what such hooks "
                    "usually set), anything else the hook does is not reproduced"
                )
            if msg not in self.warnings:
                self.warnings.append(msg)
        index = _config_index(tuner.configs, chosen)
        key_list = normalize_key(key if key is not None else tuning_key(tuner, named))
        entry = record.entries.get(repr(key_list)) or {"key": key_list}
        if "call" not in entry:  # the call as data, so `karchive tune --from-capture` can time it again
            described = describe_call(named, kwargs.get("grid"), tuner.configs, skip=set(outer or ()))
            if described is not None:
                entry["call"] = described
        entry["config"] = index
        if variant_key is not None or "variant" not in entry:
            entry["variant"] = variant_key
        if timings:
            entry["timings_ms"] = [_median(timings.get(c)) if c in timings else None for c in tuner.configs]
        record.entries[repr(key_list)] = entry
        if known is not None:
            self._known[known] = tuner  # holds the tuner, so its id cannot be reused while this log lives

    def to_json(self) -> list[dict]:
        return [r.to_json() for r in sorted(self.records.values(), key=lambda r: (r.kernel, r.key_names))]


def describe_call(named: dict[str, Any], grid: Any, configs: list, skip: set[str]) -> dict | None:
    """The call an autotune entry was tuned on, as a keys file describes one (spec/FORMAT.md §6.6): tensors by
    shape, dtype and stride, scalars by value, and the grid Triton computes for each config (the user's grid
    function, called as Triton calls it with the arguments and the config's meta-parameters). None when an
    argument is neither (e.g. a tensor of a dtype keys files do not name): that entry then needs a keys file."""
    from ...format.tuned import KEY_DTYPES, KEY_MAX_VALUES

    args: dict[str, Any] = {}
    for name, value in named.items():
        if name in skip or name in ("grid", "warmup"):
            continue
        if hasattr(value, "data_ptr") and hasattr(value, "shape") and hasattr(value, "dtype"):
            dtype = str(value.dtype).removeprefix("torch.")
            try:
                shape, stride = [int(d) for d in value.shape], [int(s) for s in value.stride()]
            except Exception:  # noqa: BLE001 - not a torch-like tensor: this entry gets no call
                return None
            if dtype not in KEY_DTYPES:
                return None
            tensor: dict[str, Any] = {"shape": shape, "dtype": dtype, "stride": stride}
            if not dtype.startswith(("float", "bfloat")):
                # an integer tensor is usually an index (sequence offsets, gather indices): random values would
                # send the kernel out of bounds, so a small one is recorded whole and a large one made of zeros
                try:
                    if value.numel() <= KEY_MAX_VALUES:
                        values = [json_scalar(v) for v in value.detach().flatten().tolist()]
                        if NotImplemented not in values:
                            tensor["values"] = values
                except Exception:  # noqa: BLE001 - not a torch tensor after all: zeros at tuning time
                    pass
            args[name] = {"tensor": tensor}
            continue
        scalar = json_scalar(value)
        if scalar is NotImplemented:
            return None
        args[name] = scalar
    grids: list[list[int] | None] = []
    for c in configs:
        try:
            meta = {**named, **c.all_kwargs()}
            g = grid(meta) if callable(grid) else grid
            grids.append([int(x) for x in g] if isinstance(g, (tuple, list)) and 1 <= len(g) <= 3 else None)
        except Exception:  # noqa: BLE001 - a grid function that fails for a config Triton never ran
            grids.append(None)
    return {"args": args, "grids": grids}


def _config_index(configs: list, chosen: Any) -> int | None:
    for i, c in enumerate(configs):
        if c is chosen:
            return i
    for i, c in enumerate(configs):
        try:
            if c == chosen:
                return i
        except Exception:  # noqa: BLE001 - Config.__eq__ of old Tritons may not handle foreign objects
            continue
    return None


def _median(value: Any) -> Any:
    """Triton's timing of one config (a float, or [median, q20, q80]) as stored: a finite float,
    ``{"float": "inf"}`` for a config that could not run (Triton's own marker), None if not a number."""
    if isinstance(value, (list, tuple)):
        value = value[0] if value else None
    return json_number(value)
