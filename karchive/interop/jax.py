"""Launch archived kernels inside ``jax.jit`` through jaxlib's Triton custom call — no Triton needed.

``triton_call(kernel, *args, out_shape=..., grid=..., input_output_aliases=..., zeroed_outputs=...,
**constexprs)`` has jax-triton's call shape; ``kernel`` is ``karchive.open(path).kernel(name)``.

How it works: at trace time the call is planned (:mod:`._jaxplan`: outputs, arguments, buffer layout,
the variant for the GPU's compute capability from archive metadata only), the variant's launch ABI is
mapped onto jaxlib's ``TritonKernelCall`` (:mod:`._jaxdesc`), serialised with
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
import importlib
import logging
import mmap
import os
import sys
import threading
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax

from ..errors import InteropError
from . import _jaxplan, _proto
from ._jaxdesc import ArrayParam, KernelDesc
from ._jaxplan import Plan

log = logging.getLogger("karchive.interop.jax")

__all__ = ["JaxlibSupport", "Plan", "describe", "jaxlib_support", "plan_call", "triton_call"]

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
        return {
            "jax": ".".join(map(str, self.jax_version)),
            "jaxlib": ".".join(map(str, self.jaxlib_version)),
            "gpu_triton": self.lib is not None,
            "target": self.target,
            "api_version": self.api_version,
            "accepts_cubin": self.accepts_cubin,
            "descriptor": self.descriptor_source,
            "global_scratch_field": self.kernel_field("global_scratch_size") is not None,
            "notes": self.notes,
        }


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
                    found = _proto.parse_file_descriptor(bytes(mm[pos : pos + (1 << 20)]))
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
        except Exception:  # noqa: BLE001 - jax._src is private: on any change, read jaxlib's public version
            import jaxlib

            jlv = _version(jaxlib.__version__)
        if jv < MIN_JAX:
            raise InteropError(
                f"karchive's JAX bridge needs jax >= {'.'.join(map(str, MIN_JAX))} "
                f"(jax.ffi lowering); this is jax {'.'.join(map(str, jv))}"
            )
        lib: Any = None
        try:
            from jax._src.lib import gpu_triton

            if getattr(gpu_triton, "TritonKernel", None) is not None:
                lib = gpu_triton
        except Exception:  # noqa: BLE001 - no CUDA plugin, or the private module moved
            pass
        target, api = ("triton_kernel_call_ffi", 4) if jv >= (0, 10, 1) else ("triton_kernel_call", 2)
        s = JaxlibSupport(jv, jlv, lib, target, api)
        if lib is None:
            s.notes.append(
                "jax._src.lib.gpu_triton is unavailable (no CUDA plugin): calls are serialised by "
                "karchive's own encoder, for lowering/export only"
            )
        else:
            s.messages, s.descriptor_source = _descriptor(lib)
            if s.messages is None:
                s.notes.append("triton.proto descriptor not found in jaxlib's binaries: cubin path off, PTX only")
        _support = s
        return s


# -- serialisation -------------------------------------------------------------------------------------
def _module_image(desc: KernelDesc, fields: dict[str, int]) -> bytes:
    parts = []
    for name, value in (
        ("kernel_name", desc.kernel_name.encode()),
        ("object_file", desc.cubin or b""),
        ("shared_mem_bytes", desc.shared_mem_bytes),
    ):
        number = fields.get(name)
        if number is None:
            continue
        parts.append(
            (number, _proto.f_varint(number, value) if isinstance(value, int) else _proto.f_bytes(number, value))
        )
    body = b"".join(p for _, p in sorted(parts))
    return _proto.f_bytes(fields["module_image"], body, keep_empty=True)


def encode_pure(desc: KernelDesc, name: str, metadata: bytes, support: JaxlibSupport) -> bytes:
    """``TritonAnyKernelCall`` bytes without jaxlib's classes (same bytes jaxlib writes, field order included)."""
    P = _proto
    k = [
        (1, P.f_bytes(1, desc.kernel_name.encode())),
        (2, P.f_varint(2, desc.num_warps)),
        (3, P.f_varint(3, desc.shared_mem_bytes)),
        (4, P.f_bytes(4, desc.ptx.encode())),
        (6, P.f_varint(6, desc.compute_capability)),
        (10, P.f_varint(10, desc.num_ctas, keep_zero=True)),
    ]
    if desc.global_scratch:
        for fname, value in zip(("global_scratch_size", "global_scratch_align"), desc.global_scratch):
            f = support.kernel_field(fname)
            if f is None:
                raise InteropError(
                    "the kernel needs global scratch and this jaxlib's TritonKernel has no "
                    f"{fname} field (needs jaxlib > 0.11.0)"
                )
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
    call = (
        P.f_bytes(1, kernel, keep_empty=True)
        + P.f_varint(2, g0)
        + P.f_varint(3, g1)
        + P.f_varint(4, g2)
        + b"".join(params)
    )
    return P.f_bytes(1, call, keep_empty=True) + P.f_bytes(3, metadata) + P.f_bytes(4, name.encode())


