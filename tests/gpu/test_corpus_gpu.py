"""GPU proof (issue 23): a corpus of real kernels from public Triton libraries, captured and relaunched.

For each library of tests/gpu/corpus_phases.py (Triton's tutorials, Liger-Kernel, flash-linear-attention):
its training step runs under ``karchive.capture`` with every launch recorded (arguments, grid, memory before
and after), in a fresh process; then a fresh process with Triton unimportable relaunches every recorded
launch through ``karchive.open(...).kernel(name)[grid](...)`` with the library's own arguments and compares
memory byte for byte (kernels with atomics: within ``ATOMIC_ATOL``); then the library's autotuned kernels that
``tests/gpu/build_corpus.py`` built ahead of time on the CPU machine are launched the same way.

What is known broken today is an ``xfail(strict=False)`` naming the reason (:data:`KNOWN`), never hidden: the
kernels outside it must all be bit-equal. Numbers land in ``$OUT/corpus-gpu/summary.json`` (docs/benchmarks.md).
A library that is not installed (its wheel not in .whl/, tests/gpu/CORPUS.md) skips with the reason.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from corpus_phases import ATOMIC_ATOL, ATOMIC_RTOL, LIBRARIES, run_phase

LIBS = sorted(LIBRARIES)
#: library -> {kernel: reason} for relaunches known to fail today (tracked by issue 23's other items).
KNOWN: dict[str, dict[str, str]] = {}
PHASE_TIMEOUT = int(os.environ.get("KARCHIVE_CORPUS_TIMEOUT", "400"))
_RESULTS: dict[tuple[str, str], dict] = {}
_SUMMARY: dict[str, Any] = {}


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    """KARCHIVE_CORPUS_WORK, else $OUT/corpus-gpu on the device run, else a temporary directory."""
    where = os.environ.get("KARCHIVE_CORPUS_WORK") or (os.environ.get("OUT") and Path(os.environ["OUT"]) / "corpus-gpu")
    if where:
        d = Path(where)
        d.mkdir(parents=True, exist_ok=True)
        return d
    return tmp_path_factory.mktemp("corpus")


def _phase(phase: str, lib: str, work: Path) -> dict:
    if (phase, lib) not in _RESULTS:
        # One phase of every library at once, each in its own process: the captures spend most of their time
        # compiling autotune configs on the CPU, one at a time per process (the device has 16 cores).
        todo = [lb for lb in LIBS if (phase, lb) not in _RESULTS]
        with ThreadPoolExecutor(len(todo)) as pool:
            done = dict(zip(todo, pool.map(lambda lb: run_phase(phase, lb, work / lb, timeout=PHASE_TIMEOUT), todo)))
        for lb, res in done.items():
            _RESULTS[(phase, lb)] = res
            _SUMMARY.setdefault(lb, {})[phase] = {k: v for k, v in res.items() if k not in ("problems", "tolerated")}
        (work / "summary.json").write_text(json.dumps(_SUMMARY, indent=1, default=str))
    r = _RESULTS[(phase, lib)]
    if r.get("skip"):
        pytest.skip(r["skip"])
    return r


def _captured(lib: str, work: Path) -> dict:
    """The capture phase's result; the archive exists (saved as is, or with the save workaround)."""
    r = _phase("capture", lib, work)
    assert r.get("ok"), r.get("error") or r
    if r.get("save_error") and not r.get("save_workaround"):
        pytest.fail(f"cap.save failed: {r['save_error']}")
    return r


