"""The launch path's own host cost on a machine without a GPU: the driver call is a C function that does nothing.

    python tools/bench_launch_cpu.py [--archive A.karc] [--torch] [--calls 20000]
    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=/tmp/cg.%p \\
        python tools/bench_launch_cpu.py --instructions [--torch]      # exact instructions per call

What runs is everything ``kernel[grid](...)`` does except the driver's own work: binding, selection
key, lookup, packing, the stream, and the call through the driver's launch signature (into
``_fastlaunch.noop_address()`` on the compiled path, into a binding stand-in that returns success on the
Python path). Rows: ``k[grid](...)`` at 4 and 16 arguments on both paths, ``bound()``,
``bound(*args)``; ``k[grid](...) 3 descriptors``: ``desc_add`` of tests/data/tma_kernels.py over three
``karchive.TensorDescriptor`` (issue 21; needs Triton to compile it for cuda:90 here; the maps are not
encoded by a driver, only the steady state is timed); per extra argument = (16 - 4) / 12; where Triton is importable, ``served k[grid](...)``:
the unchanged ``@triton.jit`` call site of examples/kernels.py (imported as ``kernels``) under
``karchive.serve(arc, mode="strict")`` (issue 22: within 1.2x of ``k[grid](...)``). The tuned kinds (issue 33;
need Triton to compile tools/tuned_bench.py's archive): ``callable grid`` (``add[lambda meta: ...]``),
``autotuned``, ``heuristics``, ``stacked`` (heuristics over autotune), each beside ``k[grid](...) 4 args`` (the
plain fixed-grid kernel of the same arity), and ``served autotuned``: tests/gpu/extra_kernels.py's
``@triton.autotune`` call site under ``karchive.serve``. The served rows need ``--torch`` (Triton reads an int
address as an integer: another specialisation) and call with n = 4095 (as tools/bench_launch.py's); without a GPU,
a served call site's first call per key runs Triton's warmup on tests/capture_fakes.py's GPU-less Triton driver,
and a row whose call site left karchive's fast path is skipped. Arguments are int addresses, or with ``--torch``
CPU torch tensors standing for device ones (their host check is switched off in this process only:
BENCHMARK ONLY). Wall time on a shared machine is noisy; ``--instructions`` under callgrind is exact
(it compiles a 3-line helper against valgrind's headers to zero and dump the counters around each row).
The GPU numbers that count are tools/bench_launch.py's.
"""

from __future__ import annotations

import argparse
import ctypes
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time
import types
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CG_HELPER = """#include <valgrind/callgrind.h>
void cg_zero(void) { CALLGRIND_ZERO_STATS; }
void cg_dump(const char *label) { CALLGRIND_DUMP_STATS_AT(label); }
void cg_start(void) { CALLGRIND_START_INSTRUMENTATION; }
"""


class _Handle:
    def __init__(self, value: int) -> None:
        self.value = value

    def __int__(self) -> int:
        return self.value


