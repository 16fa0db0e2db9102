"""Autotune records in the manifest, and the rule that picks a recorded config for a call.

Pure data and arithmetic, no Triton import: the runtime uses it to choose a prebuilt variant for an
autotuned kernel without benchmarking. Manifest shape (top-level ``autotune`` list, one record per kernel)::

    {"kernel": "kernels:matmul_kernel",        # the kernel's name, module:qualname (= the variants' "kernel")
     "key_names": ["M", "N", "K"],             # Autotuner(key=...) argument names, in order
     "dtype_args": ["a_ptr", "b_ptr", "c_ptr"],  # arguments whose str(dtype) Triton appends to the key
     "configs": [{"kwargs": {"BLOCK_M": 64}, "num_warps": 4, "num_stages": 3, "num_ctas": 1,
                  "maxnreg": null}, ...],      # every config the autotuner declares
     "entries": [{"key": [512, 512, 512, "torch.float16", "torch.float16", "torch.float16"],
                  "config": 1,                 # index into "configs" of the chosen config
                  "variant": "<variant key>",  # the archive variant Triton launched for that key (or null)
                  "timings_ms": [0.31, 0.12, {"float": "inf"}]}],  # per config, when benchmarked during capture
     "fallback": "nearest-log2"}

JSON has no infinity or NaN, and Triton hands over both (``float('inf')`` is its timing of a config
that ran out of resources; a key argument may be a non-finite float): such a number is stored as
``{"float": "inf"}``, ``{"float": "-inf"}`` or ``{"float": "nan"}`` (:func:`json_number`), which
compares equal to itself and never to a number (spec/FORMAT.md §6.3).

Fallback for a key that was never seen (:func:`choose_config`): among the entries whose key has the
same length and the same non-numeric parts (dtype strings, booleans, None), take the one nearest in
``sum |f(a) - f(b)|`` with ``f(x) = sign(x) * log2(1 + |x|)`` over the numeric parts; ties go to the
entry recorded first. If no entry matches the non-numeric parts, there is no choice (``None``): the
caller must refuse or benchmark the prebuilt candidates (:func:`rank_entries` orders them).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

FALLBACK_RULE = "nearest-log2"
#: A config's codegen options besides its ``kwargs`` (the launch options a variant records): the one list, which
#: heuristics, the launch plan, serve's miss spec and the producers read.
CONFIG_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")
#: The AMD backend's own codegen options that builds sweep besides those (spec/BUILD.md).
HIP_TUNING_OPTIONS = ("waves_per_eu", "matrix_instr_nonkdim", "kpack", "schedule_hint")


#: The spellings of the non-finite floats JSON cannot hold, as ``{"float": <spelling>}``.
NONFINITE = ("inf", "-inf", "nan")


def nonfinite(value: float) -> dict[str, str]:
    """``{"float": "inf" | "-inf" | "nan"}`` for a non-finite float."""
    return {"float": "nan" if value != value else ("inf" if value > 0 else "-inf")}


def _is_numpy_bool(value: Any) -> bool:
    t = type(value)
    return t.__module__ == "numpy" and t.__name__ in ("bool_", "bool")  # numpy 1 and 2 spell it differently


def json_scalar(value: Any) -> Any:
    """``value`` as a finite JSON scalar: None, booleans, finite numbers and strings (numpy booleans,
    integers and reals converted), else :data:`NotImplemented` (non-finite floats included: JSON cannot
    hold them, see :func:`json_number`). Autotune keys and heuristics inputs both go through it."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if _is_numpy_bool(value):
        return bool(value)
    if isinstance(value, numbers.Integral):  # numpy integers and friends
        return int(value)
    if isinstance(value, numbers.Real):
        try:
            f = float(value)
        except (TypeError, ValueError, OverflowError):
            return NotImplemented
        return f if math.isfinite(f) else NotImplemented
    return NotImplemented


def json_number(value: Any) -> Any:
    """A timing or other number as stored: a finite float, ``{"float": ...}`` for inf/NaN, None if not a number."""
    if value is None or isinstance(value, bool):
        return None
    try:
        f = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return f if math.isfinite(f) else nonfinite(f)


