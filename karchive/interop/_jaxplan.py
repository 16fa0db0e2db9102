"""Planning one ``triton_call``, step by step, on plain data (no JAX here: every step runs on a CPU host).

:func:`plan` runs the steps in order; each can be read and tested on its own:

1. :func:`resolve_outputs` - which pointer parameters receive the outputs (``out_names``, else the last
   pointer parameters) and which inputs are updated in place (``input_output_aliases``);
2. :func:`bind_arguments` - positional and keyword arguments onto the remaining parameters, constexprs
   apart; pointers must be arrays, scalars static numbers (they are baked into the call);
3. :func:`layout_buffers` - jaxlib hands XLA buffers to pointer parameters one by one, operands first,
   then results: trailing output pointers stay results, earlier ones become zero-filled operands
   aliased to their result;
4. :func:`select_variant` - the variant for the target compute capability, on archive metadata only;
5. :func:`launch_meta`, :func:`normalize_grid`, :func:`zero_bytes` - what depends on the chosen variant
   (grid and ``zeroed_outputs`` may be callables of it);
6. :func:`machine_code` - cubin or PTX path, and the archive members that go with it.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ..errors import ArgumentError, InteropError
from ..runtime.descriptors import TensorDescriptor
from ..runtime.device import DeviceInfo
from ..runtime.select import MISSING
from ._jaxdesc import Buffer, DescBuffer, KernelDesc, describe_variant
from ._roles import Role, kernel_roles

MODES = ("auto", "cubin", "ptx")


class JaxlibCaps(Protocol):
    """What planning needs to know of the installed jaxlib (``karchive.interop.jax.JaxlibSupport``)."""

    jaxlib_version: tuple[int, ...]
    notes: list[str]

    @property
    def accepts_cubin(self) -> bool: ...


@dataclass(frozen=True)
class Outputs:
    """The user's outputs and the kernel parameters that produce them."""

    shapes: tuple[Any, ...]  # anything with .shape and .dtype, in user order
    single: bool  # out_shape was one struct (return one array), not a list
    param_of: dict[str, int]  # output pointer parameter -> user output index (outputs not aliased)
    aliases: dict[int, int]  # input index -> user output index (input updated in place)


@dataclass(frozen=True)
class Binding:
    """The call's arguments, by parameter."""

    inputs: tuple[Role, ...]  # runtime parameters that are not output pointers, declaration order
    values: dict[str, Any]  # parameter name -> array, or static Python number for scalars
    constexprs: dict[str, Any]


@dataclass(frozen=True)
class BufferLayout:
    """Which XLA buffer feeds which pointer parameter, and which operands alias which results."""

    operand_params: tuple[str, ...]  # pointer parameters fed by operands, in buffer order
    result_params: tuple[str, ...]  # trailing output pointers, fed by results (buffers after the operands)
    materialized: tuple[str, ...]  # output pointers passed as zero-filled operands aliased to their result
    result_order: tuple[int, ...]  # custom-call result i is user output result_order[i]
    buffer_of: dict[str, int]  # pointer parameter -> buffer index
    operand_aliases: dict[int, int]  # operand index -> custom-call result index


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


#: Roles that take an array (an XLA buffer): pointers, and host tensor descriptors (decomposed variants only).
ARRAY_KINDS = ("pointer", "tensordesc")


def is_array(v: Any) -> bool:
    return hasattr(v, "shape") and hasattr(v, "dtype") and not isinstance(v, (bool, int, float, np.generic))


def flatten_outs(out_shape: Any) -> tuple[list[Any], bool]:
    """``out_shape`` as a list, and whether it was a single struct."""
    if hasattr(out_shape, "shape") and hasattr(out_shape, "dtype"):
        return [out_shape], True
    if isinstance(out_shape, (list, tuple)) and all(hasattr(o, "shape") and hasattr(o, "dtype") for o in out_shape):
        return list(out_shape), False
    raise ArgumentError(
        "out_shape must be a jax.ShapeDtypeStruct (or anything with .shape and .dtype), or a "
        f"list/tuple of them; got {type(out_shape).__name__}",
        kernel=None,
        param="out_shape",
    )


