"""The kernel description jaxlib's Triton custom call needs, built from an archived variant (no JAX here).

jaxlib launches ``kernel_name`` from a module image with ``num_warps * 32`` threads, ``shared_mem_bytes``
of dynamic shared memory and a cluster of ``num_ctas`` along x, and fills the parameter buffer from
its ``parameters`` list: each *array* parameter takes the next XLA buffer (operands first, then
results), each *scalar* its stored value; then it appends two pointers, global scratch (allocated
when the kernel has a size) and profile scratch (always NULL). This module maps a variant's launch
ABI (spec/FORMAT.md §6.2) onto that and refuses what jaxlib cannot express, with a reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Union

from ..errors import ArgumentError, InteropError
from ..format.manifest import Variant

#: Triton scalar types jaxlib's ``create_scalar_parameter`` takes, by the name it expects.
JAXLIB_SCALARS = {
    "i1": "i1",
    "u1": "i1",
    "i32": "i32",
    "u32": "u32",
    "i64": "i64",
    "u64": "u64",
    "fp32": "fp32",
    "fp64": "fp64",
}


@dataclass(frozen=True)
class Buffer:
    """A pointer parameter fed by XLA buffer ``index`` (operands first, then results)."""

    index: int


@dataclass(frozen=True)
class DescBuffer(Buffer):
    """A host tensor-descriptor parameter over XLA buffer ``index``, a dense row-major array of ``shape``."""

    shape: tuple[int, ...] = ()


@dataclass(frozen=True)
class ArrayParam:
    name: str
    buffer: int
    divisibility: int  # 16 or 0: jaxlib checks the address at launch
    bytes_to_zero: int  # jaxlib memsets this many bytes before the launch


@dataclass(frozen=True)
class ScalarParam:
    name: str
    dtype: str  # jaxlib's name: i1, i32, u32, i64, u64, fp32, fp64
    value: Union[bool, int, float]


Param = Union[ArrayParam, ScalarParam]


@dataclass(frozen=True)
class KernelDesc:
    """Everything that goes into one ``TritonKernelCall``; ``path`` says how jaxlib gets machine code."""

    variant_key: str
    kernel_name: str  # the binary's entry symbol
    num_warps: int
    num_ctas: int
    shared_mem_bytes: int
    compute_capability: int
    grid: tuple[int, int, int]
    params: tuple[Param, ...]
    global_scratch: tuple[int, int] | None  # (bytes per program, alignment) when the kernel needs it
    path: str  # "cubin" (precompiled module image) or "ptx" (jaxlib runs ptxas)
    ptx: str  # PTX text; for the cubin path a marker when the archive has no PTX (or when strict)
    cubin: bytes | None

    @property
    def n_buffers(self) -> int:
        return sum(1 for p in self.params if isinstance(p, ArrayParam))


def marker_ptx(variant: Variant) -> str:
    """Stands in for PTX on the cubin path; jaxlib keys its module cache on (name, shared, ptx, cc),
    so the text must differ between variants that share an entry name."""
    return f"// karchive: precompiled module image of variant {variant.key} (no PTX)\n"


def _scalar(variant: Variant, name: str, typ: str, value: Any) -> ScalarParam:
    dtype = JAXLIB_SCALARS.get(typ)
    if dtype is None:
        raise InteropError(
            f"{variant.kernel}: scalar parameter {name!r} has type {typ}, which jaxlib's Triton custom call "
            f"cannot pass (it takes {', '.join(sorted(set(JAXLIB_SCALARS)))}); rebuild the kernel with a wider "
            "type for this argument or launch it with karchive's runtime"
        )
    if hasattr(value, "shape") and hasattr(value, "dtype") and getattr(value, "shape", ()) != ():
        raise ArgumentError(
            f"{variant.kernel}: {name} is a scalar ({typ}); got an array", kernel=variant.kernel, param=name
        )
    try:
        if dtype == "i1":
            return ScalarParam(name, dtype, bool(value))
        if dtype in ("fp32", "fp64"):
            return ScalarParam(name, dtype, float(value))
        return ScalarParam(name, dtype, int(value))
    except Exception as exc:  # noqa: BLE001 - tracers and odd objects
        raise ArgumentError(
            f"{variant.kernel}: scalar parameter {name!r} ({typ}) must be a static Python number when called "
            f"through JAX (it is baked into the kernel call); got {type(value).__name__}: {exc}",
            kernel=variant.kernel,
            param=name,
        ) from None


def _check_buffer(variant: Variant, p: Any, value: Any, kind: type[Buffer], next_buffer: int) -> None:
    """An array parameter's value is one of jaxlib's buffers (``kind``), and the next one jaxlib hands out."""
    if not isinstance(value, kind):
        raise ArgumentError(
            f"{variant.kernel}: {p.name} ({p.type}) needs an array, got {type(value).__name__}",
            kernel=variant.kernel,
            param=p.name,
        )
    if value.index != next_buffer:
        raise InteropError(
            f"{variant.kernel}: {p.name} would take XLA buffer {value.index} but jaxlib hands out "
            f"buffer {next_buffer} next (internal ordering error)"
        )


def _descriptor(
    variant: Variant, p: Any, value: Any, next_buffer: int, zero_bytes: dict[int, int], params: list[Param]
) -> int:
    """A decomposed host tensor descriptor as jaxlib parameters: its buffer, then the scalars the variant's
    convention lists after the base pointer (shape and strides as i64, the NaN-padding flag, under
    ``triton-3.8`` the TF32 flag, shape as i32 and strides again; spec/FORMAT.md §6.2.1). Zero padding and
    no TF32 rounding: the array is passed as it is. A TMA descriptor cannot be passed (see
    ``_jaxplan.refuse_tma_descriptors``)."""
    d = p.desc
    if d is None or d.mode != "decomposed":
        raise InteropError(
            f"{variant.kernel}: {p.name} is a TMA tensor descriptor; jaxlib's Triton custom call "
            "cannot encode its CUtensorMap"
        )
    _check_buffer(variant, p, value, DescBuffer, next_buffer)
    if len(value.shape) != d.rank:
        raise ArgumentError(
            f"{variant.kernel}: {p.name} takes a rank-{d.rank} array, got shape {value.shape}",
            kernel=variant.kernel,
            param=p.name,
        )
    shape = list(value.shape)
    strides = [1] * d.rank
    for i in range(d.rank - 2, -1, -1):
        strides[i] = strides[i + 1] * shape[i + 1]
    flags = [0] if d.convention == "triton-3.5" else [0, 0]  # padding "zero"; round_f32_to_tf32 off
    scalars = [*shape, *strides, *flags, *shape, *strides]
    slots = d.slots[1:]
    assert len(slots) == len(scalars)
    params.append(ArrayParam(p.name, value.index, 16, int(zero_bytes.get(value.index, 0))))
    for i, (slot, v) in enumerate(zip(slots, scalars)):
        params.append(_scalar(variant, f"{p.name}[{i + 1}]", slot, v))
    return next_buffer + 1


def describe_variant(
    variant: Variant,
    values: Sequence[Any],
    grid: Sequence[int],
    *,
    compute_capability: int,
    zero_bytes: dict[int, int] | None = None,
    path: str,
    ptx: str | None,
    cubin: bytes | None,
) -> KernelDesc:
    """Map ``variant``'s launch ABI onto jaxlib's parameter list.

    ``values`` holds one entry per ``variant.params`` (call order): a :class:`Buffer` for pointers,
    the Python value for scalars, anything for constexprs (not passed). ``zero_bytes`` maps a buffer
    index to the bytes jaxlib zeroes before the launch. Buffers must be consumed in order 0, 1, 2, ...
    because jaxlib hands them to array parameters one after the other.
    """
    abi = variant.abi
    if variant.target.backend != "cuda" or abi.binary_format != "cubin":
        raise InteropError(
            f"{variant.kernel}: variant {variant.key[:12]} targets {variant.target}; karchive's JAX "
            "bridge launches CUDA variants only (jaxlib's ROCm path wants an hsaco file path)"
        )
    if abi.warp_size != 32:
        raise InteropError(f"{variant.kernel}: warp size {abi.warp_size}; jaxlib launches num_warps * 32 threads")
    if abi.cooperative_grid or abi.pdl:
        raise InteropError(
            f"{variant.kernel}: variant {variant.key[:12]} needs a cooperative or PDL launch, "
            "which jaxlib's Triton custom call does not make"
        )
    cx, cy, cz = abi.cluster_dims
    if (cy, cz) != (1, 1):
        raise InteropError(f"{variant.kernel}: cluster {abi.cluster_dims}; jaxlib launches clusters along x only")
    # jaxlib multiplies grid x by num_ctas and sets a (num_ctas, 1, 1) cluster when num_ctas > 1: the
    # ABI's cluster x is exactly that (1 when the binary is launched without a cluster attribute).
    jax_ctas = cx
    if abi.global_scratch_size and jax_ctas != abi.num_ctas:
        raise InteropError(
            f"{variant.kernel}: num_ctas={abi.num_ctas} with cluster {abi.cluster_dims} and global "
            "scratch: jaxlib would size the scratch buffer differently from Triton"
        )
    if abi.profile_scratch_size:
        raise InteropError(
            f"{variant.kernel}: the variant needs {abi.profile_scratch_size} bytes of profile "
            "scratch per program (built with instrumentation); jaxlib passes NULL there"
        )
    zero_bytes = zero_bytes or {}
    params: list[Param] = []
    next_buffer = 0
    kinds = [p.kind for p in abi.params]
    n_user = len([k for k in kinds if k in ("pointer", "scalar", "tensordesc")])
    tail = kinds[n_user:]
    if sum(kinds[:n_user].count(k) for k in ("pointer", "scalar", "tensordesc")) != n_user or tail not in (
        [],
        ["global_scratch"],
        ["global_scratch", "profile_scratch"],
    ):
        raise InteropError(
            f"{variant.kernel}: launch ABI parameters {kinds} do not end in "
            "[global_scratch, profile_scratch] as jaxlib appends them"
        )
    for p in abi.params[:n_user]:
        if p.arg is None or p.type is None:  # only scratch parameters lack them (checked above)
            raise InteropError(f"{variant.kernel}: launch ABI parameter {p.name} has no argument index or type")
        value = values[p.arg]
        if p.kind == "tensordesc":
            next_buffer = _descriptor(variant, p, value, next_buffer, zero_bytes, params)
        elif p.kind == "pointer":
            _check_buffer(variant, p, value, Buffer, next_buffer)
            next_buffer += 1
            div = 16 if variant.params[p.arg].divisibility == 16 else 0
            params.append(ArrayParam(p.name, value.index, div, int(zero_bytes.get(value.index, 0))))
        else:
            params.append(_scalar(variant, p.name, p.type, value))
    scratch = None
    if abi.global_scratch_size:
        scratch = (abi.global_scratch_size, max(abi.global_scratch_align, 1))
    g = tuple(int(x) for x in grid) + (1,) * (3 - len(grid))
    if len(g) != 3 or any(x < 0 or x >= 1 << 31 for x in g):
        raise ArgumentError(
            f"{variant.kernel}: grid {tuple(grid)!r} must have 1 to 3 non-negative dimensions",
            kernel=variant.kernel,
            param="grid",
        )
    if path == "ptx" and not ptx:
        raise InteropError(
            f"{variant.kernel}: the PTX path needs the variant's PTX, and the archive has none "
            "(built with --no-ir / include_ir = false)"
        )
    if path == "cubin" and cubin is None:
        raise InteropError(f"{variant.kernel}: the cubin path needs the variant's binary")
    return KernelDesc(
        variant_key=variant.key,
        kernel_name=abi.entry,
        num_warps=abi.num_warps,
        num_ctas=jax_ctas,
        shared_mem_bytes=abi.shared,
        compute_capability=int(compute_capability),
        grid=g,
        params=tuple(params),
        global_scratch=scratch,
        path=path,
        ptx=ptx if ptx else marker_ptx(variant),
        cubin=cubin,
    )
