"""torch's own cache artifacts (Mega-Cache) in an archive of a torch.compile'd model (docs/inductor-notes.md): a
capture stores them as a member with its digest in the manifest, without Triton binaries; a serving process loads
them only from an archive whose signature a trust policy verified, and then Inductor's FX graph cache hits (no
lowering, no codegen); Inductor's Triton bundle is never restored while serving, so kernels come from the archive.

On the CPU (torch with Inductor, ``/work/venv-torch``): the compiled model is a CPU ``torch.compile`` (C++ kernels),
which exercises the artifacts' plumbing; the archive's Triton kernel is an Inductor-generated sample compiled for
cuda:90 with the GPU-less driver (no CUDA graph can be compiled here). Signing needs ``cryptography``. The GPU
numbers: ``tools/bench_compiled_model.py`` (phase ``serve-cache``)."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("torch._inductor.runtime.triton_heuristics")

from inductor_support import FakeLauncher, load_generated

import karchive
from karchive.errors import DigestMismatchError
from karchive.format.inductor_records import section_of
from karchive.format.open import open_location
from karchive.serve.inductor_serve import install_inductor, uninstall_inductor

MODEL = """
import torch


def step(x, w):
    return torch.nn.functional.gelu(x @ w).sum(-1)


def inputs():
    g = torch.Generator().manual_seed(0)
    return torch.randn(8, 16, generator=g, requires_grad=True), torch.randn(16, 16, generator=g, requires_grad=True)
