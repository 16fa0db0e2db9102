"""The identity of Inductor-generated kernels (karchive/format/inductor_source.py) and the manifest's
``inductor`` section (inductor_records.py), over sources Inductor generated (tests/data/inductor: torch 2.13's
Triton codegen, run with ``cpu_backend="triton"`` and the device properties of an H100 written in)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from karchive.errors import SchemaError
from karchive.format import inductor_source as ind
from karchive.format.inductor_records import InductorSection, KernelDecision, TemplateChoices
from karchive.format.names import is_kernel_name

DATA = Path(__file__).parent / "data" / "inductor"
SAMPLES = sorted(DATA.glob("*.py"))


def _src(name: str) -> str:
    return (DATA / name).read_text()


def _function(src: str) -> str:
    m = re.search(r"^def (\w+)\(", src, re.MULTILINE)
    assert m
    return m.group(1)


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.stem)
def test_generated_sources_have_an_identity_and_a_valid_kernel_name(path):
    src = path.read_text()
    fn = _function(src)
    ident = ind.identity(src, fn)
    assert ident is not None
    assert ident.function == fn and ident.heuristic in ("pointwise", "reduction", "persistent_reduction")
    assert is_kernel_name(ident.name) and ind.is_inductor_name(ident.name)
    assert ident.name.endswith(":" + fn) and ident.digest.startswith(ident.name[len(ind.NAME_PREFIX) :].split(":")[0])


def test_machine_and_cache_specifics_do_not_change_the_identity():
    src = _src("pointwise_gelu.py")
    fn = _function(src)
    base = ind.identity(src, fn)
    other_machine = (
        src.replace("index=0,", "index=3,")
        .replace("'backend_hash': '5A1BD1D4", "'backend_hash': '0000FFFF")
        .replace("'autotune_local_cache': True", "'autotune_local_cache': False")
        .replace("'force_disable_caches': False", "'force_disable_caches': True")
        .replace("'autotune_remote_cache': None", "'autotune_remote_cache': True")
        .replace("\n", "\r\n")
    )
    with_path = src.replace("import triton\n", "# kernel path: /tmp/torchinductor_alice/ab/cabc.py\nimport triton\n", 1)
    with_other_path = src.replace(
        "import triton\n", "# kernel path: /var/tmp/xyz/torchinductor_bob/ab/cabc.py\nimport triton\n", 1
    )
    assert ind.identity(other_machine, fn) == base
    assert ind.identity(with_path, fn) == ind.identity(with_other_path, fn)


@pytest.mark.parametrize(
    "edit",
    [
        ("tmp3 = tl.full([1], 0.5, tl.float32)", "tmp3 = tl.full([1], 0.25, tl.float32)"),  # the kernel body
        ("size_hints={'x': 1024}", "size_hints={'x': 2048}"),  # what Inductor's autotuner starts from
        ("cc=90", "cc=100"),  # another architecture
        ("multi_processor_count=132", "multi_processor_count=114"),  # Inductor's codegen reads it
        ("'max_autotune': False", "'max_autotune': True"),  # a setting that reaches the source
        ("'*fp32', 'in_ptr1'", "'*bf16', 'in_ptr1'"),  # a dtype
    ],
)
def test_a_changed_source_changes_the_identity(edit):
    src = _src("pointwise_gelu.py")
    assert edit[0] in src
    fn = _function(src)
    assert ind.identity(src.replace(edit[0], edit[1], 1), fn).digest != ind.identity(src, fn).digest


def test_static_and_dynamic_kernels_of_one_function_are_two_kernels():
    a, b = _src("pointwise_gelu.py"), _src("pointwise_gelu_dynamic.py")
    assert _function(a) == _function(b)
    assert ind.identity(a, _function(a)).name != ind.identity(b, _function(b)).name


def test_not_inductor_or_not_defined_is_no_identity():
    src = _src("pointwise_gelu.py")
    assert ind.identity(src, "nope") is None
    assert ind.identity(src, "bad name") is None
    plain = "import triton\n@triton.jit\ndef k(x):\n    pass\n"
    assert not ind.is_inductor_source(plain) and ind.identity(plain, "k") is None
    assert not ind.is_inductor_name("pkg.mod:k") and not ind.is_inductor_name("inductor.kXYZ:k")


def _decision(**kw):
    d = {
        "kernel": ind.archive_name("ab" * 32, "triton_poi_x"),
        "source_digest": "ab" * 32,
        "config": {"kwargs": {"XBLOCK": 256}, "num_warps": 4, "num_stages": 1, "num_ctas": 1, "maxnreg": None},
        "found_by_coordesc": True,
        "graphs": ["0/0 forward"],
        "heuristic": "pointwise",
        "configs_compiled": 4,
    }
    d.update(kw)
    return d


def test_section_round_trips_and_answers_lookups():
    section = {
        "version": 1,
        "kernels": [_decision()],
        "templates": [
            {
                "op": "mm",
                "inputs": "k1",
                "precision": "highest",
                "hint_override": None,
                "timings": {"a": 0.5, "b": None},
            }
        ],
        "modules": {"cd" * 32: 0.125, "ef" * 32: None},
    }
    s = InductorSection.from_json(section)
    assert s.to_json() == section
    assert s.modules == {"cd" * 32: 0.125, "ef" * 32: math.inf}
    assert s.decision("ab" * 32).config["kwargs"] == {"XBLOCK": 256} and s.decision("cd" * 32) is None
    key = ("mm", "k1", "highest", None)
    assert s.selection(key, frozenset("ab"), 0) == {"a": 0.5, "b": math.inf}
    assert s.selection(key, frozenset("a"), 0) == {"a": 0.5}  # version 1: merged, covers a subset
    assert s.selection(("mm", "k2", "highest", None), frozenset("ab"), 0) is None


def test_version_2_answers_each_lookup_of_the_same_choices_in_capture_order():
    """Inductor's table re-benchmarks a key when asked choices it lacks and overwrites the shared choices' times:
    the first selection of {a, b} was answered with a=1 (a wins), the one after the re-benchmark with a=3 (b
    wins). Version 2 replays that; one merged table (version 1) would answer both with the later times."""

    def answer(timings, calls=1):
        return {"op": "mm", "inputs": "k", "precision": "highest", "hint_override": None, "timings": timings} | (
            {"calls": calls} if calls != 1 else {}
        )

    section = {
        "version": 2,
        "kernels": [],
        "templates": [
            answer({"a": 1.0, "b": 2.0}, calls=2),
            answer({"a": 3.0, "b": 2.0, "c": 5.0}),
            answer({"a": 3.0, "b": 2.0}),
        ],
        "modules": {},
    }
    s = InductorSection.from_json(section)
    assert s.to_json() == section
    key, ab = ("mm", "k", "highest", None), frozenset("ab")
    assert [s.selection(key, ab, n) for n in range(4)] == [{"a": 1.0, "b": 2.0}] * 2 + [{"a": 3.0, "b": 2.0}, None]
    assert s.selection(key, frozenset("abc"), 0) == {"a": 3.0, "b": 2.0, "c": 5.0}
    assert s.selection(key, frozenset("a"), 0) is None  # never asked: not guessed from another answer
    assert s.weighed(key) == [2, 3, 2]
    v1 = InductorSection.from_json({**section, "version": 1})
    assert v1.selection(key, ab, 0) == v1.selection(key, ab, 5) == {"a": 3.0, "b": 2.0}  # one merged answer


def test_answers_are_counted_per_graph_where_the_capture_recorded_graphs():
    """A graph another process lowers in another order, or takes from torch's caches, must not shift the answers
    the next graph's lookups get: answers recorded with a graph are counted within it."""

    def answer(graph, a):
        return {"op": "mm", "inputs": "k", "precision": "p", "hint_override": None, "timings": {"a": a}, "graph": graph}

    s = InductorSection.from_json(
        {"version": 2, "templates": [answer("0/0 forward", 1.0), answer("0/0 backward", 2.0)], "modules": {}}
    )
    key, a = ("mm", "k", "p", None), frozenset("a")
    assert s.selection(key, a, 0, "0/0 backward") == {"a": 2.0}  # the forward's lookup never happened here
    assert s.answers(key, a, "0/0 backward")[0] == "0/0 backward"
    assert s.answers(key, a, "1/0 forward") == (None, list(s.templates))  # a graph it never saw: counted overall
    assert s.selection(key, a, 1, None) == {"a": 2.0} and s.selection(key, a, 2, None) is None


