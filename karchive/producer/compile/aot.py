"""Ahead-of-time compile of one variant, on a machine with no GPU.

``triton.compile(ASTSource(...), target=GPUTarget(...))`` needs no driver when the target is given,
so a build machine compiles for ``cuda:80``, ``cuda:90`` or ``hip:gfx942`` alike.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ...core.digest import sha256_hex
from ...errors import CompileError, KarchiveError, UnsupportedKernelError
from ...format.autotune import HIP_TUNING_OPTIONS
from ._compile_errors import compiler_message
from .buildenv import (
    COMPILE_LOCK,
    DEFAULT_FP_FUSION,
    cache_namespace,
    check_cache_root,
    check_import_time_state,
    compile_environment,
    validate_env,
)
from .canonical import (
    SCHEME,
    Canonicalised,
    canonical_locations,
    find_machine_paths,
    install_independent_keys,
    kernel_name,
    machine_roots,
)
from .describe import CompiledVariant, describe_variant, signature_defaults
from .kernel_ref import load_kernel, split_ref
from .signature import Specialization, resolve
from .tensordesc_abi import bind_descriptor_blocks
from .toolchain import check_target

__all__ = [
    "BACKEND_OPTIONS",
    "COMMON_OPTIONS",
    "PLUGIN_ENV_VARS",
    "VariantRequest",
    "build_record",
    "check_no_machine_paths",
    "compile_variant",
    "constexpr_params",
    "module_source",
    "pipeline_hooks",
    "specialize",
    "toolchain_versions",
]

#: Options each backend accepts from the command line / spec file (others are refused early).
COMMON_OPTIONS = {
    "num_warps",
    "num_stages",
    "num_ctas",
    "enable_fp_fusion",
    "debug",
    "launch_cooperative_grid",
    "launch_pdl",
    "sanitize_overflow",
}
BACKEND_OPTIONS = {
    "cuda": COMMON_OPTIONS | {"maxnreg", "ptx_version", "enable_reflect_ftz"},
    "hip": COMMON_OPTIONS | set(HIP_TUNING_OPTIONS),
}


@dataclass
class VariantRequest:
    """One variant to compile; plain data so it can travel to a worker process."""

    kernel_ref: str
    signature: Any
    target: str
    constexprs: dict = field(default_factory=dict)
    options: dict = field(default_factory=dict)
    include_ir: bool = True
    base_dir: str | None = None
    env: dict = field(default_factory=dict)  # codegen environment ([archive] env), see buildenv.py
    #: Names of the int parameters specialised to 1 (``i32:1``), in order, once the signature was resolved
    #: against the kernel (``validate_requests``); None before. Only the label reads it.
    equal_to_1: tuple[str, ...] | None = None
    #: For an autotuned kernel: the indexes of the configs to build (None: all of them).
    configs: list[int] | None = None
    #: True once a request for an autotuned/heuristics kernel became one request per config (wrapped.py).
    expanded: bool = False
    #: The name to file the variant under; None: the kernel's ``module:qualname`` (canonical.kernel_name).
    #: A rebuild passes the archived name, so an archive from before qualified names reproduces its keys.
    kernel_name: str | None = None

    def label(self) -> str:
        """``kernel[target](stride==1,BLOCK=1024;num_warps=4)``: the names ``inspect`` shows."""
        cx = ",".join(f"{k}={v}" for k, v in sorted(self.constexprs.items()))
        opts = ",".join(f"{k}={v}" for k, v in sorted(self.options.items()))
        if self.equal_to_1 is not None:
            fixed = [f"{name}==1" for name in self.equal_to_1]
        elif isinstance(self.signature, str):  # not resolved yet: positions in the signature string
            fixed = [f"#{i}==1" for i, tok in enumerate(self.signature.split(",")) if tok.strip().endswith(":1")]
        else:
            fixed = (
                [f"{name}==1" for name, typ in self.signature.items() if str(typ).strip().endswith(":1")]
                if isinstance(self.signature, dict)
                else []
            )
        args = ",".join(fixed + ([cx] if cx else []))
        return f"{self.kernel_ref.rpartition(':')[2]}[{self.target}]({args}{';' if args and opts else ''}{opts})"


PLUGIN_ENV_VARS = ("TRITON_PASS_PLUGIN_PATH", "TRITON_PLUGIN_PATHS", "LLVM_PASS_PLUGIN_PATH")


def pipeline_hooks() -> list[dict]:
    """Pass-pipeline customisations in effect: they change the binary, so they enter the key."""
    hooks: list[dict] = []
    # Triton 3.6 reads TRITON_PASS_PLUGIN_PATH; 3.9 reads TRITON_PLUGIN_PATHS and LLVM_PASS_PLUGIN_PATH.
    for var in PLUGIN_ENV_VARS:
        for path in os.environ.get(var, "").split(os.pathsep):
            if not path:
                continue
            try:
                with open(path, "rb") as fh:
                    digest = hashlib.sha256(fh.read()).hexdigest()
            except OSError as exc:
                raise CompileError(
                    f"{var} names {path!r}, which cannot be read: {exc}", variant=None
                ) from exc  # the process's pass pipeline: no one variant
            hooks.append({"kind": "pass_plugin", "name": os.path.basename(path), "sha256": digest})
    try:
        from triton import knobs

        hook = getattr(knobs.runtime, "add_stages_inspection_hook", None)
    except Exception:  # noqa: BLE001 - a Triton without knobs.runtime has no inspection hook
        hook = None
    if hook is not None:
        key, digest = hook()
        hooks.append({"kind": "stages_inspection_hook", "name": str(key), "sha256": str(digest)})
    return hooks


def constexpr_params(fn: Any) -> list[str]:
    """The names of ``fn``'s ``tl.constexpr`` parameters (a JITFunction without ``params`` lists their indices)."""
    params = getattr(fn, "params", None)
    if params is not None:
        return [p.name for p in params if getattr(p, "is_constexpr", False)]
    return [fn.arg_names[i] for i in getattr(fn, "constexprs", [])]


