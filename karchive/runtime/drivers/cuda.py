"""The CUDA backend over cuda-python's driver bindings (``cuda.bindings.driver``; ``cuda.cuda`` before 12.6).

Everything GPU-specific the runtime does goes through here: device queries, primary contexts, module
loads (``cuModuleLoadData`` + ``cuModuleGetFunction``), the shared-memory opt-in, scratch allocation,
and launches (``cuLaunchKernel``; ``cuLaunchKernelEx`` for clusters, cooperative grids and PDL).
The compiled launcher calls ``cuLaunchKernel`` itself, at the address cuda-python's own
``cuGetProcAddress`` gives (:meth:`CudaBackend.launch_address`), so cuda-python stays the one way
karchive reaches the driver. Nothing is imported or initialised until the first launch asks for a device.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Literal

from ...errors import LaunchError, NoDeviceError
from ..backend import DriverBase, LoadedFunction, StreamCache, c_text, plain_text
from ..device import DeviceInfo

_DEFAULT_SHARED = 48 * 1024
#: cuLaunchKernel exists since CUDA 4.0; its ABI has not changed (cuda.h: ``cuLaunchKernel`` has no _v2).
_LAUNCH_KERNEL_VERSION = 4000
_LAUNCH_KERNEL_EX_VERSION = 12000  # cuLaunchKernelEx (CUDA 12.0)


def import_driver() -> Any:
    """cuda-python's driver module, or :class:`NoDeviceError` saying which package is missing."""
    try:
        from cuda.bindings import driver  # cuda-python >= 12.6

        return driver
    except ImportError:
        pass
    try:
        from cuda import cuda as driver  # older cuda-python

        return driver
    except ImportError as exc:
        raise NoDeviceError(
            "cannot launch on CUDA: the cuda-python driver bindings are not installed "
            f"(pip install 'karchive[cuda]', i.e. cuda-python); import failed with: {exc}",
            backend="cuda",
        ) from exc


def per_thread_default_stream() -> bool:
    """Whether cuda-python binds the per-thread-default-stream driver entry points (its own switch,
    ``CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM``, read as cuda-python reads it): the compiled launcher
    asks for the same variant of ``cuLaunchKernel`` so both routes treat stream 0 alike."""
    try:
        return bool(int(os.environ.get("CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM", "0")))
    except ValueError:
        return False


