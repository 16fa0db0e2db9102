"""Launch archived kernels inside ``jax.jit`` through jaxlib's Triton custom call — no Triton needed.

``triton_call(kernel, *args, out_shape=..., grid=..., input_output_aliases=..., zeroed_outputs=...,
**constexprs)`` has jax-triton's call shape; ``kernel`` is ``karchive.open(path).kernel(name)``.

How it works: at trace time the variant is chosen for the GPU's compute capability (archive metadata
only), its launch ABI is mapped onto jaxlib's ``TritonKernelCall`` (:mod:`._jaxdesc`), serialised with
jaxlib's own classes and zlib-compressed, and emitted as the ``triton_kernel_call_ffi`` custom call
(``triton_kernel_call`` before jax 0.10.1). Machine code reaches jaxlib one of two ways:

- **cubin**: the archive's binary goes into ``TritonKernel.module_image`` (recent jaxlib), so nothing is
  compiled at run time. Detected by reading the proto descriptor embedded in jaxlib's ``_triton``
  extension; the field is spliced into the message jaxlib serialised (:mod:`._proto`).
- **ptx**: the variant's PTX (present unless the archive was built without IR); jaxlib runs ptxas on
  first use (tens to hundreds of ms per kernel, cached per process).

``mode="auto"`` (default) takes the cubin path where jaxlib has it (with the PTX alongside when the
archive has it, so a jaxlib that ignores the image still works), else PTX. Everything about the call
except array contents is static: scalars are baked into the call, so pass Python numbers.

Pointer parameters map onto XLA buffers in order (jaxlib hands buffers out one by one: operands, then
results). Outputs whose parameter comes before an input pointer (e.g. ``softmax(out_ptr, in_ptr, ...)``)
are therefore passed as zero-filled operands aliased to the result, which costs one fill.
"""

from __future__ import annotations

import functools
import logging
import mmap
import os
import sys
import threading
import weakref
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import jax
import numpy as np

from ..errors import ArgumentError
from ..runtime.device import DeviceInfo
from ..runtime.select import MISSING
from . import InteropError, _proto
from ._jaxdesc import ArrayParam, Buffer, KernelDesc, describe_variant
from ._roles import kernel_roles

log = logging.getLogger("karchive.interop.jax")

__all__ = ["JaxlibSupport", "describe", "jaxlib_support", "triton_call"]

#: jaxlib below this has no ``jax.ffi``-style lowering karchive can use.
MIN_JAX = (0, 4, 36)


# -- what the installed jaxlib can do ------------------------------------------------------------------
@dataclass
class JaxlibSupport:
    """The installed jaxlib's Triton custom call: version, target, and what its proto can carry."""

    jax_version: tuple[int, ...]
    jaxlib_version: tuple[int, ...]
    lib: Any  # jax._src.lib.gpu_triton, or None without the CUDA plugin
    target: str
    api_version: int
    messages: dict[str, _proto.MessageInfo] | None = None  # triton.proto as compiled into jaxlib
    descriptor_source: str | None = None
    notes: list[str] = field(default_factory=list)

    def kernel_field(self, name: str) -> tuple[int, int, str] | None:
        if not self.messages or "TritonKernel" not in self.messages:
            return None
        return self.messages["TritonKernel"].fields.get(name)

    @property
    def module_image_fields(self) -> dict[str, int] | None:
        """ModuleImageProto field numbers when ``TritonKernel.module_image`` exists (cubin path)."""
        f = self.kernel_field("module_image")
        if f is None or f[1] != _proto.TYPE_MESSAGE or not self.messages:
            return None
        sub = self.messages.get(f[2])
        if sub is None or "object_file" not in sub.fields:
            return None
        return {"module_image": f[0], **{k: v[0] for k, v in sub.fields.items()}}

    @property
    def accepts_cubin(self) -> bool:
        return self.module_image_fields is not None

    def summary(self) -> dict:
        return {"jax": ".".join(map(str, self.jax_version)), "jaxlib": ".".join(map(str, self.jaxlib_version)),
                "gpu_triton": self.lib is not None, "target": self.target, "api_version": self.api_version,
                "accepts_cubin": self.accepts_cubin, "descriptor": self.descriptor_source,
                "global_scratch_field": self.kernel_field("global_scratch_size") is not None, "notes": self.notes}


