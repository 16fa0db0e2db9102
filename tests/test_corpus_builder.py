"""tests/gpu/build_corpus.py on the CPU machine: the specs it writes, the wheels it unpacks, the report it leaves.

The GPU side (tests/gpu/test_corpus_gpu.py) reads ``corpus-build.json`` to xfail what could not be built with the
builder's own reason, so the report must name every kernel, with either an archive or an error.
"""

from __future__ import annotations

import importlib.util
import json
import pathlib
import zipfile

import pytest

from karchive.producer.build.spec_file import tomllib  # tomllib, or tomli before Python 3.11

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture
def bc(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("karchive_build_corpus", ROOT / "tests" / "gpu" / "build_corpus.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setattr(mod, "ROOT", tmp_path)  # its .whl/ is the test's
    monkeypatch.setattr(mod, "SRC", tmp_path / "no-tutorials")
    return mod


def test_every_spec_names_the_autotuned_kernel_without_tuned_meta_parameters(bc, tmp_path):
    for entry, info in bc.KERNELS.items():
        text = bc.spec_text(entry, info, tmp_path / "lib" / "k.py")
        spec = tomllib.loads(text)
        assert spec["archive"]["targets"] == ["cuda:90"]
        (kernel,) = spec["kernel"]
        assert kernel["source"] == f"{tmp_path / 'lib' / 'k.py'}:{info['kernel']}"
        assert kernel["constexprs"] == info["constexprs"]
        assert kernel["signature"] == info["signature"]
        # the tuned names come from the autotuner's configs, never from the spec
        assert not {"BLOCK_SIZE_M", "BLOCK_N", "BK"} & set(kernel["constexprs"]), entry


def test_a_wheel_member_outside_the_unpack_directory_is_refused(bc, tmp_path):
    (tmp_path / ".whl").mkdir()
    with zipfile.ZipFile(tmp_path / ".whl" / bc.WHEELS["liger"], "w") as zf:
        zf.writestr("../escaped.py", "x = 1\n")
    site = tmp_path / "out" / "site"
    site.mkdir(parents=True)
    with pytest.raises(SystemExit, match="escapes the unpack directory"):
        bc.unpack_wheels(site)
    assert not (tmp_path / "out" / "escaped.py").exists()


def test_the_report_names_every_kernel_with_the_reason_it_was_not_built(bc, tmp_path):
    out = tmp_path / "corpus"
    assert bc.build(out) == 1
    report = json.loads((out / "corpus-build.json").read_text())
    assert set(report["kernels"]) == set(bc.KERNELS)
    for entry, row in report["kernels"].items():
        assert row["ok"] is False and row["library"] == bc.KERNELS[entry]["library"]
        reason = row["error"]
        if row["library"] == "tutorials":
            assert "no-tutorials" in reason and "CORPUS.md" in reason, reason
        else:  # no wheels in this .whl/: named, with how to get them
            assert ".whl" in reason and "CORPUS.md" in reason, reason
    assert "triton" in report["built_with"]
