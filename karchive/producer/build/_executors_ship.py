"""Compile tasks that carry their own sources, for workers that share no filesystem with the driver.

The driver has each kernel loaded (it loads them anyway to validate the spec) and ships with every
task the text of the modules the compile imports:

- the modules defining the JIT functions the kernel reaches, under their canonical names
  (:func:`karchive.producer.compile.canonical.module_sources`: the set ``provenance.build.sources`` records);
- the plain Python modules of the same source tree that the driver has loaded (a config module the
  kernel module imports, a package's ``__init__``): a worker could not import them otherwise.

A worker imports them from that text through :class:`karchive.producer.build.rebuild.ArchiveSourceFinder`,
the finder ``karchive rebuild`` uses to compile an archive's own sources, so the compile sees the
same modules under the same canonical names as a local build and returns the same bytes; the worker
never reads the driver's checkout. Installed packages (site-packages, the standard library, Triton,
karchive itself) do not travel: workers need them installed at the same versions
(docs/build-at-scale.md), and the build checks each worker's toolchain against the driver's.
"""

from __future__ import annotations

import functools
import os
import sys
import sysconfig
import time
from dataclasses import dataclass, replace
from types import ModuleType
from typing import Any

from ... import __version__
from ...errors import CompileError, KarchiveError
from ..compile.aot import VariantRequest, compile_variant, toolchain_versions
from ..compile.buildenv import strip_shell
from ..compile.canonical import module_sources, name_for_module
from ..compile.describe import CompiledVariant
from ..compile.kernel_ref import load_kernel, split_ref

#: Top-level packages that never travel: the toolchain and karchive are installed on every worker.
_NEVER_SHIPPED = ("triton", "karchive")


@dataclass(frozen=True)
class ShippedModule:
    """One module's source as it travels to a worker."""

    module: str  # import name
    name: str  # canonical file name (pkg/ops.py, pkg/__init__.py)
    text: str
    is_package: bool


@dataclass(frozen=True)
class ShippedKernel:
    """What a worker needs to import one kernel: the reference by import name, and the module texts."""

    kernel_ref: str  # "module:attr"
    modules: tuple[ShippedModule, ...]

    def size(self) -> int:
        return sum(len(m.text) for m in self.modules)


def _installed_dirs() -> list[str]:
    """Directories of installed code (stdlib, site-packages): modules there are expected on the workers."""
    dirs = set()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            dirs.add(os.path.realpath(path))
    return sorted(dirs)


