"""What this machine offers the runtime: launch path, driver bindings, drivers, devices (``karchive doctor``).

Every probe is guarded: a missing package or driver is reported, never raised, so the report is
complete on any machine. Probing a driver initialises it (``cuInit`` / ``hipInit``), as a first launch would.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import platform
from typing import Any

from .. import __version__
from ..core import settings
from . import launch_path


def _package(dist_names: tuple[str, ...], module: str) -> dict[str, Any]:
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    version = None
    for name in dist_names:
        try:
            version = importlib.metadata.version(name)
            break
        except importlib.metadata.PackageNotFoundError:
            continue
    return {"installed": found, "version": version}


def _devices(name: str) -> dict[str, Any]:
    """Initialise backend ``name`` and describe its devices, or say why it cannot be used."""
    from ..errors import KarchiveError
    from .backend import get_backend

    try:
        b = get_backend(name)
    except KarchiveError as exc:
        return {"usable": False, "error": str(exc)}
    out: dict[str, Any] = {"usable": True, "driver_version": b.driver_version, "devices": []}
    try:
        address = b.launch_address()
    except Exception as exc:  # noqa: BLE001 - a report, not a launch
        address, out["launch_address_error"] = None, str(exc)
    out["launch_function"] = address is not None  # the compiled path can call the driver itself
    for i in range(b.count):
        try:
            d = b.device_info(i)
        except KarchiveError as exc:
            out["devices"].append({"index": i, "error": str(exc)})
            continue
        out["devices"].append(
            {
                "index": i,
                "name": d.name,
                "arch": d.arch,
                "warp_size": d.warp_size,
                "multiprocessors": d.multiprocessors,
                "shared_optin": d.shared_optin,
            }
        )
    return out


def report(probe_drivers: bool = True) -> dict[str, Any]:
    """The doctor's findings as plain data (the CLI prints it, or emits it as JSON)."""
    status = launch_path.status()
    cuda = _package(("cuda-bindings", "cuda-python"), "cuda.bindings")
    if not cuda["installed"]:
        older = _package(("cuda-python",), "cuda.cuda")  # cuda-python before 12.6
        if older["installed"]:
            cuda = older
    hip = _package(("hip-python", "rocm-bindings-hip"), "hip")
    out: dict[str, Any] = {
        "karchive": __version__,
        "python": {
            "version": platform.python_version(),
            "implementation": platform.python_implementation(),
            "platform": platform.platform(terse=True),
        },
        "launch_path": {
            "active": status.active,
            "requested": status.requested,
            "extension_built": status.built,
            "detail": status.detail,
            "env": settings.launch_path(),
            "torch_reader": status.torch_reader,
        },
        "cuda_python": cuda,
        "hip_python": hip,
    }
    if probe_drivers:  # (a missing binding is reported by the backend itself, naming the package to install)
        out["cuda"] = _devices("cuda")
        out["hip"] = _devices("hip")
    return out
