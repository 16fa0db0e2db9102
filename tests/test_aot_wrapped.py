"""Ahead-of-time builds of @triton.autotune / @triton.heuristics kernels (issue 23, item 2).

Real Triton compiles for cuda:90 (no GPU); the runtime side runs up to the driver on the recording
stand-in of runtime_support.py (nothing executes: the device's timings are the stand-in's, so the test
checks that every prebuilt config is tried, the in-place hooks run, and the choice is remembered, not
which config is fastest — tests/gpu/test_aot_wrapped_gpu.py compares with Triton's own run on the H100).
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest
from support import needs_triton
from wrapped_specs import Tensor, kernel_blocks

from karchive.errors import ArgumentError, KernelNotFoundError, NoMatchingVariantError, SpecFileError

pytestmark = needs_triton
ROOT = pathlib.Path(__file__).resolve().parent.parent
KERNELS = ROOT / "tests" / "wrapped_kernels.py"
X, Y, Z = 0x7F00_0000_1000, 0x7F00_0000_2000, 0x7F00_0000_3000


def _spec(tmp_path, body: str) -> pathlib.Path:
    path = tmp_path / "spec.toml"
    path.write_text('[archive]\nname = "wrapped"\nversion = "1"\ntargets = ["cuda:90"]\n' + body)
    return path


SPEC = f"""
{kernel_blocks(KERNELS)}configs = [1]
[[kernel]]
source = "{KERNELS}:h_only"
signature = "*fp32:16, *fp32:16, i32"
constexprs = {{ BLOCK = [64, 128] }}
num_warps = 4
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from karchive.producer.build.pipeline import build_archive
    from karchive.producer.build.spec_file import load_spec, validate_requests

    tmp = tmp_path_factory.mktemp("wrapped")
    spec = load_spec(_spec(tmp, SPEC))
    warnings = validate_requests(spec.requests)
    result = build_archive(spec, tmp / "w.karc", progress=False)
    return tmp / "w.karc", spec, warnings, result


def test_kernel_refs_reach_the_kernel_inside_its_wrappers():
    from karchive.producer.compile.kernel_ref import load_kernel, load_object

    for name in ("at_copy", "h_over_at", "at_over_h", "h_only", "at_over_h.fn", "h_over_at.fn", "at_copy.fn"):
        fn, _ = load_kernel(f"{KERNELS}:{name}")
        assert type(fn).__name__ == "JITFunction" and fn.__name__ == name.split(".")[0]
    obj, _ = load_object(f"{KERNELS}:h_over_at.fn")
    assert type(obj).__name__ == "Autotuner"
    with pytest.raises(KernelNotFoundError) as err:
        load_kernel(f"{KERNELS}:missing")
    assert set(err.value.available) == {
        "at_copy",
        "h_over_at",
        "at_over_h",
        "h_only",
        "keyed",
        "h_device",
        "at_matmul",
        "at_rowsum",
    }
    assert "at_copy, at_matmul, at_over_h, at_rowsum, h_device, h_only, h_over_at, keyed" in str(
        err.value
    ) and err.value.ref.endswith(":missing")
    with pytest.raises(KernelNotFoundError, match="is a function, not a @triton.jit kernel"):
        load_kernel(f"{KERNELS}:_prune")


def test_every_config_is_built_per_target(built):
    _path, spec, warnings, result = built
    by_kernel: dict[str, list] = {}
    for v in result.built:
        j = v.variant.to_json()
        cx = {p["name"]: p["value"] for p in j["params"] if "value" in p and p.get("type") == "constexpr"}
        assert v.kernel.startswith("wrapped_kernels:")  # filed under module:qualname
        by_kernel.setdefault(v.kernel.removeprefix("wrapped_kernels:"), []).append((cx, j["abi"]["num_warps"]))
    assert sorted(by_kernel["at_copy"], key=str) == sorted(
        [({"BLOCK": 64}, 2), ({"BLOCK": 128}, 4)], key=str
    )  # early_config_prune (configs only) applied
    # heuristics over autotune: 2 configs x IS_VARLEN both values (a boolean expression) where offsets is a
    # tensor; where the spec passes offsets as None, IS_VARLEN (offsets is not None) is evaluated: False only
    assert sorted(by_kernel["h_over_at"], key=str) == sorted(
        [({"BLOCK": b, "IS_VARLEN": v}, w) for b, w in ((64, 2), (128, 4)) for v in (False, True)]
        + [({"offsets": None, "BLOCK": b, "IS_VARLEN": False}, w) for b, w in ((64, 2), (128, 4))],
        key=str,
    )
    # configs = [1] selects BLOCK=128; EVEN both ways
    assert sorted(by_kernel["at_over_h"], key=str) == [
        ({"BLOCK": 128, "EVEN": False}, 4),
        ({"BLOCK": 128, "EVEN": True}, 4),
    ]
    assert sorted(by_kernel["h_only"], key=str) == [({"BLOCK": 128}, 4), ({"BLOCK": 64}, 4)]
    assert any("early_config_prune applied ahead of time" in w for w in warnings)
    assert any("h_only" in w and "'num_warps' is not stored" in w for w in result.warnings)


