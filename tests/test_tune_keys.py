"""`karchive tune --keys`: tuning calls among prebuilt configs, written as a new archive version or a signed
sidecar, and the runtime's order of preference (archive table for its GPU model, local cache, tuning).

Real Triton compiles for cuda:90 (no GPU); the runtime runs up to the driver on runtime_support's recording
stand-in, and the timing seam (``bench``) is a table: what the CPU side decides (which configs are timed,
which wins, what is written, what a later process launches) is checked here; that the device's timings
pick well is tests/gpu/test_wrapped_gpu.py's job on the H100.
"""

from __future__ import annotations

import hashlib
import json
import pathlib

import pytest
from support import needs_triton
from wrapped_specs import Tensor, kernel_blocks

from karchive.errors import TrustError

pytestmark = needs_triton
ROOT = pathlib.Path(__file__).resolve().parent.parent
KERNELS = ROOT / "tests" / "wrapped_kernels.py"
SPEC = f"""[archive]
name = "tunable"
version = "1"
targets = ["cuda:90"]
{kernel_blocks(KERNELS)}configs = [1]
"""
N = 4096


def grid_expr() -> list:
    return [["call", "cdiv", ["arg", "n"], ["arg", "BLOCK"]]]


def keys_doc(*calls: dict) -> bytes:
    return json.dumps({"format": "karchive-tune-keys/1", "calls": list(calls)}).encode()


def t32(n: int = N) -> dict:
    return {"tensor": {"shape": [n], "dtype": "float32"}}


COPY = {"kernel": "at_copy", "args": {"x_ptr": t32(), "out_ptr": t32(), "n": N}, "grid": grid_expr()}
VARLEN = {
    "kernel": "h_over_at",
    "args": {"x_ptr": t32(), "out_ptr": t32(), "offsets": t32(), "n": N, "scale": 1.5},
    "grid": grid_expr(),
}
PLAIN = {**VARLEN, "args": {**VARLEN["args"], "offsets": None}}
RESTORE = {
    "kernel": "at_over_h",
    "args": {"x_ptr": t32(), "out_ptr": t32(), "n": {"expr": ["probe", ["arg", "x_ptr"], "numel()"]}},
    "grid": grid_expr(),
}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from karchive.producer.build.pipeline import build_archive
    from karchive.producer.build.spec_file import load_spec

    tmp = tmp_path_factory.mktemp("tunable")
    (tmp / "spec.toml").write_text(SPEC)
    build_archive(load_spec(tmp / "spec.toml"), tmp / "t.karc", progress=False)
    return tmp / "t.karc"


# -- stand-ins: tensors, and a bench that reads times from a table --------------------------------------------------
class IntTensor(Tensor):
    """An int32 index tensor stand-in whose values can be read (torch's detach/flatten/tolist)."""

    def __init__(self, values: list[int]) -> None:
        super().__init__(0x7F40_0000_0000, (len(values),), "torch.int32")
        self._values = values

    def detach(self) -> IntTensor:
        return self

    def flatten(self) -> IntTensor:
        return self

    def tolist(self) -> list[int]:
        return list(self._values)


class Factory:
    def __init__(self) -> None:
        self.made: list[tuple[Tensor, object]] = []
        self.next = 0x7F00_0000_0000

    def tensor(self, spec, seed):
        t = Tensor(self.next, spec.shape, f"torch.{spec.dtype}")
        self.next += 0x10_0000
        self.made.append((t, spec))
        return t


class TableBench:
    """Times per config from ``table`` (BLOCK -> seconds); runs each launch once inside the hooks, as the device
    bench does, so the recording device sees what was launched."""

    def __init__(self, table: dict[int, float]) -> None:
        self.table, self.timed = table, []

    def describe(self) -> dict:
        return {"warmup": 0, "reps": 1, "l2_flush": False, "timer": "table"}

    def __call__(self, config, launch, hooks, sync):
        hooks.before()
        launch()
        hooks.after()
        sync()
        self.timed.append(config["kwargs"]["BLOCK"])
        return [self.table[config["kwargs"]["BLOCK"]]]


@pytest.fixture
def device(monkeypatch, built, tmp_path):
    from runtime_support import fake_cuda, register_sizes

    import karchive
    from karchive.runtime import args, launch_path

    monkeypatch.setenv("KARCHIVE_CACHE_DIR", str(tmp_path / "kcache"))
    args.set_tensor_type(Tensor)
    try:
        with fake_cuda(monkeypatch, launch_path.PYTHON) as (rec, _backend):
            arc = karchive.open(str(built))
            register_sizes(rec, arc)
            yield arc, rec
    finally:
        args.set_tensor_type(None)


