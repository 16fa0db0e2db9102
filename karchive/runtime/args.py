"""Turn a launch argument into (device pointer, dtype, device ordinal) without importing any framework.

Extraction is chosen once per Python type and cached, so the hot path is one dict lookup and the
framework's own accessors. Supported, in order of preference: ``data_ptr()`` (torch), CuPy arrays,
JAX arrays (``unsafe_buffer_pointer()``), ``__cuda_array_interface__`` (Numba, others), DLPack
(``__dlpack__`` / ``__dlpack_device__``), and plain ints (raw addresses) or None (null).

The device is an ordinal (>= 0), -1 for host memory, or None when the object does not say.
No call here asks the driver anything (no ``cuPointerGetAttribute`` per launch).
"""

from __future__ import annotations

import ctypes
import operator
import sys
from collections.abc import Callable
from typing import Any

from .arg_dtypes import DLPackDtype

PointerInfo = tuple[int, Any, "int | None"]
Extractor = Callable[[Any], PointerInfo]

#: DLPack device types (dlpack.h): CPU, CUDA, CUDAHost, OpenCL, Vulkan, Metal, VPI, ROCM, ROCMHost, ..., CUDAManaged.
_DL_CPU, _DL_CUDA, _DL_CUDA_HOST, _DL_ROCM, _DL_ROCM_HOST, _DL_CUDA_MANAGED = 1, 2, 3, 10, 11, 13
_GPU_DL_DEVICES = (_DL_CUDA, _DL_ROCM, _DL_CUDA_MANAGED)


class NotAPointer(TypeError):
    """The object offers no way to get a device address from it."""


def _int(a: Any) -> PointerInfo:
    return (int(a), None, None)


def _none(a: Any) -> PointerInfo:
    return (0, None, None)


def _torch(a: Any) -> PointerInfo:
    return (a.data_ptr(), a.dtype, a.get_device())


def _cupy(a: Any) -> PointerInfo:
    return (a.data.ptr, a.dtype, a.device.id)


def _jax(a: Any) -> PointerInfo:
    devices = a.devices()
    if len(devices) != 1:
        raise NotAPointer("a JAX array sharded over several devices has no single device pointer")
    dev = next(iter(devices))
    ordinal = getattr(dev, "local_hardware_id", None)
    if ordinal is None:
        ordinal = dev.id
    return (a.unsafe_buffer_pointer(), a.dtype, ordinal if dev.platform in ("gpu", "cuda", "rocm") else -1)


def _cai(a: Any) -> PointerInfo:
    cai = a.__cuda_array_interface__
    return (cai["data"][0] or 0, cai["typestr"], None)


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int),
        ("dtype", _DLDataType),
        ("shape", ctypes.c_void_p),
        ("strides", ctypes.c_void_p),
        ("byte_offset", ctypes.c_uint64),
    ]


_capsule_get = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_get.restype = ctypes.c_void_p
_capsule_get.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_valid.restype = ctypes.c_int
_capsule_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _dlpack(a: Any) -> PointerInfo:
    """Read data pointer, device and dtype from a DLPack capsule without consuming it (slow, generic)."""
    dev_type, dev_id = a.__dlpack_device__()
    try:
        capsule = a.__dlpack__(stream=None) if dev_type in _GPU_DL_DEVICES else a.__dlpack__()
    except TypeError:
        capsule = a.__dlpack__()
    for name in (b"dltensor", b"dltensor_versioned"):
        if _capsule_valid(capsule, name):
            break
    else:
        raise NotAPointer("__dlpack__ returned no usable DLPack capsule")
    addr = _capsule_get(capsule, name)
    # DLManagedTensor starts with the DLTensor; the versioned form has a version struct and manager_ctx,
    # deleter and flags before it (DLPack 1.0: u32 major, u32 minor, void*, void*, u64 flags = 32 bytes).
    tensor = _DLTensor.from_address(addr + (32 if name == b"dltensor_versioned" else 0))
    ptr = (tensor.data or 0) + tensor.byte_offset
    dtype = DLPackDtype((tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes))
    device = dev_id if dev_type in _GPU_DL_DEVICES else -1
    return (ptr, dtype, device)


def _module_root(tp: type) -> str:
    return (getattr(tp, "__module__", "") or "").split(".", 1)[0]


class NoTensorType:
    """Stands for "no tensor type known yet": no argument's type is this class."""


#: The tensor type whose pointer, dtype and device both launch paths read directly (``data_ptr()``,
#: ``.dtype``, ``get_device()``) instead of through :func:`pointer_info`: ``torch.Tensor`` once a
#: torch tensor has been launched with (karchive never imports torch itself). The compiled launcher reads
#: it, and torch.nn.Parameter, through torch's stable C ABI where that checks out (runtime/_torch_abi.py).
# type[Any], not type: the launch paths call its instances' methods, which no stub describes.
TENSOR_TYPE: type[Any] = NoTensorType
_tensor_listeners: list[Callable[[Any], None]] = []


def set_tensor_type(tp: type | None) -> None:
    """Make ``tp`` the directly-read tensor type (None: none). Tests use it with a stand-in class."""
    global TENSOR_TYPE
    TENSOR_TYPE = NoTensorType if tp is None else tp
    for notify in _tensor_listeners:
        notify(tp)


