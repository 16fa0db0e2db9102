"""Timing one launch on the device: the single benchmarking routine of on-first-launch tuning and ``karchive tune``.

Both choose among an archive's prebuilt autotune configs (:class:`karchive.runtime.autotuned.AutotuneResolver` at a key's
first launch, :class:`~.tuner.Tuner` for ``karchive tune``); both time each config with
:class:`DeviceBench`, so the two make the same choice on the same call.

The rule is Triton's ``do_bench`` (``triton.testing``), adapted:

1. one untimed launch (the module loads, caches fill);
2. an estimate: 5 runs, each after overwriting the L2, timed together by CUDA events (so the estimate counts
   the flush, as Triton's does);
3. a warm-up of about ``warmup_ms`` (25 ms): clamp(25 ms / estimate, 1, ``max_reps``) runs;
4. clamp(``rep_ms`` / estimate, ``min_reps``, ``max_reps``) timed runs (100 ms, at least 10, at most 1000:
   ten runs of a 13 µs kernel were too noisy to rank configs 10% apart, and a bound keeps a tiny kernel
   from running a hundred thousand times), each after an L2 overwrite, each between its own pair of CUDA
   events on torch's current stream, one synchronisation at the end;
5. the median, 20th and 80th percentiles; :func:`choose` takes the lowest, as Triton's autotuner does.

``reset_to_zero`` tensors are zeroed before and ``restore_value`` tensors put back after every run
(:class:`TuningHooks`), outside the events, so an in-place kernel leaves its arguments as the caller gave
them and the hooks' copies are not timed. The counts depend on time only where CUDA events exist (torch with
CUDA, launches on torch's current stream). Otherwise (no torch, an explicit stream, the CPU tests' recording
driver) each run is a synchronised launch timed by the wall clock, with the policy's fixed counts, so the
number of launches is deterministic. :class:`RepPolicy` ``fixed=True`` asks for the fixed counts everywhere
(``karchive tune --reps/--warmup``).
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...errors import ArgumentError

ESTIMATE_RUNS = 5  # Triton's do_bench estimates from 5 runs


@dataclass(frozen=True)
class RepPolicy:
    """How many runs warm up and how many are timed.

    By time (the default, where CUDA events exist): about ``warmup_ms`` of warm-up, then ``rep_ms`` worth of
    timed runs, at least ``min_reps``, at most ``max_reps``. Fixed (``fixed=True``, or no event timer):
    ``warmup`` untimed runs, then ``reps`` timed ones."""

    warmup_ms: float = 25.0
    rep_ms: float = 100.0
    min_reps: int = 10
    max_reps: int = 1000
    warmup: int = 1
    reps: int = 10
    fixed: bool = False

    @classmethod
    def counts(cls, warmup: int, reps: int) -> RepPolicy:
        """Exactly ``warmup`` untimed and ``reps`` timed runs, whatever the timer."""
        return cls(warmup=warmup, reps=reps, fixed=True)

    def timed_counts(self, estimate_s: float) -> tuple[int, int]:
        """(warm-up runs, timed runs) for a run estimated at ``estimate_s`` seconds (flush included)."""
        est_ms = max(estimate_s * 1000.0, 1e-6)  # an event pair never reads 0 for real work; guard anyway
        warm = min(max(1, int(self.warmup_ms / est_ms)), self.max_reps)
        reps = min(max(self.min_reps, int(self.rep_ms / est_ms)), self.max_reps)
        return warm, reps


def l2_flush(device: Any, synchronize: bool = True) -> Callable[[], None]:
    """Overwrite 256 MiB on the device (more than any L2) before a timed run, through torch when the process
    uses it (karchive has no allocator of its own); a no-op otherwise. Enqueued on torch's current stream; with
    ``synchronize=False`` not waited for (the events are on that stream, so they order it before the run)."""
    torch = sys.modules.get("torch")
    index = getattr(device, "index", None)
    if torch is None or index is None or getattr(device, "backend", "") not in ("cuda", "hip"):
        return _no_flush
    try:
        buf = torch.empty(256 << 20, dtype=torch.int8, device=f"cuda:{index}")
    except Exception:  # noqa: BLE001 - no CUDA torch, or no memory to spare: time without the flush
        return _no_flush

    def flush() -> None:
        buf.zero_()
        if synchronize:  # the wall timer may launch on another stream than torch's current one
            torch.cuda.synchronize(index)

    return flush


def _no_flush() -> None:
    return None


def event_pair(device: Any) -> Callable[[], tuple[Any, Any]] | None:
    """A maker of (start, end) CUDA events on torch's current stream; None without torch with CUDA."""
    torch = sys.modules.get("torch")
    if torch is None or getattr(device, "backend", "") not in ("cuda", "hip"):
        return None
    try:
        if not torch.cuda.is_available():
            return None
    except Exception:  # noqa: BLE001 - a torch without CUDA support
        return None

    def make() -> tuple[Any, Any]:
        return torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    return make


