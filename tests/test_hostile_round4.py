"""Issue 34, round 4 of the adversarial pass: each test reproduces one attack that once got through.

As in round 3, archives are forged with every digest recomputed (:mod:`hostile_factory` takes an honest
archive apart and puts it back together), so the only thing a reader can refuse them for is the rule
under test.
"""

from __future__ import annotations

import ast
import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest
from format1_writer import Format1Writer
from hostile_factory import put_together, take_apart, v2_variant

from karchive.errors import SchemaError
from karchive.format.open import open_location
from karchive.format.writer import ArchiveWriter, canonical_json, sha256_hex

ROOT = Path(__file__).resolve().parent.parent


def _cli(*args: object, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    full = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", "karchive", *map(str, args)], env=full, capture_output=True, text=True, timeout=timeout
    )


# --------------------------------------------------------------------------------------------------
# 1. Archive text executed as Python: parameter names became source code (custom_op's exec)
# --------------------------------------------------------------------------------------------------

PAYLOAD = "x=__import__('os').system('touch PWNED')"
HOSTILE_PARAMS = [PAYLOAD, "x):\n    import os#", "class", "None", "x y", "", "x\n", "\u00e9", "x-y", "a" * 300, "1x"]


def _manifest(entry: dict) -> dict:
    return {
        "format": "karchive",
        "format_version": "1.0",
        "abi_version": 1,
        "name": "hostile",
        "version": "1",
        "produced_by": {"karchive": "test"},
        "created": None,
        "path_sentinel": "@KARCHIVE_ROOT@",
        "sources": [],
        "variants": [entry],
    }


def _format1_with(edit) -> bytes:
    entry, launch, irm = v2_variant("k", 0, source=None)
    edit(entry)
    w = Format1Writer()
    w.add_group(launch + irm)
    return w.to_bytes(_manifest(entry))


def _format2_with(edit_param, edit_abi=None) -> bytes:
    """An honest format-2 archive whose shards (the whole one and the per-target one) then say otherwise."""
    entry, launch, irm = v2_variant("k", 0, source=None)
    w = ArchiveWriter()
    w.add_group(launch + irm)
    manifest = {**_manifest(entry), "format_version": "2.0"}
    parts = take_apart(w.to_bytes(manifest))
    for doc in parts.shards.values():
        edit_param(doc["parts"]["param"])
        if edit_abi is not None:
            edit_abi(doc["parts"]["abi_params"])
    for row in parts.header["shards"]:  # put_together fixes the whole shards' rows; the per-target ones here
        for split in row.get("split", []):
            raw = canonical_json(parts.shards[split["path"]])
            split["size"], split["sha256"] = len(raw), sha256_hex(raw)
    return put_together(parts)


def _read_everything(path: Path) -> None:
    reader = open_location(str(path))
    model = reader.model
    for k in model.kernels():
        model.variants_of(k)
    for t in model.targets():
        for k in model.kernels():
            model.variants_of(k, t)


def _rename_param(params: list, name: str, i: int = 0) -> None:
    params[i]["name"] = name


@pytest.mark.parametrize("name", HOSTILE_PARAMS)
@pytest.mark.parametrize("where", ["param", "abi_param"])
@pytest.mark.parametrize("fmt", ["format1", "format2"])
def test_hostile_parameter_name_is_refused_when_read(tmp_path, name, where, fmt):
    """A parameter name carrying a quoted payload passed ``verify`` and ran when ``custom_op`` made the op's
    function from source text. Every name the runtime may turn into code or attributes is now an
    identifier (not a keyword), checked by the model when the archive is read."""
    if fmt == "format1":

        def edit(entry):
            _rename_param(entry["params"] if where == "param" else entry["abi"]["params"], name)

        data = _format1_with(edit)
    elif where == "param":
        data = _format2_with(lambda params: _rename_param(params, name))
    else:
        data = _format2_with(lambda params: None, lambda lists: _rename_param(lists[0], name))
    archive = tmp_path / "hostile.karc"
    archive.write_bytes(data)
    with pytest.raises(SchemaError) as err:
        _read_everything(archive)
    assert "is not a parameter name" in str(err.value) and err.value.where


