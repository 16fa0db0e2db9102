"""Host tensor descriptors at launch: ``karchive.TensorDescriptor``, CUtensorMap encoding, the expansion.

A ``tensordesc`` parameter (launch ABI v2, spec/FORMAT.md §6.2.1) becomes several binary parameters whose
layout the variant records (its *convention*). :func:`expand` is the one function the launch path calls
for it: descriptor argument -> the values of those parameters, in order. It accepts karchive's own
:class:`TensorDescriptor` and, duck-typed, Triton's ``triton.tools.tensor_descriptor.TensorDescriptor``
(``base``, ``shape``, ``strides``, ``block_shape``, ``padding``; Gluon's ``TensorDescriptorIm2Col`` with its
pixel box) without importing Triton.

The ``CUtensorMap`` is encoded with cuda-python's ``cuTensorMapEncodeTiled`` (``cuTensorMapEncodeIm2col``)
exactly as the producing Triton's launcher encodes it (:func:`encode_params` and :func:`im2col_params` are
that computation, as Triton's ``fill_tma_descriptor*``, pure and testable without a GPU). Encoded maps are
cached by (address, shape, strides, dtype, device, the variant's record, padding, tf32, the im2col box), so a
steady-state launch with the same tensors costs one dict lookup; every check runs on a cache miss, before
anything reaches the driver.
"""

from __future__ import annotations

import ctypes
import operator
import struct
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Any

from ..errors import ArgumentError, DriverError
from ..format.dtypes import SCALAR_SIZES
from ..format.tensordesc import TENSORMAP, TENSORMAP_ALIGN, TENSORMAP_SIZE, TensorDescAbi, parse_tensordesc_type
from .arg_dtypes import element_type, triton_dtype
from .args import NotAPointer, pointer_info

__all__ = [
    "TensorDescriptor",
    "EncodeParams",
    "Im2colParams",
    "descriptor_reason",
    "encode_params",
    "im2col_params",
    "expand",
    "slot_formats",
    "is_descriptor",
    "clear_cache",
    "packed",
]

#: Bytes per element of each element type a descriptor may have (fp4: two values per byte, as Triton's
#: ``float4_e2m1fn_x2`` bytes; fp8 kinds one byte).
ELEMENT_SIZES: dict[str, int] = {
    **{k: v for k, v in SCALAR_SIZES.items() if k not in ("i1", "u1")},
    "i1": 1,
    "u1": 1,
    "fp8e4nv": 1,
    "fp8e5": 1,
    "fp8e4b15": 1,
    "fp8e4b8": 1,
    "fp8e5b16": 1,
    "fp8e8m0": 1,
    "fp4": 1,
}
#: Triton's device-side TMA data type codes -> CUtensorMapDataType (``TMA_DTYPE_DEVICE_TO_HOST`` in
#: triton/backends/nvidia/driver.py, the same in 3.5 to 3.9).
_DEVICE_TO_HOST = {i: i for i in range(16)}
_DEVICE_TO_HOST.update({8: 10, 9: 8, 10: 9})
TMA_TF32 = 11
L2_PROMOTION_128B = 2
OOB_FILL_NONE, OOB_FILL_NAN = 0, 1
#: Triton 3.7+ clears this bit of the map's second word for small tensors on drivers <= 13.1 (CUTLASS's fix).
_SMALL_TENSOR_BIT = 1 << 21
_SMALL_TENSOR_BYTES = 128 * 1024
_DRIVER_PATCHED = 13010
#: The range of an im2col pixel-box corner coordinate, by tensor rank (cuTensorMapEncodeIm2col's limits, which
#: Gluon's ``TensorDescriptorIm2Col`` asserts too).
IM2COL_CORNER_RANGE = {3: (-32768, 32767), 4: (-128, 127), 5: (-16, 15)}


