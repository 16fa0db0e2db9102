"""GPU proof of issue 30's fidelity: every scenario of tests/fidelity_support.py on a CUDA GPU (its ``--gpu`` mode).

The CPU proof (tests/test_serve_fidelity.py) runs the scenarios against a recording driver; this runs the same
scenarios, each phase a fresh process, on the device: plain Triton on its real driver, plain Triton under
``karchive.capture`` (the archive; the same Triton cache), then ``karchive.serve(archive, mode="strict")`` with an
empty Triton cache and Triton's compiler disabled, on karchive's Python launch path and on its compiled launcher.
Buffers are device memory filled deterministically; a launch is what CUPTI saw the GPU run (kernel, grid, block,
shared memory); after every drain each buffer's digest is noted. Tuning is deterministic in every phase
(fidelity_support's benchmarker, whose launches do not reach the GPU), so all three phases are compared in full:

- serve observes what capture observed (return values, attributes, hooks, errors, tuning decisions, launches,
  buffer contents after every drain), with 0 compiles and nothing loaded, launched or benchmarked by Triton;
- capture observes what plain Triton observed (heuristics: launches only, as on the CPU);
- plain Triton does what tests/test_serve_fidelity.py states it does, where the statement reads only what the GPU
  path observes (argument values and binary digests are not observed on a served launch: those statements have GPU
  forms here, on kernel names, grids and buffer digests).

Opt-in: ``KARCHIVE_SERVE_GPU=1``; ``KARCHIVE_FIDELITY_WORK`` keeps each phase's JSON and log (else a temporary
directory); ``KARCHIVE_FIDELITY_TIMEOUT`` (seconds per phase, 400); ``KARCHIVE_FIDELITY_ONLY=a,b`` runs only those
scenarios (the others skip). The command: tests/gpu/README.md, "The proofs of
2026-11-28".
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

USES_BUILD_FIXTURES = False  # the phases capture their own archive (conftest.py: no .gpu/ fixtures needed)
ENABLED = os.environ.get("KARCHIVE_SERVE_GPU") == "1"
TIMEOUT = int(os.environ.get("KARCHIVE_FIDELITY_TIMEOUT", "400"))
ONLY = [n for n in os.environ.get("KARCHIVE_FIDELITY_ONLY", "").split(",") if n]  # a subset of the scenarios
HERE = Path(__file__).resolve().parent
TESTS = HERE.parent
ROOT = TESTS.parent
SUPPORT = TESTS / "fidelity_support.py"
PATHS = ["python", "extension"]
ZERO = {"compiles": 0, "triton_loads": 0, "triton_launches": 0, "bench_launches": 0, "benchmarks": 0}

pytestmark = pytest.mark.skipif(
    not ENABLED,
    reason="compiles every fidelity kernel on the device (minutes): "
    "KARCHIVE_SERVE_GPU=1 pytest tests/gpu/test_serve_fidelity_gpu.py",
)


def _load(path: Path, name: str) -> Any:
    sys.path.insert(0, str(TESTS))
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(TESTS))
    return mod


#: The CPU test's statements of what Triton does (``EXPECT``) and its exception-aware comparison (``_same``).
CPU = _load(TESTS / "test_serve_fidelity.py", "karchive_cpu_serve_fidelity")
SCENARIOS = list(CPU.SCENARIOS)


def _phase(name: str, work: Path, cache: Path, *extra: str) -> dict:
    out = work / f"{name}{'-'.join(('', *extra))}.json"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(TESTS), os.environ.get("PYTHONPATH", "")]),
        "TRITON_CACHE_DIR": str(cache),
        "TRITON_DEFAULT_FP_FUSION": "1",
    }
    cmd = [sys.executable, str(SUPPORT), name, "--gpu", "--out", str(out), "--archive", str(cache.parent / "fid.karc")]
    cmd += ["--only", *ONLY] if ONLY else []
    t0 = time.perf_counter()
    try:
        r = subprocess.run([*cmd, *extra], env=env, capture_output=True, text=True, timeout=TIMEOUT)
        rc, stdout, stderr = r.returncode, r.stdout, r.stderr
    except subprocess.TimeoutExpired as exc:
        rc, stdout, stderr = 124, str(exc.stdout or ""), f"timed out after {TIMEOUT}s"
    wall = time.perf_counter() - t0
    (work / f"{out.stem}.log").write_text(
        f"$ TRITON_CACHE_DIR={cache} {' '.join(cmd + list(extra))}\nrc={rc} ({wall:.1f}s)\n"
        f"--- stdout\n{stdout}\n--- stderr\n{stderr}\n"
    )
    assert rc == 0 and out.exists(), f"phase {name} {extra} failed (rc={rc}):\n{stdout[-3000:]}\n{stderr[-5000:]}"
    data = json.loads(out.read_text())
    assert "__phase_error__" not in data, f"phase {name}: {data['__phase_error__']}\n{data.get('traceback')}"
    data["__wall_s__"] = round(wall, 1)
    return data


@pytest.fixture(scope="module")
def phases(tmp_path_factory) -> dict[str, Any]:
    where = os.environ.get("KARCHIVE_FIDELITY_WORK")
    work = Path(where) if where else tmp_path_factory.mktemp("fidelity-gpu")
    work.mkdir(parents=True, exist_ok=True)
    caches = tmp_path_factory.mktemp("fidelity-gpu-caches")  # Triton's caches and the archive: not brought back
    triton = _phase("triton", work, caches / "tc")
    capture = _phase("capture", work, caches / "tc")  # the same cache, as on the CPU
    serve = {path: _phase("serve", work, caches / f"tc-serve-{path}", "--path", path) for path in PATHS}
    walls = {"triton": triton["__wall_s__"], "capture": capture["__wall_s__"]}
    walls.update({f"serve-{p}": serve[p]["__wall_s__"] for p in PATHS})
    (work / "walls.json").write_text(json.dumps(walls))
    return {"triton": triton, "capture": capture, "serve": serve}


def _entry(data: dict, name: str) -> dict:
    if name not in data and ONLY:
        pytest.skip(f"not among KARCHIVE_FIDELITY_ONLY={','.join(ONLY)}")
    entry = data[name]
    assert "error" not in entry, f"{name} raised: {entry['error']}\n{entry.get('traceback', '')}"
    return entry


def _served(phases: dict, path: str) -> dict:
    data = phases["serve"][path]
    if "__skip__" in data:
        pytest.skip(data["__skip__"])
    return data


# -- the phases saw the GPU --------------------------------------------------------------------------------------
@pytest.mark.parametrize("phase", ["triton", "capture", *(f"serve-{p}" for p in PATHS)])
def test_the_phase_observed_the_gpu(phases, phase):
    """CUPTI saw the fidelity kernels (else every launch list would be empty and compare equal); tuning went through
    fidelity_support's benchmarker in the Triton phases; a served process has no launch hook set by the harness
    (so served call sites may take karchive's fast path, as without the profiler)."""
    data = _served(phases, phase[len("serve-") :]) if phase.startswith("serve-") else phases[phase]
    info = data["__gpu__"]
    assert info["profiler_error"] is None, info["profiler_error"]
    assert info["kernel_names"], "no kernel names from tests/fidelity_kernels.py"
    ran = [name for name in SCENARIOS if name in data and "gpu" in data[name]]
    launched = sum(e.get("launches", 0) for name in ran for e in data[name]["gpu"])
    assert launched > 0, f"CUPTI saw none of {info['kernel_names']}; other kernels it saw: {info['other_kernels']}"
    if phase in ("triton", "capture"):
        assert info["benchmarks"] > 0 and info["bench_launches"] > 0, info
    else:
        assert info["launch_hooks_set"] == [False, False], info


def test_the_capture_left_nothing_out(phases):
    assert phases["capture"]["__capture__"]["left_out"] == []


# -- serve observes what capture observed ------------------------------------------------------------------------
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("name", SCENARIOS)
def test_served_like_capture(phases, name, path):
    """Everything the scenario observed, the launches as the GPU ran them and every buffer's digest after every
    drain, as in the capture (heuristics: as in plain Triton, the capture evaluated them once more); 0 compiles, and
    Triton's driver loaded, launched and benchmarked nothing."""
    want = _entry(phases["capture"], name)
    entry = _entry(_served(phases, path), name)
    assert entry.get("counts") == ZERO, entry.get("counts")
    obs = _entry(phases["triton"], name)["obs"] if name == "heuristics_values" else want["obs"]
    assert CPU._same(obs, entry["obs"]) == obs
    assert entry["gpu"] == want["gpu"], "the buffers differ after a drain (drains: launches, buffer digests)"


@pytest.mark.parametrize("name", SCENARIOS)
def test_capture_runs_what_triton_runs(phases, name):
    """Capturing changes nothing a library or the GPU sees (heuristics: evaluated once more, docs/capture.md)."""
    want, got = _entry(phases["triton"], name), _entry(phases["capture"], name)
    w, g = want["obs"], got["obs"]
    if name == "heuristics_values":
        w, g = w["launches"], g["launches"]
    assert g == w
    assert got["gpu"] == want["gpu"]


# -- what Triton does on the GPU ---------------------------------------------------------------------------------
CK = CPU.CK


def _kernels(launches: list[dict]) -> list[str]:
    return [la["kernel"] for la in launches]


def _grids(launches: list[dict]) -> list[int]:
    return [la["grid"][0] for la in launches]


def _out_digests(entry: dict, buffer: str = "out") -> list[str]:
    """The digest of ``buffer`` after each drain of the scenario."""
    return [next(d for n, _, d in drain["buffers"] if n == buffer) for drain in entry["gpu"]]


def _gpu_return_value(o, e):
    s = o["summary"]
    assert s["type"] == CK and s["name"] == "copy" and s["metadata"]["num_warps"] == 4 and o["same_object"]
    assert s["asm"] == ["cubin", "llir", "ptx", "ttgir", "ttir"] and s["kernel_is_binary"] and s["ptx"]
    assert s["run_callable"] and s["function_set"] and s["n_regs"] == "int" and s["launch_metadata"] == "LazyDict"
    assert [(la["kernel"], la["grid"], la["block"]) for la in o["launches"]] == [("copy", [4, 1, 1], 128)] * 2


def _gpu_relaunch_getitem(o, e):
    assert _kernels(o["launches"]) == ["copy"] * 4 and _grids(o["launches"]) == [4, 4, 8, 12]


def _gpu_relaunch_run(o, e):
    assert _kernels(o["launches"]) == ["copy"] * 4 and _grids(o["launches"]) == [2, 1, 2, 3]


def _gpu_warmup_then_launch(o, e):
    assert o["warmup"]["type"] == CK and o["launches_after_warmup"] == [] and o["run_returns_same"]
    assert [(la["kernel"], la["grid"][0]) for la in o["launches"]] == [("copy", 8)] * 2


def _gpu_runtime_defaults(o, e):
    assert _kernels(o["launches"]) == ["scaled"] * 3 and _grids(o["launches"]) == [8] * 3
    outs = _out_digests(e)[:3]  # (alpha, flag) = (2.0, 3), (0.5, 3), (2.0, 7): three different outputs
    assert len(set(outs)) == 3, outs


def _gpu_specialization(o, e):
    assert _kernels(o["launches"]) == ["copy"] * 5 + ["unspecialized"] * 4
    assert o["new_specialisations"][1] == 1 and o["new_specialisations"][0] >= 2


def _gpu_heuristics_values(o, e):
    assert o["seen"][0] == ["heuristic", ["grid", "n", "out_ptr", "warmup", "x_ptr"]]
    assert "scale" in o["seen"][1][1] and "BLOCK" in o["seen"][2][1]
    assert [la["block"] for la in o["launches"]] == [64, 256, 256]
    first, scaled, unscaled = _out_digests(e)[:3]  # scale 0.5, then the default 1.0 with the caller's BLOCK lost
    assert len({first, scaled, unscaled}) == 3


def _gpu_none_and_constexpr_args(o, e):
    assert _kernels(o["launches"]) == ["optional_bias"] * 2 + ["cast"] * 2


def _gpu_duck_typed_pointers(o, e):
    assert _kernels(o["launches"]) == ["masked"] * 2
    inverted, plain = _out_digests(e)[:2]
    assert inverted != plain


def _gpu_entry_layer_relaunch(o, e):
    block = o["best_config"]["kwargs"]["BLOCK"]
    assert o["even"] is True and o["one_entry_grid"][:2] == ["raises", "IndexError"]
    assert [(la["kernel"], la["grid"][0]) for la in o["launches"]] == [("tuned_even", 1)] + [
        ("tuned_even", 4096 // block)
    ] * 3


def _gpu_heuristics_around_autotune(o, e):
    assert sorted(o["tuned_even"]) == ["(1000, 'fp32', 'fp32')", "(4096, 'fp32', 'fp32')"]
    assert o["biased_tuned"] == ["(4096, False, 'fp32', 'fp32')", "(4096, True, 'fp32', 'fp32', 'fp32')"]
    assert _kernels(o["launches"]) == ["tuned_even"] * 2 + ["biased_tuned"] * 2


def _gpu_preload(o, e):
    assert o["preloaded"]["type"] == CK and o["launch_returns_it"]
    assert _kernels(o["launches"]) == ["copy"] * 2


#: Scenarios whose CPU statement reads argument values or binary digests: their GPU form; the others' CPU
#: statements read only kernel names, grids, blocks and what the scenario itself returned, and hold as they are.
GPU_FORMS = {name[len("_gpu_") :]: fn for name, fn in globals().items() if name.startswith("_gpu_")}


def test_every_gpu_form_replaces_a_cpu_statement():
    assert set(GPU_FORMS) <= set(CPU.EXPECT) and sorted(CPU.EXPECT) == sorted(SCENARIOS)


@pytest.mark.parametrize("name", SCENARIOS)
def test_triton_does_on_the_gpu(phases, name):
    entry = _entry(phases["triton"], name)
    if name in GPU_FORMS:
        GPU_FORMS[name](entry["obs"], entry)
    else:
        CPU.EXPECT[name](entry["obs"])
