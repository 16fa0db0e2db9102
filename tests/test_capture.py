"""JIT capture on a GPU-less machine: real Triton compiles for a forced cuda:90 target (fake driver, see
capture_fakes.py), recorded through Triton's own hooks, packed, verified, compared with AOT."""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import subprocess
import sys
import threading

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton")

if str(EXAMPLES) not in sys.path:
    sys.path.insert(0, str(EXAMPLES))


@pytest.fixture
def cache_dir(triton_cache_dir):
    return triton_cache_dir


@pytest.fixture
def gpu(fake_gpu_driver):
    return fake_gpu_driver


def _fresh(*fns):
    from capture_fakes import fresh

    fresh(*fns)


def _ptr():
    from capture_fakes import ptr

    return ptr()


def _verify(path):
    from karchive.cli.inspect_cmds import schema_problems
    from karchive.format.manifest import Manifest
    from karchive.format.open import open_location as open_reader

    reader = open_reader(path)
    assert schema_problems(reader.manifest) == []
    assert reader.verify() == []
    Manifest.from_json(reader.manifest)
    return reader


def test_captured_keys_and_abi_equal_aot(cache_dir, gpu, tmp_path):
    import kernels

    import karchive
    from karchive.producer.compile.aot import VariantRequest, compile_variant

    _fresh(kernels.add_kernel)
    with karchive.capture("cap", version="1.0") as cap:
        kernels.add_kernel[(4,)](_ptr(), _ptr(), _ptr(), 1000, BLOCK=1024, num_warps=4)
    assert [e.how for e in cap.events] == ["compiled"]
    (captured,) = cap.variants.values()
    aot = compile_variant(
        VariantRequest(
            f"{EXAMPLES / 'kernels.py'}:add_kernel",
            "*fp32:16, *fp32:16, *fp32:16, i32",
            "cuda:90",
            {"BLOCK": 1024},
            {"num_warps": 4},
        )
    )
    assert captured.variant.to_json()["key"] == aot.variant.to_json()["key"]
    for field in ("params", "abi", "options", "target", "kernel"):
        assert captured.variant.to_json()[field] == aot.variant.to_json()[field], field
    assert captured.variant.to_json()["provenance"]["origin"] == "capture"
    fp = captured.variant.to_json()["provenance"]["triton_cache"]
    assert len(fp["triton_key_sha256"]) == 64 and fp["backend_hash"].endswith("-90")
    assert captured.source_text is not None and "def add_kernel" in captured.source_text
    assert b"@KARCHIVE_ROOT@/triton/backends" in captured.files["metadata"]
    assert str(cache_dir).encode() not in captured.files["metadata"]

    out = tmp_path / "cap.karc"
    cap.save(out)
    reader = _verify(out)
    (v,) = reader.manifest["variants"]
    assert v["key"] == aot.key and set(v["files"]["ir"]) == {"ttir", "ttgir", "llir", "ptx"}
    # AOT compiles name the source canonically (spec/FORMAT.md §12) and the JIT's debug info keeps Triton's
    # absolute path, so the cubins differ there; the machine code is the same.
    from triton.tools.disasm import get_sass

    assert get_sass(reader.read(v["files"]["binary"]["path"])) == get_sass(aot.files["binary"])


def test_cache_hits_and_warm_kernels_are_recorded(cache_dir, gpu):
    from capture_fakes import scale_rows

    import karchive

    _fresh(scale_rows)
    scale_rows[(1,)](_ptr(), _ptr(), 1000, 2.0, BLOCK=256)  # compiled before any capture: in the JIT's memory
    with karchive.capture("warm", version="1", record_launches=False) as off:
        scale_rows[(1,)](_ptr(), _ptr(), 1000, 2.0, BLOCK=256)
    assert off.variants == {}
    from karchive.errors import CaptureError

    with pytest.raises(CaptureError, match="recorded no kernels"):
        off.save(cache_dir / "never.karc")
    with karchive.capture("warm", version="1") as on:
        scale_rows[(1,)](_ptr(), _ptr(), 1000, 2.0, BLOCK=256)
    assert [e.how for e in on.events] == ["launched"]
    _fresh(scale_rows)  # a new process would find the kernel in Triton's disk cache
    with karchive.capture("hit", version="1") as hit:
        scale_rows[(1,)](_ptr(), _ptr(), 1000, 2.0, BLOCK=256)
    assert [e.how for e in hit.events] == ["cache-hit"]
    assert set(hit.variants) == set(on.variants)