@pytest.mark.parametrize(
    "bad",
    [
        {"version": 3},
        {"version": 2, "templates": [{"op": "mm", "inputs": "k", "precision": "x", "timings": {}, "calls": 0}]},
        {"version": 1, "kernels": [_decision(kernel="pkg:k")]},
        {"version": 1, "kernels": [_decision(config={"kwargs": {"X": [1]}})]},
        {"version": 1, "kernels": [_decision(config={"kwargs": {}, "num_warps": True})]},
        {"version": 1, "kernels": [_decision(graphs=[1])]},
        {"version": 1, "templates": [{"op": "mm", "inputs": "k", "precision": "p", "timings": {"a": "fast"}}]},
        {"version": 1, "templates": [{"op": "mm", "inputs": "k", "precision": "p", "timings": {"a": float("nan")}}]},
        {"version": 1, "modules": {"x": "slow"}},
        {"version": 1, "modules": {"x": True}},
    ],
)
def test_section_refuses_malformed_input(bad):
    with pytest.raises(SchemaError):
        InductorSection.from_json(bad)


def test_records_to_json_is_what_from_json_reads():
    d = KernelDecision.from_json(_decision(), "k")
    assert KernelDecision.from_json(d.to_json(), "k") == d
    t = TemplateChoices("mm", "k", "high", {"x": math.inf, "y": 1.0}, 3)
    assert TemplateChoices.from_json(t.to_json(), "t") == t


def test_the_schema_describes_the_section_and_the_provenance():
    jsonschema = pytest.importorskip("jsonschema")
    from karchive.format.schema import load_schema

    schema = load_schema()
    section = {
        "version": 1,
        "kernels": [_decision()],
        "templates": [
            {"op": "mm", "inputs": "k", "precision": "high", "hint_override": None, "timings": {"a": 0.5, "b": None}}
        ],
        "modules": {"ab" * 32: 1.5},
    }
    inductor = {**schema["properties"]["inductor"], "$defs": schema["$defs"]}
    jsonschema.validate(InductorSection.from_json(section).to_json(), inductor)
    answer = {**section["templates"][0], "calls": 3, "graph": "0/0 forward"}
    jsonschema.validate(InductorSection.from_json({**section, "version": 2, "templates": [answer]}).to_json(), inductor)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**section, "version": 2, "templates": [{**answer, "calls": 0}]}, inductor)
    prov = schema["$defs"]["variant"]["properties"]["provenance"]["properties"]["inductor"]
    jsonschema.validate({"source_digest": "ab" * 32, "function": "k"}, prov)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"source_digest": "not hex", "function": "k"}, prov)