def specialize(fn: Any, signature: Any, constexprs: Mapping[str, Any] | None = None) -> Specialization:
    return resolve(list(fn.arg_names), constexpr_params(fn), signature, constexprs, kernel_name=fn.__name__)


def module_source(module: Any) -> str | None:
    try:
        return inspect.getsource(module)
    except (OSError, TypeError):
        return None


def compile_variant(
    req: VariantRequest, *, cache_dir: str | None = None, always_compile: bool = False
) -> CompiledVariant:
    """Compile one variant; every failure is a :class:`KarchiveError` with the compiler's text.

    The compile runs under canonical source names (canonical.py) and an explicit environment and
    Triton cache (buildenv.py); ``cache_dir``/``always_compile`` replace the build cache (rebuild
    uses a fresh directory). The stored files are checked for machine paths before they are returned.
    """
    target = check_target(req.target)  # one clear line for a target this toolchain cannot build, not ptxas noise
    unknown = set(req.options) - BACKEND_OPTIONS[target.backend]
    if unknown:
        raise CompileError(
            f"option(s) {sorted(unknown)} are not supported for {target.backend}; "
            f"supported: {sorted(BACKEND_OPTIONS[target.backend])}",
            variant=req.label(),
        )
    env = validate_env(req.env)
    fn, module = load_kernel(req.kernel_ref, req.base_dir)
    spec = specialize(fn, req.signature, req.constexprs)
    spec.types = bind_descriptor_blocks(spec.types, spec.constexprs, req.label())
    try:
        import triton
        from triton.backends.compiler import GPUTarget
    except ImportError as exc:  # pragma: no cover - producer extra missing
        raise CompileError("compiling needs Triton: pip install 'karchive[producer]'", variant=req.label()) from exc
    check_import_time_state(target.backend, env)
    # Explicit, so neither TRITON_DEFAULT_FP_FUSION nor Triton's changing default decides it.
    options = {"enable_fp_fusion": DEFAULT_FP_FUSION, **req.options}
    arch: Any = int(target.arch) if target.backend == "cuda" else target.arch
    # One entry per non-constexpr parameter, as Triton's JIT builds them: Triton's own hash then
    # equals the JIT's, so an exported AOT variant is a cache hit for plain JIT calls.
    attrs = {
        (i,): ([["tt.divisibility", spec.divisibility[n]]] if n in spec.divisibility else [])
        for i, n in enumerate(spec.names)
        if spec.types[n] != "constexpr"
    }
    from .gluon import ast_source_class

    src = ast_source_class(fn)(fn=fn, signature=dict(spec.types), constexprs=dict(spec.constexprs), attrs=attrs)
    from .toolchain import build_fingerprint

    try:
        # Every compile that generates code imports this (and, through it, Gluon's modules); a cache hit
        # does not. The build cache's namespace hashes the canonical names of every loaded Triton module,
        # so without this a worker's first compile and its later ones would look in different namespaces
        # and a warm cache would miss once per worker per run.
        import triton.compiler.code_generator
    except ImportError:  # pragma: no cover - another Triton layout: the namespace is merely less stable
        pass
    # One compile at a time per process: canonical names, the environment and the cwd are process-wide.
    with COMPILE_LOCK, canonical_locations(fn) as canon:
        cache = cache_dir or os.path.join(check_cache_root(), cache_namespace(canon.names, env))
        try:
            with compile_environment(env, cache, always_compile=always_compile), install_independent_keys():
                started = time.time()
                compiled = triton.compile(
                    src, target=GPUTarget(target.backend, arch, target.warp_size), options=dict(options)
                )
                from_cache = _served_from_cache(cache, compiled, started)
                metadata = compiled.metadata._asdict()
                asm = dict(compiled.asm)
                fingerprint = build_fingerprint(target.to_json())
        except KarchiveError:
            raise
        except Exception as exc:  # Triton raises CompilationError, RuntimeError (ptxas), AssertionError ...
            raise CompileError(
                f"{req.label()}: Triton failed to compile: {compiler_message(exc)}", variant=req.label()
            ) from exc
    build = build_record(req, module.__name__, options, env, canon)
    try:
        variant = describe_variant(
            kernel=req.kernel_name or kernel_name(fn),
            param_names=spec.names,
            param_types=spec.types,
            constexprs=spec.constexprs,
            divisibility=spec.divisibility,
            equal_to_1=spec.equal_to_1,
            metadata=metadata,
            asm=asm,
            source_key=fn.cache_key,
            source_text=module_source(module),
            hooks=pipeline_hooks(),
            origin="aot",
            include_ir=req.include_ir,
            provenance_extra={"triton_cache": fingerprint, "build": build},
            codegen_env=env,
            signature_defaults=signature_defaults(fn),
        )
    except UnsupportedKernelError as exc:
        raise UnsupportedKernelError(f"{req.label()}: {exc}", kernel=exc.kernel) from exc
    variant.extra_sources = [s.text for s in canon.sources]
    variant.from_cache = from_cache
    check_no_machine_paths(req.label(), variant, canon, req.base_dir)
    return variant


