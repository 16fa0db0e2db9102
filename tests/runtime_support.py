"""Shared pieces of the runtime tests (a plain module; their fixtures are in conftest.py): small archives compiled here (Triton, no GPU) and driver stand-ins.

FakeCuda and FakeHip are TEST DOUBLES FOR HARDWARE THAT DOES NOT EXIST HERE (no GPU on this machine, no
AMD GPU anywhere in this project). Each implements the handful of binding calls karchive makes
(cuda-python's ``cuda.bindings.driver`` / hip-python's ``hip.hip``) and records every launch with the
exact bytes behind each kernel parameter pointer. Both launch paths reach the same recording function:
the Python path through the binding's launch call, the compiled path through the driver address the
stand-in hands out (``_fastlaunch.forward_address()``: a C function with the driver's signature that
forwards to Python), so what the C code packed is read while the call is in progress. On the real
driver the same code runs on the H100 (tests/gpu).
"""

from __future__ import annotations

import contextlib
import ctypes
import pathlib
import struct
import threading
import types
from collections.abc import Iterator
from typing import Any, NamedTuple

import pytest

from karchive.runtime import launch_path

ROOT = pathlib.Path(__file__).resolve().parent.parent
KERNELS = str(ROOT / "examples" / "kernels.py")
TEST_KERNELS = str(ROOT / "tests" / "runtime_kernels.py")
ADD16 = "*fp32:16, *fp32:16, *fp32:16, i32"
#: One parameter of every scalar type the runtime packs (tests/runtime_kernels.py: scalars_kernel).
SCALARS_SIG = "*fp32:16, i1, i8, i16, u32, i64, fp16, bf16, fp32, fp64, i32"

PATHS = [launch_path.PYTHON, launch_path.EXTENSION]


def have_triton() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def path_param(request: Any) -> str:
    """For fixtures parametrized over PATHS: skip the compiled path where it is not built."""
    if request.param == launch_path.EXTENSION and launch_path.extension() is None:
        pytest.skip(f"the compiled launcher is not built here: {launch_path.status().detail}")
    return request.param


def compile_many(reqs: list[tuple]) -> list:
    from karchive.producer.compile.aot import VariantRequest, compile_variant

    return [
        compile_variant(VariantRequest(src + ":" + k, sig, target, cx, opts)) for src, k, sig, target, cx, opts in reqs
    ]


def write_archive(path: pathlib.Path, variants: list, name: str = "rt") -> pathlib.Path:
    from karchive.producer.build.pack import ArchiveBuilder

    b = ArchiveBuilder(name, "1.0", produced_by={"triton": "test"})
    b.extend(variants)
    b.write(path)
    return path


CUDA_REQS = [
    (KERNELS, "add_kernel", ADD16, "cuda:90", {"BLOCK": 1024}, {"num_warps": 4}),
    (KERNELS, "add_kernel", "*fp32, *fp32, *fp32, i32", "cuda:90", {"BLOCK": 1024}, {"num_warps": 8}),
    (KERNELS, "add_kernel", ADD16, "cuda:80", {"BLOCK": 512}, {"num_warps": 4}),
    (KERNELS, "scale_kernel", "*fp32:16, *fp32:16, i32, i32:1, fp32", "cuda:90", {"BLOCK": 256}, {"num_warps": 4}),
    (KERNELS, "scale_kernel", "*fp32:16, *fp32:16, i32, i32, fp32", "cuda:90", {"BLOCK": 256}, {"num_warps": 4}),
    (KERNELS, "scale_kernel", "*bf16:16, *bf16:16, i32, i32:1, bf16", "cuda:90", {"BLOCK": 256}, {"num_warps": 4}),
    (
        KERNELS,
        "matmul_kernel",
        "*fp16:16, *fp16:16, *fp16:16, i32, i32, i32, i32, i32:1, i32, i32:1, i32, i32:1",
        "cuda:90",
        {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32},
        {"num_warps": 4},
    ),
]
HIP_REQS = [
    (KERNELS, "add_kernel", ADD16, "hip:gfx942", {"BLOCK": 256}, {"num_warps": 4}),
    (KERNELS, "scale_kernel", "*fp16:16, *fp16:16, i32, i32:1, fp16", "hip:gfx942", {"BLOCK": 256}, {"num_warps": 4}),
    (KERNELS, "scale_kernel", "*fp32:16, *fp32:16, i32, i32, fp32", "hip:gfx942", {"BLOCK": 256}, {"num_warps": 4}),
]
#: The launch path's own archive: every scalar type, and one kernel built at two num_warps/num_stages.
LAUNCH_REQS = [
    (TEST_KERNELS, "scalars_kernel", SCALARS_SIG, "cuda:90", {"BLOCK": 128}, {"num_warps": 4}),
    (KERNELS, "add_kernel", ADD16, "cuda:90", {"BLOCK": 1024}, {"num_warps": 4, "num_stages": 3}),
    (KERNELS, "add_kernel", ADD16, "cuda:90", {"BLOCK": 1024}, {"num_warps": 8, "num_stages": 3}),
    (KERNELS, "add_kernel", ADD16, "cuda:90", {"BLOCK": 1024}, {"num_warps": 4, "num_stages": 2}),
]