def test_two_threads_get_only_their_own_kernels(cache_dir, gpu):
    from capture_fakes import ONE_COMPILE_AT_A_TIME, scale_rows

    import karchive

    _fresh(scale_rows)
    barrier = threading.Barrier(2)
    caps: dict[str, object] = {}
    errors: list[BaseException] = []

    def work(label: str, blocks: list[int]) -> None:
        try:
            with karchive.capture(label, version="1") as cap:
                barrier.wait()
                for b in blocks:
                    with ONE_COMPILE_AT_A_TIME:
                        scale_rows[(1,)](_ptr(), _ptr(), 1000, 2.0, BLOCK=b)
            caps[label] = cap
        except BaseException as exc:
            errors.append(exc)

    threads = [
        threading.Thread(target=work, args=("a", [32, 64])),
        threading.Thread(target=work, args=("b", [128, 512])),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    blocks = {
        label: sorted(
            p["value"] for v in cap.variants.values() for p in v.variant.to_json()["params"] if p["name"] == "BLOCK"
        )
        for label, cap in caps.items()
    }
    assert blocks == {"a": [32, 64], "b": [128, 512]}


def test_a_concurrent_captures_entry_reported_after_this_window_is_not_a_loss():
    """The race the thread test above can hit under load: thread b's compile writes its cache entry inside
    a's window and is reported just after a's window closed. That entry is b's ("elsewhere"), not a's loss;
    an entry reported late for no capture stays a loss."""
    from karchive.producer.capture._report import Sighting, left_out
    from karchive.producer.capture.triton_cache import CacheEntry, cache_dir_name

    class A:
        name, scope, harvest = "a", "process", False

        def recorded_hashes(self) -> set[str]:
            return set()

        def failures(self) -> dict[str, tuple[str, str]]:
            return {}

    a = A()
    mine, nobodys = "ab" * 32, "cd" * 32
    entries = [(cache_dir_name(h), CacheEntry(f"/c/{cache_dir_name(h)}", "k", {"hash": h})) for h in (mine, nobodys)]
    later = [
        Sighting(9, mine, "k", False, "b", "thread", (id(a) + 1,), ("b",), None),
        Sighting(10, nobodys, "k", False, "c", "thread", (), (), None),
    ]
    got = {i.triton_hash: i for i in left_out(a, [], entries, {n for n, _ in entries}, later)}
    assert got[mine].category == "elsewhere" and not got[mine].lost and "'b'" in got[mine].reason
    assert got[nobodys].category == "unrecorded" and got[nobodys].lost
    # without the later sightings (the report before this change), both were losses
    assert all(i.lost for i in left_out(a, [], entries, {n for n, _ in entries}))


def test_listener_and_hooks_are_chained_and_restored(cache_dir, gpu):
    from capture_fakes import scale_rows
    from triton import knobs
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.jit import JITFunction

    import karchive

    heard = []

    def mine(**kw):
        heard.append(kw["src"].name)

    run_before, tune_before = JITFunction.run, Autotuner.run
    knobs.compilation.listener = mine
    try:
        _fresh(scale_rows)
        with karchive.capture("chain", version="1") as cap:
            assert knobs.compilation.listener is not mine
            scale_rows[(1,)](_ptr(), _ptr(), 1000, 2.0, BLOCK=64)
        assert heard == ["scale_rows"] and len(cap.variants) == 1
        assert knobs.compilation.listener is mine
        assert JITFunction.run is run_before and Autotuner.run is tune_before
    finally:
        knobs.compilation.listener = None


def test_decorator_saves_after_each_call(cache_dir, gpu, tmp_path):
    from capture_fakes import scale_rows

    import karchive

    out = tmp_path / "dec.karc"

    @karchive.capture("dec", version="2.0", path=out)
    def workload(block: int) -> None:
        scale_rows[(1,)](_ptr(), _ptr(), 1000, 2.0, BLOCK=block)

    _fresh(scale_rows)
    workload(32)
    workload(64)
    assert workload.capture.kernels() == ["capture_fakes:scale_rows"]  # module:qualname
    reader = _verify(out)
    assert reader.manifest["name"] == "dec" and len(reader.manifest["variants"]) == 2


def test_bad_arguments_raise_karchive_errors():
    import karchive
    from karchive.errors import CaptureError

    with pytest.raises(CaptureError, match="name"):
        karchive.capture("", version="1")
    with pytest.raises(CaptureError, match="version"):
        karchive.capture("x", version="")


def test_pass_plugin_and_stages_hook_enter_key_and_manifest(cache_dir, gpu, tmp_path, monkeypatch):
    from capture_fakes import scale_rows
    from triton import knobs

    import karchive

    _fresh(scale_rows)
    with karchive.capture("stock", version="1") as stock:
        scale_rows[(1,)](_ptr(), _ptr(), 1000, 2.0, BLOCK=64)

    plugin = tmp_path / "libmy_pass.so"
    plugin.write_bytes(b"\x7fELF not really a plugin: karchive only hashes it")
    monkeypatch.setenv("TRITON_PASS_PLUGIN_PATH", str(plugin))

    def stages_hook(*args):
        if not args:  # Triton asks for (key, hash) to extend its cache key
            return "my-pipeline", "0" * 63 + "1"
        return None  # called with (backend, stages, options, language, capability): leave the pipeline as is

    knobs.runtime.add_stages_inspection_hook = stages_hook
    try:
        _fresh(scale_rows)
        with karchive.capture("custom", version="1") as custom:
            scale_rows[(1,)](_ptr(), _ptr(), 1000, 2.0, BLOCK=64)
    finally:
        knobs.runtime.add_stages_inspection_hook = None
    (a,), (b,) = stock.variants.values(), custom.variants.values()
    assert a.variant.to_json()["provenance"]["hooks"] == []
    hooks = b.variant.to_json()["provenance"]["hooks"]
    assert {h["kind"] for h in hooks} == {"pass_plugin", "stages_inspection_hook"}
    assert any(h["name"] == "libmy_pass.so" and len(h["sha256"]) == 64 for h in hooks)
    assert any(h["name"] == "my-pipeline" for h in hooks)
    assert a.variant.to_json()["key"] != b.variant.to_json()["key"]  # same kernel, custom pipeline: a different variant
    custom.save(tmp_path / "custom.karc")
    reader = _verify(tmp_path / "custom.karc")
    assert reader.manifest["variants"][0]["provenance"]["hooks"] == hooks


_WORKER = r"""
import sys
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
import triton
from capture_fakes import scale_rows
src = ASTSource(fn=scale_rows, signature={"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "alpha": "fp32",
                "BLOCK": "constexpr"}, constexprs={"BLOCK": 16}, attrs={(0,): [["tt.divisibility", 16]]})
triton.compile(src, target=GPUTarget("cuda", 90, 32))
"""


def test_kernels_compiled_by_other_processes_are_harvested(cache_dir, gpu, tmp_path):
    import karchive

    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]))
    with karchive.capture("harvest", version="1") as cap:
        subprocess.run([sys.executable, "-c", _WORKER], env=env, check=True, capture_output=True)
    (v,) = cap.variants.values()
    assert [e.how for e in cap.events] == ["harvested"]
    assert v.variant.to_json()["kernel"] == "scale_rows" and v.variant.to_json()["provenance"]["harvested"] is True
    assert v.variant.to_json()["provenance"]["origin"] == "triton-cache"
    # What the entry tells: the runtime arguments with their hints; BLOCK is baked into the binary.
    assert [(p["name"], p["type"], p.get("hints")) for p in v.variant.to_json()["params"]] == [
        ("x_ptr", "*fp32", {"divisibility": 16}),
        ("out_ptr", "*fp32", None),
        ("n", "i32", None),
        ("alpha", "fp32", None),
    ]
    cap.save(tmp_path / "h.karc")
    _verify(tmp_path / "h.karc")
    from karchive.producer.capture.jit_capture import CaptureIncompleteWarning

    with pytest.warns(CaptureIncompleteWarning, match=r"\[not-harvested\] scale_rows .*harvest=False"):
        with karchive.capture("no-harvest", version="1", harvest=False) as off:
            subprocess.run(
                [sys.executable, "-c", _WORKER.replace("16}", "32}")], env=env, check=True, capture_output=True
            )
    assert off.variants == {}
    (item,) = off.left_out
    assert item.category == "not-harvested" and item.kernel == "scale_rows" and item.lost
    assert off.summary()["left_out_counts"] == {"not-harvested": 1}


