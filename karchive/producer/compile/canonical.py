"""Canonical source names: what an archive's source locations say instead of machine paths.

Triton names a kernel's source file by absolute path, the Python function's ``co_filename``, and the
code generator passes it to every location it creates (``compiler/code_generator.py``:
``builder.set_loc`` / ``create_loc``). Where it reads it depends on the release: Triton 3.4 to 3.7
read ``fn.fn.__code__.co_filename`` at each compile (``runtime/jit.py``: ``get_jit_fn_file_line``),
Triton 3.8 and later copy it into ``JITFunction.file_name`` when the function is decorated and read
that attribute. From there the path
reaches TTIR/TTGIR ``loc(...)``, LLVM ``DIFile``, PTX ``.file`` and the DWARF line tables of the
cubin/hsaco, and the helpers the kernel calls (``tl.max`` lives in ``triton/language/standard.py``)
bring the Triton install's path too. Triton's cache key hashes source text, not the file name, so a
cache hit can also return artifacts compiled from another checkout.

karchive names every source file by its **canonical name**, the module's import name as a relative
path (``kernels.py``, ``pkg/ops.py``, ``pkg/__init__.py``, ``triton/language/standard.py``; a file
given by path is imported as a top-level module named after the file), and points both places at it
(``file_name`` and the code object's ``co_filename``) for the duration of one compile
(``-ffile-prefix-map`` for Triton).
Lines and columns are untouched, so ``nvdisasm -g``, ``cuobjdump`` and profilers still map
instructions to ``kernels.py:27``. The rules are normative: spec/FORMAT.md §12.
"""

from __future__ import annotations

import ast
import inspect
import linecache
import os
import re
import sys
import tempfile
import weakref
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from types import FunctionType, ModuleType
from typing import Any

from ...core import pysource

__all__ = [
    "Canonicalised",
    "NAMING_REVISION",
    "SCHEME",
    "SourceModule",
    "TOOLCHAIN_MODULES",
    "canonical_locations",
    "find_machine_paths",
    "install_independent_keys",
    "jit_callable_type",
    "kernel_name",
    "machine_roots",
    "module_sources",
    "name_for_module",
    "ptx_debug_bytes",
    "reached_functions",
    "source_file",
]

#: Version of the naming rules; it enters the build cache namespace (buildenv.py) and provenance.build.
SCHEME = 1

#: Revision of how the names are put in place (the rules are :data:`SCHEME`'s). It enters the build cache
#: namespace only: revision 1 set ``file_name`` alone, which Triton 3.5-3.7 never read, so its cache entries
#: for those releases hold absolute paths and a build that hit them would be refused (issue 19).
NAMING_REVISION = 2

#: Module-name prefixes that belong to the toolchain: their sources are never stored in an archive
#: (the toolchain version is recorded instead), but their locations are canonicalised all the same.
TOOLCHAIN_MODULES = ("triton",)


@dataclass(frozen=True)
class SourceModule:
    """A module whose JIT functions a kernel uses: what a rebuild must import, and under which names."""

    module: str  # import name, e.g. "kernels" or "pkg.ops"
    name: str  # canonical file name, e.g. "kernels.py" or "pkg/ops.py"
    text: str  # the module's source, exactly as Triton read it


def name_for_module(module: str, is_package: bool = False) -> str:
    """``pkg.ops`` -> ``pkg/ops.py``; a package's own file -> ``pkg/__init__.py``."""
    base = module.replace(".", "/")
    return f"{base}/__init__.py" if is_package else f"{base}.py"


def _is_toolchain(module: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in TOOLCHAIN_MODULES)


def _real(path: str) -> str:
    return os.path.normcase(os.path.realpath(path))


def _module_file(module: ModuleType) -> str | None:
    f = getattr(module, "__file__", None)
    return f if isinstance(f, str) and os.path.isabs(f) else None