# -- 1. outputs ----------------------------------------------------------------------------------------
def resolve_outputs(
    kernel_name: str,
    roles: Sequence[Role],
    out_shape: Any,
    input_output_aliases: Mapping[int, int] | None,
    out_names: Sequence[str] | None,
) -> Outputs:
    """Give each output that is not aliased to an input a pointer parameter."""
    shapes, single = flatten_outs(out_shape)
    aliases = {int(i): int(o) for i, o in (input_output_aliases or {}).items()}
    if any(not 0 <= o < len(shapes) for o in aliases.values()) or len(set(aliases.values())) != len(aliases):
        raise ArgumentError(
            f"input_output_aliases {aliases} must map inputs to distinct outputs 0..{len(shapes) - 1}",
            kernel=kernel_name,
            param="input_output_aliases",
        )
    produced = [o for o in range(len(shapes)) if o not in aliases.values()]
    pointers = [r.name for r in roles if r.kind in ARRAY_KINDS]
    if out_names is None:
        k = len(produced)
        names = pointers[len(pointers) - k :] if k else []
        if len(names) != k:
            raise ArgumentError(
                f"{kernel_name}: {k} outputs but only {len(pointers)} pointer parameters",
                kernel=kernel_name,
                param="out_shape",
            )
    else:
        names = list(out_names)
        if len(names) != len(produced) or any(n not in pointers for n in names):
            raise ArgumentError(
                f"{kernel_name}: out_names {names} must name {len(produced)} pointer parameter(s) "
                f"(one per non-aliased output) among {pointers}",
                kernel=kernel_name,
                param="out_names",
            )
    return Outputs(tuple(shapes), single, dict(zip(names, produced)), aliases)


