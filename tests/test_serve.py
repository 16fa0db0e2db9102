"""karchive.serve: unchanged ``kernel[grid](...)`` call sites served from archives (issue 22).

Archives are real Triton compiles (cuda:90, no GPU) and real captures (on capture_fakes' GPU-less Triton
driver). Launches reach the recording driver stand-in of runtime_support (a TEST DOUBLE for the missing GPU),
so the tests see which binary, grid and block each unchanged call site launched. In strict mode Triton's own
driver is the real one, which has no GPU here: had Triton been asked to compile or launch, the call would fail.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest
import runtime_support as rs
from support import EXAMPLES, needs_triton

from karchive.errors import ServeMissError
from karchive.runtime import launch_path

pytestmark = needs_triton
ROOT = pathlib.Path(__file__).resolve().parent.parent
A = 0x7F0000000000  # 16-byte aligned device addresses (the stand-in reads nothing behind them)


class _Dtype:
    """A framework dtype: ``.name`` as NumPy spells it (what the runtime reads); ``str()`` what Triton reads
    (and puts in autotune keys: "fp32" as capture_fakes' MockPtr said it when the archive was captured)."""

    def __init__(self, text: str) -> None:
        self.name, self.text = {"fp16": "float16", "float16": "float16"}.get(text, "float32"), text

    def __str__(self) -> str:
        return self.text


_DTYPES: dict[str, _Dtype] = {}


class DevBuf:
    """A device buffer as the runtime sees one (``data_ptr()``, ``dtype``, device 0); nothing behind it."""

    def __init__(self, addr: int = A, text: str = "float32") -> None:
        # one dtype object per name, as frameworks have (Triton keys its specialisation cache by the object)
        self.addr, self.dtype = addr, _DTYPES.setdefault(text, _Dtype(text))

    def data_ptr(self) -> int:
        return self.addr

    def get_device(self) -> int:
        return 0


def buf() -> DevBuf:
    return DevBuf()


def mock() -> DevBuf:
    """A buffer whose dtype reads as the captured calls' did (autotune keys hold str(dtype))."""
    return DevBuf(text="fp32")


@pytest.fixture(autouse=True)
def _stop_serving():
    yield
    import karchive.serve

    karchive.serve.stop()


@pytest.fixture(autouse=True)
def triton_side(monkeypatch):
    """Triton's own runtime dispatches served calls (karchive answers its compile): it needs a driver that
    answers the current device, stream and target -- capture_fakes' GPU-less one. Every real Triton compile is
    counted (``compiles``): a served call compiles nothing."""
    import capture_fakes
    import triton
    import triton.compiler
    import triton.compiler.compiler as cc

    compiles: list[str] = []
    orig = cc.compile

    def counting(src, target=None, options=None, _env_vars=None):
        compiles.append(getattr(src, "name", "?"))
        return orig(src, target=target, options=options, _env_vars=_env_vars)

    for mod in (cc, triton.compiler, triton):
        monkeypatch.setattr(mod, "compile", counting)
    with capture_fakes.fake_gpu():
        yield compiles


@pytest.fixture(params=rs.PATHS)
def path(request):
    return rs.path_param(request)


@pytest.fixture
def kernels_module(monkeypatch):
    """examples/kernels.py imported as ``kernels``: the module name its archive files the kernels under."""
    monkeypatch.syspath_prepend(str(EXAMPLES))
    import kernels

    for k in (kernels.add_kernel, kernels.softmax_kernel, kernels.scale_kernel):
        k.device_caches.clear()  # a fresh process: nothing Triton compiled in another test (serving takes over
        # compiles; a kernel Triton compiled before serve() started stays Triton's, as in any process)
    return kernels


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    """A capture (GPU-less Triton driver, scripted timings 3, 1, 2: config 1 wins every key) of a plain, an
    autotuned, a heuristics and an autotune-over-heuristics kernel of capture_fakes.py."""
    import triton.language as tl
    from capture_fakes import fake_gpu, fresh, heur_copy, ptr, scale_rows, tuned_copy, tuned_even_copy
    from serve_kernels import cast_copy, h_over_tuned, hooked_copy

    import karchive

    base = tmp_path_factory.mktemp("served")
    with pytest.MonkeyPatch.context() as mp:  # module scope: the cache variable set for the capture alone
        mp.setenv("TRITON_CACHE_DIR", str(base / "cache"))
        fresh(scale_rows, tuned_copy, heur_copy, tuned_even_copy, cast_copy, h_over_tuned, hooked_copy)
        with fake_gpu(timings=[3.0, 1.0, 2.0]):
            with karchive.capture("served", version="1", strict=True) as cap:
                scale_rows[(4,)](ptr(), ptr(), 1000, 2.0, BLOCK=256)
                tuned_copy[(1,)](ptr(), ptr(), 4096)
                heur_copy[(1,)](ptr(), ptr(), 1024, BLOCK=128)
                heur_copy[(1,)](ptr(), ptr(), 1000, BLOCK=128)
                tuned_even_copy[(1,)](ptr(), ptr(), 4096)
                cast_copy[(1,)](ptr(), ptr(tl.float16), 128, DT=tl.float16, BLOCK=128)
                h_over_tuned[(1,)](ptr(), None, ptr(), 4096)  # HAS_B=False, key (4096, False, fp32, fp32)
                hooked_copy[(1,)](ptr(), ptr(), 2048)  # configs with pre_hooks (descriptor kernels' pattern)
        # nothing compiled stays in Triton's memory
        fresh(scale_rows, tuned_copy, heur_copy, tuned_even_copy, cast_copy, h_over_tuned, hooked_copy)
    out = base / "served.karc"
    cap.save(out)
    return out


def _arc(path_, rec):
    import karchive

    arc = karchive.open(path_)
    rs.register_sizes(rec, arc)
    return arc


# -- strict --------------------------------------------------------------------------------------------------
def test_strict_serves_an_unchanged_call_site_and_compiles_nothing(
    cuda_archive, kernels_module, monkeypatch, path, triton_side
):
    from triton.compiler import CompiledKernel

    import karchive

    kernels_module.add_kernel.device_caches.clear()  # what other tests' JIT runs of this module left behind
    with rs.fake_cuda(monkeypatch, path) as (rec, _b):
        report = karchive.serve(_arc(cuda_archive, rec), mode="strict")
        x, y, out = DevBuf(A), DevBuf(A + 4096), DevBuf(A + 8192)
        first = kernels_module.add_kernel[(4,)](x, y, out, 4100, BLOCK=1024)  # the library's own line
        again = kernels_module.add_kernel[lambda meta: (4100 // meta["BLOCK"],)](x, y, out, 4100, BLOCK=1024)
        # what Triton returns: the CompiledKernel, relaunched directly by libraries that keep it
        first[(2, 1, 1)](x, y, out, 4100, 1024)
    launched = rec.launches()
    assert [(la.kernel, la.grid, la.block) for la in launched] == [("add_kernel", (4, 1, 1), (128, 1, 1))] * 2 + [
        ("add_kernel", (2, 1, 1), (128, 1, 1))
    ]
    assert launched[0].params[3] == (4100).to_bytes(4, "little")
    assert isinstance(first, CompiledKernel) and again is first and first.n_regs == 40 and first.name == "add_kernel"
    assert first.metadata.num_warps == 4 and "cubin" in first.asm
    # kernel[grid] is karchive's dispatcher (the fast path: its launches are not counted); the CompiledKernel's
    # relaunch goes through the served launcher, which counts
    assert report.served["kernels:add_kernel"] == {"archive": "rt@1.0", "calls": 1, "direct": True}
    assert report.missed_list == []
    assert triton_side == []  # Triton compiled nothing


def test_strict_miss_names_kernel_call_and_rejections_and_launches_nothing(
    cuda_archive, kernels_module, monkeypatch, path, triton_side
):
    import karchive

    with rs.fake_cuda(monkeypatch, path) as (rec, _b):
        karchive.serve(_arc(cuda_archive, rec), mode="strict")
        with pytest.raises(ServeMissError) as err:
            kernels_module.add_kernel[(4,)](buf(), buf(), buf(), 4100, BLOCK=64)
        with pytest.raises(ServeMissError) as unknown:
            kernels_module.softmax_kernel[(1,)](buf(), buf(), 64, 64, 64, BLOCK=64)  # not in the archive
        assert rec.launches() == []
        # through .run (libraries that call it, wrappers): the same
        with pytest.raises(ServeMissError):
            kernels_module.add_kernel.run(buf(), buf(), buf(), 4100, BLOCK=64, grid=(4,), warmup=False)
        # a call Triton refuses is refused as Triton refuses it (its own binder's error)
        with pytest.raises(KeyError, match="unrecognised"):
            kernels_module.add_kernel[(4,)](buf(), buf(), buf(), 4100, BLOCK=1024, BLOCKK=3)
    assert rec.launches() == [] and triton_side == []
    e = err.value
    assert e.kernel == "kernels:add_kernel" and "BLOCK=64" in e.call and e.archives == ("rt@1.0",)
    assert "BLOCK=1024 in the variant, 64 in the call" in str(e)
    assert "Triton was not asked to compile it" in str(e)
    assert "no kernel named kernels:softmax_kernel" in str(unknown.value)
    report = karchive.serve_report()
    assert {m["kernel"] for m in report.missed_list} == {"kernels:add_kernel", "kernels:softmax_kernel"}


@pytest.fixture(scope="module")
def block64_archive(tmp_path_factory):
    """A second archive ("rt64@1.0") holding add_kernel at BLOCK=64 only: what the first (BLOCK=1024) misses."""
    return rs.write_archive(
        tmp_path_factory.mktemp("rt64") / "rt64.karc",
        rs.compile_many([(rs.KERNELS, "add_kernel", rs.ADD16, "cuda:90", {"BLOCK": 64}, {"num_warps": 4})]),
        name="rt64",
    )


def test_each_launch_is_credited_to_the_archive_whose_binary_ran(
    cuda_archive, block64_archive, kernels_module, monkeypatch, path
):
    """Issue 34 item 8: launches a later archive served were credited to the first. The report is the audit of
    which binary ran: each archive is credited exactly the launches it served."""
    import karchive

    with rs.fake_cuda(monkeypatch, path) as (rec, _b):
        report = karchive.serve(_arc(cuda_archive, rec), _arc(block64_archive, rec), mode="strict")
        for _ in range(2):
            kernels_module.add_kernel[(4,)](buf(), buf(), buf(), 4100, BLOCK=1024)  # rt@1.0 holds BLOCK=1024
        for _ in range(3):
            kernels_module.add_kernel[(64,)](buf(), buf(), buf(), 4100, BLOCK=64)  # only rt64@1.0 does
    assert [la.block for la in rec.launches()] == [(128, 1, 1)] * 2 + [(128, 1, 1)] * 3
    assert report.served["kernels:add_kernel"] == {
        "archive": "rt@1.0",
        "calls": 0,
        "direct": True,
        "also_served_by": {"rt64@1.0": 3},
    }
    assert "from rt@1.0: 0 launch(es) + direct kernel[grid] launches (not counted); from rt64@1.0: 3 launch(es)" in str(
        report
    )
    assert report.to_json()["served"]["kernels:add_kernel"]["also_served_by"] == {"rt64@1.0": 3}


def test_audit_names_the_archive_of_a_variant_another_archive_holds(
    cuda_archive, block64_archive, kernels_module, tmp_path, monkeypatch
):
    from capture_fakes import fake_gpu

    import karchive

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "tcache"))
    with rs.fake_cuda(monkeypatch, launch_path.PYTHON) as (rec, _b), fake_gpu():
        report = karchive.serve(_arc(cuda_archive, rec), _arc(block64_archive, rec), mode="audit")
        kernels_module.add_kernel[(4,)](buf(), buf(), buf(), 4100, BLOCK=1024)
        kernels_module.add_kernel[(64,)](buf(), buf(), buf(), 4100, BLOCK=64)
    would = report.served["kernels:add_kernel"]["would_launch"]
    assert len(would) == 2 and sum(w.endswith(" (rt64@1.0)") for w in would) == 1, would
    assert report.missed_list == []


def test_a_served_binary_that_needs_more_shared_memory_than_the_device_raises_tritons_out_of_resources(
    cuda_archive, kernels_module, monkeypatch
):
    """Triton's ``CompiledKernel._init_handles`` raises ``OutOfResources`` (required, limit, "shared memory") when
    a binary needs more shared memory than the device allows, on every launch; its autotuner times such a config
    ``inf`` and Inductor's ``_make_launchers`` drops it (a max-autotune choice that fails to load). A served binary
    raises the same, never a karchive error those callers do not catch, and launches nothing."""
    from triton.runtime.errors import OutOfResources

    import karchive

    orig = rs.FakeCuda.cuDeviceGetAttribute

    def small_device(self, attr, dev):
        err, value = orig(self, attr, dev)
        return err, (1024 if attr == "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN" else value)

    monkeypatch.setattr(rs.FakeCuda, "cuDeviceGetAttribute", small_device)
    h = DevBuf(text="fp16")
    with rs.fake_cuda(monkeypatch, launch_path.PYTHON) as (rec, _b):
        karchive.serve(_arc(cuda_archive, rec), mode="strict")
        for _ in range(2):
            with pytest.raises(OutOfResources) as err:
                kernels_module.matmul_kernel[(1,)](
                    h, h, h, 100, 100, 100, 100, 1, 100, 1, 100, 1, BLOCK_M=64, BLOCK_N=64, BLOCK_K=32
                )
            assert err.value.name == "shared memory" and err.value.limit == 1024 and err.value.required > 1024
    assert rec.launches() == []


def test_an_edited_kernel_is_never_served_the_archived_binary(cuda_archive, tmp_path, monkeypatch):
    """Same module name, same qualified name, edited body: Triton's source key differs, so it is a miss.
    The module is imported after serve() started (the patches are on the classes)."""
    import karchive

    with rs.fake_cuda(monkeypatch, launch_path.PYTHON) as (rec, _b):
        karchive.serve(_arc(cuda_archive, rec), mode="strict")
        src = (
            (EXAMPLES / "kernels.py")
            .read_text()
            .replace("tl.store(out_ptr + offsets, x + y, mask=mask)", "tl.store(out_ptr + offsets, x - y, mask=mask)")
        )
        (tmp_path / "kernels.py").write_text(src)
        spec = importlib.util.spec_from_file_location("kernels", tmp_path / "kernels.py")
        edited = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, "kernels", edited)
        spec.loader.exec_module(edited)
        with pytest.raises(ServeMissError, match="built from another source") as err:
            edited.add_kernel[(4,)](buf(), buf(), buf(), 4100, BLOCK=1024)
    assert err.value.kernel == "kernels:add_kernel" and rec.launches() == []


