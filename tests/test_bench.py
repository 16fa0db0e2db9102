"""The one benchmarking routine of on-first-launch tuning and ``karchive tune`` (karchive/runtime/tuning/bench.py):
Triton's do_bench rule (estimate, ~25 ms warm-up, ~100 ms of timed runs, clamped) where CUDA events exist,
fixed counts otherwise. The events here are a stand-in driven by a fake clock, so the counts are exact."""

from __future__ import annotations

import pytest

from karchive.runtime.tuning import bench as _bench
from karchive.runtime.tuning.bench import DeviceBench, RepPolicy


class Clock:
    def __init__(self) -> None:
        self.now_ms = 0.0


class Event:
    def __init__(self, clock: Clock) -> None:
        self.clock, self.at = clock, None

    def record(self) -> None:
        self.at = self.clock.now_ms

    def synchronize(self) -> None:
        assert self.at is not None, "synchronised before it was recorded"

    def elapsed_time(self, end: Event) -> float:
        assert self.at is not None and end.at is not None
        return end.at - self.at


class Hooks:
    def __init__(self) -> None:
        self.before_n = self.after_n = 0

    def before(self) -> None:
        self.before_n += 1

    def after(self) -> None:
        self.after_n += 1


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(_bench, "event_pair", lambda device: lambda: (Event(c), Event(c)))
    return c


def test_counts_follow_the_estimate_within_bounds():
    p = RepPolicy()
    assert p.timed_counts(0.113e-3) == (221, 884)  # a 13 us kernel + the 256 MiB flush: Triton's ~880 runs
    assert p.timed_counts(2e-3) == (12, 50)
    assert p.timed_counts(1.0) == (1, 10)  # a 1 s kernel: at least 10 timed runs, one warm-up
    assert p.timed_counts(1e-7) == (1000, 1000)  # a tiny kernel: bounded
    assert p.timed_counts(0.0) == (1000, 1000)


@pytest.mark.parametrize("launch_ms, warm, reps", [(2.0, 12, 50), (0.5, 50, 200), (0.01, 1000, 1000)])
def test_by_time_where_events_exist(clock, launch_ms, warm, reps):
    bench = DeviceBench(None)
    hooks, launched = Hooks(), []

    def launch() -> None:
        launched.append(1)
        clock.now_ms += launch_ms

    times = bench({"kwargs": {}}, launch, hooks, lambda: None)
    # one untimed launch, the 5-run estimate, the warm-up, then the timed runs
    assert len(launched) == 1 + _bench.ESTIMATE_RUNS + warm + reps and bench.last == (warm, reps)
    assert len(times) == reps and all(t == pytest.approx(launch_ms / 1000.0) for t in times)
    assert hooks.before_n == hooks.after_n == len(launched)  # reset/restore around every run
    assert bench.describe() == {
        "warmup_ms": 25.0,
        "rep_ms": 100.0,
        "min_reps": 10,
        "max_reps": 1000,
        "l2_flush": False,
        "timer": "cuda-events",
    }


def test_fixed_counts_when_asked_or_without_events(clock):
    bench = DeviceBench(None, RepPolicy.counts(2, 4))  # karchive tune --warmup 2 --reps 4: exact, events or not
    launched = []

    def launch() -> None:
        launched.append(1)
        clock.now_ms += 1.0

    assert bench({}, launch, Hooks(), lambda: None) == [pytest.approx(1e-3)] * 4 and len(launched) == 6
    assert bench.describe() == {"warmup": 2, "reps": 4, "l2_flush": False, "timer": "cuda-events"}
    wall = DeviceBench(None, events=False)  # an explicit stream: wall clock, the default policy's fixed counts
    launched.clear()
    assert len(wall({}, launch, Hooks(), lambda: None)) == 10 and len(launched) == 11
    assert wall.describe() == {"warmup": 1, "reps": 10, "l2_flush": False, "timer": "wall"}


def test_quantiles_interpolate_as_triton_does():
    assert _bench.quantiles([4.0, 1.0, 3.0, 2.0]) == pytest.approx((2.5, 1.6, 3.4))  # triton.testing._quantile's
    assert _bench.quantiles([3.0, 1.0, 2.0], (0.5,)) == (2.0,) and _bench.quantiles([]) == (float("inf"),) * 3


@pytest.mark.parametrize(
    "ranks, chosen",
    [
        ({0: (2.0, 1.0, 3.0), 1: (1.0, 1.0, 9.0), 2: (1.5, 0.1, 1.6)}, 1),  # the lowest median wins, spread or not
        ({0: (1.0, 0.9, 1.1), 1: (1.0, 0.8, 1.3)}, 1),  # a tie on the median: the faster 20th percentile
        ({0: (1.0, 0.9, 1.1), 1: (1.0, 0.9, 1.1)}, 0),  # a full tie: the first config, as Triton's min() keeps it
        ({3: (1.0, 0.9, 1.1), 1: (1.0, 0.9, 1.1)}, 1),  # ... the first by index, whatever order they were timed in
        ({0: (float("nan"),) * 3, 1: (5.0, 5.0, 5.0)}, 1),  # a NaN from a broken timer never wins (NaN < x is False)
        ({0: (float("inf"),) * 3, 1: (float("nan"), 1.0, 1.0)}, None),  # nothing finite: no choice
        ({}, None),
    ],
)
def test_choose_takes_the_lowest_median_then_percentiles(ranks, chosen):
    assert _bench.choose(ranks) == chosen


def test_one_slow_run_does_not_outweigh_a_faster_median():
    """time_configs ranks every config by its runs' (median, p20, p80): a config with one slow outlier among fast
    runs beats one that is steadily a little slower (the mean would say otherwise; Triton's autotuner and karchive
    both rank by the median)."""
    outlier = [1.0] * 9 + [50.0]  # mean 5.9, median 1.0
    steady = [1.2] * 10
    assert _bench.choose({0: _bench.quantiles(steady), 1: _bench.quantiles(outlier)}) == 1


def test_a_binary_over_48k_of_shared_memory_is_loaded_as_tritons_loader_loads_it():
    """Triton's loader (backends/nvidia/driver.c) prefers shared memory in the L1/shared split and allows the
    whole opt-in for a kernel over 48 KiB; karchive loaded such a binary with only its own size allowed and the
    driver's split, so tuning timed (and the runtime ran) it otherwise than the JIT it is compared with."""
    from runtime_support import FakeCuda, Recorder

    from karchive.runtime.drivers.cuda import CudaBackend

    fake = FakeCuda(Recorder())
    fake.static_shared = 1024
    b = CudaBackend(fake)
    b.load(0, b"small", "k_small", 16 * 1024)
    assert fake.func_settings == []  # under 48 KiB: the driver's defaults, as Triton
    b.load(0, b"large", "k_large", 72 * 1024)
    attr = fake.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    assert fake.func_settings == [
        ("cache", fake.CUfunc_cache.CU_FUNC_CACHE_PREFER_SHARED, 1),
        ("attribute", attr, 227 * 1024 - 1024),
    ]
