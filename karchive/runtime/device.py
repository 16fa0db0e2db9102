"""What the runtime needs to know about one GPU to pick variants for it.

:class:`DeviceInfo` is plain data. Backends fill it from the driver; :meth:`DeviceInfo.describe_target`
builds one from a target string so selection can be inspected (and tested) on a machine with no GPU.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: Highest PTX ISA version each CUDA driver (``cuDriverGetVersion``) can JIT, from NVIDIA's PTX ISA
#: release notes. A driver newer than the table is assumed to read everything the table knows.
DRIVER_PTX_ISA: dict[int, tuple[int, int]] = {
    11000: (7, 0),
    11010: (7, 1),
    11020: (7, 2),
    11030: (7, 3),
    11040: (7, 4),
    11050: (7, 5),
    11060: (7, 6),
    11070: (7, 7),
    11080: (7, 8),
    12000: (8, 0),
    12010: (8, 1),
    12020: (8, 2),
    12030: (8, 3),
    12040: (8, 4),
    12050: (8, 5),
    12060: (8, 5),
    12080: (8, 7),
    12090: (8, 8),
    13000: (9, 0),
    13010: (9, 1),
    13020: (9, 2),
}


def driver_ptx_isa(driver_version: int | None) -> tuple[int, int] | None:
    """The newest PTX ISA a driver of this version JITs (None when unknown)."""
    if not driver_version:
        return None
    known = [v for v in sorted(DRIVER_PTX_ISA) if v <= driver_version]
    if not known:
        return None
    best = DRIVER_PTX_ISA[known[-1]]
    major, minor = divmod(driver_version // 10, 100)
    if major >= 13 and driver_version > max(DRIVER_PTX_ISA):  # CUDA 13.x ships PTX ISA 9.x
        return (major - 4, minor)
    return best


_PTX_VERSION = re.compile(rb"^\s*\.version\s+(\d+)\.(\d+)", re.M)
_PTX_TARGET = re.compile(rb"^\s*\.target\s+(sm_\d+[af]?)", re.M)


def ptx_header(ptx: bytes) -> tuple[tuple[int, int] | None, str | None]:
    """(``.version``, ``.target``) of a PTX module, read from its first lines."""
    head = ptx[:4096]
    v = _PTX_VERSION.search(head)
    t = _PTX_TARGET.search(head)
    return ((int(v.group(1)), int(v.group(2))) if v else None, t.group(1).decode() if t else None)


@dataclass(frozen=True)
class DeviceInfo:
    backend: str  # "cuda" | "hip"
    index: int
    arch: str  # CUDA: "90" (= 10*major + minor); HIP: "gfx942" (without feature flags)
    warp_size: int
    cc: tuple[int, int] | None = None  # CUDA compute capability
    shared_optin: int | None = None  # max dynamic shared memory per block after opt-in
    name: str = ""
    driver_version: int | None = None
    multiprocessors: int | None = None

    @property
    def ptx_isa(self) -> tuple[int, int] | None:
        return driver_ptx_isa(self.driver_version) if self.backend == "cuda" else None

    def __str__(self) -> str:
        what = f"sm_{self.arch}" if self.backend == "cuda" else self.arch
        return f"{self.backend} device {self.index} ({what}{', ' + self.name if self.name else ''})"

    @classmethod
    def describe_target(
        cls,
        target: str,
        *,
        index: int = 0,
        shared_optin: int | None = None,
        driver_version: int | None = None,
        name: str = "",
    ) -> DeviceInfo:
        """A device description from ``cuda:86`` / ``hip:gfx942`` (selection without a GPU; no driver involved)."""
        from ..format.target import Target

        t = Target.parse(target)
        if t.backend == "cuda":
            cap = int(t.arch)
            return cls(
                "cuda",
                index,
                t.arch,
                t.warp_size,
                cc=divmod(cap, 10),
                shared_optin=shared_optin,
                driver_version=driver_version,
                name=name,
            )
        return cls("hip", index, t.arch, t.warp_size, shared_optin=shared_optin, name=name)