def source_file(fn: Any) -> str | None:
    """The file name Triton writes into ``fn``'s locations, read where this Triton release reads it.

    Triton >= 3.8: the ``file_name`` attribute. Triton 3.4 to 3.7 have no such attribute and read the
    Python function's ``__code__.co_filename`` at each compile.
    """
    name = getattr(fn, "file_name", None)
    if isinstance(name, str):
        return name
    code = getattr(getattr(fn, "fn", None), "__code__", None)
    name = getattr(code, "co_filename", None)
    return name if isinstance(name, str) else None


class _Renamed:
    """What one rename changed on a JIT function, so it can be put back exactly."""

    __slots__ = ("fn", "attr", "pyfn", "code")

    def __init__(self, fn: Any, new: str) -> None:
        self.fn = fn
        self.attr = getattr(fn, "file_name", None)
        pyfn = getattr(fn, "fn", None)
        self.pyfn = pyfn if isinstance(pyfn, FunctionType) else None
        self.code = self.pyfn.__code__ if self.pyfn is not None else None
        if isinstance(self.attr, str):  # Triton >= 3.8 reads the attribute
            fn.file_name = new
        if self.pyfn is not None and self.code is not None and self.code.co_filename != new:
            # Triton 3.4-3.7 read the code object's file name; a copy with another name changes nothing else
            # (the function's behaviour, closure and line numbers are the same objects).
            self.pyfn.__code__ = self.code.replace(co_filename=new)

    def restore(self) -> None:
        if isinstance(self.attr, str):
            self.fn.file_name = self.attr
        if self.pyfn is not None and self.code is not None:
            self.pyfn.__code__ = self.code


class _Namer:
    """Canonical names for absolute file paths, looked up through the modules Python has loaded."""

    def __init__(self) -> None:
        self._index: dict[str, tuple[str, bool]] | None = None

    def _lookup(self, real: str) -> tuple[str, bool] | None:
        if self._index is None:
            index: dict[str, tuple[str, bool]] = {}
            for mod_name, module in sorted(sys.modules.items()):
                f = _module_file(module) if isinstance(module, ModuleType) and mod_name != "__main__" else None
                if f is not None:
                    # Deterministic choice when one file is loaded under two names: the shorter name.
                    prev = index.get(_real(f))
                    cand = (mod_name, hasattr(module, "__path__"))
                    if prev is None or (len(cand[0]), cand[0]) < (len(prev[0]), prev[0]):
                        index[_real(f)] = cand
            self._index = index
        return self._index.get(real)

    def module_of(self, fn: Any) -> tuple[str, bool] | None:
        """(import name, is package) of the module that defines ``fn``, if its file is that module's."""
        file_name = source_file(fn)
        attr = getattr(fn, "__module__", None)
        mod_name = attr if isinstance(attr, str) else None
        module = sys.modules.get(mod_name) if mod_name is not None else None
        if not isinstance(file_name, str):
            return None
        if not os.path.isabs(file_name):
            # Already canonical: a module a rebuild loaded from an archive under its canonical name.
            if mod_name is not None and module is not None and getattr(module, "__file__", None) == file_name:
                return mod_name, hasattr(module, "__path__")
            return None
        if mod_name is not None and module is not None and mod_name != "__main__":
            f = _module_file(module)
            if f is not None and _real(f) == _real(file_name):
                return mod_name, hasattr(module, "__path__")
        return self._lookup(_real(file_name))

    def name(self, file_name: str, fn: Any = None) -> str:
        """The canonical name of ``file_name`` (unchanged if it is not an absolute path)."""
        if not os.path.isabs(file_name):
            return file_name
        found = self.module_of(fn) if fn is not None else self._lookup(_real(file_name))
        if found is None:  # __main__ or a file no loaded module owns: the base name is all that is portable
            return os.path.basename(file_name)
        return name_for_module(*found)


