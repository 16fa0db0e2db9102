"""Serving torch.compile's decisions on the CPU (karchive/serve/inductor_serve.py): a captured kernel loaded from
another path, user and module name compiles its recorded config alone and benchmarks nothing; a changed source
is a strict miss naming it; max-autotune's template selection is answered from the recorded times. Needs torch
with Inductor (``/work/venv-torch``); the GPU proof (0 Triton compiles, bit-equal outputs) is
tests/gpu/test_inductor_gpu.py."""

from __future__ import annotations

import math
import sys
from types import SimpleNamespace

import pytest

pytest.importorskip("torch._inductor.runtime.triton_heuristics")

from inductor_support import FakeLauncher, load_generated

import karchive
from karchive.errors import ServeMissError
from karchive.format import inductor_source
from karchive.format.open import open_location
from karchive.serve.inductor_serve import install_inductor, uninstall_inductor


class Choice:
    def __init__(self, key):
        self.key = key

    def hash_key(self):
        return self.key


@pytest.fixture
def captured(fake_gpu_driver, triton_cache_dir, tmp_path, monkeypatch):
    """An archive of the pointwise sample whose autotuner chose its second config, and of a template selection."""
    import torch._inductor.runtime.triton_heuristics as th
    from torch._inductor.codecache import PersistentCache
    from torch._inductor.codegen.triton import TritonScheduling

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor-cache"))  # an empty autotune table
    # the scheduler's module benchmark needs a GPU: its measurement is scripted (what capture records is real)
    monkeypatch.setattr(TritonScheduling, "benchmark_codegened_module", lambda self, mod, *a, **k: (0.25, mod.__file__))
    tuner = load_generated("pointwise_gelu.py", tmp_path / "capture", user="alice")
    bench_module = sys.modules[load_generated("reduction_rmsnorm.py", tmp_path / "capture").fn.__module__]
    with karchive.capture("model", version="1") as cap:
        TritonScheduling.benchmark_codegened_module(None, bench_module)
        tuner.precompile(warm_cache_only=True)
        chosen = tuner.compile_results[1].config
        tuner.launchers = [FakeLauncher(chosen)]
        tuner.compile_id = "0/0"
        th.CachingAutotuner.run(tuner, stream=0)
        PersistentCache().lookup([Choice("a"), Choice("b")], "mm", "k", lambda cs: {cs[0]: 2.0, cs[1]: 1.0})
    cap.save(tmp_path / "model.karc")
    model = open_location(tmp_path / "model.karc").model
    return SimpleNamespace(
        archive=SimpleNamespace(name="model", version="1", manifest=model), chosen=chosen, root=tmp_path
    )


@pytest.fixture
def compiles(monkeypatch):
    """Every triton.compile call (what the compile boundary would serve)."""
    import triton

    calls = []
    orig = triton.compile

    def compile(src, *args, **kwargs):
        calls.append(src)
        return orig(src, *args, **kwargs)

    monkeypatch.setattr(triton, "compile", compile)
    yield calls
    uninstall_inductor()


def _serve(captured, mode):
    serving = install_inductor(SimpleNamespace(archives=[captured.archive], mode=mode))
    assert serving is not None
    return serving


def test_a_captured_kernel_elsewhere_compiles_only_its_recorded_config(captured, compiles):
    import torch._inductor.config as inductor_config

    serving = _serve(captured, "strict")
    assert inductor_config.compile_threads == 1
    tuner = load_generated("pointwise_gelu.py", captured.root / "serve", user="bob")
    assert len(tuner.configs) == 2
    tuner.precompile(warm_cache_only=True)
    assert len(compiles) == 1 and len(tuner.compile_results) == 1
    got = tuner.compile_results[0].config
    assert dict(got.kwargs) == dict(captured.chosen.kwargs) and got.num_warps == captured.chosen.num_warps
    assert got.found_by_coordesc and tuner.autotune_cache_info["autotune_cache_state"] == "hit"
    assert serving.to_json() == {
        "autotuners_pinned": 1,
        "configs_not_compiled": 1,
        "template_selections_answered": 0,
        "module_benchmarks_answered": 0,
        "benchmarks": 0,
        "misses": [],
        "triton_bundles_not_restored": 0,
        "cache_artifacts": [],  # the archive carries none
    }
    with pytest.raises(ServeMissError, match="benchmark_all_configs"):  # strict: a benchmark is refused
        tuner.benchmark_all_configs()