# -- the keys file -------------------------------------------------------------------------------------------------
def test_keys_files_are_parsed_strictly_and_evaluate_nothing_until_the_device_run():
    from karchive.errors import TuneError
    from karchive.runtime.tuning.tuner import Expr, TensorSpec, parse_keys_file

    (call,) = parse_keys_file(
        keys_doc(
            {
                **RESTORE,
                "args": {
                    **RESTORE["args"],
                    "off": {"tensor": {"shape": [3], "dtype": "int32", "values": [0, 5, 9]}},
                    "idx": {"tensor": {"shape": [4], "dtype": "int64"}},
                },
            }
        )
    )
    # integer tensors default to zeros (random indices would go out of bounds); small ones may list their values
    assert call.args["off"].values == (0, 5, 9) and call.args["idx"].init == "zeros"
    assert call.args["x_ptr"].init == "randn"
    assert call.kernel == "at_over_h" and isinstance(call.args["x_ptr"], TensorSpec)
    assert isinstance(call.args["n"], Expr) and isinstance(call.grid[0], Expr)
    bad = [
        (b'{"format": "other", "calls": []}', "not a keys file"),
        (keys_doc({**COPY, "args": {"x_ptr": {"tensor": {"shape": [4], "dtype": "complex64"}}}}), "dtype 'complex64'"),
        (keys_doc({**COPY, "args": {"x_ptr": {"tensor": {"shape": [1 << 20, 1 << 20]}}}}), "elements is more"),
        (keys_doc({**COPY, "args": {"n": {"expr": ["__import__", "os"]}}}), "__import__"),
        (keys_doc({**COPY, "grid": [1, 2, 3, 4]}), "1 to 3 items"),
        (keys_doc({**COPY, "grid": ["16"]}), "non-negative integer or an expression"),
        (keys_doc({**COPY, "args": {"n": [1, 2]}}), "JSON scalar"),
        (keys_doc({**COPY, "extra": 1}), "a call is"),
        (
            keys_doc({**COPY, "args": {"o": {"tensor": {"shape": [3], "dtype": "int32", "values": [0, 1]}}}}),
            "values must list the tensor's 3 elements",
        ),
        (
            keys_doc({**COPY, "args": {"o": {"tensor": {"shape": [1], "dtype": "int32", "values": ["0"]}}}}),
            "values must list",
        ),
        (b'{"format": "karchive-tune-keys/1", "calls": [1e999]}', "a call is"),
    ]
    for raw, want in bad:
        with pytest.raises(TuneError, match=want):
            parse_keys_file(raw)


def test_each_key_is_timed_once_across_the_built_configs_with_the_hooks(device):
    from karchive.runtime.tuning.tuner import Tuner, parse_keys_file

    arc, rec = device
    bench = TableBench({64: 3e-6, 128: 1e-6, 256: 2e-6})
    factory = Factory()
    calls = parse_keys_file(keys_doc(COPY, COPY, PLAIN, VARLEN, RESTORE))
    decisions = Tuner(arc, bench=bench, factory=factory).tune(calls)
    got = {(d.kernel, tuple(d.key)): d for d in decisions}
    assert sorted(got) == sorted(
        [
            ("wrapped_kernels:at_copy", (N, "torch.float32", "torch.float32")),
            ("wrapped_kernels:h_over_at", (N, False, "torch.float32", "torch.float32")),
            ("wrapped_kernels:h_over_at", (N, True, "torch.float32", "torch.float32", "torch.float32")),
            ("wrapped_kernels:at_over_h", (N, "torch.float32", "torch.float32")),
        ]
    )  # COPY twice: timed once
    copy = got[("wrapped_kernels:at_copy", (N, "torch.float32", "torch.float32"))]
    assert copy.config == 1 and copy.timings_ms == [0.003, 0.001, None]
    assert "not built" in copy.skipped[2]  # at_copy's early_config_prune (BLOCK <= 128) was applied at build
    # at_over_h was built for config 1 only: config 0 is not timed, and says why
    (restore,) = [d for d in decisions if d.kernel.endswith("at_over_h")]
    assert restore.config == 1 and restore.timings_ms[0] is None and "not built" in restore.skipped[0]
    assert bench.timed == [64, 128] + [64, 128] * 2 + [128]
    # reset_to_zero (at_copy's out_ptr) before each run and once after; restore_value (at_over_h's x_ptr) put back
    outs = [t for t, s in factory.made]
    assert outs[1].calls.count("zero_") == 2 + 1
    x_restore = outs[-2]
    assert x_restore.calls == ["clone", "copy_"]
    # the grid expression saw each config's BLOCK: cdiv(4096, 64) = 64 programs for BLOCK=64
    grids = [launch.grid for launch in rec.launches()]
    assert grids[:2] == [(64, 1, 1), (32, 1, 1)]