class NoopDriver:
    """The few ``cuda.bindings.driver`` calls a CudaBackend makes, answered without a GPU; launches do nothing.
    (A stand-in for measuring host cost only: nothing here is a test of the driver.)"""

    def __init__(self, address: int | None) -> None:
        e = types.SimpleNamespace
        self.CUresult = e(CUDA_SUCCESS=0, CUDA_ERROR_NO_DEVICE=100, CUDA_ERROR_INVALID_CONTEXT=201)
        self.CUdevice_attribute = e(
            **{
                n: n
                for n in (
                    "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR",
                    "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR",
                    "CU_DEVICE_ATTRIBUTE_WARP_SIZE",
                    "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN",
                    "CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT",
                )
            }
        )
        self.CUfunction_attribute = e(
            CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES=8,
            CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES=1,
            CU_FUNC_ATTRIBUTE_NUM_REGS=4,  # (a served call site's CompiledKernel reads these three)
            CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES=3,
            CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK=0,
        )
        self.CUfunc_cache = e(CU_FUNC_CACHE_PREFER_SHARED=1)
        self.CUdriverProcAddress_flags = e(
            CU_GET_PROC_ADDRESS_LEGACY_STREAM=1, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM=2
        )
        self.address = address

    def cuInit(self, flags):
        return (0,)  # noqa: E704

    def cuDeviceGetCount(self):
        return (0, 1)  # noqa: E704

    def cuDriverGetVersion(self):
        return (0, 13000)  # noqa: E704

    def cuDeviceGet(self, i):
        return (0, i)  # noqa: E704

    def cuDeviceGetName(self, n, d):
        return (0, b"no GPU (noop driver)\0")  # noqa: E704

    def cuDevicePrimaryCtxRetain(self, d):
        return (0, _Handle(1))  # noqa: E704

    def cuCtxGetCurrent(self):
        return (0, _Handle(1))  # noqa: E704

    def cuCtxGetDevice(self):
        return (0, 0)  # noqa: E704

    def cuCtxPushCurrent(self, c):
        return (0,)  # noqa: E704

    def cuCtxPopCurrent(self):
        return (0, None)  # noqa: E704

    def cuModuleLoadData(self, image):
        return (0, _Handle(2))  # noqa: E704

    def cuModuleGetFunction(self, m, name):
        return (0, _Handle(3))  # noqa: E704

    def cuFuncSetAttribute(self, *a):
        return (0,)  # noqa: E704

    def cuFuncGetAttribute(self, *a):
        return (0, 0)  # noqa: E704

    def cuFuncSetCacheConfig(self, *a):
        return (0,)  # noqa: E704

    def CUstream(self, raw):
        return _Handle(raw)  # noqa: E704

    def cuLaunchKernel(self, *a):
        return (0,)  # noqa: E704

    def cuDeviceGetAttribute(self, attr, dev):
        return (
            0,
            {
                "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR": 9,
                "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR": 0,
                "CU_DEVICE_ATTRIBUTE_WARP_SIZE": 32,
            }.get(attr, 227 * 1024),
        )

    def cuGetProcAddress(self, symbol, version, flags):
        return (0, self.address, 0) if self.address else (0, 0, 1)


def _archive(path: str | None) -> str:
    if path:
        return path
    bench = ROOT / ".gpu" / "bench.karc"
    if bench.exists():
        return str(bench)
    from karchive.producer.build.pack import ArchiveBuilder
    from karchive.producer.compile.aot import VariantRequest, compile_variant  # needs triton (no GPU)

    ex, xk = ROOT / "examples" / "kernels.py", ROOT / "tests" / "gpu" / "extra_kernels.py"
    reqs = [
        (f"{ex}:add_kernel", "*fp32:16, *fp32:16, *fp32:16, i32"),
        (f"{xk}:add16_kernel", ", ".join(["*fp32:16"] * 15 + ["i32"])),
    ]
    b = ArchiveBuilder("bench", "0.1.0")
    b.extend(compile_variant(VariantRequest(r, sig, "cuda:90", {"BLOCK": 1024}, {"num_warps": 4})) for r, sig in reqs)
    out = pathlib.Path(tempfile.mkdtemp()) / "bench.karc"
    b.write(out)
    return str(out)


def _desc_archive() -> str | None:
    """``desc_add`` (three fp16 [64, 64] descriptors) compiled for cuda:90; None without Triton."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return None
    from karchive.cli.main import main as cli

    out = pathlib.Path(tempfile.mkdtemp()) / "desc.karc"
    sig = ", ".join(["tensordesc<fp16[64, 64]>"] * 3 + ["64", "64"])
    if (
        cli(
            [
                "compile",
                str(ROOT / "tests" / "data" / "tma_kernels.py"),
                "-n",
                "desc_add",
                "-s",
                sig,
                "-t",
                "cuda:90",
                "-o",
                str(out),
            ]
        )
        != 0
    ):
        return None
    return str(out)


def _no_encoding() -> None:
    """BENCHMARK ONLY: a CUtensorMap of zeros instead of the driver's (no GPU here; only misses encode)."""
    from karchive.runtime import descriptors as td

    td.encode_tiled = lambda p: bytes(128)  # type: ignore[assignment]
    td._driver = lambda: 13020  # type: ignore[assignment]


