"""Compile targets: ``cuda:90``, ``cuda:80``, ``hip:gfx942`` (optionally ``:warp_size``)."""

from __future__ import annotations

import re

from ..errors import TargetError
from ..format.manifest import Target

_CUDA_ARCH = re.compile(r"^(?:sm_?)?(\d{2,3})$")
_HIP_ARCH = re.compile(r"^gfx[0-9a-f]{3,5}$")
#: CDNA (gfx9xx) runs 64-wide wavefronts; RDNA (gfx10xx and newer) 32-wide.
_HIP_WAVE32_PREFIXES = ("gfx10", "gfx11", "gfx12")


def parse_target(text: str) -> Target:
    """Parse ``backend:arch[:warp_size]``; the error lists the accepted forms."""
    parts = [p.strip() for p in str(text).split(":")]
    if len(parts) not in (2, 3) or not all(parts):
        raise TargetError(f"bad target {text!r}: expected 'cuda:<sm>' (e.g. cuda:90) or 'hip:<gfx>' (e.g. hip:gfx942)")
    backend, arch = parts[0].lower(), parts[1].lower()
    if backend == "cuda":
        m = _CUDA_ARCH.fullmatch(arch)
        if not m:
            raise TargetError(f"bad CUDA arch in {text!r}: expected a compute capability such as 80, 86, 90, 100")
        arch = m.group(1)
        default_warp = 32
    elif backend in ("hip", "rocm", "amd"):
        backend = "hip"
        if not _HIP_ARCH.fullmatch(arch):
            raise TargetError(f"bad HIP arch in {text!r}: expected a gfx name such as gfx942 or gfx90a")
        default_warp = 32 if arch.startswith(_HIP_WAVE32_PREFIXES) else 64
    else:
        raise TargetError(f"unknown backend {parts[0]!r} in target {text!r}: known backends are 'cuda' and 'hip'")
    warp = default_warp
    if len(parts) == 3:
        if not parts[2].isdigit() or int(parts[2]) not in (32, 64):
            raise TargetError(f"bad warp size in {text!r}: 32 or 64")
        warp = int(parts[2])
    return Target(backend, arch, warp)


def binary_arch(target: Target) -> str:
    """The architecture the binary is built for, as Triton chooses it (sm_90a for cc >= 90)."""
    if target.backend == "cuda":
        cap = int(target.arch)
        return f"sm_{cap}a" if cap >= 90 else f"sm_{cap}"
    return target.arch