def test_the_tuner_chooses_by_the_median_then_the_faster_runs(device):
    """time_configs ranks each config's runs as Triton's autotuner does (runtime/tuning/bench.choose): equal
    medians go to the config whose fast runs are faster (the first config took it before), and a broken timer's
    NaN never wins (it did when it came first: nothing compares below NaN)."""
    from karchive.runtime.tuning.tuner import Tuner, parse_keys_file

    arc, _rec = device
    runs = {64: [1.0, 2.0, 3.0], 128: [0.5, 2.0, 3.0]}  # us: the same median, 128's 20th percentile lower

    def bench(config, launch, hooks, sync):
        launch()
        return [t * 1e-6 for t in runs[config["kwargs"]["BLOCK"]]]

    (d,) = Tuner(arc, bench=bench, factory=Factory()).tune(parse_keys_file(keys_doc(COPY)))
    assert d.config == 1 and d.timings_ms == [0.002, 0.002, None]
    runs.update({64: [float("nan")] * 3, 128: [5.0] * 3})
    (d,) = Tuner(arc, bench=bench, factory=Factory()).tune(parse_keys_file(keys_doc(COPY)))
    assert d.config == 1 and d.timings_ms == [None, 0.005, None]


def test_a_key_the_file_states_must_be_the_one_the_runtime_computes(device):
    from karchive.errors import TuneError
    from karchive.runtime.tuning.tuner import Tuner, parse_keys_file

    arc, _ = device
    calls = parse_keys_file(keys_doc({**COPY, "key": [N, "torch.float16", "torch.float32"]}))
    with pytest.raises(TuneError, match="the runtime computes") as err:
        Tuner(arc, bench=TableBench({64: 1, 128: 1, 256: 1}), factory=Factory()).tune(calls)
    assert err.value.call == 0 and err.value.kernel == "wrapped_kernels:at_copy"
    with pytest.raises(TuneError, match="has no parameter"):
        Tuner(arc, bench=TableBench({}), factory=Factory()).tune(
            parse_keys_file(keys_doc({**COPY, "args": {**COPY["args"], "m": 3}}))
        )
    # a config the driver refuses (out of resources on this device) is skipped with the reason, as Triton times it inf
    from karchive.errors import LaunchError

    class Refusing(TableBench):
        def __call__(self, config, launch, hooks, sync):
            if config["kwargs"]["BLOCK"] == 128:
                raise LaunchError("CUDA_ERROR_OUT_OF_RESOURCES")
            return super().__call__(config, launch, hooks, sync)

    (d,) = Tuner(arc, bench=Refusing({64: 2, 128: 1}), factory=Factory()).tune(parse_keys_file(keys_doc(COPY)))
    assert d.config == 0 and "OUT_OF_RESOURCES" in d.skipped[1] and d.timings_ms[1] is None
    # --keep-going: the bad call is reported, the good one still tuned
    t = Tuner(arc, bench=TableBench({64: 2, 128: 1}), factory=Factory())
    (d,) = t.tune(parse_keys_file(keys_doc({**COPY, "key": [1]}, COPY)), keep_going=True)
    assert d.config == 1 and [f["call"] for f in t.failed] == [0] and "the runtime computes" in t.failed[0]["error"]


# -- a new archive version -----------------------------------------------------------------------------------------
def _tune(arc, reader, out, table, *calls, version=None, **kw):
    from karchive.cli.tune_cmds import tune_archive
    from karchive.runtime.tuning.tuner import parse_keys_file

    return tune_archive(
        reader,
        parse_keys_file(keys_doc(*calls)),
        ref=str(out),
        out=str(out) if out else None,
        version=version,
        bench=TableBench(table),
        factory=Factory(),
        archive=arc,
        **kw,
    )


def _sha(path) -> str:
    return hashlib.sha256(pathlib.Path(path).read_bytes()).hexdigest()


