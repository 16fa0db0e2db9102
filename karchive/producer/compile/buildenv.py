"""The compile environment: which environment variables a build applies, and where Triton may cache.

Triton reads dozens of environment variables while compiling, and copies the ones it considers
cache-invalidating into every kernel's metadata. A build must not depend on the builder's shell, so
each compile runs in an environment karchive sets up explicitly:

- every variable in :data:`CODEGEN_ENV` and :data:`CLEARED_ENV` is removed, then the build spec's
  ``[archive] env`` table (only names from :data:`CODEGEN_ENV`) is applied and recorded in each
  variant's ``provenance.build.env``; a rebuild applies the same table;
- ``enable_fp_fusion`` is always passed to Triton (default :data:`DEFAULT_FP_FUSION`, Triton 3.9's
  default, which Triton 3.10 turns off), so ``TRITON_DEFAULT_FP_FUSION`` has no effect and Triton's
  warning about it never fires;
- Triton's cache is a karchive-owned namespace, ``<karchive cache>/triton-build/<namespace>``, where
  the namespace hashes the karchive version, the naming scheme and the revision of its implementation,
  the canonical source names and the applied environment: an entry in it can only have been compiled
  under the same canonical names, so a warm ``TRITON_CACHE_DIR`` from a JIT run or another checkout is
  never even read.

spec/BUILD.md ("Environment") lists the variables; spec/FORMAT.md §12 states the rules.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import ExitStack, contextmanager
from typing import Any

from ...errors import CompileError, SpecFileError

__all__ = [
    "CLEARED_ENV",
    "CODEGEN_ENV",
    "COMPILE_LOCK",
    "DEFAULT_FP_FUSION",
    "cache_namespace",
    "cache_root",
    "check_cache_root",
    "check_import_time_state",
    "compile_environment",
    "controlled_names",
    "ignored_from_shell",
    "shell_warning",
    "strip_shell",
    "triton_env_vars",
    "validate_env",
]

#: Triton 3.9 defaults to FP fusion when neither the option nor TRITON_DEFAULT_FP_FUSION is given;
#: karchive pins that default so a spec means the same thing under Triton 3.10 (which flips it).
DEFAULT_FP_FUSION = True

#: Variables that change code generation and that a build spec may set in ``[archive] env``.
#: From Triton 3.9's cache-invalidating list (``get_cache_invalidating_env_vars``) and its knobs.
CODEGEN_ENV = frozenset(
    {
        "DISABLE_LLVM_OPT",
        "DISABLE_MMA_V3",
        "DISABLE_MMA_V5",
        "DISABLE_PTXAS_OPT",
        "LLVM_EXTRACT_DI_LOCAL_VARIABLES",
        "TRITON_DISABLE_LINE_INFO",
        "TRITON_ENABLE_ASAN",
        "TRITON_ENABLE_EXPERIMENTAL_CONSAN",
        "TRITON_CONSAN_INIT_ALLOCATIONS",
        "TRITON_F32_DEFAULT",
        "TRITON_FORCE_DISABLE_FP_FUSION",
        "TRITON_ALLOW_NON_CONSTEXPR_GLOBALS",
        "TRITON_HIP_USE_ASYNC_COPY",
        "TRITON_HIP_USE_BLOCK_PINGPONG",
        "TRITON_HIP_USE_COEXEC_SCHEDULER",
        "TRITON_HIP_USE_EXPERT_SCHEDULING",
        "TRITON_HIP_USE_IN_THREAD_TRANSPOSE",
        "AMDGCN_USE_BUFFER_ATOMICS",
        "AMDGCN_USE_BUFFER_OPS",
        "AMDGCN_ANALYZE_SMALL_TENSOR_RANGE",
        "AMDGCN_SCALARIZE_PACKED_FOPS",
    }
)

#: Variables removed from every compile and never settable: caches and overrides that substitute
#: other artifacts, paths to replacement inputs, dumps Triton copies into metadata, JIT-only knobs.
CLEARED_ENV = frozenset(
    {
        "TRITON_CACHE_DIR",
        "TRITON_HOME",
        "TRITON_CACHE_MANAGER",
        "TRITON_REMOTE_CACHE_BACKEND",
        "TRITON_ALWAYS_COMPILE",
        "TRITON_STORE_BINARY_ONLY",
        "TRITON_KERNEL_OVERRIDE",
        "TRITON_OVERRIDE_DIR",
        "USE_IR_LOC",
        "TRITON_OVERRIDE_ARCH",
        "TRITON_MOCK_PTX_VERSION",
        "TRITON_LIBDEVICE_PATH",
        "PTXAS_OPTIONS",
        "TRITON_SWAP_MIR",
        "TRITON_SWAP_MIR_ENABLE_MISCHED",
        "TRITON_DUMP_MIR",
        "TRITON_KERNEL_DUMP",
        "TRITON_DUMP_DIR",
        "MLIR_ENABLE_DUMP",
        "MLIR_DUMP_PATH",
        "LLVM_IR_ENABLE_DUMP",
        "NVPTX_ENABLE_DUMP",
        "AMDGCN_ENABLE_DUMP",
        "MLIR_ENABLE_DIAGNOSTICS",
        "MLIR_ENABLE_TIMING",
        "LLVM_ENABLE_TIMING",
        "TRITON_REPRODUCER_PATH",
        "TRITON_ENABLE_LLVM_DEBUG",
        "TRITON_LLVM_DEBUG_ONLY",
        "TRITON_DEBUG",
        "TRITON_INSTRUMENTATION_MODE",
        "TRITON_FPSAN_HOMOMORPHIC_CASTS",
        "TRITON_FRONT_END_DEBUGGING",
        "TRITON_DEFAULT_FP_FUSION",
    }
)

_MAX_VALUE = 256


def triton_env_vars() -> set[str]:
    """Cache-invalidating variables this Triton reports as set (a newer Triton may know more)."""
    try:
        from triton._C.libtriton import get_cache_invalidating_env_vars

        return set(get_cache_invalidating_env_vars())
    except Exception:  # noqa: BLE001 - no Triton, or an older one without the function
        return set()


def controlled_names() -> set[str]:
    """Every variable a compile removes before applying the build's own table."""
    plugin = {"TRITON_PLUGIN_PATHS", "LLVM_PASS_PLUGIN_PATH", "TRITON_PASS_PLUGIN_PATH"}  # hooks: recorded by digest
    return set(CODEGEN_ENV) | set(CLEARED_ENV) | (triton_env_vars() - plugin)