def on_tensor_type(notify: Callable[[Any], None]) -> None:
    """Call ``notify(tp)`` now and whenever the tensor type changes (the compiled launcher keeps a copy)."""
    _tensor_listeners.append(notify)
    notify(None if TENSOR_TYPE is NoTensorType else TENSOR_TYPE)


def notice_tensors(values: Any) -> None:
    """Turn the direct tensor read on the first time a torch tensor is launched with."""
    if TENSOR_TYPE is NoTensorType:
        for v in values:
            if is_torch_tensor_type(type(v)):
                set_tensor_type(sys.modules["torch"].Tensor)
                return


def is_torch_tensor_type(tp: type) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(getattr(torch, "Tensor", None), type) and issubclass(tp, torch.Tensor)


def framework_of(tp: type) -> str | None:
    """'torch', 'cupy', 'jax' or None, decided by the type alone (never by importing anything)."""
    if is_torch_tensor_type(tp):
        return "torch"
    root = _module_root(tp)
    if root == "cupy":
        return "cupy"
    if root in ("jax", "jaxlib"):
        return "jax"
    return None


def _choose(tp: type) -> Extractor:
    if tp is bool:
        raise NotAPointer("a bool is not a pointer")
    if issubclass(tp, int):
        return _int
    if tp is type(None):
        return _none
    fw = framework_of(tp)
    if fw == "torch":
        return _torch
    if fw == "cupy" and hasattr(tp, "data") and hasattr(tp, "device"):
        return _cupy
    if fw == "jax" and hasattr(tp, "unsafe_buffer_pointer"):
        return _jax
    if hasattr(tp, "data_ptr"):
        return lambda a: (a.data_ptr(), getattr(a, "dtype", None), _device_of(a))
    if hasattr(tp, "__cuda_array_interface__"):
        return _cai
    if hasattr(tp, "__dlpack__") and hasattr(tp, "__dlpack_device__"):
        return _dlpack
    if hasattr(tp, "__index__") and not hasattr(tp, "__float__"):
        return _int
    if _module_root(tp) == "numpy" and issubclass(tp, getattr(sys.modules.get("numpy"), "integer", ())):
        return _int
    if tp in (float, complex, str, bytes) or issubclass(tp, (float, str, bytes)):
        raise NotAPointer(
            f"a {tp.__name__} is not a pointer: expected a tensor/array with data_ptr(), "
            "__cuda_array_interface__ or __dlpack__, or an int address"
        )
    return _per_instance


def _per_instance(a: Any) -> PointerInfo:
    """Objects whose type declares nothing: look at the instance (slow; e.g. an interface set per object)."""
    if hasattr(a, "__cuda_array_interface__"):
        return _cai(a)
    if hasattr(a, "__dlpack__") and hasattr(a, "__dlpack_device__"):
        return _dlpack(a)
    tp = type(a)
    raise NotAPointer(
        f"{tp.__module__}.{tp.__qualname__} is not a pointer: expected a tensor/array with "
        "data_ptr(), __cuda_array_interface__ or __dlpack__, or an int address"
    )


def _device_of(a: Any) -> int | None:
    get = getattr(a, "get_device", None)
    if callable(get):
        try:
            return int(get())
        except Exception:  # noqa: BLE001 - foreign objects
            return None
    return None


_EXTRACTORS: dict[type, Extractor] = {}


def extractor(tp: type) -> Extractor:
    """The cached extractor for a type (raises :class:`NotAPointer` for types that cannot be pointers)."""
    fn = _EXTRACTORS.get(tp)
    if fn is None:
        fn = _choose(tp)
        _EXTRACTORS[tp] = fn
    return fn


def pointer_info(a: Any) -> PointerInfo:
    """(address, dtype object or None, device ordinal / -1 host / None unknown). The address is an int:
    an accessor that answers anything else (``data_ptr()`` returning a string) is :class:`NotAPointer`."""
    fn = _EXTRACTORS.get(type(a))
    if fn is None:
        fn = extractor(type(a))
    info = fn(a)
    if type(info[0]) is not int:
        return (address_of(info[0], a), info[1], info[2])
    return info


def pointer_value(a: Any) -> int:
    """Just the address; used by the bound fast path for objects that are not plain ints."""
    return pointer_info(a)[0]


def address_of(value: Any, owner: Any) -> int:
    """``value``, what ``owner``'s accessor gave as its address, as an int: an integer type (a NumPy
    ``uint64``) converts, anything else (a string, a float, None from a lying interface) is refused with
    :class:`NotAPointer`, which the launch paths report as karchive's ``ArgumentError``."""
    if not isinstance(value, (bool, float, str, bytes)):
        try:
            return operator.index(value)
        except TypeError:
            pass
    tp = type(owner)
    raise NotAPointer(
        f"{tp.__module__}.{tp.__qualname__} gave its device address as a {type(value).__name__} "
        f"({ascii(value)[:40]}), not an int"
    )


def describe_arg(a: Any) -> str:
    """A short description of an argument for error messages (never its whole repr)."""
    if a is None or isinstance(a, (bool, int, float)):
        return repr(a)
    tp = type(a)
    try:
        ptr, dtype, dev = pointer_info(a)
    except Exception:  # noqa: BLE001 - describing a bad argument must not raise: fall back to its type
        return f"<{tp.__module__}.{tp.__qualname__}>"
    where = "host memory" if dev == -1 else f"device {dev}" if dev is not None else "unknown device"
    return f"<{tp.__qualname__} dtype={dtype} at 0x{ptr:x} on {where}>"
