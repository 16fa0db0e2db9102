"""Serve fidelity (issue 30): every way a library drives Triton's runtime, written once as a scenario and run three ways.

    python tests/fidelity_support.py triton  --out OBS.json                 # plain Triton
    python tests/fidelity_support.py capture --out OBS.json --archive A.karc  # plain Triton under karchive.capture
    python tests/fidelity_support.py serve   --out OBS.json --archive A.karc [--path extension]  # Triton's compiler
                                                                            # disabled, serve(strict)
    ... --gpu                                                               # any phase on a CUDA GPU (below)

Each scenario is a function ``scenario(c) -> observations`` (JSON data): ``c.k`` is tests/fidelity_kernels.py (the
library's kernel objects), ``c.buf()`` a device buffer as a library passes one, ``c.launches()`` the launches since the
last call as the GPU would have seen them (kernel, which binary, grid, block, shared memory, every runtime argument's
value). tests/test_serve_fidelity.py asserts the three phases observe the same thing, and what Triton does, explicitly.

TEST DOUBLES for the missing GPU: under plain Triton, ``FidelityDriver`` (:func:`_driver_class`) is Triton's driver (capture_fakes'
FakeDriver, plus a launcher that does what Triton's C launcher does around the GPU call: the launch enter/exit hooks,
no launch for an empty grid; and the binary each function handle was loaded from). Under serving, the launches reach
runtime_support's recording CUDA stand-in through karchive's launcher; Triton's driver is still a FidelityDriver (it
answers device, stream and target) and counts what Triton itself loads, launches or benchmarks: none of it may happen.

``--gpu`` (tests/gpu/test_serve_fidelity_gpu.py): the same scenarios on a CUDA GPU (:class:`GpuWorld`). Triton's
real driver, wrapped only to count what it loads and launches and to make tuning deterministic: its benchmarker is
FidelityDriver's (one call per config, the same :func:`_timing` in every process) and the launches made while it
benchmarks do not reach the GPU (so buffers hold what the chosen configs wrote, as in a served process, which never
benchmarks). ``c.buf()`` is real device memory (64 KiB, filled deterministically, Triton dtypes as on the CPU);
``c.launches()`` is what CUPTI (torch.profiler) saw the GPU run -- the fidelity kernels' name, grid, block and
shared memory, on both of karchive's launch paths alike --, and every drain notes the digest of every buffer
(``"gpu"`` per scenario). Argument values and which binary ran are not observable on the served path without
interposing on the driver; the buffer digests stand for them (what the kernels computed from the arguments).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import struct
import sys
import tempfile
import traceback
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

_BENCHING = [False]


def benchmarking() -> bool:
    """True while Triton's autotuner benchmarks (hooks note it: served calls never benchmark)."""
    return _BENCHING[0]


# -- values as the GPU sees them ----------------------------------------------------------------------------------
_INT_FORMATS = {
    "i1": "<b",
    "i8": "<b",
    "i16": "<h",
    "i32": "<i",
    "i64": "<q",
    "u1": "<B",
    "u8": "<B",
    "u16": "<H",
    "u32": "<I",
    "u64": "<Q",
}
_FLOAT_FORMATS = {"fp16": "<e", "fp32": "<f", "fp64": "<d"}


def _bf16(raw: bytes) -> float:
    return struct.unpack("<f", b"\0\0" + raw)[0]


def decode(typ: str, raw: bytes) -> Any:
    """A kernel parameter's bytes as a value (pointers: the address)."""
    if typ.startswith("*"):
        return int.from_bytes(raw[:8], "little")
    if typ in _INT_FORMATS:
        return struct.unpack(_INT_FORMATS[typ], raw[: struct.calcsize(_INT_FORMATS[typ])])[0]
    if typ in _FLOAT_FORMATS:
        return struct.unpack(_FLOAT_FORMATS[typ], raw[: struct.calcsize(_FLOAT_FORMATS[typ])])[0]
    if typ == "bf16":
        return _bf16(raw[:2])
    return raw.hex()


def encode(typ: str, value: Any) -> bytes:
    """What Triton's launcher packs for a runtime argument (the inverse of :func:`decode`)."""
    if typ.startswith("*"):
        return int(value.data_ptr() if hasattr(value, "data_ptr") else value).to_bytes(8, "little")
    if typ in _INT_FORMATS:
        return struct.pack(_INT_FORMATS[typ], int(value))
    if typ in _FLOAT_FORMATS:
        return struct.pack(_FLOAT_FORMATS[typ], float(value))
    if typ == "bf16":
        return struct.pack("<f", float(value))[2:]
    return repr(value).encode()


def digest(data: bytes | str) -> str:
    return hashlib.sha256(data if isinstance(data, bytes) else data.encode()).hexdigest()[:16]


# -- what a library passes -----------------------------------------------------------------------------------------
class Buf:
    """A device tensor as a library passes one: ``data_ptr()``, a dtype, ``get_device()``; the autotuner's
    reset/restore calls (``zero_``, ``clone``, ``copy_``) are noted in :data:`EVENTS` (outside benchmarking)."""

    def __init__(self, name: str, addr: int, dtype: Any, owner: Any = None) -> None:
        self.name, self.addr, self.dtype = name, addr, dtype
        self.owner = owner  # --gpu: the device allocation (a torch uint8 tensor) the address lies in

    def data_ptr(self) -> int:
        return self.addr

    def get_device(self) -> int:
        return 0

    def offset(self, nbytes: int) -> Buf:
        """The same memory ``nbytes`` further on (a misaligned pointer)."""
        return Buf(f"{self.name}+{nbytes}", self.addr + nbytes, self.dtype, self.owner)

    def zero_(self) -> Buf:
        _event("zero_", self.name)
        if self.owner is not None:
            self.owner.zero_()
        return self

    def clone(self) -> Buf:
        _event("clone", self.name)
        if self.owner is not None:
            copy = self.owner.clone()
            return Buf(self.name + "'", copy.data_ptr() + self.addr - self.owner.data_ptr(), self.dtype, copy)
        return Buf(self.name + "'", self.addr + 0x100000, self.dtype)

    def copy_(self, other: Buf) -> Buf:
        _event("copy_", self.name, other.name)
        if self.owner is not None and other.owner is not None:
            self.owner.copy_(other.owner)
        return self


class DuckPtr:
    """Only what Triton asks of a pointer argument: ``data_ptr()`` and ``dtype`` (jit.py's docstring)."""

    def __init__(self, addr: int, dtype: Any) -> None:
        self.addr, self.dtype = addr, dtype

    def data_ptr(self) -> int:
        return self.addr


EVENTS: list = []


def _event(*what: Any) -> None:
    if not benchmarking():
        EVENTS.append(list(what))