def _version(text: str) -> tuple[int, ...]:
    out = []
    for part in text.split(".")[:3]:
        digits = "".join(ch for ch in part if ch.isdigit())
        out.append(int(digits) if digits else 0)
    return tuple(out)


def _descriptor(lib: Any) -> tuple[dict | None, str | None]:
    """triton.proto's message types, read from the extension that implements jaxlib's Triton call."""
    paths: list[str] = []
    for mod in (getattr(lib, "_cuda_triton", None), sys.modules.get(getattr(lib.TritonKernel, "__module__", ""))):
        f = getattr(mod, "__file__", None)
        if f and f not in paths:
            paths.append(f)
    for p in list(paths):  # the proto may be compiled into a sibling library of the plugin
        d = os.path.dirname(p)
        try:
            sib = sorted((os.path.join(d, n) for n in os.listdir(d) if ".so" in n), key=os.path.getsize)
        except OSError:
            continue
        paths += [s for s in sib if s not in paths and os.path.getsize(s) < (3 << 30)]
    name = b"jaxlib/gpu/triton.proto"
    needle = _proto.tag(1, _proto.LEN) + _proto.varint(len(name)) + name
    for path in paths:
        try:
            with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                pos = mm.find(needle)
                while pos >= 0:
                    found = _proto.parse_file_descriptor(bytes(mm[pos:pos + (1 << 20)]))
                    if "TritonKernel" in found:
                        return found, path
                    pos = mm.find(needle, pos + 1)
        except (OSError, ValueError):
            continue
    return None, None


_support: JaxlibSupport | None = None
_support_lock = threading.Lock()


def jaxlib_support(refresh: bool = False) -> JaxlibSupport:
    """Probe jaxlib once: version gate, custom-call target, proto descriptor (cubin support)."""
    global _support
    if _support is not None and not refresh:
        return _support
    with _support_lock:
        jv = tuple(getattr(jax, "__version_info__", _version(jax.__version__)))[:3]
        try:
            from jax._src import lib as _lib

            jlv = tuple(getattr(_lib, "version", None) or _version(_lib.version_str))[:3]
        except Exception:  # noqa: BLE001
            import jaxlib

            jlv = _version(jaxlib.__version__)
        if jv < MIN_JAX:
            raise InteropError(f"karchive's JAX bridge needs jax >= {'.'.join(map(str, MIN_JAX))} "
                               f"(jax.ffi lowering); this is jax {'.'.join(map(str, jv))}")
        try:
            from jax._src.lib import gpu_triton as lib

            if getattr(lib, "TritonKernel", None) is None:
                lib = None
        except Exception:  # noqa: BLE001 - no CUDA plugin, or the private module moved
            lib = None
        target, api = ("triton_kernel_call_ffi", 4) if jv >= (0, 10, 1) else ("triton_kernel_call", 2)
        s = JaxlibSupport(jv, jlv, lib, target, api)
        if lib is None:
            s.notes.append("jax._src.lib.gpu_triton is unavailable (no CUDA plugin): calls are serialised by "
                           "karchive's own encoder, for lowering/export only")
        else:
            s.messages, s.descriptor_source = _descriptor(lib)
            if s.messages is None:
                s.notes.append("triton.proto descriptor not found in jaxlib's binaries: cubin path off, PTX only")
        _support = s
        return s


# -- serialisation -------------------------------------------------------------------------------------
def _module_image(desc: KernelDesc, fields: dict[str, int]) -> bytes:
    parts = []
    for name, value in (("kernel_name", desc.kernel_name.encode()), ("object_file", desc.cubin or b""),
                        ("shared_mem_bytes", desc.shared_mem_bytes)):
        number = fields.get(name)
        if number is None:
            continue
        parts.append((number, _proto.f_varint(number, value) if isinstance(value, int)
                      else _proto.f_bytes(number, value)))
    body = b"".join(p for _, p in sorted(parts))
    return _proto.f_bytes(fields["module_image"], body, keep_empty=True)