#: Calls that omit what selection needs (tests/test_runtime_omitted.py): EVEN in {True, False} with no
#: default, the same kernel with ``EVEN=False`` as its default, and num_warps 2 / 8 (Triton's 4 not built).
OMIT_SIG = "*fp32:16, *fp32:16, i32"
OMIT_REQS = [
    (TEST_KERNELS, "even_kernel", OMIT_SIG, "cuda:90", {"BLOCK": 256, "EVEN": True}, {"num_warps": 4}),
    (TEST_KERNELS, "even_kernel", OMIT_SIG, "cuda:90", {"BLOCK": 256, "EVEN": False}, {"num_warps": 4}),
    (TEST_KERNELS, "even_default_kernel", OMIT_SIG, "cuda:90", {"BLOCK": 256, "EVEN": True}, {"num_warps": 4}),
    (TEST_KERNELS, "even_default_kernel", OMIT_SIG, "cuda:90", {"BLOCK": 256, "EVEN": False}, {"num_warps": 2}),
    (TEST_KERNELS, "even_default_kernel", OMIT_SIG, "cuda:90", {"BLOCK": 256, "EVEN": False}, {"num_warps": 8}),
]


class Cai:
    """A device array that only speaks ``__cuda_array_interface__`` (Numba, others): a typed pointer with no
    framework behind it."""

    def __init__(self, ptr: int, typestr: str = "<f4") -> None:
        self.ptr, self.typestr = ptr, typestr

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"data": (self.ptr, False), "typestr": self.typestr, "shape": (4,), "version": 3}


class Handle:
    """A binding's opaque handle (CUfunction, CUstream, ...): only ``int()`` gives its value."""

    __slots__ = ("value", "kind")

    def __init__(self, value: int, kind: str = "handle") -> None:
        self.value, self.kind = int(value), kind

    def __int__(self) -> int:
        return self.value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Handle) and other.value == self.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __repr__(self) -> str:
        return f"<{self.kind} 0x{self.value:x}>"


class Launch(NamedTuple):
    """One launch as the driver saw it."""

    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared: int
    stream: int
    params: tuple[bytes, ...]  # the bytes behind each kernelParams pointer
    extra: int
    result: int  # what the stand-in returned (0: launched)
    thread: int
    kernel_params: int  # the address of the void* array (whose buffer the launch read)
    function: int = 0  # the function handle launched (:func:`launched_variant` tells whose binary it is)
    attrs: tuple = ()  # cuLaunchKernelEx's attributes: (id, the 64 bytes of the value as cuda.h lays it out)