class TensorDescriptor:
    """A host tensor descriptor karchive can launch with, Triton not needed.

    ``TensorDescriptor(x, block_shape=[64, 64])`` with ``x`` a torch tensor, a JAX/CuPy array or anything
    with ``__cuda_array_interface__``/DLPack; or ``TensorDescriptor(address, block_shape, shape=...,
    strides=..., dtype="fp16")``. ``block_shape=None`` takes the block the chosen variant was compiled
    for (autotuned kernels, whose block sizes differ per config). Shape and strides are in elements.
    The address is read again at every launch (a tensor whose storage moved is re-encoded, not reused).
    ``dtype`` is Triton's element type name (``"fp16"``, ``"bf16"``, ``"fp8e4nv"``, ``"i8"``: int8) or a
    framework's dtype or name (``torch.float16``, ``"float16"``).

    Every field is checked here, never coerced: shape, strides and block shape are sequences of integers
    (shape and block positive), ``padding`` is ``"zero"`` or ``"nan"``, ``round_f32_to_tf32`` a bool (and only
    for fp32 tensors, as in Triton), an address an int in [0, 2**64); anything else is an ``ArgumentError``
    naming the field. What only a variant can decide (its dtype, block, the driver's limits) is checked at
    launch, before anything reaches the driver.

    For an im2col parameter (``tensordesc_im2col<...>``, Gluon kernels of Triton 3.8+) give the pixel box as
    Gluon's ``TensorDescriptorIm2Col`` takes it: ``pixel_box_lower_corner`` and ``pixel_box_upper_corner``
    (one entry per spatial dimension, rank - 2 of them), optionally ``element_strides`` (one per dimension, 1
    to 8, the last 1; the convolution stride). The tensor has rank 3 to 5 (NWC, NHWC, NDHWC) and
    ``block_shape`` is ``[pixels per column, channels per pixel]``.
    """

    # No ``dtype`` attribute, on purpose: Triton's autotune key adds ``str(x.dtype)`` of every argument that has
    # one, and Triton's own descriptor has none; karchive's must give the same key (spec/FORMAT.md §6.3).
    __slots__ = (
        "source",
        "shape",
        "strides",
        "block_shape",
        "elem_dtype",
        "padding",
        "round_f32_to_tf32",
        "pixel_box_lower_corner",
        "pixel_box_upper_corner",
        "element_strides",
        "_fixed_ptr",
        "_memo",
        "__weakref__",
    )  # (weak: the compiled launcher's memo, c-ext/dispatcher.c)

    def __init__(
        self,
        x: Any,
        block_shape: Sequence[int] | None = None,
        *,
        shape: Sequence[int] | None = None,
        strides: Sequence[int] | None = None,
        dtype: Any = None,
        padding: str = "zero",
        round_f32_to_tf32: bool = False,
        pixel_box_lower_corner: Sequence[int] | None = None,
        pixel_box_upper_corner: Sequence[int] | None = None,
        element_strides: Sequence[int] | None = None,
    ) -> None:
        _check_options(padding, round_f32_to_tf32, "TensorDescriptor: ", None)
        self.source = x
        self._fixed_ptr: int | None = None
        #: The last expansion: (record id, block_from_variant, launch device, address, device, values). Shape,
        #: strides, dtype and options are fixed at construction, so only the address (and device) can change.
        self._memo: tuple | None = None
        address = _raw_address(x)
        if address is not None:
            if shape is None or strides is None or dtype is None:
                raise ArgumentError(
                    "TensorDescriptor: a raw address needs shape=, strides= and dtype=",
                    kernel=None,
                    param="shape" if shape is None else "strides" if strides is None else "dtype",
                )
            self._fixed_ptr = address
            found_dtype: Any = _given_dtype(dtype)
        else:
            try:
                _ptr, found_dtype, _dev = pointer_info(x)
            except (NotAPointer, TypeError) as exc:
                raise ArgumentError(f"TensorDescriptor: {exc}", kernel=None, param="x") from None
            if dtype is not None:
                found_dtype = _given_dtype(dtype)
            if shape is None or strides is None:
                got_shape, got_strides = shape_and_strides(x, found_dtype)
                shape = got_shape if shape is None else shape
                strides = got_strides if strides is None else strides
        self.shape = _int_fields(shape, "shape", "TensorDescriptor: ", None, positive=True)
        self.strides = _int_fields(strides, "strides", "TensorDescriptor: ", None)
        if len(self.shape) != len(self.strides) or not 1 <= len(self.shape) <= 5:
            raise ArgumentError(
                f"TensorDescriptor: shape {self.shape} and strides {self.strides} must have one length, 1 to 5",
                kernel=None,
                param="shape" if not 1 <= len(self.shape) <= 5 else "strides",
            )
        self.block_shape = (
            None
            if block_shape is None
            else _int_fields(block_shape, "block_shape", "TensorDescriptor: ", None, positive=True)
        )
        self.pixel_box_lower_corner = _opt_ints(pixel_box_lower_corner, "pixel_box_lower_corner")
        self.pixel_box_upper_corner = _opt_ints(pixel_box_upper_corner, "pixel_box_upper_corner")
        self.element_strides = _opt_ints(element_strides, "element_strides")
        box = _im2col_of(self.pixel_box_lower_corner, self.pixel_box_upper_corner, self.element_strides)
        if box is not None or element_strides is not None:
            problem = im2col_problem(len(self.shape), box, self.element_strides)
            if problem:
                raise ArgumentError(f"TensorDescriptor: {problem}", kernel=None, param=None)
            if self.block_shape is not None and len(self.block_shape) != 2:
                raise ArgumentError(
                    f"TensorDescriptor: an im2col block_shape is [pixels per column, channels per "
                    f"pixel], got {list(self.block_shape)}",
                    kernel=None,
                    param=None,
                )
        elif self.block_shape is not None and len(self.block_shape) != len(self.shape):
            hint = (
                "; an im2col descriptor also needs pixel_box_lower_corner= and pixel_box_upper_corner="
                if len(self.block_shape) == 2 and len(self.shape) in IM2COL_CORNER_RANGE
                else ""
            )
            raise ArgumentError(
                f"TensorDescriptor: block_shape {list(self.block_shape)} has rank "
                f"{len(self.block_shape)}, the tensor {len(self.shape)}{hint}",
                kernel=None,
                param="block_shape",
            )
        known = triton_dtype(found_dtype)
        if round_f32_to_tf32 and known is not None and known != "fp32":
            raise ArgumentError(
                f"TensorDescriptor: {_TF32_FP32_ONLY}; this tensor is {known}", kernel=None, param="round_f32_to_tf32"
            )
        self.elem_dtype = found_dtype
        self.padding = padding
        self.round_f32_to_tf32 = round_f32_to_tf32

    @property
    def ptr(self) -> int:
        return self._fixed_ptr if self._fixed_ptr is not None else pointer_info(self.source)[0]

    @property
    def im2col(self) -> bool:
        """An im2col descriptor (a pixel box was given)."""
        return self.pixel_box_lower_corner is not None

    def __repr__(self) -> str:
        box = (
            ""
            if not self.im2col
            else (
                f", pixel_box_lower_corner={list(self.pixel_box_lower_corner or ())}, "
                f"pixel_box_upper_corner={list(self.pixel_box_upper_corner or ())}, "
                f"element_strides={None if self.element_strides is None else list(self.element_strides)}"
            )
        )
        return (
            f"karchive.TensorDescriptor(shape={list(self.shape)}, strides={list(self.strides)}, "
            f"block_shape={None if self.block_shape is None else list(self.block_shape)}, "
            f"dtype={triton_dtype(self.elem_dtype) or self.elem_dtype}{box})"
        )


