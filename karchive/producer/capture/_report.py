"""What a capture's window saw versus what it recorded: nothing compiled during a capture goes missing silently.

Two witnesses of the window, independent of attribution:

- the **ledger**: every ``triton.compile`` in this process (fresh compile or Triton cache hit, any thread)
  while the hooks are installed, with the thread, and the captures it was attributed to;
- the **cache watch**: the kernel entries Triton's cache directories gained during the window (compiles in
  other processes, e.g. torch.compile's workers, and anything the listener did not hear).

At the end of the window every kernel either witness saw that the capture does not hold becomes a
:class:`LeftOut` with a category and the reason. ``elsewhere`` (a concurrent capture holds it) is for the
record; every other category is a kernel that no archive of this window holds: the capture warns, and
raises under ``strict=True``.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from .triton_cache import CacheEntry, cache_dir_name, entries_in_dir, local_cache_dir


class RecordingCapture(Protocol):
    """A capture as the report sees it (:class:`~.jit_capture.Capture` is one): what it holds and how it listens.

    A protocol rather than an import of ``Capture``: the capture imports this module, never the reverse."""

    @property
    def name(self) -> str: ...

    @property
    def scope(self) -> str: ...

    @property
    def harvest(self) -> bool: ...

    def recorded_hashes(self) -> set[str]: ...

    def failures(self) -> dict[str, tuple[str, str]]: ...


#: Slack for entries found by modification time (directories without a snapshot): filesystem timestamps
#: can be coarser than the clock.
MTIME_SLACK_S = 2.0


@dataclass(frozen=True)
class LeftOut:
    """A kernel compiled (or loaded from Triton's cache) during the window that this archive does not hold."""

    kernel: str
    triton_hash: str | None
    category: str
    reason: str
    thread: str | None = None

    @property
    def lost(self) -> bool:
        return self.category != "elsewhere"

    def to_json(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}

    def __str__(self) -> str:
        where = f" (thread {self.thread!r})" if self.thread else ""
        return f"{self.kernel} [{(self.triton_hash or '?')[:12]}]{where}: {self.reason}"


@dataclass(frozen=True)
class Sighting:
    """One ``triton.compile`` return heard by the listener."""

    seq: int
    triton_hash: str | None
    kernel: str
    cache_hit: bool
    thread: str
    how: str  # the attribution rule (_scope.targets)
    claimed_by: tuple[int, ...]  # id() of the captures it was attributed to
    claimed_names: tuple[str, ...]
    entry_dir: str | None


class Ledger:
    """Process-wide log of in-process compiles while the hooks are installed (cleared when they go)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seq = 0
        self._sightings: list[Sighting] = []
        self._entry_names: set[str] = set()  # cache-dir names produced in this process (harvest skips them)

    def note(
        self,
        triton_hash: str | None,
        kernel: str,
        cache_hit: bool,
        how: str,
        caps: Iterable[RecordingCapture],
        entry_dir: str | None,
    ) -> Sighting:
        caps = list(caps)
        with self._lock:
            self._seq += 1
            s = Sighting(
                self._seq,
                triton_hash,
                kernel,
                cache_hit,
                threading.current_thread().name,
                how,
                tuple(id(c) for c in caps),
                tuple(c.name for c in caps),
                entry_dir,
            )
            self._sightings.append(s)
            if isinstance(triton_hash, str):
                try:
                    self._entry_names.add(cache_dir_name(triton_hash))
                except Exception:  # noqa: BLE001 - not a Triton hash: nothing to exclude
                    pass
        return s

    def mark(self) -> int:
        with self._lock:
            return self._seq

    def between(self, start: int, end: int | None = None) -> list[Sighting]:
        with self._lock:
            return [s for s in self._sightings if s.seq > start and (end is None or s.seq <= end)]

    def entry_names(self) -> set[str]:
        with self._lock:
            return set(self._entry_names)

    def clear(self) -> None:
        with self._lock:
            self._sightings.clear()
            self._entry_names.clear()


LEDGER = Ledger()


@dataclass
class CacheWatch:
    """Triton cache directories at the start of a window, to tell which kernel entries the window added."""

    started: float = field(default_factory=time.time)
    snapshot: dict[str, set[str]] = field(default_factory=dict)

    @classmethod
    def start(cls) -> CacheWatch:
        watch = cls()
        for d in candidate_dirs():
            try:
                watch.snapshot[d] = set(os.listdir(d))
            except OSError:
                watch.snapshot[d] = set()
        return watch

    def new_entries(self, extra_dirs: Iterable[str] = ()) -> list[tuple[str, CacheEntry]]:
        """(entry directory name, entry) for every kernel entry created since :meth:`start`.

        Directories snapshotted at the start are compared by name; directories that appeared as cache
        directories during the window (torch.compile sets ``TRITON_CACHE_DIR`` when it first compiles;
        the listener reports where entries went) are compared by modification time.
        """
        out: list[tuple[str, CacheEntry]] = []
        dirs = dict.fromkeys([*self.snapshot, *candidate_dirs(), *(os.path.abspath(d) for d in extra_dirs)])
        for cache_dir in dirs:
            try:
                names = os.listdir(cache_dir)
            except OSError:
                continue
            before = self.snapshot.get(cache_dir)
            for name in sorted(names):
                path = os.path.join(cache_dir, name)
                if name.startswith("tmp.") or not os.path.isdir(path):
                    continue
                if before is not None:
                    if name in before:
                        continue
                else:
                    try:
                        if os.stat(path).st_mtime < self.started - MTIME_SLACK_S:
                            continue
                    except OSError:
                        continue
                out.extend((name, e) for e in entries_in_dir(path))
        return out


def candidate_dirs() -> list[str]:
    """Where Triton writes now: its configured cache directory (``TRITON_CACHE_DIR`` or ``~/.triton/cache``)."""
    try:
        return [local_cache_dir()]
    except Exception:  # noqa: BLE001 - Triton absent or misconfigured: nothing to watch
        return []


def left_out(
    cap: RecordingCapture,
    sightings: list[Sighting],
    new_entries: list[tuple[str, CacheEntry]],
    in_process: set[str],
    later: Sequence[Sighting] = (),
) -> list[LeftOut]:
    """Every kernel of the window that ``cap`` does not hold, with the reason (one per Triton hash).

    ``later``: sightings reported after the window closed. A concurrent capture's compile can write its cache
    entry inside this window and be reported just after it: such an entry is that capture's, not a loss."""
    recorded = cap.recorded_hashes()
    failures = cap.failures()
    out: dict[str, LeftOut] = {}
    me = id(cap)
    for s in sightings:
        h = s.triton_hash
        if h is None or h in recorded or h in out:
            continue
        verb = "loaded from Triton's cache" if s.cache_hit else "compiled"
        if h in failures:
            category, why = failures[h]
            out[h] = LeftOut(s.kernel, h, category, f"{verb} but not archived: {why}", s.thread)
        elif s.claimed_by and me not in s.claimed_by:
            out[h] = LeftOut(
                s.kernel,
                h,
                "elsewhere",
                f"{verb} for concurrent capture(s) {', '.join(map(repr, s.claimed_names))} ({s.how})",
                s.thread,
            )
        elif not s.claimed_by:
            why = (
                f"{verb} on a thread not tied to this capture ({s.how}); scope='thread' records only its own "
                "thread and work handed over from it: use scope='process', or capture that thread's work too"
                if cap.scope == "thread"
                else f"{verb} on a thread no capture claimed ({s.how})"
            )
            out[h] = LeftOut(s.kernel, h, "out-of-scope" if cap.scope == "thread" else "unrecorded", why, s.thread)
        else:
            out[h] = LeftOut(
                s.kernel, h, "unrecorded", f"{verb}, but Triton's report carried no files to read", s.thread
            )
    for name, entry in new_entries:
        h = entry.triton_hash
        if h is None or h in recorded or h in out:
            continue
        if h in failures:
            category, why = failures[h]
            out[h] = LeftOut(entry.stem, h, category, f"new Triton cache entry not archived: {why}")
        elif name in in_process:
            owners = [s for s in later if s.triton_hash == h and s.claimed_by and me not in s.claimed_by]
            if owners:
                out[h] = LeftOut(
                    entry.stem,
                    h,
                    "elsewhere",
                    f"compiled for concurrent capture(s) {', '.join(map(repr, owners[0].claimed_names))} "
                    f"(reported just after this window closed)",
                    owners[0].thread,
                )
            else:
                out[h] = LeftOut(
                    entry.stem,
                    h,
                    "unrecorded",
                    "compiled in this process, but its compile was reported outside the capture window",
                )
        elif not cap.harvest:
            out[h] = LeftOut(
                entry.stem,
                h,
                "not-harvested",
                "compiled by another process (e.g. a torch.compile worker) into the Triton cache; harvest=False",
            )
        else:
            out[h] = LeftOut(entry.stem, h, "unrecorded", "new Triton cache entry that harvesting did not take")
    return list(out.values())


def describe_left_out(items: list[LeftOut], limit: int = 20) -> str:
    lines = [f"  - [{i.category}] {i}" for i in items[:limit]]
    if len(items) > limit:
        lines.append(f"  ... and {len(items) - limit} more (cap.summary()['left_out'])")
    return "\n".join(lines)


def summarize(items: list[LeftOut]) -> dict[str, Any]:
    return dict(Counter(i.category for i in items))