def encode_pure(desc: KernelDesc, name: str, metadata: bytes, support: JaxlibSupport) -> bytes:
    """``TritonAnyKernelCall`` bytes without jaxlib's classes (same bytes jaxlib writes, field order included)."""
    P = _proto
    k = [(1, P.f_bytes(1, desc.kernel_name.encode())), (2, P.f_varint(2, desc.num_warps)),
         (3, P.f_varint(3, desc.shared_mem_bytes)), (4, P.f_bytes(4, desc.ptx.encode())),
         (6, P.f_varint(6, desc.compute_capability)), (10, P.f_varint(10, desc.num_ctas, keep_zero=True))]
    if desc.global_scratch:
        for fname, value in zip(("global_scratch_size", "global_scratch_align"), desc.global_scratch):
            f = support.kernel_field(fname)
            if f is None:
                raise InteropError("the kernel needs global scratch and this jaxlib's TritonKernel has no "
                                   f"{fname} field (needs jaxlib > 0.11.0)")
            k.append((f[0], P.tag(f[0], P.VARINT) + P.varint(value)))
    kernel = b"".join(b for _, b in sorted(k))
    params = []
    for p in desc.params:
        if isinstance(p, ArrayParam):
            body = P.f_varint(1, p.bytes_to_zero) + P.f_varint(2, p.divisibility)
            params.append(P.f_bytes(5, P.f_bytes(1, body, keep_empty=True), keep_empty=True))
            continue
        n = P.PARAM["bool_" if p.dtype == "i1" else {"fp32": "f32", "fp64": "f64"}.get(p.dtype, p.dtype)]
        if p.dtype == "fp32":
            enc = P.f_float(n, p.value)
        elif p.dtype == "fp64":
            enc = P.f_double(n, p.value)
        else:
            enc = P.tag(n, P.VARINT) + P.varint(int(p.value))
        params.append(P.f_bytes(5, enc, keep_empty=True))
    g0, g1, g2 = desc.grid
    call = (P.f_bytes(1, kernel, keep_empty=True) + P.f_varint(2, g0) + P.f_varint(3, g1) + P.f_varint(4, g2)
            + b"".join(params))
    return P.f_bytes(1, call, keep_empty=True) + P.f_bytes(3, metadata) + P.f_bytes(4, name.encode())


def _jaxlib_kernel(lib: Any, desc: KernelDesc) -> Any:
    base = (desc.kernel_name, desc.num_warps, desc.num_ctas, desc.shared_mem_bytes, desc.ptx, "",
            desc.compute_capability)
    if desc.global_scratch:
        try:
            return lib.TritonKernel(*base, *desc.global_scratch)
        except TypeError as exc:
            raise InteropError(f"{desc.kernel_name} needs {desc.global_scratch[0]} bytes of global scratch per "
                               f"program; this jaxlib's TritonKernel cannot take a scratch size (jaxlib > 0.11.0 "
                               f"can): {exc}") from None
    try:
        return lib.TritonKernel(*base)
    except TypeError:
        if desc.num_ctas != 1:
            raise InteropError(f"{desc.kernel_name}: this jaxlib's TritonKernel has no num_ctas argument") from None
        # jaxlib before num_ctas (2024): (name, num_warps, shared, ptx, ttir, cc, cluster_dim x3)
        return lib.TritonKernel(desc.kernel_name, desc.num_warps, desc.shared_mem_bytes, desc.ptx, "",
                                desc.compute_capability, 1, 1, 1)


def encode(desc: KernelDesc, name: str = "", metadata: bytes = b"", support: JaxlibSupport | None = None) -> bytes:
    """The custom call's opaque payload: zlib(TritonAnyKernelCall), the cubin spliced in on the cubin path."""
    s = support or jaxlib_support()
    if s.lib is not None:
        lib = s.lib
        params = [lib.create_array_parameter(p.bytes_to_zero, p.divisibility) if isinstance(p, ArrayParam)
                  else lib.create_scalar_parameter(p.value, p.dtype) for p in desc.params]
        call = lib.TritonKernelCall(_jaxlib_kernel(lib, desc), *desc.grid, params)
        raw = bytes(call.to_proto(name, metadata))
    else:
        raw = encode_pure(desc, name, metadata, s)
    if desc.path == "cubin":
        fields = s.module_image_fields
        if fields is None:
            raise InteropError("the cubin path needs a jaxlib whose TritonKernel has module_image; "
                               f"this one ({s.summary()['jaxlib']}) does not: use mode='ptx'")
        raw = _proto.replace_in(raw, (_proto.ANY["kernel_call"], _proto.CALL["kernel"]), _module_image(desc, fields))
    return zlib.compress(raw)