#: Triton's own words (``TensorDescriptor.__post_init__``, 3.7+; 3.5 and 3.6 have no such option).
_TF32_FP32_ONLY = "round_f32_to_tf32 is only supported for float32 tensors"
_U64 = 1 << 64
_I32_MAX = (1 << 31) - 1
_I64_LIMIT = 1 << 63
#: cuTensorMapEncodeTiled's bound on each global stride, in bytes.
_TMA_STRIDE_LIMIT = 1 << 40


def _raw_address(x: Any) -> int | None:
    """``x`` as a raw device address when it is an integer (an int or a NumPy integer, never a bool), else
    None (an array object). An integer outside [0, 2**64) is an ``ArgumentError``."""
    if isinstance(x, bool) or not (isinstance(x, int) or _is_numpy_integer(x)):
        return None
    address = operator.index(x)
    if not 0 <= address < _U64:
        raise ArgumentError(
            f"TensorDescriptor: address {address} is not a device address (an int in [0, 2**64))",
            kernel=None,
            param="x",
        )
    return address


def _is_numpy_integer(x: Any) -> bool:
    np = sys.modules.get("numpy")
    return np is not None and isinstance(x, np.integer)


def _given_dtype(dtype: Any) -> Any:
    """A caller's ``dtype=`` as the element type it names (:func:`~.arg_dtypes.element_type`), or an
    ``ArgumentError``: a descriptor whose element type is not known could not be checked against a variant."""
    found = element_type(dtype)
    if found is None:
        raise ArgumentError(
            f"TensorDescriptor: dtype {ascii(dtype)[:60]} is not an element type karchive knows "
            "(Triton's names: fp16, bf16, fp32, fp8e4nv, i8 ...; or a framework dtype such as "
            "torch.float16)",
            kernel=None,
            param="dtype",
        )
    return found


def _int_fields(value: Any, field: str, where: str, param: str | None, *, positive: bool = False) -> tuple[int, ...]:
    """``value``, a descriptor's ``field`` (shape, strides, block shape, a pixel-box corner), as a tuple of ints:
    a list or tuple (any sequence but a string) of integers (ints, NumPy integers: never bools, floats or
    strings), at most 8 of them; positive ones where ``positive``. Else an ``ArgumentError`` that names the
    field (``param``: the parameter to name, the field itself when None): nothing is truncated or split."""
    items: list[Any] | None = None
    if not isinstance(value, (str, bytes, bytearray)) and hasattr(value, "__iter__") and not isinstance(value, dict):
        try:
            items = list(islice(iter(value), 9))
        except Exception:  # noqa: BLE001 - a foreign sequence that cannot be iterated: refused below, by name
            items = None
    out: list[int] = []
    if items is not None and len(items) <= 8:
        for item in items:
            if isinstance(item, (bool, float, str, bytes)) or item is None:
                break
            try:
                number = operator.index(item)
            except TypeError:
                break
            if positive and number <= 0:
                break
            out.append(number)
    if items is None or len(items) > 8 or len(out) != len(items):
        what = "positive integers" if positive else "integers"
        raise ArgumentError(
            f"{where}{field} must be a list of {what}, got {ascii(value)[:80]}",
            kernel=None,
            param=param if param is not None else field,
        )
    return tuple(out)


def _opt_ints(values: Any, field: str) -> tuple[int, ...] | None:
    return None if values is None else _int_fields(values, field, "TensorDescriptor: ", None)


def _check_options(padding: Any, tf32: Any, where: str, param: str | None) -> None:
    """A descriptor's ``padding`` ("zero" or "nan", exactly) and ``round_f32_to_tf32`` (a bool), or ArgumentError."""
    if type(padding) is not str or padding not in ("zero", "nan"):
        raise ArgumentError(
            f"{where}padding must be 'zero' or 'nan', got {ascii(padding)[:40]}",
            kernel=None,
            param=param if param is not None else "padding",
        )
    if type(tf32) is not bool:
        raise ArgumentError(
            f"{where}round_f32_to_tf32 must be True or False, got {ascii(tf32)[:40]}",
            kernel=None,
            param=param if param is not None else "round_f32_to_tf32",
        )


#: An im2col descriptor's box: (lower corner, upper corner, element strides or None), spatial dims outermost first.
Im2colBox = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...] | None]


def _im2col_of(
    lower: Sequence[int] | None, upper: Sequence[int] | None, element_strides: Sequence[int] | None
) -> Im2colBox | None:
    """The box of a descriptor's im2col fields; None for a tiled one (no corner given). One corner alone is
    kept as a box with the other empty, so :func:`im2col_problem` names what is missing."""
    if lower is None and upper is None:
        return None
    return (
        tuple(int(v) for v in lower or ()),
        tuple(int(v) for v in upper or ()),
        None if element_strides is None else tuple(int(v) for v in element_strides),
    )