def test_the_same_source_under_another_module_name_is_not_served(cuda_archive, monkeypatch):
    """Identity is module, qualified name and source: ``otherlib:add_kernel`` with add_kernel's exact source is
    not ``kernels:add_kernel``; the miss says the archive has the same source under another name."""
    import karchive

    with rs.fake_cuda(monkeypatch, launch_path.PYTHON) as (rec, _b):
        karchive.serve(_arc(cuda_archive, rec), mode="strict")
        spec = importlib.util.spec_from_file_location("otherlib", EXAMPLES / "kernels.py")
        other = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, "otherlib", other)
        spec.loader.exec_module(other)
        with pytest.raises(ServeMissError, match="same source but another module name") as err:
            other.add_kernel[(4,)](buf(), buf(), buf(), 4100, BLOCK=1024)
    assert err.value.kernel == "otherlib:add_kernel" and rec.launches() == []


def test_pre_run_hooks_run_before_served_launches_even_when_added_later(cuda_archive, kernels_module, monkeypatch):
    import karchive

    seen = []
    with rs.fake_cuda(monkeypatch, launch_path.PYTHON) as (rec, _b):
        karchive.serve(_arc(cuda_archive, rec), mode="strict")
        for _ in range(9):
            kernels_module.add_kernel[(4,)](buf(), buf(), buf(), 4100, BLOCK=1024)
        kernels_module.add_kernel.add_pre_run_hook(lambda *a, **k: seen.append((len(a), "BLOCK" in k)))
        try:
            kernels_module.add_kernel[(4,)](buf(), buf(), buf(), 4100, BLOCK=1024)
        finally:
            kernels_module.add_kernel.pre_run_hooks.clear()
    assert seen == [(4, True)] and len(rec.launches()) == 10


