"""Triton cache interop: export captured variants as Triton cache entries that a fresh Triton process hits,
refuse other Triton builds, import a cache directory as an archive. GPU-less: fake driver, cuda:90."""

from __future__ import annotations

import base64
import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton")

# A fresh process runs the same JIT workload against a given cache dir and reports every compile.
_WORKLOAD = r"""
import json, sys, time
import triton.language as tl
from triton import knobs
from capture_fakes import MockPtr, fake_gpu, scale_rows, tuned_copy
events = []
knobs.compilation.listener = lambda **kw: events.append([kw["src"].name, kw["cache_hit"]])
P = lambda: MockPtr(tl.float32)
with fake_gpu(timings=[3.0, 1.0, 2.0]):
    t = time.perf_counter()
    scale_rows[(1,)](P(), P(), 1000, 2.0, BLOCK=64)
    first = time.perf_counter() - t
    tuned_copy[(1,)](P(), P(), 4096)
print(json.dumps({"events": events, "first_call_s": first}))
"""


def _env(cache_dir) -> dict:
    return dict(
        os.environ, TRITON_CACHE_DIR=str(cache_dir), PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")])
    )


def _run_workload(cache_dir) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", _WORKLOAD], env=_env(cache_dir), capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _cli(*args: str, cache_dir=None) -> subprocess.CompletedProcess:
    env = _env(cache_dir) if cache_dir else dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "karchive", *map(str, args)], env=env, capture_output=True, text=True)


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    """The workload run once in a fresh process under capture: its archive and its own cache dir."""
    base = tmp_path_factory.mktemp("captured")
    script = _WORKLOAD.replace(
        "with fake_gpu", "import karchive\ncap = karchive.capture('wl', version='1')\nwith cap, fake_gpu"
    ).replace("print(json.dumps(", f"cap.save({str(base / 'wl.karc')!r})\nprint(json.dumps(")
    out = subprocess.run([sys.executable, "-c", script], env=_env(base / "cache"), capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["events"] and not any(hit for _, hit in result["events"])  # a cold cache: everything compiled
    return base / "wl.karc", base / "cache", result


def test_cache_dir_name_is_tritons():
    from triton.runtime.cache import _base32

    from karchive.errors import CaptureError
    from karchive.producer.capture.triton_cache import cache_dir_name

    h = "ab" * 32
    assert cache_dir_name(h) == _base32(h) == base64.b32encode(bytes.fromhex(h)).decode().rstrip("=")
    with pytest.raises(CaptureError):
        cache_dir_name("../../etc")


def test_exported_entries_are_hits_in_a_fresh_process(captured, tmp_path):
    archive, _, cold = captured
    cache = tmp_path / "exported"
    r = _cli("export-triton-cache", archive, "--cache-dir", cache, "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    # scale_rows + the three tuned_copy configs + tuned_copy's autotune decision (Triton's <fn>.autotune.json)
    assert report["counts"] == {"written": 5}
    assert [v["path"].endswith("tuned_copy.autotune.json") for v in report["variants"]] == [False] * 4 + [True]
    warm = _run_workload(cache)
    assert warm["events"] == [[name, True] for name, _ in cold["events"]]  # Triton compiled nothing
    # Exporting again leaves every entry alone, and a foreign non-empty entry is never touched.
    victim = report["variants"][0]["path"]
    with open(os.path.join(victim, "marker"), "w") as fh:
        fh.write("mine")
    again = json.loads(_cli("export-triton-cache", archive, "--cache-dir", cache, "--json").stdout)
    assert again["counts"] == {"exists": 5}
    assert open(os.path.join(victim, "marker")).read() == "mine"
    assert not [n for n in os.listdir(cache) if n.startswith("tmp.")]


def test_empty_entry_dirs_are_filled(captured, tmp_path):
    from karchive.format.open import open_location as open_reader
    from karchive.producer.capture.triton_cache import cache_dir_name, export_archive

    archive, _, _ = captured
    reader = open_reader(archive)
    cache = tmp_path / "c"
    first = reader.manifest["variants"][0]
    (cache / cache_dir_name(first["provenance"]["triton_hash"])).mkdir(parents=True)  # Triton makes these on a miss
    results = export_archive(reader, str(cache))
    assert {r.status for r in results} == {"written"}


def _rewrite(archive, out, mutate) -> None:
    from karchive.format.open import open_location as open_reader
    from karchive.format.writer import ArchiveWriter

    reader = open_reader(archive)
    manifest = json.loads(json.dumps(reader.manifest))
    for v in manifest["variants"]:
        mutate(v["provenance"])
    writer = ArchiveWriter()
    for name in sorted(reader.members):
        if not name.startswith("karchive/"):
            writer.add_group([(name, reader.read(name))])
    writer.write(out, manifest)


def test_another_triton_build_is_detected_and_nothing_written(captured, tmp_path):
    archive, _, _ = captured
    foreign = tmp_path / "foreign.karc"
    _rewrite(archive, foreign, lambda p: p["triton_cache"].update(triton_key_sha256="f" * 64))
    cache = tmp_path / "c"
    r = _cli("export-triton-cache", foreign, "--cache-dir", cache)
    assert r.returncode == 2
    assert "different Triton build" in r.stderr and "would never look these entries up" in r.stdout
    assert not cache.exists() or not os.listdir(cache)

    unknown = tmp_path / "unknown.karc"
    _rewrite(archive, unknown, lambda p: p.pop("triton_cache"))
    assert _cli("export-triton-cache", unknown, "--cache-dir", cache).returncode == 2
    r = _cli("export-triton-cache", unknown, "--cache-dir", cache, "--allow-unverified", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["counts"] == {"written": 5}  # 4 variants, 1 decision


def test_import_a_cache_dir_and_round_trip(captured, tmp_path):
    from karchive.format.open import open_location as open_reader

    archive, cache, _ = captured
    out = tmp_path / "imported.karc"
    r = _cli("import-triton-cache", cache, "-o", out, "--same-build", "--json")
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["variants"] == 4 and summary["kernels"] == ["scale_rows", "tuned_copy"]
    assert _cli("verify", out).returncode == 0
    imported = open_reader(out).manifest["variants"]
    captured_vs = open_reader(archive).manifest["variants"]
    # Same binaries and Triton hashes as the capture; params are the binary's runtime arguments only.
    assert sorted(v["provenance"]["triton_hash"] for v in imported) == sorted(
        v["provenance"]["triton_hash"] for v in captured_vs
    )
    scale = next(v for v in imported if v["kernel"] == "scale_rows")
    assert [p["name"] for p in scale["params"]] == ["x_ptr", "out_ptr", "n", "alpha"]
    assert all("value" not in p for p in scale["params"]) and scale["provenance"]["origin"] == "triton-cache"
    cap_scale = next(v for v in captured_vs if v["kernel"].endswith(":scale_rows"))  # module:qualname
    assert scale["abi"] == cap_scale["abi"] and scale["key"] != cap_scale["key"]
    # Import is deterministic: the same cache gives the same keys.
    again = tmp_path / "again.karc"
    assert _cli("import-triton-cache", cache, "-o", again, "--same-build").returncode == 0
    assert [v["key"] for v in open_reader(again).manifest["variants"]] == [v["key"] for v in imported]
    # Exported back, the entries land under Triton's own directory names and a fresh process hits them.
    back = tmp_path / "back"
    assert _cli("export-triton-cache", out, "--cache-dir", back).returncode == 0
    assert sorted(os.listdir(back)) == sorted(
        n
        for n in os.listdir(cache)
        if os.path.isdir(cache / n) and any(f.startswith("__grp__") for f in os.listdir(cache / n))
    )
    assert all(hit for _, hit in _run_workload(back)["events"])


def test_import_without_fingerprint_and_bad_dirs(tmp_path, captured):
    _, cache, _ = captured
    out = tmp_path / "nofp.karc"
    r = _cli("import-triton-cache", cache, "-o", out)
    assert r.returncode == 0 and "--same-build" in r.stdout
    assert _cli("export-triton-cache", out, "--cache-dir", tmp_path / "x").returncode == 2
    r = _cli("import-triton-cache", tmp_path / "missing", "-o", tmp_path / "m.karc")
    assert r.returncode == 2 and "not a directory" in r.stderr
    (tmp_path / "empty").mkdir()
    r = _cli("import-triton-cache", tmp_path / "empty", "-o", tmp_path / "e.karc")
    assert r.returncode == 2 and "no kernel entries" in r.stderr


def test_parse_ttir_signature_handles_older_spellings():
    from karchive.errors import UnsupportedKernelError
    from karchive.producer.capture.triton_cache import parse_ttir_signature

    old = (
        '#loc = loc("/x/k.py":3:0)\nmodule {\n  tt.func public @mm(%arg0: !tt.ptr<f16> {tt.divisibility = 16 : i32} '
        'loc("a_ptr"(#loc)), %arg1: !tt.ptr<f8E4M3FN, 1> loc("b"(#loc)), %arg2: i64 loc(unknown), %arg3: bf16) '
        "attributes {noinline = false} {\n"
    )
    args = parse_ttir_signature(old, "mm")
    assert [(a.name, a.type, a.divisibility) for a in args] == [
        ("a_ptr", "*fp16", 16),
        ("b", "*fp8e4nv", None),
        ("arg2", "i64", None),
        ("arg3", "bf16", None),
    ]
    with pytest.raises(UnsupportedKernelError, match="tensordesc"):
        parse_ttir_signature("tt.func public @k(%d: !tt.tensordesc<tensor<16xf32>>) {", "k")