class TuningHooks:
    """``reset_to_zero`` / ``restore_value`` around each benchmark run (Triton's default pre/post hooks)."""

    def __init__(self, name: str, named: Mapping[str, Any], reset: Sequence[str], restore: Sequence[str]) -> None:
        self.reset = [(n, named[n]) for n in reset if named.get(n) is not None]
        self.restore = []
        for n in restore:
            obj = named.get(n)
            if obj is None:
                continue
            if not (hasattr(obj, "clone") and hasattr(obj, "copy_")):
                raise ArgumentError(
                    f"{name}: restore_value names {n!r}, and tuning must put it back after each run, "
                    f"but a {type(obj).__name__} has no clone()/copy_(); pass a tensor, or pass the "
                    "meta-parameters explicitly",
                    kernel=name,
                    param=n,
                )
            self.restore.append((n, obj, obj.clone()))
        for n, obj in self.reset:
            if not hasattr(obj, "zero_"):
                raise ArgumentError(
                    f"{name}: reset_to_zero names {n!r}, but a {type(obj).__name__} has no zero_(); "
                    "pass a tensor, or pass the meta-parameters explicitly",
                    kernel=name,
                    param=n,
                )

    def before(self) -> None:
        for _n, obj in self.reset:
            obj.zero_()

    def after(self) -> None:
        for _n, obj, saved in self.restore:
            obj.copy_(saved)

    def done(self) -> None:
        """After tuning, as Triton: zero the reset_to_zero tensors once more for the real launch."""
        self.before()


class DeviceBench:
    """Seconds of each timed run of a launch on ``device`` (module docstring: the rule); the caller takes the
    median. ``events=False`` times by the wall clock (a launch on a stream that is not torch's current one)."""

    def __init__(self, device: Any, policy: RepPolicy | None = None, *, events: bool = True) -> None:
        self.policy = policy or RepPolicy()
        self.events = event_pair(device) if events else None
        self.flush = l2_flush(device, synchronize=self.events is None)
        self.l2_flush = self.flush is not _no_flush
        self.timer = "cuda-events" if self.events is not None else "wall"
        self.by_time = self.events is not None and not self.policy.fixed
        self.last: tuple[int, int] = (0, 0)  # (warm-up, timed) runs of the latest config, for reports and tests

    def describe(self) -> dict[str, Any]:
        """The settings, as ``karchive tune`` records them in a tuning table's provenance (constant for a run)."""
        p = self.policy
        if self.by_time:
            return {
                "warmup_ms": p.warmup_ms,
                "rep_ms": p.rep_ms,
                "min_reps": p.min_reps,
                "max_reps": p.max_reps,
                "l2_flush": self.l2_flush,
                "timer": self.timer,
            }
        return {"warmup": p.warmup, "reps": p.reps, "l2_flush": self.l2_flush, "timer": self.timer}

    def __call__(
        self, config: Mapping[str, Any], launch: Callable[[], None], hooks: Any, sync: Callable[[], None]
    ) -> list[float]:
        if self.by_time:
            return self._by_events(launch, hooks, sync)
        return self._fixed(launch, hooks, sync)

    def _fixed(self, launch: Callable[[], None], hooks: Any, sync: Callable[[], None]) -> list[float]:
        p = self.policy
        for _ in range(p.warmup):
            hooks.before()
            launch()
            hooks.after()
        sync()
        times = []
        for _ in range(p.reps):
            hooks.before()
            self.flush()  # each run starts from a cold L2, as Triton's do_bench measures
            sync()
            if self.events is not None:
                start, end = self.events()
                start.record()
                launch()
                end.record()
                end.synchronize()
                times.append(float(start.elapsed_time(end)) / 1000.0)
            else:
                t0 = time.perf_counter()
                launch()
                sync()
                times.append(time.perf_counter() - t0)
            hooks.after()
        self.last = (p.warmup, p.reps)
        return times

    def _by_events(self, launch: Callable[[], None], hooks: Any, sync: Callable[[], None]) -> list[float]:
        assert self.events is not None
        hooks.before()
        launch()  # untimed: the module's first launch must not inflate the estimate
        hooks.after()
        sync()
        start, end = self.events()
        start.record()
        for _ in range(ESTIMATE_RUNS):
            hooks.before()
            self.flush()
            launch()
            hooks.after()
        end.record()
        end.synchronize()
        warm, reps = self.policy.timed_counts(float(start.elapsed_time(end)) / 1000.0 / ESTIMATE_RUNS)
        for _ in range(warm):
            hooks.before()
            launch()
            hooks.after()
        pairs = [self.events() for _ in range(reps)]
        for s, e in pairs:
            hooks.before()
            self.flush()
            s.record()
            launch()
            e.record()
            hooks.after()
        sync()
        pairs[-1][1].synchronize()
        self.last = (warm, reps)
        return [float(s.elapsed_time(e)) / 1000.0 for s, e in pairs]


def quantiles(xs: Sequence[float], qs: Sequence[float] = (0.5, 0.2, 0.8)) -> tuple[float, ...]:
    """The ``qs`` quantiles of the runs, interpolated as Triton's ``do_bench`` computes them (its autotuner asks
    for (0.5, 0.2, 0.8)); all inf for no runs."""
    s = sorted(xs)
    if not s:
        return tuple(float("inf") for _ in qs)
    out = []
    for q in qs:
        point = q * (len(s) - 1)
        lo, hi = math.floor(point), math.ceil(point)
        out.append(s[lo] + (point - lo) * (s[hi] - s[lo]))
    return tuple(out)


def choose(ranks: Mapping[int, Sequence[float]]) -> int | None:
    """The config a tuning run takes, by Triton's autotuner's rule: the lowest (median, 20th, 80th percentile),
    compared in that order, so a tie on the median goes to the config whose fast runs are faster; a full tie to
    the first config. A config whose median is not a finite number (no runs, a NaN from a broken timer) is never
    chosen; None when none is left."""
    best: tuple[tuple[float, ...], int] | None = None
    for i, rank in sorted(ranks.items()):
        r = tuple(float("inf") if x != x else x for x in rank)  # NaN compares as nothing: treat it as inf
        if not r or not math.isfinite(r[0]):
            continue
        if best is None or r < best[0]:
            best = (r, i)
    return best[1] if best is not None else None
