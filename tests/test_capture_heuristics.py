"""@triton.heuristics: captured per launch (which values for which argument values), chosen at load time.

Capture tests compile for a forced cuda:90 target (fake driver, tests/capture_fakes.py); the runtime side
selects variants for a described H100 (nothing is launched: no GPU here). The record format and its parser
(an archive is untrusted input) are tested without Triton.
"""

from __future__ import annotations

import importlib.util
import json
import warnings

import pytest
from support import needs_triton

from karchive.errors import NoMatchingVariantError, SchemaError
from karchive.format.heuristics import parse_record, records_for, resolve

A = 0x7F0000000000  # 16-byte aligned device addresses (selection only)


class Dtype:
    """A framework dtype: ``.name`` as NumPy spells it (what the runtime checks), ``str()`` as Triton's
    MockTensor spells it (what capture recorded from ``str(x.dtype)`` on the fake GPU)."""

    NAMES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}

    def __init__(self, triton_name: str) -> None:
        self.name, self._str = self.NAMES[triton_name], triton_name

    def __str__(self) -> str:
        return self._str


class DevBuf:
    """A device buffer as the runtime sees one (``data_ptr()``, ``dtype``, device); selection only."""

    def __init__(self, addr: int, dtype: str = "fp32", shape: tuple = (1,)) -> None:
        self.addr, self.dtype, self.shape = addr, Dtype(dtype), list(shape)

    def stride(self) -> tuple:
        return tuple(1 for _ in self.shape)

    def data_ptr(self) -> int:
        return self.addr

    def get_device(self) -> int:
        return 0


@pytest.fixture
def h100():
    from karchive.runtime.device import DeviceInfo

    return DeviceInfo.describe_target("cuda:90", shared_optin=227 * 1024)


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    """One capture of every heuristics kernel in capture_fakes.py, saved and reopened."""
    from support import have_triton

    if not have_triton():
        pytest.skip("needs triton")
    import os

    import triton.language as tl
    from capture_fakes import fake_gpu, fresh, heur_bias, heur_copy, heur_opaque, ptr, tuned_even_copy

    import karchive

    base = tmp_path_factory.mktemp("heur")
    old = os.environ.get("TRITON_CACHE_DIR")
    os.environ["TRITON_CACHE_DIR"] = str(base / "cache")
    try:
        fresh(heur_bias, heur_copy, heur_opaque, tuned_even_copy)
        with fake_gpu(timings=[3.0, 1.0, 2.0]), warnings.catch_warnings():
            warnings.simplefilter("error")
            with karchive.capture("heur", version="1", strict=True) as cap:
                heur_copy[(1,)](ptr(), ptr(), 1024, BLOCK=128)
                heur_copy[(1,)](ptr(), ptr(), 1000, BLOCK=128)
                heur_bias[(1,)](ptr(), None, ptr(), 1000, BLOCK=128)
                heur_bias[(1,)](ptr(), ptr(), ptr(), 8192, BLOCK=128)
                heur_bias[(1,)](ptr(tl.float16), ptr(tl.float16), ptr(tl.float16), 8192, BLOCK=128)
                heur_opaque[(1,)](ptr(), ptr(), 1001, BLOCK=128)
                tuned_even_copy[(1,)](ptr(), ptr(), 4096)  # scripted timings: config 1 (BLOCK=128) wins
                tuned_even_copy[(1,)](ptr(), ptr(), 1000)  # config 0 (BLOCK=64) wins
    finally:
        if old is None:
            os.environ.pop("TRITON_CACHE_DIR", None)
        else:
            os.environ["TRITON_CACHE_DIR"] = old
    path = base / "heur.karc"
    cap.save(path)
    return cap, path


def _case(record: dict, name: str) -> list[tuple[dict, object]]:
    return [(c["inputs"], c["value"]) for c in record["cases"][name]]


