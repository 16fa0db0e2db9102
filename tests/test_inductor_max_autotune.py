"""max-autotune captured and served through the real Inductor on the CPU (issue 31): a Llama-style decoder's
inference and training graphs lowered and scheduled with template selection, epilogue/prologue fusion benchmarks
and multi-template buffers, once under ``karchive.capture`` (benchmarks scripted: tests/inductor_autotune_run.py)
and once, in a fresh process with empty caches, served strict from the recorded section: the serving process
must benchmark nothing, miss nothing and generate exactly the graphs and kernel modules the capture generated (on
the H200 it generated a template module the capture never had). Needs torch with Inductor (``/work/venv-torch``);
two fresh interpreters, about 20 s each."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

pytest.importorskip("torch._inductor.select_algorithm")
pytest.importorskip("triton")

from karchive.format import inductor_source

RUN = pathlib.Path(__file__).with_name("inductor_autotune_run.py")


def _phase(phase: str, work: pathlib.Path, seed: int) -> dict:
    env = {**os.environ, "KARCHIVE_TEST_SEED": str(seed), "PYTHONPATH": str(RUN.parents[1])}
    proc = subprocess.run(
        [sys.executable, str(RUN), phase, str(work)], env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads((work / f"{phase}.json").read_text())


def _unpathed(text: str, work: pathlib.Path) -> str:
    return re.sub(rf"{re.escape(str(work))}/inductor-(capture|serve)", "<cache>", text)


@pytest.mark.parametrize("seed", [3])
def test_a_served_max_autotune_compile_generates_what_the_capture_generated(tmp_path, seed):
    captured = _phase("capture", tmp_path, seed)
    section = captured["section"]
    assert captured["counts"]["selection_benchmarks"] > 0 and section["templates"], "no template was selected"
    assert captured["counts"]["module_benchmarks"] > 0 and section["modules"], "no fusion was benchmarked"
    graphs = {t.get("graph", "").split(" ")[-1] for t in section["templates"]}
    assert graphs == {"forward", "backward"}, graphs  # every answer counted within the graph that asked it

    served = _phase("serve", tmp_path, seed + 1)  # another seed: any benchmark left would measure other times
    report = served["report"]
    assert report["misses"] == [] and report["benchmarks"] == 0
    assert served["counts"] == {"selection_benchmarks": 0, "module_benchmarks": 0}
    assert report["template_selections_answered"] > 0 and report["module_benchmarks_answered"] > 0

    assert len(served["wrappers"]) == len(captured["wrappers"]) == 3  # inference, training forward and backward
    for want, got in zip(captured["wrappers"], served["wrappers"]):
        assert _unpathed(got, tmp_path) == _unpathed(want, tmp_path)
    digests = {
        name: {inductor_source.source_digest(s) for s in sources} for name, sources in captured["kernels"].items()
    }
    for name, sources in served["kernels"].items():  # what the H200's serve failed on: a digest the capture lacks
        assert {inductor_source.source_digest(s) for s in sources} <= digests.get(name, set()), name