def kernel_name(fn: Any) -> str:
    """The name a kernel is filed under in an archive: ``module:qualname`` (spec/FORMAT.md, "Kernel names").

    Libraries reuse ``__name__`` across modules (two ``add_kernel``), so the module and the qualified
    name keep them apart; Triton names a JIT function the same way (``JITFunction(module:qualname)``).
    The module is its canonical import name (:class:`_Namer`, the name the kernel's source is stored
    under), never a path, so the name is the same on every checkout: a build-spec file ``ops/kernels.py``
    is module ``kernels``. A kernel defined in a script (``__main__``) is named after the script's file
    when that is an identifier (``train.py`` -> ``train``), else ``__main__``. A name outside the grammar
    (a non-ASCII identifier) falls back to the bare ``__name__``, and then to an error.
    """
    try:
        hit = _KERNEL_NAMES.get(fn)
    except TypeError:  # not weak-referenceable or hashable: compute every time
        hit = None
    if hit is not None:
        return hit
    name = _kernel_name(fn)
    try:
        _KERNEL_NAMES[fn] = name
    except TypeError:
        pass
    return name


#: kernel_name per JIT function (capture asks on every new autotune/heuristics record; the module
#: lookup can walk sys.modules).
_KERNEL_NAMES: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


def _kernel_name(fn: Any) -> str:
    from ...errors import UnsupportedKernelError
    from ...format.names import is_kernel_name

    inner = getattr(fn, "fn", fn)
    short = getattr(fn, "__name__", None) or getattr(inner, "__name__", None)
    qualname = getattr(inner, "__qualname__", None) or short
    found = _Namer().module_of(fn)
    module = found[0] if found is not None else getattr(fn, "__module__", None)
    if module in (None, "__main__"):
        file_name = getattr(fn, "file_name", None) or getattr(getattr(inner, "__code__", None), "co_filename", "")
        stem = os.path.splitext(os.path.basename(str(file_name)))[0]
        module = stem if stem.isidentifier() and stem.isascii() else "__main__"
    for candidate in (f"{module}:{qualname}", short):
        if is_kernel_name(candidate):
            return str(candidate)
    raise UnsupportedKernelError(
        f"kernel {short!r} of module {module!r}: neither {module}:{qualname} nor "
        f"{short!r} is a kernel name an archive can hold (ASCII identifiers)",
        kernel=str(short),
    )


def jit_callable_type() -> type | None:
    try:
        from triton.runtime import jit
    except ImportError:
        return None
    return getattr(jit, "JITCallable", None) or getattr(jit, "JITFunction", None)


def _unwrap(obj: Any, jit_type: type) -> Any:
    """Autotuner/Heuristics wrap a JITFunction in ``.fn`` (possibly several times)."""
    for _ in range(8):
        if isinstance(obj, jit_type):
            return obj
        nxt = getattr(obj, "fn", None) if not isinstance(obj, (type, ModuleType)) else None
        if nxt is None or nxt is obj:
            return None
        obj = nxt
    return None


def _referenced_values(fn: Any) -> Iterator[Any]:
    """Globals, nonlocals and attribute chains (``mod.helper``) a JIT function's source names."""
    try:
        tree = pysource.parse(fn.src if isinstance(getattr(fn, "src", None), str) else inspect.getsource(fn.fn))
    except (OSError, TypeError, SyntaxError, AttributeError):
        return
    scope = dict(getattr(fn, "__globals__", {}) or {})
    try:
        scope.update(inspect.getclosurevars(fn.fn).nonlocals)
    except (TypeError, ValueError, AttributeError):
        pass
    for node in ast.walk(tree):
        chain: list[str] = []
        while isinstance(node, ast.Attribute):
            chain.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name) or node.id not in scope:
            continue
        value = scope[node.id]
        yield value
        for attr in reversed(chain):
            if not isinstance(value, ModuleType):  # attribute access on arbitrary objects could run code
                break
            value = getattr(value, attr, None)
            if value is None:
                break
            yield value