def _jaxlib_kernel(lib: Any, desc: KernelDesc) -> Any:
    base = (
        desc.kernel_name,
        desc.num_warps,
        desc.num_ctas,
        desc.shared_mem_bytes,
        desc.ptx,
        "",
        desc.compute_capability,
    )
    if desc.global_scratch:
        try:
            return lib.TritonKernel(*base, *desc.global_scratch)
        except TypeError as exc:
            raise InteropError(
                f"{desc.kernel_name} needs {desc.global_scratch[0]} bytes of global scratch per "
                f"program; this jaxlib's TritonKernel cannot take a scratch size (jaxlib > 0.11.0 "
                f"can): {exc}"
            ) from None
    try:
        return lib.TritonKernel(*base)
    except TypeError:
        if desc.num_ctas != 1:
            raise InteropError(f"{desc.kernel_name}: this jaxlib's TritonKernel has no num_ctas argument") from None
        # jaxlib before num_ctas (2024): (name, num_warps, shared, ptx, ttir, cc, cluster_dim x3)
        return lib.TritonKernel(
            desc.kernel_name, desc.num_warps, desc.shared_mem_bytes, desc.ptx, "", desc.compute_capability, 1, 1, 1
        )


def encode(desc: KernelDesc, name: str = "", metadata: bytes = b"", support: JaxlibSupport | None = None) -> bytes:
    """The custom call's opaque payload: zlib(TritonAnyKernelCall), the cubin spliced in on the cubin path."""
    s = support or jaxlib_support()
    if s.lib is not None:
        lib = s.lib
        params = [
            lib.create_array_parameter(p.bytes_to_zero, p.divisibility)
            if isinstance(p, ArrayParam)
            else lib.create_scalar_parameter(p.value, p.dtype)
            for p in desc.params
        ]
        call = lib.TritonKernelCall(_jaxlib_kernel(lib, desc), *desc.grid, params)
        raw = bytes(call.to_proto(name, metadata))
    else:
        raw = encode_pure(desc, name, metadata, s)
    if desc.path == "cubin":
        fields = s.module_image_fields
        if fields is None:
            raise InteropError(
                "the cubin path needs a jaxlib whose TritonKernel has module_image; "
                f"this one ({s.summary()['jaxlib']}) does not: use mode='ptx'"
            )
        raw = _proto.replace_in(raw, (_proto.ANY["kernel_call"], _proto.CALL["kernel"]), _module_image(desc, fields))
    return zlib.compress(raw)


# -- planning a call -----------------------------------------------------------------------------------
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
        except Exception:  # noqa: BLE001 - a failed query means no usable device: the error below says what to pass
            pass
    raise InteropError("no CUDA device is visible to JAX; pass compute_capability= (e.g. 90) to lower for one")


def plan_call(
    kernel: Any,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    *,
    out_shape: Any,
    grid: Any,
    input_output_aliases: Mapping[int, int] | None = None,
    zeroed_outputs: Any = (),
    out_names: Sequence[str] | None = None,
    mode: str = "auto",
    compute_capability: int | None = None,
    support: JaxlibSupport | None = None,
    zeros: Callable[[tuple, Any], Any] | None = None,
) -> Plan:
    """Bind arguments, choose the variant, lay out buffers and build the :class:`KernelDesc` (no JAX tracing).

    The steps live in :mod:`._jaxplan`; this resolves what they need from JAX: the installed jaxlib's
    capabilities and the compute capability of the GPU JAX sees (or ``compute_capability``).
    """
    s = support or jaxlib_support()
    return _jaxplan.plan(
        kernel,
        args,
        kwargs,
        out_shape=out_shape,
        grid=grid,
        compute_capability=_compute_capability(compute_capability, s),
        support=s,
        input_output_aliases=input_output_aliases,
        zeroed_outputs=zeroed_outputs,
        out_names=out_names,
        mode=mode,
        zeros=zeros,
    )