@pytest.mark.parametrize("fmt", ["format1", "format2"])
def test_duplicate_parameter_names_are_refused_when_read(tmp_path, fmt):
    """Two parameters of one name: no Python signature has them (a bridge could not declare the op)."""
    if fmt == "format1":
        data = _format1_with(lambda e: _rename_param(e["params"], "x", 1))
    else:
        data = _format2_with(lambda params: _rename_param(params, "x", 1))
    archive = tmp_path / "dup.karc"
    archive.write_bytes(data)
    with pytest.raises(SchemaError, match="twice"):
        _read_everything(archive)


def test_hostile_parameter_name_fails_cli_verify(tmp_path):
    """``karchive verify`` reports the name (exit 1, the model's words), for both formats."""
    for fmt, data in (
        ("1", _format1_with(lambda e: _rename_param(e["params"], PAYLOAD))),
        ("2", _format2_with(lambda params: _rename_param(params, PAYLOAD))),
    ):
        archive = tmp_path / f"hostile{fmt}.karc"
        archive.write_bytes(data)
        r = _cli("verify", archive)
        assert r.returncode == 1 and "is not a parameter name" in r.stdout + r.stderr, r.stdout + r.stderr
    assert not (tmp_path / "PWNED").exists() and not Path("PWNED").exists()


def test_writer_refuses_what_the_reader_refuses():
    """The producer never writes a parameter name a reader would refuse."""
    import dataclasses

    from karchive.format.manifest import Manifest, Param, Variant

    entry, _, _ = v2_variant("k", 0, source=None)
    v = Variant.from_json(entry, "v")
    bad = dataclasses.replace(v, params=(Param(PAYLOAD, "*fp32"), *v.params[1:]))
    with pytest.raises(SchemaError, match="is not a parameter name"):
        Manifest.build("x", "1", [bad], produced_by={})


#: The one place that runs text from an archive, by design: ``karchive rebuild`` imports the archived kernel
#: module to recompile it, as any Triton compile of that module would (docs/reproducibility.md says so).
#: Producer side only: nothing a consumer loads (format, registry, trust, runtime, interop, serve) does.
SANCTIONED_EXEC = {"karchive/producer/build/rebuild.py"}


def test_no_source_text_is_executed_anywhere_in_the_package():
    """No ``exec``/``eval``/``compile`` builtin call (and no ``# noqa: S102`` / ``S307``) is left in karchive
    but the documented rebuild: a function is built with ``inspect.Signature``, never from text."""
    found = []
    for path in sorted((ROOT / "karchive").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel in SANCTIONED_EXEC:
            continue
        text = path.read_text()
        if "noqa: S102" in text or "noqa: S307" in text:
            found.append(f"{rel}: noqa")
        for node in ast.walk(ast.parse(text)):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("exec", "eval", "compile", "__import__")
            ):
                found.append(f"{rel}:{node.lineno}: {node.func.id}")
    assert not found, found


def test_param_name_grammar_matches_the_schema():
    """manifest.schema.json says the same as the model about parameter names."""
    import json
    import re

    from karchive.format.names import is_param_name

    schema = json.loads((ROOT / "karchive/format/manifest.schema.json").read_text())
    d = schema["$defs"]
    refs = [
        d["param"]["properties"]["name"],
        d["abi_param"]["properties"]["name"],
        d["autotune"]["properties"]["key_names"]["items"],
        d["heuristics"]["properties"]["names"]["items"],
        d["autotune"]["properties"]["configs"]["items"]["properties"]["kwargs"]["propertyNames"],
    ]
    assert all(r == {"$ref": "#/$defs/param_name"} for r in refs), refs
    for spec in (d["param_name"],):
        pattern = re.compile(spec["pattern"])
        for name in [*HOSTILE_PARAMS, "x_ptr", "BLOCK", "_", "match", "type", "a" * spec["maxLength"]]:
            by_schema = pattern.search(name) is not None and len(name) <= spec["maxLength"] and "\n" not in name
            assert by_schema == is_param_name(name), name