def test_a_library_imported_after_serve_is_served(cuda_archive, monkeypatch):
    """The patches are on Triton's classes: a module whose kernels are decorated after serve() is covered."""
    import karchive

    with rs.fake_cuda(monkeypatch, launch_path.PYTHON) as (rec, _b):
        karchive.serve(_arc(cuda_archive, rec), mode="strict")
        spec = importlib.util.spec_from_file_location("kernels", EXAMPLES / "kernels.py")
        late = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, "kernels", late)
        spec.loader.exec_module(late)
        late.add_kernel[(4,)](buf(), buf(), buf(), 4100, BLOCK=1024)
    assert [la.kernel for la in rec.launches()] == ["add_kernel"]


def test_autotuned_and_heuristics_call_sites_take_the_recorded_choices_without_benchmarking(
    captured, monkeypatch, path
):
    import triton
    import triton.language as tl
    from capture_fakes import heur_copy, scale_rows, tuned_copy, tuned_even_copy
    from serve_kernels import cast_copy, h_over_tuned

    import karchive

    with rs.fake_cuda(monkeypatch, path) as (rec, _b):
        report = karchive.serve(_arc(captured, rec), mode="strict")
        n = 4096
        scale_rows[(4,)](mock(), mock(), 1000, 2.0, BLOCK=256)
        tuned_copy[lambda m: (triton.cdiv(n, m["BLOCK"]),)](mock(), mock(), n)  # config 1: BLOCK=128, 4 warps
        heur_copy[(1,)](mock(), mock(), 1000, BLOCK=128)  # EVEN=False from the library's own lambda
        tuned_even_copy[(1,)](mock(), mock(), 4096)
        cast_copy[(1,)](mock(), DevBuf(text="fp16"), 128, DT=tl.float16, BLOCK=128)  # a tl.dtype constexpr
        h_over_tuned[(1,)](mock(), None, mock(), 4096)  # HAS_B from the library's lambda, then the record
    got = [(la.kernel, la.grid, la.block) for la in rec.launches()]
    # h_over_tuned: the config its capture chose (the scripted timings' cycle decides which)
    record = next(r for r in karchive.open(captured).manifest.autotune if r["kernel"] == "serve_kernels:h_over_tuned")
    assert [e["key"] for e in record["entries"]] == [[4096, False, "fp32", "fp32"]]
    chosen = record["configs"][record["entries"][0]["config"]]
    assert got == [
        ("scale_rows", (4, 1, 1), (128, 1, 1)),
        ("tuned_copy", (32, 1, 1), (128, 1, 1)),
        ("heur_copy", (1, 1, 1), (128, 1, 1)),
        ("tuned_even_copy", (1, 1, 1), (128, 1, 1)),
        ("cast_copy", (1, 1, 1), (128, 1, 1)),
        ("h_over_tuned", (1, 1, 1), (32 * chosen["num_warps"], 1, 1)),
    ]
    # Triton's own autotuner chose, from the archive's decisions: nothing was timed or launched to tune
    assert [c.kwargs for c in tuned_copy.cache.values()] == [{"BLOCK": 128}]
    assert all(t[0] in (0.0, float("inf")) for t in tuned_copy.configs_timings.values())
    assert set(report.served) == {
        f"capture_fakes:{k}" for k in ("scale_rows", "tuned_copy", "heur_copy", "tuned_even_copy")
    } | {"serve_kernels:cast_copy", "serve_kernels:h_over_tuned"}
    assert [c.num_warps for c in h_over_tuned.fn.cache.values()] == [chosen["num_warps"]]
    # the heuristic picked the EVEN=False variant: its key differs from the EVEN=True one captured for n=1024
    arc = karchive.open(captured)
    even = {v.constexprs["EVEN"]: v for v in arc.variants("capture_fakes:heur_copy")}
    assert set(even) == {True, False}


def test_config_pre_hooks_run_for_the_recorded_config_and_best_config_is_set(captured, monkeypatch, path):
    """Triton's Autotuner.run calls the chosen config's pre_hook before the launch (descriptor kernels set each
    descriptor's block there) and leaves the choice in ``best_config`` (Liger's fused MLP reads it after the call).
    A served call site does both with the archive's recorded config, and still benchmarks nothing."""
    import serve_kernels
    from serve_kernels import hooked_copy

    import karchive

    record = next(r for r in karchive.open(captured).manifest.autotune if r["kernel"] == "serve_kernels:hooked_copy")
    chosen = record["configs"][record["entries"][0]["config"]]
    serve_kernels.HOOK_CALLS.clear()
    hooked_copy.best_config = None
    with rs.fake_cuda(monkeypatch, path) as (rec, _b):
        report = karchive.serve(_arc(captured, rec), mode="strict")
        for _ in range(3):  # past the warm-up after which plain routes go direct: this one must not
            hooked_copy[(1,)](mock(), mock(), 2048)
    assert "serve_kernels:hooked_copy" in report.served and report.missed_list == []
    assert list(hooked_copy.cache.values()) == [hooked_copy.best_config]  # chosen once, from the records
    block = chosen["kwargs"]["BLOCK"]
    assert [b for b, _names in serve_kernels.HOOK_CALLS] == [block] * 3
    assert set(serve_kernels.HOOK_CALLS[0][1]) >= {"x_ptr", "out_ptr", "n", "BLOCK", "num_warps"}
    assert hooked_copy.best_config.kwargs == {"BLOCK": block}
    assert hooked_copy.best_config.num_warps == chosen["num_warps"]
    assert [la.block for la in rec.launches()] == [(32 * chosen["num_warps"], 1, 1)] * 3


def test_a_library_wrapper_class_around_an_autotuner_still_serves(captured, monkeypatch):
    """A library's Autotuner subclass with its own run (fla's CachedAutotuner shape) ends in Autotuner.run."""
    from capture_fakes import tuned_copy
    from triton.runtime.autotuner import Autotuner

    import karchive

    seen = []

    class LibraryAutotuner(Autotuner):
        def run(self, *args, **kwargs):
            seen.append(len(args))
            return super().run(*args, **kwargs)

    wrapped = LibraryAutotuner(tuned_copy.fn, tuned_copy.arg_names, tuned_copy.configs, tuned_copy.keys, None, None)
    with rs.fake_cuda(monkeypatch, launch_path.PYTHON) as (rec, _b):
        karchive.serve(_arc(captured, rec), mode="strict")
        wrapped[(32,)](mock(), mock(), 4096)
    assert seen == [3] and [la.block for la in rec.launches()] == [(128, 1, 1)]


# -- fallback, audit ------------------------------------------------------------------------------------------
def test_fallback_runs_misses_through_triton_reports_once_and_writes_a_buildable_spec(
    cuda_archive, kernels_module, tmp_path, monkeypatch
):
    from capture_fakes import fake_gpu

    import karchive

    misses = tmp_path / "misses.toml"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "tcache"))
    with rs.fake_cuda(monkeypatch, launch_path.PYTHON) as (rec, _b), fake_gpu() as fake:
        report = karchive.serve(_arc(cuda_archive, rec), mode="fallback", misses=misses)
        x, y, out = buf(), buf(), buf()
        kernels_module.add_kernel[(4,)](x, y, out, 4100, BLOCK=1024)  # served
        kernels_module.add_kernel[(64,)](x, y, out, 4100, BLOCK=64)  # miss: Triton compiles and launches
        kernels_module.add_kernel[(64,)](x, y, out, 4100, BLOCK=64)  # the same miss: Triton's cache has it now
    assert len(rec.launches()) == 1 and fake.launches == 2
    assert [(m["kernel"], m["count"]) for m in report.missed_list] == [("kernels:add_kernel", 1)]
    text = misses.read_text()
    assert 'source = "kernels:add_kernel"' in text and 'signature = "*fp32:16, *fp32:16, *fp32:16, i32"' in text
    assert "constexprs = { BLOCK = [64] }" in text

    # the misses file is the next archive's build spec: build it, serve from both, the miss is served
    from karchive.producer.build import build_archive
    from karchive.producer.build.spec_file import load_spec

    monkeypatch.chdir(tmp_path)
    built = tmp_path / "next.karc"
    build_archive(load_spec(misses), built, progress=False)
    karchive.serve.stop()
    from capture_fakes import fresh

    fresh(kernels_module.add_kernel)  # a new process: Triton's memory holds nothing it compiled in fallback
    with rs.fake_cuda(monkeypatch, launch_path.PYTHON) as (rec, _b):
        report = karchive.serve(_arc(cuda_archive, rec), _arc(built, rec), mode="strict")
        kernels_module.add_kernel[(64,)](buf(), buf(), buf(), 4100, BLOCK=64)
    assert len(rec.launches()) == 1 and report.missed_list == []