def im2col_problem(rank: int, box: Im2colBox | None, element_strides: Sequence[int] | None = None) -> str | None:
    """What is wrong with an im2col descriptor's box for a tensor of ``rank`` (None: nothing), by the limits
    ``cuTensorMapEncodeIm2col`` sets and Gluon's ``TensorDescriptorIm2Col`` asserts."""
    if box is None:
        return (
            "element_strides is an im2col option: give pixel_box_lower_corner and pixel_box_upper_corner too"
            if element_strides is not None
            else None
        )
    lower, upper, strides = box
    if rank not in IM2COL_CORNER_RANGE:
        return f"im2col descriptors need a tensor of rank 3, 4 or 5 (NWC, NHWC, NDHWC), this one has rank {rank}"
    spatial = rank - 2
    if len(lower) != spatial or len(upper) != spatial:
        return (
            f"pixel_box_lower_corner {list(lower)} and pixel_box_upper_corner {list(upper)} need one entry per "
            f"spatial dimension ({spatial} for rank {rank})"
        )
    lo, hi = IM2COL_CORNER_RANGE[rank]
    bad = [v for v in lower + upper if not lo <= v <= hi]
    if bad:
        return f"pixel box corners must lie in [{lo}, {hi}] for rank {rank}, got {bad}"
    if strides is not None and (len(strides) != rank or not all(0 < s <= 8 for s in strides) or strides[-1] != 1):
        return f"element_strides {list(strides)} must have {rank} entries in [1, 8], the last 1 (the channel dimension)"
    return None


