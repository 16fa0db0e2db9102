"""Pointer extraction from framework objects and dtype names, without importing any framework."""

from __future__ import annotations

import pytest

from karchive.runtime.arg_dtypes import DLPackDtype, pointer_element, triton_dtype
from karchive.runtime.args import NotAPointer, pointer_info


def test_ints_and_none_are_raw_addresses():
    assert pointer_info(0x1000) == (0x1000, None, None)
    assert pointer_info(None) == (0, None, None)
    for bad in (1.5, "0x10", True):
        with pytest.raises(NotAPointer):
            pointer_info(bad)


def test_cuda_array_interface_class_and_instance():
    class Cls:
        @property
        def __cuda_array_interface__(self):
            return {"data": (0x2000, False), "typestr": "<f2", "shape": (2,), "version": 3}

    class Inst:
        pass

    obj = Inst()
    obj.__cuda_array_interface__ = {"data": (0x3000, False), "typestr": "<i4", "shape": (2,), "version": 3}
    ptr, dt, dev = pointer_info(Cls())
    assert (ptr, triton_dtype(dt), dev) == (0x2000, "fp16", None)
    ptr, dt, dev = pointer_info(obj)
    assert (ptr, triton_dtype(dt), dev) == (0x3000, "i32", None)
    with pytest.raises(NotAPointer):
        pointer_info(Inst())


def test_dlpack_reads_pointer_dtype_and_host_device():
    np = pytest.importorskip("numpy")
    a = np.arange(10, dtype=np.float32)[2:]
    ptr, dt, dev = pointer_info(a)
    assert ptr == a.ctypes.data and triton_dtype(dt) == "fp32" and dev == -1
    b = np.zeros(4, dtype=np.int8)
    assert triton_dtype(pointer_info(b)[1]) == "i8"


def test_objects_with_data_ptr():
    class T:
        dtype = "torch.bfloat16"

        def data_ptr(self):
            return 0x4000

        def get_device(self):
            return 3

    assert pointer_info(T()) == (0x4000, "torch.bfloat16", 3)
    assert triton_dtype("torch.bfloat16") == "bf16"


@pytest.mark.parametrize(
    ("dtype", "name"),
    [
        ("torch.float32", "fp32"),
        ("torch.float16", "fp16"),
        ("torch.bool", "i1"),
        ("torch.uint8", "u8"),
        ("torch.float8_e4m3fn", "fp8e4nv"),
        ("torch.float8_e5m2", "fp8e5"),
        ("<f8", "fp64"),
        ("|b1", "i1"),
        (DLPackDtype((4, 16, 1)), "bf16"),
        (DLPackDtype((2, 32, 2)), None),
        ("weird", None),
        (None, None),
    ],
)
def test_dtype_names(dtype, name):
    assert triton_dtype(dtype) == name


def test_pointer_element():
    assert pointer_element("*fp32") == "fp32"
    assert pointer_element("*kfp16") == "fp16"
    assert pointer_element("*i8") == "i8"
