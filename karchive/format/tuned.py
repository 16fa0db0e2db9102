"""Tuning tables: per GPU model, the config a device run chose for each autotune key (spec/FORMAT.md §6.3).

``karchive tune`` times the prebuilt configs of an autotuned kernel on a device and writes the winners
into the kernel's autotune record, as a ``tuned`` list with one table per GPU model::

    "tuned": [{"device": {"name": "NVIDIA H100 80GB HBM3", "target": "cuda:90"},
               "entries": [{"key": [4096, "torch.float16"], "config": 2}, ...],
               "provenance": {"by": "karchive tune", "karchive": "0.1.0", "driver": 13000,
                              "from": {"name": "ops", "version": "1", "sha256": "..."},
                              "bench": {"warmup_ms": 25.0, "rep_ms": 100.0, "min_reps": 10, "max_reps": 1000,
                                        "l2_flush": true, "timer": "cuda-events"}}}]

Timings are not stored: the same decisions give the same bytes. Entries are sorted by their key's
canonical JSON and tables by device name, and a table for a device replaces the one before it key by key,
so tuning again only adds or changes what was decided. A runtime uses a table whose ``device.name`` is
its GPU's name (and whose ``target``, when given, is its own) before its local cache, and only for an
exact key. Pure data: nothing here imports a device library.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..core.jsonio import canonical_json
from ..errors import SchemaError
from .autotune import normalize_key

FIELD = "tuned"
#: Tensor dtypes a keys file (and a captured call) names, as torch spells them without ``torch.``.
KEY_DTYPES = (
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "bool",
    "float8_e4m3fn",
    "float8_e5m2",
)
#: Elements a tensor's ``values`` may list in a keys file or a captured call (index tensors, not data).
KEY_MAX_VALUES = 1 << 16


def key_text(key: Sequence[Any]) -> str:
    """A stored key as one comparable string (canonical JSON of the normalized key)."""
    return canonical_json(normalize_key(key)).decode()


def device_label(name: str, target: str | None) -> dict[str, str]:
    out = {"name": str(name)}
    if target:
        out["target"] = str(target)
    return out


def _matches(table_device: Any, name: str, target: str | None) -> bool:
    if not isinstance(table_device, Mapping) or table_device.get("name") != name or not name:
        return False
    want = table_device.get("target")
    return want is None or target is None or want == target


def tables(record: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    raw = record.get(FIELD)
    return [t for t in raw if isinstance(t, Mapping)] if isinstance(raw, list) else []


def lookup(
    records: Iterable[Mapping[str, Any]], name: str, target: str | None, key: Sequence[Any]
) -> tuple[Mapping[str, Any], Mapping[str, Any]] | None:
    """(record, config) the tuning table for this GPU model holds for exactly ``key``; None if none does.
    A config index outside the record's configs is ignored (a damaged or hand-edited table)."""
    want = key_text(key)
    for record in records:
        configs = record.get("configs")
        for table in tables(record):
            if not _matches(table.get("device"), name, target):
                continue
            for entry in table.get("entries") or []:
                if not isinstance(entry, Mapping) or key_text(entry.get("key") or []) != want:
                    continue
                i = entry.get("config")
                if (
                    isinstance(configs, list)
                    and isinstance(i, int)
                    and not isinstance(i, bool)
                    and 0 <= i < len(configs)
                    and isinstance(configs[i], Mapping)
                ):
                    return record, configs[i]
    return None


def without_tables(record: Mapping[str, Any]) -> dict[str, Any]:
    """The record as a kernel's identity sees it: tuning tables do not change which binaries it holds
    (the local tuning cache keys on this, so a tuned version shares decisions with its untuned one)."""
    return {k: v for k, v in record.items() if k != FIELD}


def merge_table(
    record: Mapping[str, Any], device: Mapping[str, str], entries: Mapping[str, int], provenance: Mapping[str, Any]
) -> dict[str, Any]:
    """``record`` with ``entries`` (key text -> config index) added to its table for ``device``; a key
    already there is decided again, the table's provenance is the newest run's."""
    configs = record.get("configs")
    n = len(configs) if isinstance(configs, list) else 0
    for text, index in entries.items():
        if not (isinstance(index, int) and 0 <= index < n):
            raise SchemaError(
                f"tuning decision for key {text} names config {index!r}; the record has {n}", where="autotune.tuned"
            )
    old = [t for t in tables(record)]
    mine: dict[str, int] = {}
    kept = []
    for t in old:
        d = t.get("device")
        if isinstance(d, Mapping) and d.get("name") == device.get("name") and d.get("target") == device.get("target"):
            for e in t.get("entries") or []:
                if isinstance(e, Mapping) and isinstance(e.get("config"), int):
                    mine[key_text(e.get("key") or [])] = e["config"]
        else:
            kept.append(dict(t))
    mine.update(entries)
    from ..core.jsonio import parse_json

    table = {
        "device": dict(device),
        "entries": [
            {"key": parse_json(text.encode(), "tuning key", error=SchemaError), "config": mine[text]}
            for text in sorted(mine)
        ],
        "provenance": dict(provenance),
    }
    out = dict(record)
    out[FIELD] = sorted(kept + [table], key=lambda t: canonical_json(t.get("device")))
    return out


def check_tables(record: Mapping[str, Any], where: str) -> None:
    """A tuned list's shape (the reader's schema says the same); raises :class:`SchemaError`. The signed sidecar's
    import checks a whole document with it before anything is written."""
    raw = record.get(FIELD)
    if raw is None:
        return
    if not isinstance(raw, list):
        raise SchemaError(f"{where}.tuned must be a list", where=f"{where}.tuned")
    for i, t in enumerate(raw):
        ok = (
            isinstance(t, Mapping)
            and isinstance(t.get("device"), Mapping)
            and isinstance(t["device"].get("name"), str)
            and isinstance(t.get("entries"), list)
        )
        if not ok:
            raise SchemaError(f"{where}.tuned[{i}] needs a device name and entries", where=f"{where}.tuned[{i}]")
