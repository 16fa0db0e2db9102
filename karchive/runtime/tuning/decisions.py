"""On-device tuning decisions, kept in the local cache so a process tunes a key once per GPU model and driver.

When a kernel's autotune key has no recorded entry (an ahead-of-time build, or ``benchmark=True``), the
runtime times its prebuilt configs on the device (:class:`karchive.runtime.autotuned.AutotuneResolver`). The
winner is written here, under the cache root (``$KARCHIVE_CACHE_DIR``, else ``~/.cache/karchive``)::

    tuning/<kernel digest>/<GPU model>--<driver version>.json
    {"kernel": "matmul", "device": {"name": "NVIDIA H100 80GB HBM3", "driver": 13000},
     "decisions": {"<key as canonical JSON>": {"kwargs": {"BLOCK": 128}, "options": {"num_warps": 4}}}}

The kernel digest is the sha256 of the kernel's name, its variants' keys and its autotune records: another
archive with the same binaries and records shares the decisions, a rebuilt one does not. A decision read
back is used only when it names one of the kernel's own configs (the file is the user's, but a stale or
edited one must not launch something the archive does not hold). Failing to read or write the cache never
fails a launch: the key is simply tuned again. ``KARCHIVE_TUNING_CACHE=0`` turns the cache off.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...core import settings
from ...core.jsonio import canonical_json, parse_json
from ...core.paths import cache_dir
from ...errors import KarchiveError
from ...format.autotune import AutotuneConfig
from ...format.tuned import without_tables

ENV = settings.TUNING_CACHE.name
_SLUG = re.compile(r"[^A-Za-z0-9._-]+")
_MAX_BYTES = 8 << 20  # a decisions file larger than this is not read (it is the user's, but bounded anyway)


def enabled() -> bool:
    return settings.tuning_cache()


def kernel_digest(name: str, variant_keys: Sequence[str], records: Sequence[Mapping[str, Any]]) -> str:
    # tuning tables (karchive tune) are left out: a tuned version holds the same binaries and configs, and
    # shares the decisions this machine made for its untuned one
    data = canonical_json(
        {"kernel": name, "variants": sorted(variant_keys), "records": [without_tables(r) for r in records]}
    )
    return hashlib.sha256(data).hexdigest()


def as_decision(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A config as a record stores it, as this cache stores a decision: ``{"kwargs", "options"}``."""
    c = AutotuneConfig.from_json(raw)
    return {"kwargs": dict(c.kwargs), "options": dict(c.options)}


def key_text(key: Sequence[Any]) -> str:
    return canonical_json(list(key)).decode()


def _read(path: Path) -> bytes:
    """A decisions file of the tuning cache (under ``KARCHIVE_CACHE_DIR``): a regular file, never waited on
    (a FIFO) nor read without end (a device); else ``OSError``, which callers treat as "no decisions"."""
    from ...core.fsio import read_bounded

    return read_bounded(path, _MAX_BYTES)


