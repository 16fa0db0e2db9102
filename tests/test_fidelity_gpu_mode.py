"""The ``--gpu`` mode of tests/fidelity_support.py, as far as it runs without a GPU: the flag, the reading of a
profiler trace, deterministic buffers, the CPU mode untouched by it, and -- where torch is installed (CPU torch will
do: /work/venv-torch) -- its four phases end to end over the recording drivers with CPU memory for the device's,
checked by every check of the GPU test (all but CUPTI and what the kernels compute).

The device half runs in tests/gpu/test_serve_fidelity_gpu.py; tests/test_serve_fidelity.py is the CPU mode's proof.
"""

from __future__ import annotations

import sys
import warnings
import zlib
from pathlib import Path

import pytest
from support import needs_triton

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import fidelity_support as fs  # noqa: E402  (a plain module beside the tests)

sys.path.remove(str(HERE))


def test_the_flag():
    assert fs.parse_args(["triton", "--out", "o.json"]).gpu is False
    args = fs.parse_args(["serve", "--gpu", "--out", "o.json", "--archive", "a.karc", "--path", "extension"])
    assert (args.phase, args.gpu, args.path, args.archive) == ("serve", True, "extension", "a.karc")
    with pytest.raises(SystemExit):
        fs.parse_args(["capture", "--gpu", "--out", "o.json"])  # capture and serve need the archive


def test_cpu_mode_has_no_gpu_world():
    assert fs._GPU == [None]
    c = fs.Ctx(None, list)
    duck = c.duck("mask", 0x7F0000100000, "i1")
    assert isinstance(duck, fs.DuckPtr) and duck.data_ptr() == 0x7F0000100000


def _event(name, corr, grid=(4, 1, 1), block=(128, 1, 1), cat="kernel", shared=0):
    args = {"correlation": corr, "grid": list(grid), "block": list(block), "shared memory": shared, "stream": 7}
    return {"ph": "X", "cat": cat, "name": name, "ts": 1000 - corr, "args": args}


def test_kernel_launches_reads_what_the_gpu_ran_in_launch_order():
    trace = {
        "traceEvents": [
            _event("copy", 12, grid=(8, 1, 1)),
            _event("void at::native::vectorized_elementwise_kernel<4, FillFunctor<float>>", 3),
            _event("copy", 5, block=(64, 1, 1), shared=1024),
            _event("cudaLaunchKernel", 4, cat="cuda_runtime"),
            _event("scaled", 9, block=(32, 2, 1), cat="Kernel"),
        ]
    }
    assert fs.kernel_launches(trace, {"copy", "scaled"}) == [
        {"kernel": "copy", "grid": [4, 1, 1], "block": 64, "shared": 1024},
        {"kernel": "scaled", "grid": [4, 1, 1], "block": [32, 2, 1], "shared": 0},
        {"kernel": "copy", "grid": [8, 1, 1], "block": 128, "shared": 0},
    ]
    assert fs.kernel_launches({}, {"copy"}) == []


@needs_triton
def test_kernel_names_are_the_entry_names_of_every_kernel_object():
    sys.path.insert(0, str(HERE))
    try:
        import fidelity_kernels
    finally:
        sys.path.remove(str(HERE))
    names = fs.kernel_names(fidelity_kernels)
    assert {"copy", "scaled", "tuned", "tuned_even", "biased_tuned", "sub_tuned_body", "heuristic", "masked"} <= names
    assert "table_prune" not in names and "perf_model" not in names  # library functions, not kernels


def test_buffers_are_deterministic_and_the_autotuner_calls_reach_the_memory():
    torch = pytest.importorskip("torch")
    tl = pytest.importorskip("triton.language")

    def cpu_world() -> fs.GpuWorld:
        world = fs.GpuWorld.__new__(fs.GpuWorld)  # no profiler check: CPU memory stands in for the device's
        world.torch, world.device, world.bufs = torch, "cpu", []
        return world

    world, other = cpu_world(), cpu_world()
    x, flags = world.buf("x", tl.float32), world.buf("mask", tl.int1)
    first = world.digests()
    assert [d[:2] for d in first] == [["x", "fp32"], ["mask", "int1"]]
    assert x.data_ptr() == x.owner.data_ptr() and x.owner.numel() == fs.GpuWorld.NBYTES
    assert set(x.owner.view(torch.float32)[:251].tolist()) == {i * 0.25 - 31.0 for i in range(251)}
    seed = zlib.crc32(b"mask") % 97  # a pattern per name: buffers of one scenario differ
    assert flags.owner.view(torch.bool)[:6].tolist() == [(i + seed) % 3 == 0 for i in range(6)]
    other.buf("x", tl.float32), other.buf("mask", tl.int1)
    assert other.digests() == first  # the same bytes in another process
    copy = x.clone()
    x.zero_()
    assert world.digests()[0][2] != first[0][2] and not x.owner.any()
    x.copy_(copy)
    assert world.digests()[0][2] == first[0][2]
    assert x.offset(4).data_ptr() == x.data_ptr() + 4 and x.offset(4).owner is x.owner