def normalize_value(value: Any) -> Any:
    """A key component as JSON stores it: finite numbers, strings, booleans and None stay; a non-finite
    float is ``{"float": ...}``; anything else (a dtype, an enum) is its ``str()``."""
    out = json_scalar(value)
    if out is not NotImplemented:
        return out
    if isinstance(value, numbers.Real) and not _is_numpy_bool(value):
        try:
            return nonfinite(float(value))
        except (TypeError, ValueError, OverflowError):
            pass
    try:
        return str(value)
    except Exception:  # noqa: BLE001 - a foreign object whose __str__ fails: its type still says what it was
        return f"<{type(value).__name__}>"


def json_safe(obj: Any, depth: int = 0) -> Any:
    """A record made storable as canonical JSON: dicts (string keys), lists, finite JSON scalars; non-finite
    floats as ``{"float": ...}``, numpy scalars converted, anything else its ``str()``. Producer records go
    through it before they are written, so a value of a type nobody foresaw costs nothing but its detail."""
    if depth > 48:
        raise ValueError("nested too deeply to store")
    if isinstance(obj, dict):
        return {str(k): json_safe(v, depth + 1) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v, depth + 1) for v in obj]
    return normalize_value(obj)


def normalize_key(values: Iterable[Any]) -> list:
    return [normalize_value(v) for v in values]


def key_for_call(
    record: Mapping[str, Any], named_args: Mapping[str, Any], arg_names: Iterable[str] | None = None
) -> list:
    """The autotune key of a call, computed as Triton's ``Autotuner.run`` does (3.4 to 3.9 alike).

    ``named_args`` is what the autotuner receives, in its order: the positional arguments by name, then
    the keywords, then (when ``@triton.heuristics`` wraps the autotuner) the values the heuristics
    computed. Triton keeps the names that are kernel parameters (``arg_names``; all when None), takes the
    ``key=`` values among them, then appends ``str(x.dtype)`` of *every* kept argument that has a
    ``dtype``, in that order (``dtype_args`` in a record is informational: the rule is Triton's).
    """
    if arg_names is not None:
        names = set(arg_names)
        named_args = {k: v for k, v in named_args.items() if k in names}
    key = [named_args[n] for n in record.get("key_names", []) if n in named_args]
    key += [str(v.dtype) for v in named_args.values() if hasattr(v, "dtype")]
    return normalize_key(key)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _scale(v: float) -> float:
    return math.copysign(math.log2(1.0 + abs(v)), v)


def key_distance(a: Sequence[Any], b: Sequence[Any]) -> float | None:
    """Distance between two keys under the fallback rule; None when they are not comparable."""
    if len(a) != len(b):
        return None
    total = 0.0
    for x, y in zip(a, b):
        if _is_number(x) and _is_number(y):
            total += abs(_scale(x) - _scale(y))
        elif _is_number(x) != _is_number(y) or x != y:
            return None
    return total


def _records(records: Any, kernel: str | None) -> list[Mapping[str, Any]]:
    if isinstance(records, Mapping):
        records = [records]
    return [r for r in records or [] if kernel is None or r.get("kernel") == kernel]


def rank_entries(records: Any, key_values: Sequence[Any], *, kernel: str | None = None) -> list[tuple[float, Mapping]]:
    """Comparable entries with their distance, nearest first (an exact match has distance 0)."""
    key = normalize_key(key_values)
    ranked = []
    order = 0
    for record in _records(records, kernel):
        for entry in record.get("entries", []):
            d = key_distance(key, entry.get("key", []))
            if d is not None:
                ranked.append((d, order, entry))
            order += 1
    ranked.sort(key=lambda t: (t[0], t[1]))
    return [(d, e) for d, _, e in ranked]


def choose_config(records: Any, key_values: Sequence[Any], *, kernel: str | None = None) -> Mapping | None:
    """The recorded entry for ``key_values``: the exact key if it was tuned, else the fallback rule's pick.

    ``records`` is the manifest's ``autotune`` list (or one record); ``kernel`` restricts it to one kernel.
    Returns the entry dict (``entry["key"] == key_values`` tells an exact hit) or None.
    """
    ranked = rank_entries(records, key_values, kernel=kernel)
    return ranked[0][1] if ranked else None


