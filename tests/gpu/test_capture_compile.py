"""GPU proof (issue 14): a torch.compile'd training step (forward and backward graphs), captured with Inductor
compiling in-process and with its compile worker processes; the exported cache makes a fresh process compile
nothing, outputs and gradients bit-equal. Also the pointwise relaunch checks of the former tools/gpu_capture.py."""

from __future__ import annotations

import pytest
from capture_gpu import export, ok, work_dir
from capture_phases import run_phase


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return work_dir(tmp_path_factory, "compile")


def _inductor_env(work, tag: str, threads: int) -> dict:
    return {
        "TORCHINDUCTOR_COMPILE_THREADS": str(threads),
        "TORCHINDUCTOR_FX_GRAPH_CACHE": "0",
        "TORCHINDUCTOR_AUTOGRAD_CACHE": "0",
        "TORCHINDUCTOR_CACHE_DIR": str(work / f"inductor-{tag}"),
    }


@pytest.mark.parametrize("threads", [1, 4], ids=["in-process", "compile-workers"])
def test_compiled_training_step_captured_exported_and_rerun_without_compiling(work, threads):
    tag = f"compile-t{threads}"
    cap = ok(
        run_phase(
            "compile_capture",
            work,
            work / "caches" / tag,
            _inductor_env(work, tag, threads),
            opts={"tag": tag},
            timeout=300,
        )
    )
    s = cap["summary"]
    print(
        f"\n{tag}: {s['variants']} variants {s['kernels']}, events {s['events']}, threads {s['threads']}, "
        f"forward window {cap['forward_events']} / backward window {cap['backward_events']} events"
    )
    assert s["variants"] >= 2 and s["lost"] == 0 and s["errors"] == [], s
    dest = work / f"exported-{tag}"
    report = export(work / f"{tag}.karc", dest)
    counts = report["counts"]
    assert counts.get("written", 0) >= 2 and not counts.get("mismatch") and not counts.get("unverified"), report
    rerun = ok(
        run_phase(
            "compile_rerun", work, dest, _inductor_env(work, f"{tag}-rerun", threads), opts={"tag": tag}, timeout=300
        )
    )
    print(f"{tag}: fresh process, exported cache: {rerun}")
    assert rerun["compiles"] == 0 and rerun["new_cache_entries"] == 0, rerun
    assert rerun["not_bit_equal"] == {}, rerun


@pytest.mark.parametrize("which", ["inproc", "workers"])
def test_pointwise_inductor_kernels_relaunch_through_karchive(work, which):
    threads = 1 if which == "inproc" else 4
    env = _inductor_env(work, f"pointwise-{which}", threads)
    cap = ok(run_phase("pointwise_capture", work, work / "caches" / f"pointwise-{which}", env, opts={"which": which}))
    assert cap["summary"]["variants"] > 0 and not cap["summary"]["errors"], cap["summary"]
    rel = ok(
        run_phase("pointwise_relaunch", work, work / "caches" / f"pointwise-{which}-relaunch", opts={"which": which})
    )
    assert rel["relaunched"] and rel["problems"] == [], rel
