"""The build-spec blocks that build tests/wrapped_kernels.py's kernels ahead of time, in one place for the CPU
tests (test_aot_wrapped.py, test_tune_keys.py) and the GPU phases (tests/gpu/wrapped_phases.py), and the stand-in
tensor the CPU tests launch them with. No Triton import here: GPU phases that run with Triton blocked read it too."""

from __future__ import annotations

import os


def kernel_blocks(module: str | os.PathLike) -> str:
    """``[[kernel]]`` blocks for at_copy, h_over_at (offsets both as a tensor and as None) and at_over_h."""
    return f"""[[kernel]]
source = "{module}:at_copy"
signature = "*fp32:16, *fp32:16, i32"
[[kernel]]
source = "{module}:h_over_at"
# offsets is a tensor (IS_VARLEN built both ways) or None (the constexpr None: IS_VARLEN evaluates to False)
signatures = ["*fp32:16, *fp32:16, *fp32:16, i32, fp32", "*fp32:16, *fp32:16, None, i32, fp32"]
[[kernel]]
source = "{module}:at_over_h"
signature = "*fp32:16, *fp32:16, i32"
"""


# -- a torch.Tensor stand-in for the recording driver (its memory is never touched) --------------------------------
class DType:
    def __init__(self, name: str) -> None:
        self.name_ = name

    def __str__(self) -> str:
        return self.name_


class Tensor:
    """A torch.Tensor stand-in with the probes and in-place methods tuning uses (calls counted)."""

    def __init__(self, ptr: int, shape: tuple = (4096,), dtype: str = "torch.float32") -> None:
        self._ptr, self.shape, self._dtype = ptr, tuple(shape), DType(dtype)
        self.calls: list[str] = []

    def data_ptr(self) -> int:
        return self._ptr

    @property
    def dtype(self) -> DType:
        return self._dtype

    def get_device(self) -> int:
        return 0

    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    def stride(self, i: int | None = None):
        s = [1] * len(self.shape)
        for j in range(len(self.shape) - 2, -1, -1):
            s[j] = s[j + 1] * self.shape[j + 1]
        return tuple(s) if i is None else s[i]

    def clone(self) -> Tensor:
        self.calls.append("clone")
        return Tensor(self._ptr + 0x100_0000, self.shape)

    def copy_(self, other: Tensor) -> Tensor:
        self.calls.append("copy_")
        return self

    def zero_(self) -> Tensor:
        self.calls.append("zero_")
        return self
