"""The compiled launcher's reader of torch tensors through torch's stable C ABI (c-ext/tensor.c says why).

A launch asks three things of each tensor argument: its address, its dtype (the selection refuses a wrong
one) and its device (it refuses a tensor on another GPU). torch's ``data_ptr()``, ``.dtype`` and
``get_device()`` each cost ~0.05 us on the H100 host, most of it torch guarding each call for Python;
over 15 tensor arguments that was the whole gap between ``k[grid](...)`` and a raw driver call
(docs/benchmarks.md). The AOTInductor shim (``torch/csrc/inductor/aoti_torch/c/shim.h``: C linkage,
kept stable across torch releases because compiled AOTI artifacts call it) answers the same questions
from a tensor handle with plain C calls.

Nothing is trusted that was not checked: :func:`install` runs when the launcher first meets a torch
tensor (karchive never imports torch), finds the four functions in the ``libtorch_cpu`` this process has
loaded, learns each dtype's code by asking the ABI about a real tensor of that dtype, and turns the reader
on only after it returns exactly what the three accessors return for tensors of every dtype and for views
with storage offsets. Anything else (another torch build, a missing symbol, a mismatch,
``KARCHIVE_TORCH_ABI=0``) leaves the accessors in charge, and :func:`status` says why (``karchive
doctor``). The Python launch path always uses the accessors.
"""

from __future__ import annotations

import ctypes
import pathlib
import sys
import threading
import warnings
from types import ModuleType
from typing import Any

from ..core import settings

#: The shim's functions the reader calls, in the order set_tensor_abi takes their addresses.
FUNCTIONS = (
    "aoti_torch_get_data_ptr",
    "aoti_torch_get_dtype",
    "aoti_torch_get_device_type",
    "aoti_torch_get_device_index",
)
#: Where each platform's torch keeps the library that exports them.
_LIBRARIES = ("libtorch_cpu.so", "libtorch_cpu.dylib", "torch_cpu.dll")

_lock = threading.Lock()
_status = "off: no torch tensor launched yet"


def status(ext: ModuleType) -> str:
    """ "on: ..." or "off: <why>" for the compiled launcher ``ext``'s torch reader (and its current-stream query)."""
    state = ext.tensor_stream_state() if _status.startswith("on") else None
    if state is None:
        return _status
    how = {0: "not asked yet", 1: "torch's C ABI", -1: "the getter (the C ABI answered otherwise)"}[state]
    # (-1 also when the C ABI returned an error: it is not asked again)
    return f"{_status}; current stream: {how}"


def install(ext: ModuleType, tp: Any) -> None:
    """Make ``tp`` the extension's directly read tensor type and, for ``torch.Tensor``, turn the ABI reader
    on where it checks out. Never raises for the reader: the accessors are always a correct answer."""
    global _status
    with _lock:
        ext.set_tensor_type(tp)
        ext.set_tensor_stream(None)
        if tp is None:
            _status = "off: no tensor type"
            return
        if not settings.torch_abi():
            _status = f"off: {settings.TORCH_ABI.name}={settings.TORCH_ABI.raw()!r}"
            return
        parameter = _plain_parameter(tp)
        if parameter is not None:
            ext.set_tensor_subtype(parameter)
        try:
            _status = _enable(ext, tp, parameter)
        except Exception as exc:  # noqa: BLE001 - any surprise from a torch build we do not know: keep the accessors
            _status = f"off: {type(exc).__name__}: {exc}"
        if not _status.startswith("on"):
            ext.set_tensor_abi(None)
            ext.set_tensor_stream(None)