# -- Triton's driver on a machine without a GPU --------------------------------------------------------------------
def _driver_class() -> type:
    """capture_fakes' FakeDriver (target cuda:90, device 0, stream 0, no GPU), recording what Triton loads, launches
    (as :func:`launch_record` describes it) and benchmarks. Made on first use: capture_fakes imports Triton."""
    from capture_fakes import FakeDriver, _FakeUtils

    class _Utils(_FakeUtils):
        def __init__(self, driver: Any) -> None:
            self.driver = driver

        def load_binary(self, name, kernel, shared, device):
            self.driver.loads.append(name)
            handle = 0x1000 + len(self.driver.loads)
            self.driver.binaries[handle] = (name, bytes(kernel))
            return None, handle, 32, 0, 1024  # module None: CompiledKernel.__del__ never unloads it

    class FidelityDriver(FakeDriver):
        def __init__(self) -> None:
            super().__init__()
            self.utils = _Utils(self)
            self.loads: list[str] = []
            self.binaries: dict[int, tuple[str, bytes]] = {}
            self.launched: list[dict] = []
            self.benchmarks = 0
            self.bench_launches = 0

        launcher_cls = _launcher_cls
        get_benchmarker = _get_benchmarker

    return FidelityDriver


def _launcher_cls(driver: Any, src: Any, metadata: Any) -> Callable:
    """Triton's launcher contract (``CompiledKernel.run``), doing what triton/backends/nvidia/driver.c
    ``launchKernel`` does around the GPU call: the enter hook, the launch (none for an empty grid), the exit hook."""

    def launch(gx, gy, gz, stream, function, packed_metadata, launch_metadata, enter_hook, exit_hook, *args):
        if enter_hook is not None:
            enter_hook(launch_metadata)
        if gx * gy * gz > 0 and benchmarking():
            driver.bench_launches += 1  # launches while the autotuner benchmarks: not compared (serving never tunes)
        elif gx * gy * gz > 0:
            name, binary = driver.binaries[function]
            values = {}
            for arg_name, value in zip(src.fn.arg_names, args):
                typ = src.signature.get(arg_name)
                if isinstance(typ, str) and typ != "constexpr":
                    values[arg_name] = decode(typ, encode(typ, value))
            driver.launched.append(
                launch_record(name, binary, (gx, gy, gz), 32 * metadata.num_warps, metadata.shared, values)
            )
        if exit_hook is not None:
            exit_hook(launch_metadata)

    return launch


def _get_benchmarker(driver: Any) -> Callable:
    """The autotuner's ``do_bench``: runs the config once (marked as benchmarking) and reports :func:`_timing`."""

    def do_bench(fn, quantiles=None, **kwargs):
        driver.benchmarks += 1
        _BENCHING[0] = True
        try:
            fn()
        finally:
            _BENCHING[0] = False
        t = _timing(fn)
        return [t, t, t] if quantiles else t

    return do_bench


def _timing(kernel_call: Callable) -> float:
    """A deterministic time per config (the same in every process, whatever ran before): from the config the
    autotuner's ``kernel_call`` closes over."""
    import triton

    for cell in kernel_call.__closure__ or ():
        try:
            value = cell.cell_contents
        except ValueError:
            continue
        if isinstance(value, triton.Config):
            return 1.0 + zlib.crc32(repr(sorted(value.all_kwargs().items())).encode()) % 97 / 10
    return 1.0


def launch_record(name: str, binary: bytes, grid: tuple, block: int, shared: int, values: dict) -> dict:
    return {
        "kernel": name,
        "binary": digest(binary),
        "grid": list(grid),
        "block": block,
        "shared": shared,
        "args": values,
    }


# -- on a GPU (--gpu) ----------------------------------------------------------------------------------------------
#: The GpuWorld of a ``--gpu`` phase (None on the CPU): :meth:`Ctx.buf` allocates from it.
_GPU: list[Any] = [None]

#: Triton dtype name -> torch dtype name, for filling a buffer with values of its element type.
_TORCH_DTYPES = {
    "fp32": "float32",
    "fp16": "float16",
    "bf16": "bfloat16",
    "fp64": "float64",
    "int1": "bool",
    "i1": "bool",
    "u1": "bool",
    "int8": "int8",
    "int16": "int16",
    "int32": "int32",
    "int64": "int64",
    "uint8": "uint8",
}


def kernel_names(module: Any) -> set[str]:
    """The names the GPU knows the module's kernels by (Triton names a binary's entry after the Python function)."""
    from triton.runtime import KernelInterface

    names = set()
    for value in vars(module).values():
        if not isinstance(value, KernelInterface):
            continue
        while hasattr(value, "fn"):  # Autotuner -> Heuristics -> JITFunction -> the Python function
            value = value.fn
        names.add(getattr(value, "__name__", ""))
    names.discard("")
    return names


def kernel_launches(trace: dict, names: set[str]) -> list[dict]:
    """The launches of the kernels named ``names`` in a torch.profiler (Kineto/CUPTI) Chrome trace, in launch order
    (CUPTI's correlation id): ``{kernel, grid, block, shared}`` as the GPU ran them (``block`` an int when it is
    ``[x, 1, 1]``, as Triton's ``32 * num_warps``; ``shared``: static + dynamic shared memory)."""
    found = []
    for event in trace.get("traceEvents", []):
        if str(event.get("cat", "")).lower() != "kernel" or event.get("name") not in names:  # older Kineto: "Kernel"
            continue
        args = event.get("args") or {}
        block = list(args.get("block") or [])
        found.append(
            (
                args.get("correlation", 0),
                event.get("ts", 0),
                {
                    "kernel": event["name"],
                    "grid": list(args.get("grid") or []),
                    "block": block[0] if len(block) == 3 and block[1:] == [1, 1] else block,
                    "shared": args.get("shared memory"),
                },
            )
        )
    found.sort(key=lambda f: (f[0], f[1]))
    return [record for _, _, record in found]


def fill_values(torch: Any, n: int, dtype_name: str, seed: int, device: str) -> Any:
    """``n`` deterministic values of a torch dtype: the same bytes in every process (no RNG)."""
    i = torch.arange(n, device=device, dtype=torch.int64)
    dtype = getattr(torch, dtype_name)
    if dtype is torch.bool:
        return (i + seed) % 3 == 0
    if dtype.is_floating_point:
        return (((i * 7 + seed) % 251).to(torch.float32) * 0.25 - 31.0).to(dtype)
    return ((i * 7 + seed) % 251 - 125).to(dtype)


