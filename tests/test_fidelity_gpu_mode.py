"""The ``--gpu`` mode of tests/fidelity_support.py, as far as it runs without a GPU: the flag, the reading of a
profiler trace, deterministic buffers (CPU torch where installed), and the CPU mode untouched by it.

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


_SIMULATION = """
import json, sys
import fidelity_support as fs
import torch

fake = fs._install_driver()            # the recording driver stands in for the real one underneath the --gpu wrapper
counts = fs._install_gpu_driver()
world = fs.GpuWorld.__new__(fs.GpuWorld)
world.torch, world.device, world.bufs, world.log, world.prof = torch, "cpu", [], [], None
world.profiler_error, world.unmatched = "no GPU: launches read from the recording driver", set()
fs._GPU[0] = world
import fidelity_kernels
world.names = fs.kernel_names(fidelity_kernels)
only = sys.argv[1:]
recorded = fs._triton_drain(fake)

def drain():  # GpuWorld.drain, with the recording driver's launches for CUPTI's
    got = recorded()
    world.log.append({"launches": len(got), "buffers": world.digests()})
    return got

results = fs._run_all(fidelity_kernels, drain, fs._gpu_counts(counts), only=only, world=world)
results["__inner__"] = {"bench_launches": fake.bench_launches, "loads": len(fake.loads)}
print(json.dumps(results, default=repr))
"""


@needs_triton
def test_the_gpu_wrapper_over_a_recording_driver(tmp_path):
    """The --gpu phases' machinery (Triton's driver wrapped, deterministic tuning, launches made while benchmarking
    kept from the device, buffers in real memory with the autotuner's zero_/clone/copy_ applied to it, a digest per
    drain) over the recording driver, with CPU memory for the device's: everything but CUPTI and the GPU."""
    pytest.importorskip("torch")
    import json
    import os
    import subprocess

    only = ["reset_and_restore", "autotune_best_config", "duck_typed_pointers", "specialization", "runtime_defaults"]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE.parent), str(HERE)]),
        "TRITON_CACHE_DIR": str(tmp_path),
    }
    r = subprocess.run(
        [sys.executable, "-c", _SIMULATION, *only], env=env, capture_output=True, text=True, timeout=600, cwd=HERE
    )
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    for name in only:
        assert "error" not in got[name], got[name]
        assert got[name]["gpu"] and all(len(d["buffers"]) >= 2 for d in got[name]["gpu"]), got[name]["gpu"]
    tuned = got["autotune_best_config"]["counts"]
    assert tuned["benchmarks"] > 0 and tuned["bench_launches"] == tuned["benchmarks"]
    assert got["__inner__"]["bench_launches"] == 0  # no benchmark launch reached the driver's launcher
    drained = sum(d["launches"] for n in only for d in got[n]["gpu"])  # what reached the driver, drain by drain
    assert drained == sum(got[n]["counts"]["triton_launches"] for n in only) > 0
    acc = [[d for n, _, d in drain["buffers"] if n == "acc"][0] for drain in got["reset_and_restore"]["gpu"]]
    assert got["reset_and_restore"]["obs"]["first_call"] == [["event", "zero_", "acc"]] and len(set(acc)) == 1
    outs = [[d for n, _, d in drain["buffers"] if n == "out"][0] for drain in got["runtime_defaults"]["gpu"]]
    assert len(outs) == 4 and len(set(outs)) == 1  # nothing ran on this "device": the output is the fill
    assert got["duck_typed_pointers"]["obs"]["launches"][0]["args"]["mask_ptr"] != 0x7F0000100000  # real memory


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
