"""Record how each host tensor-descriptor parameter expands into binary parameters (launch ABI v2).

Triton's compile metadata says, per descriptor parameter in order, whether it was lowered to TMA
(``tensordesc_meta``: swizzle, element size and type, the compiled block, ``fp4_padded``, im2col) or left
to the decomposed expansion (no metadata). Which parameters that becomes depends on the compiling Triton's
release (:mod:`karchive.format.tensordesc`): the producer names that convention here, once, and the
entry-point check in :func:`karchive.producer.compile.describe.build_abi` confirms it against the PTX.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ...core.grammar import whole
from ...errors import UnsupportedKernelError
from ...format.manifest import AbiParam
from ...format.tensordesc import (
    CONVENTIONS,
    TensorDescAbi,
    convention_for_triton,
    parse_tensordesc_type,
    slot_size,
)

__all__ = ["binary_param_sizes", "bind_descriptor_blocks", "tensordesc_records"]


def _triton_version(metadata: dict) -> str:
    version = metadata.get("triton_version")
    if version:
        return str(version)
    try:  # a compile result of the running Triton (older metadata does not carry the version)
        import triton

        return str(triton.__version__)
    except Exception:  # noqa: BLE001 - no Triton here: the version stays unknown
        return ""


def tensordesc_records(
    kernel: str, param_names: Sequence[str], param_types: dict[str, Any], metadata: dict
) -> dict[str, TensorDescAbi]:
    """Per descriptor parameter name, its expansion record; {} for a kernel without descriptors.

    Refuses (:class:`UnsupportedKernelError`) what karchive cannot launch correctly: a Triton release whose
    convention it has not read, descriptors on a backend other than CUDA, metadata that does not line up.
    """

    def refuse(msg: str) -> UnsupportedKernelError:
        return UnsupportedKernelError(f"{kernel}: {msg}", kernel=kernel)

    names = [n for n in param_names if str(param_types[n]).startswith("tensordesc")]
    if not names:
        if metadata.get("tensordesc_meta"):
            raise refuse("tensor-descriptor metadata but no tensordesc parameter")
        return {}
    target = metadata.get("target")
    backend = target.get("backend") if isinstance(target, dict) else getattr(target, "backend", None)
    if backend != "cuda":
        raise refuse(f"host tensor descriptors are recorded for CUDA only, not {backend}")
    version = _triton_version(metadata)
    convention = convention_for_triton(version)
    if convention is None:
        known = "; ".join(f"{c}: Triton {', '.join(m)}" for c, m in CONVENTIONS.items())
        raise refuse(
            f"karchive does not know how Triton {version or '(unknown version)'} passes host tensor "
            f"descriptors to the binary (known conventions: {known}); refusing to record a launch it cannot "
            "describe"
        )
    metas = metadata.get("tensordesc_meta") or []
    if metas and len(metas) != len(names):
        raise refuse(f"{len(metas)} tensor-descriptor metadata records for {len(names)} descriptor parameters")
    out: dict[str, TensorDescAbi] = {}
    for i, name in enumerate(names):
        parsed = parse_tensordesc_type(str(param_types[name]))
        if parsed is None:
            raise refuse(f"cannot read descriptor type {param_types[name]!r} of {name!r}")
        if not metas:  # below sm_90 (or TMA off): Triton's decomposed expansion
            out[name] = TensorDescAbi(convention, "decomposed", parsed.dtype, parsed.rank, parsed.block_shape)
            continue
        meta = dict(metas[i])
        im2col = bool(meta.get("is_im2col", False))
        out[name] = TensorDescAbi(
            convention,
            "tma",
            parsed.dtype,
            parsed.rank,
            tuple(int(b) for b in meta.get("block_size") or parsed.block_shape),
            swizzle=int(meta["swizzle"]),
            elem_size=int(meta["elem_size"]),
            elem_type=int(meta["elem_type"]),
            fp4_padded=bool(meta.get("fp4_padded", False)),
            im2col=im2col,
        )
    return out


def binary_param_sizes(params: Sequence[AbiParam]) -> list[int]:
    """The byte size of every binary parameter the ABI's user parameters become, in order."""
    sizes: list[int] = []
    for p in params:
        if p.desc is not None:
            sizes.extend(slot_size(s) for s in p.desc.slots)
        else:
            sizes.append(p.size)
    return sizes


_BLOCK_RE = re.compile(r"(tensordesc(?:_im2col)?<[a-z][a-z0-9]*\[)([^\]]*)(\].*>)")


def bind_descriptor_blocks(types: dict[str, str], constexprs: dict[str, Any], kernel: str = "kernel") -> dict[str, str]:
    """A build spec may name a descriptor's block by constexprs (``tensordesc<fp16[BLOCK_M, BLOCK_K]>``), as
    an autotune ``pre_hook`` sets it per config: each name becomes that variant's value (what Triton's JIT
    sees after the hook), so every config of an autotuned descriptor kernel builds from one signature."""
    out = dict(types)
    for name, typ in types.items():
        m = whole(_BLOCK_RE, str(typ).strip())
        if not m or all(part.strip().isdigit() for part in m.group(2).split(",")):
            continue
        dims = []
        for part in m.group(2).split(","):
            part = part.strip()
            if part.isdigit():
                dims.append(part)
                continue
            value = constexprs.get(part)
            if type(value) is not int:
                raise UnsupportedKernelError(
                    f"{kernel}: descriptor {name!r} names block dimension {part!r}, which is not an int constexpr "
                    f"of this variant (constexprs: {sorted(constexprs)})",
                    kernel=kernel,
                )
            dims.append(str(value))
        out[name] = f"{m.group(1)}{', '.join(dims)}{m.group(3)}"
    return out