def _triton_driver() -> None:
    """BENCHMARK ONLY: where Triton has no active driver (no GPU), tests/capture_fakes.py's GPU-less one, so that a
    served call site's first call per key (Triton's own run, warmup: it compiles from the archive and launches
    nothing) runs here; every timed launch is karchive's, into the do-nothing driver."""
    from triton.runtime.driver import driver

    try:
        driver.active.get_current_target()
    except RuntimeError:
        sys.path.insert(0, str(ROOT / "tests"))
        from capture_fakes import FakeDriver

        driver.set_active(FakeDriver())


def _served(arc: Any, *more: Any) -> tuple[Any, Any] | None:
    """The unchanged ``@triton.jit`` functions of the archive's kernels, served from ``arc`` (and ``more``
    archives; strict); None without Triton."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return None
    import importlib.util

    import karchive.serve

    _triton_driver()

    mods = []
    for name, file in (
        ("kernels", ROOT / "examples" / "kernels.py"),
        ("extra_kernels", ROOT / "tests" / "gpu" / "extra_kernels.py"),
    ):
        mod = sys.modules.get(name)
        if mod is None:
            spec = importlib.util.spec_from_file_location(name, file)
            mod = importlib.util.module_from_spec(spec)
            sys.modules[name] = mod
            spec.loader.exec_module(mod)
        mods.append(mod)
    karchive.serve(arc, *more, mode="strict")
    return mods[0].add_kernel, mods[1].add16_kernel


def cdiv_grid(meta: dict) -> tuple[int]:
    """The callable grid libraries write (the compiled path remembers its answer: launch/_grid.py)."""
    return ((meta["n_elements"] + meta["BLOCK"] - 1) // meta["BLOCK"],)


def _tuned(path: str | None) -> tuple[str, Any] | None:
    """(tools/tuned_bench.py's archive (``path``, else built now), the served ``add_tuned`` Triton call site's
    module); None without Triton."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return None
    import importlib.util

    sys.path.insert(0, str(ROOT / "tools"))
    from tuned_bench import build

    out = path or build(pathlib.Path(tempfile.mkdtemp()) / "tuned.karc")
    mod = sys.modules.get("extra_kernels")
    if mod is None:
        spec = importlib.util.spec_from_file_location("extra_kernels", ROOT / "tests" / "gpu" / "extra_kernels.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules["extra_kernels"] = mod
        spec.loader.exec_module(mod)
    return str(out), mod


#: (row, body) of the tuned kinds, and the plain row each is compared with
TUNED_ROWS = {
    "callable grid 4 args": "add[cdiv_grid](x, y, o, 4096, BLOCK=1024)",
    "autotuned 4 args": "tuned[g](x, y, o, 4096)",
    "heuristics 4 args": "heur[g](x, y, o, 4096)",
    "stacked 4 args": "stacked[g](x, y, o, 4096)",
}
PLAIN_ROW = "k[grid](...) 4 args"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--archive")
    ap.add_argument("--torch", action="store_true", help="CPU torch tensors as arguments (needs torch)")
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--only", help="time only the rows whose name contains this text")
    ap.add_argument("--paths", default="extension,python", help="launch paths to time (comma-separated)")
    ap.add_argument("--tuned-archive", help="tools/tuned_bench.py's archive (default: built now)")
    ap.add_argument("--instructions", action="store_true", help="run under callgrind (see above)")
    args = ap.parse_args()

    import karchive
    from karchive.runtime import backend as backend_mod
    from karchive.runtime import launch_path
    from karchive.runtime.drivers.cuda import CudaBackend
    from karchive.runtime.launch.kernel import Kernel

    ext = launch_path.extension()
    backend_mod._backends["cuda"] = CudaBackend(NoopDriver(ext.noop_address() if ext else None))
    archive = _archive(args.archive)
    if args.torch:
        import torch

        Kernel._argument_device = lambda self, infos: None  # BENCHMARK ONLY: CPU tensors stand for device ones
        pool = [torch.empty(4096 + 4 * i) for i in range(64)]
        values = [t for t in pool if t.data_ptr() % 16 == 0][:15]
    else:
        values = [0x7F00_0000_1000 + 4096 * i for i in range(15)]
    cg = None
    if args.instructions:
        tmp = pathlib.Path(tempfile.mkdtemp())
        (tmp / "cg.c").write_text(CG_HELPER)
        subprocess.run(["cc", "-O2", "-shared", "-fPIC", str(tmp / "cg.c"), "-o", str(tmp / "cg.so")], check=True)
        cg = ctypes.CDLL(str(tmp / "cg.so"))
        cg.cg_start()
    desc_archive = _desc_archive()
    tuned = _tuned(args.tuned_archive)
    if desc_archive is not None:
        _no_encoding()
    names = {"x": values[0], "y": values[1], "o": values[2], **{f"p{i}": v for i, v in enumerate(values[3:15])}}
    rows = {
        "(warm-up: first row measured, ignore)": "add[g](x, y, o, 4096, BLOCK=1024)",
        "k[grid](...) 4 args": "add[g](x, y, o, 4096, BLOCK=1024)",
        "k[grid](...) 16 args": "add16[g](o, x, y, p0, p1, p2, p3, p4, p5, p6, p7, p8, p9, p10, p11, 4096, BLOCK=1024)",
        "bound()": "b4()",
        "bound(*args)": "b4(x, y, o, 4096)",
        "empty loop": "pass",
    }
    results: dict[str, float] = {}
    for path in [
        p
        for p in (launch_path.EXTENSION, launch_path.PYTHON)
        if (p == launch_path.PYTHON or ext) and p in args.paths.split(",")
    ]:
        with launch_path.forced(path):
            arc = karchive.open(archive)
            add, add16 = arc.kernel("add_kernel"), arc.kernel("add16_kernel")
        g = (4,)
        add[g](names["x"], names["y"], names["o"], 4096, BLOCK=1024)
        add16[g](names["o"], names["x"], names["y"], *values[3:15], 4096, BLOCK=1024)
        ns: dict[str, Any] = {
            **names,
            "add": add,
            "add16": add16,
            "g": g,
            "b4": add.bind(g, names["x"], names["y"], names["o"], 4096, BLOCK=1024),
        }
        path_rows = dict(rows)
        if desc_archive is not None:
            with launch_path.forced(path):
                ns["dadd"] = karchive.open(desc_archive).kernel("desc_add")
            ns["da"], ns["db"], ns["dc"] = (
                karchive.TensorDescriptor(
                    0x7F00_0010_0000 + (1 << 20) * i, [64, 64], shape=[128, 128], strides=[128, 1], dtype="float16"
                )
                for i in range(3)
            )
            ns["g2"] = (2, 2)
            path_rows["k[grid](...) 3 descriptors"] = "dadd[g2](da, db, dc, BLOCK_M=64, BLOCK_N=64)"
        if tuned is not None:
            with launch_path.forced(path):  # (a kernel's path is fixed when it is made)
                tarc = karchive.open(tuned[0])
                ns.update(
                    cdiv_grid=cdiv_grid,
                    tuned=tarc.kernel("add_tuned"),
                    heur=tarc.kernel("add_heur"),
                    stacked=tarc.kernel("add_stacked"),
                )
            path_rows.update(TUNED_ROWS)
        served = _served(arc) if tuned is None else _served(arc, tuned[0])
        if served is not None and not args.torch:  # Triton reads an int address as an integer: another key
            print(f"served rows [{path}]: skipped here (they need --torch: pointer arguments Triton reads as such)")
        elif served is not None:
            # n = 4095: Triton specialises 4096 as i32:16, and the archives hold the i32 binaries (as
            # tools/bench_launch.py's served rows); the autotune records' nearest-log2 rule keys it to their config
            ns["sadd"], ns["sadd16"] = served[:2]
            if tuned is not None:
                ns["stuned"] = tuned[1].add_tuned
                path_rows["served autotuned 4 args"] = "stuned[g](x, y, o, 4095)"
            path_rows["served k[grid](...) 4 args"] = "sadd[g](x, y, o, 4095, BLOCK=1024)"
            path_rows["served k[grid](...) 16 args"] = (
                "sadd16[g](o, x, y, p0, p1, p2, p3, p4, p5, p6, p7, p8, p9, p10, p11, 4095, BLOCK=1024)"
            )
        for row, body in path_rows.items():
            if args.only and args.only not in row and not row.startswith("(warm-up"):
                continue
            scope: dict[str, Any] = {}
            exec(  # noqa: S102
                f"def make({', '.join(ns)}):\n    def loop(n):\n        for _ in range(n):\n            {body}\n"
                "    return loop\n",
                scope,
            )
            loop = scope["make"](**ns)
            label = f"{row} [{path}]"
            try:
                with launch_path.forced(path):  # (a served call site's fast path is made at its first call)
                    loop(50)
            except Exception as exc:  # a served row that needs what this machine lacks (a GPU)
                if not row.startswith("served"):
                    raise
                print(f"{label}: skipped here ({type(exc).__name__}: {exc})")
                continue
            site = ns.get(body.split("[", 1)[0]) if row.startswith("served") else None
            fast = getattr(site, "__dict__", {}).get("_karchive_fast", (None, None))[1]
            if site is not None and not (fast and fast.on):  # the row would time Triton's own path
                print(f"{label}: skipped here (the call site is not on karchive's fast path)")
                continue
            if cg is not None:
                cg.cg_zero()
                loop(args.calls)
                cg.cg_dump(label.encode())
                continue
            samples = []
            for _ in range(args.rounds):
                t0 = time.perf_counter()
                loop(args.calls)
                samples.append((time.perf_counter() - t0) / args.calls * 1e6)
            results[label] = statistics.median(samples)
    if cg is not None:
        print(
            "instruction counts are in the callgrind dump files, one per row (desc: Trigger: Client Request: "
            f"<row>); divide each file's 'summary' by {args.calls}"
        )
        return
    for label, us in results.items():
        print(f"{label:40s} {us:7.3f} us")
    for path in (launch_path.EXTENSION, launch_path.PYTHON):
        a4, a16 = results.get(f"k[grid](...) 4 args [{path}]"), results.get(f"k[grid](...) 16 args [{path}]")
        if a4 is not None and a16 is not None:
            print(f"per extra argument [{path}]: {(a16 - a4) / 12 * 1000:.0f} ns")
        for n in ("4", "16"):
            s, k = results.get(f"served k[grid](...) {n} args [{path}]"), results.get(f"k[grid](...) {n} args [{path}]")
            if s is not None and k:
                print(f"served / k[grid] {n} args [{path}]: {s / k:.2f}x (target <= 1.2)")
        plain = results.get(f"{PLAIN_ROW} [{path}]")
        for row, limit in [(r, 1.10) for r in TUNED_ROWS] + [("served autotuned 4 args", 1.2)]:
            t = results.get(f"{row} [{path}]")
            if t is not None and plain:
                print(f"{row} / {PLAIN_ROW} [{path}]: {t / plain:.2f}x (issue 33 target on the H100 <= {limit})")


if __name__ == "__main__":
    main()
