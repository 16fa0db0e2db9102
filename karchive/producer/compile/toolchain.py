"""Which targets the installed Triton can compile for, checked before anything compiles.

``Target.parse`` accepts any well-formed name (``cuda:999``, ``hip:gfx9999``): archives are read on
machines with no compiler. Building is different: an unknown target makes Triton print hundreds of
lines (LLVM's "not a recognized processor", a ptxas failure, an MLIR reproducer dump) and, for some
CUDA targets (``cuda:88`` with the sm_80 ptxas), LLVM aborts the whole process. So the producer asks
the toolchain itself, once per target and process:

- CUDA: the ``ptxas`` Triton picks for that capability (``get_ptxas(arch)``) lists the GPU names it
  accepts in its ``--help`` (``--gpu-name``); Triton names the target ``sm_<cc>`` (``sm_<cc>a`` from
  sm_90 on, ``sm_arch_from_capability``). That list is what the error offers instead.
- HIP: Triton's LLVM must know the gfx name (``amd.get_target_triple`` refuses the rest), and
  Triton's AMD backend must support its ISA family, which only a compile can tell: with ``probe=True``
  one tiny kernel is compiled for the target (output captured, nothing printed), once per process.

Checks that cannot run (no Triton, no ptxas) pass: the compile then reports the problem itself.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from typing import Any

from ...errors import CompileError, TargetError
from ...format.target import Target

__all__ = [
    "HIP_EXAMPLES",
    "backend_hash",
    "build_fingerprint",
    "cache_env_vars",
    "check_target",
    "cuda_capabilities",
    "require_triton",
    "toolchain_report",
    "triton_key_sha256",
]

#: Examples named when a gfx arch is refused (each compiles with Triton 3.9; the check itself asks the toolchain).
HIP_EXAMPLES = "gfx90a, gfx942, gfx950, gfx1100, gfx1201"


def require_triton() -> None:
    """Refuse, naming the extra, where Triton is not installed: before the first kernel module is imported,
    whose ``import triton`` would otherwise fail once per variant without saying what to install."""
    import importlib.util

    if importlib.util.find_spec("triton") is None:
        raise CompileError(
            "compiling kernels needs Triton, which is not installed here: pip install 'karchive[producer]'",
            variant=None,
        )  # every variant alike


def _triton_version() -> str:
    try:
        import triton

        return f"Triton {triton.__version__}"
    except ImportError:  # pragma: no cover - checked by the callers
        return "Triton"


@functools.cache
def _ptxas_gpu_names(path: str) -> frozenset[str]:
    """The ``sm_*`` names one ptxas binary accepts for ``--gpu-name`` (empty when it cannot be asked)."""
    try:
        text = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=60, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return frozenset()
    section = re.search(r"--gpu-name\b.*?(?=\n--|\Z)", text, re.S)
    return frozenset(re.findall(r"'(sm_\w+)'", section.group(0))) if section else frozenset()


def _nvidia() -> tuple[Any, Any] | None:
    """Triton's ``(get_ptxas, sm_arch_from_capability)``, or None without a CUDA backend."""
    try:
        from triton.backends.nvidia.compiler import get_ptxas, sm_arch_from_capability
    except Exception:  # noqa: BLE001 - no Triton, or a Triton whose CUDA backend fails to import
        return None
    return get_ptxas, sm_arch_from_capability


def _ptxas_for(get_ptxas: Any, capability: int) -> tuple[str, str] | None:
    """(path, version) of the ptxas Triton uses for ``capability`` (Triton 3.9 has one below sm_90, one from it)."""
    try:
        takes_arch = len(inspect.signature(get_ptxas).parameters) > 0
        tool = get_ptxas(capability) if takes_arch else get_ptxas()
        return str(tool.path), str(getattr(tool, "version", "?"))
    except Exception:  # noqa: BLE001 - ptxas missing or not runnable: let the compile say so
        return None