class CudaBackend(DriverBase):
    """One per process (see :func:`karchive.runtime.backend.get_backend`)."""

    name = "cuda"

    def __init__(self, driver: Any = None) -> None:
        d = driver if driver is not None else import_driver()
        self.d = d
        self.SUCCESS = d.CUresult.CUDA_SUCCESS
        try:
            (err,) = d.cuInit(0)
        except Exception as exc:
            raise NoDeviceError(
                f"cannot launch on CUDA: the NVIDIA driver library (libcuda.so.1) could not be loaded: {plain_text(exc)}",
                backend="cuda",
            ) from exc
        if err != self.SUCCESS:
            if err == d.CUresult.CUDA_ERROR_NO_DEVICE:
                raise NoDeviceError(
                    "cannot launch on CUDA: the driver is installed but reports no CUDA device", backend="cuda"
                )
            raise NoDeviceError(f"cannot launch on CUDA: cuInit failed: {self.error_text(err)}", backend="cuda")
        err, count = d.cuDeviceGetCount()
        if err != self.SUCCESS or count == 0:
            raise NoDeviceError(
                "cannot launch on CUDA: no CUDA device is visible (check CUDA_VISIBLE_DEVICES and the driver)",
                backend="cuda",
            )
        self.count = count
        err, self.driver_version = d.cuDriverGetVersion()
        self._launch_kernel = d.cuLaunchKernel
        self.context_errors = frozenset(
            int(getattr(d.CUresult, n))
            for n in ("CUDA_ERROR_INVALID_CONTEXT", "CUDA_ERROR_INVALID_HANDLE", "CUDA_ERROR_CONTEXT_IS_DESTROYED")
            if hasattr(d.CUresult, n)
        )
        self._lock = threading.Lock()
        self._contexts: dict[int, Any] = {}
        self._infos: dict[int, DeviceInfo] = {}
        self.streams = StreamCache(d.CUstream)
        self._launch_address: int | None | Literal[False] = False  # False: not asked yet
        self._launch_ex_address: int | None | Literal[False] = False

    # -- errors -----------------------------------------------------------------------------------
    def error_text(self, err: Any) -> str:
        try:
            e2, name = self.d.cuGetErrorName(err)
            e3, text = self.d.cuGetErrorString(err)
            name = name.decode() if isinstance(name, bytes) else str(name)
            text = text.decode() if isinstance(text, bytes) else str(text)
            return f"{name} ({text})"
        except Exception:  # noqa: BLE001 - naming an error must never hide the error itself
            return str(err)

    # -- devices and contexts ------------------------------------------------------------------------
    def _query_device(self, index: int) -> DeviceInfo:
        d = self.d
        dev = self.check(d.cuDeviceGet(index), "cuDeviceGet")
        A = d.CUdevice_attribute

        def attr(name: str) -> int:
            return int(self.check(d.cuDeviceGetAttribute(getattr(A, name), dev), f"cuDeviceGetAttribute({name})"))

        major = attr("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR")
        minor = attr("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR")
        name = c_text(self.check(d.cuDeviceGetName(256, dev), "cuDeviceGetName"))
        return DeviceInfo(
            backend="cuda",
            index=index,
            arch=f"{major}{minor}",
            warp_size=attr("CU_DEVICE_ATTRIBUTE_WARP_SIZE"),
            cc=(major, minor),
            shared_optin=attr("CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"),
            name=name,
            driver_version=int(self.driver_version),
            multiprocessors=attr("CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT"),
        )

    def context(self, index: int) -> Any:
        """The device's primary context (the one torch, CuPy and Triton share), retained once."""
        ctx = self._contexts.get(index)
        if ctx is None:
            with self._lock:
                ctx = self._contexts.get(index)
                if ctx is None:
                    dev = self.check(self.d.cuDeviceGet(index), "cuDeviceGet")
                    ctx = self.check(self.d.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
                    self._contexts[index] = ctx
        return ctx

    def current_device(self) -> int:
        """The device of the calling thread's current context, else 0."""
        err, ctx = self.d.cuCtxGetCurrent()
        if err != self.SUCCESS or not int(ctx):
            return 0
        err, dev = self.d.cuCtxGetDevice()
        return int(dev) if err == self.SUCCESS else 0

    def has_current(self) -> bool:
        """Whether the calling thread has any current context (a fresh thread has none)."""
        err, ctx = self.d.cuCtxGetCurrent()
        return err == self.SUCCESS and bool(int(ctx))

    def make_current(self, index: int) -> None:
        self.check(self.d.cuCtxSetCurrent(self.context(index)), "cuCtxSetCurrent")

    class _Pushed:
        def __init__(self, backend: CudaBackend, index: int) -> None:
            self.b, self.index = backend, index

        def __enter__(self) -> None:
            self.b.check(self.b.d.cuCtxPushCurrent(self.b.context(self.index)), "cuCtxPushCurrent")

        def __exit__(self, *exc: Any) -> None:
            self.b.d.cuCtxPopCurrent()

    def in_context(self, index: int) -> _Pushed:
        """Run a block with the device's context pushed, leaving the caller's current context as it was."""
        return CudaBackend._Pushed(self, index)

    # -- modules ------------------------------------------------------------------------------------
    def load(self, index: int, image: bytes, entry: str, shared: int, num_ctas: int = 1) -> LoadedFunction:
        """Load a cubin (or NUL-terminated PTX, JIT-compiled by the driver) and get its entry function."""
        d = self.d
        info = self.device_info(index)
        if shared > _DEFAULT_SHARED and info.shared_optin is not None and shared > info.shared_optin:
            raise LaunchError(
                f"{entry} needs {shared} bytes of dynamic shared memory; {info} allows at most "
                f"{info.shared_optin} per block",
                kernel=entry,
            )
        with self.in_context(index):
            module = self.check(d.cuModuleLoadData(image), f"cuModuleLoadData({entry})")
            func = self.check(d.cuModuleGetFunction(module, entry.encode()), f"cuModuleGetFunction({entry})")
            if shared > _DEFAULT_SHARED:
                # As Triton's loader does (backends/nvidia/driver.c): shared memory preferred in the L1/shared
                # split and the whole opt-in allowed, so a binary runs (and tuning times it) as the JIT runs it.
                limit = shared
                if info.shared_optin is not None and info.shared_optin > _DEFAULT_SHARED:
                    self.check(
                        d.cuFuncSetCacheConfig(func, d.CUfunc_cache.CU_FUNC_CACHE_PREFER_SHARED),
                        "cuFuncSetCacheConfig(PREFER_SHARED)",
                    )
                    static = int(
                        self.check(
                            d.cuFuncGetAttribute(d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, func),
                            "cuFuncGetAttribute(SHARED_SIZE_BYTES)",
                        )
                    )
                    limit = max(shared, info.shared_optin - static)
                self.check(
                    d.cuFuncSetAttribute(
                        func, d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, limit
                    ),
                    f"cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES={limit})",
                )
            if num_ctas > 8:
                self.check(
                    d.cuFuncSetAttribute(
                        func, d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1
                    ),
                    "cuFuncSetAttribute(NON_PORTABLE_CLUSTER_SIZE_ALLOWED)",
                )
        return LoadedFunction(module, func, self.context(index), index)

    def function_attributes(self, function: Any) -> tuple[int, int, int]:
        """(registers per thread, spilled 32-bit words per thread, most threads per block) of a loaded function,
        as Triton's ``load_binary`` reports them (``CompiledKernel.n_regs``/``n_spills``/``n_max_threads``)."""
        d = self.d
        attr = d.CUfunction_attribute
        regs = self.check(d.cuFuncGetAttribute(attr.CU_FUNC_ATTRIBUTE_NUM_REGS, function), "cuFuncGetAttribute")
        local = self.check(
            d.cuFuncGetAttribute(attr.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, function), "cuFuncGetAttribute"
        )
        most = self.check(
            d.cuFuncGetAttribute(attr.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, function), "cuFuncGetAttribute"
        )
        return int(regs), int(local) // 4, int(most)

    # -- streams --------------------------------------------------------------------------------------
    def is_capturing(self, stream: Any) -> bool:
        err, status = self.d.cuStreamIsCapturing(stream)
        return err == self.SUCCESS and int(status) != 0

    def synchronize(self, stream: Any) -> None:
        self.check(self.d.cuStreamSynchronize(stream), "cuStreamSynchronize")

    # -- memory ---------------------------------------------------------------------------------------
    def alloc(self, index: int, nbytes: int) -> int:
        with self.in_context(index):
            return int(self.check(self.d.cuMemAlloc(nbytes), f"cuMemAlloc({nbytes})"))

    def free(self, index: int, ptr: int) -> None:
        with self.in_context(index):
            self.check(self.d.cuMemFree(ptr), "cuMemFree")

    # -- launch ---------------------------------------------------------------------------------------
    def launch(
        self, function: Any, gx: int, gy: int, gz: int, block_x: int, shared: int, stream: Any, kernel_params: int
    ) -> int:
        """``cuLaunchKernel`` through cuda-python (the pure-Python route; the compiled one calls the driver)."""
        return self._launch_kernel(function, gx, gy, gz, block_x, 1, 1, shared, stream, kernel_params, 0)[0]

    def launch_address(self) -> int | None:
        """``cuLaunchKernel``'s address from ``cuGetProcAddress`` (None if the binding or driver cannot say)."""
        if self._launch_address is False:
            self._launch_address = self._proc_address("cuLaunchKernel", _LAUNCH_KERNEL_VERSION)
        return self._launch_address

    def launch_ex_address(self) -> int | None:
        """``cuLaunchKernelEx``'s address (the compiled launcher packs launch attributes itself); None if unknown."""
        if self._launch_ex_address is False:
            self._launch_ex_address = self._proc_address("cuLaunchKernelEx", _LAUNCH_KERNEL_EX_VERSION)
        return self._launch_ex_address

    def _proc_address(self, symbol: str, version: int) -> int | None:
        d = self.d
        get = getattr(d, "cuGetProcAddress", None)
        if get is None:
            return None
        flags = d.CUdriverProcAddress_flags
        flag = (
            flags.CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
            if per_thread_default_stream()
            else flags.CU_GET_PROC_ADDRESS_LEGACY_STREAM
        )
        try:
            result = get(symbol.encode(), version, flag)
        except Exception:  # noqa: BLE001 - an old binding with another signature: use the Python route
            return None
        if result[0] != self.SUCCESS or not result[1]:
            return None
        if len(result) > 2 and int(result[2]) != 0:  # CU_GET_PROC_ADDRESS_SUCCESS is 0
            return None
        return int(result[1])

    def launch_ex(
        self,
        func: Any,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        shared: int,
        stream: Any,
        kernel_params: int,
        cluster: tuple[int, int, int],
        cooperative: bool,
        pdl: bool,
    ) -> int:
        """``cuLaunchKernelEx`` with cluster / cooperative / PDL attributes, as Triton's launcher sets them."""
        d = self.d
        cfg = d.CUlaunchConfig()
        cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = grid
        cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = block
        cfg.sharedMemBytes = shared
        cfg.hStream = stream
        attrs = []
        ID = d.CUlaunchAttributeID
        if pdl:
            a = d.CUlaunchAttribute()
            a.id = ID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
            a.value.programmaticStreamSerializationAllowed = 1
            attrs.append(a)
        if cooperative:
            a = d.CUlaunchAttribute()
            a.id = ID.CU_LAUNCH_ATTRIBUTE_COOPERATIVE
            a.value.cooperative = 1
            attrs.append(a)
        if cluster[0] * cluster[1] * cluster[2] > 1:
            a = d.CUlaunchAttribute()
            a.id = ID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
            a.value.clusterDim.x, a.value.clusterDim.y, a.value.clusterDim.z = cluster
            attrs.append(a)
            a = d.CUlaunchAttribute()
            a.id = ID.CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE
            a.value.clusterSchedulingPolicyPreference = d.CUclusterSchedulingPolicy.CU_CLUSTER_SCHEDULING_POLICY_SPREAD
            attrs.append(a)
        cfg.attrs = attrs
        cfg.numAttrs = len(attrs)
        return d.cuLaunchKernelEx(cfg, func, kernel_params, 0)[0]