def test_an_autotuned_miss_becomes_a_spec_entry_the_build_tunes(cuda_archive, tmp_path, monkeypatch, triton_side):
    """Fallback on an autotuned kernel the archive lacks: Triton tunes and runs it, compiling each config it times;
    each compile is a spec entry with that config, so the build compiles every config. Served from the rebuilt
    archive, Triton compiles nothing; that archive holds configs but no decisions, so Triton's autotuner times the
    archive's binaries once for the key (the report says so) and the next call is one launch."""
    from capture_fakes import fake_gpu, fresh, tuned_copy

    import karchive

    misses = tmp_path / "misses.toml"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "tcache"))
    fresh(tuned_copy)
    with rs.fake_cuda(monkeypatch, launch_path.PYTHON) as (rec, _b), fake_gpu(timings=[3.0, 1.0, 2.0]) as fake:
        report = karchive.serve(_arc(cuda_archive, rec), mode="fallback", misses=misses)
        tuned_copy[(32,)](buf(), buf(), 4096)
    assert fake.launches >= 1 and rec.launches() == []
    assert {m["kernel"] for m in report.missed_list} == {"capture_fakes:tuned_copy"}
    entries = misses.read_text().split("[[kernel]]")[1:]
    assert len(entries) == len(tuned_copy.configs)
    assert all(
        'source = "capture_fakes:tuned_copy"' in e and 'signature = "*fp32:16, *fp32:16, i32:16"' in e for e in entries
    )
    assert sorted(e.split("BLOCK = [")[1].split("]")[0] for e in entries) == sorted(
        str(c.kwargs["BLOCK"]) for c in tuned_copy.configs
    )

    from karchive.producer.build import build_archive
    from karchive.producer.build.spec_file import load_spec

    built = tmp_path / "next.karc"
    build_archive(load_spec(misses), built, progress=False)
    assert len(karchive.open(built).variants("capture_fakes:tuned_copy")) == 3
    karchive.serve.stop()
    fresh(tuned_copy)
    del triton_side[:]
    with rs.fake_cuda(monkeypatch, launch_path.PYTHON) as (rec, _b):
        report = karchive.serve(_arc(built, rec), mode="strict")
        tuned_copy[(32,)](buf(), buf(), 4096)
        tuning = len(rec.launches())
        tuned_copy[(32,)](buf(), buf(), 4096)
    assert tuning == len(tuned_copy.configs) + 1 and len(rec.launches()) == tuning + 1  # each config timed once
    assert report.missed_list == [] and len(tuned_copy.cache) == 1 and triton_side == []
    assert report.served["capture_fakes:tuned_copy"].get("tunes_on_device") is True


def test_fallback_under_capture_records_the_misses_as_an_archive(cuda_archive, kernels_module, tmp_path, monkeypatch):
    """``karchive.capture`` around a fallback session records exactly what Triton compiled for the misses (with
    autotune decisions and heuristics cases): the next archive, ready to serve strictly."""
    from capture_fakes import fake_gpu, fresh, tuned_copy

    import karchive

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "tcache"))
    fresh(tuned_copy, kernels_module.add_kernel)
    with rs.fake_cuda(monkeypatch, launch_path.PYTHON) as (rec, _b), fake_gpu(timings=[3.0, 1.0, 2.0]):
        karchive.serve(_arc(cuda_archive, rec), mode="fallback")
        with karchive.capture("misses", version="2", strict=True) as cap:
            kernels_module.add_kernel[(4,)](buf(), buf(), buf(), 4100, BLOCK=1024)  # served: nothing compiled
            kernels_module.add_kernel[(64,)](buf(), buf(), buf(), 4100, BLOCK=64)  # miss: Triton compiles it
            tuned_copy[(32,)](buf(), buf(), 4096)  # miss: Triton tunes and compiles
    cap.save(tmp_path / "misses.karc")
    karchive.serve.stop()
    nxt = karchive.open(tmp_path / "misses.karc")
    assert sorted(nxt.kernels()) == ["capture_fakes:tuned_copy", "kernels:add_kernel"]
    assert {v.constexprs["BLOCK"] for v in nxt.variants("kernels:add_kernel")} == {64}
    fresh(tuned_copy, kernels_module.add_kernel)
    with rs.fake_cuda(monkeypatch, launch_path.PYTHON) as (rec, _b):
        report = karchive.serve(_arc(cuda_archive, rec), _arc(tmp_path / "misses.karc", rec), mode="strict")
        kernels_module.add_kernel[(4,)](buf(), buf(), buf(), 4100, BLOCK=1024)
        kernels_module.add_kernel[(64,)](buf(), buf(), buf(), 4100, BLOCK=64)
        tuned_copy[(32,)](buf(), buf(), 4096)  # the key holds str(dtype) as the captured call's did
    assert len(rec.launches()) == 3 and report.missed_list == []
    assert "tunes_on_device" not in report.served["capture_fakes:tuned_copy"]  # the decision was captured


def test_audit_lets_triton_run_everything_and_says_what_would_be_served(
    cuda_archive, kernels_module, tmp_path, monkeypatch
):
    from capture_fakes import fake_gpu

    import karchive

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "tcache"))
    with rs.fake_cuda(monkeypatch, launch_path.PYTHON) as (rec, _b), fake_gpu() as fake:
        report = karchive.serve(_arc(cuda_archive, rec), mode="audit")
        kernels_module.add_kernel[(4,)](buf(), buf(), buf(), 4100, BLOCK=1024)
        kernels_module.add_kernel[(64,)](buf(), buf(), buf(), 4100, BLOCK=64)
    assert rec.launches() == [] and fake.launches == 2  # Triton launched both
    assert report.served["kernels:add_kernel"]["would_launch"]  # a variant key
    assert [m["kernel"] for m in report.missed_list] == ["kernels:add_kernel"]
    assert "BLOCK=1024" in report.missed_list[0]["reason"]
    assert "served  kernels:add_kernel" in str(report)


def test_stop_gives_triton_its_methods_back():
    import triton
    import triton.compiler.compiler as cc
    from triton.runtime.autotuner import Autotuner, Heuristics
    from triton.runtime.jit import JITFunction, KernelInterface

    import karchive.serve

    def now():
        return (
            JITFunction.run,
            Autotuner.run,
            Heuristics.run,
            KernelInterface.__getitem__,
            Autotuner._bench,
            cc.compile,
            triton.compiler.compile,
            triton.compile,
        )

    before = now()
    karchive.serve(mode="strict")
    assert cc.compile is not before[5] and Autotuner._bench is not before[4]
    assert now()[:3] == before[:3]  # Triton's runtime dispatches served calls itself
    assert KernelInterface.__getitem__ is not before[3]  # (a served plain kernel's fast path)
    karchive.serve.stop()
    assert now() == before
    with pytest.raises(Exception, match="mode must be one of"):
        karchive.serve(mode="lenient")


# -- processes whose code is not touched ---------------------------------------------------------------------
_PROGRAM = """
import sys
sys.path[:0] = [{tests!r}, {examples!r}]
import runtime_support as rs
from karchive.runtime import backend as backend_mod, launch_path
from karchive.runtime.drivers.cuda import CudaBackend

# TEST DOUBLE for the missing GPU (the program's launch would reach the driver here)
rec = rs.Recorder()
ctx = launch_path.forced(launch_path.PYTHON); ctx.__enter__()
backend_mod._backends = {{"cuda": CudaBackend(rs.FakeCuda(rec))}}
import karchive
rs.register_sizes(rec, karchive.open({archive!r}))
import kernels                               # the library, unchanged
if not getattr(sys.modules["triton"], "__karchive_shim__", False):  # Triton's runtime needs its driver: no GPU here
    import capture_fakes
    gpu = capture_fakes.fake_gpu(); gpu.__enter__()
from test_serve import DevBuf
kernels.add_kernel[(4,)](DevBuf(0x7F0000000000), DevBuf(0x7F0000001000), DevBuf(0x7F0000002000), 4100, BLOCK=1024)
print("LAUNCHES", len(rec.launches()), "TRITON_IS_SHIM", getattr(sys.modules["triton"], "__karchive_shim__", False))
"""