def test_the_archive_records_keys_configs_hooks_and_heuristics_as_data(built):
    from karchive.cli.inspect_cmds import schema_problems
    from karchive.format.open import open_location

    path, *_ = built
    reader = open_location(path)
    manifest = reader.manifest
    assert schema_problems(manifest) == [] and reader.verify() == []
    # records carry the variants' module:qualname
    assert all(r["kernel"].startswith("wrapped_kernels:") for r in manifest["autotune"] + manifest["heuristics"])
    at = {r["kernel"].removeprefix("wrapped_kernels:"): r for r in manifest["autotune"]}
    assert at["at_copy"]["key_names"] == ["n"] and at["at_copy"]["entries"] == []
    assert at["at_copy"]["reset_to_zero"] == ["out_ptr"] and "early_config_prune applied" in at["at_copy"]["prune"]
    assert [c["kwargs"] for c in at["at_copy"]["configs"]] == [{"BLOCK": 64}, {"BLOCK": 128}, {"BLOCK": 256}]
    assert at["at_copy"]["configs"][2]["num_stages"] == 2
    assert at["h_over_at"]["key_names"] == ["n", "IS_VARLEN"] and at["h_over_at"]["outer_heuristics"] == ["IS_VARLEN"]
    assert at["at_over_h"]["restore_value"] == ["x_ptr"] and at["at_over_h"]["outer_heuristics"] == []
    he = {r["kernel"].removeprefix("wrapped_kernels:"): r for r in manifest["heuristics"]}
    assert he["h_over_at"]["exprs"] == {"IS_VARLEN": ["not_none", ["arg", "offsets"]]}
    assert he["at_over_h"]["exprs"] == {"EVEN": ["==", ["%", ["arg", "n"], ["arg", "BLOCK"]], ["const", 0]]}
    assert he["h_only"]["names"] == ["num_warps", "BLOCK"]
    assert he["h_only"]["exprs"] == {"BLOCK": ["call", "next_power_of_2", ["arg", "n"]]}  # num_warps: opaque
    raw = json.dumps(manifest)
    assert "lambda" not in raw and "pickle" not in raw


def test_a_computed_value_that_cannot_be_enumerated_needs_the_spec(tmp_path):
    from karchive.producer.build.spec_file import load_spec, validate_requests

    spec = load_spec(
        _spec(tmp_path, f'[[kernel]]\nsource = "{KERNELS}:h_only"\nsignature = "*fp32, *fp32, i32"\nnum_warps = 4\n')
    )
    with pytest.raises(SpecFileError, match=r"computes 'BLOCK'.*constexprs = \{ BLOCK = \[\.\.\.\] \}"):
        validate_requests(spec.requests)
    spec = load_spec(
        _spec(tmp_path, f'[[kernel]]\nsource = "{KERNELS}:at_copy"\nsignature = "*fp32, *fp32, i32"\nconfigs = [3]\n')
    )
    with pytest.raises(SpecFileError, match="does not index the autotuner's 3 configs"):
        validate_requests(spec.requests)


def test_compile_cli_builds_an_autotuned_kernel(tmp_path):
    out = tmp_path / "c.karc"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "karchive",
            "compile",
            str(KERNELS),
            "-n",
            "h_over_at",
            "-s",
            "*fp32:16, *fp32:16, *fp32:16, i32, fp32",
            "-t",
            "cuda:90",
            "-o",
            str(out),
            "--json",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout)
    assert len(summary["variants"]) == 4
    import karchive

    assert karchive.open(str(out)).manifest.autotune[0]["key_names"] == ["n", "IS_VARLEN"]


# --- the runtime: Triton's call shape, tuned on the (recording) device ---------------------------------------
@pytest.fixture
def device(monkeypatch, built, tmp_path):
    from runtime_support import fake_cuda, register_sizes

    import karchive
    from karchive.runtime import args, launch_path

    monkeypatch.setenv("KARCHIVE_CACHE_DIR", str(tmp_path / "kcache"))  # tuning decisions land here
    args.set_tensor_type(Tensor)
    try:
        with fake_cuda(monkeypatch, launch_path.PYTHON) as (rec, _backend):
            arc = karchive.open(str(built[0]))
            register_sizes(rec, arc)
            yield arc, rec
    finally:
        args.set_tensor_type(None)