@needs_triton
def test_each_launch_records_which_values_came_from_which_arguments(captured):
    cap, path = captured
    records = {r["kernel"].rpartition(":")[2]: r for r in cap.heuristics.to_json()}  # module:qualname
    assert set(records) == {"heur_bias", "heur_copy", "heur_opaque", "tuned_even_copy"}
    assert records["heur_copy"]["names"] == ["EVEN"]
    assert _case(records["heur_copy"], "EVEN") == [
        ({"BLOCK": 128, "n": 1024}, True),
        ({"BLOCK": 128, "n": 1000}, False),
    ]
    bias = records["heur_bias"]
    assert bias["names"] == ["HAS_BIAS", "WIDE", "num_warps"]
    assert _case(bias, "HAS_BIAS") == [({"bias_ptr": None}, False), ({"bias_ptr": {"object": {}}}, True)]
    # Short-circuit: an fp16 x never reads n, so the fp16 case holds for every n.
    assert _case(bias, "WIDE") == [
        ({"n": 1000, "x_ptr": {"object": {"dtype": "fp32"}}}, False),
        ({"n": 8192, "x_ptr": {"object": {"dtype": "fp32"}}}, True),
        ({"x_ptr": {"object": {"dtype": "fp16"}}}, False),
    ]
    assert _case(bias, "num_warps") == [({"n": 1000}, 4), ({"n": 8192}, 8)]
    # isinstance() cannot be replayed from probes: the call is recorded concretely, with its device.
    (case,) = records["heur_opaque"]["cases"]["ODD"]
    assert case["value"] is True and case["device"] == {"target": "cuda:90"}
    assert case["inputs"] == {
        "BLOCK": 128,
        "n": 1001,
        "out_ptr": {"object": {"dtype": "fp32", "shape": [1], "stride()": [1]}},
        "x_ptr": {"object": {"dtype": "fp32", "shape": [1], "stride()": [1]}},
    }
    # Under the autotuner the heuristic sees each benchmarked config's BLOCK.
    assert sorted(_case(records["tuned_even_copy"], "EVEN"), key=str) == sorted(
        [({"BLOCK": b, "n": n}, n % b == 0) for n in (4096, 1000) for b in (64, 128)], key=str
    )

    import karchive
    from karchive.cli.inspect_cmds import schema_problems

    arc = karchive.open(path)
    assert schema_problems(arc.reader.manifest) == []
    assert arc.reader.manifest["heuristics"] == cap.heuristics.to_json()


