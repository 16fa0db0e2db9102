"""Capture of torch.compile's kernels on the CPU (torch with Inductor, the GPU-less Triton driver): Inductor's own
``triton.compile`` calls filed under the path-independent identity, the autotuner's decision and graph recorded in
the manifest's ``inductor`` section, compiles kept in this process. Runs where torch is installed
(``/work/venv-torch``); the GPU proof is tests/gpu/test_inductor_gpu.py."""

from __future__ import annotations

import json
import math

import pytest

pytest.importorskip("torch._inductor.runtime.triton_heuristics")

from inductor_support import FakeLauncher, load_generated

import karchive
from karchive.format import inductor_source
from karchive.format.inductor_records import InductorSection
from karchive.format.open import open_location


@pytest.fixture
def inductor_gpu(fake_gpu_driver, triton_cache_dir):
    return fake_gpu_driver


def _decide(tuner, index=0, coordesc=False, compile_id="0/0", backward=False):
    """What Inductor leaves after autotuning: one launcher, of the winning config (the launch itself is faked)."""
    import torch._inductor.runtime.triton_heuristics as th

    config = tuner.compile_results[index].config if tuner.compile_results else tuner.configs[index]
    if coordesc:
        config.found_by_coordesc = True
    tuner.launchers = [FakeLauncher(config)]
    tuner.compile_id = compile_id
    tuner.is_backward = backward
    th.CachingAutotuner.run(tuner, stream=0)  # the wrapped run: one launcher, so no autotune, just the launch
    return config


def test_inductor_compiles_are_filed_under_the_identity_with_the_decision(inductor_gpu, tmp_path):
    tuner = load_generated("pointwise_gelu.py", tmp_path)
    n_configs = len(tuner.configs)
    with karchive.capture("compiled-model", version="1") as cap:
        tuner.precompile(warm_cache_only=True)  # every config through Inductor's triton.compile
        tuner.__dict__["_karchive_compiled"] = n_configs
        chosen = _decide(tuner, index=min(1, n_configs - 1), compile_id="0/1")
    cap.save(tmp_path / "m.karc")
    ident = inductor_source.of_function(tuner.fn)
    assert cap.kernels() == [ident.name]
    reader = open_location(tmp_path / "m.karc")
    manifest = reader.manifest
    variants = [v for v in manifest["variants"]]
    assert len(variants) == n_configs and {v["kernel"] for v in variants} == {ident.name}
    assert all(v["provenance"]["inductor"]["source_digest"] == ident.digest for v in variants)
    section = InductorSection.from_json(manifest["inductor"])
    decision = section.decision(ident.digest)
    assert decision.config["kwargs"] == dict(chosen.kwargs) and decision.config["num_warps"] == chosen.num_warps
    assert decision.graphs == ("0/1 forward",) and decision.configs_compiled == n_configs
    assert decision.heuristic == "pointwise"
    assert reader.verify() == []
    from karchive.cli.inspect_cmds import schema_problems

    assert schema_problems(manifest) == []
    assert reader.model.variants_of(ident.name)[0].provenance.inductor["function"] == tuner.fn.__name__


def test_the_same_source_elsewhere_is_the_same_kernel_and_a_changed_one_is_not(inductor_gpu, tmp_path):
    a = load_generated("pointwise_gelu.py", tmp_path / "m1", user="alice")
    b = load_generated("pointwise_gelu.py", tmp_path / "m2", user="bob")
    c = load_generated("pointwise_gelu.py", tmp_path / "m3", edit=("0.7071067811865476", "0.7071"))
    assert a.fn.__module__ != b.fn.__module__ and a.filename != b.filename
    ia, ib, ic = (inductor_source.of_function(t.fn) for t in (a, b, c))
    assert ia == ib and ic.digest != ia.digest and ic.function == ia.function


def test_decisions_of_two_graphs_merge_and_backward_is_named(inductor_gpu, tmp_path):
    a = load_generated("reduction_rmsnorm.py", tmp_path / "x")
    b = load_generated("reduction_rmsnorm.py", tmp_path / "y")
    with karchive.capture("m", version="1") as cap:
        a.precompile(warm_cache_only=True)
        b.precompile(warm_cache_only=True)
        _decide(a, compile_id="0/0")
        _decide(b, compile_id="1/0", backward=True)
    section = cap.inductor.section(set(cap.kernels()))
    assert len(section["kernels"]) == 1
    assert section["kernels"][0]["graphs"] == ["0/0 forward", "1/0 backward"]
    assert json.loads(json.dumps(section)) == section