@pytest.mark.parametrize("name", [PAYLOAD, "class", "x\n", ""])
def test_heuristics_record_names_are_parameter_names(name):
    """The names a heuristics record computes (constexprs a call then passes as keywords) and the argument
    names its cases and expressions read follow the parameter-name grammar too."""
    from karchive.format.heuristics import parse_record

    good = {
        "kernel": "k",
        "names": ["EVEN"],
        "cases": {"EVEN": [{"inputs": {"n": 4}, "value": True}]},
        "exprs": {"EVEN": ["==", ["arg", "n"], ["const", 1]]},
    }
    parse_record(good, "h")
    for bad in (
        {**good, "names": [name], "cases": {}, "exprs": {}},
        {**good, "cases": {"EVEN": [{"inputs": {name: 4}, "value": True}]}},
        {**good, "exprs": {"EVEN": ["==", ["arg", name], ["const", 1]]}},
    ):
        with pytest.raises(SchemaError):
            parse_record(bad, "h")


# --------------------------------------------------------------------------------------------------
# 9. A data_ptr() returning a string escaped as a builtin TypeError on both launch paths
# --------------------------------------------------------------------------------------------------

X, Y, OUT = 0x7F00_0000_1000, 0x7F00_0000_2000, 0x7F00_0000_3000


class _Dtype:
    def __str__(self) -> str:
        return "torch.float32"


F32 = _Dtype()


class Tensorish:
    """A torch.Tensor stand-in registered as the directly read tensor type (both paths read it as torch's)."""

    def __init__(self, ptr) -> None:
        self.ptr, self.dtype = ptr, F32

    def data_ptr(self):
        return self.ptr

    def get_device(self) -> int:
        return 0


class StrDataPtr:
    def data_ptr(self):
        return "0x7f0000001000"


class StrCai:
    __cuda_array_interface__ = {"data": ("0x7f0000001000", False), "typestr": "<f4", "shape": (4,), "version": 3}


class NoneCai:
    __cuda_array_interface__ = {"data": [None, False], "typestr": "<f4", "shape": (4,), "version": 3}


class FloatCai:
    __cuda_array_interface__ = {"data": (float(X), False), "typestr": "<f4", "shape": (4,), "version": 3}


BAD_POINTERS = [
    StrDataPtr,
    StrCai,
    FloatCai,
    lambda: Tensorish("0x7f0000001000"),
    lambda: Tensorish(float(X)),
    lambda: Tensorish(None),
]


@pytest.mark.parametrize("path", ["python", "extension"])
def test_pointer_accessor_that_answers_a_string_is_karchives_error(path, monkeypatch, cuda_archive):
    """Issue 34, item 9: ``data_ptr()`` returning a string (or ``__cuda_array_interface__["data"]`` holding one)
    escaped as a builtin TypeError (``not all arguments converted during string formatting``) on both launch
    paths. Now it is an ArgumentError naming the parameter, from a call, a call whose key was seen before, and
    a bound launcher; nothing launches. (NoneCai's None is a null pointer, as Triton takes it.)"""
    from runtime_support import fake_cuda, register_sizes

    import karchive
    from karchive.errors import ArgumentError
    from karchive.runtime import args, launch_path

    if path == "extension" and launch_path.extension() is None:
        pytest.skip(f"the compiled launcher is not built here: {launch_path.status().detail}")
    args.set_tensor_type(Tensorish)
    try:
        with fake_cuda(monkeypatch, path) as (rec, _backend):
            arc = karchive.open(str(cuda_archive))
            register_sizes(rec, arc)
            k = arc.kernel("add_kernel")
            k[(1,)](Tensorish(X), Y, OUT, 5)  # the good call first: later ones share its selection key
            bound = k.bind((1,), Tensorish(X), Y, OUT, 5)
            n = len(rec.launches())
            for make in BAD_POINTERS:
                for call in (lambda a: k[(1,)](a, Y, OUT, 5), lambda a: bound(a, Y, OUT, 5)):
                    with pytest.raises(ArgumentError) as err:
                        call(make())
                    assert err.value.param == "x_ptr" and err.value.kernel == "kernels:add_kernel", str(err.value)
            assert len(rec.launches()) == n
            k[(1,)](NoneCai(), Y, OUT, 5)  # a null pointer: launched, as any None data pointer
    finally:
        args.set_tensor_type(None)


