"""export-triton-cache writes Triton's own autotune cache files (issue 23, item 5): a fresh process that
reads the exported cache with TRITON_CACHE_AUTOTUNING=1 benchmarks nothing, compiles nothing, and takes
the captured choice. Real Triton on the fake GPU (capture_fakes.py), in a separate process."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

from support import needs_triton

pytestmark = needs_triton
TESTS = pathlib.Path(__file__).resolve().parent

_FRESH = r"""
import json, sys
sys.path.insert(0, {tests!r})
from triton import knobs
from capture_fakes import fake_gpu, ptr, tuned_copy

benched, compiles = [], []
knobs.compilation.listener = lambda **kw: compiles.append(bool(kw.get("cache_hit")))
with fake_gpu(timings=[9.0]) as fake:   # were it to benchmark, equal timings would pick config 0 (BLOCK=64)
    real = fake.get_benchmarker
    def counting():
        bench = real()
        def do_bench(fn, quantiles=None, **kw):
            benched.append(1)
            return bench(fn, quantiles=quantiles, **kw)
        return do_bench
    fake.get_benchmarker = counting
    tuned_copy[(1,)](ptr(), ptr(), 4096)
    cfg = tuned_copy.cache[(4096, "fp32", "fp32")]
print(json.dumps({{"benched": len(benched), "block": cfg.kwargs["BLOCK"], "warps": cfg.num_warps,
                  "compiles": compiles}}))
"""


def test_a_fresh_process_reads_the_exported_decision(triton_cache_dir, fake_gpu_driver, tmp_path):
    from capture_fakes import fresh, ptr, tuned_copy

    import karchive
    from karchive.producer.capture.triton_cache import export_archive
    from karchive.resolve import open as open_ref

    fresh(tuned_copy)
    with karchive.capture("tuned", version="1") as cap:
        tuned_copy[(1,)](ptr(), ptr(), 4096)  # scripted timings 3, 1, 2: config 1 (BLOCK=128) wins
    (entry,) = cap.autotune.to_json()[0]["entries"]
    assert entry["config"] == 1
    cap.save(tmp_path / "tuned.karc")
    out = tmp_path / "exported"
    results = export_archive(open_ref(str(tmp_path / "tuned.karc")), str(out))
    tuned = [r for r in results if r.key != r.kernel and r.path and r.path.endswith(".autotune.json")]
    assert [r.status for r in tuned] == ["written"], [vars(r) for r in results]
    data = json.loads(pathlib.Path(tuned[0].path).read_text())
    assert data["key"] == [4096, "fp32", "fp32"] and len(data["configs_timings"]) == 3

    env = {**os.environ, "TRITON_CACHE_DIR": str(out), "TRITON_CACHE_AUTOTUNING": "1"}
    run = subprocess.run(
        [sys.executable, "-c", _FRESH.format(tests=str(TESTS))], env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    assert seen == {"benched": 0, "block": 128, "warps": 4, "compiles": [True]}
    # the control: without Triton reading its autotune cache, the same process benchmarks and chooses otherwise
    env.pop("TRITON_CACHE_AUTOTUNING")
    run = subprocess.run(
        [sys.executable, "-c", _FRESH.format(tests=str(TESTS))], env=env, capture_output=True, text=True, timeout=300
    )
    control = json.loads(run.stdout.strip().splitlines()[-1])
    assert control["benched"] == 3 and control["block"] == 64
    # again, written a second time: left alone
    again = export_archive(open_ref(str(tmp_path / "tuned.karc")), str(out))
    assert {r.status for r in again} == {"exists"}