_DRY = """
import json, sys, warnings
import pytest, torch
import fidelity_support as fs

torch.cuda.get_device_name = lambda index=0: "cpu (no GPU: the --gpu machinery only)"
SOURCE = [None]  # the launches since the last drain: the recording driver's, or the CUDA stand-in's when serving
INNER = {}


class DryWorld(fs.GpuWorld):
    \"\"\"CPU memory for the device's; the launches from the recording drivers, in the form CUPTI gives them.\"\"\"

    def __init__(self, device="cuda"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            super().__init__(device="cpu")
        self.profiler_error = None

    def _start(self):
        pass

    def _stop(self, names=None):
        got = SOURCE[0]() if SOURCE[0] else []
        return [{k: la[k] for k in ("kernel", "grid", "block", "shared")} for la in got]


fs.GpuWorld = DryWorld
install = fs._install_gpu_driver


def dry_install():  # the recording driver underneath the --gpu wrapper, in place of Triton's real one
    fake = INNER["fake"] = fs._install_driver()
    SOURCE[0] = SOURCE[0] or fs._triton_drain(fake)
    return install()


fs._install_gpu_driver = dry_install
args = fs.parse_args(sys.argv[1:])
if args.phase != "serve":
    result = fs.PHASES[args.phase](args)
else:
    import runtime_support as rs

    mp = pytest.MonkeyPatch()
    with rs.fake_cuda(mp, args.path) as (rec, _backend):
        done = [0]

        def served():
            got = rec.launches()[done[0]:]
            done[0] += len(got)
            return [fs.launch_record(rec.functions[la.function][0], b"", la.grid, la.block[0], la.shared, {}) for la in got]

        SOURCE[0] = served
        result = fs.PHASES[args.phase](args)
    mp.undo()
result["__inner__"] = {"bench_launches": INNER["fake"].bench_launches}
open(args.out, "w").write(json.dumps(result, default=repr))
"""

#: GPU forms that read what the kernels computed (buffer digests): nothing computes without a GPU.
_COMPUTED = {"runtime_defaults", "heuristics_values", "duck_typed_pointers"}


@needs_triton
def test_the_gpu_phases_and_their_checks_without_a_gpu(tmp_path):
    """The four --gpu phases end to end (Triton's driver wrapped: deterministic tuning, benchmark launches kept from
    the device; buffers in memory, the autotuner's zero_/clone/copy_ applied to it, digests per drain; serve(strict)
    on both launch paths), with the recording drivers underneath and CPU memory for the device's, then every check of
    tests/gpu/test_serve_fidelity_gpu.py on their results: all but CUPTI and the GPU's arithmetic."""
    pytest.importorskip("torch")
    import json
    import os
    import subprocess

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent), str(HERE)]), "TRITON_DEFAULT_FP_FUSION": "1"}
    out: dict = {}
    for phase, cache, extra in (
        ("triton", "tc", []),
        ("capture", "tc", []),
        ("serve", "tc-python", ["--path", "python"]),
        ("serve", "tc-extension", ["--path", "extension"]),
    ):
        dest = tmp_path / f"{phase}{'-'.join(['', *extra[1:]])}.json"
        cmd = [sys.executable, "-c", _DRY, phase, "--gpu", "--out", str(dest), "--archive", str(tmp_path / "f.karc")]
        r = subprocess.run(
            [*cmd, *extra],
            env={**env, "TRITON_CACHE_DIR": str(tmp_path / cache)},
            capture_output=True,
            text=True,
            timeout=600,
            cwd=HERE,
        )
        assert r.returncode == 0 and dest.exists(), r.stderr[-3000:]
        out[dest.stem] = json.loads(dest.read_text())
        assert "__phase_error__" not in out[dest.stem], out[dest.stem]
    gpu = _load_gpu_test()
    phases = {"triton": out["triton"], "capture": out["capture"], "serve": {p: out[f"serve-{p}"] for p in gpu.PATHS}}
    for name in gpu.SCENARIOS:
        for path in gpu.PATHS:
            gpu.test_served_like_capture(phases, name, path)
        gpu.test_capture_runs_what_triton_runs(phases, name)
        if name not in _COMPUTED:
            gpu.test_triton_does_on_the_gpu(phases, name)
    for phase in ("triton", "capture", *(f"serve-{p}" for p in gpu.PATHS)):
        gpu.test_the_phase_observed_the_gpu(phases, phase)
    gpu.test_the_capture_left_nothing_out(phases)
    gpu.test_every_gpu_form_replaces_a_cpu_statement()
    # the wrapper kept every benchmark launch from the driver's launcher and let every other one through
    triton = out["triton"]
    assert triton["__gpu__"]["bench_launches"] > 0 and triton["__inner__"]["bench_launches"] == 0
    drained = sum(d["launches"] for n in gpu.SCENARIOS for d in triton[n]["gpu"])
    assert drained + 1 == triton["__gpu__"]["triton_launches"]  # + the empty grid: a launcher call, no launch
    acc = [[d for n, _, d in drain["buffers"] if n == "acc"][0] for drain in triton["reset_and_restore"]["gpu"]]
    assert triton["reset_and_restore"]["obs"]["first_call"] == [["event", "zero_", "acc"]]
    assert set(acc) == {fs.digest(bytes(fs.GpuWorld.NBYTES))}  # the reset reached the memory (no GPU adds to it)


def _load_gpu_test():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "karchive_gpu_serve_fidelity", HERE / "gpu" / "test_serve_fidelity_gpu.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_profiler_that_sees_no_gpu_kernel_is_said_not_hidden():
    """Without CUDA, CUPTI sees no kernel: the world says so (the GPU test fails on it) and every drain still digests."""
    pytest.importorskip("torch")
    tl = pytest.importorskip("triton.language")
    with warnings.catch_warnings():  # torch: "CUDA is not available, disabling CUDA profiling"
        warnings.simplefilter("ignore")
        world = fs.GpuWorld(device="cpu")
    assert world.profiler_error  # CPU torch: "No activities specified"; a CUDA torch without CUPTI: "saw no kernel"
    world.begin()
    world.buf("x", tl.float32)
    assert world.drain() == [] and world.end() == [
        {"launches": 0, "buffers": [["x", "fp32", world.log[0]["buffers"][0][2]]]}
    ]
