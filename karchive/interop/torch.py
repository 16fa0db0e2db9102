"""Expose an archived kernel as a ``torch.library`` custom op (torch.compile and CUDA graphs friendly).

    import karchive, karchive.interop.torch as kt
    add = kt.custom_op("mylib::add", karchive.open("examples.karc").kernel("add_kernel"),
                       out={"out_ptr": "x_ptr"},                      # allocated output, shaped like x_ptr
                       grid=lambda m: (triton.cdiv(m["n_elements"], m["BLOCK"]),),
                       constexprs={"BLOCK": 1024})
    z = add(x, y, x.numel())                                          # op(x_ptr, y_ptr, n_elements) -> Tensor

The op's arguments are the kernel's non-constexpr parameters in declaration order, minus those listed
in ``out`` (allocated by the op and returned: one Tensor, a tuple, or None when there are none).
Parameters in ``mutates_args`` are tensors the caller passes and the kernel writes in place; torch is
told so (``Tensor(a!)`` in the schema), which keeps functionalization, torch.compile and CUDA graphs
correct. Pointer parameters become ``Tensor``, integers ``SymInt``, floats ``float``, ``i1`` ``bool``.

Host tensor-descriptor parameters (``tensordesc<...>``, TMA kernels) are ``Tensor`` too: the op wraps the
tensor in a ``karchive.TensorDescriptor`` at each launch, with the block of the variant it launches unless
``descriptors`` says otherwise (``descriptors={"a_desc": [128, 64]}``: a block shape, or a dict of
``TensorDescriptor`` options: ``block_shape``, ``padding``, ``round_f32_to_tf32`` and, for im2col
parameters, ``pixel_box_lower_corner``, ``pixel_box_upper_corner``, ``element_strides``). They can be
outputs (``out``) and mutated arguments like pointers.

Why a custom op: Dynamo cannot trace into karchive's launcher, so a plain call would break the graph.
As a custom op with a fake implementation (allocation only, works on meta/fake tensors) the call is
one opaque node: ``torch.compile(fullgraph=True)`` compiles around it, and at run time the real
implementation launches on torch's current stream (so it is captured by ``torch.cuda.graph`` and
Inductor's CUDA graphs). Launch the op once before capturing: the first launch loads the module.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Union, cast

import torch

from ..errors import ArgumentError
from ..format.names import is_param_name
from ..runtime.descriptors import TensorDescriptor
from ..runtime.select import MISSING
from ._roles import descriptor_options, kernel_roles

__all__ = ["custom_op", "current_raw_stream"]

#: ``(arguments by name) -> (shape, dtype)``, or the name of an input tensor parameter to copy both from.
OutSpec = Union[str, Callable[[dict], tuple]]

_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
_ANNOTATION = {"pointer": torch.Tensor, "int": int, "float": float, "bool": bool, "tensordesc": torch.Tensor}


def current_raw_stream(t: torch.Tensor) -> int | None:
    """torch's current stream on ``t``'s device as a raw ``CUstream`` value (None for CPU tensors).

    ``torch._C._cuda_getCurrentRawStream(index)`` skips building a ``torch.cuda.Stream`` object
    (``torch.cuda.current_stream().cuda_stream`` costs several microseconds per call).
    """
    dev = t.device
    if dev.type != "cuda":
        return None
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    if _raw_stream is not None:
        return _raw_stream(index)
    return torch.cuda.current_stream(index).cuda_stream


def _normalise_out(out: Any) -> dict[str, OutSpec | None]:
    """``None`` specs mean "shaped like the first tensor input"."""
    if out is None:
        return {}
    if isinstance(out, str):
        return {out: None}
    if isinstance(out, Mapping):
        return dict(out)
    if isinstance(out, (list, tuple)) and all(isinstance(o, str) for o in out):
        return {o: None for o in out}
    raise ArgumentError(
        f"out must be a parameter name, a list of names or a mapping name -> spec; got {out!r}",
        kernel=None,
        param="out",
    )


def custom_op(
    name: str,
    kernel: Any,
    *,
    grid: Any,
    out: Any = None,
    mutates_args: Sequence[str] = (),
    constexprs: Mapping[str, Any] | None = None,
    zeroed: Sequence[str] = (),
    device_types: str | Sequence[str] | None = "cuda",
    descriptors: Any = None,
) -> Any:
    """Register ``kernel`` as the custom op ``name`` ("namespace::op") and return it (a ``CustomOpDef``).

    - ``grid``: a tuple, or ``meta -> tuple`` with ``meta`` = the arguments by name (outputs included)
      plus the chosen variant's constexprs and ``num_warps``/``num_stages``/``num_ctas``.
    - ``out``: outputs the op allocates and returns: ``"out_ptr"`` (shaped like the first tensor
      input), a list of names, or ``{name: spec}`` with spec an input name or ``args -> (shape, dtype)``.
    - ``mutates_args``: input tensor parameters the kernel writes (caller-provided outputs, in-place).
    - ``constexprs``: fixed compile-time values (e.g. ``{"BLOCK": 1024}``) used to pick the variant.
    - ``zeroed``: outputs allocated with zeros instead of uninitialised memory (atomics, partial writes).
    - ``descriptors``: per tensor-descriptor parameter, its block shape or ``TensorDescriptor`` options (the
      op passes that parameter's tensor as a ``karchive.TensorDescriptor``; by default with the block of the
      variant it launches).
    """

    def bad(param: str | None, msg: str) -> ArgumentError:
        return ArgumentError(f"{kernel.name}: {msg}", kernel=kernel.name, param=param)

    roles = kernel_roles(kernel)
    by_name = {r.name: r for r in roles}
    constexprs = dict(constexprs or {})
    for k in constexprs:
        if k not in by_name:
            raise bad(k, f"constexprs names unknown parameter {k!r}")
        if by_name[k].kind != "constexpr":
            raise bad(k, f"{k!r} is a runtime parameter, not a constexpr")
    runtime = [r for r in roles if r.kind != "constexpr"]
    pointer_names = [r.name for r in runtime if r.kind in ("pointer", "tensordesc")]  # tensors to the op
    desc_options = descriptor_options(kernel.name, [r.name for r in runtime if r.kind == "tensordesc"], descriptors)
    outs = _normalise_out(out)
    for o in outs:
        if o not in pointer_names:
            raise bad(o, f"out names {o!r}, which is not a pointer or tensor-descriptor parameter ({pointer_names})")
    inputs = [r for r in runtime if r.name not in outs]
    in_names = [r.name for r in inputs]
    tensor_inputs = [r.name for r in inputs if r.kind in ("pointer", "tensordesc")]
    outs = {o: tensor_inputs[0] if spec is None and tensor_inputs else spec for o, spec in outs.items()}
    for o, spec in outs.items():
        if (
            spec is None
            or (isinstance(spec, str) and spec not in tensor_inputs)
            or not (isinstance(spec, str) or callable(spec))
        ):
            raise bad(
                o,
                f"output {o!r}: spec must name an input tensor parameter "
                f"({tensor_inputs}) or be a callable args -> (shape, dtype); got {spec!r}",
            )
    mutates = tuple(mutates_args)
    for m in mutates:
        if m not in tensor_inputs:
            raise bad(
                m,
                f"mutates_args names {m!r}, which is not an input tensor parameter "
                f"({tensor_inputs}; allocated outputs are not mutated arguments)",
            )
    for z in zeroed:
        if z not in outs:
            raise bad(z, f"zeroed names {z!r}, which is not an output ({list(outs)})")
    if not tensor_inputs:
        raise bad(None, "the op needs at least one tensor input to know its device")
    zeroed_set = frozenset(zeroed)
    out_items = list(outs.items())
    template = [constexprs.get(n, MISSING) for n in kernel.param_names]
    slot = {n: i for i, n in enumerate(kernel.param_names)}
    in_slots = [slot[n] for n in in_names]
    out_slots = [slot[o] for o, _ in out_items]
    first_tensor = in_names.index(tensor_inputs[0])
    # the slots of descriptor parameters, with their options: the tensor there is wrapped at each launch
    wrap = {slot[n]: opts for n, opts in desc_options.items()}

    def allocate(args: Sequence[Any]) -> list[torch.Tensor]:
        named = dict(zip(in_names, args))
        like = args[first_tensor]
        result = []
        for o, spec in out_items:
            if isinstance(spec, str):
                shape, dtype = named[spec].shape, named[spec].dtype
            else:  # a callable: checked when the op was made
                shape, dtype = cast(Callable[[dict], tuple], spec)(named)
            make = torch.zeros if o in zeroed_set else torch.empty
            result.append(make(tuple(shape), dtype=dtype, device=like.device))
        return result

    def launch(args: Sequence[Any]) -> list[torch.Tensor]:
        allocated = allocate(args)
        values = list(template)
        for i, a in zip(in_slots, args):
            values[i] = a
        for i, t in zip(out_slots, allocated):
            values[i] = t
        for i, opts in wrap.items():
            values[i] = TensorDescriptor(values[i], **opts)
        kernel[grid](*values, stream=current_raw_stream(args[first_tensor]))
        return allocated

    impl = _make_fn(name, inputs, len(out_items), launch)
    fake = _make_fn(name, inputs, len(out_items), allocate)
    op = torch.library.custom_op(name, impl, mutates_args=mutates, device_types=device_types)
    op.register_fake(fake)
    return op


def _make_fn(name: str, inputs: Sequence[Any], n_out: int, body: Callable[[tuple], list]) -> Callable:
    """A function with the op's real signature (names and annotations), for torch's schema inference.

    The signature is an :class:`inspect.Signature` made of the parameter names, never source text: a name
    is only ever a name. The archive's model already refuses any that is not a parameter name
    (:func:`karchive.format.names.is_param_name`); a kernel-like object from elsewhere gets the same rule here,
    as an :class:`ArgumentError`.
    """
    bad = next((r.name for r in inputs if not is_param_name(r.name)), None)
    if bad is not None or len({r.name for r in inputs}) != len(inputs):
        raise ArgumentError(
            f"{name}: the kernel's parameters cannot be a Python signature: "
            f"{'not a parameter name: ' + ascii(bad)[:80] if bad is not None else 'a name twice'}",
            kernel=None,
            param=bad,
        )
    P = inspect.Parameter
    params = [P(r.name, P.POSITIONAL_OR_KEYWORD, annotation=_ANNOTATION[r.kind]) for r in inputs]
    returns: Any = (
        None if n_out == 0 else torch.Tensor if n_out == 1 else tuple.__class_getitem__((torch.Tensor,) * n_out)
    )
    sig = inspect.Signature(params, return_annotation=returns)
    n = len(params)
    bind = sig.bind

    def op(*args: Any, **kwargs: Any) -> Any:
        if kwargs or len(args) != n:  # torch calls by position; anyone else binds as Python would
            bound = bind(*args, **kwargs)
            args = tuple(bound.arguments[p.name] for p in params)
        out = body(args)
        return None if n_out == 0 else out[0] if n_out == 1 else tuple(out)

    op.__signature__ = sig  # type: ignore[attr-defined]
    op.__name__ = op.__qualname__ = name.split("::")[-1]
    op.__module__ = __name__
    return op
