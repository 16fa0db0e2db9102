"""Shared pieces of the runtime tests: small archives compiled here (Triton, no GPU) and the HIP stand-in.

FakeHip is a TEST DOUBLE FOR HARDWARE THAT DOES NOT EXIST HERE (no AMD GPU anywhere in this project):
it implements the handful of hip-python calls karchive makes and records them, so the HIP backend,
the dispatcher and the launchers can be checked up to the driver boundary. It is not used for CUDA:
CUDA behaviour is tested on a real H100 (tests/gpu) and, without a GPU, against the real missing driver.
"""

from __future__ import annotations

import ctypes
import pathlib
import struct
import types
from typing import Any

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
KERNELS = str(ROOT / "examples" / "kernels.py")
ADD16 = "*fp32:16, *fp32:16, *fp32:16, i32"


def have_triton() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def compile_many(reqs: list[tuple]) -> list:
    from karchive.producer.aot import VariantRequest, compile_variant

    return [compile_variant(VariantRequest(KERNELS + ":" + k, sig, target, cx, opts)) for k, sig, target, cx, opts in reqs]


def write_archive(path: pathlib.Path, variants: list, name: str = "rt") -> pathlib.Path:
    from karchive.producer.pack import ArchiveBuilder

    b = ArchiveBuilder(name, "1.0", produced_by={"triton": "test"})
    b.extend(variants)
    b.write(path)
    return path


CUDA_REQS = [
    ("add_kernel", ADD16, "cuda:90", {"BLOCK": 1024}, {"num_warps": 4}),
    ("add_kernel", "*fp32, *fp32, *fp32, i32", "cuda:90", {"BLOCK": 1024}, {"num_warps": 8}),
    ("add_kernel", ADD16, "cuda:80", {"BLOCK": 512}, {"num_warps": 4}),
    ("scale_kernel", "*fp32:16, *fp32:16, i32, i32:1, fp32", "cuda:90", {"BLOCK": 256}, {"num_warps": 4}),
    ("scale_kernel", "*fp32:16, *fp32:16, i32, i32, fp32", "cuda:90", {"BLOCK": 256}, {"num_warps": 4}),
    ("scale_kernel", "*bf16:16, *bf16:16, i32, i32:1, bf16", "cuda:90", {"BLOCK": 256}, {"num_warps": 4}),
    ("matmul_kernel", "*fp16:16, *fp16:16, *fp16:16, i32, i32, i32, i32, i32:1, i32, i32:1, i32, i32:1", "cuda:90",
     {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}, {"num_warps": 4}),
]
HIP_REQS = [
    ("add_kernel", ADD16, "hip:gfx942", {"BLOCK": 256}, {"num_warps": 4}),
    ("scale_kernel", "*fp16:16, *fp16:16, i32, i32:1, fp16", "hip:gfx942", {"BLOCK": 256}, {"num_warps": 4}),
    ("scale_kernel", "*fp32:16, *fp32:16, i32, i32, fp32", "hip:gfx942", {"BLOCK": 256}, {"num_warps": 4}),
]


@pytest.fixture(scope="session")
def cuda_archive(tmp_path_factory) -> pathlib.Path:
    if not have_triton():
        pytest.skip("building test archives needs triton")
    return write_archive(tmp_path_factory.mktemp("rt") / "cuda.karc", compile_many(CUDA_REQS))


@pytest.fixture(scope="session")
def hip_archive(tmp_path_factory) -> pathlib.Path:
    if not have_triton():
        pytest.skip("building test archives needs triton")
    return write_archive(tmp_path_factory.mktemp("rt") / "hip.karc", compile_many(HIP_REQS))


class _Err(int):
    pass


class FakeHip:
    """Recording stand-in for ``hip.hip`` (hip-python). TEST DOUBLE: no AMD GPU exists in this project."""

    def __init__(self, arch: str = "gfx942:sramecc+:xnack-", warp: int = 64, devices: int = 1) -> None:
        self.hipError_t = types.SimpleNamespace(hipSuccess=0, hipErrorInvalidContext=201, hipErrorInvalidHandle=400)
        self.arch, self.warp, self.devices = arch, warp, devices
        self.calls: list[tuple] = []
        self.current = 0
        self.launch_result = 0
        self.allocs = 0

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
        props = types.SimpleNamespace(gcnArchName=self.arch.encode(), warpSize=self.warp, sharedMemPerBlock=65536,
                                      name=b"Fake MI300X", multiProcessorCount=304)
        return (0, props)

    def hipGetDevice(self):
        return (0, self.current)

    def hipSetDevice(self, index):
        self.calls.append(("hipSetDevice", index))
        self.current = index
        return (0,)

    def hipModuleLoadData(self, image):
        self.calls.append(("hipModuleLoadData", bytes(image), self.current))
        return (0, f"module{len(self.calls)}")

    def hipModuleGetFunction(self, module, name):
        self.calls.append(("hipModuleGetFunction", module, name))
        return (0, f"func:{name.decode()}@{self.current}")

    def hipModuleLaunchKernel(self, f, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        self.calls.append(("hipModuleLaunchKernel", f, (gx, gy, gz), (bx, by, bz), shared, stream, params, extra,
                           self.snapshot(f, params)))
        return (self.launch_result,)

    def hipMalloc(self, n):
        self.allocs += 1
        return (0, 0x7F0000000000 + self.allocs * 0x100000)

    def hipFree(self, p):
        return (0,)

    def hipStreamIsCapturing(self, s):
        return (0, 0)

    # -- helpers for assertions --
    sizes: dict[str, list[int]] = {}

    def snapshot(self, f, params) -> list[bytes]:
        sizes = self.sizes.get(f.split("@")[0][5:])
        if sizes is None:
            return []
        ptrs = (ctypes.c_void_p * len(sizes)).from_address(params)
        return [ctypes.string_at(ptrs[i], s) for i, s in enumerate(sizes)]

    def launches(self) -> list[tuple]:
        return [c for c in self.calls if c[0] == "hipModuleLaunchKernel"]


def q(v: int) -> bytes:
    return struct.pack("<Q", v)


def fake_hip_backend(monkeypatch, **kw) -> tuple[FakeHip, Any]:
    """Install a HipBackend over FakeHip as the process's "hip" backend for one test."""
    from karchive.runtime import backend as backend_mod
    from karchive.runtime.hip_driver import HipBackend

    hip = FakeHip(**kw)
    b = HipBackend(hip)
    monkeypatch.setattr(backend_mod, "_backends", {"hip": b})
    monkeypatch.setattr(backend_mod, "_failures", {})
    return hip, b
