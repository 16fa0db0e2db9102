"""TEST DOUBLE for the missing GPU: a Triton driver that reports a fixed target and launches nothing.

This machine has no GPU. Triton's JIT asks ``driver.active`` for the current target, device and
stream, loads binaries and launches them; this fake answers with ``GPUTarget("cuda", 90, 32)``,
pretends to load modules and turns launches into no-ops, so ``@triton.jit`` calls (and autotuning,
with scripted timings) run the real compile path on CPU. It proves capture, keys and cache interop;
it proves nothing about running kernels — tests/gpu/test_capture_*.py do that on an H100.

Also holds the kernels the capture tests run. A plain module (not collected by pytest, imported only
by tests that need Triton and by their subprocesses), so a machine without Triton collects the suite.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Iterator

import triton
import triton.language as tl

FAKE_TARGET = ("cuda", 90, 32)

# Tests that compile from several threads take this around each compile: they test attribution, not
# CPython 3.11's ast.parse, which two threads entering at once can fail with "AST constructor recursion depth
# mismatch" (python/cpython gh-106905, in Triton's own parse; seen once in CI).
ONE_COMPILE_AT_A_TIME = threading.Lock()


class _FakeUtils:
    def load_binary(self, name, kernel, shared, device):  # module, function, n_regs, n_spills, n_max_threads
        # module None: CompiledKernel.__del__ then never asks the (absent) real driver to unload it
        return None, 1, 32, 0, 1024

    def get_device_properties(self, device):
        return {
            "max_shared_mem": 232448,
            "multiprocessor_count": 132,
            "max_num_regs": 65536,
            "warpSize": 32,
            "sm_clock_rate": 1,
            "mem_clock_rate": 1,
            "mem_bus_width": 1,
        }

    def unload_module(self, module):
        return None


class FakeDriver:
    """The GPU-less driver double; ``timings`` scripts what the autotuner's benchmark reports, in call order."""

    def __init__(self, timings: list[float] | None = None) -> None:
        from triton.backends.compiler import GPUTarget

        self.target = GPUTarget(*FAKE_TARGET)
        self.utils = _FakeUtils()
        self.launches = 0
        self._timings = itertools.cycle(timings or [1.0])

    def is_active(self) -> bool:
        return True

    def get_current_target(self):
        return self.target

    def get_current_device(self) -> int:
        return 0

    def set_current_device(self, device: int) -> None:
        return None

    def get_current_stream(self, device: int | None = None) -> int:
        return 0

    def get_active_torch_device(self):
        return None

    def get_device_interface(self):
        raise RuntimeError("fake driver: no torch device")

    def launcher_cls(self, src, metadata):
        def launch(*args, **kwargs):
            self.launches += 1

        return launch

    def get_benchmarker(self):
        def do_bench(fn, quantiles=None, **kwargs):
            fn()
            t = next(self._timings)
            return [t, t, t] if quantiles else t

        return do_bench


@contextlib.contextmanager
def fake_gpu(timings: list[float] | None = None) -> Iterator[FakeDriver]:
    from triton.runtime.driver import driver

    fake = FakeDriver(timings)
    previous = getattr(driver, "_active", None)
    driver.set_active(fake)
    try:
        yield fake
    finally:
        if previous is None:
            driver._active = None  # no GPU: there is no default driver to reset to
        else:
            driver.set_active(previous)


class MockPtr(triton.MockTensor):
    """A pointer argument: data_ptr 0 (so Triton marks it divisible by 16)."""


# --- kernels the tests run -------------------------------------------------------------------------
@triton.jit
def scale_rows(x_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) * alpha, mask=m)


@triton.autotune(
    configs=[
        triton.Config({"BLOCK": 64}, num_warps=2),
        triton.Config({"BLOCK": 128}, num_warps=4),
        triton.Config({"BLOCK": 256}, num_warps=4),
    ],
    key=["n"],
)
@triton.jit
def tuned_copy(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)


@triton.heuristics({"EVEN": lambda args: args["n"] % args["BLOCK"] == 0})
@triton.jit
def heur_copy(x_ptr, out_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN:
        tl.store(out_ptr + offs, tl.load(x_ptr + offs))
    else:
        m = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)


@triton.jit
def pair_sum(ptrs, out_ptr, n, BLOCK: tl.constexpr):
    """Takes a tuple of pointers: Triton compiles it, karchive's launch ABI cannot describe it."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(ptrs[0] + offs, mask=m) + tl.load(ptrs[1] + offs, mask=m), mask=m)


@triton.heuristics(
    {
        "HAS_BIAS": lambda args: args["bias_ptr"] is not None,
        "WIDE": lambda args: args["x_ptr"].dtype.primitive_bitwidth > 16 and args["n"] >= 4096,
        "num_warps": lambda args: 8 if args["n"] >= 4096 else 4,
    }
)
@triton.jit
def heur_bias(x_ptr, bias_ptr, out_ptr, n, BLOCK: tl.constexpr, HAS_BIAS: tl.constexpr, WIDE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    if HAS_BIAS:
        x += tl.load(bias_ptr + offs, mask=m)
    if WIDE:
        x = x * 2
    tl.store(out_ptr + offs, x, mask=m)


@triton.heuristics({"ODD": lambda args: isinstance(args["x_ptr"], MockPtr) and args["n"] % 2 == 1})
@triton.jit
def heur_opaque(x_ptr, out_ptr, n, BLOCK: tl.constexpr, ODD: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n - ODD
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)


@triton.autotune(
    configs=[triton.Config({"BLOCK": 64}, num_warps=2), triton.Config({"BLOCK": 128}, num_warps=4)], key=["n"]
)
@triton.heuristics({"EVEN": lambda args: args["n"] % args["BLOCK"] == 0})
@triton.jit
def tuned_even_copy(x_ptr, out_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN:
        tl.store(out_ptr + offs, tl.load(x_ptr + offs))
    else:
        m = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)


def ptr(dtype=None) -> MockPtr:
    """A pointer argument for the fake GPU (fp32 unless given a triton.language dtype)."""
    return MockPtr(dtype if dtype is not None else tl.float32)


def fresh(*fns) -> None:
    """Drop JIT functions' in-memory kernel caches (and autotuners' choices) so the next call compiles again."""
    for fn in fns:
        obj = fn
        while True:
            if hasattr(obj, "cache") and isinstance(obj.cache, dict):
                obj.cache.clear()
                obj.__dict__.pop("do_bench", None)  # the tuner caches the benchmarker of the driver it first saw
            if hasattr(obj, "device_caches"):
                obj.device_caches.clear()
                break
            obj = obj.fn
