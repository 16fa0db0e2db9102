"""The driver's own limits for a TMA map, against the ones karchive checks before the driver (issue 34, item 6).

karchive refuses a descriptor whose strides (but the last) are zero, negative or 2**40 bytes or more before
``cuTensorMapEncodeTiled`` sees it (descriptors.check_call, tests/test_tensordesc_runtime.py on the CPU). Here
the real driver encodes maps at the edges, to show the bound is the driver's: a stride of 2**40 - 16 bytes
encodes, 2**40 does not; and karchive launches neither the refused descriptor nor anything after it. No
memory is touched: encoding a map only describes an address.
"""

from __future__ import annotations

import pytest

from karchive.errors import ArgumentError, DriverError
from karchive.format.tensordesc import TensorDescAbi
from karchive.runtime import descriptors as td

USES_BUILD_FIXTURES = False  # nothing but the GPU's driver

FP16_TMA = TensorDescAbi("triton-3.8", "tma", "fp16", 2, (64, 64), swizzle=3, elem_size=2, elem_type=6)
ADDRESS = 0x7F00_0000_0000  # 16-byte aligned; never read


@pytest.fixture(scope="module", autouse=True)
def context():
    torch = pytest.importorskip("torch")
    torch.empty(1, device="cuda")  # the primary context, as a launch would have it
    td.clear_cache()
    yield
    td.clear_cache()


def _params(stride_bytes: int) -> td.EncodeParams:
    return td.encode_params(FP16_TMA, ADDRESS, [128, 64], [stride_bytes // 2, 1], "zero", False, td._driver())


def test_the_driver_takes_a_stride_just_below_2_40_bytes_and_refuses_2_40():
    assert len(td.encode_tiled(_params((1 << 40) - 16))) == 128
    with pytest.raises(DriverError, match="cuTensorMapEncodeTiled"):
        td.encode_tiled(_params(1 << 40))


@pytest.mark.parametrize("strides", [[1 << 39, 1], [0, 1], [-64, 1]])
def test_karchive_refuses_what_the_driver_would_before_calling_it(strides):
    desc = td.TensorDescriptor(ADDRESS, [64, 64], shape=[128, 64], strides=strides, dtype="fp16")
    with pytest.raises(ArgumentError, match="stride"):
        td.expand("a", FP16_TMA, desc)
    ok = td.TensorDescriptor(ADDRESS, [64, 64], shape=[128, 64], strides=[((1 << 40) - 16) // 2, 1], dtype="fp16")
    assert len(td.expand("a", FP16_TMA, ok)[0]) == 128  # the real driver's map for the largest stride karchive takes