class GpuWorld:
    """What ``--gpu`` phases give the scenarios: buffers in device memory (:meth:`buf`) and, per drain, the kernels
    the GPU ran (CUPTI through torch.profiler, started per scenario and per drain) and every buffer's digest."""

    NBYTES = 1 << 16  # per buffer: the scenarios touch at most 4096 fp32 elements

    def __init__(self, device: str = "cuda") -> None:
        import torch

        if device == "cuda" and not torch.cuda.is_available():
            raise RuntimeError("--gpu: torch sees no CUDA GPU here")
        self.torch, self.device = torch, device
        self.names: set[str] = set()
        self.bufs: list[tuple[str, str, Any]] = []  # (name, Triton dtype, the uint8 tensor), this scenario's
        self.log: list[dict] = []
        self.prof: Any = None
        self.traces = tempfile.mkdtemp(prefix="fidelity-trace-")
        self.n_traces = 0
        self.profiler_error: str | None = None
        self.unmatched: set[str] = set()
        self._check_profiler()

    def _check_profiler(self) -> None:
        """A torch kernel under the profiler must show up as a ``kernel`` event, or launches cannot be observed."""
        try:
            self._start()
            self.torch.ones(1024, device=self.device).mul_(2)
            events = self._stop(names=None)
        except Exception as exc:  # said in the phase's result: the GPU test fails on it
            self.prof, self.profiler_error = None, f"torch.profiler failed: {type(exc).__name__}: {exc}"[:500]
            return
        if not events and self.profiler_error is None:
            self.profiler_error = "torch.profiler saw no CUDA kernel (CUPTI unavailable?): launches not observable"

    def buf(self, name: str, dtype: Any) -> Buf:
        torch = self.torch
        raw = torch.empty(self.NBYTES, dtype=torch.uint8, device=self.device)
        tdt = _TORCH_DTYPES.get(str(dtype), "uint8")
        view = raw.view(getattr(torch, tdt))
        view.copy_(fill_values(torch, view.numel(), tdt, zlib.crc32(name.encode()) % 97, self.device))
        self.bufs.append((name, str(dtype), raw))
        return Buf(name, raw.data_ptr(), dtype, raw)

    def digests(self) -> list[list[str]]:
        return [[name, dt, digest(raw.cpu().numpy().tobytes())] for name, dt, raw in self.bufs]

    def _start(self) -> None:
        if self.profiler_error is not None:
            return
        from torch.profiler import ProfilerActivity, profile

        try:
            prof = profile(activities=[ProfilerActivity.CUDA])
            prof.start()
        except Exception as exc:  # as in _stop: said once, launches unobservable from here on
            self.profiler_error = self.profiler_error or f"torch.profiler failed: {type(exc).__name__}: {exc}"
            return
        self.prof = prof

    def _stop(self, names: set[str] | None = None) -> list[dict]:
        prof, self.prof = self.prof, None
        if prof is None:
            return []
        if self.device == "cuda":
            self.torch.cuda.synchronize()
        try:
            trace = self._trace(prof)
        except Exception as exc:  # launches unobservable from here on: said once, the digests still compared
            if names is None:
                raise
            self.profiler_error = self.profiler_error or f"reading the profile failed: {type(exc).__name__}: {exc}"
            return []
        kernels = [e for e in trace.get("traceEvents", []) if str(e.get("cat", "")).lower() == "kernel"]
        if names is None:  # the profiler check: any kernel
            return kernels
        # kernels that are neither the scenarios' nor torch's (``void at::...``): a name the filter missed shows here
        self.unmatched |= {str(e.get("name")) for e in kernels if e.get("name") not in names} - {
            n for n in (str(e.get("name")) for e in kernels) if n.startswith("void ") or "at::" in n
        }
        return kernel_launches(trace, names)

    def _trace(self, prof: Any) -> dict:
        prof.stop()
        self.n_traces += 1
        path = os.path.join(self.traces, f"trace-{self.n_traces}.json")
        prof.export_chrome_trace(path)
        with open(path) as fh:
            trace = json.load(fh)
        os.unlink(path)
        return trace

    def begin(self) -> None:
        """A new scenario: no buffers yet, the profiler running."""
        self.bufs.clear()
        self.log = []
        self._start()

    def drain(self) -> list[dict]:
        if self.device == "cuda":
            self.torch.cuda.synchronize()
        got = self._stop(self.names)
        self.log.append({"launches": len(got), "buffers": self.digests()})
        self._start()
        return got

    def end(self) -> list[dict]:
        self._stop(self.names)
        self.bufs.clear()
        return self.log


class GpuCounts:
    """What Triton's own driver did in a ``--gpu`` phase (a served process: nothing)."""

    def __init__(self) -> None:
        self.loads: list[str] = []
        self.launched = 0
        self.bench_launches = 0
        self.benchmarks = 0


def _install_gpu_driver() -> GpuCounts:
    """Triton's real driver, wrapped: loads and launches counted, the benchmarker FidelityDriver's (deterministic),
    and launches made while it benchmarks kept from the GPU (their launch hooks still run, as driver.c runs them)."""
    from triton.runtime.driver import driver

    real = driver.active
    counts = GpuCounts()
    utils = real.utils
    load = utils.load_binary

    def load_binary(*args: Any) -> Any:
        counts.loads.append(args[0])
        return load(*args)

    utils.load_binary = load_binary
    inner_cls = real.launcher_cls

    def launcher_cls(src: Any, metadata: Any) -> Callable:
        inner = inner_cls(src, metadata)

        def launch(gx, gy, gz, stream, function, packed_metadata, launch_metadata, enter_hook, exit_hook, *args):
            if not benchmarking():
                counts.launched += 1
                return inner(
                    gx, gy, gz, stream, function, packed_metadata, launch_metadata, enter_hook, exit_hook, *args
                )
            counts.bench_launches += 1
            if enter_hook is not None:
                enter_hook(launch_metadata)
            if exit_hook is not None:
                exit_hook(launch_metadata)
            return None

        return launch

    real.launcher_cls = launcher_cls
    bench = _get_benchmarker(counts)
    real.get_benchmarker = lambda: bench
    driver.set_active(real)
    return counts


def _gpu_phase_info(world: GpuWorld, counts: GpuCounts) -> dict:
    import torch
    import triton

    rt = triton.knobs.runtime
    return {
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "profiler_error": world.profiler_error,
        "kernel_names": sorted(world.names),
        "other_kernels": sorted(world.unmatched)[:50],
        "launch_hooks_set": [bool(getattr(h, "calls", h)) for h in (rt.launch_enter_hook, rt.launch_exit_hook)],
        "triton_loads": len(counts.loads),
        "triton_launches": counts.launched,
        "bench_launches": counts.bench_launches,
        "benchmarks": counts.benchmarks,
    }


# -- what scenarios see --------------------------------------------------------------------------------------------
class Ctx:
    """What a scenario gets: the library's kernels (``k``), buffers, and the launches the GPU would have seen."""

    def __init__(self, kernels: Any, drain: Callable[[], list[dict]]) -> None:
        self.k = kernels
        self._drain = drain
        self._next = 0x7F0000000000

    def buf(self, name: str, dtype: Any = None) -> Buf:
        import triton.language as tl

        dtype = tl.float32 if dtype is None else dtype
        if _GPU[0] is not None:
            return _GPU[0].buf(name, dtype)
        self._next += 0x10000
        return Buf(name, self._next, dtype)

    def duck(self, name: str, addr: int, dtype: Any) -> DuckPtr:
        """A duck-typed pointer: at ``addr`` on the CPU, over a fresh device allocation under ``--gpu``."""
        if _GPU[0] is not None:
            return DuckPtr(_GPU[0].buf(name, dtype).addr, dtype)
        return DuckPtr(addr, dtype)

    def launches(self) -> list[dict]:
        return self._drain()