# -- planning a call -----------------------------------------------------------------------------------
def _is_array(v: Any) -> bool:
    return hasattr(v, "shape") and hasattr(v, "dtype") and not isinstance(v, (bool, int, float, np.generic))


class _Aval:
    """Stands in for an array during variant selection: dtype known, address 16-byte aligned (XLA's are)."""

    __slots__ = ("dtype",)

    def __init__(self, dtype: Any) -> None:
        self.dtype = np.dtype(dtype)

    def data_ptr(self) -> int:
        return 0

    def get_device(self) -> int:
        return 0


def _compute_capability(explicit: int | None, support: JaxlibSupport) -> int:
    if explicit:
        return int(explicit)
    for d in jax.devices():
        cc = getattr(d, "compute_capability", None)
        if d.platform in ("gpu", "cuda") and cc:
            major, _, minor = str(cc).partition(".")
            return int(major) * 10 + int(minor or 0)
    if support.lib is not None:
        try:
            return int(support.lib.get_compute_capability(0))
        except Exception:  # noqa: BLE001
            pass
    raise InteropError("no CUDA device is visible to JAX; pass compute_capability= (e.g. 90) to lower for one")


_members: "weakref.WeakKeyDictionary[Any, dict]" = weakref.WeakKeyDictionary()


def _member(kernel: Any, variant: Any, what: str) -> bytes | None:
    """Binary or PTX of a variant, read (digest-checked) once per archive."""
    archive = kernel.archive
    cache = _members.setdefault(archive, {})
    key = (variant.key, what)
    if key not in cache:
        if what == "ptx":
            ref = variant.ir.get("ptx")
            cache[key] = archive.reader.read(ref.path) if ref is not None else None
        else:
            cache[key] = archive.reader.read(variant.binary.path)
    return cache[key]


@dataclass
class Plan:
    """How one call maps onto the custom call (all static)."""

    desc: KernelDesc
    operands: list[Any]  # arrays, in buffer order (some may be zero-filled stand-ins for outputs)
    out_avals: list[tuple[tuple[int, ...], Any]]  # results in custom-call order
    aliases: dict[int, int]  # operand index -> result index
    user_order: list[int]  # user output i is custom-call result user_order[i]
    materialized: list[int]  # user outputs passed as zero-filled operands
    variant: Any = None


def _flatten_outs(out_shape: Any) -> tuple[list[Any], bool]:
    if hasattr(out_shape, "shape") and hasattr(out_shape, "dtype"):
        return [out_shape], True
    if isinstance(out_shape, (list, tuple)) and all(hasattr(o, "shape") and hasattr(o, "dtype") for o in out_shape):
        return list(out_shape), False
    raise ArgumentError("out_shape must be a jax.ShapeDtypeStruct (or anything with .shape and .dtype), or a "
                        f"list/tuple of them; got {type(out_shape).__name__}")