@pytest.mark.parametrize("lib", LIBS)
def test_capture_of_the_training_step_holds_every_kernel_launched(lib, work):
    r = _captured(lib, work)
    if r.get("save_error"):  # saved for the relaunch tests only through the phase's workaround
        pytest.xfail(f"issue 23 (capture loses a window on non-finite autotune timings; fix on wt/autotune): "
                     f"cap.save raised {r['save_error'][:300]}")
    s = r["summary"]
    print(f"\n{lib} ({r['library']}): {r['launches']} launches of {len(r['launched_kernels'])} kernels, "
          f"{s['variants']} variants, {s['autotune_records']} autotune / {s['heuristics_records']} heuristics records, "
          f"step {r['capture_step_s']} s, save {r['save_s']} s")
    assert r["op_errors"] == {}, r["op_errors"]
    assert r["launches"] > 0
    assert s["lost"] == 0 and s["errors"] == [], (s["left_out"], s["errors"])
    assert set(r["launched_kernels"]) <= set(s["kernels"]), set(r["launched_kernels"]) - set(s["kernels"])
    assert r["unreplayable"] == [], r["unreplayable"]
    assert s["autotune_records"] > 0, s  # each library's step launches autotuned kernels
    if lib.startswith("fla"):  # heuristics over autotune, the library's usual stacking
        assert s["heuristics_records"] > 0, s


def _relaunched(lib: str, work: Path) -> dict:
    _captured(lib, work)
    r = _phase("relaunch", lib, work)
    assert r.get("ok"), r.get("error") or r
    assert r["triton_importable"] is False
    return r


@pytest.mark.parametrize("lib", LIBS)
def test_every_launch_relaunches_bit_equal_through_karchive_without_triton(lib, work):
    r = _relaunched(lib, work)
    print(f"\n{lib}: {r['launches']} launches relaunched: {r['counts']} (atomic kernels {r['atomic_kernels']}, "
          f"tolerance atol {ATOMIC_ATOL} + rtol {ATOMIC_RTOL}); open {r['open_s']} s, relaunch {r['relaunch_s']} s")
    for t in r["tolerated"]:
        print(f"  within tolerance: {t['kernel']} max abs diff {t['max_abs_diff']}")
    known = KNOWN.get(lib, {})
    problems = [p for p in r["problems"] if p["kernel"] not in known]
    assert not problems, json.dumps(problems, indent=1)[:6000]
    checked = [k for k in r["per_kernel"] if k not in known]
    assert checked, "no kernel outside the known-broken list was relaunched"


@pytest.mark.parametrize("lib", [lib for lib in LIBS if KNOWN.get(lib)])
def test_known_broken_relaunches(lib, work, request):
    reasons = "; ".join(f"{k}: {why}" for k, why in sorted(KNOWN[lib].items()))
    request.applymarker(pytest.mark.xfail(strict=False, reason=reasons))
    r = _relaunched(lib, work)
    problems = [p for p in r["problems"] if p["kernel"] in KNOWN[lib]]
    assert not problems, json.dumps(problems, indent=1)[:6000]


@pytest.mark.parametrize("lib", LIBS)
def test_autotuned_kernels_built_ahead_of_time_on_the_cpu_launch(lib, work, request):
    _captured(lib, work)
    r = _phase("aot", lib, work)
    assert r.get("ok"), r.get("error") or r
    assert r["triton_importable"] is False
    kernels = r["kernels"]
    if not kernels:
        pytest.skip(f"build_corpus.py builds no kernel of {lib}")
    unbuilt = {k: v["error"] for k, v in kernels.items() if not v["built"]}
    for name, v in kernels.items():
        if v["built"]:
            print(f"\n{lib} AOT {name}: {v['variants']} variants, {v['launches']} launches: {v['counts']}")
            # the device benchmarked the prebuilt configs itself: its choice may sum in another order
            bad = [p for p in v["problems"] if p["status"] == "error" or (p.get("max_abs_diff") or 0) > 5e-2]
            assert v["launches"] > 0 and not bad, json.dumps(bad, indent=1)[:4000]
    if unbuilt:
        request.applymarker(pytest.mark.xfail(strict=False, reason="build_corpus.py could not build: " + "; ".join(
            f"{k}: {e.splitlines()[-1] if e else '?'}" for k, e in unbuilt.items())))
        pytest.fail("not built ahead of time: " + json.dumps(unbuilt, indent=1)[:3000])