@needs_triton
def test_inspect_shows_the_heuristics_records(captured, capsys):
    from karchive.cli.main import main

    _, path = captured
    assert main(["inspect", str(path)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("heuristics records:"))
    assert "computing " in line and "EVEN" in line and "heur_copy" in line and "heur_bias" in line
    assert main(["inspect", str(path), "--json"]) == 0
    records = json.loads(capsys.readouterr().out)["heuristics"]
    assert {r["kernel"] for r in records} >= {"capture_fakes:heur_copy", "capture_fakes:heur_bias"}
    assert main(["inspect", str(path), "--summary", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["heuristics"] == len(records)


@needs_triton
def test_the_runtime_picks_the_recorded_values_without_the_caller_restating_them(captured, h100):
    import karchive
    from karchive.runtime.autotuned import HeuristicsResolver

    _, path = captured
    k = karchive.open(path).kernel("heur_copy")
    assert isinstance(k.resolver, HeuristicsResolver)
    assert k.select(A, A + 4096, 1024, BLOCK=128, device=h100).constexprs == {"BLOCK": 128, "EVEN": True}
    assert k.select(A, A + 4096, 1000, BLOCK=128, device=h100).constexprs == {"BLOCK": 128, "EVEN": False}
    with pytest.raises(
        NoMatchingVariantError,
        match=r"(?s)heuristics value\(s\) \['EVEN'\].*never recorded.*"
        r"n=1024.*cannot take them from the caller",
    ) as err:
        k.select(A, A + 4096, 2048, BLOCK=128, device=h100)
    assert "explicitly" not in str(err.value)
    # Issue 35.2: Triton's Heuristics.run computes EVEN from every call and replaces a value passed; so does
    # karchive: EVEN=True never picks the unmasked variant for n=1000, nor makes an unrecorded call launch.
    assert k.select(A, A + 4096, 1000, BLOCK=128, EVEN=True, device=h100).constexprs == {"BLOCK": 128, "EVEN": False}
    with pytest.raises(NoMatchingVariantError, match="never recorded"):
        k.select(A, A + 4096, 2048, BLOCK=128, EVEN=True, device=h100)
    # BLOCK left out: Triton's lambda fails on args["BLOCK"]; the error names BLOCK, not EVEN.
    with pytest.raises(
        NoMatchingVariantError, match=r"missing argument BLOCK: @triton.heuristics computes EVEN"
    ) as err:
        k.select(A, A + 4096, 1000, EVEN=True, device=h100)
    assert err.value.param == "BLOCK"


@needs_triton
def test_tensor_probes_none_checks_and_option_values(captured, h100):
    import karchive

    _, path = captured
    k = karchive.open(path).kernel("heur_bias")
    small = k.select(DevBuf(A), None, DevBuf(A + 8192), 1000, BLOCK=128, device=h100)
    assert small.constexprs == {"bias_ptr": None, "BLOCK": 128, "HAS_BIAS": False, "WIDE": False}
    assert small.options["num_warps"] == 4
    big = k.select(DevBuf(A), DevBuf(A + 4096), DevBuf(A + 8192), 8192, BLOCK=128, device=h100)
    assert (big.constexprs["HAS_BIAS"], big.constexprs["WIDE"], big.options["num_warps"]) == (True, True, 8)
    half = k.select(*(DevBuf(A + i * 4096, "fp16") for i in range(3)), 8192, BLOCK=128, device=h100)
    assert (half.constexprs["WIDE"], half.options["num_warps"]) == (False, 8)
    with pytest.raises(NoMatchingVariantError, match=r"WIDE.*no recorded case"):
        k.select(DevBuf(A, "bf16"), None, DevBuf(A + 8192), 1000, BLOCK=128, device=h100)


@needs_triton
def test_heuristics_that_cannot_be_replayed_replay_the_captured_calls(captured, h100):
    """Issue 23.4: a heuristic that is not a pure function of what probes see (isinstance here; a device query
    or tuning table in an operator library) replays the very calls captured, and refuses others by name."""
    import karchive
    from karchive.runtime.device import DeviceInfo

    _, path = captured
    k = karchive.open(path).kernel("heur_opaque")
    assert k.select(DevBuf(A), DevBuf(A + 4096), 1001, BLOCK=128, device=h100).constexprs["ODD"] is True
    with pytest.raises(NoMatchingVariantError, match=r"ODD.*differs in n \(recorded 1001, this call 1003\)"):
        k.select(DevBuf(A), DevBuf(A + 4096), 1003, BLOCK=128, device=h100)
    with pytest.raises(
        NoMatchingVariantError,
        match=r"differs in x_ptr \(recorded <object dtype='fp32', shape=\[1\]"
        r", stride\(\)=\[1\]>, this call <object dtype='fp16'",
    ):
        k.select(DevBuf(A, "fp16"), DevBuf(A + 4096), 1001, BLOCK=128, device=h100)
    a100 = DeviceInfo.describe_target("cuda:80", shared_optin=163 * 1024)
    with pytest.raises(NoMatchingVariantError, match=r"differs in the device \(recorded cuda:90\)"):
        k.select(DevBuf(A), DevBuf(A + 4096), 1001, BLOCK=128, device=a100)
    with pytest.raises(NoMatchingVariantError, match="ODD"):  # a value passed is replaced by Triton: no way around
        k.select(A, A + 4096, 1001, BLOCK=128, ODD=True, device=h100)


@needs_triton
def test_autotune_and_heuristics_together(captured, h100):
    import karchive
    from karchive.runtime.autotuned import AutotuneResolver

    cap, path = captured
    k = karchive.open(path).kernel("tuned_even_copy")
    assert isinstance(k.resolver, AutotuneResolver) and k.resolver.heuristics is not None
    (record,) = [r for r in cap.autotune.to_json() if r["kernel"] == "capture_fakes:tuned_even_copy"]
    by_key = {e["key"][0]: e["variant"] for e in record["entries"]}

    def call(n: int):
        return k.select(DevBuf(A), DevBuf(A + 65536), n, device=h100)

    assert call(4096).key == by_key[4096] and call(4096).constexprs == {"BLOCK": 128, "EVEN": True}
    assert call(1000).key == by_key[1000] and call(1000).constexprs == {"BLOCK": 64, "EVEN": False}
    # An unseen key takes the nearest recorded config (BLOCK=128 for 3000), but EVEN for n=3000 was never
    # computed: refused, and saying EVEN=False changes nothing (Triton would compute it all the same).
    with pytest.raises(NoMatchingVariantError, match="EVEN"):
        call(3000)
    with pytest.raises(NoMatchingVariantError, match="EVEN"):
        k.select(DevBuf(A), DevBuf(A + 65536), 3000, EVEN=False, device=h100)
    assert k.select(DevBuf(A), DevBuf(A + 65536), 4096, EVEN=False, device=h100).constexprs == {
        "BLOCK": 128,
        "EVEN": True,
    }


# --- the record format, without Triton ---------------------------------------------------------------
RECORD = {
    "kernel": "k",
    "names": ["EVEN", "num_warps"],
    "cases": {
        "EVEN": [
            {"inputs": {"n": 1024, "BLOCK": 128}, "value": True},
            {
                "inputs": {
                    "x": {"object": {"dtype": "torch.float16", "shape": [4, 8], "stride(0)": 8}},
                    "flag": {"absent": True},
                },
                "value": False,
            },
        ],
        "num_warps": [{"inputs": {"EVEN": True}, "value": 8}, {"inputs": {"EVEN": False}, "value": 4}],
    },
}


class T:
    def __init__(self, dtype: str, shape: tuple) -> None:
        self.dtype, self.shape = dtype, shape

    def stride(self, i: int) -> int:
        return self.shape[1] if i == 0 else 1


def test_resolve_matches_inputs_in_order_and_later_names_see_earlier_values():
    rec = parse_record(RECORD, "r")
    assert resolve(rec, {"n": 1024, "BLOCK": 128}) == ({"EVEN": True, "num_warps": 8}, {})
    assert resolve(rec, {"x": T("torch.float16", (4, 8))}) == ({"EVEN": False, "num_warps": 4}, {})
    values, unresolved = resolve(rec, {"x": T("torch.float16", (4, 8)), "flag": 1})  # flag passed: not absent
    assert values == {} and set(unresolved) == {"EVEN", "num_warps"}
    assert resolve(rec, {"n": True, "BLOCK": 128})[0] == {}  # True is not 1024, and True is never 1
    assert resolve(rec, {"n": 5}, skip={"EVEN"})[0] == {}  # EVEN given by the caller but absent from named
    assert resolve(rec, {"n": 5, "EVEN": False}, skip={"EVEN"})[0] == {"num_warps": 4}
    assert rec.call_key({"n": 1024, "BLOCK": 128}) != rec.call_key({"n": 1000, "BLOCK": 128})


@pytest.mark.parametrize(
    "bad, why",
    [
        ({**RECORD, "kernel": ""}, "kernel"),
        ({**RECORD, "names": ["EVEN", "EVEN"]}, "distinct"),
        ({**RECORD, "cases": {"OTHER": []}}, "keyed by the record's names"),
        ({**RECORD, "cases": {"EVEN": [{"inputs": {"x": {"object": {"__class__": "x"}}}, "value": 1}]}}, "probe"),
        (
            {**RECORD, "cases": {"EVEN": [{"inputs": {"x": {"object": {"numel(); import os": 1}}}, "value": 1}]}},
            "probe",
        ),
        ({**RECORD, "cases": {"EVEN": [{"inputs": {"x": {"absent": False}}, "value": 1}]}}, "absent"),
        (
            {**RECORD, "cases": {"EVEN": [{"inputs": {"x": {"absent": True, "opaque": "y"}}, "value": 1}]}},
            "exactly one",
        ),
        ({**RECORD, "cases": {"EVEN": [{"inputs": {}, "value": {"a": 1}}]}}, "scalar"),
        ({**RECORD, "cases": {"EVEN": [{"inputs": {"x": [[1]]}, "value": 1}]}}, "scalar"),
        ({**RECORD, "cases": {"EVEN": [{"inputs": {}}]}}, "value"),
        ({**RECORD, "cases": {"EVEN": [{"value": 1}] * 5000}}, "at most"),
    ],
)
def test_hostile_records_are_refused(bad, why):
    with pytest.raises(SchemaError, match=why):
        parse_record(bad, "heuristics[0]")


def test_records_for_reads_one_kernel_and_refuses_a_malformed_list():
    assert [r.kernel for r in records_for({"heuristics": [RECORD, {**RECORD, "kernel": "other"}]}, "k")] == ["k"]
    assert records_for({}, "k") == []
    with pytest.raises(SchemaError):
        records_for({"heuristics": {"k": RECORD}}, "k")


def test_tracing_notes_reads_absences_and_probes():
    from karchive.producer.capture._heuristics_log import trace_heuristic

    x = T("torch.float16", (4, 8))
    value, inputs, ok = trace_heuristic(
        lambda a: a.get("bias") is None and a["x"].shape[1] * a["x"].stride(0) > 16, {"x": x, "n": 3}
    )
    assert ok and value is True
    assert inputs == {"bias": {"absent": True}, "x": {"object": {"shape": [4, 8], "stride(0)": 8}}}
    value, inputs, ok = trace_heuristic(lambda a: len(a) > 1, {"x": x, "n": 3})  # looks at everything
    assert ok and inputs == {"n": 3, "x": {"opaque": "iterates over the arguments"}}
    value, inputs, ok = trace_heuristic(lambda a: a["x"] + 1, {"x": 1.5}, expected=2.5)
    assert ok and inputs == {"x": 1.5}
    calls = iter([1, 2])
    value, inputs, ok = trace_heuristic(lambda a: next(calls) + a["n"], {"n": 0}, expected=5)
    assert not ok


def test_the_schema_agrees_with_the_parser():
    jsonschema = pytest.importorskip("jsonschema")
    from karchive.format.schema import load_schema

    schema = load_schema()
    validator = jsonschema.Draft202012Validator({"$defs": schema["$defs"], "$ref": "#/$defs/heuristics"})
    assert list(validator.iter_errors(RECORD)) == []
    for bad in (
        {**RECORD, "names": ["EVEN", "EVEN"]},
        {**RECORD, "cases": {"EVEN": [{"inputs": {"x": {"object": {"__class__": "x"}}}, "value": 1}]}},
        {**RECORD, "cases": {"EVEN": [{"inputs": {"x": {"absent": False}}, "value": 1}]}},
        {**RECORD, "cases": {"EVEN": [{"inputs": {}}]}},
    ):
        assert list(validator.iter_errors(bad)), bad


@needs_triton
def test_a_hostile_heuristics_record_is_refused_when_its_kernel_is_opened(add_variants, tmp_path):
    import karchive
    from karchive.cli.inspect_cmds import schema_problems
    from karchive.producer.build.pack import ArchiveBuilder

    bad = {
        "kernel": "kernels:add_kernel",
        "names": ["X"],
        "cases": {"X": [{"inputs": {"x_ptr": {"object": {"__class__.__init__": 1}}}, "value": 1}]},
    }
    builder = ArchiveBuilder("bad", "1", heuristics=[bad])
    builder.extend(add_variants)
    builder.write(tmp_path / "bad.karc")
    arc = karchive.open(tmp_path / "bad.karc")
    with pytest.raises(SchemaError, match="not a probe karchive replays"):
        arc.kernel("add_kernel")
    if importlib.util.find_spec("jsonschema"):
        assert any("heuristics" in p for p in schema_problems(arc.reader.manifest))


def test_a_heuristic_that_is_not_a_pure_function_is_recorded_per_call():
    """A tuning table or device query (re-evaluating gives another value than Triton's): each captured call is
    recorded with its concrete arguments, replays, and a call that matches none is refused naming the input."""
    import types

    from karchive.producer.capture._heuristics_log import HeuristicsLog

    state = {"warps": 8}
    jit = types.SimpleNamespace(__name__="table_kernel", params=[], cache_key="k")
    heur = types.SimpleNamespace(
        fn=jit, arg_names=["x", "n", "TILE_N"], values={"num_warps": lambda args: state["warps"]}
    )
    x = T("torch.float16", (4, 8))
    log = HeuristicsLog()
    log.observe(heur, (x, 1024), {"TILE_N": 64, "grid": (4,)}, {"num_warps": 4})  # the table said 4 then
    log.observe(heur, (x, 1024), {"TILE_N": 64, "grid": (4,)}, {"num_warps": 4})  # the same call: one case
    (record,) = log.to_json()
    (case,) = record["cases"]["num_warps"]
    assert case["value"] == 4 and "grid" not in case["inputs"]  # only kernel arguments
    # T has no stride() without an index: the object is described by the probes it has
    assert case["inputs"] == {"TILE_N": 64, "n": 1024, "x": {"object": {"dtype": "torch.float16", "shape": [4, 8]}}}
    rec = parse_record(json.loads(json.dumps(record)), "r")
    assert resolve(rec, {"x": x, "n": 1024, "TILE_N": 64}) == ({"num_warps": 4}, {})
    values, why = resolve(rec, {"x": x, "n": 1024, "TILE_N": 128})
    assert values == {} and "differs in TILE_N (recorded 64, this call 128)" in why["num_warps"]


def test_a_concrete_case_never_stands_for_objects_it_cannot_describe():
    from karchive.producer.capture._heuristics_log import concrete_inputs

    class Cfg:  # neither a tensor nor a pointer: nothing tells one instance from another
        pass

    class Ptr:
        def data_ptr(self) -> int:
            return 0

    got = concrete_inputs({"cfg": Cfg(), "p": Ptr(), "n": 3, "grid": (1,)}, ["cfg", "p", "n"], "X")
    assert got == {"cfg": {"opaque": "a Cfg argument that no probe describes"}, "n": 3, "p": {"object": {}}}