def shape_and_strides(x: Any, dtype: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Shape and element strides of an array object (torch, CuPy, JAX, ``__cuda_array_interface__``, DLPack)."""
    stride = getattr(x, "stride", None)
    if callable(stride):  # torch
        return tuple(x.shape), tuple(stride())
    cai = getattr(x, "__cuda_array_interface__", None)
    if isinstance(cai, dict):
        shape = tuple(cai["shape"])
        size = _itemsize(dtype)
        raw = cai.get("strides")
        return shape, _contiguous(shape) if raw is None else tuple(s // size for s in raw)
    if hasattr(x, "__dlpack__") and not hasattr(x, "unsafe_buffer_pointer") and not hasattr(x, "strides"):
        return _dlpack_shape(x)
    shape = tuple(getattr(x, "shape", ()))
    strides = getattr(x, "strides", None)  # CuPy / NumPy: bytes
    if strides is not None and not hasattr(x, "unsafe_buffer_pointer"):
        return shape, tuple(s // _itemsize(dtype) for s in strides)
    return shape, _contiguous(shape)  # JAX arrays are dense row-major


def _dlpack_shape(x: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
    from .args import _capsule_get, _capsule_valid, _DLTensor

    capsule = x.__dlpack__()
    for name in (b"dltensor", b"dltensor_versioned"):
        if _capsule_valid(capsule, name):
            break
    else:
        raise ArgumentError("TensorDescriptor: __dlpack__ returned no usable DLPack capsule", kernel=None, param="x")
    t = _DLTensor.from_address(_capsule_get(capsule, name) + (32 if name == b"dltensor_versioned" else 0))
    shape = tuple((ctypes.c_int64 * t.ndim).from_address(t.shape)) if t.ndim else ()
    strides = tuple((ctypes.c_int64 * t.ndim).from_address(t.strides)) if t.strides else _contiguous(shape)
    return shape, strides


def _contiguous(shape: Sequence[int]) -> tuple[int, ...]:
    out, acc = [], 1
    for s in reversed(shape):
        out.append(acc)
        acc *= int(s)
    return tuple(reversed(out))


def _itemsize(dtype: Any) -> int:
    name = triton_dtype(dtype)
    if name in ELEMENT_SIZES:
        return ELEMENT_SIZES[name]
    size = getattr(dtype, "itemsize", None)
    if isinstance(size, int) and size > 0:
        return size
    raise ArgumentError(
        f"TensorDescriptor: cannot tell the element size of dtype {dtype!r}", kernel=None, param="dtype"
    )


def is_descriptor(value: Any) -> bool:
    """karchive's descriptor, or one shaped like Triton's (duck-typed: base, shape, strides, block_shape)."""
    return isinstance(value, TensorDescriptor) or all(
        hasattr(value, a) for a in ("base", "shape", "strides", "block_shape")
    )


@dataclass(frozen=True)
class _Call:
    """What a descriptor argument says, whatever its class."""

    ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    block: tuple[int, ...] | None
    dtype: Any
    device: int | None
    padding: str
    tf32: bool
    im2col: Im2colBox | None = None


def _own_call(value: TensorDescriptor, ptr: int, dev: int | None, box: Im2colBox | None) -> _Call:
    """What karchive's own descriptor says, its address already read."""
    return _Call(
        ptr,
        value.shape,
        value.strides,
        value.block_shape,
        value.elem_dtype,
        dev,
        value.padding,
        value.round_f32_to_tf32,
        box,
    )


def _read(value: Any, name: str) -> _Call:
    """What ``value``, the argument of descriptor parameter ``name``, says. Its errors name the parameter but no
    kernel (this module is not told it): the launch path re-raises them with it (launch/_record.py)."""
    if isinstance(value, TensorDescriptor):
        fixed = value._fixed_ptr
        ptr, dev = (fixed, None) if fixed is not None else _address(value, name)
        box = _im2col_of(value.pixel_box_lower_corner, value.pixel_box_upper_corner, value.element_strides)
        return _own_call(value, ptr, dev, box)
    if is_descriptor(value):  # Triton's TensorDescriptor (any release with host descriptors; Gluon's im2col one)
        try:
            ptr, dtype, dev = pointer_info(value.base)
        except (NotAPointer, TypeError) as exc:
            raise ArgumentError(f"descriptor base: {exc}", kernel=None, param=name) from None
        where = "descriptor "
        padding, tf32 = getattr(value, "padding", "zero"), getattr(value, "round_f32_to_tf32", False)
        _check_options(padding, tf32, where, name)
        corners = [
            getattr(value, f, None) for f in ("pixel_box_lower_corner", "pixel_box_upper_corner", "element_strides")
        ]
        lower, upper, estrides = (
            None if c is None else _int_fields(c, f, where, name)
            for c, f in zip(corners, ("pixel_box_lower_corner", "pixel_box_upper_corner", "element_strides"))
        )
        return _Call(
            ptr,
            _int_fields(value.shape, "shape", where, name, positive=True),
            _int_fields(value.strides, "strides", where, name),
            _int_fields(value.block_shape, "block_shape", where, name, positive=True),
            dtype,
            dev,
            padding,
            tf32,
            _im2col_of(lower, upper, estrides),
        )
    raise ArgumentError(
        f"expected a tensor descriptor (karchive.TensorDescriptor or Triton's TensorDescriptor), "
        f"got {type(value).__name__}",
        kernel=None,
        param=name,
    )


def _address(value: TensorDescriptor, name: str) -> tuple[int, int | None]:
    """The address and device a descriptor's array has now (read at every launch), or ArgumentError: its
    accessor may answer what it did not at construction (``data_ptr()`` returning a string)."""
    try:
        ptr, _dtype, dev = pointer_info(value.source)
    except (NotAPointer, TypeError) as exc:
        raise ArgumentError(f"parameter {name!r}: {exc}", kernel=None, param=name) from None
    return ptr, dev


def descriptor_reason(name: str, typ: str, value: Any, block_from_variant: bool = False) -> str | None:
    """Why ``value`` does not fit a ``tensordesc<...>`` parameter of a variant (None when it fits): the
    selection-time check (element type, rank, block shape; alignment and the rest at encoding)."""
    parsed = parse_tensordesc_type(typ)
    if parsed is None:
        return f"{name} has type {typ!r}, which this runtime cannot read"
    if not is_descriptor(value):
        return f"{name} expects a tensor descriptor ({typ}), got {type(value).__name__}"
    try:
        call = _read(value, name)
    except ArgumentError as exc:
        return f"{name}: {exc}"
    got = triton_dtype(call.dtype)
    if call.dtype is not None and got != parsed.dtype:
        return f"{name} has dtype {got or call.dtype}, this variant takes {typ}"
    if len(call.shape) != parsed.rank:
        return f"{name} has rank {len(call.shape)}, this variant takes {typ}"
    if parsed.im2col != (call.im2col is not None):
        return (
            f"{name} is {'an im2col' if call.im2col is not None else 'a tiled'} descriptor, this variant takes "
            f"{'an im2col' if parsed.im2col else 'a tiled'} one ({typ})"
        )
    if call.block is not None and not block_from_variant and call.block != parsed.block_shape:
        return (
            f"{name} has block_shape {list(call.block)}, this variant was compiled for "
            f"{list(parsed.block_shape)} ({typ})"
        )
    return None


@dataclass(frozen=True)
class EncodeParams:
    """The arguments of ``cuTensorMapEncodeTiled`` (innermost dimension first), and the bit patch."""

    data_type: int
    rank: int
    address: int
    global_dim: tuple[int, ...]
    global_strides: tuple[int, ...]  # bytes, rank - 1 entries
    box_dim: tuple[int, ...]
    element_strides: tuple[int, ...]
    swizzle: int
    oob_fill: int
    l2_promotion: int = L2_PROMOTION_128B
    interleave: int = 0
    clear_small_tensor_bit: bool = False


def encode_params(
    d: TensorDescAbi,
    ptr: int,
    shape: Sequence[int],
    strides: Sequence[int],
    padding: str,
    tf32: bool,
    driver_version: int,
) -> EncodeParams:
    """What the producing Triton's launcher passes to ``cuTensorMapEncodeTiled`` for this descriptor
    (``make_tensordesc_arg`` + ``fillTMADescriptorTiled``), with karchive's checks first."""
    assert d.elem_size is not None and d.elem_type is not None and d.swizzle is not None
    rank = d.rank
    dims = list(shape)
    if d.fp4_padded:
        dims[-1] *= 2
    data_type = _data_type(d, tf32)
    global_dim = tuple(int(s) for s in reversed(dims))
    byte_strides = [int(s) * d.elem_size for s in strides[:-1]]
    global_strides = tuple(reversed(byte_strides))
    box = tuple(int(b) for b in reversed(d.block_shape))
    clear = False
    if d.convention != "triton-3.5" and driver_version <= _DRIVER_PATCHED:
        # Triton 3.7+: highest byte offset over the *encoded* dims (innermost stride = element size). Triton's C
        # sums it in a 32-bit int, which wraps for tensors of 2 GiB and more and can clear the bit there too;
        # karchive sums exactly and keeps the driver's own map for such tensors (spec/FORMAT.md §6.2.1).
        inner = [d.elem_size] + list(global_strides)
        top = sum((gd - 1) * st for gd, st in zip(global_dim, inner))
        clear = top + 1 < _SMALL_TENSOR_BYTES
    return EncodeParams(
        data_type,
        rank,
        ptr,
        global_dim,
        global_strides,
        box,
        (1,) * rank,
        d.swizzle,
        OOB_FILL_NAN if padding == "nan" else OOB_FILL_NONE,
        clear_small_tensor_bit=clear,
    )


@dataclass(frozen=True)
class Im2colParams:
    """The arguments of ``cuTensorMapEncodeIm2col`` (innermost dimension first), as Triton's
    ``fill_tma_descriptor_im2col`` passes them."""

    data_type: int
    rank: int
    address: int
    global_dim: tuple[int, ...]
    global_strides: tuple[int, ...]  # bytes, rank - 1 entries
    pixel_box_lower_corner: tuple[int, ...]  # rank - 2 entries (innermost spatial dimension first)
    pixel_box_upper_corner: tuple[int, ...]
    channels_per_pixel: int
    pixels_per_column: int
    element_strides: tuple[int, ...]
    swizzle: int
    oob_fill: int
    l2_promotion: int = L2_PROMOTION_128B
    interleave: int = 0


def _data_type(d: TensorDescAbi, tf32: bool) -> int:
    """The host CUtensorMapDataType Triton encodes with (TF32 for round_f32_to_tf32 from Triton 3.7 on)."""
    assert d.elem_type is not None
    if tf32:
        if d.convention == "triton-3.5":
            raise ArgumentError(
                "round_f32_to_tf32 descriptors did not exist before Triton 3.7; this variant's "
                "convention (triton-3.5) cannot take one",
                kernel=None,
                param="round_f32_to_tf32",
            )
        return TMA_TF32
    return _DEVICE_TO_HOST[d.elem_type]


def im2col_params(
    d: TensorDescAbi, ptr: int, shape: Sequence[int], strides: Sequence[int], padding: str, tf32: bool, box: Im2colBox
) -> Im2colParams:
    """What Triton's launcher (3.8 and 3.9: ``make_tensordesc_arg`` + ``fillTMADescriptorIm2col``) passes to
    ``cuTensorMapEncodeIm2col`` for this descriptor. Unlike the tiled map, no bit of the result is patched
    for small tensors (Triton's im2col fill has no such step)."""
    assert d.elem_size is not None and d.swizzle is not None and len(d.block_shape) == 2
    dims = list(shape)
    if d.fp4_padded:
        dims[-1] *= 2
    lower, upper, estrides = box
    rank = len(dims)
    return Im2colParams(
        _data_type(d, tf32),
        rank,
        ptr,
        tuple(int(s) for s in reversed(dims)),
        tuple(reversed([int(s) * d.elem_size for s in strides[:-1]])),
        tuple(reversed(lower)),
        tuple(reversed(upper)),
        # Triton's block_size is [pixelsPerColumn, channelsPerPixel]; its C reverses it into the box
        channels_per_pixel=int(d.block_shape[1]),
        pixels_per_column=int(d.block_shape[0]),
        element_strides=tuple(reversed(estrides)) if estrides is not None else (1,) * rank,
        swizzle=d.swizzle,
        oob_fill=OOB_FILL_NAN if padding == "nan" else OOB_FILL_NONE,
    )


def _bad(where: str, name: str, msg: str) -> ArgumentError:
    """A refused descriptor argument (no kernel: the launch path names it, launch/_record.py)."""
    return ArgumentError(f"{where}: {msg}", kernel=None, param=name)


def check_call(
    name: str, d: TensorDescAbi, call: _Call, block_from_variant: bool, block: tuple[int, ...] | None = None
) -> None:
    """The argument checks that must pass before a launch (ArgumentError naming the parameter). ``block`` is
    the block of the variant's signature (``tensordesc<fp16[128, 128]>``), which the call's descriptor must
    have; the ABI's ``block_shape`` is the TMA box Triton encodes, which can be smaller (a 128-column fp16
    store is two 64-column boxes under the 128-byte swizzle). No kernel is named: this module is not told it, and
    the launch path re-raises these errors with it (launch/_record.py)."""
    kind = "tensordesc_im2col" if d.im2col else "tensordesc"
    where = f"parameter {name!r} ({kind}<{d.dtype}[{', '.join(map(str, d.block_shape))}]>)"
    if d.im2col and call.im2col is None:
        raise _bad(
            where,
            name,
            "this parameter takes an im2col descriptor: give the pixel box, "
            "karchive.TensorDescriptor(x, block_shape, pixel_box_lower_corner=[...], "
            "pixel_box_upper_corner=[...]) (or Gluon's TensorDescriptorIm2Col)",
        )
    if call.im2col is not None and not d.im2col:
        raise _bad(where, name, "an im2col descriptor (it has a pixel box) for a tiled descriptor parameter")
    if call.im2col is not None:
        problem = im2col_problem(len(call.shape), call.im2col)
        if problem:
            raise _bad(where, name, problem)
    got = triton_dtype(call.dtype)
    if call.dtype is not None and got != d.dtype:
        raise _bad(where, name, f"the tensor has dtype {got or call.dtype}, the variant takes {d.dtype}")
    if len(call.shape) != d.rank or len(call.strides) != d.rank:
        raise _bad(where, name, f"the descriptor has rank {len(call.shape)}, the variant takes {d.rank}")
    want = block if block is not None else d.block_shape
    if call.block is not None and not block_from_variant and call.block != want:
        raise _bad(
            where,
            name,
            f"the descriptor's block_shape is {list(call.block)}, the variant was compiled for {list(want)}",
        )
    if call.device is not None and call.device < 0:
        raise _bad(where, name, "the tensor is in host memory; TMA needs device memory")
    if any(s <= 0 for s in call.shape):
        raise _bad(where, name, f"shape {list(call.shape)} must be positive")
    # What the binary's own parameters can hold, in every mode: each dimension an i32, each stride an i64.
    if any(s > _I32_MAX for s in call.shape):
        raise _bad(
            where,
            name,
            f"shape {list(call.shape)} has a dimension of 2**31 or more; the kernel takes each dimension as an i32",
        )
    if any(not -_I64_LIMIT <= s < _I64_LIMIT for s in call.strides):
        raise _bad(where, name, f"stride out of the i64 range the kernel takes, strides are {list(call.strides)}")
    if not 0 <= call.ptr < _U64:
        raise _bad(where, name, f"base address {call.ptr} is not a device address (an int in [0, 2**64))")
    if d.mode == "tma":
        size = d.elem_size or ELEMENT_SIZES.get(d.dtype, 1)
        if call.ptr % 16:
            raise _bad(where, name, f"base address 0x{call.ptr:x} is not 16-byte aligned (TMA needs it)")
        if call.strides[-1] != 1:
            raise _bad(
                where, name, f"the last dimension must be contiguous (stride 1), strides are {list(call.strides)}"
            )
        # cuTensorMapEncodeTiled / Im2col: globalStrides are unsigned byte counts, multiples of 16 below 2**40
        if any(s <= 0 for s in call.strides[:-1]):
            raise _bad(
                where,
                name,
                f"strides {list(call.strides)}: every stride but the last must be positive "
                "for a TMA map (the driver takes unsigned byte strides)",
            )
        if any(s * size >= _TMA_STRIDE_LIMIT for s in call.strides[:-1]):
            raise _bad(
                where,
                name,
                f"strides {list(call.strides)} of {size}-byte elements reach 2**40 bytes or "
                "more (the driver's limit for a TMA map's strides)",
            )
        bad = [s for s in call.strides[:-1] if (s * size) % 16]
        if bad:
            raise _bad(
                where,
                name,
                f"strides {list(call.strides)} of {size}-byte elements are not multiples of "
                "16 bytes (TMA needs every stride but the last 16-byte aligned)",
            )
    if call.padding == "nan" and not d.dtype.startswith(("fp", "bf")):
        raise _bad(where, name, "padding 'nan' needs a floating-point tensor")
    if call.tf32 and d.dtype != "fp32":
        raise _bad(where, name, f"{_TF32_FP32_ONLY}; this one is {d.dtype}")
    if call.tf32 and d.convention == "triton-3.5":
        # the binary has no rounding flag to take (decomposed) nor a TF32 map to read (tma): launching would
        # silently skip the rounding the caller asked for
        raise _bad(
            where,
            name,
            "round_f32_to_tf32 descriptors did not exist before Triton 3.7; this variant's "
            "convention (triton-3.5) cannot take one",
        )


_lock = threading.Lock()
_cache: dict[tuple, list[Any]] = {}
_records: dict[int, TensorDescAbi] = {}
_CACHE_LIMIT = 4096
_driver_version: list[int] = []


def clear_cache() -> None:
    with _lock:
        _cache.clear()
        _records.clear()


def _driver() -> int:
    if not _driver_version:
        from cuda.bindings import driver as cu  # the CUDA runtime path needs cuda-python anyway

        err, version = cu.cuDriverGetVersion()
        _driver_version.append(int(version) if int(err) == 0 else 0)
    return _driver_version[0]


def _encode(call: str, p: Any, *box_args: Any) -> bytes:
    """The 128-byte CUtensorMap the driver's ``call`` (cuda-python) encodes for ``p``: the arguments both encoders
    share around ``box_args``, each encoder's own (the binding takes its own integer types in the lists)."""
    from cuda.bindings import driver as cu

    u64 = cu.cuuint64_t
    err, tmap = getattr(cu, call)(
        cu.CUtensorMapDataType(p.data_type),
        p.rank,
        p.address,
        [u64(v) for v in p.global_dim],
        [u64(v) for v in p.global_strides],
        *box_args,
        cu.CUtensorMapInterleave(p.interleave),
        cu.CUtensorMapSwizzle(p.swizzle),
        cu.CUtensorMapL2promotion(p.l2_promotion),
        cu.CUtensorMapFloatOOBfill(p.oob_fill),
    )
    if int(err) != 0:
        _e, text = cu.cuGetErrorString(err)
        raise DriverError(
            f"{call} failed: {text.decode() if isinstance(text, bytes) else text} ({p})", call=call, code=int(err)
        )
    return bytes(ctypes.string_at(tmap.getPtr(), TENSORMAP_SIZE))


def encode_im2col(p: Im2colParams) -> bytes:
    """The 128-byte im2col CUtensorMap for ``p`` from the driver (cuda-python ``cuTensorMapEncodeIm2col``)."""
    from cuda.bindings.driver import cuuint32_t as u32

    return _encode(
        "cuTensorMapEncodeIm2col",
        p,
        list(p.pixel_box_lower_corner),
        list(p.pixel_box_upper_corner),
        p.channels_per_pixel,
        p.pixels_per_column,
        [u32(v) for v in p.element_strides],
    )


def encode_tiled(p: EncodeParams) -> bytes:
    """The 128-byte CUtensorMap for ``p`` from the driver (cuda-python), with Triton's bit patch applied."""
    from cuda.bindings.driver import cuuint32_t as u32

    raw = _encode("cuTensorMapEncodeTiled", p, [u32(v) for v in p.box_dim], [u32(v) for v in p.element_strides])
    if not p.clear_small_tensor_bit:
        return raw
    patched = bytearray(raw)
    struct.pack_into("<Q", patched, 8, struct.unpack_from("<Q", patched, 8)[0] & ~_SMALL_TENSOR_BIT)
    return bytes(patched)


class Expansion(list):
    """The values of a descriptor's binary parameters (a list), with their packed bytes once asked for
    (:func:`packed`): cached with the values, so the compiled launcher's steady state copies one bytes object."""

    __slots__ = ("blob",)

    def __init__(self, values: list[Any]) -> None:
        super().__init__(values)
        self.blob: bytes | None = None


def expand(
    name: str,
    d: TensorDescAbi,
    value: Any,
    block_from_variant: bool = False,
    device: int | None = None,
    block: tuple[int, ...] | None = None,
) -> list[Any]:
    """A descriptor argument as the values of the binary parameters ``d`` lists (``d.slots``, in order):
    bytes for a ``tensormap`` slot, ints (bools as 0/1) for the rest. Cached by everything it depends on.
    ``device``: the launch's device; a descriptor over memory of another GPU is refused."""
    if type(value) is TensorDescriptor:  # the steady state: one address read, compared with the last launch's
        fixed = value._fixed_ptr
        ptr, dev = (fixed, None) if fixed is not None else _address(value, name)
        memo = value._memo
        if (
            memo is not None
            and memo[3] == ptr
            and memo[0] == id(d)
            and memo[4] == dev
            and memo[2] == device
            and memo[1] == block_from_variant
            and memo[6] == block
        ):
            return memo[5]
        box = _im2col_of(value.pixel_box_lower_corner, value.pixel_box_upper_corner, value.element_strides)
        key = (
            ptr,
            value.shape,
            value.strides,
            value.elem_dtype,
            dev,
            value.block_shape,
            value.padding,
            value.round_f32_to_tf32,
            id(d),
            block_from_variant,
            device,
            block,
            box,
        )
        out = _cache.get(key)
        if out is not None:
            value._memo = (id(d), block_from_variant, device, ptr, dev, out, block)
            return out
        call = _own_call(value, ptr, dev, box)
    else:
        try:
            call = _read(value, name)
        except ArgumentError as exc:
            raise ArgumentError(f"parameter {name!r}: {exc}", kernel=None, param=name) from None
        key = (
            call.ptr,
            call.shape,
            call.strides,
            call.dtype,
            call.device,
            call.block,
            call.padding,
            call.tf32,
            id(d),
            block_from_variant,
            device,
            block,
            call.im2col,
        )
        out = _cache.get(key)
        if out is not None:
            return out
    check_call(name, d, call, block_from_variant, block)
    if device is not None and call.device is not None and call.device >= 0 and call.device != device:
        raise ArgumentError(
            f"parameter {name!r}: the descriptor's tensor is on device {call.device}, the launch on "
            f"device {device}; a tensor map must describe memory of the launching GPU",
            kernel=None,
            param=name,
        )
    r = d.rank
    if d.mode == "tma":
        if d.im2col:
            assert call.im2col is not None  # check_call: an im2col parameter has a box
            tmap = encode_im2col(
                im2col_params(d, call.ptr, call.shape, call.strides, call.padding, call.tf32, call.im2col)
            )
        else:
            tmap = encode_tiled(
                encode_params(d, call.ptr, call.shape, call.strides, call.padding, call.tf32, _driver())
            )
        shape = list(call.shape)
        if d.fp4_padded and d.convention == "triton-3.5":  # 3.5/3.6 pass the doubled shape on as well
            shape[-1] *= 2
        out = Expansion([tmap, *shape, *call.strides])
    else:
        nan = 1 if call.padding == "nan" else 0
        flags = [nan] if d.convention == "triton-3.5" else [nan, 1 if call.tf32 else 0]
        out = Expansion([call.ptr, *call.shape, *call.strides, *flags, *call.shape, *call.strides])
    assert len(out) == len(d.slots) and r == len(call.shape)
    with _lock:
        if len(_cache) >= _CACHE_LIMIT:
            _cache.clear()
        _cache[key] = out
        _records[id(d)] = d  # id(d) in the key stays this record's while the cache holds it
    if type(value) is TensorDescriptor:
        value._memo = (id(d), block_from_variant, device, call.ptr, call.device, out, block)
    return out


_blob_structs: dict[int, tuple[TensorDescAbi, struct.Struct]] = {}


def blob_struct(d: TensorDescAbi) -> struct.Struct:
    """The descriptor's binary parameters as one struct, laid out from offset 0 with each slot's alignment.
    Its offsets equal a parameter buffer's minus the descriptor's first offset (the first slot has the
    largest alignment); the compiled launcher's entry checks that before using it (launch/_native.py)."""
    hit = _blob_structs.get(id(d))
    if hit is not None and hit[0] is d:
        return hit[1]
    fmt, offset = ["<"], 0
    for char, size, align in slot_formats(d):
        pad = (-offset) % align
        if pad:
            fmt.append(f"{pad}x")
        fmt.append(char)
        offset += pad + size
    st = struct.Struct("".join(fmt))
    with _lock:
        _blob_structs[id(d)] = (d, st)  # d kept: its id stays its own while the entry is here
    return st


def blob_offsets(d: TensorDescAbi) -> tuple[int, ...]:
    """Offset of each of the descriptor's binary parameters in :func:`blob_struct`'s bytes."""
    out, offset = [], 0
    for _char, size, align in slot_formats(d):
        offset += (-offset) % align
        out.append(offset)
        offset += size
    return tuple(out)


def packed(values: list[Any], d: TensorDescAbi) -> bytes:
    """:func:`expand`'s values as the bytes of the descriptor's binary parameters (:func:`blob_struct`),
    kept on the cached expansion: the steady state returns the same bytes object. Raises what ``struct``
    raises for a value that does not fit its slot (the launch then explains it, as the Python path does)."""
    blob = getattr(values, "blob", None)
    if blob is None:
        blob = blob_struct(d).pack(*values)
        if isinstance(values, Expansion):
            values.blob = blob
    return blob


#: struct format character of each non-map slot type (a pointer slot is "Q").
_SLOT_FORMATS = {"i1": "B", "i32": "i", "i64": "q"}


def slot_formats(d: TensorDescAbi) -> list[tuple[str, int, int]]:
    """(struct format, size, alignment) of each binary parameter a descriptor becomes, for the packer."""
    out = []
    for s in d.slots:
        if s == TENSORMAP:
            out.append((f"{TENSORMAP_SIZE}s", TENSORMAP_SIZE, TENSORMAP_ALIGN))
        elif s.startswith("*"):
            out.append(("Q", 8, 8))
        else:
            size = {"i1": 1, "i32": 4, "i64": 8}[s]
            out.append((_SLOT_FORMATS[s], size, size))
    return out