def raised(fn: Callable[[], Any]) -> list:
    """``["raises", type name, the type's MRO names, message]``, or ``["returned", ...]``."""
    try:
        out = fn()
    except Exception as exc:
        return ["raises", type(exc).__name__, [c.__name__ for c in type(exc).__mro__], str(exc)[:300]]
    return ["returned", kernel_summary(out)]


def _jsonable(v: Any) -> Any:
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    return repr(v)


def kernel_summary(ck: Any) -> Any:
    """What a library can read from the object a launch returned (a ``CompiledKernel`` under Triton)."""
    if isinstance(ck, list):
        return [kernel_summary(x) for x in ck]
    try:
        from triton.compiler import CompiledKernel
    except ImportError:  # pragma: no cover - the shim
        CompiledKernel = ()  # type: ignore[assignment]
    if not isinstance(ck, CompiledKernel):
        return {"type": type(ck).__name__} if ck is not None else None
    md = ck.metadata
    binary = ck.asm.get("cubin", ck.kernel)
    out = {
        "type": f"{type(ck).__module__}.{type(ck).__qualname__}",
        "name": ck.name,
        "hash": ck.hash,
        "metadata": {f: _jsonable(getattr(md, f)) for f in md._fields},
        "asm": sorted(set(ck.asm) & {"cubin", "ptx", "ttir", "ttgir", "llir"}),  # what libraries read
        "ptx": digest(ck.asm["ptx"]) if "ptx" in ck.asm else None,
        "binary": digest(binary),
        "kernel_is_binary": ck.kernel == binary,
        "launch_metadata": type(ck.launch_metadata((1, 1, 1), 0)).__name__,
    }
    run = ck.run  # loads the binary (Triton: CompiledKernel._init_handles)
    out.update(
        {
            "run_callable": callable(run),
            "function_set": ck.function is not None,
            "packed_metadata": _jsonable(ck.packed_metadata),
            "n_regs": type(ck.n_regs).__name__,
            "n_spills": type(ck.n_spills).__name__,
            "n_max_threads": type(ck.n_max_threads).__name__,
        }
    )
    return out


def config_summary(cfg: Any) -> Any:
    if cfg is None:
        return None
    return {
        "kwargs": _jsonable(cfg.kwargs),
        "num_warps": cfg.num_warps,
        "num_stages": cfg.num_stages,
        "num_ctas": cfg.num_ctas,
        "maxnreg": cfg.maxnreg,
        "pre_hook": getattr(cfg.pre_hook, "__name__", None),
    }


def seen() -> list:
    """What the library's own functions (prune, perf model, heuristics, hooks) saw since the last call."""
    out = _jsonable(list(SEEN_LOG()))
    SEEN_LOG().clear()
    events = _jsonable(list(EVENTS))
    EVENTS.clear()
    return out + [["event", *e] for e in events]


def SEEN_LOG() -> list:
    import fidelity_kernels

    return fidelity_kernels.SEEN


# -- the scenarios -------------------------------------------------------------------------------------------------
SCENARIOS: dict[str, Callable[[Ctx], Any]] = {}


def scenario(fn: Callable[[Ctx], Any]) -> Callable[[Ctx], Any]:
    SCENARIOS[fn.__name__] = fn
    return fn


@scenario
def return_value(c: Ctx) -> Any:
    """``kernel[grid](...)`` returns the CompiledKernel (JITFunction.run's ``return kernel``)."""
    x, out = c.buf("x"), c.buf("out")
    first = c.k.copy[(4,)](x, out, 1000, BLOCK=256)
    again = c.k.copy[(4,)](x, out, 1000, BLOCK=256)
    return {"summary": kernel_summary(first), "same_object": first is again, "launches": c.launches()}