class TuningStore:
    """Decisions of one kernel, per device model and driver; loaded on first use, written through."""

    def __init__(self, kernel: str, digest: str, root: Path | None = None) -> None:
        self.kernel = kernel
        self.digest = digest
        self.root = root
        self._files: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def _path(self, device: Any) -> Path:
        root = self.root if self.root is not None else cache_dir()
        name = _SLUG.sub("_", str(getattr(device, "name", "") or "unknown-gpu"))[:96]
        driver = getattr(device, "driver_version", None)
        return root / "tuning" / self.digest / f"{name}--{driver if driver is not None else 'unknown'}.json"

    def _load(self, device: Any) -> dict[str, Any]:
        path = self._path(device)
        text = str(path)
        hit = self._files.get(text)
        if hit is not None:
            return hit
        decisions: dict[str, Any] = {}
        try:
            if path.is_file() and path.stat().st_size <= _MAX_BYTES:
                data = parse_json(_read(path), str(path), error=KarchiveError)
                if isinstance(data, dict) and isinstance(data.get("decisions"), dict):
                    decisions = {k: v for k, v in data["decisions"].items() if isinstance(v, dict)}
        except (OSError, KarchiveError):
            decisions = {}  # unreadable: tuned again, and rewritten
        self._files[text] = decisions
        return decisions

    def get(self, device: Any, key: Sequence[Any], candidates: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
        """The remembered config for ``key`` on ``device`` when it is one of ``candidates``."""
        if not enabled():
            return None
        with self._lock:
            saved = self._load(device).get(key_text(key))
        if not isinstance(saved, dict):
            return None
        for cfg in candidates:
            if cfg["kwargs"] == saved.get("kwargs") and cfg["options"] == saved.get("options"):
                return cfg
        return None

    def put(self, device: Any, key: Sequence[Any], cfg: Mapping[str, Any]) -> None:
        if not enabled():
            return
        with self._lock:
            decisions = self._load(device)
            decisions[key_text(key)] = {"kwargs": dict(cfg["kwargs"]), "options": dict(cfg["options"])}
            path = self._path(device)
            body = {
                "kernel": self.kernel,
                "device": {
                    "name": str(getattr(device, "name", "") or ""),
                    "driver": getattr(device, "driver_version", None),
                },
                "decisions": decisions,
            }
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
                tmp.write_bytes(canonical_json(body))
                os.replace(tmp, path)
            except (OSError, ValueError, TypeError):
                pass  # a read-only or full cache: the decision lives for this process only


# --- shipping decisions between machines (karchive tune) ------------------------------------------------------
FILE_FORMAT = "karchive-tuning/1"


def archive_kernels(manifest: Any) -> list[tuple[str, str]]:
    """(kernel, digest) of every kernel of an archive model with autotune records, digested as the runtime does."""
    out: list[tuple[str, str]] = []
    records = [r for r in (manifest.autotune or []) if isinstance(r, dict)]
    names: set[str] = {r["kernel"] for r in records if isinstance(r.get("kernel"), str)}
    for name in sorted(names):
        mine = [r for r in records if r.get("kernel") == name]
        out.append((name, kernel_digest(name, [v.key for v in manifest.variants_of(name)], mine)))
    return out


def export_decisions(manifest: Any, root: Path | None = None) -> dict[str, Any]:
    """The decisions this machine's tuning cache holds for an archive's kernels, per GPU model and driver."""
    base = (root if root is not None else cache_dir()) / "tuning"
    kernels = []
    for name, digest in archive_kernels(manifest):
        devices = []
        folder = base / digest
        for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
            try:
                data = parse_json(_read(path), str(path), error=KarchiveError)
            except (OSError, KarchiveError):
                continue
            if (
                isinstance(data, dict)
                and isinstance(data.get("decisions"), dict)
                and isinstance(data.get("device"), dict)
            ):
                devices.append({"device": data["device"], "decisions": data["decisions"]})
        if devices:
            kernels.append({"kernel": name, "digest": digest, "devices": devices})
    return {"format": FILE_FORMAT, "archive": {"name": manifest.name, "version": manifest.version}, "kernels": kernels}


def import_decisions(manifest: Any, data: Any, root: Path | None = None) -> dict[str, Any]:
    """Write decisions exported elsewhere (:func:`export_decisions`) into this machine's tuning cache, for the
    kernels whose content (digest) is the same here; a decision is used only if it names one of the kernel's
    configs (checked at launch)."""
    if not isinstance(data, dict) or data.get("format") != FILE_FORMAT or not isinstance(data.get("kernels"), list):
        raise KarchiveError(f"not a karchive tuning file (expected format {FILE_FORMAT!r})")
    mine = dict(archive_kernels(manifest))
    written, skipped = 0, []
    for k in data["kernels"]:
        if not isinstance(k, dict) or not isinstance(k.get("devices"), list):
            raise KarchiveError("a tuning file's kernels entry must hold 'kernel', 'digest' and 'devices'")
        name = str(k.get("kernel"))
        if mine.get(name) != k.get("digest"):
            skipped.append(f"{name}: the archive's kernel differs from the tuned one (digest)")
            continue
        store = TuningStore(str(name), str(k["digest"]), root)
        for d in k["devices"]:
            device, decisions = (d.get("device"), d.get("decisions")) if isinstance(d, dict) else (None, None)
            if not isinstance(device, dict) or not isinstance(decisions, dict):
                raise KarchiveError(f"{name}: a device entry needs 'device' and 'decisions' objects")
            dev = DeviceKey(
                str(device.get("name") or ""), device.get("driver") if isinstance(device.get("driver"), int) else None
            )
            for text, cfg in decisions.items():
                if (
                    isinstance(cfg, dict)
                    and isinstance(cfg.get("kwargs"), dict)
                    and isinstance(cfg.get("options"), dict)
                ):
                    key = parse_json(str(text).encode(), "a tuning key", error=KarchiveError)
                    store.put(dev, key if isinstance(key, list) else [key], cfg)
                    written += 1
    return {"written": written, "skipped": skipped}


@dataclass(frozen=True)
class DeviceKey:
    """A device as a decisions file or a tuning table names it: what the store keys decisions on."""

    name: str
    driver_version: int | None