# -- 2. arguments --------------------------------------------------------------------------------------
def bind_arguments(
    kernel: Any, roles: Sequence[Role], outputs: Outputs, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> Binding:
    """Arguments onto the input parameters (declaration order, outputs left out); constexprs apart."""
    name = kernel.name

    def refuse(param: str | None, msg: str) -> ArgumentError:
        return ArgumentError(f"{name}: {msg}", kernel=name, param=param)

    inputs = tuple(r for r in roles if r.kind != "constexpr" and r.name not in outputs.param_of)
    if len(args) > len(inputs):
        raise refuse(
            None,
            f"takes {len(inputs)} inputs ({', '.join(r.name for r in inputs)}), got {len(args)} positional arguments",
        )
    values: dict[str, Any] = {r.name: a for r, a in zip(inputs, args)}
    constexprs: dict[str, Any] = {}
    input_names = {r.name for r in inputs}
    constexpr_names = {r.name for r in roles if r.kind == "constexpr"}
    for key, v in kwargs.items():
        if key in values:
            raise refuse(key, f"got two values for {key!r}")
        if key in input_names:
            values[key] = v
        elif key in constexpr_names:
            constexprs[key] = v
        else:
            raise refuse(key, f"unknown argument {key!r}; parameters: {', '.join(kernel.param_names)}")
    missing = [r.name for r in inputs if r.name not in values]
    if missing:
        raise refuse(missing[0], f"missing argument(s) {', '.join(missing)} (outputs are {list(outputs.param_of)})")
    binding = Binding(inputs, {r.name: _checked_value(name, r, values[r.name]) for r in inputs}, constexprs)
    _check_aliases(name, outputs, binding)
    return binding


def _checked_value(kernel_name: str, role: Role, v: Any) -> Any:
    """Arrays for pointers; static numbers for scalars (a concrete 0-d array counts as its number)."""

    def refuse(msg: str) -> ArgumentError:
        return ArgumentError(f"{kernel_name}: {msg}", kernel=kernel_name, param=role.name)

    if role.kind in ARRAY_KINDS:
        if not is_array(v):
            raise refuse(f"{role.name} is a {role.kind} parameter; pass an array, got {type(v).__name__}")
        return v
    if not is_array(v):
        return v
    if tuple(getattr(v, "shape", ())) != ():
        raise refuse(f"{role.name} is a scalar parameter; got an array")
    try:  # a concrete 0-d array is a number; a tracer is not (scalars are baked into the call)
        return v.item()
    except Exception:  # noqa: BLE001 - jax raises ConcretizationTypeError for tracers
        raise refuse(
            f"{role.name} must be a static Python number: scalars are baked into the custom call, "
            f"and inside jit this one is traced ({type(v).__name__})"
        ) from None


def _check_aliases(kernel_name: str, outputs: Outputs, binding: Binding) -> None:
    """Each aliased input is an array input with exactly its output's shape and dtype."""
    inputs = binding.inputs
    for i, o in outputs.aliases.items():
        if not 0 <= i < len(inputs) or inputs[i].kind not in ARRAY_KINDS:
            raise ArgumentError(
                f"{kernel_name}: input_output_aliases key {i} must index an array input "
                f"(inputs: {[r.name for r in inputs]})",
                kernel=kernel_name,
                param="input_output_aliases",
            )
        v, out = binding.values[inputs[i].name], outputs.shapes[o]
        if tuple(v.shape) != tuple(out.shape) or np.dtype(v.dtype) != np.dtype(out.dtype):
            raise ArgumentError(
                f"{kernel_name}: input {i} ({inputs[i].name}) is aliased to output {o} but has "
                f"shape/dtype {tuple(v.shape)}/{v.dtype}, output is {tuple(out.shape)}/{out.dtype}",
                kernel=kernel_name,
                param=inputs[i].name,
            )


# -- 3. buffers ----------------------------------------------------------------------------------------
def layout_buffers(pointer_names: Sequence[str], outputs: Outputs, input_names: Sequence[str]) -> BufferLayout:
    """Buffer order for jaxlib, which gives buffer k to the k-th pointer parameter: operands, then results.

    Output pointers at the end of the parameter list are results. An output pointer with an input
    pointer after it cannot be a result (its buffer would come too late), so it is passed as a
    zero-filled operand aliased to its result; so are inputs aliased by ``input_output_aliases``.
    """
    result_params: list[str] = []
    for n in reversed(pointer_names):
        if n not in outputs.param_of:
            break
        result_params.insert(0, n)
    materialized = [n for n in outputs.param_of if n not in result_params]
    operand_params = [n for n in pointer_names if n not in result_params]
    result_order = [outputs.param_of[n] for n in result_params] + sorted(
        set(outputs.aliases.values()) | {outputs.param_of[n] for n in materialized}
    )
    buffer_of = {n: i for i, n in enumerate(operand_params)}
    buffer_of.update({n: len(operand_params) + i for i, n in enumerate(result_params)})
    operand_aliases = {buffer_of[input_names[i]]: result_order.index(o) for i, o in outputs.aliases.items()}
    operand_aliases.update({buffer_of[n]: result_order.index(outputs.param_of[n]) for n in materialized})
    return BufferLayout(
        tuple(operand_params),
        tuple(result_params),
        tuple(materialized),
        tuple(result_order),
        buffer_of,
        operand_aliases,
    )


# -- 4. variant ----------------------------------------------------------------------------------------
class _Aval:
    """Stands in for an array during variant selection: dtype known, address 16-byte aligned (XLA's are)."""

    __slots__ = ("dtype",)

    def __init__(self, dtype: Any) -> None:
        self.dtype = np.dtype(dtype)

    def data_ptr(self) -> int:
        return 0

    def get_device(self) -> int:
        return 0


def _desc_aval(array: Any) -> TensorDescriptor:
    """Stands in for a descriptor over ``array`` during selection: its dtype and rank, the variant's block."""
    shape = tuple(int(s) for s in array.shape)
    strides = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):  # XLA buffers are dense row-major
        strides[i] = strides[i + 1] * shape[i + 1]
    return TensorDescriptor(_Aval(array.dtype), None, shape=shape, strides=strides, dtype=np.dtype(array.dtype))


def select_variant(
    kernel: Any, outputs: Outputs, binding: Binding, compute_capability: int, descriptors: frozenset[str] = frozenset()
) -> Any:
    """The variant the runtime would pick on a ``cuda:<cc>`` device for these dtypes, values and constexprs
    (``descriptors``: the tensor-descriptor parameters, whose arrays stand in as descriptors)."""
    named: dict[str, Any] = {}
    for pname in kernel.param_names:
        if pname in outputs.param_of:
            out = outputs.shapes[outputs.param_of[pname]]
            named[pname] = _desc_aval(out) if pname in descriptors else _Aval(out.dtype)
        elif pname in binding.values:
            v = binding.values[pname]
            named[pname] = (_desc_aval(v) if pname in descriptors else _Aval(v.dtype)) if is_array(v) else v
    device = DeviceInfo.describe_target(f"cuda:{int(compute_capability)}")
    return kernel.select(device=device, **named, **binding.constexprs)