def test_decisions_become_a_new_version_with_the_same_variants(device, built, tmp_path, capsys):
    from karchive.format.open import open_location

    arc, rec = device
    reader = open_location(built)
    report = _tune(arc, reader, tmp_path / "a.karc", {64: 3, 128: 1, 256: 2}, COPY, PLAIN)
    assert report["written"]["version"] == "1+tuned-Fake-H100"
    assert report["device"] == {"name": "Fake H100", "target": "cuda:90", "driver": 13000}
    new = open_location(tmp_path / "a.karc")
    assert new.verify() == []
    old_v = {v.key: v.to_json() for v in reader.model.variants}
    new_v = {v.key: v.to_json() for v in new.model.variants}
    assert new_v == old_v  # same variants, same member digests
    for v in reader.model.variants:
        assert new.read(v.binary.path) == reader.read(v.binary.path)
    assert [s.sha256 for s in new.model.sources] == [s.sha256 for s in reader.model.sources]
    assert new.model.heuristics == reader.model.heuristics
    at = {r["kernel"]: r for r in new.model.autotune}
    (table,) = at["wrapped_kernels:at_copy"]["tuned"]
    assert table["device"] == {"name": "Fake H100", "target": "cuda:90"}
    assert table["entries"] == [{"key": [N, "torch.float32", "torch.float32"], "config": 1}]
    prov = table["provenance"]
    assert prov["by"] == "karchive tune" and prov["driver"] == 13000 and prov["bench"]["timer"] == "table"
    assert prov["from"] == {"name": "tunable", "version": "1", "sha256": _sha(built)}
    assert "tuned" not in at["wrapped_kernels:at_over_h"]  # no call for it: no table
    from karchive.cli.main import main

    assert main(["inspect", str(tmp_path / "a.karc")]) == 0
    assert "tuning tables: Fake H100: 2 keys" in capsys.readouterr().out
    from karchive.cli.inspect_cmds import schema_problems

    assert schema_problems(new.manifest) == []
    # heuristics over autotune: the table's key holds IS_VARLEN (computed first), and the runtime finds it
    import karchive

    n = len(rec.launches())
    k = karchive.open(str(tmp_path / "a.karc")).kernel("h_over_at")
    v = k.select(Tensor(0x7F10_0000_0000), Tensor(0x7F20_0000_0000), None, N, 1.5)
    assert v.constexprs == {"offsets": None, "BLOCK": 128, "IS_VARLEN": False} and len(rec.launches()) == n
    with pytest.raises(Exception, match="not tuned yet"):  # IS_VARLEN True: another key, in no table
        k.select(Tensor(0x7F10_0000_0000), Tensor(0x7F20_0000_0000), Tensor(0x7F30_0000_0000), N, 1.5)
    # the same decisions give the same bytes; other timings with the same winners too
    _tune(arc, reader, tmp_path / "b.karc", {64: 30, 128: 10, 256: 20}, PLAIN, COPY)
    assert _sha(tmp_path / "a.karc") == _sha(tmp_path / "b.karc")
    # another winner: other bytes; tuning the tuned version for one more key keeps the first decision
    _tune(arc, reader, tmp_path / "c.karc", {64: 1, 128: 3, 256: 2}, COPY, PLAIN)
    assert _sha(tmp_path / "c.karc") != _sha(tmp_path / "a.karc")
    big = {**COPY, "args": {**COPY["args"], "x_ptr": t32(N * 4), "out_ptr": t32(N * 4), "n": N * 4}}
    _tune(arc, new, tmp_path / "d.karc", {64: 1, 128: 3, 256: 2}, big, version="2")
    (table,) = {r["kernel"]: r for r in open_location(tmp_path / "d.karc").model.autotune}["wrapped_kernels:at_copy"][
        "tuned"
    ]
    assert sorted((e["key"][0], e["config"]) for e in table["entries"]) == [(N, 1), (N * 4, 0)]