@scenario
def relaunch_getitem(c: Ctx) -> Any:
    """A library keeps the CompiledKernel and relaunches it: ``ck[grid](*all bound args)`` (CompiledKernel.__getitem__)."""
    x, out = c.buf("x"), c.buf("out")
    ck = c.k.copy[(4,)](x, out, 1000, BLOCK=256)
    for n in (1000, 2000, 3000):
        ck[(n // 256 + 1, 1, 1)](x, out, n, 256)
    return {"launches": c.launches()}


@scenario
def relaunch_run(c: Ctx) -> Any:
    """``ck.run(g0, g1, g2, stream, ck.function, ck.packed_metadata, launch_metadata, enter, exit, *args)``:
    Triton's own launch line (jit.py), as operator libraries' entry layers call it to skip dispatch."""
    import triton

    x, out = c.buf("x"), c.buf("out")
    ck = c.k.copy[(2,)](x, out, 500, BLOCK=256)
    for g in (1, 2, 3):
        ck.run(
            g,
            1,
            1,
            0,
            ck.function,
            ck.packed_metadata,
            ck.launch_metadata((g, 1, 1), 0, x, out, 500, 256),
            triton.knobs.runtime.launch_enter_hook,
            triton.knobs.runtime.launch_exit_hook,
            x,
            out,
            500,
            256,
        )
    return {"launches": c.launches()}


@scenario
def warmup_then_launch(c: Ctx) -> Any:
    """``kernel.warmup(..., grid=)`` compiles without launching and returns the CompiledKernel; ``MockTensor`` stands in
    for tensors (KernelInterface.warmup wraps torch dtypes in one)."""
    import triton
    import triton.language as tl

    ck = c.k.copy.warmup(triton.MockTensor(tl.float32), triton.MockTensor(tl.float32), 1024, BLOCK=128, grid=(8,))
    before = c.launches()
    x, out = c.buf("x"), c.buf("out")
    ck[(8, 1, 1)](x, out, 1024, 128)
    via_run = c.k.copy.run(x, out, 1024, BLOCK=128, grid=(8,), warmup=False)
    return {
        "warmup": kernel_summary(ck),
        "launches_after_warmup": before,
        "launches": c.launches(),
        "run_returns_same": via_run is ck,
    }


@scenario
def grid_callable(c: Ctx) -> Any:
    """A callable grid receives the bound arguments (defaults applied, constexprs included)."""
    x, out = c.buf("x"), c.buf("out")
    metas: list = []

    def grid(meta):
        metas.append(sorted((k, v if isinstance(v, (int, float)) else type(v).__name__) for k, v in meta.items()))
        return (meta["n"] // meta["BLOCK"],)

    c.k.scaled[grid](x, out, 1024)
    return {"meta": metas, "launches": c.launches()}


@scenario
def runtime_defaults(c: Ctx) -> Any:
    """Runtime parameters with defaults, omitted: Triton binds the defaults (``alpha=2.0``, ``flag=3``, ``BLOCK=128``)."""
    x, out = c.buf("x"), c.buf("out")
    c.k.scaled[(8,)](x, out, 1024)
    launches = c.launches()  # a drain per call: under --gpu each call's output is digested
    c.k.scaled[(8,)](x, out, 1024, 0.5)
    launches += c.launches()
    c.k.scaled[(8,)](x, out, 1024, flag=7, BLOCK=128)
    return {"launches": launches + c.launches()}


@scenario
def binder_errors(c: Ctx) -> Any:
    """Bad calls: an unknown keyword (KeyError from _pack_args), a missing argument (TypeError from the binder)."""
    import triton.language as tl

    x, out = c.buf("x"), c.buf("out")
    unknown = raised(lambda: c.k.copy[(1,)](x, out, 64, BLOCK=64, BLOKC=32))
    missing = raised(lambda: c.k.copy[(1,)](x, out, BLOCK=64))
    too_many = raised(lambda: c.k.copy[(1,)](x, out, 64, 64, 64))
    device = raised(lambda: c.k.copy[(1,)](x, out, 64, BLOCK=64, device=0))  # AssertionError: deprecated option
    dtype_arg = raised(lambda: c.k.copy[(1,)](x, out, tl.float16, BLOCK=64))  # a tl.dtype is no runtime value
    return {
        "unknown_keyword": unknown,
        "missing": missing,
        "too_many": too_many,
        "device_option": device,
        "dtype_as_runtime_arg": dtype_arg,
        "launches": c.launches(),
    }


@scenario
def specialization(c: Ctx) -> Any:
    """Integer specialisation (``n == 1`` becomes a constant, multiples of 16 are marked) vs ``do_not_specialize`` and
    ``do_not_specialize_on_alignment``: which binary each call launches."""
    x, out = c.buf("x"), c.buf("out")
    odd = x.offset(4)
    caches = [c.k.copy.device_caches[0][0], c.k.unspecialized.device_caches[0][0]]
    before = [set(cache) for cache in caches]
    for n in (1, 16, 17):
        c.k.copy[(1,)](x, out, n, BLOCK=64)
    c.k.copy[(1,)](odd, out, 17, BLOCK=64)
    c.k.copy[(1,)](x, out, 2**33, BLOCK=64)  # beyond i32: an i64 parameter
    for n in (1, 16, 17):
        c.k.unspecialized[(1,)](x, out, n, BLOCK=64)
    c.k.unspecialized[(1,)](odd, out, 17, BLOCK=64)
    return {"launches": c.launches(), "new_specialisations": [len(set(cache) - b) for cache, b in zip(caches, before)]}


@scenario
def pre_run_hooks(c: Ctx) -> Any:
    """``JITFunction.add_pre_run_hook``: hooks get the call's args and kwargs (with the options run() added)."""
    got: list = []
    c.k.copy.add_pre_run_hook(lambda *a, **kw: got.append([len(a), sorted(kw)]))
    try:
        x, out = c.buf("x"), c.buf("out")
        c.k.copy[(1,)](x, out, 64, BLOCK=64)
        c.k.copy[(1,)](x, out, 64, BLOCK=64, num_warps=2)
    finally:
        c.k.copy.pre_run_hooks.clear()
    return {"hook_calls": got, "launches": c.launches()}


@scenario
def used_global_changed(c: Ctx) -> Any:
    """A constexpr global the kernel read changed after the compile: Triton refuses the launch (RuntimeError)."""
    import triton.language as tl

    x, out = c.buf("x"), c.buf("out")
    c.k.with_global[(1,)](x, out, 64, BLOCK=64)
    c.k.FACTOR = tl.constexpr(3)
    try:
        changed = raised(lambda: c.k.with_global[(1,)](x, out, 64, BLOCK=64))
    finally:
        c.k.FACTOR = tl.constexpr(2)
    back = raised(lambda: c.k.with_global[(1,)](x, out, 64, BLOCK=64))
    return {"changed": changed, "back": back[0], "launches": c.launches()}


@scenario
def launch_hooks(c: Ctx) -> Any:
    """``knobs.runtime.launch_enter_hook``/``launch_exit_hook`` (HookChains profilers ``add`` to) around every launch,
    with the metadata ``@triton.jit(launch_metadata=...)`` adds (a LazyDict: name, function, stream, then its dict)."""
    import triton

    calls: list = []

    def hook(which):
        def h(md):
            data = md.get() if md is not None else None
            calls.append(
                [
                    which,
                    sorted(data) if data else None,
                    {k: v for k, v in (data or {}).items() if k in ("name", "bytes", "grid0", "stream")},
                ]
            )

        return h

    x, out = c.buf("x"), c.buf("out")
    rt = triton.knobs.runtime
    enter, leave = hook("enter"), hook("exit")
    rt.launch_enter_hook.add(enter)
    rt.launch_exit_hook.add(leave)
    try:
        ck = c.k.described[(3,)](x, out, 300, BLOCK=128)
        c.k.copy[(2,)](x, out, 300, BLOCK=256)
        ck[(5, 1, 1)](x, out, 600, 128)
    finally:
        rt.launch_enter_hook.remove(enter)
        rt.launch_exit_hook.remove(leave)
    c.k.described[(3,)](x, out, 300, BLOCK=128)
    return {"hook_calls": calls, "launches": c.launches()}


@scenario
def jit_hooks(c: Ctx) -> Any:
    """``knobs.runtime.jit_cache_hook`` / ``jit_post_compile_hook``: called once per new specialisation, with its repr."""
    import triton

    calls: list = []

    def hook(which):
        def h(*, key, repr, fn, compile, is_manual_warmup, already_compiled):
            calls.append([which, repr, fn.name, is_manual_warmup, already_compiled, sorted(compile)])
            return False

        return h

    rt = triton.knobs.runtime
    rt.jit_cache_hook, rt.jit_post_compile_hook = hook("cache"), hook("post_compile")
    x, out = c.buf("x"), c.buf("out")
    try:
        c.k.cast[(1,)](x, out, 64, DT=triton.language.float16, BLOCK=64)
        c.k.cast[(1,)](x, out, 64, DT=triton.language.float16, BLOCK=64)
        c.k.cast[(1,)](x, out, 64, DT=triton.language.bfloat16, BLOCK=64)
    finally:
        rt.jit_cache_hook = rt.jit_post_compile_hook = None
    return {"hook_calls": calls, "launches": c.launches()}


@scenario
def kernel_cache(c: Ctx) -> Any:
    """``JITFunction.device_caches[device][0]``: the kernels Triton keeps per specialisation (read by tools)."""
    x, out = c.buf("x"), c.buf("out")
    c.k.optional_bias[(1,)](x, None, out, 64, BLOCK=64)
    c.k.optional_bias[(1,)](x, x, out, 64, BLOCK=64)
    c.k.optional_bias[(1,)](x, x, out, 64, BLOCK=64)
    cache = c.k.optional_bias.device_caches[0][0]
    return {
        "entries": len(cache),
        "kernels": sorted(kernel_summary(v)["binary"] for v in cache.values()),
        "launches": c.launches(),
    }


@scenario
def autotune_best_config(c: Ctx) -> Any:
    """Autotuner.run: the decision per key (``cache``), ``best_config`` after every call, the CompiledKernel returned."""
    x, out = c.buf("x"), c.buf("out")
    returned = [c.k.tuned[(4,)](x, out, n) for n in (4096, 4096, 1000, 4096)]
    return {
        "best_config": config_summary(c.k.tuned.best_config),
        "cache": {repr(k): config_summary(v) for k, v in c.k.tuned.cache.items()},
        "returned": [kernel_summary(r)["binary"] if r is not None else None for r in returned],
        "returned_type": kernel_summary(returned[0]),
        "nargs_after": c.k.tuned.nargs,
        "launches": c.launches(),
    }


@scenario
def autotune_best_config_when_the_launch_raises(c: Ctx) -> Any:
    """Autotuner.run sets ``best_config`` before its launch: a call whose grid raises leaves it set to the call's
    config (keys alternating: 1000 after 4096)."""
    x, out = c.buf("x"), c.buf("out")
    c.k.tuned[(4,)](x, out, 4096)
    c.k.tuned[(4,)](x, out, 1000)

    def grid(meta: dict) -> tuple[int]:
        raise ZeroDivisionError("the grid raised")

    seen = []
    for n in (4096, 1000):
        c.k.tuned.best_config = None
        seen.append([raised(lambda n=n: c.k.tuned[grid](x, out, n)), config_summary(c.k.tuned.best_config)])
    return {
        "seen": seen,
        "cache": {repr(k): config_summary(v) for k, v in c.k.tuned.cache.items()},
        "launches": c.launches(),
    }


@scenario
def autotune_prefilled_cache(c: Ctx) -> Any:
    """A library fills ``Autotuner.cache`` itself (a shipped decision, even a config not among ``configs``): Triton
    uses it without benchmarking."""
    import triton

    x, out = c.buf("x"), c.buf("out")
    c.k.prefilled.cache[(2048, "fp32", "fp32")] = triton.Config({"BLOCK": 32}, num_warps=1, num_stages=2)
    c.k.prefilled[(64,)](x, out, 2048)
    c.k.prefilled[(64,)](x, out, 2048)
    return {"best_config": config_summary(c.k.prefilled.best_config), "launches": c.launches()}


@scenario
def prune_to_table_configs(c: Ctx) -> Any:
    """``prune_configs_by={'early_config_prune': f}`` returning a config built from a table (not in ``configs``): Triton
    runs ``f`` once per new key, with the named args and keyword args, and launches what it returned."""
    x, out = c.buf("x"), c.buf("out")
    for n in (4096, 4096, 100, 8192):
        c.k.table_tuned[(1,)](x, out, n)
    return {
        "best_config": config_summary(c.k.table_tuned.best_config),
        "seen": seen(),
        "cache": sorted(repr(k) for k in c.k.table_tuned.cache),
        "launches": c.launches(),
    }


@scenario
def perf_model_top_k(c: Ctx) -> Any:
    """``prune_configs_by={'perf_model': m, 'top_k': 2}``: m is asked per config, the best two are benchmarked."""
    x, out = c.buf("x"), c.buf("out")
    c.k.modelled[(1,)](x, out, 4096)
    c.k.modelled[(1,)](x, out, 4096)
    return {"best_config": config_summary(c.k.modelled.best_config), "seen": seen(), "launches": c.launches()}


@scenario
def autotune_hooks(c: Ctx) -> Any:
    """Config ``pre_hook`` before every launch of the chosen config; the autotuner's own ``pre_hook``/``post_hook``
    around benchmarking and ``pre_hook(reset_only=True)`` once after it (calls made while benchmarking are marked)."""
    x, out = c.buf("x"), c.buf("out")
    for _ in range(3):
        c.k.hooked[(1,)](x, out, 2048)
    # what a served call must show: the calls outside benchmarking
    return {
        "outside_benchmarking": [s for s in seen() if s[-1] is False],
        "best_config": config_summary(c.k.hooked.best_config),
        "launches": c.launches(),
    }


@scenario
def reset_and_restore(c: Ctx) -> Any:
    """``reset_to_zero`` / ``restore_value``: after benchmarking Triton zeroes the reset buffers once more
    (``pre_hook(reset_only=True)``), then launches: the first call of a key runs on a zeroed accumulator."""
    x, acc = c.buf("x"), c.buf("acc")
    c.k.accumulating[(1,)](x, acc, 4096)
    first = seen()
    c.k.accumulating[(1,)](x, acc, 4096)
    return {"first_call": first, "second_call": seen(), "launches": c.launches()}


@scenario
def autotune_key_dtypes(c: Ctx) -> Any:
    """The tuning key: the ``key`` arguments' values, then ``str(arg.dtype)`` of every argument that has a dtype."""
    import triton.language as tl

    c.k.dtype_keyed[(1,)](c.buf("x"), c.buf("out"), 4096)
    c.k.dtype_keyed[(1,)](c.buf("x", tl.float16), c.buf("out", tl.float16), 4096)
    c.k.dtype_keyed[(1,)](c.buf("x", tl.float16), c.buf("out"), 4096)
    return {"cache": sorted(repr(k) for k in c.k.dtype_keyed.cache), "launches": c.launches()}


@scenario
def autotuner_subclass(c: Ctx) -> Any:
    """A library's Autotuner subclass overriding ``run`` and ``prune_configs``: both run, as Triton calls them."""
    x, out = c.buf("x"), c.buf("out")
    c.k.sub_tuned[(1,)](x, out, 4096)
    c.k.sub_tuned[(1,)](x, out, 4096)
    return {"seen": seen(), "best_config": config_summary(c.k.sub_tuned.best_config), "launches": c.launches()}


@scenario
def autotuner_warmup(c: Ctx) -> Any:
    """``Autotuner.warmup`` compiles every pruned config and returns their kernels; nothing launches."""
    import triton
    import triton.language as tl

    got = c.k.tuned.warmup(triton.MockTensor(tl.float32), triton.MockTensor(tl.float32), 512, grid=(1,))
    return {
        "kernels": sorted(s["binary"] for s in kernel_summary(got)) if isinstance(got, list) else kernel_summary(got),
        "launches": c.launches(),
    }


@scenario
def heuristics_values(c: Ctx) -> Any:
    """``@triton.heuristics``: values computed from the positional and keyword arguments (not defaults); a value the
    caller passes explicitly is overwritten by the heuristic; ``num_warps`` may come from one."""
    x, out = c.buf("x"), c.buf("out")
    c.k.heuristic[(1,)](x, out, 100)
    launches = c.launches()  # a drain per call: under --gpu each call's output is digested
    c.k.heuristic[(1,)](x, out, 4096, scale=0.5)
    launches += c.launches()
    c.k.heuristic[(1,)](x, out, 4096, BLOCK=64)  # the caller's BLOCK loses to the heuristic's
    return {"seen": seen(), "launches": launches + c.launches()}


@scenario
def none_and_constexpr_args(c: Ctx) -> Any:
    """``None`` for a pointer (a constexpr None: another binary), ``tl.constexpr(...)`` and ``tl.dtype`` constexprs."""
    import triton.language as tl

    x, out = c.buf("x"), c.buf("out")
    c.k.optional_bias[(1,)](x, None, out, 64, BLOCK=64)
    c.k.optional_bias[(1,)](x, x, out, 64, BLOCK=tl.constexpr(64))
    c.k.cast[(1,)](x, out, 64, DT=tl.float16, BLOCK=64)
    c.k.cast[(1,)](x, out, 64, tl.bfloat16, tl.constexpr(64))
    launches = c.launches()
    return {"launches": launches, "binaries": len({la.get("binary") for la in launches})}


@scenario
def duck_typed_pointers(c: Ctx) -> Any:
    """An object with only ``data_ptr()`` and ``dtype`` is a pointer; a bool dtype is ``*u1`` (Triton's specialisation,
    not ``*i1``), a Python bool runtime argument ``u1``."""
    import triton.language as tl

    mask = c.duck("mask", 0x7F0000100000, tl.int1)
    out = c.duck("out", 0x7F0000200000, tl.float32)
    c.k.masked[(1,)](mask, out, 64, True, BLOCK=64)
    launches = c.launches()  # a drain per call: under --gpu each call's output is digested
    c.k.masked[(1,)](mask, out, 64, False, BLOCK=64)
    return {"launches": launches + c.launches()}


@scenario
def options_and_empty_grid(c: Ctx) -> Any:
    """Launch options as keywords (``num_warps``, ``num_stages``) pick another binary; an empty grid launches nothing
    and is no error."""
    x, out = c.buf("x"), c.buf("out")
    c.k.copy[(1,)](x, out, 64, BLOCK=64, num_warps=8, num_stages=2)
    empty = raised(lambda: c.k.copy[(0,)](x, out, 64, BLOCK=64))
    return {"empty_grid": empty[0], "launches": c.launches()}


@scenario
def entry_layer_relaunch(c: Ctx) -> Any:
    """An operator library's entry layer (FlagGems' LibEntry): the first call through ``run`` keeps the CompiledKernel,
    reads ``best_config`` and the heuristics' values, and every later call relaunches ``ck[grid](*every parameter)``
    with the tuned and heuristic constexprs filled in."""
    x, out = c.buf("x"), c.buf("out")
    ck = c.k.tuned_even.run(x, out, 4096, grid=(1,), warmup=False)
    best = c.k.tuned_even.best_config
    even = c.k.tuned_even.fn.values["EVEN"]({"x_ptr": x, "out_ptr": out, "n": 4096, **best.kwargs})
    for n in (4096, 4096, 4096):
        ck[(n // best.kwargs["BLOCK"], 1, 1)](x, out, n, best.kwargs["BLOCK"], even)
    wrong = raised(lambda: ck[(4,)](x, out, 4096, best.kwargs["BLOCK"], even))  # a 1-entry grid: grid[1] fails
    return {
        "best_config": config_summary(best),
        "even": even,
        "returned": kernel_summary(ck)["binary"],
        "one_entry_grid": wrong[:3],
        "launches": c.launches(),
    }


@scenario
def heuristics_around_autotune(c: Ctx) -> Any:
    """Heuristics under an autotuner see the chosen config (``EVEN`` from its ``BLOCK``); heuristics above one feed the
    tuning key (``HAS_B``)."""
    x, out = c.buf("x"), c.buf("out")
    c.k.tuned_even[(1,)](x, out, 4096)
    c.k.tuned_even[(1,)](x, out, 1000)
    c.k.biased_tuned[(1,)](x, None, out, 4096)
    c.k.biased_tuned[(1,)](x, x, out, 4096)
    return {
        "tuned_even": {repr(k): config_summary(v) for k, v in c.k.tuned_even.cache.items()},
        "biased_tuned": sorted(repr(k) for k in c.k.biased_tuned.fn.cache),
        "launches": c.launches(),
    }


@scenario
def tuned_meta_parameter_passed(c: Ctx) -> Any:
    """A call that passes a meta-parameter the autotuner tunes: Triton refuses it (``ValueError`` "Conflicting
    meta-parameters" while tuning a new key; ``TypeError`` once the key is tuned)."""
    x, out = c.buf("x"), c.buf("out")
    first = raised(lambda: c.k.tuned[(1,)](x, out, 777, BLOCK=64))
    c.k.tuned[(1,)](x, out, 777)
    again = raised(lambda: c.k.tuned[(1,)](x, out, 777, BLOCK=64))
    return {"new_key": first[:3], "tuned_key": again[:3], "launches": c.launches()}


@scenario
def preload(c: Ctx) -> Any:
    """``JITFunction.preload(specialization_data)``: the JSON a ``jit_cache_hook`` receives rebuilds the kernel (a
    warm-up compile) without a call; the next call with that specialisation launches it."""
    import triton

    data: list = []

    def hook(*, key, repr, fn, compile, is_manual_warmup, already_compiled):
        data.append(compile["specialization_data"])
        return False

    x, out = c.buf("x"), c.buf("out")
    triton.knobs.runtime.jit_cache_hook = hook
    try:
        c.k.copy[(1,)](x, out, 4096, BLOCK=512)
    finally:
        triton.knobs.runtime.jit_cache_hook = None
    ck = c.k.copy.preload(data[0])
    again = c.k.copy[(1,)](x, out, 4096, BLOCK=512)
    return {"preloaded": kernel_summary(ck), "launch_returns_it": again is ck, "launches": c.launches()}


# -- phases --------------------------------------------------------------------------------------------------------
def _run_all(
    kernels: Any,
    drain: Callable[[], list[dict]],
    extra: Callable[[], dict] | None = None,
    only: list[str] | None = None,
    world: GpuWorld | None = None,
) -> dict:
    results: dict[str, Any] = {}
    for name, fn in SCENARIOS.items():
        if only and name not in only:
            continue
        SEEN_LOG().clear()
        EVENTS.clear()
        before = extra() if extra else {}
        if world is not None:
            world.begin()
        try:
            obs: Any = {"obs": fn(Ctx(kernels, drain))}
        except Exception as exc:
            obs = {"error": f"{type(exc).__name__}: {exc}"[:2000], "traceback": traceback.format_exc()[-3000:]}
        drain()
        if world is not None:
            obs["gpu"] = world.end()  # per drain: how many launches, every buffer's digest
        if extra:
            after = extra()
            obs["counts"] = {k: after[k] - before.get(k, 0) for k in after}
        results[name] = obs
    return results


def _install_driver() -> Any:
    from triton.runtime.driver import driver

    fake = _driver_class()()
    driver.set_active(fake)
    return fake


def _triton_drain(fake: Any) -> Callable[[], list[dict]]:
    def drain() -> list[dict]:
        out = list(fake.launched)
        fake.launched.clear()
        return out

    return drain


def _gpu_setup() -> tuple[GpuWorld, GpuCounts]:
    world = GpuWorld()
    _GPU[0] = world
    return world, _install_gpu_driver()


def _gpu_counts(counts: GpuCounts) -> Callable[[], dict]:
    return lambda: {
        "triton_loads": len(counts.loads),
        "triton_launches": counts.launched,
        "bench_launches": counts.bench_launches,
        "benchmarks": counts.benchmarks,
    }


def _run_gpu(args: argparse.Namespace, world: GpuWorld, counts: GpuCounts, extra: Callable[[], dict]) -> dict:
    import fidelity_kernels

    world.names = kernel_names(fidelity_kernels)
    results = _run_all(fidelity_kernels, world.drain, extra, only=args.only, world=world)
    results["__gpu__"] = _gpu_phase_info(world, counts)
    return results


def phase_triton(args: argparse.Namespace) -> dict:
    if args.gpu:
        world, counts = _gpu_setup()
        return _run_gpu(args, world, counts, _gpu_counts(counts))
    fake = _install_driver()
    import fidelity_kernels

    return _run_all(fidelity_kernels, _triton_drain(fake), only=args.only)


def phase_capture(args: argparse.Namespace) -> dict:
    import karchive

    if args.gpu:
        world, counts = _gpu_setup()
        with karchive.capture("fidelity", version="1", scope="process") as cap:
            results = _run_gpu(args, world, counts, _gpu_counts(counts))
    else:
        fake = _install_driver()
        import fidelity_kernels

        with karchive.capture("fidelity", version="1", scope="process") as cap:
            results = _run_all(fidelity_kernels, _triton_drain(fake), only=args.only)
    cap.save(args.archive)
    results["__capture__"] = {
        "warnings": [str(w) for w in cap.warnings],
        "left_out": _jsonable(cap.summary().get("left_out")),
    }
    return results


def _served_values(arc: Any, image: bytes, params: tuple) -> dict:
    """The runtime arguments of a served launch, by name, from the bytes the driver got and the ABI of the archive's
    variants with that binary (variants of one kernel may share a binary: their ABIs then agree)."""
    abis = {
        tuple((p.name, p.kind, p.type) for p in v.abi.params): v.abi.params
        for name in arc.kernels()
        for v in arc.variants(name)
        if arc.reader.read(v.binary.path) == image
    }
    if len(abis) != 1:
        return {"?": f"{len(abis)} launch ABIs have the launched binary"}
    abi = next(iter(abis.values()))
    return {p.name: decode(p.type, raw) for p, raw in zip(abi, params) if p.kind in ("pointer", "scalar")}


class _NoCompiler(Exception):
    pass


def phase_serve(args: argparse.Namespace) -> dict:
    """A fresh process: Triton's compiler raises (and counts), Triton's driver answers but must load, launch and
    benchmark nothing; launches reach karchive's launcher over the recording CUDA stand-in."""
    import pytest
    import triton
    import triton.compiler
    import triton.compiler.compiler as cc

    count = {"compiles": 0}

    def refuse(*a: Any, **k: Any) -> Any:
        count["compiles"] += 1
        raise _NoCompiler("Triton's compiler is disabled in this process (serve fidelity)")

    triton.compile = refuse  # type: ignore[attr-defined]
    triton.compiler.compile = refuse  # type: ignore[attr-defined]
    cc.compile = refuse
    if args.gpu:
        return _serve_gpu(args, count)
    fake = _install_driver()

    import runtime_support as rs

    import karchive
    from karchive.runtime import launch_path

    if args.path == launch_path.EXTENSION and launch_path.extension() is None:
        return {"__skip__": f"the compiled launcher is not built here: {launch_path.status().detail}"}
    mp = pytest.MonkeyPatch()
    with rs.fake_cuda(mp, args.path) as (rec, _backend):
        arc = karchive.open(args.archive)
        rs.register_sizes(rec, arc)
        karchive.serve(arc, mode="strict")
        import fidelity_kernels

        seen_n = [0]

        def drain() -> list[dict]:
            got = rec.launches()[seen_n[0] :]
            seen_n[0] += len(got)
            out = []
            for la in got:
                name, image = rec.functions[la.function]
                values = _served_values(arc, image, la.params)
                out.append(launch_record(name, image, la.grid, la.block[0], la.shared, values))
            return out

        def counts() -> dict:
            return {
                "compiles": count["compiles"],
                "triton_loads": len(fake.loads),
                "triton_launches": len(fake.launched),
                "benchmarks": fake.benchmarks,
            }

        results = _run_all(fidelity_kernels, drain, counts, only=args.only)
        report = karchive.serve_report()
        results["__serve__"] = {"report": report.to_json() if report is not None else None}
    mp.undo()
    return results


def _serve_gpu(args: argparse.Namespace, count: dict) -> dict:
    """``phase_serve`` on a GPU: karchive's launcher on the real driver, on ``args.path``."""
    import karchive
    from karchive.runtime import launch_path

    if args.path == launch_path.EXTENSION and launch_path.extension() is None:
        return {"__skip__": f"the compiled launcher is not built here: {launch_path.status().detail}"}
    world, counts = _gpu_setup()
    tally = _gpu_counts(counts)
    with launch_path.forced(args.path):
        arc = karchive.open(args.archive)
        karchive.serve(arc, mode="strict")
        results = _run_gpu(args, world, counts, lambda: {"compiles": count["compiles"], **tally()})
        report = karchive.serve_report()
        results["__serve__"] = {"report": report.to_json() if report is not None else None}
    return results


PHASES = {"triton": phase_triton, "capture": phase_capture, "serve": phase_serve}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("phase", choices=sorted(PHASES))
    ap.add_argument("--out", required=True)
    ap.add_argument("--archive")
    ap.add_argument("--only", nargs="*")
    ap.add_argument(
        "--path",
        default="python",
        choices=("python", "extension"),
        help="serve: karchive's launch path (Python, or the compiled launcher)",
    )
    ap.add_argument(
        "--gpu",
        action="store_true",
        help="run on a CUDA GPU: Triton's real driver, device buffers, launches as CUPTI saw them (module docstring)",
    )
    args = ap.parse_args(argv)
    if args.phase != "triton" and not args.archive:
        ap.error(f"{args.phase} needs --archive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sys.path[:0] = [str(HERE), str(ROOT)]
    try:
        result = PHASES[args.phase](args)
    except BaseException as exc:
        traceback.print_exc()
        result = {"__phase_error__": f"{type(exc).__name__}: {exc}"[:3000], "traceback": traceback.format_exc()}
    Path(args.out).write_text(json.dumps(result, indent=1, default=repr))
    return 0


if __name__ == "__main__":
    sys.path[:0] = [str(HERE), str(ROOT)]
    import fidelity_support  # one instance of this module: the kernels' hooks import it too

    sys.exit(fidelity_support.main())
