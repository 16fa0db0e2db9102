"""The HIP backend over hip-python (``from hip import hip``): same interface as the CUDA backend.

NEVER RUN ON AMD HARDWARE. No AMD GPU was available while this was written; it is exercised only by
unit tests with a recording stand-in for the ``hip`` module (tests/test_runtime_hip.py), which checks
the calls and arguments up to the driver. See docs/runtime.md.

Differences from CUDA: devices are selected with ``hipSetDevice`` (HIP has no user-visible primary
context juggling), code objects must match the device's gfx arch exactly, the block is
``warp_size * num_warps`` threads with warp size 64 on CDNA (gfx9xx) and 32 on RDNA, and there are no
clusters or PDL. ``hipModuleLaunchKernel`` has ``cuLaunchKernel``'s C signature, so the compiled
launcher calls it the same way, at the address hip-python's ``hipGetProcAddress`` gives.
"""

from __future__ import annotations

import threading
from typing import Any, Literal

from ...errors import LaunchError, NoDeviceError
from ..backend import DriverBase, LoadedFunction, StreamCache, c_text, plain_text
from ..device import DeviceInfo

#: hipGetProcAddress takes a HIP version as 100 * major + minor; hipModuleLaunchKernel predates 6.0.
_LAUNCH_KERNEL_VERSION = 600


def import_hip() -> Any:
    try:
        from hip import hip  # hip-python

        return hip
    except ImportError as exc:
        raise NoDeviceError(
            "cannot launch on HIP: hip-python is not installed (pip install 'karchive[hip]'); "
            f"import failed with: {exc}",
            backend="hip",
        ) from exc


