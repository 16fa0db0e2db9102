"""A capture never loses its window to a value JSON cannot hold (issue 23, item 1).

Triton records ``float('inf')`` as the timing of a config that cannot run; libraries hand numpy scalars,
dtypes and NaN to autotune keys and heuristics. Real Triton compiles on the fake GPU (capture_fakes.py)
where a launch is needed; the encoding itself is tested without Triton.
"""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
from support import needs_triton

from karchive.core.jsonio import canonical_json
from karchive.format.autotune import choose_config, json_number, json_safe, key_for_call, normalize_value
from karchive.format.heuristics import parse_record, resolve


def test_non_finite_numbers_have_one_json_spelling():
    assert json_number(float("inf")) == {"float": "inf"}
    assert json_number(-math.inf) == {"float": "-inf"}
    assert json_number(float("nan")) == {"float": "nan"}
    assert json_number(0.25) == 0.25 and json_number(None) is None and json_number("x") is None
    np = pytest.importorskip("numpy")
    assert normalize_value(np.float64("inf")) == {"float": "inf"}
    assert normalize_value(np.int64(7)) == 7 and type(normalize_value(np.int64(7))) is int
    assert normalize_value(np.bool_(True)) is True  # not "True", not 1
    assert normalize_value(np.float32(0.5)) == 0.5
    assert normalize_value(np.dtype("float16")) == "float16"


def test_json_safe_makes_any_record_storable():
    class Weird:
        def __str__(self) -> str:
            raise RuntimeError("no str")

    np = pytest.importorskip("numpy")
    record = {"kernel": "k", 3: (np.int32(2), float("nan")), "x": [Weird(), {"y": -math.inf}], "d": np.dtype("int8")}
    safe = json_safe(record)
    assert safe == {"kernel": "k", "3": [2, {"float": "nan"}], "x": ["<Weird>", {"y": {"float": "-inf"}}], "d": "int8"}
    canonical_json(safe)


def test_non_finite_keys_match_themselves_only():
    records = [
        {
            "kernel": "k",
            "key_names": ["eps"],
            "dtype_args": [],
            "configs": [{"kwargs": {"B": 1}}],
            "entries": [{"key": [{"float": "inf"}], "config": 0}, {"key": [1.0], "config": 0}],
        }
    ]
    assert key_for_call(records[0], {"eps": float("inf")}) == [{"float": "inf"}]
    assert choose_config(records, [float("inf")])["key"] == [{"float": "inf"}]
    assert choose_config(records, [float("-inf")]) is None  # never the nearest number
    assert choose_config(records, [2.0])["key"] == [1.0]


def test_heuristics_inputs_may_be_non_finite():
    rec = parse_record(
        {
            "kernel": "k",
            "names": ["CLAMP"],
            "cases": {
                "CLAMP": [{"inputs": {"hi": {"float": "inf"}}, "value": False}, {"inputs": {"hi": 6.0}, "value": True}]
            },
        },
        "r",
    )
    assert resolve(rec, {"hi": math.inf}) == ({"CLAMP": False}, {})
    assert resolve(rec, {"hi": 6.0}) == ({"CLAMP": True}, {})
    values, unresolved = resolve(rec, {"hi": -math.inf})
    assert values == {} and "hi=float('inf')" in unresolved["CLAMP"]
    assert rec.call_key({"hi": math.inf}) != rec.call_key({"hi": -math.inf})
    from karchive.errors import SchemaError

    with pytest.raises(SchemaError, match="float"):
        parse_record(
            {"kernel": "k", "names": ["C"], "cases": {"C": [{"inputs": {"hi": {"float": "big"}}, "value": 1}]}}, "r"
        )


def test_the_schema_takes_the_encoding():
    jsonschema = pytest.importorskip("jsonschema")
    from karchive.format.schema import load_schema

    schema = load_schema()
    at = jsonschema.Draft202012Validator({"$defs": schema["$defs"], "$ref": "#/$defs/autotune"})
    good = {
        "kernel": "k",
        "key_names": ["n"],
        "configs": [{"kwargs": {"B": 1}}],
        "entries": [{"key": [{"float": "nan"}, 3], "config": 0, "timings_ms": [{"float": "inf"}, 0.5, None]}],
    }
    assert list(at.iter_errors(good)) == []
    bad = json.loads(json.dumps(good).replace('"inf"', '"huge"'))
    assert list(at.iter_errors(bad))