def cuda_capabilities() -> list[int]:
    """Compute capabilities this Triton's ptxas binaries accept, ascending (empty when unknown)."""
    nv = _nvidia()
    if nv is None:
        return []
    get_ptxas, sm_name = nv
    found = set()
    for low in (80, 90):  # one probe per ptxas Triton may pick; both list every arch they accept
        tool = _ptxas_for(get_ptxas, low)
        if tool is None:
            continue
        for name in _ptxas_gpu_names(tool[0]):
            m = re.fullmatch(r"sm_(\d+)a?", name)
            if m:
                found.add(int(m.group(1)))
    return sorted(c for c in found if _cuda_ok(c))


def _cuda_ok(capability: int) -> bool:
    nv = _nvidia()
    if nv is None:
        return True
    get_ptxas, sm_name = nv
    tool = _ptxas_for(get_ptxas, capability)
    if tool is None:
        return True
    names = _ptxas_gpu_names(tool[0])
    return not names or sm_name(capability) in names


def _check_cuda(target: Target) -> None:
    nv = _nvidia()
    if nv is None:
        return
    get_ptxas, sm_name = nv
    capability = int(target.arch)
    tool = _ptxas_for(get_ptxas, capability)
    if tool is None or _cuda_ok(capability):
        return
    known = ", ".join(f"cuda:{c}" for c in cuda_capabilities())
    raise TargetError(
        f"target {target} is not supported by this {_triton_version()}: its ptxas (CUDA {tool[1]}) "
        f"has no {sm_name(capability)}; CUDA targets it can build: {known}",
        target=str(target),
    )


def _check_hip_llvm(target: Target) -> None:
    try:
        from triton._C.libtriton import amd
    except Exception:  # noqa: BLE001 - no Triton, or no AMD backend in this build: the compile says so
        return
    get_triple = getattr(amd, "get_target_triple", None)
    if get_triple is None:
        return
    try:
        get_triple(target.arch)
    except ValueError:
        raise TargetError(
            f"target {target} is not supported by this {_triton_version()}: its LLVM knows no AMD GPU "
            f"{target.arch!r} (targets it builds include {HIP_EXAMPLES})",
            target=str(target),
        ) from None


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[Any]:
    """Send file descriptor 2 to a temporary file: MLIR and LLVM print there from C++, past Python."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield sink
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)


@functools.cache
def _hip_compiles(arch: str, warp_size: int) -> str | None:
    """None when a tiny kernel compiles for ``hip:<arch>``, else the compiler's one-line reason."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from . import _probe_kernel
    from .buildenv import COMPILE_LOCK, DEFAULT_FP_FUSION, cache_root, compile_environment

    src = ASTSource(fn=_probe_kernel.karchive_probe, signature={"x": "*fp32"}, constexprs={})
    with COMPILE_LOCK, compile_environment({}, os.path.join(cache_root(), "target-probe")), _quiet_stderr() as sink:
        try:
            triton.compile(
                src, target=GPUTarget("hip", arch, warp_size), options={"enable_fp_fusion": DEFAULT_FP_FUSION}
            )
        except Exception as exc:  # noqa: BLE001 - any failure means "cannot build for this target"
            sink.seek(0)
            printed = sink.read().decode("utf-8", "replace")
            m = re.search(r"error: (unsupported target[^\n]*)", printed)
            return (
                m.group(1)
                if m
                else f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
            )
    return None


def check_target(target: Target | str, *, probe: bool = False) -> Target:
    """Refuse, in one line, a target the installed toolchain cannot compile for; returns the parsed target.

    ``probe=True`` also compiles a tiny kernel for HIP targets (the only way to learn whether
    Triton's AMD backend supports that ISA); build commands do it once per target before compiling.
    """
    t = target if isinstance(target, Target) else Target.parse(target)
    if t.backend == "cuda":
        _check_cuda(t)
    elif t.backend == "hip":
        _check_hip_llvm(t)
        if probe:
            try:
                import triton  # noqa: F401 - only to know whether a probe can run
            except ImportError:
                return t
            reason = _hip_compiles(t.arch, t.warp_size)
            if reason is not None:
                raise TargetError(
                    f"target {t} is not supported by this {_triton_version()}'s AMD backend "
                    f"({reason}); targets it builds include {HIP_EXAMPLES}",
                    target=str(t),
                )
    return t


