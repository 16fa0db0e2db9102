"""Compile targets: ``cuda:90``, ``cuda:80``, ``hip:gfx942`` (optionally ``:warp_size``).

A format-level concept: the producer builds for a target, a variant records it, and the runtime
matches it against a device, possibly on a machine with no GPU (``Kernel.select(..., device="cuda:90")``).
Parsing is therefore here, below producer and runtime, and needs no compiler.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..errors import SchemaError, TargetError
from ._fields import req as _req

_CUDA_ARCH = re.compile(r"(?:sm_?)?(\d{2,3})")
_HIP_ARCH = re.compile(r"gfx[0-9a-f]{3,5}")
#: CDNA (gfx9xx) runs 64-wide wavefronts; RDNA (gfx10xx and newer) 32-wide.
_HIP_WAVE32_PREFIXES = ("gfx10", "gfx11", "gfx12")
BACKENDS = ("cuda", "hip")
FORMS = "'cuda:<compute capability>' (e.g. cuda:90) or 'hip:<gfx arch>' (e.g. hip:gfx942), optionally ':<warp size>'"


def _suggestion(raw: str) -> str:
    """``; did you mean 'hip:gfx942'?`` for a bare arch (``gfx942``, ``sm_90``, ``90``), else ''."""
    bare = raw.strip().lower()
    if _HIP_ARCH.fullmatch(bare):
        return f"; did you mean 'hip:{bare}'?"
    m = _CUDA_ARCH.fullmatch(bare)
    if m:
        return f"; did you mean 'cuda:{m.group(1)}'?"
    return ""


@dataclass(frozen=True)
class Target:
    backend: str  # "cuda" | "hip"
    arch: str  # "90", "80", "gfx942"
    warp_size: int

    def __str__(self) -> str:
        return f"{self.backend}:{self.arch}"

    @classmethod
    def parse(cls, text: str) -> Target:
        """Parse ``backend:arch[:warp_size]``; the error lists the accepted forms."""
        raw = str(text)
        parts = [p.strip() for p in raw.split(":")]
        if len(parts) not in (2, 3) or not all(parts):
            raise TargetError(f"bad target {raw!r}: expected {FORMS}{_suggestion(raw)}", target=raw)
        backend, arch = parts[0].lower(), parts[1].lower()
        if backend == "cuda":
            m = _CUDA_ARCH.fullmatch(arch)
            if not m:
                raise TargetError(
                    f"bad CUDA arch in {raw!r}: expected a compute capability such as 80, 86, 90, 100", target=raw
                )
            arch = m.group(1)
            default_warp = 32
        elif backend == "hip":
            if not _HIP_ARCH.fullmatch(arch):
                raise TargetError(f"bad HIP arch in {raw!r}: expected a gfx name such as gfx942 or gfx90a", target=raw)
            default_warp = 32 if arch.startswith(_HIP_WAVE32_PREFIXES) else 64
        elif backend in ("rocm", "amd"):
            raise TargetError(
                f"unknown backend {parts[0]!r} in target {raw!r}: AMD targets are spelled 'hip:{arch}'", target=raw
            )
        else:
            raise TargetError(f"unknown backend {parts[0]!r} in target {raw!r}: expected {FORMS}", target=raw)
        warp = default_warp
        if len(parts) == 3:
            if not parts[2].isdigit() or int(parts[2]) not in (32, 64):
                raise TargetError(f"bad warp size in {raw!r}: 32 or 64", target=raw)
            warp = int(parts[2])
        return cls(backend, arch, warp)

    @property
    def binary_arch(self) -> str:
        """The architecture Triton builds the binary for: ``sm_90a`` for cc >= 90 (arch-specific
        features such as wgmma), ``sm_80`` below; the gfx name on HIP."""
        if self.backend == "cuda":
            cap = int(self.arch)
            return f"sm_{cap}a" if cap >= 90 else f"sm_{cap}"
        return self.arch

    @classmethod
    def from_json(cls, obj: Any, where: str = "target") -> Target:
        backend = _req(obj, "backend", str, where)
        if backend not in BACKENDS:
            raise SchemaError(f"{where}: unknown backend {backend!r}", where=where)
        return cls(backend, _req(obj, "arch", str, where), _req(obj, "warp_size", int, where))

    def to_json(self) -> dict:
        return {"backend": self.backend, "arch": self.arch, "warp_size": self.warp_size}
