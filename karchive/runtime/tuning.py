"""On-device tuning decisions, kept in the local cache so a process tunes a key once per GPU model and driver.

When a kernel's autotune key has no recorded entry (an ahead-of-time build, or ``benchmark=True``), the
runtime times its prebuilt configs on the device (:class:`karchive.runtime.autotuned.AutotunedKernel`). The
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
from pathlib import Path
from typing import Any
from collections.abc import Mapping, Sequence

from ..core.jsonio import canonical_json
from ..core.paths import cache_dir
from ..errors import KarchiveError

ENV = "KARCHIVE_TUNING_CACHE"
_SLUG = re.compile(r"[^A-Za-z0-9._-]+")
_MAX_BYTES = 8 << 20  # a decisions file larger than this is not read (it is the user's, but bounded anyway)


def enabled() -> bool:
    return os.environ.get(ENV, "1") not in ("0", "false", "no", "off")


def kernel_digest(name: str, variant_keys: Sequence[str], records: Sequence[Mapping[str, Any]]) -> str:
    data = canonical_json({"kernel": name, "variants": sorted(variant_keys), "records": list(records)})
    return hashlib.sha256(data).hexdigest()


def key_text(key: Sequence[Any]) -> str:
    return canonical_json(list(key)).decode()


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
                from ..core.jsonio import parse_json

                data = parse_json(path.read_bytes(), str(path), error=KarchiveError)
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
            body = {"kernel": self.kernel, "device": {"name": str(getattr(device, "name", "") or ""),
                                                      "driver": getattr(device, "driver_version", None)},
                    "decisions": decisions}
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
                tmp.write_bytes(canonical_json(body))
                os.replace(tmp, path)
            except (OSError, ValueError, TypeError):
                pass  # a read-only or full cache: the decision lives for this process only