def plan_call(kernel: Any, args: Sequence[Any], kwargs: Mapping[str, Any], *, out_shape: Any, grid: Any,
              input_output_aliases: Mapping[int, int] | None = None, zeroed_outputs: Any = (),
              out_names: Sequence[str] | None = None, mode: str = "auto", compute_capability: int | None = None,
              support: JaxlibSupport | None = None, zeros: Callable[[tuple, Any], Any] | None = None) -> Plan:
    """Bind arguments, choose the variant, lay out buffers and build the :class:`KernelDesc` (no JAX tracing)."""
    if mode not in ("auto", "cubin", "ptx"):
        raise ArgumentError(f"mode must be 'auto', 'cubin' or 'ptx', got {mode!r}")
    s = support or jaxlib_support()
    roles = kernel_roles(kernel)
    outs, _single = _flatten_outs(out_shape)
    aliases = {int(i): int(o) for i, o in (input_output_aliases or {}).items()}
    if any(not 0 <= o < len(outs) for o in aliases.values()) or len(set(aliases.values())) != len(aliases):
        raise ArgumentError(f"input_output_aliases {aliases} must map inputs to distinct outputs 0..{len(outs) - 1}")
    true_outs = [o for o in range(len(outs)) if o not in aliases.values()]
    runtime_params = [r for r in roles if r.kind != "constexpr"]
    pointer_names = [r.name for r in runtime_params if r.kind == "pointer"]
    if out_names is None:
        k = len(true_outs)
        names = pointer_names[len(pointer_names) - k:] if k else []
        if len(names) != k:
            raise ArgumentError(f"{kernel.name}: {k} outputs but only {len(pointer_names)} pointer parameters")
    else:
        names = list(out_names)
        if len(names) != len(true_outs) or any(n not in pointer_names for n in names):
            raise ArgumentError(f"{kernel.name}: out_names {names} must name {len(true_outs)} pointer parameter(s) "
                                f"(one per non-aliased output) among {pointer_names}")
    out_of = dict(zip(names, true_outs))  # param name -> user output index
    inputs = [r for r in runtime_params if r.name not in out_of]
    if len(args) > len(inputs):
        raise ArgumentError(f"{kernel.name}: takes {len(inputs)} inputs ({', '.join(r.name for r in inputs)}), "
                            f"got {len(args)} positional arguments")
    values: dict[str, Any] = {r.name: a for r, a in zip(inputs, args)}
    constexprs: dict[str, Any] = {}
    for key, v in kwargs.items():
        if key in values:
            raise ArgumentError(f"{kernel.name}: got two values for {key!r}")
        if any(r.name == key for r in inputs):
            values[key] = v
        elif any(r.name == key for r in roles if r.kind == "constexpr"):
            constexprs[key] = v
        else:
            raise ArgumentError(f"{kernel.name}: unknown argument {key!r}; parameters: {', '.join(kernel.param_names)}")
    missing = [r.name for r in inputs if r.name not in values]
    if missing:
        raise ArgumentError(f"{kernel.name}: missing argument(s) {', '.join(missing)} (outputs are {names})")
    for i in aliases:
        if not 0 <= i < len(inputs) or inputs[i].kind != "pointer" or not _is_array(values[inputs[i].name]):
            raise ArgumentError(f"{kernel.name}: input_output_aliases key {i} must index an array input "
                                f"(inputs: {[r.name for r in inputs]})")
    for r in runtime_params:
        if r.name in values:
            v = values[r.name]
            if r.kind == "pointer" and not _is_array(v):
                raise ArgumentError(f"{kernel.name}: {r.name} is a pointer parameter; pass an array, got "
                                    f"{type(v).__name__}")
            if r.kind != "pointer" and _is_array(v):
                if tuple(getattr(v, "shape", ())) != ():
                    raise ArgumentError(f"{kernel.name}: {r.name} is a scalar parameter; got an array")
                try:  # a concrete 0-d array is a number; a tracer is not (scalars are baked into the call)
                    values[r.name] = v.item()
                except Exception:  # noqa: BLE001 - jax raises ConcretizationTypeError for tracers
                    raise ArgumentError(
                        f"{kernel.name}: {r.name} must be a static Python number: scalars are baked into the "
                        f"custom call, and inside jit this one is traced ({type(v).__name__})") from None
    # Buffers: trailing output pointers stay results; earlier ones become zero-filled aliased operands.
    suffix: list[str] = []
    for n in reversed(pointer_names):
        if n not in out_of:
            break
        suffix.insert(0, n)
    materialize = [n for n in names if n not in suffix]
    operand_params = [n for n in pointer_names if n not in suffix]
    result_order = [out_of[n] for n in suffix] + sorted(set(aliases.values()) | {out_of[n] for n in materialize})
    buffer_of: dict[str, int] = {n: i for i, n in enumerate(operand_params)}
    buffer_of.update({n: len(operand_params) + i for i, n in enumerate(suffix)})
    op_alias: dict[int, int] = {}
    for i, o in aliases.items():
        op_alias[buffer_of[inputs[i].name]] = result_order.index(o)
    for n in materialize:
        op_alias[buffer_of[n]] = result_order.index(out_of[n])
    # Variant selection on archive metadata only.
    cc = _compute_capability(compute_capability, s)
    dev = DeviceInfo.describe_target(f"cuda:{cc}")
    named: dict[str, Any] = {}
    for pname in kernel.param_names:
        if pname in out_of:
            named[pname] = _Aval(outs[out_of[pname]].dtype)
        elif pname in values:
            v = values[pname]
            named[pname] = _Aval(v.dtype) if _is_array(v) else v
    variant = kernel.select(device=dev, **named, **constexprs)
    # Grid and zeroed outputs may depend on the variant's meta-parameters.
    meta = {**{n: values.get(n) for n in kernel.param_names if n in values}, **variant.constexprs,
            "num_warps": variant.abi.num_warps, "num_ctas": variant.abi.num_ctas,
            "num_stages": variant.options.get("num_stages")}
    g = grid(meta) if callable(grid) else grid
    g = (g,) if isinstance(g, int) else tuple(g)
    zero = zeroed_outputs(meta) if callable(zeroed_outputs) else zeroed_outputs
    zero_bytes: dict[int, int] = {}
    for o in zero or ():
        if not 0 <= o < len(outs):
            raise ArgumentError(f"zeroed_outputs: no output {o}")
        nbytes = int(np.prod(outs[o].shape, dtype=np.int64)) * np.dtype(outs[o].dtype).itemsize
        pname = next((n for n, j in out_of.items() if j == o), None)
        if pname is None:
            pname = next(inputs[i].name for i, j in aliases.items() if j == o)
        if pname not in materialize:  # zero-filled already
            zero_bytes[buffer_of[pname]] = nbytes
    call_values = []
    for p in variant.params:
        if p.name in buffer_of:
            call_values.append(Buffer(buffer_of[p.name]))
        else:
            call_values.append(values.get(p.name, MISSING))
    ptx_bytes = _member(kernel, variant, "ptx")
    ptx = ptx_bytes.decode("ascii", "replace") if ptx_bytes else None
    if mode == "auto":
        path = "cubin" if s.accepts_cubin else "ptx"
    else:
        path = mode
    if path == "cubin" and not s.accepts_cubin:
        raise InteropError(f"mode='cubin': this jaxlib ({s.summary()['jaxlib']}) does not accept precompiled "
                           f"module images ({'; '.join(s.notes) or 'no module_image field'}); use mode='ptx'")
    cubin = _member(kernel, variant, "binary") if path == "cubin" else None
    desc = describe_variant(variant, call_values, g, compute_capability=cc, zero_bytes=zero_bytes, path=path,
                            ptx=(ptx if mode != "cubin" else None) if path == "cubin" else ptx, cubin=cubin)
    # Operands (arrays in buffer order) and results.
    operands: list[Any] = []
    for n in operand_params:
        if n in materialize:
            o = outs[out_of[n]]
            operands.append(zeros(tuple(o.shape), o.dtype) if zeros is not None else o)
        else:
            operands.append(values[n])
    out_avals = [(tuple(outs[o].shape), np.dtype(outs[o].dtype)) for o in result_order]
    for i, o in aliases.items():
        v = values[inputs[i].name]
        if tuple(v.shape) != tuple(outs[o].shape) or np.dtype(v.dtype) != np.dtype(outs[o].dtype):
            raise ArgumentError(f"{kernel.name}: input {i} ({inputs[i].name}) is aliased to output {o} but has "
                                f"shape/dtype {tuple(v.shape)}/{v.dtype}, output is {tuple(outs[o].shape)}/{outs[o].dtype}")
    return Plan(desc, operands, out_avals, op_alias, [result_order.index(o) for o in range(len(outs))],
                [out_of[n] for n in materialize], variant)


