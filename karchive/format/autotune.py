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
                  "timings_ms": [0.31, 0.12, null]}],  # per config, when benchmarked during capture
     "fallback": "nearest-log2"}

Fallback for a key that was never seen (:func:`choose_config`): among the entries whose key has the
same length and the same non-numeric parts (dtype strings, booleans, None), take the one nearest in
``sum |f(a) - f(b)|`` with ``f(x) = sign(x) * log2(1 + |x|)`` over the numeric parts; ties go to the
entry recorded first. If no entry matches the non-numeric parts, there is no choice (``None``): the
caller must refuse or benchmark the prebuilt candidates (:func:`rank_entries` orders them).
"""

from __future__ import annotations

import math
import numbers
from typing import Any
from collections.abc import Iterable, Mapping, Sequence

FALLBACK_RULE = "nearest-log2"


def json_scalar(value: Any) -> Any:
    """``value`` as a JSON scalar: None, booleans, numbers and strings (numpy integers and reals
    converted), else :data:`NotImplemented`. Autotune keys and heuristics inputs both go through it."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, numbers.Integral):  # numpy integers and friends
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    return NotImplemented


def normalize_value(value: Any) -> Any:
    """A key component as JSON stores it: numbers, strings, booleans and None stay; anything else is str()."""
    out = json_scalar(value)
    return str(value) if out is NotImplemented else out


def normalize_key(values: Iterable[Any]) -> list:
    return [normalize_value(v) for v in values]


def key_for_call(record: Mapping[str, Any], named_args: Mapping[str, Any]) -> list:
    """The autotune key of a call, computed the way Triton's Autotuner does (key args, then arg dtypes)."""
    key = [named_args[n] for n in record.get("key_names", []) if n in named_args]
    key += [str(named_args[n].dtype) for n in record.get("dtype_args", [])
            if n in named_args and hasattr(named_args[n], "dtype")]
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
