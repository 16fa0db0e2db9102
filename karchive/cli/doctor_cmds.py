"""`karchive doctor`: which launch path is active and what the runtime found (bindings, drivers, devices)."""

from __future__ import annotations

import argparse
from typing import Any

from .output import emit_json, human_bytes, plural, printable


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("doctor", help="say which launch path is active and which drivers and GPUs the runtime sees")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--no-probe", action="store_true", help="do not initialise the GPU drivers (packages only)")
    p.set_defaults(func=cmd_doctor)


def _package_line(info: dict[str, Any], extra: str) -> str:
    if not info["installed"]:
        return f"not installed (pip install 'karchive[{extra}]')"
    return info["version"] or "installed (version unknown)"


def _driver_lines(name: str, info: dict[str, Any] | None) -> list[str]:
    if info is None:
        return [f"{name:14s}not probed (--no-probe)"]
    if not info["usable"]:
        return [f"{name:14s}not usable: {printable(info['error'])}"]
    via = "cuGetProcAddress" if name == "CUDA" else "hipGetProcAddress"
    launch = "yes" if info["launch_function"] else f"no (launches go through the binding: {via} gave no address)"
    lines = [f"{name:14s}driver {info['driver_version']}, {plural(len(info['devices']), 'device')}; "
             f"compiled launcher can call the driver: {launch}"]
    for d in info["devices"]:
        if "error" in d:
            lines.append(f"  device {d['index']:<5d} {printable(d['error'])}")
            continue
        arch = f"sm_{d['arch']}" if name == "CUDA" else d["arch"]
        shared = human_bytes(d["shared_optin"]) if d["shared_optin"] else "?"
        lines.append(f"  device {d['index']:<5d} {printable(d['name'])}, {arch}, warp {d['warp_size']}, "
                     f"{d['multiprocessors']} SMs/CUs, {shared} shared memory per block")
    return lines


def cmd_doctor(args: argparse.Namespace) -> int:
    from ..runtime.doctor import report

    r = report(probe_drivers=not args.no_probe)
    if args.json:
        emit_json(r)
        return 0
    lp = r["launch_path"]
    active = "compiled launcher (C extension)" if lp["active"] == "extension" else "pure Python"
    if lp["active"] == "extension" and not lp["extension_built"]:
        active += " -- REQUESTED BUT NOT BUILT: launches will fail"
    py = r["python"]
    lines = [
        f"karchive {r['karchive']}, {py['implementation']} {py['version']} on {py['platform']}",
        f"{'launch path':14s}{active}",
        f"{'':14s}KARCHIVE_LAUNCH_PATH={lp['env'] if lp['env'] is not None else '(unset: auto)'}",
        f"{'extension':14s}{'built: ' if lp['extension_built'] else ''}{printable(lp['detail'])}",
        f"{'cuda-python':14s}{_package_line(r['cuda_python'], 'cuda')}",
        f"{'hip-python':14s}{_package_line(r['hip_python'], 'hip')}",
    ]
    lines += _driver_lines("CUDA", r.get("cuda"))
    lines += _driver_lines("HIP", r.get("hip"))
    print("\n".join(lines))
    return 0