def _served_from_cache(cache: str, compiled: Any, started: float) -> bool:
    """Whether Triton answered from ``cache``: the entry's metadata file predates this compile (Triton names
    an entry by the base32 of its hash and never rewrites one). False where that cannot be told."""
    import base64

    try:
        entry = base64.b32encode(bytes.fromhex(compiled.hash)).decode("ascii").rstrip("=")
        return os.path.getmtime(os.path.join(cache, entry, f"{compiled.name}.json")) < started
    except (AttributeError, TypeError, ValueError, OSError):  # another Triton's layout: report it as compiled
        return False


def build_record(req: VariantRequest, module_name: str, options: dict, env: dict, canon: Canonicalised) -> dict:
    """``provenance.build``: the request exactly as compiled, so a rebuild needs nothing but the archive."""
    return {
        "scheme": SCHEME,
        "module": module_name,
        "attr": split_ref(req.kernel_ref)[1],
        "target": req.target,
        "signature": req.signature,
        "constexprs": dict(req.constexprs),
        "options": dict(sorted(options.items())),
        "env": dict(env),
        "sources": [{"module": s.module, "name": s.name, "sha256": sha256_hex(s.text.encode())} for s in canon.sources],
    }


def check_no_machine_paths(label: str, variant: CompiledVariant, canon: Canonicalised, base_dir: str | None) -> None:
    """Refuse a variant whose stored files still name a directory of this machine (a canonicalisation gap)."""
    dirs = [base_dir or ""]
    for s in canon.sources:
        f = getattr(sys.modules.get(s.module), "__file__", None)
        if isinstance(f, str):
            dirs.append(os.path.dirname(os.path.abspath(f)))
    hits = find_machine_paths(variant.files, machine_roots(dirs))
    if hits:
        where = "; ".join(f"{member} names {root!r} at byte {offset}" for member, root, offset in hits)
        raise CompileError(
            f"{label}: a machine path reached the compiled files ({where}); karchive names sources "
            "canonically (spec/FORMAT.md §12) and refuses to pack what it could not rename",
            variant=label,
        )


def toolchain_versions() -> dict[str, Any]:
    """What produced the archive: Triton, ptxas and LLVM versions where they can be read."""
    out: dict[str, Any] = {"triton": None, "ptxas": None, "llvm": None}
    try:
        import triton

        out["triton"] = triton.__version__
    except ImportError:
        return out
    try:
        from triton.backends.nvidia.compiler import get_ptxas

        out["ptxas"] = str(get_ptxas(90).version) if _takes_arch(get_ptxas) else str(get_ptxas().version)
        if _takes_arch(get_ptxas) and get_ptxas(80).path != get_ptxas(90).path:
            # Triton 3.9 compiles below sm_90 with a second ptxas; record it too.
            out["ptxas_below_sm90"] = str(get_ptxas(80).version)
    except Exception:  # noqa: BLE001 - no CUDA backend or no ptxas
        pass
    try:
        from triton.backends.amd.compiler import get_amd_codegen_revision

        out["amd_codegen"] = str(get_amd_codegen_revision())
    except Exception:  # noqa: BLE001 - no AMD backend, or an older Triton
        pass
    try:
        from triton._C.libtriton import llvm

        out["llvm"] = getattr(llvm, "get_version", lambda: None)()
    except Exception:  # noqa: BLE001 - private Triton API: without it the LLVM version is simply not recorded
        pass
    return out


def _takes_arch(fn: Any) -> bool:
    try:
        return len(inspect.signature(fn).parameters) > 0
    except (TypeError, ValueError):
        return False