# -- 5. what depends on the variant --------------------------------------------------------------------
def launch_meta(kernel: Any, binding: Binding, variant: Any) -> dict[str, Any]:
    """What ``grid`` and ``zeroed_outputs`` callables see: the arguments, the variant's constexprs and options."""
    return {
        **{n: binding.values[n] for n in kernel.param_names if n in binding.values},
        **variant.constexprs,
        "num_warps": variant.abi.num_warps,
        "num_ctas": variant.abi.num_ctas,
        "num_stages": variant.options.get("num_stages"),
    }


def normalize_grid(grid: Any, meta: Mapping[str, Any]) -> tuple[int, ...]:
    g = grid(meta) if callable(grid) else grid
    return (g,) if isinstance(g, int) else tuple(g)


def zero_bytes(
    zeroed_outputs: Any, meta: Mapping[str, Any], outputs: Outputs, binding: Binding, layout: BufferLayout
) -> dict[int, int]:
    """Buffer index -> bytes jaxlib zeroes before the launch (materialized outputs are zero-filled already)."""
    zero = zeroed_outputs(meta) if callable(zeroed_outputs) else zeroed_outputs
    out: dict[int, int] = {}
    for o in zero or ():
        if not 0 <= o < len(outputs.shapes):
            raise ArgumentError(f"zeroed_outputs: no output {o}", kernel=None, param="zeroed_outputs")
        shape = outputs.shapes[o]
        nbytes = int(np.prod(shape.shape, dtype=np.int64)) * np.dtype(shape.dtype).itemsize
        pname = next((n for n, j in outputs.param_of.items() if j == o), None)
        if pname is None:
            pname = next(binding.inputs[i].name for i, j in outputs.aliases.items() if j == o)
        if pname not in layout.materialized:
            out[layout.buffer_of[pname]] = nbytes
    return out


def call_values(variant: Any, layout: BufferLayout, binding: Binding, outputs: Outputs | None = None) -> list[Any]:
    """One entry per variant parameter: a :class:`Buffer` for pointers (a :class:`DescBuffer`, with the array's
    shape, for a tensor descriptor), the value for scalars."""
    out: list[Any] = []
    for p in variant.params:
        if p.name not in layout.buffer_of:
            out.append(binding.values.get(p.name, MISSING))
        elif p.type.startswith("tensordesc"):
            arr = (
                binding.values[p.name]
                if p.name in binding.values
                else outputs.shapes[outputs.param_of[p.name]]
                if outputs is not None
                else None
            )
            if arr is None:
                raise InteropError(f"{variant.kernel}: no shape known for descriptor {p.name} (internal error)")
            out.append(DescBuffer(layout.buffer_of[p.name], tuple(int(s) for s in arr.shape)))
        else:
            out.append(Buffer(layout.buffer_of[p.name]))
    return out


# -- 6. machine code -----------------------------------------------------------------------------------
_members: weakref.WeakKeyDictionary[Any, dict] = weakref.WeakKeyDictionary()


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


def machine_code(kernel: Any, variant: Any, mode: str, support: JaxlibCaps) -> tuple[str, str | None, bytes | None]:
    """``(path, ptx, cubin)``: "cubin" where jaxlib takes module images (``auto``) or when asked, else "ptx".

    On the cubin path the PTX rides along under ``auto`` (a jaxlib that ignores the image still works)
    and is left out under ``mode="cubin"`` (strict: nothing compiled at run time).
    """
    path = ("cubin" if support.accepts_cubin else "ptx") if mode == "auto" else mode
    if path == "cubin" and not support.accepts_cubin:
        jaxlib = ".".join(map(str, support.jaxlib_version))
        raise InteropError(
            f"mode='cubin': this jaxlib ({jaxlib}) does not accept precompiled module images "
            f"({'; '.join(support.notes) or 'no module_image field'}); use mode='ptx'"
        )
    ptx = None
    if not (path == "cubin" and mode == "cubin"):
        raw = _member(kernel, variant, "ptx")
        ptx = raw.decode("ascii", "replace") if raw else None
    cubin = _member(kernel, variant, "binary") if path == "cubin" else None
    return path, ptx, cubin