AUTOTUNE = {
    "kernel": "k",
    "key_names": ["n"],
    "dtype_args": ["x"],
    "reset_to_zero": ["x"],
    "restore_value": [],
    "outer_heuristics": [],
    "configs": [{"kwargs": {"BLOCK": 64}, "num_warps": 4}],
    "entries": [{"key": [1], "config": 0, "variant": None}],
    "fallback": "nearest-log2",
}
HEURISTICS = {"kernel": "k", "names": ["EVEN"], "cases": {}, "exprs": {"EVEN": ["==", ["arg", "n"], ["const", 1]]}}


def _with_records(fmt: str, autotune: list, heuristics: list) -> bytes:
    def edit(entry):
        pass

    if fmt == "format1":
        entry, launch, irm = v2_variant("k", 0, source=None)
        w = Format1Writer()
        w.add_group(launch + irm)
        return w.to_bytes({**_manifest(entry), "autotune": autotune, "heuristics": heuristics})
    parts = take_apart(_format2_with(lambda params: None))
    parts.header["autotune"], parts.header["heuristics"] = autotune, heuristics
    return put_together(parts)


@pytest.mark.parametrize("fmt", ["format1", "format2"])
@pytest.mark.parametrize(
    "record,path",
    [
        ("autotune", ("key_names", 0)),
        ("autotune", ("dtype_args", 0)),
        ("autotune", ("reset_to_zero", 0)),
        ("autotune", ("outer_heuristics", None)),
        ("autotune", ("kwargs", None)),
        ("heuristics", ("names", 0)),
    ],
)
def test_record_names_are_parameter_names_when_read(tmp_path, fmt, record, path):
    """The names autotune and heuristics records give (constexprs a call then passes by keyword, arguments they
    read) follow the parameter-name grammar, checked with the manifest's top level: ``verify`` refuses them."""
    autotune, heuristics = copy.deepcopy(AUTOTUNE), copy.deepcopy(HEURISTICS)
    field, i = path
    if field == "kwargs":
        autotune["configs"][0]["kwargs"] = {PAYLOAD: 64}
    elif field == "outer_heuristics":
        autotune["outer_heuristics"] = [PAYLOAD]
    elif record == "autotune":
        autotune[field][i] = PAYLOAD
    else:
        heuristics["names"] = [PAYLOAD]
        heuristics["exprs"] = {}
    honest = tmp_path / "honest.karc"
    honest.write_bytes(_with_records(fmt, [AUTOTUNE], [HEURISTICS]))
    _read_everything(honest)
    archive = tmp_path / "hostile.karc"
    archive.write_bytes(_with_records(fmt, [autotune], [heuristics]))
    with pytest.raises(SchemaError, match="is not a parameter name") as err:
        _read_everything(archive)
    assert err.value.where.startswith(f"manifest.{record}[0]")
    r = _cli("verify", archive)
    assert r.returncode == 1 and "is not a parameter name" in r.stdout + r.stderr, r.stdout + r.stderr
