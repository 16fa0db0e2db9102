"""Serving is indistinguishable from Triton's runtime (issue 30), on the CPU.

Every scenario of tests/fidelity_support.py (one per row of docs/triton-semantics.md that runs without a GPU) runs
in three fresh processes: plain Triton (real cuda:90 compiles, launches recorded by a driver double), plain Triton
under ``karchive.capture`` (the archive), and ``karchive.serve(archive, mode="strict")`` with Triton's compiler
disabled and an empty Triton cache (launches through karchive's launcher, recorded by runtime_support's CUDA
stand-in). The served process must observe exactly what Triton's did: return values, attributes, hooks, errors,
tuning decisions, and the same launches (kernel, binary, grid, block, shared memory, argument values) — with no
compile, and nothing loaded, launched or benchmarked by Triton itself.

``test_triton_does`` states, per scenario, what Triton does (from its source: jit.py, autotuner.py, compiler.py),
so the recorded behaviour is checked on its own and a served process cannot pass by matching a wrong recording.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support import needs_triton

pytestmark = needs_triton
HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SUPPORT = HERE / "fidelity_support.py"
PATHS = ["python", "extension"]  # karchive.runtime.launch_path.PYTHON / EXTENSION


def _scenarios() -> list[str]:
    sys.path.insert(0, str(HERE))
    try:
        import fidelity_support
    finally:
        sys.path.remove(str(HERE))
    return list(fidelity_support.SCENARIOS)


SCENARIOS = _scenarios()


def _phase(name: str, work: Path, cache: str, *extra: str) -> dict:
    out = work / f"{name}{'-'.join(('', *extra))}.json"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(HERE)]),
        "TRITON_CACHE_DIR": str(work / cache),
        "TRITON_DEFAULT_FP_FUSION": "1",
    }
    r = subprocess.run(
        [sys.executable, str(SUPPORT), name, "--out", str(out), "--archive", str(work / "fid.karc"), *extra],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert r.returncode == 0 and out.exists(), f"phase {name} failed:\n{r.stdout[-3000:]}\n{r.stderr[-5000:]}"
    data = json.loads(out.read_text())
    assert "__phase_error__" not in data, f"phase {name}: {data['__phase_error__']}\n{data.get('traceback')}"
    return data


@pytest.fixture(scope="module")
def phases(tmp_path_factory) -> dict[str, dict]:
    work = tmp_path_factory.mktemp("fidelity")
    triton = _phase("triton", work, "tc")
    capture = _phase("capture", work, "tc")  # the same cache: the capture records Triton's cache hits
    # an empty cache, Triton's compiler disabled; karchive's Python launch path and its compiled launcher
    serve = {path: _phase("serve", work, f"tc-serve-{path}", "--path", path) for path in PATHS}
    return {"triton": triton, "capture": capture, "serve": serve}


def _obs(data: dict, name: str) -> Any:
    entry = data[name]
    assert "error" not in entry, f"{name} raised: {entry['error']}\n{entry.get('traceback', '')}"
    return entry["obs"]


def _same(want: Any, got: Any) -> Any:
    """``got`` with exception records made comparable: raising a subclass of the exception Triton raises is the same
    observation (``["raises", name, mro, message]``: the message is not compared)."""
    if (
        isinstance(want, list)
        and isinstance(got, list)
        and want[:1] == got[:1] == ["raises"]
        and len(want) == len(got) >= 3
    ):
        return want if want[1] in got[2] else got
    if isinstance(want, list) and isinstance(got, list) and len(want) == len(got):
        return [_same(w, g) for w, g in zip(want, got)]
    if isinstance(want, dict) and isinstance(got, dict):
        return {k: _same(want[k], v) if k in want else v for k, v in got.items()}
    return got


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("name", SCENARIOS)
def test_served_like_triton(phases, name, path):
    """The served process observes what plain Triton observed, compiles nothing, and launches every kernel through
    karchive's launcher (Triton's driver loaded, launched and benchmarked nothing)."""
    want = _obs(phases["triton"], name)
    if "__skip__" in phases["serve"][path]:
        pytest.skip(phases["serve"][path]["__skip__"])
    entry = phases["serve"][path][name]
    assert entry.get("counts") == {"compiles": 0, "triton_loads": 0, "triton_launches": 0, "benchmarks": 0}, entry.get(
        "counts"
    )
    got = _obs(phases["serve"][path], name)
    assert _same(want, got) == want


@pytest.mark.parametrize("name", SCENARIOS)
def test_capture_runs_what_triton_runs(phases, name):
    """Capturing changes nothing a library sees (except: it evaluates each heuristic once more to learn what it reads,
    docs/capture.md "Heuristics records", so a heuristic with side effects sees a second call)."""
    want, got = _obs(phases["triton"], name), _obs(phases["capture"], name)
    if name == "heuristics_values":
        want, got = want["launches"], got["launches"]
    assert got == want


def test_the_capture_left_nothing_out(phases):
    info = phases["capture"]["__capture__"]
    assert info["left_out"] == []


# -- what Triton does, stated from its source ------------------------------------------------------------------------
CK = "triton.compiler.compiler.CompiledKernel"


def _blocks(launches: list[dict]) -> list[int]:
    return [la["block"] for la in launches]


def _raises(record: list, exc: str) -> bool:
    return record[0] == "raises" and record[1] == exc


def _expect_return_value(o):
    s = o["summary"]
    assert s["type"] == CK and s["name"] == "copy" and s["metadata"]["num_warps"] == 4 and o["same_object"]
    assert s["asm"] == ["cubin", "llir", "ptx", "ttgir", "ttir"] and s["kernel_is_binary"] and s["ptx"]
    assert s["run_callable"] and s["function_set"] and s["n_regs"] == "int" and s["launch_metadata"] == "LazyDict"
    assert [(la["grid"], la["block"], la["args"]["n"], la["binary"]) for la in o["launches"]] == [
        ([4, 1, 1], 128, 1000, s["binary"])
    ] * 2


def _expect_relaunch_getitem(o):
    assert [(la["grid"][0], la["args"]["n"]) for la in o["launches"]] == [(4, 1000), (4, 1000), (8, 2000), (12, 3000)]
    assert len({la["binary"] for la in o["launches"]}) == 1


def _expect_relaunch_run(o):
    assert [la["grid"][0] for la in o["launches"]] == [2, 1, 2, 3]
    assert {la["args"]["n"] for la in o["launches"]} == {500}


def _expect_warmup_then_launch(o):
    assert o["warmup"]["type"] == CK and o["launches_after_warmup"] == [] and o["run_returns_same"]
    assert [(la["grid"][0], la["binary"]) for la in o["launches"]] == [(8, o["warmup"]["binary"])] * 2


def _expect_grid_callable(o):
    meta = dict(map(tuple, o["meta"][0]))
    assert meta == {"BLOCK": 128, "alpha": 2.0, "flag": 3, "n": 1024, "out_ptr": "Buf", "x_ptr": "Buf"}
    assert o["launches"][0]["grid"] == [8, 1, 1]


def _expect_runtime_defaults(o):
    args = [la["args"] for la in o["launches"]]
    assert [(a["alpha"], a["flag"]) for a in args] == [(2.0, 3), (0.5, 3), (2.0, 7)]


def _expect_binder_errors(o):
    assert _raises(o["unknown_keyword"], "KeyError") and "BLOKC" in o["unknown_keyword"][3]
    assert _raises(o["missing"], "TypeError") and _raises(o["too_many"], "TypeError")
    assert _raises(o["device_option"], "AssertionError") and _raises(o["dtype_as_runtime_arg"], "TypeError")
    assert o["launches"] == []


def _expect_specialization(o):
    la = o["launches"]
    assert "n" not in la[0]["args"] and [x["args"].get("n") for x in la[1:5]] == [16, 17, 17, 2**33]  # 1: constant
    assert la[4]["binary"] not in {x["binary"] for x in la[:4]}  # an i64 n: another binary
    assert [x["args"]["n"] for x in la[5:]] == [1, 16, 17, 17]  # do_not_specialize: always passed
    assert o["new_specialisations"][1] == 1  # n and x_ptr's alignment not specialised: one kernel
    assert o["new_specialisations"][0] >= 2


def _expect_pre_run_hooks(o):
    (n1, kw1), (n2, kw2) = o["hook_calls"]
    assert n1 == n2 == 3 and {"BLOCK", "debug"} <= set(kw1) and set(kw2) == set(kw1) | {"num_warps"}
    assert _blocks(o["launches"]) == [128, 64]


def _expect_used_global_changed(o):
    assert _raises(o["changed"], "RuntimeError") and "FACTOR" in o["changed"][3]
    assert o["back"] == "returned" and len(o["launches"]) == 2


def _expect_launch_hooks(o):
    calls = o["hook_calls"]
    assert [c[0] for c in calls] == ["enter", "exit"] * 3
    assert calls[0][2] == {"name": "described[n=300]", "bytes": 2400, "grid0": 3, "stream": 0}
    assert calls[2][1] == ["function", "name", "stream"] and calls[2][2]["name"] == "copy"
    assert calls[4][2]["name"] == "described[n=600]" and calls[4][2]["grid0"] == 5
    assert len(o["launches"]) == 4  # the last one after the hooks were removed


def _expect_jit_hooks(o):
    calls = o["hook_calls"]
    assert [c[0] for c in calls] == ["cache", "post_compile"] * 2  # once per new specialisation
    assert all(c[2] == "cast" and c[3] is False for c in calls)
    assert len(o["launches"]) == 3


def _expect_kernel_cache(o):
    assert o["entries"] == 2 and len(set(o["kernels"])) == 2


def _expect_autotune_best_config(o):
    best = o["best_config"]
    assert best["kwargs"]["BLOCK"] in (64, 128, 256) and o["nargs_after"] is None
    assert sorted(o["cache"]) == ["(1000, 'fp32', 'fp32')", "(4096, 'fp32', 'fp32')"]
    assert o["returned_type"]["type"] == CK and None not in o["returned"]
    assert _blocks(o["launches"]) == [32 * o["cache"]["(4096, 'fp32', 'fp32')"]["num_warps"]] * 2 + [
        32 * o["cache"]["(1000, 'fp32', 'fp32')"]["num_warps"]
    ] + [32 * o["cache"]["(4096, 'fp32', 'fp32')"]["num_warps"]]


def _expect_autotune_best_config_when_the_launch_raises(o):
    for (what, best), n in zip(o["seen"], (4096, 1000)):
        assert what[:2] == ["raises", "ZeroDivisionError"] and what[3] == "the grid raised"
        assert best == o["cache"][f"({n}, 'fp32', 'fp32')"]  # set before the launch, as Autotuner.run does
    assert len(o["launches"]) == 2


def _expect_autotune_prefilled_cache(o):
    assert o["best_config"]["kwargs"] == {"BLOCK": 32} and o["best_config"]["num_warps"] == 1
    assert _blocks(o["launches"]) == [32, 32]


def _expect_prune_to_table_configs(o):
    assert o["best_config"]["kwargs"] == {"BLOCK": 512} and o["best_config"]["num_stages"] == 2
    assert [s[0] for s in o["seen"]] == ["prune"] * 3  # once per new key: 4096, 100, 8192
    assert o["seen"][0][1:] == [["n", "out_ptr", "x_ptr"], ["grid", "warmup"], 3]
    assert _blocks(o["launches"]) == [256, 256, 32, 256]


def _expect_perf_model_top_k(o):
    assert sorted(s[1] for s in o["seen"]) == [64, 128, 256]  # asked for every config
    assert o["best_config"]["kwargs"]["BLOCK"] in (128, 256)  # only the model's best two were benchmarked
    assert len(o["launches"]) == 2


def _expect_autotune_hooks(o):
    calls = o["outside_benchmarking"]
    block = o["best_config"]["kwargs"]["BLOCK"]
    assert calls[0] == ["tuner_pre_hook", True, False]  # pre_hook(reset_only=True) once after benchmarking
    assert [c[:2] for c in calls[1:]] == [["config_pre_hook", block]] * 3  # the chosen config's hook, every launch
    assert {"grid", "warmup", "num_warps", "BLOCK", "n"} <= set(calls[1][2])
    assert len(o["launches"]) == 3


def _expect_reset_and_restore(o):
    assert o["first_call"] == [["event", "zero_", "acc"]] and o["second_call"] == []
    assert len(o["launches"]) == 2


def _expect_autotune_key_dtypes(o):
    assert o["cache"] == ["(4096, 'fp16', 'fp16')", "(4096, 'fp16', 'fp32')", "(4096, 'fp32', 'fp32')"]
    assert len(o["launches"]) == 3


def _expect_autotuner_subclass(o):
    names = [s[0] for s in o["seen"]]
    assert names == ["LibTuner.run", "LibTuner.prune_configs", "LibTuner.run"]
    assert o["best_config"]["kwargs"]["BLOCK"] in (128, 256) and len(o["launches"]) == 2


def _expect_autotuner_warmup(o):
    assert len(set(o["kernels"])) == 3 and o["launches"] == []


def _expect_heuristics_values(o):
    assert o["seen"][0] == ["heuristic", ["grid", "n", "out_ptr", "warmup", "x_ptr"]]  # no defaults
    assert "scale" in o["seen"][1][1] and "BLOCK" in o["seen"][2][1]
    assert _blocks(o["launches"]) == [64, 256, 256]  # num_warps from the heuristic
    assert o["launches"][1]["binary"] == o["launches"][2]["binary"]  # the caller's BLOCK=64 was overwritten
    assert o["launches"][0]["args"]["scale"] == 1.0 and o["launches"][1]["args"]["scale"] == 0.5


def _expect_none_and_constexpr_args(o):
    assert o["binaries"] == 4 and "bias_ptr" not in o["launches"][0]["args"]
    assert "bias_ptr" in o["launches"][1]["args"]


def _expect_duck_typed_pointers(o):
    assert [la["args"]["invert"] for la in o["launches"]] == [1, 0]
    assert o["launches"][0]["args"]["mask_ptr"] == 0x7F0000100000


def _expect_options_and_empty_grid(o):
    assert o["empty_grid"] == "returned" and _blocks(o["launches"]) == [256]


def _expect_entry_layer_relaunch(o):
    block = o["best_config"]["kwargs"]["BLOCK"]
    assert o["even"] is True and o["one_entry_grid"][:2] == ["raises", "IndexError"]
    assert [(la["grid"][0], la["binary"]) for la in o["launches"]] == [(1, o["returned"])] + [
        (4096 // block, o["returned"])
    ] * 3


def _expect_heuristics_around_autotune(o):
    assert sorted(o["tuned_even"]) == ["(1000, 'fp32', 'fp32')", "(4096, 'fp32', 'fp32')"]
    assert o["biased_tuned"] == ["(4096, False, 'fp32', 'fp32')", "(4096, True, 'fp32', 'fp32', 'fp32')"]
    la = o["launches"]
    assert la[0]["binary"] != la[1]["binary"]  # EVEN differs: 4096 and 1000 against the chosen BLOCK
    assert "b_ptr" not in la[2]["args"] and "b_ptr" in la[3]["args"]


def _expect_tuned_meta_parameter_passed(o):
    assert o["new_key"][:2] == ["raises", "ValueError"] and o["tuned_key"][:2] == ["raises", "TypeError"]
    assert len(o["launches"]) == 1


def _expect_preload(o):
    assert o["preloaded"]["type"] == CK and o["launch_returns_it"]
    assert [la["binary"] for la in o["launches"]] == [o["preloaded"]["binary"]] * 2


EXPECT = {name[len("_expect_") :]: fn for name, fn in globals().items() if name.startswith("_expect_")}


def test_every_scenario_states_what_triton_does():
    assert sorted(EXPECT) == sorted(SCENARIOS)


@pytest.mark.parametrize("name", SCENARIOS)
def test_triton_does(phases, name):
    EXPECT[name](_obs(phases["triton"], name))