# -- the primitive -------------------------------------------------------------------------------------
_prim: Any = None
_opaque_cache: dict[tuple, bytes] = {}


def _ffi_lowering() -> Callable:
    ffi = getattr(jax, "ffi", None)
    if ffi is None or not hasattr(ffi, "ffi_lowering"):
        from jax.extend import ffi  # type: ignore[no-redef]  # jax < 0.5
    return ffi.ffi_lowering


def _lowering(ctx: Any, *operands: Any, opaque: bytes, out_avals: tuple, aliases: tuple, target: str,
              api_version: int) -> Any:
    lower = _ffi_lowering()
    if api_version == 4:
        return lower(target, api_version=4, operand_output_aliases=dict(aliases))(ctx, *operands, opaque=opaque)
    return lower(target, api_version=api_version, backend_config=opaque,
                 operand_output_aliases=dict(aliases))(ctx, *operands)


def _primitive() -> Any:
    global _prim
    if _prim is not None:
        return _prim
    try:
        from jax.extend.core import Primitive
    except ImportError:  # pragma: no cover - older jax
        from jax.core import Primitive  # type: ignore[no-redef]
    from jax._src import core as jcore
    from jax.interpreters import mlir

    try:
        from jax._src.dispatch import apply_primitive
    except ImportError:  # pragma: no cover
        from jax.interpreters.xla import apply_primitive  # type: ignore[no-redef]

    p = Primitive("karchive_triton_call")
    p.multiple_results = True
    p.def_impl(functools.partial(apply_primitive, p))
    p.def_abstract_eval(lambda *avals, out_avals, **_: [jcore.ShapedArray(s, d) for s, d in out_avals])
    mlir.register_lowering(p, _lowering, platform="cuda")
    _prim = p
    return p