def test_template_timings_are_recorded_from_inductors_autotune_table(tmp_path, monkeypatch):
    import torch._inductor.config as inductor_config
    from torch._inductor.codecache import PersistentCache

    class Choice:
        def __init__(self, key):
            self.key = key

        def hash_key(self):
            return self.key

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor-cache"))  # an empty autotune table
    choices = [Choice("mm-a"), Choice("mm-b")]
    with karchive.capture("m", version="1") as cap:
        assert inductor_config.compile_threads == 1  # compiles stay where the listener sees them
        PersistentCache().lookup(choices, "mm", "inputs-key", lambda cs: {cs[0]: 0.5, cs[1]: math.inf})
        PersistentCache().lookup(choices, "mm", "other", None)  # a probe without benchmark: nothing to record
    (answer,) = cap.inductor.templates
    assert answer.key[:2] == ("mm", "inputs-key") and answer.timings == {"mm-a": 0.5, "mm-b": math.inf}


def test_inspect_says_which_kernels_came_from_inductor_and_their_graphs(inductor_gpu, tmp_path, capsys):
    from karchive.cli.main import main

    tuner = load_generated("reduction_rmsnorm.py", tmp_path)
    with karchive.capture("m", version="1") as cap:
        tuner.precompile(warm_cache_only=True)
        _decide(tuner, index=1, compile_id="2/0", backward=True)
    cap.save(tmp_path / "m.karc")
    assert main(["inspect", str(tmp_path / "m.karc")]) == 0
    out = capsys.readouterr().out
    assert "torch.compile (Inductor): 1 kernel with recorded autotune decisions" in out
    assert "triton_red_fused_add_mean_mul_pow_rsqrt_0" in out and "2/0 backward" in out and "R0_BLOCK=2048" in out
    assert main(["inspect", "--json", str(tmp_path / "m.karc")]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["inductor"]["kernels"][0]["graphs"] == ["2/0 backward"]
    assert main(["inspect", "--summary", str(tmp_path / "m.karc")]) == 0
    assert "1 generated by torch.compile (Inductor)" in capsys.readouterr().out


def test_compiles_stay_in_process_only_while_capturing_unless_asked_not_to():
    import torch._inductor.config as inductor_config

    before = inductor_config.compile_threads
    inductor_config.compile_threads = 4
    try:
        with karchive.capture("m", version="1"):
            assert inductor_config.compile_threads == 1
            with karchive.capture("inner", version="1", inductor_in_process=False):
                assert inductor_config.compile_threads == 1  # the outer capture still wants it
        assert inductor_config.compile_threads == 4
        with karchive.capture("m", version="1", inductor_in_process=False):
            assert inductor_config.compile_threads == 4  # Inductor's workers compile: harvested, no identity
    finally:
        inductor_config.compile_threads = before


def test_one_kernel_in_two_generated_modules_is_filed_under_both_identities(inductor_gpu, tmp_path):
    """Two modules holding the same ``@triton.jit`` function (a graph's and a benchmark's: here they differ in
    ``num_load``) are one Triton hash and two Inductor identities; serving looks each up by its own module, so the
    capture files the binary under both, each with its decision (a second sighting of the hash once went unrecorded,
    and its module's decision was dropped with it)."""
    a = load_generated("reduction_rmsnorm.py", tmp_path / "x")
    b = load_generated("reduction_rmsnorm.py", tmp_path / "y", edit=("'num_load': 3", "'num_load': 4"))
    ia, ib = inductor_source.of_function(a.fn), inductor_source.of_function(b.fn)
    assert ia.digest != ib.digest and ia.function == ib.function
    with karchive.capture("m", version="1") as cap:
        a.precompile(warm_cache_only=True)
        b.precompile(warm_cache_only=True)  # Triton cache hits: the same hashes
        _decide(a, compile_id="0/0")
        _decide(b, index=1, compile_id="1/0")
    hashes = {e.triton_hash for e in cap.events}
    assert len(hashes) == len(a.configs or a.compile_results)  # one binary per config, seen twice
    assert sorted(cap.kernels()) == sorted([ia.name, ib.name])
    section = InductorSection.from_json(cap.inductor.section(set(cap.kernels())))
    assert section.decision(ia.digest) is not None and section.decision(ib.digest) is not None
    cap.save(tmp_path / "m.karc")  # one binary, two variants: neither dropped as a duplicate of the other
    model = open_location(tmp_path / "m.karc").model
    filed = sorted(v.kernel for v in model.variants)
    assert filed == sorted([ia.name] * len(hashes) + [ib.name] * len(hashes))


def test_a_capture_restores_no_triton_bundle_of_a_warm_inductor_cache(monkeypatch):
    """An FX graph cache hit's Triton bundle would hand Inductor statically launchable kernels (no triton.compile)
    and write cubins the capture could only harvest under plain names: while capturing, none is restored."""
    import torch  # noqa: F401 - the hooks install only where torch is imported
    from torch._inductor.triton_bundler import TritonBundler

    from karchive.core.inductor_bundles import refuse_triton_bundles

    orig = TritonBundler.__dict__["read_and_emit"]
    restored = []
    monkeypatch.setattr(TritonBundler, "read_and_emit", staticmethod(lambda bundle: restored.append(bundle) or "meta"))
    bundle = type("Bundle", (), {"kernel_artifacts": ["k"], "static_autotuners": []})()
    with karchive.capture("m", version="1") as cap:
        assert TritonBundler.read_and_emit(bundle) is None
    assert restored == [] and cap.summary()["inductor_bundles_not_restored"] == 1
    assert TritonBundler.read_and_emit(bundle) == "meta" and restored == [bundle]  # undone with the capture
    undo = refuse_triton_bundles(lambda: None)
    assert undo is not None and TritonBundler.read_and_emit(bundle) is None
    undo()
    assert TritonBundler.read_and_emit(bundle) == "meta"
    monkeypatch.setattr(TritonBundler, "read_and_emit", orig)


@pytest.mark.parametrize("capture_first", [True, False], ids=["capture-then-serve", "serve-then-capture"])
def test_overlapping_capture_and_serving_keep_bundles_out_until_both_end(monkeypatch, capture_first):
    """A capture and a serving session both refuse Inductor's Triton bundles and may overlap in any order (the one
    opened first ended first here): while either is open no bundle is restored, each counts what it refused, and
    once both have ended torch's own ``read_and_emit`` is back (neither left its refusal installed for good)."""
    import warnings
    from types import SimpleNamespace

    import torch  # noqa: F401 - the hooks install only where torch is imported
    from torch._inductor.triton_bundler import TritonBundler

    from karchive.serve.inductor_serve import install_inductor, uninstall_inductor

    restored = []
    monkeypatch.setattr(TritonBundler, "read_and_emit", staticmethod(lambda bundle: restored.append(bundle) or "meta"))
    theirs = TritonBundler.__dict__["read_and_emit"]
    bundle = type("Bundle", (), {"kernel_artifacts": ["k"], "static_autotuners": []})()
    cap = karchive.capture("m", version="1")
    open_capture = cap.__enter__
    close_capture = lambda: cap.__exit__(None, None, None)  # noqa: E731
    open_serving = lambda: install_inductor(SimpleNamespace(archives=[], mode="strict"))  # noqa: E731
    steps = (
        [open_capture, open_serving, close_capture, uninstall_inductor]
        if capture_first
        else [open_serving, open_capture, uninstall_inductor, close_capture]
    )
    serving = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i, step in enumerate(steps[:3]):
            out = step()
            serving = out if step is open_serving else serving
            assert TritonBundler.read_and_emit(bundle) is None, f"a bundle was restored after step {i}"
        steps[3]()
    assert restored == []
    assert TritonBundler.__dict__["read_and_emit"] is theirs
    assert TritonBundler.read_and_emit(bundle) == "meta" and restored == [bundle]
    assert serving is not None and serving.bundles_refused == 2  # while it was open: with the capture, then alone
    assert cap.summary()["inductor_bundles_not_restored"] == 2


def test_a_refusal_wrapped_by_someone_else_passes_through_once_undone(monkeypatch):
    """Whoever wraps ``read_and_emit`` while a refusal is in force keeps their wrapper after it ends, and the
    refusal left in their chain passes every bundle on to what it replaced; a second undo changes nothing."""
    import torch  # noqa: F401
    from torch._inductor.triton_bundler import TritonBundler

    from karchive.core.inductor_bundles import refuse_triton_bundles

    restored = []
    monkeypatch.setattr(TritonBundler, "read_and_emit", staticmethod(lambda bundle: restored.append(bundle) or "meta"))
    bundle = type("Bundle", (), {"kernel_artifacts": ["k"], "static_autotuners": []})()
    counted = []
    first = refuse_triton_bundles(lambda: counted.append(1))
    inner = TritonBundler.read_and_emit
    theirs = staticmethod(lambda b: ("theirs", inner(b)))
    TritonBundler.read_and_emit = theirs
    second = refuse_triton_bundles(lambda: counted.append(2))
    assert first is not None and second is not None
    assert TritonBundler.read_and_emit(bundle) == ("theirs", None) and counted == [1, 2]
    first()
    first()  # once only: the second refusal is still in force
    assert TritonBundler.read_and_emit(bundle) == ("theirs", None) and counted == [1, 2, 2] and restored == []
    second()
    assert TritonBundler.__dict__["read_and_emit"] is theirs
    assert TritonBundler.read_and_emit(bundle) == ("theirs", "meta") and restored == [bundle]


def test_an_identity_that_cannot_be_described_is_reported_once_and_keeps_the_binary_filed(
    inductor_gpu, tmp_path, monkeypatch
):
    """A second module's identity of an archived binary that fails to be described is one error, however often its
    module compiles; the binary stays archived under the first identity (not reported lost, its hash still maps
    to its variant)."""
    from karchive.errors import UnsupportedKernelError
    from karchive.producer.capture import jit_capture

    a = load_generated("reduction_rmsnorm.py", tmp_path / "x")
    b1 = load_generated("reduction_rmsnorm.py", tmp_path / "y", edit=("'num_load': 3", "'num_load': 4"))
    b2 = load_generated("reduction_rmsnorm.py", tmp_path / "z", edit=("'num_load': 3", "'num_load': 4"))
    ia, ib = inductor_source.of_function(a.fn), inductor_source.of_function(b1.fn)
    assert inductor_source.of_function(b2.fn).name == ib.name != ia.name
    describe = jit_capture.describe_source

    def refuse_b(src, *args, **kwargs):
        if inductor_source.of_function(src.fn).name == ib.name:
            raise UnsupportedKernelError("not this one", kernel=ib.name)
        return describe(src, *args, **kwargs)

    monkeypatch.setattr(jit_capture, "describe_source", refuse_b)
    with karchive.capture("m", version="1") as cap:
        a.precompile(warm_cache_only=True)
        b1.precompile(warm_cache_only=True)  # Triton cache hits on a's binaries, another identity
        b2.precompile(warm_cache_only=True)  # the same identity again
    hashes = {e.triton_hash for e in cap.events}
    assert cap.kernels() == [ia.name]
    assert hashes and hashes <= cap.recorded_hashes()
    assert all(cap.variant_for_hash(h) is not None for h in hashes)
    assert cap.summary()["left_out"] == [] and cap.summary()["lost"] == 0
    assert len(cap.warnings) == len(hashes)  # one per binary of b's identity, not one per compile of it
    assert all("not this one" in w for w in cap.warnings)


def test_an_unstorable_variant_of_a_binary_filed_twice_is_left_out_with_its_hash(inductor_gpu, tmp_path, monkeypatch):
    """Where one binary is filed under two identities and the first identity's manifest entry cannot be stored,
    its left-out entry still names the binary's Triton hash (the hash's latest record is the other identity)."""
    a = load_generated("reduction_rmsnorm.py", tmp_path / "x")
    b = load_generated("reduction_rmsnorm.py", tmp_path / "y", edit=("'num_load': 3", "'num_load': 4"))
    ia = inductor_source.of_function(a.fn)
    with karchive.capture("m", version="1") as cap:
        a.precompile(warm_cache_only=True)
        b.precompile(warm_cache_only=True)
    hashes = {e.triton_hash for e in cap.events}
    variant_type = type(next(iter(cap.variants.values())).variant)
    to_json = variant_type.to_json

    def refuse_a(self):
        if self.kernel == ia.name:
            raise ValueError("not storable")
        return to_json(self)

    monkeypatch.setattr(variant_type, "to_json", refuse_a)
    cap.builder()
    left = [i for i in cap.left_out if i.kernel == ia.name]
    assert len(left) == len(hashes) and {i.triton_hash for i in left} == hashes


@pytest.mark.parametrize("capture_first", [True, False], ids=["capture-then-serve", "serve-then-capture"])
def test_a_capture_outliving_a_serving_session_it_overlapped_records_inductor_and_serving_is_over(
    inductor_gpu, tmp_path, monkeypatch, capture_first
):
    """Serving and capture both wrap Inductor's autotuner, autotune table and module benchmarks. When a serving
    session ends inside a capture, the capture still records Inductor's decisions; once both ended, nothing of the
    serving session acts (a strict session with no archives would refuse every autotuner)."""
    import warnings
    from types import SimpleNamespace

    import torch._inductor.runtime.triton_heuristics as th
    from torch._inductor.codecache import PersistentCache
    from torch._inductor.codegen.triton import TritonScheduling

    from karchive.serve.inductor_serve import install_inductor, uninstall_inductor

    originals = [
        th.CachingAutotuner.__dict__[n]
        for n in ("run", "precompile", "benchmark_all_configs", "coordinate_descent_tuning")
    ] + [PersistentCache.__dict__["lookup"], TritonScheduling.__dict__["benchmark_codegened_module"]]
    cap = karchive.capture("m", version="1")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if capture_first:
            cap.__enter__()
            install_inductor(SimpleNamespace(archives=[], mode="strict"))
        else:
            install_inductor(SimpleNamespace(archives=[], mode="strict"))
            cap.__enter__()
            uninstall_inductor()
            tuner = load_generated("pointwise_gelu.py", tmp_path / "during")
            tuner.precompile(warm_cache_only=True)  # the serving session is over: not refused
            _decide(tuner)
            ((decision,),) = cap.inductor.decisions.values()  # the capture still records, with what it compiled
            assert decision.configs_compiled == len(tuner.compile_results) > 1
            monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor-cache"))  # an empty table
            choices = [type("Choice", (), {"hash_key": lambda self, k=k: k})() for k in ("mm-a", "mm-b")]
            PersistentCache().lookup(choices, "mm", "inputs-key", lambda cs: {cs[0]: 0.5, cs[1]: 0.25})
            assert len(cap.inductor.templates) == 1
        cap.__exit__(None, None, None)
        uninstall_inductor()
    try:
        after = load_generated("pointwise_gelu.py", tmp_path / "after", user="bob")
        after.precompile(warm_cache_only=True)  # neither is open: nothing refuses (strict), nothing pins
        assert len(after.compile_results) > 1 and "_karchive_compiled" not in after.__dict__
        assert len(cap.inductor.decisions) == (0 if capture_first else 1)  # the closed capture records nothing more
    finally:  # what either left in place passes calls through (the inner one stays where the outer kept it)
        for owner, name, orig in zip(
            [th.CachingAutotuner] * 4 + [PersistentCache, TritonScheduling],
            (
                "run",
                "precompile",
                "benchmark_all_configs",
                "coordinate_descent_tuning",
                "lookup",
                "benchmark_codegened_module",
            ),
            originals,
        ):
            setattr(owner, name, orig)


def test_a_selection_is_recorded_once_over_the_wrapper_an_overlap_left(monkeypatch, tmp_path):
    """A capture that ends while a serving session sits over its wrappers leaves them in the chain (inert while no
    capture is open); a later capture wraps again. Each selection must still be recorded once: answers are replayed
    in order and counted, so a doubled record would answer the next lookup of the same choices with a stale one."""
    import torch._inductor.runtime.triton_heuristics as th
    from torch._inductor.codecache import PersistentCache
    from torch._inductor.codegen.triton import TritonScheduling

    names = ("run", "precompile", "benchmark_all_configs", "coordinate_descent_tuning")
    originals = [th.CachingAutotuner.__dict__[n] for n in names]
    originals += [PersistentCache.__dict__["lookup"], TritonScheduling.__dict__["benchmark_codegened_module"]]
    try:
        _open_and_close("capture-serve")
        assert PersistentCache.__dict__["lookup"] is not originals[-2]  # the first capture's wrapper stayed
        monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor-cache"))
        choices = [type("Choice", (), {"hash_key": lambda self, k=k: k})() for k in ("once-a", "once-b")]
        with karchive.capture("b", version="1") as cap:
            PersistentCache().lookup(choices, "mm", "once-key", lambda cs: {cs[0]: 0.5, cs[1]: 0.25})
        assert [t.calls for t in cap.inductor.templates] == [1]
    finally:
        for owner, name, orig in zip(
            [th.CachingAutotuner] * 4 + [PersistentCache, TritonScheduling],
            (*names, "lookup", "benchmark_codegened_module"),
            originals,
        ):
            setattr(owner, name, orig)


def test_a_capture_tunes_over_a_private_empty_table(monkeypatch, tmp_path):
    """Inductor's on-disk autotune table holds other runs' times (and other processes', two ranks share it); what it
    held decides whether a selection's precompile probe hits. A capture tunes over a private table, empty at its
    start, as a serving process replays it; the on-disk table is neither read nor written meanwhile."""
    from torch._inductor.codecache import PersistentCache

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor-cache"))
    choices = [type("Choice", (), {"hash_key": lambda self, k=k: k})() for k in ("private-a", "private-b")]
    PersistentCache().lookup(choices, "mm", "private-key", lambda cs: {cs[0]: 0.5, cs[1]: 0.25})  # an earlier run
    on_disk = PersistentCache().get_local_cache()
    assert PersistentCache().lookup(choices, "mm", "private-key", None)  # its probe hits
    with karchive.capture("m", version="1") as cap:
        assert PersistentCache().lookup(choices, "mm", "private-key", None) == {}  # the capture's does not
        PersistentCache().lookup(choices, "mm", "private-key", lambda cs: {cs[0]: 0.125, cs[1]: 0.75})
        assert len(PersistentCache().lookup(choices, "mm", "private-key", None)) == 2
    assert [t.timings for t in cap.inductor.templates] == [{"private-a": 0.125, "private-b": 0.75}]
    assert PersistentCache().get_local_cache() == on_disk  # untouched


@pytest.mark.parametrize("order", ["capture-capture", "capture-serve", "serve-capture"])
def test_compiles_stay_in_process_until_the_last_of_overlapping_captures_and_serving_ends(monkeypatch, order):
    """Captures and serving sessions each keep Inductor's compiles in this process while open; when they overlap and
    the first opened ends first, the other still has ``compile_threads`` 1 (and a capture its environment variable),
    and once both ended Inductor's own setting is back."""
    import os

    import torch._inductor.config as inductor_config

    before = inductor_config.compile_threads
    inductor_config.compile_threads = 4
    monkeypatch.setenv("TORCHINDUCTOR_COMPILE_THREADS", "4")
    try:
        _open_and_close(order)
        assert inductor_config.compile_threads == 4 and os.environ["TORCHINDUCTOR_COMPILE_THREADS"] == "4"
    finally:
        inductor_config.compile_threads = before


def _open_and_close(order):
    """Open two of captures and serving sessions, end the first, then the second (checking in between)."""
    import os
    import warnings
    from types import SimpleNamespace

    import torch._inductor.config as inductor_config

    from karchive.serve.inductor_serve import install_inductor, uninstall_inductor

    def capture_steps(name):
        cap = karchive.capture(name, version="1")
        return cap.__enter__, lambda: cap.__exit__(None, None, None)

    serve = (lambda: install_inductor(SimpleNamespace(archives=[], mode="strict")), uninstall_inductor)
    first, second = {
        "capture-capture": (capture_steps("a"), capture_steps("b")),
        "capture-serve": (capture_steps("a"), serve),
        "serve-capture": (serve, capture_steps("a")),
    }[order]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        first[0]()
        second[0]()
        first[1]()
        assert inductor_config.compile_threads == 1  # the second still keeps compiles in this process
        if order != "capture-serve":
            assert os.environ["TORCHINDUCTOR_COMPILE_THREADS"] == "1"  # a capture's, for an Inductor imported now
        second[1]()
