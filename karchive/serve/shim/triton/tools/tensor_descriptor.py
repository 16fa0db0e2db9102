"""karchive's import shim: ``triton.tools.tensor_descriptor.TensorDescriptor``, the host tensor descriptor libraries
build at the call site (``TensorDescriptor.from_tensor(x, block_shape, padding=...)``) and autotune ``pre_hook``s
re-block per config. A plain record with the fields Triton's has; karchive's runtime reads such objects duck-typed
(base, shape, strides, block_shape, padding) and encodes the ``CUtensorMap`` itself (karchive/runtime/descriptors.py),
so nothing here talks to the driver. The checks are Triton's construction checks, raised as karchive errors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from karchive.errors import ArgumentError


@dataclass
class TensorDescriptor:
    base: Any
    shape: list[int]
    strides: list[int]
    block_shape: list[int]
    padding: str = "zero"

    def __post_init__(self) -> None:
        rank = len(self.shape)
        if not 1 <= rank <= 5 or len(self.strides) != rank or len(self.block_shape) != rank:
            raise ArgumentError(
                f"TensorDescriptor: shape {list(self.shape)}, strides {list(self.strides)} and block "
                f"{list(self.block_shape)} need one rank from 1 to 5",
                kernel=None,
                param="shape",
            )
        if self.padding not in ("zero", "nan"):
            raise ArgumentError(
                f"TensorDescriptor: padding must be 'zero' or 'nan', got {self.padding!r}", kernel=None, param="padding"
            )
        if int(self.strides[-1]) != 1:
            raise ArgumentError(
                f"TensorDescriptor: the last dimension must be contiguous (strides {list(self.strides)})",
                kernel=None,
                param="strides",
            )
        if any(int(s) <= 0 for s in self.shape):
            raise ArgumentError(
                f"TensorDescriptor: shape {list(self.shape)} must be positive", kernel=None, param="shape"
            )

    @staticmethod
    def from_tensor(tensor: Any, block_shape: list[int], padding: str = "zero") -> TensorDescriptor:
        return TensorDescriptor(tensor, list(tensor.shape), list(tensor.stride()), list(block_shape), padding)