def test_a_changed_source_is_a_strict_miss_naming_the_kernel(captured, compiles):
    _serve(captured, "strict")
    tuner = load_generated("pointwise_gelu.py", captured.root / "serve", edit=("0.7071067811865476", "0.7"))
    name = inductor_source.of_function(tuner.fn).name
    with pytest.raises(ServeMissError, match=name.replace(".", r"\.")) as err:
        tuner.precompile(warm_cache_only=True)
    assert err.value.kernel == name and "2 configs" in str(err.value)
    assert compiles == []
    assert "Earlier misses" not in str(err.value)
    # which of the two causes: here a module the capture never generated, beside the one of the same name it did
    (archived,) = captured.archive.manifest.kernels()
    assert f"no archived kernel has this source; 1 of the same name have another: {archived}" in str(err.value)


def test_a_strict_miss_says_when_the_capture_compiled_the_kernel_but_never_decided_it(captured, compiles):
    from torch._inductor.codecache import PersistentCache

    never_run = load_generated("reduction_rmsnorm.py", captured.root / "capture2")
    with karchive.capture("model", version="2") as cap:
        never_run.precompile(warm_cache_only=True)  # compiled, never launched: no decision
        PersistentCache().lookup([Choice("a")], "mm", "k2", lambda cs: {cs[0]: 1.0})  # a section to serve
    cap.save(captured.root / "model2.karc")
    archive = SimpleNamespace(name="model", version="2", manifest=open_location(captured.root / "model2.karc").model)
    assert install_inductor(SimpleNamespace(archives=[archive], mode="strict")) is not None
    tuner = load_generated("reduction_rmsnorm.py", captured.root / "serve", user="bob")
    with pytest.raises(ServeMissError, match="the capture compiled it but never launched it to a decision"):
        tuner.precompile(warm_cache_only=True)


def test_a_strict_miss_names_the_misses_inductor_caught_before_it(captured, compiles):
    """Inductor's scheduler catches a failing fusion candidate and carries on without it, so a miss raised there
    changes what Inductor generates next: the miss that escapes names the earlier ones (the cause)."""
    _serve(captured, "strict")
    first = load_generated("pointwise_gelu.py", captured.root / "serve", edit=("0.7071067811865476", "0.7"))
    with pytest.raises(ServeMissError):  # what Inductor's scheduler would swallow
        first.precompile(warm_cache_only=True)
    second = load_generated("pointwise_gelu.py", captured.root / "serve", edit=("0.7071067811865476", "0.6"))
    with pytest.raises(ServeMissError) as err:
        second.precompile(warm_cache_only=True)
    text = str(err.value)
    assert err.value.kernel == inductor_source.of_function(second.fn).name
    assert "Earlier misses, caught inside Inductor (1)" in text and inductor_source.of_function(first.fn).name in text


def test_fallback_lets_inductor_tune_and_reports_the_miss(captured, compiles):
    serving = _serve(captured, "fallback")
    tuner = load_generated("pointwise_gelu.py", captured.root / "serve", edit=("0.7071067811865476", "0.7"))
    tuner.precompile(warm_cache_only=True)
    assert len(compiles) == 2
    assert [m["what"] for m in serving.to_json()["misses"]] == ["kernel"]


def test_template_selection_is_answered_from_the_recorded_times(captured, compiles, monkeypatch, tmp_path):
    from torch._inductor.codecache import PersistentCache

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor-cache"))  # an empty autotune table
    serving = _serve(captured, "strict")
    a, b = Choice("a"), Choice("b")

    def never(_choices):
        raise AssertionError("benchmarked")

    assert PersistentCache().lookup([a, b], "mm", "k", never) == {a: 2.0, b: 1.0}
    assert PersistentCache().lookup([a, b], "mm", "k", None) == {a: 2.0, b: 1.0}  # the precompile probe too
    with pytest.raises(ServeMissError, match=r"mm\(other\)"):
        PersistentCache().lookup([a, b], "mm", "other", never)
    with pytest.raises(ServeMissError):  # a choice the capture did not weigh
        PersistentCache().lookup([a, Choice("c")], "mm", "k", never)
    assert serving.to_json()["template_selections_answered"] == 1  # selections; the probe is not one
    _serve(captured, "fallback")
    assert PersistentCache().lookup([a, Choice("c")], "mm", "k", lambda cs: {c: math.inf for c in cs})[a] == math.inf