def _under(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


def _import_root(module: str, file: str, is_package: bool) -> str:
    """The directory ``module`` was imported from (its sys.path entry): ``pkg.ops`` in ``/src/pkg/ops.py`` -> ``/src``."""
    root = os.path.dirname(os.path.realpath(file))
    for _ in range(module.count(".") + (1 if is_package else 0)):
        root = os.path.dirname(root)
    return root


def _module_text(module: ModuleType) -> str | None:
    loader = getattr(module, "__loader__", None)
    try:
        text = loader.get_source(module.__name__) if loader is not None and hasattr(loader, "get_source") else None
    except (ImportError, OSError):
        return None
    return text if isinstance(text, str) else None


def _shippable(name: str, module: Any, roots: list[str], installed: list[str]) -> tuple[str, bool] | None:
    """(real file, is package) when ``module`` is a plain-Python module of one of ``roots`` that must travel."""
    if name == "__main__" or name.split(".")[0] in _NEVER_SHIPPED or not isinstance(module, ModuleType):
        return None
    file = getattr(module, "__file__", None)
    if not isinstance(file, str) or not file.endswith(".py") or not os.path.isabs(file):
        return None  # extension modules, namespace packages, modules not loaded from a file
    real = os.path.realpath(file)
    if not _under(real, roots) or _under(real, installed):
        return None
    return real, hasattr(module, "__path__")


def ship_kernel(kernel_ref: str, base_dir: str | None) -> ShippedKernel:
    """The kernel's modules as text, for a worker without the driver's files; see the module docstring."""
    fn, module = load_kernel(kernel_ref, base_dir)
    attr = split_ref(kernel_ref)[1]
    jit = module_sources(fn)
    if not any(s.module == module.__name__ for s in jit):
        raise CompileError(
            f"{kernel_ref}: cannot find the source of module {module.__name__!r} to send to the workers", variant=None
        )  # a kernel's sources, before any variant is compiled
    shipped: dict[str, ShippedModule] = {}
    roots: set[str] = set()
    for s in jit:
        is_pkg = s.name == name_for_module(s.module, True)
        shipped[s.module] = ShippedModule(s.module, s.name, s.text, is_pkg)
        file = getattr(sys.modules.get(s.module), "__file__", None)
        if isinstance(file, str) and os.path.isabs(file):
            roots.add(_import_root(s.module, file, is_pkg))
    installed = _installed_dirs()
    for name, mod in sorted(sys.modules.items()):
        if name in shipped:
            continue
        found = _shippable(name, mod, sorted(roots), installed)
        if found is None:
            continue
        text = _module_text(mod)
        if text is None:
            raise CompileError(
                f"{kernel_ref}: module {name!r} ({found[0]}) is part of the kernel's source tree but "
                "its source cannot be read to send it to the workers",
                variant=None,
            )
        shipped[name] = ShippedModule(name, name_for_module(name, found[1]), text, found[1])
    # By name alone: kernels of one checkout then carry equal module sets, which an executor sends once.
    return ShippedKernel(f"{module.__name__}:{attr}", tuple(sorted(shipped.values(), key=lambda m: m.module)))


def ship_requests(requests: list[VariantRequest]) -> tuple[list[VariantRequest], dict[str, ShippedKernel]]:
    """Requests rewritten to import by module name (no ``base_dir``), and the modules each kernel needs.

    Returns ``(requests, kernels)``, ``kernels`` keyed by the rewritten ``kernel_ref``. Kernels of one
    source tree carry the same modules, so an executor sends each distinct module set once and refers
    to it from every task.
    """
    by_ref: dict[tuple[str, str | None], ShippedKernel] = {}
    kernels: dict[str, ShippedKernel] = {}
    out = []
    for req in requests:
        k = (req.kernel_ref, req.base_dir)
        if k not in by_ref:
            by_ref[k] = ship_kernel(req.kernel_ref, req.base_dir)
        shipped = by_ref[k]
        prev = kernels.setdefault(shipped.kernel_ref, shipped)
        if prev.modules != shipped.modules:
            raise CompileError(
                f"two kernels of this build import as {shipped.kernel_ref!r} from different sources "
                f"({req.kernel_ref} and another): rename one module so workers can tell them apart",
                variant=None,
            )
        out.append(replace(req, kernel_ref=shipped.kernel_ref, base_dir=None))
    return out, kernels


@functools.lru_cache(maxsize=1)
def toolchain_identity() -> dict[str, str | None]:
    """This process's toolchain as ``produced_by`` records it: the driver compares it with its own."""
    out = {k: (None if v is None else str(v)) for k, v in toolchain_versions().items()}
    out["karchive"] = __version__
    return out


#: The module set this worker process has imported, and the finder serving it: consecutive tasks of one
#: checkout share it, as a local worker process keeps a kernel module imported between variants.
_IMPORTED: tuple[tuple[ShippedModule, ...], Any] | None = None


def _import_shipped(modules: tuple[ShippedModule, ...]) -> None:
    """Serve ``modules`` to imports from now on (replacing another set, and whatever it imported)."""
    global _IMPORTED
    from .rebuild import ArchiveSourceFinder

    if _IMPORTED is not None:
        if _IMPORTED[0] == modules:
            return
        _IMPORTED[1].uninstall()
        _IMPORTED = None
    finder = ArchiveSourceFinder({m.module: (m.name, m.text, m.is_package) for m in modules})
    for mod in finder.modules:  # same-named modules of this worker (another checkout): never mixed in
        sys.modules.pop(mod, None)
    finder.install()
    _IMPORTED = (modules, finder)


def compile_shipped(
    request: VariantRequest, modules: tuple[ShippedModule, ...]
) -> tuple[CompiledVariant | None, str | None, float]:
    """Worker side: import the shipped modules by their canonical names and compile."""
    start = time.perf_counter()
    if "triton" not in sys.modules:
        strip_shell()  # before Triton is imported: it freezes some variables (PTXAS_OPTIONS) into defaults
    try:
        _import_shipped(modules)
        return compile_variant(request), None, time.perf_counter() - start
    except KarchiveError as exc:
        return None, str(exc), time.perf_counter() - start
    except Exception as exc:  # noqa: BLE001 - a shipped module failed to import, or the compiler crashed
        return None, f"{request.label()}: {type(exc).__name__}: {exc}", time.perf_counter() - start