def _run(code_path, args, env_extra, tmp_path, hide_triton=False):
    env = {**os.environ, **env_extra, "PYTHONPATH": str(ROOT)}
    pre = []
    if hide_triton:  # a process where Triton is not installed: its real package cannot be imported
        (tmp_path / "hide").mkdir(exist_ok=True)
        (tmp_path / "hide" / "sitecustomize.py").write_text(
            "import sys\nsys.modules['triton'] = None  # `import triton` raises ImportError\n"
        )
        env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "hide"), str(ROOT)])
    return subprocess.run(
        [sys.executable, *pre, *args, str(code_path)], env=env, capture_output=True, text=True, timeout=300
    )


def test_env_runner_serves_a_program_it_does_not_touch_and_reports_at_exit(cuda_archive, tmp_path):
    prog = tmp_path / "prog.py"
    prog.write_text(_PROGRAM.format(tests=str(ROOT / "tests"), examples=str(EXAMPLES), archive=str(cuda_archive)))
    report = tmp_path / "report.json"
    r = subprocess.run(
        [sys.executable, "-m", "karchive.serve", "--", str(prog)],
        capture_output=True,
        text=True,
        timeout=300,
        env={
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "KARCHIVE_SERVE": str(cuda_archive),
            "KARCHIVE_SERVE_MODE": "strict",
            "KARCHIVE_SERVE_REPORT": str(report),
        },
    )
    assert r.returncode == 0, r.stderr
    assert "LAUNCHES 1 TRITON_IS_SHIM False" in r.stdout
    data = json.loads(report.read_text())
    assert data["mode"] == "strict" and data["served"]["kernels:add_kernel"]["direct"] is True


def test_without_triton_the_shim_imports_the_library_and_serves_it(cuda_archive, tmp_path):
    prog = tmp_path / "prog.py"
    prog.write_text(
        f"import karchive.serve\nkarchive.serve({str(cuda_archive)!r}, mode='strict')\n"
        + _PROGRAM.format(tests=str(ROOT / "tests"), examples=str(EXAMPLES), archive=str(cuda_archive))
    )
    prog.write_text(
        prog.read_text()
        + textwrap.dedent("""
        # what library modules use at import time, from the shim
        import triton, triton.language as tl
        from triton.language.extra.libdevice import rsqrt
        from triton.language.math import tanh
        from packaging.version import Version
        Version(triton.__version__)
        assert triton.cdiv(10, 4) == 3 and triton.next_power_of_2(100) == 128 and str(tl.bfloat16) == "bf16"
        # what torch runs at import once `import triton` succeeds (torch/_inductor/runtime/hints.py and
        # torch/utils/_triton.py; Liger-Kernel's import reaches them): no backend, no AttrsDescriptor, no compiler
        import triton.backends.compiler, triton.compiler.compiler
        assert triton.backends.backends == {} and not hasattr(triton.backends.compiler, "AttrsDescriptor")
        assert not hasattr(triton, "compile") and not hasattr(triton.compiler, "compile")
        # host descriptors as libraries build them at the call site (Liger's fused MLP), re-blocked by a pre_hook
        from triton.tools.tensor_descriptor import TensorDescriptor
        class T:
            shape, dtype = (4, 64), "float16"
            def stride(self):
                return (64, 1)
        d = TensorDescriptor.from_tensor(T(), [1, 1], padding="zero")
        d.block_shape = [4, 32]
        assert (d.shape, d.strides, d.block_shape, d.padding) == ([4, 64], [64, 1], [4, 32], "zero")
        try:
            TensorDescriptor(T(), [4, 64], [1, 64], [4, 32])
        except karchive.errors.ArgumentError as exc:
            assert "contiguous" in str(exc)
        else:
            raise AssertionError("a non-contiguous last dimension was accepted")
        print("SHIM OK", triton.__version__)
    """)
    )
    r = _run(prog, [], {}, tmp_path, hide_triton=True)
    assert r.returncode == 0, r.stderr
    assert "LAUNCHES 1 TRITON_IS_SHIM True" in r.stdout and "SHIM OK 0.0.0+karchive.shim" in r.stdout
    # and a process without Triton cannot ask for fallback: nothing could compile a miss
    bad = tmp_path / "bad.py"
    bad.write_text(f"import karchive.serve\nkarchive.serve({str(cuda_archive)!r}, mode='fallback')\n")
    r = _run(bad, [], {}, tmp_path, hide_triton=True)
    assert r.returncode != 0 and "needs Triton to compile misses" in r.stderr


def test_the_runner_makes_child_python_processes_serve_too(cuda_archive, tmp_path):
    """python -m karchive.serve puts karchive/serve/boot on PYTHONPATH: a worker the program starts serves from
    the same variables (its sitecustomize), and the environment's own sitecustomize still runs after it."""
    (tmp_path / "own").mkdir()
    (tmp_path / "own" / "sitecustomize.py").write_text("import os\nos.environ['OWN_SITECUSTOMIZE_RAN'] = '1'\n")
    child = tmp_path / "child.py"
    child.write_text(
        textwrap.dedent("""
        import os, karchive.serve
        r = karchive.serve.serve_report()
        print("CHILD", r is not None and r.mode, r is not None and r.archives, os.environ.get("OWN_SITECUSTOMIZE_RAN"))
    """)
    )
    prog = tmp_path / "parent.py"
    prog.write_text(f"import subprocess, sys\nsubprocess.run([sys.executable, {str(child)!r}], check=True)\n")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path / "own")]),
        "KARCHIVE_SERVE": str(cuda_archive),
        "KARCHIVE_SERVE_MODE": "audit",
    }
    r = subprocess.run(
        [sys.executable, "-m", "karchive.serve", "--", str(prog)], capture_output=True, text=True, timeout=300, env=env
    )
    assert r.returncode == 0, r.stderr
    assert "CHILD audit ['rt@1.0'] 1" in r.stdout


def test_the_shims_autotuner_carries_the_attributes_libraries_read_as_tritons_does():
    """Libraries subclass Triton's Autotuner and read its attributes in __init__ (fla's CachedAutotuner:
    ``user_defined_pre_hook``, ``reset_to_zero``...; on the H100 the shim lacked them and fla did not import).
    The shim's values equal real Triton's for the same decorator arguments."""
    import importlib

    import triton
    import triton.language as tl

    shim_mod = importlib.import_module("karchive.serve.shim.triton.runtime.autotuner")
    names = (
        "user_defined_pre_hook",
        "user_defined_post_hook",
        "reset_to_zero",
        "restore_value",
        "keys",
        "early_config_prune",
        "perf_model",
        "configs_top_k",
    )

    @triton.jit
    def k(x_ptr, n, BLOCK: tl.constexpr):
        pass

    def prune(configs, nargs, **kw):
        return configs

    for pre in (None, lambda kw: None):
        kwargs = dict(
            configs=[triton.Config({"BLOCK": 64})],
            key=["n"],
            reset_to_zero=["x_ptr"],
            prune_configs_by={"early_config_prune": prune},
            pre_hook=pre,
        )
        real = triton.autotune(**kwargs)(k)
        shim = shim_mod.autotune(**dict(kwargs, configs=[shim_mod.Config({"BLOCK": 64})]))(k)
        for name in names:
            assert getattr(shim, name) == getattr(real, name), name