def test_selections_are_answered_as_the_capture_was_after_a_rebenchmark(
    fake_gpu_driver, triton_cache_dir, tmp_path, monkeypatch
):
    """Inductor's real autotune table, as max-autotune drives it: every selection's precompile probe first (no
    benchmark; a miss makes Inductor precompile the choices), then a selection of {a, b}, one of {a, b, c} under the
    same key (the table lacks c, so Inductor benchmarks all three again and overwrites a and b), and {a, b} again
    (answered from the table: the new times). Served, every lookup, probes included, gets what it got in the
    capture, in order, benchmarking nothing; one merged table would hand the first selection the later times and
    flip its winner, and a probe answered from the whole record would skip a precompile the capture made (the
    H200 max-autotune misses of 2026-11-28)."""
    from torch._inductor.codecache import PersistentCache

    a, b, c = Choice("a"), Choice("b"), Choice("c")
    times = iter([{a: 1.0, b: 2.0}, {a: 3.0, b: 2.0, c: 5.0}])
    key = ("mm", "k-rebench")  # a key no other test's table holds (Inductor memoises its cache directory)

    def lookups(bench):
        cache = PersistentCache()
        got = [cache.lookup([a, b], *key, None), cache.lookup([a, b, c], *key, None)]
        got += [cache.lookup([a, b], *key, bench), cache.lookup([a, b, c], *key, None)]
        got += [cache.lookup([a, b, c], *key, bench), cache.lookup([a, b], *key, bench)]
        return got + [cache.lookup([a, b, c], *key, None)]

    def bench(choices):
        measured = next(times)
        return {ch: measured[ch] for ch in choices}

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "capture-cache"))
    tuner = load_generated("pointwise_gelu.py", tmp_path / "capture")
    with karchive.capture("m", version="1") as cap:
        tuner.precompile(warm_cache_only=True)  # an archive holds kernels
        captured = lookups(bench)
    assert [len(t) for t in captured] == [0, 0, 2, 2, 3, 2, 3]  # probes: nothing, then a partial, then a hit
    assert [min(t, key=t.get).key for t in captured[2::2]] == ["a", "b", "b"]
    cap.save(tmp_path / "m.karc")
    archive = SimpleNamespace(name="m", version="1", manifest=open_location(tmp_path / "m.karc").model)

    def never(_choices):
        raise AssertionError("benchmarked")

    serving = _serve(SimpleNamespace(archive=archive), "strict")
    assert lookups(never) == captured
    assert serving.to_json()["template_selections_answered"] == 3
    with pytest.raises(ServeMissError, match=r"no answer for these 1 choices \(the capture weighed 2, 3 choices"):
        PersistentCache().lookup([a], *key, never)
    uninstall_inductor()


def test_uninstall_gives_inductor_its_methods_back(captured, compiles):
    import torch._inductor.config as inductor_config
    from torch._inductor.codecache import PersistentCache
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    before = (
        CachingAutotuner.precompile,
        CachingAutotuner.benchmark_all_configs,
        PersistentCache.lookup,
        inductor_config.compile_threads,
    )
    _serve(captured, "strict")
    assert CachingAutotuner.precompile is not before[0]
    uninstall_inductor()
    assert (
        CachingAutotuner.precompile,
        CachingAutotuner.benchmark_all_configs,
        PersistentCache.lookup,
        inductor_config.compile_threads,
    ) == before


def test_the_schedulers_module_benchmarks_are_answered_by_source(captured, compiles, monkeypatch):
    from torch._inductor.codegen.triton import TritonScheduling

    def never(self, mod, *a, **k):
        raise AssertionError("benchmarked")

    monkeypatch.setattr(TritonScheduling, "benchmark_codegened_module", never)
    serving = _serve(captured, "strict")
    same = sys.modules[load_generated("reduction_rmsnorm.py", captured.root / "serve", user="bob").fn.__module__]
    assert TritonScheduling.benchmark_codegened_module(None, same) == (0.25, same.__file__)
    other = sys.modules[
        load_generated("reduction_rmsnorm.py", captured.root / "serve", edit=("rsqrt", "sqrt")).fn.__module__
    ]
    with pytest.raises(ServeMissError, match="module benchmark"):
        TritonScheduling.benchmark_codegened_module(None, other)
    assert serving.to_json()["module_benchmarks_answered"] == 1 and compiles == []