# -- the primitive -------------------------------------------------------------------------------------
_prim: Any = None
_opaque_cache: dict[tuple, bytes] = {}


def _ffi_lowering() -> Callable:
    ffi: Any = getattr(jax, "ffi", None)
    if ffi is None or not hasattr(ffi, "ffi_lowering"):
        ffi = importlib.import_module("jax.extend.ffi")  # jax < 0.5 (by name: this jax's stubs do not have it)
    return ffi.ffi_lowering


def _lowering(
    ctx: Any, *operands: Any, opaque: bytes, out_avals: tuple, aliases: tuple, target: str, api_version: int
) -> Any:
    lower = _ffi_lowering()
    if api_version == 4:
        return lower(target, api_version=4, operand_output_aliases=dict(aliases))(ctx, *operands, opaque=opaque)
    return lower(target, api_version=api_version, backend_config=opaque, operand_output_aliases=dict(aliases))(
        ctx, *operands
    )


def _primitive() -> Any:
    global _prim
    if _prim is not None:
        return _prim
    primitive_type: Any
    try:
        from jax.extend.core import Primitive

        primitive_type = Primitive
    except ImportError:  # pragma: no cover - older jax (by name: this jax's stubs do not have it there)
        primitive_type = importlib.import_module("jax.core").Primitive
    from jax._src import core as jcore
    from jax.interpreters import mlir

    try:
        from jax._src.dispatch import apply_primitive
    except ImportError:  # pragma: no cover
        from jax.interpreters.xla import apply_primitive

    p = primitive_type("karchive_triton_call")
    p.multiple_results = True
    p.def_impl(functools.partial(apply_primitive, p))
    p.def_abstract_eval(lambda *avals, out_avals, **_: [jcore.ShapedArray(s, d) for s, d in out_avals])
    mlir.register_lowering(p, _lowering, platform="cuda")
    _prim = p
    return p


def triton_call(
    kernel: Any,
    *args: Any,
    out_shape: Any,
    grid: Any,
    input_output_aliases: Mapping[int, int] | None = None,
    zeroed_outputs: Any = (),
    out_names: Sequence[str] | None = None,
    name: str = "",
    mode: str = "auto",
    compute_capability: int | None = None,
    serialized_metadata: bytes = b"",
    **kwargs: Any,
) -> Any:
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

    plan = plan_call(
        kernel,
        args,
        kwargs,
        out_shape=out_shape,
        grid=grid,
        input_output_aliases=input_output_aliases,
        zeroed_outputs=zeroed_outputs,
        out_names=out_names,
        mode=mode,
        compute_capability=compute_capability,
        support=s,
        zeros=jnp.zeros,
    )
    key = (plan.desc, name or kernel.name, bytes(serialized_metadata))
    opaque = _opaque_cache.get(key)
    if opaque is None:
        opaque = encode(plan.desc, name or kernel.name, bytes(serialized_metadata), s)
        if len(_opaque_cache) > 1024:
            _opaque_cache.clear()
        _opaque_cache[key] = opaque
    results = _primitive().bind(
        *plan.operands,
        opaque=opaque,
        out_avals=tuple(plan.out_avals),
        aliases=tuple(sorted(plan.aliases.items())),
        target=s.target,
        api_version=s.api_version,
    )
    outs = [results[i] for i in plan.user_order]
    _flat, single = _jaxplan.flatten_outs(out_shape)
    return outs[0] if single else outs


def describe(kernel: Any, *args: Any, out_shape: Any, grid: Any, **kwargs: Any) -> KernelDesc:
    """The :class:`KernelDesc` a ``triton_call`` with these arguments would emit (arrays may be
    ``jax.ShapeDtypeStruct``); ``desc.path`` says "cubin" or "ptx"."""
    opts = {
        k: kwargs.pop(k)
        for k in ("input_output_aliases", "zeroed_outputs", "out_names", "mode", "compute_capability", "support")
        if k in kwargs
    }
    return plan_call(kernel, args, kwargs, out_shape=out_shape, grid=grid, **opts).desc
