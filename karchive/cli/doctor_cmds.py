"""`karchive doctor`: which launch path is active and what the runtime found (bindings, drivers, devices),
what this machine can build with (Triton, ptxas, its targets), and where karchive keeps things.

Exit status 1 when the launch path asked for (``KARCHIVE_LAUNCH_PATH=extension``) is not available: a
deployment check can run ``karchive doctor`` and trust its status."""

from __future__ import annotations

import argparse
from typing import Any

from .output import EXIT_NEGATIVE, EXIT_OK, emit_json, human_bytes, plural, printable


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "doctor",
        help="say which launch path is active, which drivers and GPUs the runtime sees, what "
        "this machine can build with, and where the cache and registry are "
        "(exit 1 when the launch path asked for is unavailable)",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument(
        "--no-probe",
        action="store_true",
        help="do not initialise the GPU drivers nor import Triton (package versions only)",
    )
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
    lines = [
        f"{name:14s}driver {info['driver_version']}, {plural(len(info['devices']), 'device')}; "
        f"compiled launcher can call the driver: {launch}"
    ]
    for d in info["devices"]:
        if "error" in d:
            lines.append(f"  device {d['index']:<5d} {printable(d['error'])}")
            continue
        arch = f"sm_{d['arch']}" if name == "CUDA" else d["arch"]
        shared = human_bytes(d["shared_optin"]) if d["shared_optin"] else "?"
        lines.append(
            f"  device {d['index']:<5d} {printable(d['name'])}, {arch}, warp {d['warp_size']}, "
            f"{d['multiprocessors']} SMs/CUs, {shared} shared memory per block"
        )
    return lines


def _toolchain(probe: bool) -> dict[str, Any]:
    """The producer side. --no-probe: the installed Triton's version only (importing Triton takes seconds)."""
    if not probe:
        import importlib.metadata

        try:
            return {"triton": importlib.metadata.version("triton"), "probed": False}
        except importlib.metadata.PackageNotFoundError:
            return {"triton": None, "probed": False}
    from ..producer.compile.toolchain import toolchain_report

    return {**toolchain_report(), "probed": True}


def _locations() -> dict[str, Any]:
    from ..core import settings
    from ..core.paths import BUILD_CACHE, cache_dir
    from ..registry.config import default_registry_dir, redact_url

    cache = cache_dir()
    from_env = _setting(settings.registry)  # a refused value is listed under "settings", not raised here
    policy = _setting(settings.trust_policy)
    return {
        "cache": str(cache),
        "build_cache": str(cache / BUILD_CACHE),
        "registry": redact_url(from_env or str(default_registry_dir())),
        "registry_from_env": bool(from_env),
        "trust_policy": policy,
        "lockfile": _setting(settings.lockfile),
        # the serving stance (docs/serving.md): without a policy, archives are served unsigned
        "serve": {"archives": _setting(settings.serve_archives), "signed_only": policy is not None},
    }


def _setting(accessor: Any) -> Any:
    from ..errors import SettingsError

    try:
        return accessor()
    except SettingsError:
        return None


def _toolchain_lines(tc: dict[str, Any]) -> list[str]:
    if tc.get("triton") is None:
        return [f"{'triton':14s}not installed: nothing can be built here (pip install 'karchive[producer]')"]
    if not tc.get("probed"):
        return [f"{'triton':14s}{tc['triton']} (not imported: --no-probe)"]
    lines = [f"{'triton':14s}{tc['triton']}, backends: {', '.join(tc.get('backends') or []) or 'none found'}"]
    for p in tc.get("ptxas", []):
        lines.append(f"{'ptxas':14s}{p['version']} for sm_{p['from_capability']} and up: {printable(p['path'])}")
    if tc.get("cuda_targets"):
        lines.append(f"{'cuda targets':14s}{', '.join(tc['cuda_targets'])}")
    hip = tc.get("hip") or {}
    lines.append(
        f"{'hip targets':14s}"
        + (
            f"AMD LLVM present (e.g. {', '.join('hip:' + t for t in hip['targets_include'])})"
            if hip.get("llvm")
            else "none: this Triton has no AMD backend"
        )
    )
    return lines


def launch_path_unavailable(lp: dict[str, Any]) -> bool:
    """The user asked for the compiled launcher (KARCHIVE_LAUNCH_PATH=extension) and it is not built."""
    return lp["requested"] == "extension" and not lp["extension_built"]


def cmd_doctor(args: argparse.Namespace) -> int:
    from ..runtime.doctor import report

    r = report(probe_drivers=not args.no_probe)
    r["toolchain"] = _toolchain(not args.no_probe)
    r["locations"] = _locations()
    from ..core import settings

    r["settings"] = {"problems": settings.problems()}  # KARCHIVE_* values karchive refuses, each named
    lp = r["launch_path"]
    # Can an archive launch here? Only the drivers' probe can say (None with --no-probe): a GPU of a usable
    # backend. "ok" is the answer to the question doctor is asked, so no GPU is a negative answer (exit 1).
    drivers = [r.get("cuda"), r.get("hip")]
    gpus = sum(1 for d in drivers if d and d.get("usable") for dev in d.get("devices", ()) if "error" not in dev)
    r["gpus"] = None if args.no_probe else gpus
    code = EXIT_NEGATIVE if launch_path_unavailable(lp) or r["gpus"] == 0 or r["settings"]["problems"] else EXIT_OK
    r["ok"] = code == EXIT_OK
    if args.json:
        emit_json(r)
        return code
    active = "compiled launcher (C extension)" if lp["active"] == "extension" else "pure Python"
    if launch_path_unavailable(lp):
        active += " -- REQUESTED BUT NOT BUILT: launches will fail"
    py = r["python"]
    loc = r["locations"]
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
    lines += _toolchain_lines(r["toolchain"])
    lines += [
        f"{'cache':14s}{printable(loc['cache'])} (build cache: {printable(loc['build_cache'])})",
        f"{'registry':14s}{printable(loc['registry'])}" + (" ($KARCHIVE_REGISTRY)" if loc["registry_from_env"] else ""),
        f"{'trust policy':14s}{printable(loc['trust_policy']) if loc['trust_policy'] else '(none: $KARCHIVE_TRUST_POLICY unset)'}",
    ]
    if loc["lockfile"]:
        lines.append(f"{'lockfile':14s}{printable(loc['lockfile'])} ($KARCHIVE_LOCKFILE)")
    serving = loc["serve"]
    asked = f"$KARCHIVE_SERVE={','.join(serving['archives'])}: " if serving["archives"] else ""
    lines.append(
        f"{'serving':14s}{printable(asked)}"
        + (
            "archives are served only as the trust policy allows"
            if serving["signed_only"]
            else "archives are served unsigned (no $KARCHIVE_TRUST_POLICY): any archive can claim a kernel's source"
        )
    )
    lines += [f"{'setting':14s}REFUSED: {printable(p)}" for p in r["settings"]["problems"]]
    if r["gpus"] == 0:
        build = " (building works here: Triton is installed)" if r["toolchain"].get("triton") else ""
        lines.append(f"{'NOT OK':14s}no GPU backend is usable: archives cannot launch on this machine{build}")
    elif launch_path_unavailable(lp):
        lines.append(f"{'NOT OK':14s}the launch path asked for (KARCHIVE_LAUNCH_PATH=extension) is not built")
    elif r["gpus"] is None:
        lines.append(f"{'ok':14s}launch path ready; GPUs not probed (--no-probe)")
    else:
        lines.append(f"{'ok':14s}{plural(r['gpus'], 'GPU')} can launch archives")
    print("\n".join(lines))
    return code
