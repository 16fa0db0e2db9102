"""GPU proof (issue 14): a training step whose forward and backward launch autotuned Triton kernels, captured.

The step is tests/gpu/capture_kernels.py's custom ``torch.autograd.Function`` (forward: 2 autotuned kernels;
backward, run by PyTorch on its autograd engine's device thread: 3, one also ``@triton.heuristics``). Every
phase runs in a fresh process (tests/gpu/capture_phases.py) with its own Triton cache directory.
"""

from __future__ import annotations

import pytest
from capture_gpu import export, ok, work_dir
from capture_phases import run_phase

FORWARD = ("fwd_mul", "fwd_silu")
BACKWARD = ("bwd_silu", "bwd_dx", "bwd_dw")


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return work_dir(tmp_path_factory, "training")


@pytest.fixture(scope="module")
def captured(work):
    return ok(run_phase("train_capture", work, work / "caches" / "capture", opts={"scope": "process"}))


def _check_capture(r: dict) -> None:
    s = r["summary"]
    assert sorted(k.rpartition(":")[2] for k in s["kernels"]) == sorted(FORWARD + BACKWARD), s  # module:qualname
    assert s["variants"] == 10, s  # 5 kernels x 2 autotune configs
    assert s["lost"] == 0 and s["errors"] == [] and s["warnings"] == [], s["left_out"]
    assert r["autotune_kernels"] == sorted(FORWARD + BACKWARD)
    assert r["heuristics_kernels"] == ["bwd_silu"]


def test_capture_holds_the_forward_and_backward_kernels_and_their_records(captured):
    _check_capture(captured)
    # The scenario of the issue: PyTorch ran the backward on another thread than the one that entered the capture.
    assert captured["backward_thread"] != captured["main_thread"], captured["backward_thread"]
    threads = {e["kernel"]: e["thread"] for e in captured["events"]}
    assert {threads[k] for k in BACKWARD} == {captured["backward_thread"]}, captured["events"]
    assert {threads[k] for k in FORWARD} == {captured["main_thread"]}


def test_thread_scope_follows_the_backward_into_the_autograd_engine(work):
    r = ok(
        run_phase(
            "train_capture", work, work / "caches" / "capture-thread", opts={"scope": "thread", "tag": "train-thread"}
        )
    )
    _check_capture(r)
    notes = {e["note"] for e in r["events"] if e["kernel"] in BACKWARD}
    assert notes and all(n.startswith("autograd engine") for n in notes), r["events"]


def test_the_exported_cache_makes_a_fresh_process_run_the_step_with_zero_compiles(work, captured):
    dest = work / "exported-cache"
    report = export(work / "train-process.karc", dest)
    assert report["counts"] == {"written": 15}, report  # 10 binaries and the 5 kernels' autotune decisions
    r = ok(run_phase("train_rerun", work, dest, opts={"tag": "train-process"}))
    print(f"\nfresh process, exported cache: {r}")
    assert r["compiles"] == 0 and r["new_cache_entries"] == 0, r
    assert r["cache_hits"] >= 10, r  # every autotune config is benchmarked again: all hit
    assert r["not_bit_equal"] == {}, r


def test_the_step_relaunches_through_karchive_with_triton_unimportable(work, captured):
    r = ok(run_phase("train_karchive", work, None, opts={"tag": "train-process"}))
    print(f"\nkarchive launch, no Triton: {r}")
    assert r["triton_importable"] is False
    assert r["dispatchers"]["bwd_silu"] == "AutotuneResolver"  # autotune records + heuristics records
    assert r["not_bit_equal"] == {}, r