def test_the_runtime_prefers_the_archive_table_then_the_local_cache_then_tunes(device, built, tmp_path, monkeypatch):
    import karchive
    from karchive.format.open import open_location
    from karchive.runtime.tuning.decisions import TuningStore, kernel_digest

    arc, rec = device
    _tune(arc, open_location(built), tmp_path / "t.karc", {64: 3, 128: 1, 256: 2}, COPY)
    x, out = Tensor(0x7F10_0000_0000), Tensor(0x7F20_0000_0000)
    before = len(rec.launches())
    k = karchive.open(str(tmp_path / "t.karc")).kernel("at_copy")
    # the table answers select() and the launch: one launch, nothing timed, no zeroing for a benchmark
    assert k.select(x, out, N).constexprs["BLOCK"] == 128
    k[(32,)](x, out, N)
    assert len(rec.launches()) == before + 1 and rec.launches()[-1].block[0] == 4 * 32  # num_warps 4
    assert out.calls == []
    # a local-cache decision for the same key (here: BLOCK=64) loses to the table ...
    at = k.resolver  # the kernel's AutotuneResolver: where its records and tuning live
    digest = kernel_digest(k.name, [v.key for v in k.variants], [r.to_json() for r in at.records])
    assert digest == kernel_digest(
        k.name, [v.key for v in k.variants], [r for r in open_location(built).model.autotune if r["kernel"] == k.name]
    )
    store = TuningStore(k.name, digest)
    (cfg64,) = [c for c in at._candidates() if c["kwargs"] == {"BLOCK": 64}]
    store.put(at._device_of([x, out, N], {}), [N, "torch.float32", "torch.float32"], cfg64)
    k2 = karchive.open(str(tmp_path / "t.karc")).kernel("at_copy")
    assert k2.select(x, out, N).constexprs["BLOCK"] == 128
    # ... and is what the untuned version (same kernel digest) launches, without timing
    k3 = karchive.open(str(built)).kernel("at_copy")
    assert k3.select(x, out, N).constexprs["BLOCK"] == 64
    # a key the table does not hold falls to the cache, then to tuning on the device
    n = len(rec.launches())
    k2[(8,)](x, out, 1024)
    assert len(rec.launches()) == n + 2 * 11 + 1  # 2 configs built
    # a table for another GPU model is not used
    monkeypatch.setattr("karchive.runtime.tuning.decisions.enabled", lambda: False)
    other = open_location(tmp_path / "t.karc").model.autotune
    for r in other:
        for t in r.get("tuned", []):
            t["device"]["name"] = "Another GPU"
    from karchive.format.autotune import AutotuneRecord
    from karchive.runtime.autotuned import AutotuneResolver
    from karchive.runtime.launch.kernel import Kernel

    k4 = Kernel(
        k.archive,
        k.name,
        k.variants,
        AutotuneResolver(at.base, [AutotuneRecord.from_json(r) for r in other if r["kernel"] == k.name]),
    )
    with pytest.raises(Exception, match="not tuned yet"):
        k4.select(x, out, N)


def test_tuning_tables_in_records_are_checked_when_merged():
    from karchive.errors import SchemaError
    from karchive.format.tuned import lookup, merge_table

    rec = {"kernel": "k", "configs": [{"kwargs": {"B": 1}}, {"kwargs": {"B": 2}}]}
    dev = {"name": "G", "target": "cuda:90"}
    with pytest.raises(SchemaError, match="names config 5"):
        merge_table(rec, dev, {"[1]": 5}, {})
    r = merge_table(rec, dev, {"[1]": 1}, {"by": "x"})
    r = merge_table(r, {"name": "A"}, {"[1]": 0}, {})
    assert [t["device"]["name"] for t in r["tuned"]] == ["A", "G"]
    assert lookup([r], "G", "cuda:90", [1])[1] == {"kwargs": {"B": 2}}
    assert lookup([r], "G", "cuda:80", [1]) is None and lookup([r], "G", "cuda:90", [2]) is None
    r["tuned"][1]["entries"][0]["config"] = 9  # a damaged table names a config the record does not hold
    assert lookup([r], "G", "cuda:90", [1]) is None


# -- a signed sidecar ------------------------------------------------------------------------------------------------
def test_a_signed_sidecar_ships_the_decisions_to_another_machine(device, built, tmp_path, monkeypatch):
    import karchive
    from karchive.format.open import open_location
    from karchive.runtime.tuning.signed import PAYLOAD_TYPE, import_tables, verify_tuning
    from karchive.trust.keys import SigningKey

    arc, rec = device
    key, other = SigningKey.generate(), SigningKey.generate()
    side = tmp_path / "t.karc.tuning.json"
    report = _tune(arc, open_location(built), None, {64: 3, 128: 1, 256: 2}, COPY, sidecar=str(side), signers=[key])
    assert report["sidecar"]["kernels"] == ["wrapped_kernels:at_copy"]
    raw = side.read_bytes()
    assert json.loads(raw)["payloadType"] == PAYLOAD_TYPE
    assert not (tmp_path / "t.karc").exists()  # the archive is not rewritten
    with pytest.raises(TrustError, match="no given key verifies") as err:
        verify_tuning(raw, [other.public])
    assert err.value.reason == "unknown-key"
    env = json.loads(raw)
    doc = json.loads(__import__("base64").b64decode(env["payload"]))
    doc["kernels"][0]["tuned"][0]["entries"][0]["config"] = 2
    env["payload"] = __import__("base64").b64encode(json.dumps(doc).encode()).decode()
    with pytest.raises(TrustError, match="no given key verifies"):
        verify_tuning(json.dumps(env).encode(), [key.public])
    doc = verify_tuning(raw, [key.public])
    # a machine of the same GPU model on another driver files the decisions under its own driver
    from karchive.runtime.device import DeviceInfo

    newer = DeviceInfo.describe_target("cuda:90", name="Fake H100", driver_version=13010)
    elsewhere = tmp_path / "newer-driver"
    assert import_tables(open_location(built).model, doc, elsewhere, local=newer)["written"] == 1
    assert [p.name for p in (elsewhere / "tuning").rglob("*.json")] == ["Fake_H100--13010.json"]
    machine = tmp_path / "fleet-machine"
    assert import_tables(open_location(built).model, doc, machine) == {"written": 1, "skipped": []}
    assert [p.name for p in (machine / "tuning").rglob("*.json")] == ["Fake_H100--13000.json"]
    monkeypatch.setenv("KARCHIVE_CACHE_DIR", str(machine))
    n = len(rec.launches())
    x, out = Tensor(0x7F10_0000_0000), Tensor(0x7F20_0000_0000)
    karchive.open(str(built)).kernel("at_copy")[(32,)](x, out, N)
    assert len(rec.launches()) == n + 1 and rec.launches()[-1].block[0] == 4 * 32  # BLOCK=128, num_warps=4