def test_autotune_captures_every_config_and_records_the_choice(cache_dir, gpu, tmp_path):
    from capture_fakes import tuned_copy

    import karchive
    from karchive.format.autotune import choose_config, entry_config

    _fresh(tuned_copy)
    with karchive.capture("tuned", version="1") as cap:
        tuned_copy[(1,)](_ptr(), _ptr(), 4096)  # benchmark: scripted timings 3, 1, 2 -> config 1 wins
        tuned_copy[(1,)](_ptr(), _ptr(), 4096)  # same key: no new tuning
        tuned_copy[(1,)](_ptr(), _ptr(), 1000)  # new key (and n no longer divisible by 16): tunes again
    assert cap.errors == []
    blocks = sorted(
        (p["value"], v.variant.to_json()["abi"]["num_warps"])
        for v in cap.variants.values()
        for p in v.variant.to_json()["params"]
        if p["name"] == "BLOCK"
    )
    assert blocks == [(64, 2), (64, 2), (128, 4), (128, 4), (256, 4), (256, 4)]  # 3 configs x 2 specialisations
    (record,) = cap.autotune.to_json()
    assert record["kernel"] == "capture_fakes:tuned_copy" and record["key_names"] == ["n"]  # as its variants
    assert record["dtype_args"] == ["x_ptr", "out_ptr"]
    assert [e["key"] for e in record["entries"]] == [[4096, "fp32", "fp32"], [1000, "fp32", "fp32"]]
    first, second = record["entries"]
    assert first["config"] == 1 and first["timings_ms"] == [3.0, 1.0, 2.0]
    assert second["config"] == 1  # timings cycle 3, 1, 2 again
    chosen = cap.variants[first["variant"]].variant.to_json()
    assert [p["value"] for p in chosen["params"] if p["name"] == "BLOCK"] == [128]
    assert {p["name"]: p.get("hints") for p in chosen["params"]}["n"] == {"divisibility": 16}
    assert {p["name"]: p.get("hints") for p in cap.variants[second["variant"]].variant.to_json()["params"]}["n"] is None

    cap.save(tmp_path / "tuned.karc")
    manifest = _verify(tmp_path / "tuned.karc").manifest
    assert {e["variant"] for e in manifest["autotune"][0]["entries"]} <= {v["key"] for v in manifest["variants"]}
    hit = choose_config(manifest["autotune"], [4096, "fp32", "fp32"], kernel="capture_fakes:tuned_copy")
    assert hit["variant"] == first["variant"]
    near = choose_config(manifest["autotune"], [3000, "fp32", "fp32"])
    assert near["key"] == [4096, "fp32", "fp32"]
    assert entry_config(manifest["autotune"][0], near)["kwargs"] == {"BLOCK": 128}