# -- the fast path of plain call sites ----------------------------------------------------------------------
def test_a_plain_call_site_takes_the_fast_path_once_triton_agreed_for_its_key(
    cuda_archive, kernels_module, monkeypatch, path, triton_side
):
    """``kernel[grid]`` of a served plain kernel is karchive's dispatcher once Triton's own run (warmup) compiled
    the same variant for the call's selection key: later launches with that key never enter Triton's run, and
    return the same CompiledKernel; a new key asks Triton again; a call karchive cannot select for is Triton's."""
    from triton.runtime.jit import JITFunction

    import karchive

    runs: list[bool] = []
    orig = JITFunction.run

    def spy(self, *args, **kwargs):
        runs.append(bool(kwargs.get("warmup")))
        return orig(self, *args, **kwargs)

    monkeypatch.setattr(JITFunction, "run", spy)
    kernels_module.add_kernel.device_caches.clear()
    kernels_module.add_kernel.__dict__.pop("_karchive_fast", None)
    with rs.fake_cuda(monkeypatch, path) as (rec, _b):
        report = karchive.serve(_arc(cuda_archive, rec), mode="strict")
        x, y, out = DevBuf(A), DevBuf(A + 4096), DevBuf(A + 8192)
        got = [kernels_module.add_kernel[(4,)](x, y, out, 4100, BLOCK=1024) for _ in range(5)]
        assert runs == [True]  # Triton asked once (warmup: it compiled, from the archive, and launched nothing)
        odd = DevBuf(A + 4)  # another selection key (unaligned, 8 warps): Triton asked again
        kernels_module.add_kernel[(2,)](odd, odd, odd, 4100, BLOCK=1024, num_warps=8)
        assert runs == [True, True]
        with pytest.raises(ServeMissError):  # karchive has no variant: Triton's path, its miss
            kernels_module.add_kernel[(4,)](x, y, out, 4100, BLOCK=256)
    assert len({id(g) for g in got}) == 1 and got[0].__dict__["_karchive_served"][0] == "rt@1.0"
    assert [la.grid for la in rec.launches()] == [(4, 1, 1)] * 5 + [(2, 1, 1)]
    assert report.served["kernels:add_kernel"]["direct"] is True and triton_side == []


def test_the_fast_path_ends_where_triton_would_launch_another_binary(
    cuda_archive, kernels_module, monkeypatch, triton_side
):
    """A pointer whose dtype Triton reads otherwise than karchive (a buffer whose str(dtype) says fp16 while its
    name says float32): Triton's own path decides, and the fast path is off for that kernel for good."""
    import karchive

    kernels_module.add_kernel.device_caches.clear()
    kernels_module.add_kernel.__dict__.pop("_karchive_fast", None)
    odd = DevBuf(A)
    odd.dtype = _Dtype("fp16")
    odd.dtype.name = "float32"
    with rs.fake_cuda(monkeypatch, launch_path.PYTHON) as (rec, _b):
        karchive.serve(_arc(cuda_archive, rec), mode="strict")
        with pytest.raises(ServeMissError, match=r"\*fp16"):  # Triton specialised *fp16: no such variant
            kernels_module.add_kernel[(4,)](odd, odd, odd, 4100, BLOCK=1024)
        fast = kernels_module.add_kernel.__dict__["_karchive_fast"][1]
        assert fast.on is False and rec.launches() == []


def test_an_autotuned_call_site_takes_the_fast_path_and_sets_best_config_as_triton(
    captured, monkeypatch, path, triton_side
):
    """``tuned[grid](...)`` of a served ``@triton.autotune`` kernel: the first call of a key is confirmed with
    Triton's own Autotuner.run (warmup), later ones launch through karchive's dispatcher, return Triton's
    CompiledKernel and leave ``best_config`` as Triton would."""
    from capture_fakes import fresh, tuned_copy

    import karchive

    runs = _spy_tuner_runs(monkeypatch)
    fresh(tuned_copy)
    tuned_copy.__dict__.pop("_karchive_fast", None)
    with rs.fake_cuda(monkeypatch, path) as (rec, _b):
        karchive.serve(_arc(captured, rec), mode="strict")
        got = []
        for _ in range(4):
            tuned_copy.best_config = None
            got.append(tuned_copy[(32,)](mock(), mock(), 4096))
            assert tuned_copy.best_config is not None and tuned_copy.best_config.kwargs == {"BLOCK": 128}
    assert runs == [True] and len({id(g) for g in got}) == 1 and got[0].metadata.num_warps == 4
    assert [la.block for la in rec.launches()] == [(128, 1, 1)] * 4 and triton_side == []


@pytest.fixture(scope="module")
def two_keys(tmp_path_factory):
    """A capture of capture_fakes' ``tuned_copy`` for two keys whose winners differ (scripted timings: n=4096 ->
    BLOCK 128 / 4 warps, n=1024 -> BLOCK 64 / 2 warps)."""
    from capture_fakes import fake_gpu, fresh, ptr, tuned_copy

    import karchive

    base = tmp_path_factory.mktemp("two-keys")
    with pytest.MonkeyPatch.context() as mp:  # module scope: the cache variable set for the capture alone
        mp.setenv("TRITON_CACHE_DIR", str(base / "cache"))
        fresh(tuned_copy)
        with fake_gpu(timings=[3.0, 1.0, 2.0, 1.0, 2.0, 3.0]):
            with karchive.capture("two-keys", version="1", strict=True) as cap:
                tuned_copy[(1,)](ptr(), ptr(), 4096)
                tuned_copy[(1,)](ptr(), ptr(), 1024)
        fresh(tuned_copy)
    out = base / "two-keys.karc"
    cap.save(out)
    return out


def _karchive_python_calls(fn):
    """The Python functions of karchive's own modules entered while ``fn()`` runs ("module.py:name", in order), but
    for runtime/args.py (reading a duck-typed pointer argument: what a plain kernel's launch pays as well)."""
    import karchive

    home = pathlib.Path(karchive.__file__).parent
    seen: list[str] = []

    def profile(frame, event, arg):
        file = pathlib.Path(frame.f_code.co_filename)
        if event == "call" and home in file.parents and file != home / "runtime" / "args.py":
            seen.append(f"{file.name}:{frame.f_code.co_name}")

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return seen


def _spy_tuner_runs(monkeypatch):
    """Every ``Autotuner.run`` call: whether it was a warmup (Triton confirming a key) or a launch."""
    from triton.runtime.autotuner import Autotuner

    runs: list[bool] = []
    orig = Autotuner.run

    def spy(self, *args, **kwargs):
        runs.append(bool(kwargs.get("warmup")))
        return orig(self, *args, **kwargs)

    monkeypatch.setattr(Autotuner, "run", spy)
    return runs


def test_a_served_autotuned_call_site_sets_best_config_per_launch_as_triton_with_alternating_keys(
    two_keys, monkeypatch, path, triton_side
):
    """Two autotune keys with different configs, launched alternately: each launch leaves ``best_config`` the very
    Config Triton's own ``Autotuner.run`` sets for that key (its ``cache[key]``), launches that config's variant,
    and returns Triton's CompiledKernel; each key is confirmed with Triton once. On the compiled path a steady-state
    launch runs no Python beyond the served ``KernelInterface.__getitem__`` (best_config is set in C)."""
    from capture_fakes import fresh, tuned_copy

    import karchive

    runs = _spy_tuner_runs(monkeypatch)
    fresh(tuned_copy)
    tuned_copy.__dict__.pop("_karchive_fast", None)
    x, o = mock(), mock()
    with rs.fake_cuda(monkeypatch, path) as (rec, _b):
        karchive.serve(_arc(two_keys, rec), mode="strict")
        got: dict[int, set[int]] = {}
        for n in (4096, 1024) * 3:
            tuned_copy.best_config = None
            got.setdefault(n, set()).add(id(tuned_copy[(4,)](x, o, n)))
            assert tuned_copy.best_config is tuned_copy.cache[(n, "fp32", "fp32")], n
        steady = _karchive_python_calls(lambda: tuned_copy[(4,)](x, o, 1024))
    assert runs == [True, True]  # one confirmation per key; every other launch is karchive's
    assert tuned_copy.best_config.kwargs == {"BLOCK": 64} and tuned_copy.best_config.num_warps == 2
    assert tuned_copy.cache[(4096, "fp32", "fp32")].kwargs == {"BLOCK": 128}
    assert all(len(ids) == 1 for ids in got.values()) and got[4096] != got[1024]
    assert [la.block for la in rec.launches()] == [(128, 1, 1), (64, 1, 1)] * 3 + [(64, 1, 1)]
    if path == launch_path.EXTENSION:
        assert steady == ["boundary.py:_getitem"], steady
    assert triton_side == []