# --- real captures on the fake GPU ---------------------------------------------------------------------
@needs_triton
def test_a_config_that_cannot_run_is_stored_as_infinity(triton_cache_dir, tmp_path):
    from capture_fakes import fake_gpu, fresh, ptr, tuned_copy

    import karchive
    from karchive.cli.inspect_cmds import schema_problems
    from karchive.format.open import open_location

    fresh(tuned_copy)
    # Triton's own marker for a config that ran out of resources is float('inf'); NaN for a broken timer.
    with fake_gpu(timings=[math.inf, 1.0, math.nan]), karchive.capture("inf", version="1") as cap:
        tuned_copy[(1,)](ptr(), ptr(), 4096)
    (record,) = cap.autotune.to_json()
    (entry,) = record["entries"]
    assert entry["timings_ms"] == [{"float": "inf"}, 1.0, {"float": "nan"}] and entry["config"] == 1
    stats = cap.save(tmp_path / "inf.karc")
    assert stats.archive_bytes > 0
    reader = open_location(tmp_path / "inf.karc")
    assert schema_problems(reader.manifest) == [] and reader.verify() == []
    assert reader.manifest["autotune"][0]["entries"][0]["timings_ms"][0] == {"float": "inf"}


class _Unstorable:
    """A variant whose manifest entry holds a value canonical JSON refuses (what a foreign value would do)."""

    def __init__(self, inner):
        self._inner = inner

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def to_json(self):
        return {**self._inner.to_json(), "odd": float("inf")}


@needs_triton
def test_one_kernel_that_cannot_be_stored_leaves_the_rest_saved(triton_cache_dir, fake_gpu_driver, tmp_path):
    from capture_fakes import fresh, heur_copy, ptr, scale_rows

    import karchive
    from karchive.format.open import open_location

    fresh(scale_rows, heur_copy)
    with karchive.capture("mixed", version="1") as cap:
        scale_rows[(1,)](ptr(), ptr(), 64, 2.0, BLOCK=64)
        heur_copy[(1,)](ptr(), ptr(), 1024, BLOCK=128)
    (bad_key,) = [k for k, v in cap.variants.items() if v.kernel.endswith(":scale_rows")]
    cap.variants[bad_key] = dataclasses.replace(
        cap.variants[bad_key], variant=_Unstorable(cap.variants[bad_key].variant)
    )
    cap.save(tmp_path / "mixed.karc")
    reader = open_location(tmp_path / "mixed.karc")
    assert {v["kernel"].rsplit(":", 1)[-1] for v in reader.manifest["variants"]} == {"heur_copy"}
    (item,) = [i for i in cap.left_out if i.kernel.endswith(":scale_rows")]
    assert item.category == "failed" and "cannot be stored" in item.reason and item.triton_hash
    assert any(i["kernel"].endswith(":scale_rows") for i in cap.summary()["left_out"])


@needs_triton
def test_nothing_but_karchive_errors_escape_save(triton_cache_dir, fake_gpu_driver, tmp_path):
    from capture_fakes import fresh, ptr, scale_rows

    import karchive
    from karchive.errors import KarchiveError

    fresh(scale_rows)
    with karchive.capture("w", version="1") as cap:
        scale_rows[(1,)](ptr(), ptr(), 64, 2.0, BLOCK=64)
    cap.autotune.records[("x",)] = type(
        "R", (), {"to_json": lambda self: {"kernel": "x", "deep": _nest(80)}, "kernel": "x", "key_names": []}
    )()
    cap.save(tmp_path / "w.karc")  # the record nested too deeply is left out with a warning, the kernel saved
    assert any("x: the autotune record is not stored" in w for w in cap.warnings)
    (tmp_path / "file").write_text("")
    with pytest.raises(KarchiveError):
        cap.save(tmp_path / "file" / "below-a-file.karc")


def _nest(n: int):
    out: list = []
    for _ in range(n):
        out = [out]
    return out