class Recorder:
    """What both stand-ins share: function handles, parameter sizes per loaded image, launch records."""

    def __init__(self) -> None:
        self.functions: dict[int, tuple[str, bytes]] = {}  # handle -> (entry name, image)
        self.sizes: dict[bytes, list[int]] = {}  # image -> ABI parameter sizes (the test says, from the manifest)
        self.attempts: list[Launch] = []
        self.results: list[int] = []  # results to return next, first first (then: success)
        self.lock = threading.Lock()
        self.next_handle = 0x5000

    def new_function(self, name: str, image: bytes) -> Handle:
        with self.lock:
            self.next_handle += 0x10
            h = self.next_handle
        self.functions[h] = (name, image)
        return Handle(h, "function")

    def record(
        self,
        function: int,
        grid: tuple,
        block: tuple,
        shared: int,
        stream: int,
        params: int,
        extra: int,
        refuse: int = 0,
        attrs: tuple = (),
    ) -> int:
        name, image = self.functions[function]
        sizes = self.sizes.get(image, [])
        ptrs = (ctypes.c_void_p * max(len(sizes), 1)).from_address(params) if params else []
        data = tuple(ctypes.string_at(ptrs[i], s) for i, s in enumerate(sizes)) if params else ()
        with self.lock:
            result = refuse or (self.results.pop(0) if self.results else 0)
            self.attempts.append(
                Launch(
                    name,
                    tuple(grid),
                    tuple(block),
                    shared,
                    stream,
                    data,
                    extra,
                    result,
                    threading.get_ident(),
                    params,
                    int(function),
                    tuple(attrs),
                )
            )
        return result

    def launches(self) -> list[Launch]:
        return [a for a in self.attempts if a.result == 0]


@contextlib.contextmanager
def forwarding(recorder_fn: Any) -> Iterator[int | None]:
    """The compiled path's stand-in driver address while the block runs (None where it is not built)."""
    ext = launch_path.extension()
    if ext is None:
        yield None
        return
    ext.forward_to(recorder_fn)
    try:
        yield ext.forward_address()
    finally:
        ext.forward_to(None)


# -- CUDA -------------------------------------------------------------------------------------------------
def _enum(**members: int) -> types.SimpleNamespace:
    return types.SimpleNamespace(**members)