def test_a_served_autotuned_launch_that_raises_leaves_best_config_as_triton_does(
    two_keys, monkeypatch, path, triton_side
):
    """Triton's ``Autotuner.run`` sets ``best_config`` before its launch: a launch whose grid raises leaves it set to
    the key's config. The served fast path sets it at the same point."""
    from capture_fakes import fresh, tuned_copy

    import karchive

    fresh(tuned_copy)
    tuned_copy.__dict__.pop("_karchive_fast", None)
    x, o = mock(), mock()

    def bad_grid(meta):
        raise ZeroDivisionError("grid")

    with rs.fake_cuda(monkeypatch, path) as (rec, _b):
        karchive.serve(_arc(two_keys, rec), mode="strict")
        tuned_copy[(4,)](x, o, 4096)
        tuned_copy[(4,)](x, o, 1024)
        for n in (4096, 1024):
            tuned_copy.best_config = None
            with pytest.raises(ZeroDivisionError, match="grid"):
                tuned_copy[bad_grid](x, o, n)
            assert tuned_copy.best_config is tuned_copy.cache[(n, "fp32", "fp32")]
        assert tuned_copy.__dict__["_karchive_fast"][1].on
    assert len(rec.launches()) == 2 and triton_side == []


def test_a_served_autotuned_call_karchive_cannot_select_for_is_answered_by_triton(
    two_keys, monkeypatch, path, triton_side
):
    """A served autotuned call site whose call karchive has no variant for (fp16 pointers: never captured) gets
    Triton's own answer (strict serving: the boundary's miss for Triton's key, raised from Triton's
    ``Autotuner.run``), no error of karchive's dispatcher and no launch; calls with the captured key stay karchive's."""
    from capture_fakes import fresh, tuned_copy

    import karchive

    runs = _spy_tuner_runs(monkeypatch)
    fresh(tuned_copy)
    tuned_copy.__dict__.pop("_karchive_fast", None)
    half = DevBuf(A, "fp16")
    with rs.fake_cuda(monkeypatch, path) as (rec, _b):
        karchive.serve(_arc(two_keys, rec), mode="strict")
        tuned_copy[(4,)](mock(), mock(), 4096)
        with pytest.raises(ServeMissError, match=r"autotune key \[4096, 'fp16', 'fp16'\] matches no recorded"):
            tuned_copy[(4,)](half, half, 4096)
        tuned_copy[(4,)](mock(), mock(), 4096)
    assert runs == [True, False]  # the confirmation of the captured key; Triton's own run of the fp16 call
    assert [la.block for la in rec.launches()] == [(128, 1, 1)] * 2 and triton_side == []


def test_a_launch_hook_or_pre_run_hook_turns_a_served_autotuned_call_site_to_triton(
    two_keys, monkeypatch, path, triton_side
):
    """``knobs.runtime.launch_enter_hook`` (profilers) or a JIT ``pre_run_hook`` set after the fast path is warm:
    the next ``tuned[grid](...)`` is Triton's own ``Autotuner.run`` (the hooks run); the fast path is back once
    they are gone."""
    import triton
    from capture_fakes import fresh, tuned_copy

    import karchive

    runs = _spy_tuner_runs(monkeypatch)
    fresh(tuned_copy)
    tuned_copy.__dict__.pop("_karchive_fast", None)
    x, o = mock(), mock()
    hooked: list[str] = []
    rt = triton.knobs.runtime

    def enter(md):
        hooked.append("enter")

    with rs.fake_cuda(monkeypatch, path) as (rec, _b):
        karchive.serve(_arc(two_keys, rec), mode="strict")
        tuned_copy[(4,)](x, o, 4096)
        tuned_copy[(4,)](x, o, 4096)
        assert runs == [True]
        rt.launch_enter_hook.add(enter)
        try:
            tuned_copy[(4,)](x, o, 4096)
        finally:
            rt.launch_enter_hook.remove(enter)
        assert runs == [True, False]
        tuned_copy.fn.add_pre_run_hook(lambda *a, **k: hooked.append("pre_run"))
        try:
            tuned_copy[(4,)](x, o, 4096)
        finally:
            tuned_copy.fn.pre_run_hooks.clear()
        assert runs == [True, False, False]
        tuned_copy.best_config = None
        tuned_copy[(4,)](x, o, 4096)
    assert runs == [True, False, False] and hooked == ["enter", "pre_run"]
    assert tuned_copy.best_config is tuned_copy.cache[(4096, "fp32", "fp32")]
    assert [la.block for la in rec.launches()] == [(128, 1, 1)] * 5 and triton_side == []


def test_a_library_that_prefilled_the_autotuner_cache_gets_its_own_config_as_with_triton(
    captured, monkeypatch, path, triton_side
):
    """Libraries fill ``Autotuner.cache`` themselves (tables per GPU): Triton then launches their config, not the
    archive's decision. Served, the same: the fast path sees Triton's answer differ and leaves it to Triton."""
    from capture_fakes import fresh, tuned_copy

    import karchive

    fresh(tuned_copy)
    tuned_copy.__dict__.pop("_karchive_fast", None)
    other = next(c for c in tuned_copy.configs if c.kwargs != {"BLOCK": 128})
    with rs.fake_cuda(monkeypatch, path) as (rec, _b):
        karchive.serve(_arc(captured, rec), mode="strict")
        key = (4096, "fp32", "fp32")
        tuned_copy.cache[key] = other
        try:
            out = tuned_copy[(32,)](mock(), mock(), 4096)  # the capture compiled every config: it is archived
        finally:
            tuned_copy.cache.clear()
    assert tuned_copy.__dict__["_karchive_fast"][1].on is False
    assert tuned_copy.best_config is other and out.metadata.num_warps == other.num_warps
    assert [la.block for la in rec.launches()] == [(32 * other.num_warps, 1, 1)] and triton_side == []


# -- review findings (wt/hostile2): calls where the served dispatcher and Triton's own run answer differently ------
def test_a_served_autotuned_call_whose_grid_triton_takes_is_answered_as_triton_does(
    two_keys, monkeypatch, path, triton_side
):
    """Triton's ``JITFunction.run`` launches a grid of more than three dims with its first three (``grid[0..2]``);
    karchive's grid check refuses it (ArgumentError). A served call site hands such a grid to Triton's own
    ``__getitem__`` before the dispatcher sees it (the compiled dispatcher checks the grid after the key was
    memoised, where no refusal is handed over)."""
    from capture_fakes import fresh, tuned_copy

    import karchive

    runs = _spy_tuner_runs(monkeypatch)
    fresh(tuned_copy)
    tuned_copy.__dict__.pop("_karchive_fast", None)
    x, o = mock(), mock()
    with rs.fake_cuda(monkeypatch, path) as (rec, _b):
        karchive.serve(_arc(two_keys, rec), mode="strict")
        first = tuned_copy[(4,)](x, o, 4096)
        got = tuned_copy[(4, 1, 1, 1)](x, o, 4096)
    assert runs == [True, False]  # the confirmation, then Triton's own run of the 4-dim grid
    assert got is first  # Triton's CompiledKernel of the key's variant


def test_a_served_call_with_a_stream_keyword_is_refused_as_triton_refuses_it(two_keys, monkeypatch, path, triton_side):
    """Triton refuses ``kernel[grid](..., stream=s)`` (``stream`` joins the options, so its cache misses and
    ``_pack_args`` asserts "stream option is deprecated"). Served, the first call of a key with ``stream=`` is
    Triton's refusal (the confirmation passes it on), but once the key is memoised the dispatcher takes ``stream``
    as its own keyword and launches on it."""
    from capture_fakes import fresh, tuned_copy

    import karchive

    fresh(tuned_copy)
    tuned_copy.__dict__.pop("_karchive_fast", None)
    x, o = mock(), mock()
    with rs.fake_cuda(monkeypatch, path) as (rec, _b):
        karchive.serve(_arc(two_keys, rec), mode="strict")
        with pytest.raises(AssertionError, match="stream option is deprecated"):
            tuned_copy.run(x, o, 4096, grid=(4,), warmup=False, stream=0)  # Triton's own answer
        fresh(tuned_copy)
        tuned_copy.__dict__.pop("_karchive_fast", None)
        tuned_copy[(4,)](x, o, 4096)
        n = len(rec.launches())
        with pytest.raises(AssertionError, match="stream option is deprecated"):
            tuned_copy[(4,)](x, o, 4096, stream=0)
        assert len(rec.launches()) == n