def entry_config(record: Mapping[str, Any], entry: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The config dict an entry points at (entries store an index into the record's ``configs``)."""
    index = entry.get("config")
    configs = record.get("configs", [])
    if isinstance(index, int) and not isinstance(index, bool) and 0 <= index < len(configs):
        return configs[index]
    return None


# --- the typed record the runtime reads ---------------------------------------------------------------------
@dataclass(frozen=True)
class AutotuneConfig:
    """One config an autotuner declares: its constexprs and its codegen options (the non-null ones)."""

    kwargs: Mapping[str, Any]
    options: Mapping[str, Any]  # num_warps, num_stages, num_ctas, maxnreg: only those the record gives

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> AutotuneConfig:
        kwargs = obj.get("kwargs")
        return cls(
            dict(kwargs) if isinstance(kwargs, Mapping) else {},
            {k: obj[k] for k in CONFIG_OPTIONS if obj.get(k) is not None},
        )


@dataclass(frozen=True)
class AutotuneEntry:
    """One tuned key: the key as stored, the chosen config (None: the index names none), the variant Triton ran."""

    key: tuple[Any, ...]
    config: AutotuneConfig | None
    variant: str | None


@dataclass(frozen=True)
class AutotuneRecord:
    """A manifest ``autotune`` record (spec/FORMAT.md §6.3), typed; :attr:`raw` is the object as stored.

    The on-disk shape is unchanged: :meth:`from_json` reads it, :meth:`to_json` gives it back as read (the
    tuning cache digests it, so a rebuilt archive does not share decisions with this one).
    """

    kernel: str
    key_names: tuple[str, ...]
    configs: tuple[AutotuneConfig | None, ...]  # by index, as entries refer to them (None: not an object)
    entries: tuple[AutotuneEntry, ...]
    #: Heuristics computed above the autotuner (they join its key); None: a record that does not say (older).
    outer_heuristics: frozenset[str] | None
    reset_to_zero: tuple[str, ...]
    restore_value: tuple[str, ...]
    fallback: str
    raw: Mapping[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> AutotuneRecord:
        configs = tuple(
            AutotuneConfig.from_json(c) if isinstance(c, Mapping) else None for c in obj.get("configs") or []
        )
        entries = []
        for e in obj.get("entries") or []:
            if not isinstance(e, Mapping):
                continue
            index = e.get("config")
            cfg = (
                configs[index]
                if isinstance(index, int) and not isinstance(index, bool) and 0 <= index < len(configs)
                else None
            )
            variant = e.get("variant")
            entries.append(AutotuneEntry(tuple(e.get("key") or ()), cfg, variant if isinstance(variant, str) else None))
        outer = obj.get("outer_heuristics")
        return cls(
            kernel=str(obj.get("kernel", "")),
            key_names=tuple(str(n) for n in obj.get("key_names") or []),
            configs=configs,
            entries=tuple(entries),
            outer_heuristics=frozenset(str(n) for n in outer) if isinstance(outer, list) else None,
            reset_to_zero=tuple(str(n) for n in obj.get("reset_to_zero") or []),
            restore_value=tuple(str(n) for n in obj.get("restore_value") or []),
            fallback=str(obj.get("fallback") or FALLBACK_RULE),
            raw=obj,
        )

    def to_json(self) -> Mapping[str, Any]:
        return self.raw

    def key_for_call(self, named_args: Mapping[str, Any], arg_names: Iterable[str] | None = None) -> list:
        """The autotune key of a call (:func:`key_for_call`)."""
        return key_for_call({"key_names": list(self.key_names)}, named_args, arg_names)


def choose_entry(
    records: Sequence[AutotuneRecord], key_values: Sequence[Any]
) -> tuple[AutotuneRecord, AutotuneEntry] | None:
    """:func:`choose_config` over typed records: the exact key, else the fallback rule's pick (ties: recorded first)."""
    key = normalize_key(key_values)
    best: tuple[float, AutotuneRecord, AutotuneEntry] | None = None
    for record in records:
        for entry in record.entries:
            d = key_distance(key, entry.key)
            if d is not None and (best is None or d < best[0]):
                best = (d, record, entry)
    return None if best is None else (best[1], best[2])