def toolchain_report() -> dict[str, Any]:
    """What this machine can build with (``karchive doctor``): Triton, its backends, the ptxas it picks
    (one below sm_90, one from it, where they differ), the CUDA targets those accept and whether the
    AMD backend's LLVM is there. Never raises: a missing piece is reported as absent."""
    try:
        import triton
    except Exception as exc:  # noqa: BLE001 - not installed, or broken: either way nothing can be built
        return {"triton": None, "error": f"{type(exc).__name__}: {exc}"}
    try:
        from triton.backends import backends

        names = sorted(backends)
    except Exception:  # noqa: BLE001 - an older or unusual Triton: backends unknown, the rest still helps
        names = []
    ptxas: list[dict[str, Any]] = []
    nv = _nvidia()
    if nv is not None:
        for low in (80, 90):
            tool = _ptxas_for(nv[0], low)
            if tool is not None and all(p["path"] != tool[0] for p in ptxas):
                ptxas.append({"from_capability": low, "path": tool[0], "version": tool[1]})
    try:
        from triton._C.libtriton import amd

        hip_llvm = getattr(amd, "get_target_triple", None) is not None
    except Exception:  # noqa: BLE001 - no AMD backend in this Triton build
        hip_llvm = False
    return {
        "triton": getattr(triton, "__version__", None),
        "backends": names,
        "ptxas": ptxas,
        "cuda_targets": [f"cuda:{c}" for c in cuda_capabilities()],
        "hip": {"llvm": hip_llvm, "targets_include": HIP_EXAMPLES.split(", ") if hip_llvm else []},
    }


# --- identity of the installed Triton build ---------------------------------------------------
# What a Triton cache key starts with on this install. Every compile records it (``provenance.triton_cache``),
# so an archive can say which install its entries would be Triton cache hits for (capture/triton_cache.py).
@functools.lru_cache(maxsize=1)
def triton_key_sha256() -> str | None:
    """sha256 of ``triton_key()``: the install-specific prefix of every Triton cache key."""
    try:
        from triton.runtime.cache import triton_key
    except ImportError:
        try:
            from triton.compiler.compiler import triton_key
        except ImportError:
            return None
    return hashlib.sha256(triton_key().encode()).hexdigest()


@functools.lru_cache(maxsize=16)
def backend_hash(backend: str, arch: str, warp_size: int) -> str | None:
    """``backend.hash()`` for a target (CUDA: ptxas version + arch), the second install-specific key part."""
    try:
        from triton.backends.compiler import GPUTarget
        from triton.compiler.compiler import make_backend

        return str(make_backend(GPUTarget(backend, int(arch) if backend == "cuda" else arch, warp_size)).hash())
    except Exception:  # noqa: BLE001 - backend absent (e.g. no ptxas): no fingerprint for this target
        return None


def cache_env_vars() -> dict[str, str]:
    try:
        from triton._C.libtriton import get_cache_invalidating_env_vars

        return dict(sorted(get_cache_invalidating_env_vars().items()))
    except Exception:  # noqa: BLE001 - private Triton API, absent or changed: no variables known
        return {}


def build_fingerprint(target: Mapping[str, Any]) -> dict:
    """``provenance.triton_cache``: what a Triton install must match for exported entries to be hit."""
    return {
        "triton_key_sha256": triton_key_sha256(),
        "backend_hash": backend_hash(target["backend"], str(target["arch"]), int(target["warp_size"])),
        "env_vars": cache_env_vars(),
    }