def test_one_source_tuned_differently_in_two_graphs_is_served_per_graph(
    fake_gpu_driver, triton_cache_dir, tmp_path, compiles
):
    import torch._inductor.runtime.triton_heuristics as th

    a = load_generated("reduction_rmsnorm.py", tmp_path / "a")
    b = load_generated("reduction_rmsnorm.py", tmp_path / "b")
    with karchive.capture("model", version="1") as cap:
        for tuner, index, cid, backward in ((a, 1, "0/0", False), (b, 0, "1/0", True)):
            tuner.precompile(warm_cache_only=True)
            tuner.launchers = [FakeLauncher(tuner.compile_results[index].config)]
            tuner.compile_id, tuner.is_backward = cid, backward
            th.CachingAutotuner.run(tuner, stream=0)
    cap.save(tmp_path / "m.karc")
    section = open_location(tmp_path / "m.karc").model.extra["inductor"]
    assert [k["graphs"] for k in section["kernels"]] == [["0/0 forward"], ["1/0 backward"]]
    _serve(
        SimpleNamespace(
            archive=SimpleNamespace(name="m", version="1", manifest=open_location(tmp_path / "m.karc").model)
        ),
        "strict",
    )
    blocks = {}
    for cid, backward in (("0/0", False), ("1/0", True), ("7/0", False)):
        tuner = load_generated("reduction_rmsnorm.py", tmp_path / "serve")
        tuner.compile_id, tuner.is_backward = cid, backward  # Inductor sets it before precompile
        assert tuner.inductor_meta["dynamic_scale_rblock"] is True  # the generated module's own setting
        tuner.precompile(warm_cache_only=True)
        blocks[cid] = tuner.compile_results[0].config.kwargs["R0_BLOCK"]
        # pinned: no halved-block sibling is compiled and benchmarked against the recorded config (a pinned
        # reduction reached a benchmark on the H200 with torch 2.11; 2.13 checks the cache hit), on any torch
        assert tuner.inductor_meta["dynamic_scale_rblock"] is False
        if hasattr(th.CachingAutotuner, "_could_rblock_scale"):
            assert tuner._could_rblock_scale is False
    assert blocks["0/0"] == a.compile_results[1].config.kwargs["R0_BLOCK"]
    assert blocks["1/0"] == b.compile_results[0].config.kwargs["R0_BLOCK"] != blocks["0/0"]
    assert blocks["7/0"] == blocks["0/0"]  # a graph the capture did not see: the first decision


def test_serving_that_starts_before_torch_patches_inductor_when_it_is_imported(tmp_path):
    import os
    import subprocess

    script = """
import sys
from types import SimpleNamespace
from karchive.serve import inductor_serve as s
assert 'torch' not in sys.modules
assert s.install_inductor_on_import(SimpleNamespace(archives=[], mode='strict')) is None
import torch
assert s.active_inductor() is None                      # torch alone: Inductor not loaded, nothing patched
import torch._inductor.compile_fx
serving = s.active_inductor()
from torch._inductor.runtime.triton_heuristics import CachingAutotuner
from torch._inductor import config
assert serving is not None and CachingAutotuner.precompile.__qualname__.startswith('InductorServing.install')
assert config.compile_threads == 1
s.uninstall_inductor()
assert not CachingAutotuner.precompile.__qualname__.startswith('InductorServing')
print('ok')
"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-3000:]


def test_a_recorded_config_that_sets_other_parameters_is_refused(captured, compiles):
    import dataclasses

    from karchive.format.inductor_records import InductorSection

    model = captured.archive.manifest
    section = InductorSection.from_json(model.extra["inductor"])
    bad = dataclasses.replace(
        section.kernels[0], config={**section.kernels[0].config, "kwargs": {"XBLOCK": 64, "EXTRA": 1}}
    )
    model.extra["inductor"] = {**section.to_json(), "kernels": [bad.to_json()]}
    _serve(captured, "strict")
    tuner = load_generated("pointwise_gelu.py", captured.root / "serve")
    with pytest.raises(ServeMissError, match="EXTRA"):
        tuner.precompile(warm_cache_only=True)
    assert compiles == []


def test_karchive_serve_answers_inductors_compiles_from_the_archive(captured, monkeypatch):
    """The whole path through ``karchive.serve``: Inductor's autotuner, pinned to the recorded config, compiles it
    through the compile boundary, which answers with the archive's binary (a real CompiledKernel marked with the
    archive and variant): Triton compiles nothing. The identity is the generated module's, from another user's
    cache directory than the capture's."""
    import triton
    import triton.compiler
    import triton.compiler.compiler as cc

    import karchive.serve

    real = []
    orig = cc.compile

    def counting(src, target=None, options=None, _env_vars=None):
        real.append(getattr(src, "name", "?"))
        return orig(src, target=target, options=options, _env_vars=_env_vars)

    for mod in (cc, triton.compiler, triton):
        monkeypatch.setattr(mod, "compile", counting)
    import torch._inductor.compile_fx  # noqa: F401 - Inductor loaded, as in a process that compiles a model

    report = karchive.serve(str(captured.root / "model.karc"), mode="strict")
    try:
        tuner = load_generated("pointwise_gelu.py", captured.root / "served", user="carol")
        tuner.precompile(warm_cache_only=True)
        assert len(tuner.compile_results) == 1 and real == []
        name = next(iter(report.served))
        arc = karchive.open(captured.root / "model.karc")
        binaries = {arc.reader.read(v.binary.path) for v in arc.variants(name)}
        # Inductor's static launcher took the served CompiledKernel's cubin (torch loads and launches it itself)
        kernel = tuner.compile_results[0].kernel
        assert getattr(kernel, "cubin_raw", None) in binaries
        assert inductor_source.is_inductor_name(name) and report.missed_list == []
        assert report.to_json()["inductor"]["autotuners_pinned"] == 1
    finally:
        karchive.serve.stop()