class FakeCuda:
    """Recording stand-in for ``cuda.bindings.driver``. TEST DOUBLE: there is no GPU on this machine.

    Contexts are per thread, as in the driver: a thread that never made one current gets
    CUDA_ERROR_INVALID_CONTEXT from a launch (the runtime then adopts the device's primary context).
    """

    CUDA_ERROR_INVALID_CONTEXT = 201

    def __init__(self, recorder: Recorder, devices: int = 2, cc: tuple[int, int] = (9, 0), address: int | None = None):
        self.rec = recorder
        self.CUresult = _enum(
            CUDA_SUCCESS=0,
            CUDA_ERROR_INVALID_VALUE=1,
            CUDA_ERROR_NO_DEVICE=100,
            CUDA_ERROR_INVALID_CONTEXT=201,
            CUDA_ERROR_CONTEXT_IS_DESTROYED=709,
            CUDA_ERROR_INVALID_HANDLE=400,
            CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES=701,
        )
        self.CUdevice_attribute = _enum(
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
        self.CUfunction_attribute = _enum(
            CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES=8,
            CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED=16,
            CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES=1,
            CU_FUNC_ATTRIBUTE_NUM_REGS=4,
            CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES=3,
            CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK=0,
        )
        self.CUfunc_cache = _enum(CU_FUNC_CACHE_PREFER_NONE=0, CU_FUNC_CACHE_PREFER_SHARED=1)
        self.func_settings: list[tuple[str, Any, int]] = []  # (call, attribute or cache config, value)
        self.static_shared = 0  # what cuFuncGetAttribute(SHARED_SIZE_BYTES) answers
        self.CUdriverProcAddress_flags = _enum(
            CU_GET_PROC_ADDRESS_DEFAULT=0,
            CU_GET_PROC_ADDRESS_LEGACY_STREAM=1,
            CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM=2,
        )
        self.devices, self.cc, self.address = devices, cc, address
        self.current = threading.local()
        self.loads: list[tuple[int, bytes]] = []
        self.proc_requests: list[tuple] = []

    # errors, init, devices
    def cuGetErrorName(self, err):
        return (0, b"CUDA_ERROR_FAKE_%d" % int(err))

    def cuGetErrorString(self, err):
        return (0, b"a fake driver error")

    def cuInit(self, flags):
        return (0,)

    def cuDeviceGetCount(self):
        return (0, self.devices)

    def cuDriverGetVersion(self):
        return (0, 13000)

    def cuDeviceGet(self, index):
        return (0, index)

    def cuDeviceGetAttribute(self, attr, dev):
        return (
            0,
            {
                "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR": self.cc[0],
                "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR": self.cc[1],
                "CU_DEVICE_ATTRIBUTE_WARP_SIZE": 32,
                "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN": 227 * 1024,
                "CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT": 132,
            }[attr],
        )

    def cuDeviceGetName(self, length, dev):
        return (0, b"Fake H100\0")

    # contexts (one primary context per device; a per-thread stack of current ones)
    def _stack(self) -> list:
        if not hasattr(self.current, "stack"):
            self.current.stack = []
        return self.current.stack

    def cuDevicePrimaryCtxRetain(self, dev):
        return (0, Handle(0xC000 + dev, "context"))

    def cuCtxGetCurrent(self):
        s = self._stack()
        return (0, s[-1] if s else Handle(0, "context"))

    def cuCtxGetDevice(self):
        s = self._stack()
        return (0, int(s[-1]) - 0xC000) if s else (201, 0)

    def cuCtxSetCurrent(self, ctx):
        s = self._stack()
        if s:
            s[-1] = ctx
        else:
            s.append(ctx)
        return (0,)

    def cuCtxPushCurrent(self, ctx):
        self._stack().append(ctx)
        return (0,)

    def cuCtxPopCurrent(self):
        s = self._stack()
        return (0, s.pop() if s else None)

    # modules and memory
    def cuModuleLoadData(self, image):
        self.loads.append((int(self._stack()[-1]) - 0xC000 if self._stack() else -1, bytes(image)))
        return (0, Handle(len(self.loads), "module"))

    def cuModuleGetFunction(self, module, name):
        image = self.loads[int(module) - 1][1]
        return (0, self.rec.new_function(name.decode(), image))

    def cuFuncSetAttribute(self, func, attr, value):
        self.func_settings.append(("attribute", attr, value))
        return (0,)

    def cuFuncGetAttribute(self, attr, func):
        """The static shared memory a test sets; for what Triton's load_binary reports of a loaded function
        (registers, local bytes, most threads), fixed recognisable values."""
        a = self.CUfunction_attribute
        fixed = {
            a.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: self.static_shared,
            a.CU_FUNC_ATTRIBUTE_NUM_REGS: 40,
            a.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: 8,
            a.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: 1024,
        }
        return (0, fixed.get(attr, 0))

    def cuFuncSetCacheConfig(self, func, config):
        self.func_settings.append(("cache", config, 1))
        return (0,)

    def cuMemAlloc(self, n):
        self.allocs = getattr(self, "allocs", 0) + 1  # a new address per allocation
        return (0, 0x7E00_0000_0000 + 0x10_0000 * len(self.loads) + 0x1_0000_0000 * self.allocs)

    def cuMemFree(self, ptr):
        return (0,)

    def cuStreamIsCapturing(self, s):
        return (0, 0)

    def cuStreamSynchronize(self, s):
        return (0,)

    def CUstream(self, raw):
        return Handle(raw, "CUstream")

    # launching
    def cuGetProcAddress(self, symbol, version, flags):
        self.proc_requests.append((symbol, version, flags))
        if self.address is not None and symbol == b"cuLaunchKernelEx":
            return (0, launch_path.extension().forward_ex_address(), 0)  # the compiled path's stand-in
        if self.address is None or symbol != b"cuLaunchKernel":
            return (0, 0, 1)  # CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND
        return (0, self.address, 0)

    # cuLaunchKernelEx through the binding (the Python path): its config objects, the fields launch_ex sets
    def CUlaunchConfig(self):
        return types.SimpleNamespace()

    def CUlaunchAttribute(self):
        value = types.SimpleNamespace(
            programmaticStreamSerializationAllowed=0,
            cooperative=0,
            clusterDim=types.SimpleNamespace(x=0, y=0, z=0),
            clusterSchedulingPolicyPreference=0,
        )
        return types.SimpleNamespace(id=0, value=value)

    CUlaunchAttributeID = _enum(
        CU_LAUNCH_ATTRIBUTE_COOPERATIVE=2,
        CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION=4,
        CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE=5,
        CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION=6,
    )
    CUclusterSchedulingPolicy = _enum(CU_CLUSTER_SCHEDULING_POLICY_SPREAD=1)

    def cuLaunchKernelEx(self, cfg, f, params, extra):
        """Each attribute's value as the bytes cuda.h's CUlaunchAttributeValue holds (what the C path packs)."""
        attrs = []
        for a in cfg.attrs[: cfg.numAttrs]:
            v = a.value
            raw = {
                2: struct.pack("<i", v.cooperative),
                6: struct.pack("<i", v.programmaticStreamSerializationAllowed),
                4: struct.pack("<III", v.clusterDim.x, v.clusterDim.y, v.clusterDim.z),
                5: struct.pack("<I", int(v.clusterSchedulingPolicyPreference)),
            }[int(a.id)]
            attrs.append((int(a.id), raw.ljust(64, b"\0")))
        return (
            self.launch_from_c(
                int(f),
                cfg.gridDimX,
                cfg.gridDimY,
                cfg.gridDimZ,
                cfg.blockDimX,
                cfg.blockDimY,
                cfg.blockDimZ,
                cfg.sharedMemBytes,
                int(cfg.hStream),
                int(params),
                int(extra or 0),
                tuple(attrs),
            ),
        )

    def cuLaunchKernel(self, f, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        """The binding's call (Python path); the compiled path arrives in :meth:`launch_from_c`."""
        return (self.launch_from_c(int(f), gx, gy, gz, bx, by, bz, shared, int(stream), int(params), int(extra or 0)),)

    def launch_from_c(self, f, gx, gy, gz, bx, by, bz, shared, stream, params, extra, attrs=()) -> int:
        refuse = 0 if self._stack() else self.CUDA_ERROR_INVALID_CONTEXT
        return self.rec.record(f, (gx, gy, gz), (bx, by, bz), shared, stream, params, extra, refuse, attrs)


@contextlib.contextmanager
def fake_cuda(monkeypatch, path: str, **kw) -> Iterator[tuple[Recorder, Any]]:
    """A CudaBackend over FakeCuda as the process's "cuda" backend, and kernels made on ``path``."""
    from karchive.runtime import backend as backend_mod
    from karchive.runtime.drivers.cuda import CudaBackend

    rec = Recorder()
    with launch_path.forced(path):
        fake = FakeCuda(rec, **kw)
        with forwarding(fake.launch_from_c) as address:
            fake.address = address if path == launch_path.EXTENSION else None
            b = CudaBackend(fake)
            monkeypatch.setattr(backend_mod, "_backends", {"cuda": b})
            monkeypatch.setattr(backend_mod, "_failures", {})
            yield rec, b


def register_sizes(rec: Recorder, archive: Any) -> None:
    """Tell the recorder each binary's parameter sizes (from the archive's ABI) so it can read them."""
    for name in archive.kernels():
        for v in archive.variants(name):
            rec.sizes[archive.reader.read(v.binary.path)] = [p.size for p in v.abi.params]


def launched_variant(rec: Recorder, archive: Any, launch: Launch) -> Any:
    """The archive variant whose binary the launch ran: function handle -> loaded image -> variant (the entry
    name alone cannot tell variants of one kernel apart: they share it)."""
    image = rec.functions[launch.function][1]
    hits = [
        v for name in archive.kernels() for v in archive.variants(name) if archive.reader.read(v.binary.path) == image
    ]
    assert len(hits) == 1, f"{len(hits)} variants have the launched image"
    return hits[0]


# -- HIP --------------------------------------------------------------------------------------------------
class FakeHip:
    """Recording stand-in for ``hip.hip`` (hip-python). TEST DOUBLE: no AMD GPU exists in this project."""

    def __init__(
        self,
        arch: str = "gfx942:sramecc+:xnack-",
        warp: int = 64,
        devices: int = 1,
        recorder: Recorder | None = None,
        address: int | None = None,
    ) -> None:
        self.hipError_t = types.SimpleNamespace(hipSuccess=0, hipErrorInvalidContext=201, hipErrorInvalidHandle=400)
        self.arch, self.warp, self.devices = arch, warp, devices
        self.rec = recorder or Recorder()
        self.address = address
        self.modules: dict[int, bytes] = {}
        self.calls: list[tuple] = []
        self.current = 0
        self.allocs = 0

    @property
    def launch_result(self) -> int:
        return self.rec.results[0] if self.rec.results else 0

    @launch_result.setter
    def launch_result(self, value: int) -> None:
        self.rec.results[:] = [value] * 1000 if value else []

    def hipInit(self, flags):
        self.calls.append(("hipInit", flags))
        return (0,)

    def hipGetDeviceCount(self):
        return (0, self.devices)

    def hipDriverGetVersion(self):
        return (0, 60240000)

    def hipGetErrorName(self, err):
        return (b"hipErrorFake%d" % int(err),)

    def hipGetDeviceProperties(self, index):
        props = types.SimpleNamespace(
            gcnArchName=self.arch.encode(),
            warpSize=self.warp,
            sharedMemPerBlock=65536,
            name=b"Fake MI300X",
            multiProcessorCount=304,
        )
        return (0, props)

    def hipGetDevice(self):
        return (0, self.current)

    def hipSetDevice(self, index):
        self.calls.append(("hipSetDevice", index))
        self.current = index
        return (0,)

    def hipModuleLoadData(self, image):
        self.calls.append(("hipModuleLoadData", bytes(image), self.current))
        self.modules[len(self.modules) + 1] = bytes(image)
        return (0, Handle(len(self.modules), "hipModule_t"))

    def hipModuleGetFunction(self, module, name):
        self.calls.append(("hipModuleGetFunction", module, name))
        return (0, self.rec.new_function(name.decode(), self.modules[int(module)]))

    def hipGetProcAddress(self, symbol, version, flags):
        if self.address is None or symbol != b"hipModuleLaunchKernel":
            return (1, None, 1)
        return (0, Handle(self.address, "Pointer"), 0)

    def hipModuleLaunchKernel(self, f, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        return (self.launch_from_c(int(f), gx, gy, gz, bx, by, bz, shared, int(stream), int(params), int(extra or 0)),)

    def launch_from_c(self, f, gx, gy, gz, bx, by, bz, shared, stream, params, extra) -> int:
        return self.rec.record(f, (gx, gy, gz), (bx, by, bz), shared, stream, params, extra)

    def hipMalloc(self, n):
        self.allocs += 1
        return (0, 0x7F0000000000 + self.allocs * 0x100000)

    def hipFree(self, p):
        return (0,)

    def hipStreamIsCapturing(self, s):
        return (0, 0)

    def launches(self) -> list[Launch]:
        return self.rec.launches()


def q(v: int) -> bytes:
    return struct.pack("<Q", v)


@contextlib.contextmanager
def fake_hip(monkeypatch, path: str, **kw) -> Iterator[tuple[FakeHip, Any]]:
    """A HipBackend over FakeHip as the process's "hip" backend, and kernels made on ``path``."""
    from karchive.runtime import backend as backend_mod
    from karchive.runtime.drivers.hip import HipBackend

    with launch_path.forced(path):
        hip = FakeHip(**kw)
        with forwarding(hip.launch_from_c) as address:
            hip.address = address if path == launch_path.EXTENSION else None
            b = HipBackend(hip)
            monkeypatch.setattr(backend_mod, "_backends", {"hip": b})
            monkeypatch.setattr(backend_mod, "_failures", {})
            yield hip, b