def triton_call(kernel: Any, *args: Any, out_shape: Any, grid: Any,
                input_output_aliases: Mapping[int, int] | None = None, zeroed_outputs: Any = (),
                out_names: Sequence[str] | None = None, name: str = "", mode: str = "auto",
                compute_capability: int | None = None, serialized_metadata: bytes = b"", **kwargs: Any) -> Any:
    """Launch ``kernel`` (``karchive.open(...).kernel(name)``) on JAX arrays; works inside ``jax.jit``.

    - ``args`` / keyword arguments: the kernel's non-constexpr parameters *except* the output
      pointers, in declaration order (arrays for pointers; static Python numbers for scalars).
    - ``out_shape``: a ``jax.ShapeDtypeStruct`` or a list of them. Each output that is not aliased gets
      a pointer parameter: by default the last pointer parameters in declaration order, or those named
      by ``out_names`` (in output order).
    - ``input_output_aliases={i: o}``: input ``i`` (index into the inputs above) is updated in place and
      returned as output ``o``; it gets no extra parameter.
    - ``zeroed_outputs``: output indices (or ``meta -> indices``) zeroed before the launch.
    - ``grid``: tuple, int, or ``meta -> tuple`` (meta: arguments + the variant's constexprs, num_warps).
    - other keyword arguments: constexprs, used to pick the variant.
    - ``mode``: "auto" | "cubin" | "ptx" (see the module docstring); ``compute_capability``: the GPU to
      build for when JAX sees none (lowering on a CPU host).
    Returns one array, or a list when ``out_shape`` is a list/tuple.
    """
    s = jaxlib_support()
    import jax.numpy as jnp

    plan = plan_call(kernel, args, kwargs, out_shape=out_shape, grid=grid, input_output_aliases=input_output_aliases,
                     zeroed_outputs=zeroed_outputs, out_names=out_names, mode=mode,
                     compute_capability=compute_capability, support=s, zeros=jnp.zeros)
    key = (plan.desc, name or kernel.name, bytes(serialized_metadata))
    opaque = _opaque_cache.get(key)
    if opaque is None:
        opaque = encode(plan.desc, name or kernel.name, bytes(serialized_metadata), s)
        if len(_opaque_cache) > 1024:
            _opaque_cache.clear()
        _opaque_cache[key] = opaque
    results = _primitive().bind(*plan.operands, opaque=opaque, out_avals=tuple(plan.out_avals),
                                aliases=tuple(sorted(plan.aliases.items())), target=s.target,
                                api_version=s.api_version)
    outs = [results[i] for i in plan.user_order]
    _flat, single = _flatten_outs(out_shape)
    return outs[0] if single else outs


def describe(kernel: Any, *args: Any, out_shape: Any, grid: Any, **kwargs: Any) -> KernelDesc:
    """The :class:`KernelDesc` a ``triton_call`` with these arguments would emit (arrays may be
    ``jax.ShapeDtypeStruct``); ``desc.path`` says "cubin" or "ptx"."""
    opts = {k: kwargs.pop(k) for k in ("input_output_aliases", "zeroed_outputs", "out_names", "mode",
                                       "compute_capability", "support") if k in kwargs}
    return plan_call(kernel, args, kwargs, out_shape=out_shape, grid=grid, **opts).desc