"""
FAKE_CUBIN = b"A CUBIN THAT IS NOT THE ARCHIVE'S"


def _model(root: Path):
    import importlib.util

    (root / "model").mkdir()
    path = root / "model" / "cached_model.py"
    path.write_text(MODEL)
    spec = importlib.util.spec_from_file_location("cached_model", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    """A capture that saw Inductor compile a CPU model (forward and backward; its FX graph entries given a Triton
    bundle with a cubin, as a GPU compile has) and an Inductor Triton kernel (the archive's variant)."""
    import torch
    import torch._inductor.runtime.triton_heuristics as th
    from capture_fakes import fake_gpu
    from torch._inductor.triton_bundler import TritonBundle, TritonBundler, TritonKernelArtifact, TritonKernelArtifacts

    root = tmp_path_factory.mktemp("cache-artifacts")
    bundle = TritonBundle([TritonKernelArtifacts("f" * 52, 0, [TritonKernelArtifact("k.cubin", FAKE_CUBIN)])], [])
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TORCHINDUCTOR_CACHE_DIR", str(root / "inductor-capture"))
        mp.setenv("TRITON_CACHE_DIR", str(root / "triton-capture"))
        mp.setattr(TritonBundler, "collect", classmethod(lambda cls: (cls.end_compile(), (bundle, None))[1]))
        model = _model(root)
        torch._dynamo.reset()
        with karchive.capture("model", version="1") as cap:
            # the GPU-less driver only for the Triton kernel: a graph compiled while a GPU backend is active records
            # its libdevice (torch 2.13's extern_libs_key), which a CPU serving process does not have
            with fake_gpu(timings=[3.0, 1.0, 2.0]):
                tuner = load_generated("pointwise_gelu.py", root / "capture")
                tuner.precompile(warm_cache_only=True)
                tuner.launchers = [FakeLauncher(tuner.compile_results[1].config)]
                tuner.compile_id = "0/0"
                th.CachingAutotuner.run(tuner, stream=0)
            x, w = model.inputs()
            torch.compile(model.step)(x, w).sum().backward()
        cap.save(root / "model.karc")
        from torch._dynamo.utils import counters

        torch._dynamo.reset()
        misses = counters["inductor"]["fxgraph_cache_miss"]
        with karchive.capture("plain", version="1", inductor_cache_artifacts=False) as plain:
            with fake_gpu(timings=[3.0, 1.0, 2.0]):
                load_generated("pointwise_gelu.py", root / "plain").precompile(warm_cache_only=True)
            torch.compile(model.step)(x[:4].detach(), w).sum()  # another graph, compiled in this window
        plain.save(root / "plain.karc")
        plain_compiled = counters["inductor"]["fxgraph_cache_miss"] - misses
    torch._dynamo.reset()
    return SimpleNamespace(root=root, path=root / "model.karc", cap=cap, plain_compiled=plain_compiled)


def _record(path: Path):
    section = section_of(open_location(path).model)
    return None if section is None else section.cache_artifacts


def test_the_capture_stores_the_artifacts_as_a_member_named_by_the_manifest(captured):
    import torch
    from torch.compiler._cache import CacheArtifactManager

    record = _record(captured.path)
    assert record is not None and record.torch == torch.__version__
    assert record.path == f"inductor/cache-artifacts-{record.sha256}.bin"
    assert record.entries["inductor"] >= 2 and record.entries["aot_autograd"] >= 1  # forward and backward graphs
    reader = open_location(captured.path)
    data = reader.read(record.path)  # checked against the manifest's size and sha256
    assert len(data) == record.size and reader.verify() == []
    artifacts = CacheArtifactManager.deserialize(data)
    assert set(artifacts) == {"inductor", "aot_autograd"}  # no autotune, pgo or precompile entries
    for artifact in artifacts["inductor"]:  # the Triton bundle (its cubin) is not stored: binaries are the variants'
        assert pickle.loads(artifact.content)._triton_bundle is None
    assert FAKE_CUBIN not in data
    assert captured.plain_compiled >= 1  # Inductor compiled in that window too
    assert _record(captured.root / "plain.karc") is None  # inductor_cache_artifacts=False: no member
    assert not any(m.startswith("inductor/") for m in open_location(captured.root / "plain.karc").members)


def test_inspect_says_the_archive_carries_them(captured):
    import torch

    record = _record(captured.path)
    out = subprocess.run(
        [sys.executable, "-m", "karchive", "inspect", str(captured.path), "--summary"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert out.returncode == 0, out.stderr
    assert "torch cache artifacts: " in out.stdout and f"for torch {torch.__version__}" in out.stdout
    js = subprocess.run(
        [sys.executable, "-m", "karchive", "inspect", str(captured.path), "--summary", "--json"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert json.loads(js.stdout)["inductor_cache_artifacts"]["size"] == record.size


def test_a_tampered_member_is_refused_and_serving_skips_it(captured, tmp_path):
    builder = captured.cap.builder()  # the same artifacts: the window's, not the later capture's
    manifest, writer = builder.manifest_and_writer()
    record = _record(captured.path)
    assert manifest["inductor"]["cache_artifacts"] == record.to_json()
    for group in writer._groups:
        group.members = [(n, d[:-1] + bytes([d[-1] ^ 1]) if n == record.path else d) for n, d in group.members]
    bad = tmp_path / "bad.karc"
    writer.write(bad, manifest)
    with pytest.raises(DigestMismatchError, match=record.path):
        open_location(bad).read(record.path)
    arc = karchive.open(bad)
    signed = SimpleNamespace(name=arc.name, version=arc.version, manifest=arc.manifest, reader=arc.reader)
    arc.reader.verdict = SimpleNamespace(signers=(("0" * 64, "ci"),))  # as if a policy had verified its signature
    serving = install_inductor(SimpleNamespace(archives=[signed], mode="strict"))
    try:
        (entry,) = serving.to_json()["cache_artifacts"]
        assert entry["loaded"] is False and "DigestMismatchError" in entry["reason"]
    finally:
        uninstall_inductor()


def test_they_are_skipped_where_torch_is_another_version(captured):
    arc = karchive.open(captured.path)
    arc.manifest.extra["inductor"]["cache_artifacts"]["torch"] = "1.0.0"
    arc.reader.verdict = SimpleNamespace(signers=(("0" * 64, "ci"),))
    serving = install_inductor(SimpleNamespace(archives=[arc], mode="strict"))
    try:
        (entry,) = serving.to_json()["cache_artifacts"]
        assert entry["loaded"] is False and entry["reason"].startswith("recorded with torch 1.0.0")
    finally:
        uninstall_inductor()


def test_serving_never_restores_a_triton_bundle(tmp_path, monkeypatch):
    """An FX graph cache hit's bundle (cubins into Triton's cache, statically launchable autotuners) would launch
    binaries that never passed the compile boundary: serving answers TritonBundler.read_and_emit with nothing."""
    from torch._inductor.triton_bundler import TritonBundle, TritonBundler, TritonKernelArtifact, TritonKernelArtifacts

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    monkeypatch.setattr("torch._inductor.config.bundle_triton_into_fx_graph_cache", True)
    bundle = TritonBundle([TritonKernelArtifacts("e" * 52, 0, [TritonKernelArtifact("k.cubin", FAKE_CUBIN)])], [])
    serving = install_inductor(SimpleNamespace(archives=[], mode="strict"))
    try:
        assert TritonBundler.read_and_emit(bundle) is None
        assert not (tmp_path / "triton").exists() or not any((tmp_path / "triton").rglob("*.cubin"))
        assert serving.to_json()["triton_bundles_not_restored"] == 1
    finally:
        uninstall_inductor()
    TritonBundler.read_and_emit(bundle)  # Inductor's own again: it writes the cubin
    assert [p.read_bytes() for p in (tmp_path / "triton").rglob("*.cubin")] == [FAKE_CUBIN]


SERVE = """
import json, os, sys, time
import karchive, karchive.serve
trust = sys.argv[2] if len(sys.argv) > 2 else None
report = karchive.serve(sys.argv[1], mode="strict", **({"trust": trust} if trust else {}))
import torch                                           # serving started before torch (as KARCHIVE_SERVE does)
from torch._dynamo.utils import counters
sys.path.insert(0, sys.argv[3])
import cached_model
x, w = cached_model.inputs()
torch.compile(cached_model.step)(x, w).sum().backward()
files = [str(p) for p in __import__("pathlib").Path(os.environ["TRITON_CACHE_DIR"]).rglob("*") if p.is_file()]
# the archive's Inductor kernel, generated again under another user's cache: compiled through the boundary
from capture_fakes import fake_gpu
from inductor_support import load_generated
from karchive.serve import boundary
real = []
b = boundary._STATE["boundary"]
orig = b.orig_compile                                  # Triton's own compile, below karchive's boundary
b.orig_compile = lambda *a, **k: (real.append(1), orig(*a, **k))[1]
with fake_gpu(timings=[3.0, 1.0, 2.0]):
    tuner = load_generated("pointwise_gelu.py", __import__("pathlib").Path(sys.argv[3]) / "served", user="carol")
    tuner.precompile(warm_cache_only=True)
arc = karchive.open(sys.argv[1])
binaries = {arc.reader.read(v.binary.path) for k in arc.kernels() for v in arc.variants(k)}
kernel = tuner.compile_results[0].kernel  # Inductor's static launcher (its cubin) or the CompiledKernel (its asm)
binary = getattr(kernel, "cubin_raw", None) or getattr(kernel, "asm", {}).get("cubin")
print(json.dumps({"inductor": report.to_json()["inductor"], "trust": report.to_json()["trust"],
                  "fx": dict(counters["inductor"]), "aot": dict(counters["aot_autograd"]), "triton_files": files,
                  "kernel_from_archive": binary in binaries, "real_compiles": len(real),
                  "served": sorted(report.served)}))
"""


def _serve(captured, tmp_path: Path, archive: Path, policy: Path | None) -> dict:
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "cached_model.py").write_text(MODEL)  # the model's source, elsewhere than captured
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(sys.path),
        "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor-serve"),  # empty: what hits comes from the archive
        "TRITON_CACHE_DIR": str(tmp_path / "triton-serve"),
        "XDG_CACHE_HOME": str(tmp_path / "xdg"),
    }
    env.pop("KARCHIVE_TRUST_POLICY", None)
    args = [str(archive), str(policy) if policy else "", str(tmp_path / "model")]
    r = subprocess.run([sys.executable, "-c", SERVE, *args], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    return {**json.loads(r.stdout.strip().splitlines()[-1]), "stderr": r.stderr[-3000:]}


def test_an_unsigned_archive_serves_without_loading_them(captured, tmp_path):
    got = _serve(captured, tmp_path, captured.path, None)
    (entry,) = got["inductor"]["cache_artifacts"]
    assert entry["loaded"] is False and entry["reason"].startswith("unsigned: no trust policy checked it")
    assert got["fx"].get("fxgraph_cache_hit", 0) == 0 and got["fx"]["fxgraph_cache_miss"] >= 2  # lowered again
    assert got["kernel_from_archive"] and got["real_compiles"] == 0, {
        k: got[k] for k in ("served", "real_compiles", "stderr")
    }


def test_a_signed_trusted_archive_loads_them_and_inductor_skips_codegen(captured, tmp_path):
    pytest.importorskip("cryptography")
    from trust_support import make_keys, write_policy

    from karchive.trust.sign import sign_archive

    keys = make_keys()
    signed = tmp_path / "model-1.karc"
    signed.write_bytes(captured.path.read_bytes())
    sign_archive(signed, keys["ci"])
    got = _serve(captured, tmp_path, signed, write_policy(tmp_path / "policy.toml", keys))
    assert got["trust"]["model@1"].startswith("signed: ci")
    (entry,) = got["inductor"]["cache_artifacts"]
    assert entry["loaded"] is True and entry["load_s"] >= 0 and "reason" not in entry
    # torch's own counters: both graphs (forward, backward) came from the FX graph cache, none was lowered
    assert got["fx"]["fxgraph_cache_hit"] >= 2 and got["fx"].get("fxgraph_cache_miss", 0) == 0
    assert got["aot"].get("autograd_cache_hit", 0) >= 1
    # the Triton bundle the capture's graphs had was not stored, nor restored: no binary reached Triton's cache
    assert not [f for f in got["triton_files"] if f.endswith(".cubin")]
    # and the archive's Inductor kernel still comes from the archive: Triton compiled nothing, Inductor holds the
    # archive's cubin
    assert got["kernel_from_archive"] and got["real_compiles"] == 0 and len(got["served"]) == 1


def test_an_archive_rewritten_by_tune_keeps_the_member(captured, tmp_path):
    """``karchive tune`` writes the archive again with its extra fields: the member they name goes with them."""
    from karchive.producer.build.tune_archive import write_tuned_version

    reader = open_location(captured.path)
    write_tuned_version(reader, tmp_path / "tuned.karc", version="2", records=[])
    record = _record(tmp_path / "tuned.karc")
    assert record == _record(captured.path)
    tuned = open_location(tmp_path / "tuned.karc")
    assert tuned.read(record.path) == reader.read(record.path) and tuned.verify() == []