def test_launch_without_meta_parameters_tunes_once_per_key(device):
    from karchive.runtime.autotuned import AutotuneResolver

    arc, rec = device
    k = arc.kernel("h_over_at")
    assert isinstance(k.resolver, AutotuneResolver) and k.resolver.tune_on_device
    x, out = Tensor(X), Tensor(Y)
    with pytest.raises(NoMatchingVariantError, match="not tuned yet"):
        k.select(x, out, None, 4096, 1.5)
    k[(32,)](x, out, None, 4096, 1.5)
    blocks = [a.block[0] for a in rec.launches()]
    # each of the 2 configs: one warm-up and 10 timed runs, then the launch itself with the choice
    assert sorted(set(blocks[:-1])) == [64, 128] and len(blocks) == 2 * 11 + 1
    chosen = blocks[-1]
    # the key includes IS_VARLEN (computed above the autotuner): with offsets it is another key, tuned again
    k[(32,)](x, out, None, 4096, 1.5)
    assert len(rec.launches()) == 24 and rec.launches()[-1].block[0] == chosen
    k[(32,)](x, out, Tensor(Z), 4096, 1.5)
    assert len(rec.launches()) == 24 + 23
    v = k.select(x, out, Tensor(Z), 4096, 1.5)
    assert v.constexprs["IS_VARLEN"] is True
    assert k.select(x, out, None, 4096, 1.5).constexprs["IS_VARLEN"] is False
    assert sorted(k.resolver._choices) == sorted(
        [
            tuple(repr(p) for p in [4096, False, "torch.float32", "torch.float32"]),
            tuple(repr(p) for p in [4096, True] + ["torch.float32"] * 3),
        ]
    )


def test_on_first_launch_tuning_times_by_the_events_rule(device, monkeypatch):
    """Where CUDA events exist, a config is timed as karchive tune times it (karchive/runtime/tuning/bench.py): the
    counts follow the estimate, and the fastest config wins. The events here read a clock that each recorded
    launch advances by its config's duration (num_warps 2: 1 ms, num_warps 4: 0.5 ms)."""
    from karchive.runtime.tuning import bench as _bench

    arc, rec = device
    took = {64: 1.0, 128: 0.5}  # block threads -> ms

    class Event:
        def record(self) -> None:
            self.at = sum(took[a.block[0]] for a in rec.launches())

        def synchronize(self) -> None:
            pass

        def elapsed_time(self, end: Event) -> float:
            return end.at - self.at

    monkeypatch.setattr(_bench, "event_pair", lambda device: lambda: (Event(), Event()))
    arc.kernel("h_over_at")[(32,)](Tensor(X), Tensor(Y), None, 4096, 1.5)
    blocks = [a.block[0] for a in rec.launches()]
    # per config: 1 untimed + 5 estimating + 25 ms / estimate warm-up + 100 ms / estimate timed runs
    assert blocks.count(64) == 1 + 5 + 25 + 100 and blocks.count(128) - 1 == 1 + 5 + 50 + 200
    assert blocks[-1] == 128  # the faster config launches the call


def test_tuning_honours_reset_to_zero_and_restore_value(device):
    arc, rec = device
    x, out = Tensor(X), Tensor(Y)
    arc.kernel("at_copy")[(4,)](x, out, 1024)
    assert out.calls.count("zero_") == 2 * 11 + 1 and x.calls == []  # 2 configs (the third pruned at build)
    x2, out2 = Tensor(X), Tensor(Y)
    arc.kernel("at_over_h")[(4,)](x2, out2, 1024)
    assert x2.calls[0] == "clone" and x2.calls.count("copy_") == 11 and out2.calls == []
    with pytest.raises(ArgumentError, match="restore_value names 'x_ptr'"):
        arc.kernel("at_over_h")[(4,)](X, Tensor(Y), 2048)  # a raw pointer cannot be put back


def test_heuristics_only_kernels_evaluate_their_expressions(device):
    arc, rec = device
    k = arc.kernel("h_only")
    # Its num_warps heuristic reads the environment: no expression, so karchive cannot compute what Triton
    # computes from every call, and a num_warps passed does not help (Triton would replace it): refused.
    for kw in ({}, {"num_warps": 4}):
        with pytest.raises(NoMatchingVariantError, match=r"\['num_warps'\].*cannot take them from the caller"):
            k.select(Tensor(X), Tensor(Y), 60, **kw)
    from karchive.runtime.autotuned import computed_by_caller

    # A served call site computes num_warps with the library's own function: then BLOCK comes from its expression.
    served = computed_by_caller(k, ["num_warps"])
    assert served.select(Tensor(X), Tensor(Y), 100, num_warps=4).constexprs == {"BLOCK": 128}
    assert served.select(Tensor(X), Tensor(Y), 60, num_warps=4).constexprs == {"BLOCK": 64}
    # ... and a BLOCK passed is replaced by the computed one, as Triton does.
    assert served.select(Tensor(X), Tensor(Y), 60, num_warps=4, BLOCK=1024).constexprs == {"BLOCK": 64}