def reached_functions(kernel: Any, extra_values: Iterable[Any] = ()) -> list[Any]:
    """The kernel and every JIT function it reaches by name (the same closure Triton's cache key covers)."""
    jit_type = jit_callable_type()
    if jit_type is None:
        return []
    seen: dict[int, Any] = {}
    todo = [kernel, *extra_values]
    while todo:
        fn = _unwrap(todo.pop(), jit_type)
        if fn is None or id(fn) in seen:
            continue
        seen[id(fn)] = fn
        if not _is_toolchain(str(getattr(fn, "__module__", ""))):
            todo.extend(_referenced_values(fn))
    return list(seen.values())


def _module_level_functions(modules: Iterable[ModuleType], jit_type: type) -> Iterator[Any]:
    for module in modules:
        for value in list(vars(module).values()):
            fn = _unwrap(value, jit_type)
            if fn is not None:
                yield fn


@dataclass
class Canonicalised:
    """What :func:`canonical_locations` did: the names it gave and the sources a rebuild needs."""

    names: list[str]  # every canonical name given (sorted)
    sources: list[SourceModule]  # non-toolchain modules defining reached JIT functions, kernel's first


def _modules_and_sources(
    kernel: Any, reached: list[Any], namer: _Namer, jit_type: type
) -> tuple[dict[str, ModuleType], list[SourceModule]]:
    """Modules whose JIT functions get canonical names, and the non-Triton ones a rebuild must import."""
    kernel_fn = _unwrap(kernel, jit_type)
    kernel_module = namer.module_of(kernel_fn) if kernel_fn is not None else None
    modules: dict[str, ModuleType] = {
        n: m for n, m in sorted(sys.modules.items()) if isinstance(m, ModuleType) and _is_toolchain(n)
    }
    sources: dict[str, SourceModule] = {}
    for fn in reached:
        found = namer.module_of(fn)
        if found is not None and found[0] in sys.modules:
            modules.setdefault(found[0], sys.modules[found[0]])
            if not _is_toolchain(found[0]) and found[0] not in sources:
                sources[found[0]] = SourceModule(
                    found[0], name_for_module(*found), _source_of(sys.modules[found[0]], found[0])
                )
    first = kernel_module[0] if kernel_module is not None else None
    return modules, sorted(sources.values(), key=lambda s: (s.module != first, s.module))


def module_sources(kernel: Any) -> list[SourceModule]:
    """The modules a rebuild of ``kernel`` imports (kernel's module first), as ``provenance.build.sources``.

    For callers that describe a compile they did not run (JIT capture): nothing is renamed.
    """
    jit_type = jit_callable_type()
    if jit_type is None:
        return []
    return _modules_and_sources(kernel, reached_functions(kernel), _Namer(), jit_type)[1]


@contextmanager
def canonical_locations(kernel: Any, extra_values: Iterable[Any] = ()) -> Iterator[Canonicalised]:
    """Point the source file name of every JIT function a compile of ``kernel`` can reach at its canonical name.

    Renamed: the functions the kernel reaches by name, every module-level JIT function of their
    modules, and those of Triton's own modules (tensor methods such as ``x.sum()`` resolve there and
    cannot be found from the source); in both places a Triton release may read it (:func:`source_file`).
    Everything is restored on exit, so JIT calls made later in the same process see Triton's usual
    absolute paths.
    """
    jit_type = jit_callable_type()
    namer = _Namer()
    renamed: list[_Renamed] = []
    names: set[str] = set()
    try:
        if jit_type is None:
            yield Canonicalised([], [])
            return
        reached = reached_functions(kernel, extra_values)
        modules, sources = _modules_and_sources(kernel, reached, namer, jit_type)
        done: set[int] = set()
        for fn in [*reached, *_module_level_functions(modules.values(), jit_type)]:
            old = source_file(fn)
            if id(fn) in done or old is None:
                continue
            done.add(id(fn))
            new = namer.name(old, fn)
            renamed.append(_Renamed(fn, new))  # sets only what differs; restore puts back the same objects
            names.add(new)
        _forget_lines(names)
        yield Canonicalised(sorted(names), sources)
    finally:
        for r in reversed(renamed):
            r.restore()
        _forget_lines(names)