def ignored_from_shell(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Variables set in the builder's shell that the build will ignore (for one warning, not one per worker)."""
    environ = os.environ if environ is None else environ
    # Known names only: asking Triton for its list would import it, and this runs before Triton may load.
    names = set(CODEGEN_ENV) | set(CLEARED_ENV)
    return {k: environ[k] for k in sorted(names) if k in environ}


def shell_warning(environ: Mapping[str, str] | None = None) -> str | None:
    ignored = ignored_from_shell(environ)
    if not ignored:
        return None
    listed = ", ".join(f"{k}={v}" for k, v in ignored.items())
    where = (
        "; Triton's cache for builds is <karchive cache>/triton-build ($KARCHIVE_CACHE_DIR)"
        if {"TRITON_CACHE_DIR", "TRITON_HOME"} & ignored.keys()
        else ""
    )
    return (
        f"ignoring {listed} from the environment: a build applies only its spec's [archive] env table "
        f"(spec/BUILD.md, 'Environment'), so the result does not depend on the shell{where}"
    )


def validate_env(env: Any, where: str = "env", path: str | None = None) -> dict[str, str]:
    """The ``[archive] env`` table (or a recorded ``provenance.build.env``) as a clean str -> str map. ``path``:
    the spec file it is from, for the error (None: a recorded env, or a request made without a spec file)."""
    if env is None:
        return {}
    if not isinstance(env, dict):
        raise SpecFileError(f'{where} must be a table of NAME = "value"', path=path)
    out: dict[str, str] = {}
    for name, value in env.items():
        if name not in CODEGEN_ENV:
            hint = (
                " (karchive always passes enable_fp_fusion; set that option instead)"
                if name == "TRITON_DEFAULT_FP_FUSION"
                else ""
            )
            raise SpecFileError(
                f"{where}: {name!r} cannot be set by a build{hint}; settable: {sorted(CODEGEN_ENV)}", path=path
            )
        if isinstance(value, bool):
            value = "1" if value else "0"
        elif isinstance(value, int):
            value = str(value)
        if not isinstance(value, str) or len(value) > _MAX_VALUE or "\0" in value:
            raise SpecFileError(f"{where}: {name} must be a string of at most {_MAX_VALUE} characters", path=path)
        out[name] = value
    return dict(sorted(out.items()))


def cache_root() -> str:
    """``<karchive cache>/triton-build``: karchive's own Triton cache for builds (safe to delete)."""
    from ...core.paths import BUILD_CACHE, cache_dir

    return os.path.join(os.path.abspath(cache_dir()), BUILD_CACHE)


def check_cache_root() -> str:
    """:func:`cache_root`, created and proved writable before anything compiles: an unusable cache would
    otherwise fail every variant alike, one compiler traceback each. ``CacheError`` names the directory."""
    from ...core.destination import unwritable
    from ...errors import CacheError

    root = cache_root()
    why: str | None
    try:
        os.makedirs(root, exist_ok=True)
    except OSError as exc:
        above = os.path.dirname(root)
        while above != os.path.dirname(above) and not os.path.lexists(above):
            above = os.path.dirname(above)
        # mkdir in /proc says "No such file or directory" of a directory that exists: say what is true
        why = (unwritable(above) if os.path.isdir(above) else None) or f"cannot create it: {exc.strerror or exc}"
    else:
        why = unwritable(root)
    if why:
        raise CacheError(
            f"the build cache {root} cannot be used ({why}); set KARCHIVE_CACHE_DIR to a writable directory", path=root
        )
    return root


def cache_namespace(names: list[str], env: Mapping[str, str]) -> str:
    """A directory name that changes whenever an artifact compiled under it could differ in its names."""
    from ... import __version__
    from ...core.jsonio import canonical_json
    from .canonical import NAMING_REVISION, SCHEME

    desc = {
        "karchive": __version__,
        "scheme": SCHEME,
        "naming": NAMING_REVISION,
        "names": sorted(names),
        "env": dict(env),
    }
    return hashlib.sha256(canonical_json(desc)).hexdigest()[:32]


@contextmanager
def _empty_cwd() -> Iterator[None]:
    here = os.getcwd()
    empty = tempfile.mkdtemp(prefix="karchive-cwd-")
    os.chdir(empty)
    try:
        yield
    finally:
        os.chdir(here)
        shutil.rmtree(empty, ignore_errors=True)


@contextmanager
def _private_temp(cache_dir: str) -> Iterator[None]:
    """Triton's temporary files in a directory of this compile's own, removed afterwards whatever happens.

    Triton 3.9 writes the PTX, the ptxas log and the cubin as ``NamedTemporaryFile(delete=False)`` in the
    system temp directory and removes them only on success, and its cache writes go through
    ``tmp.pid_<pid>_<uuid>`` directories beside the entry: a Ctrl-C (or a ptxas failure) left both behind.
    ``tempfile.tempdir`` and ``TMPDIR`` (ptxas's own temporaries) point here for the compile, which holds
    :data:`COMPILE_LOCK`; the cache's ``tmp.pid_`` directories of this process are removed after it.
    """
    private = tempfile.mkdtemp(prefix="karchive-tmp-")
    saved_dir, saved_env = tempfile.tempdir, os.environ.get("TMPDIR")
    tempfile.tempdir = private
    os.environ["TMPDIR"] = private
    try:
        yield
    finally:
        tempfile.tempdir = saved_dir
        if saved_env is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = saved_env
        shutil.rmtree(private, ignore_errors=True)
        import glob

        for stale in glob.glob(os.path.join(glob.escape(cache_dir), "*", f"tmp.pid_{os.getpid()}_*")):
            shutil.rmtree(stale, ignore_errors=True)


def check_import_time_state(backend: str, env: Mapping[str, str]) -> None:
    """Refuse to compile where Triton froze a shell variable into a default when it was imported.

    ``CUDAOptions.ptx_options`` defaults to ``PTXAS_OPTIONS`` as it was when Triton was imported;
    karchive's CLI and build workers clear it before importing Triton, but a library caller's
    process may have imported Triton with it set.
    """
    if backend != "cuda":
        return
    try:
        from triton.backends.nvidia.compiler import CUDAOptions
    except ImportError:
        return
    field = getattr(CUDAOptions, "__dataclass_fields__", {}).get("ptx_options")
    baked = getattr(field, "default", None)
    if baked:
        raise CompileError(
            f"this process imported Triton while PTXAS_OPTIONS={baked!r} was set, and Triton made it the default "
            "of every CUDA compile; karchive builds do not depend on the shell, so unset it before Triton is "
            "imported (the karchive CLI and build workers with -j > 1 do this themselves)",
            variant=None,
        )  # the process's state: every variant alike


def strip_shell(environ: MutableMapping[str, str] | None = None) -> None:
    """Remove every controlled variable from ``environ`` (default: this process's, before Triton loads)."""
    target = os.environ if environ is None else environ
    names = set(CODEGEN_ENV) | set(CLEARED_ENV)
    for k in list(target):
        if k in names:
            target.pop(k, None)


#: Held around every compile in this process. The environment, Triton's knobs and the working directory
#: that :func:`compile_environment` sets are process-wide, so two threads compiling at once would see
#: each other's settings; reentrant because a compile may probe a target (toolchain.py) inside it.
COMPILE_LOCK = threading.RLock()


@contextmanager
def compile_environment(env: Mapping[str, str], cache_dir: str, *, always_compile: bool = False) -> Iterator[None]:
    """Apply exactly ``env`` and the cache ``cache_dir`` for the compiles inside; restore everything after.

    Knob values set from Python (``knobs.compilation.disable_line_info = True``) override the
    environment in Triton, so those of controlled variables are dropped for the duration as well.
    The compile also runs in an empty working directory: ptxas resolves a PTX ``.file`` name against
    the working directory and, if a file is there, writes its mtime and size into the cubin's line
    table (seen with the sm_80 ptxas and a ``kernels.py`` in the cwd). Changing directory is process-
    wide, which is why karchive compiles one variant at a time per process.
    """
    from triton import knobs

    controlled = controlled_names() | set(env)
    saved = {k: os.environ.get(k) for k in controlled}
    groups = [
        getattr(knobs, g) for g in ("cache", "compilation", "language", "nvidia", "amd", "runtime") if hasattr(knobs, g)
    ]
    with ExitStack() as stack:
        for group in groups:
            stack.enter_context(group.scope())
        try:
            for k in controlled:
                os.environ.pop(k, None)
            os.environ.update(env)
            for group in groups:
                for attr, desc in group.knob_descriptors.items():
                    if getattr(desc, "key", None) in controlled:
                        group.__dict__.pop(attr, None)
            os.makedirs(cache_dir, exist_ok=True)
            knobs.cache.dir = cache_dir
            knobs.compilation.always_compile = always_compile
            stack.enter_context(_empty_cwd())
            stack.enter_context(_private_temp(cache_dir))
            yield
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