def test_the_cli_says_where_decisions_go(built, tmp_path, capsys):
    from karchive.cli.main import main

    keys = tmp_path / "keys.json"
    keys.write_bytes(keys_doc(COPY))
    cases = [
        (["--keys", str(keys)], "-o OUT.karc"),
        (["--keys", str(keys), "--sidecar", str(tmp_path / "s.json")], "give --sign KEY"),
        (["--keys", str(keys), "-o", str(tmp_path / "o.karc"), "--reps", "0"], "--reps"),
        (["--from-capture", "-o", str(tmp_path / "o.karc")], "no autotune entry records its call"),
    ]
    for extra, want in cases:
        assert main(["tune", str(built), *extra]) != 0
        err = capsys.readouterr().err
        assert want in err, err
    assert not (tmp_path / "o.karc").exists()


# -- calls recorded by a capture ------------------------------------------------------------------------------------
def test_a_captured_call_is_recorded_as_data_and_tuned_again_from_the_capture(device, built, tmp_path):
    import triton

    from karchive.format.open import open_location
    from karchive.producer.capture._autotune_log import describe_call
    from karchive.runtime.tuning.tuner import Tuner, calls_from_records

    arc, rec = device
    configs = [
        triton.Config({"BLOCK": 64}, num_warps=2),
        triton.Config({"BLOCK": 128}, num_warps=4),
        triton.Config({"BLOCK": 256}, num_warps=8, num_stages=2),
    ]
    x, out = Tensor(0x7F10_0000_0000), Tensor(0x7F20_0000_0000)
    named = {"x_ptr": x, "out_ptr": out, "n": N}
    call = describe_call(named, lambda meta: (triton.cdiv(meta["n"], meta["BLOCK"]),), configs, skip=set())
    assert call == {
        "args": {
            "x_ptr": {"tensor": {"shape": [N], "dtype": "float32", "stride": [1]}},
            "out_ptr": {"tensor": {"shape": [N], "dtype": "float32", "stride": [1]}},
            "n": N,
        },
        "grids": [[64], [32], [16]],
    }
    assert describe_call({"x": object(), "n": float("inf")}, (1,), configs, skip=set()) is None
    # an index tensor is recorded with its values (random ones would index out of bounds at tuning time)
    offsets = IntTensor([0, 7, 12])
    got = describe_call({"cu_seqlens": offsets}, (1,), configs, skip=set())["args"]["cu_seqlens"]
    assert got == {"tensor": {"shape": [3], "dtype": "int32", "stride": [1], "values": [0, 7, 12]}}
    # a heuristic value above the autotuner is computed at run time, not recorded
    assert "IS_VARLEN" not in describe_call({**named, "IS_VARLEN": True}, (1,), configs, skip={"IS_VARLEN"})["args"]
    records = [dict(r) for r in open_location(built).model.autotune]
    (copy,) = [r for r in records if r["kernel"].endswith(":at_copy")]
    copy["entries"] = [{"key": [N, "torch.float32", "torch.float32"], "config": 0, "variant": None, "call": call}]
    calls = calls_from_records(records)
    assert [c.kernel for c in calls] == ["wrapped_kernels:at_copy"]
    # grids are archive data: anything but 1-3 small non-negative integers counts as not recorded
    hostile = [{**copy, "entries": [{**copy["entries"][0], "call": {**call, "grids": [["64"], [-1], [1, 2, 3, 4]]}}]}]
    assert calls_from_records(hostile)[0].grid[0].grids == [None, None, None]
    bench = TableBench({64: 3, 128: 1, 256: 2})
    (d,) = Tuner(arc, bench=bench, factory=Factory()).tune(calls)
    assert d.config == 1 and bench.timed == [64, 128]  # BLOCK=256 was pruned at build: not timed
    assert [launch.grid for launch in rec.launches()] == [(64, 1, 1), (32, 1, 1)]  # the recorded grids


