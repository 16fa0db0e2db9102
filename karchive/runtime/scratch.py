"""Global and profile scratch for kernels whose ABI asks for it (Triton >= 3.3 adds the pointer slots).

Size 0 (the common case) means a NULL pointer and no work at all. Otherwise a launch needs
``grid_x * grid_y * grid_z * num_ctas * size`` bytes aligned to ``align``, exactly what Triton's
launcher asks its allocator for. Buffers are cached per (device, stream, kind) and grow
geometrically; a buffer that was outgrown is kept alive (never freed while the pool lives) because a
captured CUDA graph or an in-flight kernel may still point at it. Growing during stream capture is
refused with a clear error: launch once outside capture with the same (or a larger) grid first.
"""

from __future__ import annotations

import threading
from typing import Any

from ..errors import LaunchError


class ScratchPool:
    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self._lock = threading.Lock()
        self._buffers: dict[tuple[int, int, str], tuple[int, int]] = {}  # key -> (base, usable bytes)
        self._retired: list[tuple[int, int]] = []  # (device, base) kept alive for graphs / in-flight work

    def get(self, device: int, stream_key: int, stream: Any, kind: str, nbytes: int, align: int, kernel: str) -> int:
        """An ``align``-aligned device address with at least ``nbytes`` bytes, private to this stream (``kernel``:
        the kernel launched, named by the error)."""
        return self.reserve(device, stream_key, stream, kind, nbytes, align, kernel)[0]

    def reserve(
        self, device: int, stream_key: int, stream: Any, kind: str, nbytes: int, align: int, kernel: str
    ) -> tuple[int, int]:
        """(:meth:`get`'s address, how many bytes from it are usable): the compiled launcher takes the same
        address again, without asking, while a launch on this stream needs no more (an outgrown buffer is
        kept alive, so an address given once stays valid while the pool lives)."""
        key = (device, stream_key, kind)
        have = self._buffers.get(key)
        if have is not None and have[1] >= nbytes:
            return _align_up(have[0], align), have[1]
        with self._lock:
            have = self._buffers.get(key)
            if have is not None and have[1] >= nbytes:
                return _align_up(have[0], align), have[1]
            if self.backend.is_capturing(stream):
                raise LaunchError(
                    f"this kernel needs {nbytes} bytes of {kind} scratch, more than karchive has allocated for "
                    "this stream, and the stream is being captured (allocating now would break the capture); "
                    "launch it once outside the capture with the same or a larger grid to preallocate",
                    kernel=kernel,
                )
            size = max(nbytes, 2 * have[1] if have else 0, 1 << 16)
            base = self.backend.alloc(device, size + max(align, 1))
            if have is not None:
                self._retired.append((device, have[0]))
            self._buffers[key] = (base, size)
            return _align_up(base, align), size

    def close(self) -> None:
        with self._lock:
            for (device, _s, _k), (base, _n) in self._buffers.items():
                self.backend.free(device, base)
            for device, base in self._retired:
                self.backend.free(device, base)
            self._buffers.clear()
            self._retired.clear()


def _align_up(address: int, align: int) -> int:
    if align <= 1:
        return address
    return (address + align - 1) // align * align