def _enable(ext: ModuleType, tp: Any, parameter: type | None) -> str:
    torch = sys.modules.get("torch")
    if torch is None or tp is not getattr(torch, "Tensor", None):
        return "off: the tensor type is not torch.Tensor"
    lib = _library(torch)
    if lib is None:
        return f"off: none of {', '.join(_LIBRARIES)} under {pathlib.Path(str(torch.__file__)).parent / 'lib'}"
    missing = [
        n for n in (*FUNCTIONS, "aoti_torch_device_type_cpu", "aoti_torch_device_type_cuda") if not hasattr(lib, n)
    ]
    if missing:
        return f"off: torch {torch.__version__} does not export {', '.join(missing)}"
    fns = tuple(int(ctypes.cast(getattr(lib, n), ctypes.c_void_p).value or 0) for n in FUNCTIONS)
    host, gpu = (_int_function(lib, f"aoti_torch_device_type_{n}") for n in ("cpu", "cuda"))

    # Learn each dtype's code from a tensor of that dtype (no table of torch's enum here to go stale).
    dtypes: dict[int, Any] = {}
    samples = []
    for dtype in _dtypes(torch):
        try:
            with warnings.catch_warnings():  # ("ComplexHalf support is experimental")
                warnings.simplefilter("ignore")
                t = torch.empty(4, dtype=dtype)
        except (RuntimeError, TypeError):  # dtypes torch cannot allocate plainly (quantized): accessors read them
            continue
        address, code, device_type, _ = ext.tensor_abi_codes(t, fns)
        if address != t.data_ptr() or device_type != host or not isinstance(code, int):
            return (
                f"off: torch {torch.__version__}'s C ABI answered {(address, code, device_type)} for a "
                f"{dtype} tensor at {t.data_ptr():#x} on the host"
            )
        if dtypes.setdefault(code, dtype) is not dtype:
            return f"off: torch {torch.__version__}'s C ABI gives {dtypes[code]} and {dtype} one code ({code})"
        samples.append(t)
    if not dtypes:
        return "off: no dtype could be checked"
    base = torch.arange(64, dtype=torch.float32)
    samples += [base[3:], base[1::2], base.view(torch.int16)[7:], base.reshape(8, 8).t()[2]]
    if parameter is not None:
        samples.append(parameter(torch.ones(3, dtype=torch.float16)))
    direct = _direct_offset(samples)
    ext.set_tensor_abi(fns, host, gpu, dtypes, direct)

    # The reader as a launch uses it, against the accessors: every dtype, and views whose address is not
    # their storage's (an offset the ABI must add).
    for t in samples:
        want = (t.data_ptr(), t.dtype, t.get_device())
        got = ext.tensor_abi_read(t)
        if got is None or got[0] != want[0] or got[1] is not want[1] or got[2] != want[2]:
            return f"off: the C ABI read {got} where the accessors say {want}"
    ext.tensor_abi_activate()  # (on trial until now: a launch on another thread meanwhile used the accessors)
    _install_stream(ext, torch)
    how = f"the tensor object's at::Tensor at offset {direct}" if direct else "the _cdata getter"
    return f"on: torch {torch.__version__}'s stable C ABI ({len(dtypes)} dtypes checked; handle: {how})"


def _install_stream(ext: ModuleType, torch: Any) -> None:
    """torch's current stream from aoti_torch_get_current_cuda_stream (libtorch_cuda) for launches whose
    stream comes from ``_cuda_getCurrentRawStream`` (what runtime/launch/kernel.py asks); the extension
    compares the two at the first launch that asks (asking here could start CUDA early)."""
    getter = getattr(getattr(torch, "_C", None), "_cuda_getCurrentRawStream", None)
    lib = _library(torch, "cuda")
    if getter is None or lib is None or not hasattr(lib, "aoti_torch_get_current_cuda_stream"):
        return
    address = ctypes.cast(lib.aoti_torch_get_current_cuda_stream, ctypes.c_void_p).value
    if address:
        ext.set_tensor_stream(getter, address)


def _direct_offset(samples: list[Any]) -> int:
    """Where every sample object holds its at::Tensor (right after the object header, torch >= 2.11), or 0.

    Read with ctypes at id(t) (CPython: the object's address): the word there must be the TensorImpl* that
    ``_cdata`` returns for every sample, or the getter is used."""
    if sys.implementation.name != "cpython":
        return 0
    offset = object.__basicsize__
    for t in samples:
        if type(t).__basicsize__ < offset + ctypes.sizeof(ctypes.c_void_p):
            return 0
        if ctypes.c_void_p.from_address(id(t) + offset).value != t._cdata:
            return 0
    return offset


def _plain_parameter(tp: Any) -> type | None:
    """torch.nn.Parameter where torch disables its __torch_function__ (so its accessors are torch.Tensor's
    and the launcher may read it as one: weights are Parameters), else None."""
    torch = sys.modules.get("torch")
    tensor = getattr(torch, "Tensor", None)
    parameter = getattr(getattr(torch, "nn", None), "Parameter", None)
    disabled = getattr(getattr(torch, "_C", None), "_disabled_torch_function_impl", None)
    if (
        not isinstance(tensor, type)
        or tp is not tensor
        or not isinstance(parameter, type)
        or not issubclass(parameter, tensor)
        or disabled is None
        or getattr(parameter, "__torch_function__", None) is not disabled
    ):
        return None
    return parameter


def _library(torch: Any, part: str = "cpu") -> ctypes.CDLL | None:
    """The loaded libtorch_cpu (or _cuda): opening it again returns the process's copy (torch loaded it
    privately, so its symbols are not global). None where this torch has no such library."""
    lib_dir = pathlib.Path(str(torch.__file__)).parent / "lib"
    for name in _LIBRARIES:
        path = lib_dir / name.replace("cpu", part)
        if path.exists():
            return ctypes.CDLL(str(path))
    return None


def _int_function(lib: ctypes.CDLL, name: str) -> int:
    fn = getattr(lib, name)
    fn.restype, fn.argtypes = ctypes.c_int32, []
    return int(fn())


def _dtypes(torch: Any) -> list[Any]:
    seen: dict[int, Any] = {}
    for value in vars(torch).values():
        if isinstance(value, torch.dtype):
            seen.setdefault(id(value), value)
    return list(seen.values())