def test_autotuner_tuned_before_the_capture_still_records_its_choice(cache_dir, gpu):
    from capture_fakes import tuned_copy

    import karchive

    _fresh(tuned_copy)
    tuned_copy[(1,)](_ptr(), _ptr(), 2048)  # tuned (and compiled) outside the capture
    with karchive.capture("late", version="1") as cap:
        tuned_copy[(1,)](_ptr(), _ptr(), 2048)
    (record,) = cap.autotune.to_json()
    (entry,) = record["entries"]
    assert entry["key"] == [2048, "fp32", "fp32"] and entry["config"] == 1 and "timings_ms" not in entry
    assert list(cap.variants) == [entry["variant"]]  # the launched winner, recorded from the JIT's memory


def test_heuristics_kernels_are_captured_with_their_computed_constexprs(cache_dir, gpu):
    from capture_fakes import heur_copy

    import karchive

    _fresh(heur_copy)
    with karchive.capture("heur", version="1") as cap:
        heur_copy[(1,)](_ptr(), _ptr(), 1024, BLOCK=128)
        heur_copy[(1,)](_ptr(), _ptr(), 1000, BLOCK=128)
    even = sorted(
        p["value"] for v in cap.variants.values() for p in v.variant.to_json()["params"] if p["name"] == "EVEN"
    )
    assert even == [False, True]


def test_capture_is_json_clean(cache_dir, gpu):
    from capture_fakes import scale_rows

    import karchive

    _fresh(scale_rows)
    with karchive.capture("j", version="1") as cap:
        scale_rows[(1,)](_ptr(), _ptr(), 1, 2.0, BLOCK=64)  # n == 1: Triton specialises it away
    (v,) = cap.variants.values()
    n = next(p for p in v.variant.to_json()["params"] if p["name"] == "n")
    assert n == {"name": "n", "type": "i32", "value": 1, "hints": {"equal_to_1": True}, "required": True}
    json.dumps(v.variant.to_json())


def test_async_compile_mode_pool_threads_are_followed(cache_dir, gpu):
    from concurrent.futures import ThreadPoolExecutor

    from capture_fakes import scale_rows
    from triton.runtime._async_compile import AsyncCompileMode

    import karchive

    _fresh(scale_rows)
    with karchive.capture("async", version="1", scope="thread") as cap, ThreadPoolExecutor(2) as pool:
        with AsyncCompileMode(pool):  # compiles on pool threads: the submit from this thread is followed there
            scale_rows.warmup(_ptr(), _ptr(), 1000, 2.0, BLOCK=32, grid=(1,))
    (event,) = cap.events
    assert event.how == "compiled" and event.note == "handed over (thread pool)"
    assert event.thread != threading.current_thread().name
    (v,) = cap.variants.values()
    assert [p["value"] for p in v.variant.to_json()["params"] if p["name"] == "BLOCK"] == [32]
    assert cap.left_out == []