def operands(
    layout: BufferLayout, outputs: Outputs, binding: Binding, zeros: Callable[[tuple, Any], Any] | None
) -> list[Any]:
    """Operand arrays in buffer order; materialized outputs are ``zeros(shape, dtype)`` (or their struct)."""
    out = []
    for n in layout.operand_params:
        if n in layout.materialized:
            o = outputs.shapes[outputs.param_of[n]]
            out.append(zeros(tuple(o.shape), o.dtype) if zeros is not None else o)
        else:
            out.append(binding.values[n])
    return out


def refuse_tma_descriptors(kernel_name: str, variant: Any) -> None:
    """jaxlib's Triton custom call cannot pass a TMA host tensor descriptor: it fills the parameter buffer with
    XLA buffer addresses and scalars fixed at trace time, while a ``CUtensorMap`` must be encoded with the
    buffer's address, which exists only when XLA runs the call (jaxlib has no parameter kind that encodes one
    there). A *decomposed* descriptor (variants below sm_90: base pointer, shape and strides) is only a
    buffer and scalars, and goes through. Refused here, naming the parameter and what does work."""
    for p in variant.abi.params:
        if p.desc is not None and p.desc.mode == "tma":
            raise InteropError(
                f"{kernel_name}: parameter {p.name!r} is a host tensor descriptor ({p.type}) that variant "
                f"{variant.key[:12]} ({variant.abi.binary_arch}) takes as a TMA map; jaxlib's Triton custom call "
                "passes only buffer addresses and static scalars, and a CUtensorMap must be encoded with the "
                "buffer's address when XLA runs the kernel, which jaxlib cannot do. Outside jax.jit, launch it "
                "with karchive's runtime on JAX arrays: kernel[grid](karchive.TensorDescriptor(jax_array), ...); "
                "or through karchive.interop.torch"
            )


# -- all steps -----------------------------------------------------------------------------------------
def plan(
    kernel: Any,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    *,
    out_shape: Any,
    grid: Any,
    compute_capability: int,
    support: JaxlibCaps,
    input_output_aliases: Mapping[int, int] | None = None,
    zeroed_outputs: Any = (),
    out_names: Sequence[str] | None = None,
    mode: str = "auto",
    zeros: Callable[[tuple, Any], Any] | None = None,
) -> Plan:
    """Bind arguments, choose the variant, lay out buffers and build the :class:`KernelDesc` (no JAX tracing)."""
    if mode not in MODES:
        raise ArgumentError(
            f"mode must be 'auto', 'cubin' or 'ptx', got {mode!r}", kernel=getattr(kernel, "name", None), param="mode"
        )
    roles = kernel_roles(kernel)
    outputs = resolve_outputs(kernel.name, roles, out_shape, input_output_aliases, out_names)
    binding = bind_arguments(kernel, roles, outputs, args, kwargs)
    pointers = [r.name for r in roles if r.kind in ARRAY_KINDS]
    layout = layout_buffers(pointers, outputs, [r.name for r in binding.inputs])
    variant = select_variant(
        kernel, outputs, binding, compute_capability, frozenset(r.name for r in roles if r.kind == "tensordesc")
    )
    refuse_tma_descriptors(kernel.name, variant)
    meta = launch_meta(kernel, binding, variant)
    path, ptx, cubin = machine_code(kernel, variant, mode, support)
    desc = describe_variant(
        variant,
        call_values(variant, layout, binding, outputs),
        normalize_grid(grid, meta),
        compute_capability=compute_capability,
        zero_bytes=zero_bytes(zeroed_outputs, meta, outputs, binding, layout),
        path=path,
        ptx=ptx,
        cubin=cubin,
    )
    out_avals = [(tuple(outputs.shapes[o].shape), np.dtype(outputs.shapes[o].dtype)) for o in layout.result_order]
    return Plan(
        desc,
        operands(layout, outputs, binding, zeros),
        out_avals,
        layout.operand_aliases,
        [layout.result_order.index(o) for o in range(len(outputs.shapes))],
        [outputs.param_of[n] for n in layout.materialized],
        variant,
    )