def test_a_library_that_changes_the_autotuner_cache_after_a_key_is_confirmed_gets_its_config_as_with_triton(
    captured, monkeypatch, path, triton_side
):
    """A library that sets ``Autotuner.cache[key]`` after the key was first launched (a table loaded late, a re-tune)
    gets that config from Triton's own ``run`` (``config = self.cache[key]``): ``best_config`` and the launch. Served,
    the key was confirmed once and memoised; the change turns the call site's fast path off, so Triton's own run
    reads the new entry (its binary from the archive)."""
    from capture_fakes import fresh, tuned_copy

    import karchive

    fresh(tuned_copy)
    tuned_copy.__dict__.pop("_karchive_fast", None)
    other = next(c for c in tuned_copy.configs if c.kwargs != {"BLOCK": 128})
    x, o = mock(), mock()
    with rs.fake_cuda(monkeypatch, path) as (rec, _b):
        karchive.serve(_arc(captured, rec), mode="strict")
        tuned_copy[(32,)](x, o, 4096)
        tuned_copy.cache[(4096, "fp32", "fp32")] = other
        try:
            tuned_copy[(32,)](x, o, 4096)
        finally:
            tuned_copy.cache.clear()
    assert tuned_copy.best_config is other
    assert [la.block for la in rec.launches()] == [(128, 1, 1), (32 * other.num_warps, 1, 1)]


@pytest.fixture(scope="module")
def tuned_global_archive(tmp_path_factory):
    """A capture of serve_kernels' ``tuned_global`` (an autotuned kernel that reads the constexpr global SCALE)."""
    from capture_fakes import fake_gpu, fresh, ptr
    from serve_kernels import tuned_global

    import karchive

    base = tmp_path_factory.mktemp("tuned-global")
    with pytest.MonkeyPatch.context() as mp:  # module scope: the cache variable set for the capture alone
        mp.setenv("TRITON_CACHE_DIR", str(base / "cache"))
        fresh(tuned_global)
        with fake_gpu(timings=[3.0, 1.0]):
            with karchive.capture("tuned-global", version="1", strict=True) as cap:
                tuned_global[(1,)](ptr(), ptr(), 4096)
        fresh(tuned_global)
    out = base / "tuned-global.karc"
    cap.save(out)
    return out


def test_a_served_autotuned_kernel_whose_global_changed_is_refused_as_triton_refuses_it(
    tuned_global_archive, monkeypatch, path, triton_side
):
    """Triton's ``JITFunction.run`` refuses a launch once a global its kernel read changed (RuntimeError naming it),
    also under ``Autotuner.run``. Served, the same: the fast path of an autotuned call site checks the globals of the
    JIT function under the autotuner before each launch, as a plain call site's does (``FastPath.bound``)."""
    import serve_kernels
    import triton.language as tl
    from capture_fakes import fresh

    import karchive

    k = serve_kernels.tuned_global
    fresh(k)
    k.__dict__.pop("_karchive_fast", None)
    x, o = mock(), mock()
    with rs.fake_cuda(monkeypatch, path) as (rec, _b):
        karchive.serve(_arc(tuned_global_archive, rec), mode="strict")
        k[(4,)](x, o, 4096)
        k[(4,)](x, o, 4096)
        monkeypatch.setattr(serve_kernels, "SCALE", tl.constexpr(3))
        with pytest.raises(RuntimeError, match="Global variable SCALE has changed"):
            k[(4,)](x, o, 4096)
        monkeypatch.setattr(serve_kernels, "SCALE", tl.constexpr(2))
        k[(4,)](x, o, 4096)
    assert [la.block for la in rec.launches()] == [(128, 1, 1)] * 3 and triton_side == []


def test_a_served_call_with_a_bare_int_grid_is_refused_as_triton_refuses_it(two_keys, monkeypatch, path, triton_side):
    """``kernel[4](...)``: Triton's ``JITFunction.run`` refuses it (``len(grid)``: TypeError), karchive's grid check
    takes a bare int as ``(4,)``; a served call site (plain or autotuned) launches it."""
    from capture_fakes import fresh, tuned_copy

    import karchive

    fresh(tuned_copy)
    tuned_copy.__dict__.pop("_karchive_fast", None)
    x, o = mock(), mock()
    with rs.fake_cuda(monkeypatch, path) as (rec, _b):
        karchive.serve(_arc(two_keys, rec), mode="strict")
        tuned_copy[(4,)](x, o, 4096)
        with pytest.raises(TypeError, match="has no len"):
            tuned_copy.run(x, o, 4096, grid=4, warmup=False)  # Triton's own answer
        with pytest.raises(TypeError, match="has no len"):
            tuned_copy[4](x, o, 4096)
    assert len(rec.launches()) == 1


def test_a_served_autotuned_call_site_confirms_a_key_again_on_another_device(two_keys, monkeypatch, path, triton_side):
    """Triton's autotune key holds no device, its kernel cache does: the first call of a confirmed key on another
    device is confirmed with Triton again (its CompiledKernel there is another object), and the fast path gives
    that call site back to Triton, as for a plain call site. The Python launch path resolves every call (the
    compiled one memoises raw-pointer keys with the device of their first call: docs/runtime.md)."""
    import capture_fakes
    from capture_fakes import fresh, tuned_copy

    import karchive

    runs = _spy_tuner_runs(monkeypatch)
    fresh(tuned_copy)
    tuned_copy.__dict__.pop("_karchive_fast", None)
    x, o = mock(), mock()
    with rs.fake_cuda(monkeypatch, path) as (rec, _b):
        karchive.serve(_arc(two_keys, rec), mode="strict")
        tuned_copy[(4,)](x, o, 4096)
        assert runs == [True]  # the confirmation
        if path != launch_path.PYTHON:
            return
        monkeypatch.setattr(capture_fakes.FakeDriver, "get_current_device", lambda self: 1)
        tuned_copy[(4,)](x, o, 4096)
        assert runs[:2] == [True, True]  # confirmed again on device 1
        tuned_copy[(4,)](x, o, 4096)
    assert runs[2:] and all(r is False for r in runs[2:])  # then Triton's own runs: the fast path is off


def test_triton_adding_a_key_while_a_hook_is_set_leaves_the_fast_path_on(two_keys, monkeypatch, path, triton_side):
    """While a launch hook is set, calls are Triton's own ``Autotuner.run``, which adds a new key's decision to
    ``Autotuner.cache``. That entry is none a confirmation read, so the fast path stays: once the hook is gone both
    keys launch through the dispatcher (the new one confirmed once), with Triton's ``best_config``. A change to an
    entry a confirmation read ends it (the test above)."""
    import triton
    from capture_fakes import fresh, tuned_copy

    import karchive

    runs = _spy_tuner_runs(monkeypatch)
    fresh(tuned_copy)
    tuned_copy.__dict__.pop("_karchive_fast", None)
    x, o = mock(), mock()
    rt = triton.knobs.runtime

    def enter(md):
        return None

    with rs.fake_cuda(monkeypatch, path) as (rec, _b):
        karchive.serve(_arc(two_keys, rec), mode="strict")
        tuned_copy[(4,)](x, o, 4096)
        rt.launch_enter_hook.add(enter)
        try:
            tuned_copy[(4,)](x, o, 1024)  # Triton's run: the n=1024 key's decision joins the cache
        finally:
            rt.launch_enter_hook.remove(enter)
        assert runs == [True, False] and (1024, "fp32", "fp32") in tuned_copy.cache
        fast = tuned_copy.__dict__["_karchive_fast"][1]
        assert fast.on
        for n in (1024, 4096, 1024):
            tuned_copy[(4,)](x, o, n)
            assert tuned_copy.best_config is tuned_copy.cache[(n, "fp32", "fp32")]
        assert fast.on
    if path == launch_path.EXTENSION:
        assert runs == [True, False, True]  # the n=1024 key confirmed once, then the dispatcher's own launches
    assert [la.block for la in rec.launches()][-3:] == [(64, 1, 1), (128, 1, 1), (64, 1, 1)]