# -- the GPU check's archive and keys file, run here up to the driver ---------------------------------------------
class RankBench:
    """Times from a function of the config (the GPU's real times are the H100 test's business)."""

    def __init__(self, time_of) -> None:
        self.time_of, self.timed = time_of, []

    def __call__(self, config, launch, hooks, sync):
        hooks.before()
        launch()
        hooks.after()
        self.timed.append(dict(config["kwargs"]))
        return [self.time_of(config)]


def test_the_gpu_checks_keys_file_tunes_every_call_against_its_archive(tmp_path, monkeypatch):
    """tests/gpu/build_tune.py's archive and keys file, as the H100 run uses them: every call parses, its key is
    the one the file states, every config is built and timed, and the grids are what the kernels need."""
    import importlib.util

    from runtime_support import fake_cuda, register_sizes

    import karchive
    from karchive.runtime import args, launch_path
    from karchive.runtime.tuning.tuner import Tuner, parse_keys_file

    spec = importlib.util.spec_from_file_location("build_tune", ROOT / "tests" / "gpu" / "build_tune.py")
    bt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bt)
    info = bt.build(tmp_path)
    assert info["variants"] == 14 and bt.missing(tmp_path) == []
    calls = parse_keys_file((tmp_path / "tune-keys.json").read_bytes())
    monkeypatch.setenv("KARCHIVE_CACHE_DIR", str(tmp_path / "kcache"))
    args.set_tensor_type(Tensor)
    try:
        with fake_cuda(monkeypatch, launch_path.PYTHON) as (rec, _backend):
            arc = karchive.open(str(tmp_path / "tune.karc"))
            register_sizes(rec, arc)
            bench = RankBench(lambda c: 1.0 / (1 + sum(v for v in c["kwargs"].values())))  # biggest tile "fastest"
            decisions = Tuner(arc, bench=bench, factory=Factory()).tune(calls)
            grids = [launch.grid for launch in rec.launches()]
    finally:
        args.set_tensor_type(None)
    assert len(decisions) == 7 and all(not d.skipped for d in decisions)
    assert all(None not in d.timings_ms for d in decisions)
    linear = [d for d in decisions if d.kernel.endswith("tq_linear")]
    assert [d.config for d in linear] == [5, 5, 5]  # (128, 256, 64) has the largest sum of meta-parameters
    assert grids[0] == ((2048 // 32) * (2048 // 32), 1, 1)  # TILE_M = TILE_N = 32 for config 0
    assert (16384, 1, 1) in grids  # one program per row


def test_a_tuned_version_can_be_signed_and_a_sidecar_imported_from_the_command_line(device, built, tmp_path, capsys):
    from karchive.cli.main import main
    from karchive.format.open import open_location
    from karchive.trust.dsse import verify_signature
    from karchive.trust.keys import SigningKey, save_keypair
    from karchive.trust.provenance import parse_statement
    from karchive.trust.sidecar import read_sidecar

    arc, _rec = device
    key = SigningKey.generate()
    save_keypair(key, tmp_path / "k.pem", tmp_path / "k.pub")
    report = _tune(arc, open_location(built), tmp_path / "s.karc", {64: 3, 128: 1, 256: 2}, COPY, signers=[key])
    assert report["signed"] == [str(tmp_path / "s.karc") + ".sig.json"]
    env = read_sidecar(tmp_path / "s.karc.sig.json")
    stmt = parse_statement(env.payload)
    assert verify_signature(env, env.signatures[0], key.public)
    assert (stmt.name, stmt.version, stmt.sha256) == ("tunable", "1+tuned-Fake-H100", _sha(tmp_path / "s.karc"))
    ext = stmt.raw["predicate"]["buildDefinition"]["externalParameters"]
    assert ext["command"] == "tune" and ext["parameters"]["device"]["name"] == "Fake H100"
    assert ext["parameters"]["from"] == {"name": "tunable", "version": "1", "sha256": _sha(built)}
    side = tmp_path / "side.json"
    _tune(arc, open_location(built), None, {64: 3, 128: 1, 256: 2}, COPY, sidecar=str(side), signers=[key])
    other = tmp_path / "other-cache"
    # a signed sidecar is refused without a key to verify it, and with the wrong key
    assert main(["tune", str(built), "--import", str(side), "--cache-dir", str(other)]) != 0
    assert "give --key PUB" in capsys.readouterr().err
    wrong = SigningKey.generate()
    save_keypair(wrong, tmp_path / "w.pem", tmp_path / "w.pub")
    assert (
        main(["tune", str(built), "--import", str(side), "--key", str(tmp_path / "w.pub"), "--cache-dir", str(other)])
        != 0
    )
    assert "no given key verifies" in capsys.readouterr().err and not other.exists()
    assert (
        main(
            [
                "tune",
                str(built),
                "--import",
                str(side),
                "--key",
                str(tmp_path / "k.pub"),
                "--cache-dir",
                str(other),
                "--json",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out) == {"written": 1, "skipped": []}
    assert len(list((other / "tuning").rglob("*.json"))) == 1


@pytest.mark.parametrize(
    "tuned,fragment",
    [
        ([{"device": {"name": "Fake H100"}, "entries": [{"key": 5, "config": 0}]}], "key"),
        ([{"device": {"name": "Fake H100"}, "entries": [{"key": "4096", "config": 0}]}], "key"),
        ([{"device": {"name": "Fake H100"}, "entries": [5]}], "entry"),
        ([{"device": 5, "entries": []}], "device name"),
        ({"device": {"name": "Fake H100"}}, "must be a list"),
        ([{"device": {"name": "Fake H100"}, "entries": [{"key": [{"a": 1}], "config": 0}]}], "key"),
    ],
)
def test_a_signed_sidecar_with_odd_entries_is_refused_in_one_line(built, tmp_path, tuned, fragment):
    """Issue 34 item 11: a signed sidecar whose entry key is a number printed a traceback (``list(5)``); a
    string key was split into characters. A signature says who sent the document, not that it is well formed."""
    import subprocess
    import sys

    from karchive.format.open import open_location
    from karchive.runtime.tuning.decisions import archive_kernels
    from karchive.runtime.tuning.signed import FORMAT, sign_tuning
    from karchive.trust.keys import SigningKey, save_keypair

    model = open_location(built).model
    name, digest = archive_kernels(model)[0]
    doc = {
        "format": FORMAT,
        "archive": {"name": model.name, "version": model.version},
        "kernels": [{"kernel": name, "digest": digest, "tuned": tuned}],
    }
    key = SigningKey.generate()
    save_keypair(key, tmp_path / "k.pem", tmp_path / "k.pub")
    side = tmp_path / "side.json"
    side.write_bytes(sign_tuning(doc, [key]).to_bytes())
    root = pathlib.Path(__file__).resolve().parent.parent
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "karchive",
            "tune",
            str(built),
            "--import",
            str(side),
            "--key",
            str(tmp_path / "k.pub"),
            "--cache-dir",
            str(tmp_path / "c"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**__import__("os").environ, "PYTHONPATH": str(root)},
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and fragment in r.stderr, r.stderr
    assert not (tmp_path / "c" / "tuning").exists()  # nothing half-written


def test_the_cli_tunes_a_keys_file_end_to_end_with_the_device_bench(device, built, tmp_path, capsys, monkeypatch):
    """`karchive tune ARCHIVE --keys FILE -o OUT --json` through main(), the device bench included (on the recording
    stand-in it times by wall clock: no torch here), tensors from the stand-in factory instead of torch."""
    from karchive.cli.main import main
    from karchive.format.open import open_location
    from karchive.runtime.tuning import tuner as tune_keys

    arc, rec = device
    keys = tmp_path / "keys.json"
    keys.write_bytes(keys_doc(COPY, PLAIN))
    import importlib.util

    if importlib.util.find_spec("torch") is None:  # a karchive error that says what to install, not an ImportError
        assert main(["tune", str(built), "--keys", str(keys), "-o", str(tmp_path / "cli.karc"), "--json"]) != 0
        assert "torch, which is not installed" in capsys.readouterr().err
    monkeypatch.setattr(tune_keys, "TorchFactory", Factory)
    n = len(rec.launches())
    assert (
        main(
            [
                "tune",
                str(built),
                "--keys",
                str(keys),
                "-o",
                str(tmp_path / "cli.karc"),
                "--reps",
                "4",
                "--warmup",
                "2",
                "--json",
            ]
        )
        == 0
    )
    report = json.loads(capsys.readouterr().out)
    assert report["bench"] == {"warmup": 2, "reps": 4, "l2_flush": False, "timer": "wall"}
    assert len(report["decisions"]) == 2 and report["written"]["version"] == "1+tuned-Fake-H100"
    assert len(rec.launches()) == n + 2 * 6 + 2 * 6  # two keys x two built configs x (2 warm-up + 4 timed)
    at = {r["kernel"]: r for r in open_location(tmp_path / "cli.karc").model.autotune}
    assert at["wrapped_kernels:at_copy"]["tuned"][0]["provenance"]["bench"]["reps"] == 4