def _forget_lines(names: Iterable[str]) -> None:
    """Drop :mod:`linecache` entries under canonical names.

    Whatever asks :mod:`inspect` for a renamed function's source during a compile (Triton 3.4's
    ``get_jit_fn_file_line`` does) finds it through the module's loader under the canonical (relative)
    name, and linecache keeps it by that name, which two different modules with one name (two archives
    rebuilt in one process) would otherwise share.
    """
    for name in names:
        if not os.path.isabs(name):
            linecache.cache.pop(name, None)


def _source_of(module: ModuleType, name: str) -> str:
    try:
        return inspect.getsource(module)
    except (OSError, TypeError) as exc:
        from ...errors import CompileError

        raise CompileError(
            f"cannot read the source of module {name!r}, which defines a JIT function the kernel uses: {exc}",
            variant=None,
        ) from exc  # a kernel's sources: every variant alike


# --- Triton's cache key, install-independent ----------------------------------------------------
#: One target per backend: their option classes' ``hash()`` enters Triton's cache key (metadata ``hash``,
#: provenance.triton_hash).
_BACKEND_PROBES = (("cuda", 90, 32), ("hip", "gfx942", 64))


def _content_hash(self: Any) -> str:
    """An options hash with each extern library named by its content (what Triton 3.9's ``HIPOptions`` does)."""
    import hashlib

    from .variant_key import file_sha256

    fields = dict(self.__dict__)
    libs = fields.get("extern_libs") or ()
    fields["extern_libs"] = tuple(
        (k, file_sha256(v) if isinstance(v, str) and os.path.isfile(v) else v)
        for k, v in (libs.items() if isinstance(libs, dict) else libs)
    )
    key = "_".join(f"{name}-{value}" for name, value in sorted(fields.items()))
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def _hash_names_paths(options: Any) -> bool:
    """Does ``options.hash()`` change when an extern library's path changes but its bytes do not?

    Triton 3.5-3.8's ``HIPOptions.hash`` joins the extern libraries' absolute paths (ocml.bc and ockl.bc in
    Triton's own package), so Triton's cache key differed between two installs of one release at two
    prefixes; Triton 3.9 and every ``CUDAOptions`` hash the file's content instead.
    """
    import dataclasses

    if "extern_libs" not in getattr(options, "__dataclass_fields__", {}):  # not a dataclass, or no extern libraries
        return False
    with tempfile.TemporaryDirectory(prefix="karchive-libprobe-") as tmp:
        paths = [os.path.join(tmp, d, "lib.bc") for d in ("one", "two")]
        for path in paths:
            os.makedirs(os.path.dirname(path))
            with open(path, "wb") as fh:
                fh.write(b"karchive")
        try:
            variants: list[Any] = [dataclasses.replace(options, extern_libs=(("lib", p),)) for p in paths]
            hashes = {v.hash() for v in variants}
        except Exception:  # noqa: BLE001 - options this check cannot rebuild: leave Triton's hash as it is
            return False
    return len(hashes) > 1


_PATH_HASHING: dict[tuple, type | None] = {}


def _path_hashing_classes() -> list[type]:
    """This Triton's backend option classes whose hash names paths (found once per process)."""
    found = []
    for probe in _BACKEND_PROBES:
        if probe not in _PATH_HASHING:
            cls: type | None = None
            try:
                from triton.backends.compiler import GPUTarget
                from triton.compiler.compiler import make_backend

                # enable_fp_fusion as every karchive compile passes it (else Triton 3.9 warns about its default)
                options = make_backend(GPUTarget(*probe)).parse_options({"enable_fp_fusion": True})
                cls = type(options) if _hash_names_paths(options) else None
            except Exception:  # noqa: BLE001 - a backend this Triton lacks or cannot set up: nothing to change
                cls = None
            _PATH_HASHING[probe] = cls
        if _PATH_HASHING[probe] is not None:
            found.append(_PATH_HASHING[probe])
    return [c for c in found if c is not None]


