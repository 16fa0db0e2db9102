"""GPU checks of JIT capture and Triton-cache interop on plain @triton.jit kernels (formerly tools/gpu_capture.py):
capture, relaunch through karchive without Triton (bit-equal, every variant launched), export into an empty
Triton cache, and a fresh Triton process that then compiles nothing."""

from __future__ import annotations

import pytest
from capture_gpu import export, ok, work_dir
from capture_phases import MM_CONFIGS, run_phase


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return work_dir(tmp_path_factory, "workload")


@pytest.fixture(scope="module")
def captured(work):
    return ok(run_phase("workload_capture", work, work / "caches" / "capture"))


def test_capture_records_every_kernel_and_every_benchmarked_config(captured):
    s = captured["summary"]
    assert {k.rpartition(":")[2] for k in s["kernels"]} == {
        "add_kernel",
        "softmax_kernel",
        "scale_kernel",
        "matmul_kernel",
    }, s  # module:qualname
    assert captured["matmul_variants"] >= len(MM_CONFIGS) and s["autotune_records"] == 1, s
    assert s["lost"] == 0 and s["errors"] == [], s


def test_relaunch_through_karchive_is_bit_equal_without_triton(work, captured):
    r = ok(run_phase("workload_relaunch", work, work / "caches" / "relaunch"))
    assert r["problems"] == [], r["problems"]
    assert r["launched"] == r["variants"] and r["checks"] >= 8 and r["triton_imported"] is False, r


def test_exported_cache_is_hit_by_a_fresh_triton_process(work, captured):
    dest = work / "exported-cache"
    report = export(work / "workload.karc", dest)
    assert report["counts"].get("written", 0) >= 8 and set(report["counts"]) == {"written"}, report
    cold = ok(run_phase("workload_jitrun", work, work / "caches" / "cold"))
    warm = ok(run_phase("workload_jitrun", work, dest))
    again = ok(run_phase("workload_jitrun", work, dest))
    for label, r in (("empty cache", cold), ("exported cache", warm), ("exported cache, 2nd process", again)):
        print(
            f"\n{label}: {r['compiles']} compiles / {r['cache_hits']} hits, first call {r['first_call_s']} s, "
            f"workload {r['workload_s']} s"
        )
    assert cold["compiles"] > 0
    assert warm["compiles"] == 0 and warm["new_cache_entries"] == 0 and warm["cache_hits"] > 0, warm
    assert all(r["outputs_equal_capture"] for r in (cold, warm, again))
