"""karchive's import shim: ``triton.runtime.driver.active`` answering what libraries ask at import time (the
target, device properties, the current device and stream) from torch, where torch sees a CUDA GPU. Nothing
here loads or launches: launches go through karchive. Without torch or a GPU, ``active`` raises on use, as
Triton's does on a machine with no driver."""

from __future__ import annotations

from typing import Any


class GPUTarget:
    def __init__(self, backend: str, arch: Any, warp_size: int) -> None:
        self.backend, self.arch, self.warp_size = backend, arch, warp_size

    def __repr__(self) -> str:
        return f"GPUTarget(backend={self.backend!r}, arch={self.arch!r}, warp_size={self.warp_size})"


def _torch() -> Any:
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("karchive's Triton shim: no CUDA device visible to torch")
    return torch


class _Utils:
    def get_device_properties(self, device: int) -> dict[str, Any]:
        p = _torch().cuda.get_device_properties(device)
        return {
            "max_shared_mem": int(getattr(p, "shared_memory_per_block_optin", p.shared_memory_per_block)),
            "multiprocessor_count": p.multi_processor_count,
            "max_num_regs": getattr(p, "regs_per_multiprocessor", 65536),
            "warpSize": getattr(p, "warp_size", 32),
        }


class _Active:
    utils = _Utils()

    def get_current_target(self) -> GPUTarget:
        torch = _torch()
        major, minor = torch.cuda.get_device_capability()
        if getattr(torch.version, "hip", None):
            return GPUTarget("hip", torch.cuda.get_device_properties(0).gcnArchName, 64)
        return GPUTarget("cuda", major * 10 + minor, 32)

    def get_current_device(self) -> int:
        return int(_torch().cuda.current_device())

    def get_current_stream(self, device: int | None = None) -> int:
        torch = _torch()
        return int(torch.cuda.current_stream(device).cuda_stream)

    def get_active_torch_device(self) -> Any:
        torch = _torch()
        return torch.device("cuda", torch.cuda.current_device())

    def is_active(self) -> bool:
        return True


class _Driver:
    @property
    def active(self) -> _Active:
        return _Active()


driver = _Driver()