def test_records_follow_qualified_kernel_names():
    """Variants may name a kernel module:qualname (issue 19); records written by function name follow them."""
    from karchive.producer.compile.wrapped import align_kernel_names

    recs = [{"kernel": "add"}, {"kernel": "mul"}, {"kernel": "gone"}]
    out = align_kernel_names(recs, {"pkg.ops:add", "pkg.ops:Ops.mul", "a:mul2", "b:gone", "c:gone"})
    assert [r["kernel"] for r in out] == ["pkg.ops:add", "pkg.ops:Ops.mul", "gone"]  # two fit "gone": unchanged


def test_decisions_are_remembered_per_gpu_model_and_driver(device, tmp_path, monkeypatch):
    import karchive

    arc, rec = device
    x, out = Tensor(X), Tensor(Y)
    arc.kernel("h_over_at")[(32,)](x, out, None, 4096, 1.5)
    tuned = len(rec.launches())
    assert tuned == 2 * 11 + 1
    (path,) = (tmp_path / "kcache" / "tuning").rglob("*.json")
    saved = json.loads(path.read_text())
    assert saved["kernel"] == "wrapped_kernels:h_over_at" and path.name == "Fake_H100--13000.json"
    assert saved["device"] == {"name": "Fake H100", "driver": 13000}
    (decision,) = saved["decisions"].values()
    # a fresh process (a fresh open): the decision is read back; select() answers; one launch, no timing
    k = karchive.open(str(arc.ref)).kernel("h_over_at")
    assert k.select(x, out, None, 4096, 1.5).constexprs["BLOCK"] == decision["kwargs"]["BLOCK"]
    k[(32,)](x, out, None, 4096, 1.5)
    assert len(rec.launches()) == tuned + 1
    # an edited file naming a config the archive does not hold is ignored: the key is tuned again
    saved["decisions"] = {key: {"kwargs": {"BLOCK": 4096}, "options": {"num_warps": 4}} for key in saved["decisions"]}
    path.write_text(json.dumps(saved))
    karchive.open(str(arc.ref)).kernel("h_over_at")[(32,)](x, out, None, 4096, 1.5)
    assert len(rec.launches()) == tuned + 1 + tuned
    # turned off: nothing read, nothing written
    monkeypatch.setenv("KARCHIVE_TUNING_CACHE", "0")
    path.unlink()
    karchive.open(str(arc.ref)).kernel("h_over_at")[(32,)](x, out, None, 4096, 1.5)
    assert not path.exists()


def test_decisions_ship_to_another_machine_with_karchive_tune(device, built, tmp_path, monkeypatch):
    import karchive

    arc, rec = device
    x, out = Tensor(X), Tensor(Y)
    arc.kernel("h_over_at")[(32,)](x, out, None, 4096, 1.5)  # tuned here: decisions in $KARCHIVE_CACHE_DIR
    tuned = len(rec.launches())
    shipped = tmp_path / "h100.json"
    env = dict(__import__("os").environ, PYTHONPATH=str(ROOT))
    run = subprocess.run(
        [sys.executable, "-m", "karchive", "tune", str(built[0]), "--export", str(shipped), "--json"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == {"exported": 1, "kernels": ["wrapped_kernels:h_over_at"], "file": str(shipped)}
    other = tmp_path / "other-machine"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "karchive",
            "tune",
            str(built[0]),
            "--import",
            str(shipped),
            "--cache-dir",
            str(other),
            "--json",
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == {"written": 1, "skipped": []}
    monkeypatch.setenv("KARCHIVE_CACHE_DIR", str(other))
    karchive.open(str(built[0])).kernel("h_over_at")[(32,)](x, out, None, 4096, 1.5)
    assert len(rec.launches()) == tuned + 1  # the shipped decision: launched, nothing timed
    # decisions for another build of the kernel are not imported
    data = json.loads(shipped.read_text())
    data["kernels"][0]["digest"] = "0" * 64
    shipped.write_text(json.dumps(data))
    from karchive.format.open import open_location
    from karchive.runtime.tuning.decisions import import_decisions

    report = import_decisions(open_location(built[0]).model, data, tmp_path / "third")
    assert report["written"] == 0 and "differs" in report["skipped"][0]