@contextmanager
def install_independent_keys() -> Iterator[None]:
    """Make Triton's cache key of the compiles inside independent of where Triton is installed.

    Where a backend's options hash names extern libraries by path (:func:`_hash_names_paths`), its ``hash``
    is replaced for the duration by :func:`_content_hash`, so the ``hash`` Triton writes into the metadata
    (and karchive into ``provenance.triton_hash``) is the same from every install of that release. Such a
    variant's hash is then not the one a plain JIT of the same release computes, which only ever matched
    where Triton sits at the same path (docs/reproducibility.md). Held under the compile lock: the class
    attribute is process-wide.
    """
    patched: list[tuple[type, Any]] = []
    try:
        for cls in _path_hashing_classes():
            patched.append((cls, cls.__dict__["hash"]))
            setattr(cls, "hash", _content_hash)  # noqa: B010 - the class, for the duration of this compile
        yield
    finally:
        for cls, original in reversed(patched):
            setattr(cls, "hash", original)  # noqa: B010


# --- checking the result -------------------------------------------------------------------------
_GENERIC_DIRS = frozenset(
    {
        "/tmp",
        "/var",
        "/usr",
        "/opt",
        "/home",
        "/srv",
        "/mnt",
        "/private",
        "/Users",
        "/var/tmp",
        "/private/tmp",
        "/private/var",
    }
)


def machine_roots(extra: Iterable[str] = ()) -> list[str]:
    """Directories whose names must never appear in an archive: where this machine keeps things.

    The home and working directories, the temp directory, the Python prefix, the directory holding
    Triton, Triton's cache, and any directory the caller adds (e.g. each source file's directory).
    Shared system directories (``/tmp``, ``/usr``, ``/home``) are too generic to search for and are
    skipped; ``/root``, a home of its own, is not.
    """
    roots = {os.path.expanduser("~"), os.getcwd(), tempfile.gettempdir(), sys.prefix, *extra}
    try:
        import triton

        roots.add(os.path.dirname(os.path.dirname(os.path.abspath(triton.__file__))))
        from triton import knobs

        roots.add(os.path.abspath(knobs.cache.dir))
    except Exception:  # noqa: BLE001 - Triton absent: nothing of it can leak
        pass
    out = set()
    for r in roots:
        if not r:
            continue
        for form in (os.path.abspath(r), os.path.realpath(r)):
            form = form.rstrip(os.sep)
            if form and form not in _GENERIC_DIRS:
                out.add(form)
    return sorted(out, key=lambda r: (-len(r), r))


_PTX_B8 = re.compile(rb"^[ \t]*\.b8[ \t]+(\d+)", re.M)


def ptx_debug_bytes(data: bytes) -> bytes:
    """The bytes PTX spells out as ``.b8 N`` lines: its DWARF sections, where ``DW_AT_comp_dir`` hides a path."""
    return bytes(int(n) & 0xFF for n in _PTX_B8.findall(data)) if b".b8" in data else b""


def find_machine_paths(files: Mapping[str, bytes], roots: Iterable[str]) -> list[tuple[str, str, int]]:
    """``(file, root, offset)`` for each file whose bytes contain one of ``roots`` (first hit per file).

    PTX debug sections are also searched decoded (the offset is then -1): a JIT-compiled kernel's
    PTX names its directory only there, as ``.b8 47 .b8 104 ...``.
    """
    needles = [(r, r.encode()) for r in roots if r]
    hits = []
    for label, data in files.items():
        decoded = None
        for root, needle in needles:
            i = data.find(needle)
            if i < 0:
                decoded = ptx_debug_bytes(data) if decoded is None else decoded
                i = -1 if needle in decoded else -2
            if i != -2:
                hits.append((label, root, i))
                break
    return hits