class HipBackend(DriverBase):
    """One per process; satisfies :class:`karchive.runtime.backend.Backend`."""

    name = "hip"

    def __init__(self, hip: Any = None) -> None:
        h = hip if hip is not None else import_hip()
        self.d = h
        self.SUCCESS = h.hipError_t.hipSuccess
        try:
            (err,) = h.hipInit(0)
        except Exception as exc:
            raise NoDeviceError(
                f"cannot launch on HIP: the ROCm runtime (libamdhip64.so) could not be loaded: {plain_text(exc)}",
                backend="hip",
            ) from exc
        if err != self.SUCCESS:
            raise NoDeviceError(f"cannot launch on HIP: hipInit failed: {self.error_text(err)}", backend="hip")
        err, count = h.hipGetDeviceCount()
        if err != self.SUCCESS or count == 0:
            raise NoDeviceError(
                "cannot launch on HIP: no AMD GPU is visible (check HIP_VISIBLE_DEVICES)", backend="hip"
            )
        self.count = count
        err, version = h.hipDriverGetVersion()
        self.driver_version = int(version) if err == self.SUCCESS else None
        self.context_errors = frozenset(
            int(getattr(h.hipError_t, n))
            for n in ("hipErrorInvalidContext", "hipErrorInvalidHandle", "hipErrorContextIsDestroyed")
            if hasattr(h.hipError_t, n)
        )
        self._lock = threading.Lock()
        self._infos: dict[int, DeviceInfo] = {}
        self.streams = StreamCache(lambda raw: raw)  # hip-python accepts an int address for hipStream_t
        self._launch_address: int | None | Literal[False] = False  # False: not asked yet

    def error_text(self, err: Any) -> str:
        try:
            name = self.d.hipGetErrorName(err)
            return c_text(name[0] if isinstance(name, tuple) else name)
        except Exception:  # noqa: BLE001 - naming an error must never hide the error itself
            return str(err)

    def _query_device(self, index: int) -> DeviceInfo:
        props = self.check(self.d.hipGetDeviceProperties(index), "hipGetDeviceProperties")
        arch = c_text(props.gcnArchName).split(":", 1)[0]
        optin = getattr(props, "sharedMemPerBlockOptin", 0) or getattr(props, "sharedMemPerBlock", 0) or None
        return DeviceInfo(
            backend="hip",
            index=index,
            arch=arch,
            warp_size=int(props.warpSize),
            shared_optin=int(optin) if optin else None,
            name=c_text(props.name),
            driver_version=self.driver_version,
            multiprocessors=int(props.multiProcessorCount),
        )

    def current_device(self) -> int:
        err, dev = self.d.hipGetDevice()
        return int(dev) if err == self.SUCCESS else 0

    def make_current(self, index: int) -> None:
        self.check(self.d.hipSetDevice(index), "hipSetDevice")

    class _OnDevice:
        def __init__(self, backend: HipBackend, index: int) -> None:
            self.b, self.index = backend, index
            self.prev: int | None = None  # the device current before __enter__

        def __enter__(self) -> None:
            self.prev = self.b.current_device()
            if self.prev != self.index:
                self.b.make_current(self.index)

        def __exit__(self, *exc: Any) -> None:
            if self.prev is not None and self.prev != self.index:
                self.b.d.hipSetDevice(self.prev)

    def in_context(self, index: int) -> _OnDevice:
        return HipBackend._OnDevice(self, index)

    def has_current(self) -> bool:
        return True  # HIP always has a current device; switching it is scoped by in_context

    def load(self, index: int, image: bytes, entry: str, shared: int, num_ctas: int = 1) -> LoadedFunction:
        info = self.device_info(index)
        if info.shared_optin is not None and shared > info.shared_optin:
            raise LaunchError(
                f"{entry} needs {shared} bytes of shared memory; {info} allows {info.shared_optin}", kernel=entry
            )
        with self.in_context(index):
            module = self.check(self.d.hipModuleLoadData(image), f"hipModuleLoadData({entry})")
            func = self.check(self.d.hipModuleGetFunction(module, entry.encode()), f"hipModuleGetFunction({entry})")
        return LoadedFunction(module, func, None, index)

    def is_capturing(self, stream: Any) -> bool:
        try:
            err, status = self.d.hipStreamIsCapturing(stream)
        except Exception:  # noqa: BLE001 - a hip-python without the capture query cannot be capturing through us
            return False
        return err == self.SUCCESS and int(status) != 0

    def synchronize(self, stream: Any) -> None:
        self.check(self.d.hipStreamSynchronize(stream), "hipStreamSynchronize")

    def alloc(self, index: int, nbytes: int) -> int:
        with self.in_context(index):
            return int(self.check(self.d.hipMalloc(nbytes), f"hipMalloc({nbytes})"))

    def free(self, index: int, ptr: int) -> None:
        with self.in_context(index):
            self.check(self.d.hipFree(ptr), "hipFree")

    def launch(
        self, function: Any, gx: int, gy: int, gz: int, block_x: int, shared: int, stream: Any, kernel_params: int
    ) -> int:
        result = self.d.hipModuleLaunchKernel(function, gx, gy, gz, block_x, 1, 1, shared, stream, kernel_params, None)
        return result[0] if isinstance(result, tuple) else result

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
        if cluster[0] * cluster[1] * cluster[2] > 1 or pdl:
            # the backend is not told the kernel: LaunchEntry.raw_launch names it on the way out
            raise LaunchError("clusters and PDL do not exist on HIP; this variant cannot launch here", kernel=None)
        if cooperative:
            result = self.d.hipModuleLaunchCooperativeKernel(func, *grid, *block, shared, stream, kernel_params)
        else:
            result = self.d.hipModuleLaunchKernel(func, *grid, *block, shared, stream, kernel_params, None)
        return result[0] if isinstance(result, tuple) else result

    def launch_address(self) -> int | None:
        """``hipModuleLaunchKernel``'s address from hip-python's ``hipGetProcAddress`` (HIP >= 6.2), else None
        (then launches take the pure-Python route)."""
        if self._launch_address is False:
            self._launch_address = None
            get = getattr(self.d, "hipGetProcAddress", None)
            if get is not None:
                try:
                    result = get(b"hipModuleLaunchKernel", _LAUNCH_KERNEL_VERSION, 0)
                    if result[0] == self.SUCCESS and result[1] is not None and int(result[1]):
                        self._launch_address = int(result[1])
                except Exception:  # noqa: BLE001 - unverified binding conventions (never run on AMD hardware)
                    self._launch_address = None
        return self._launch_address
