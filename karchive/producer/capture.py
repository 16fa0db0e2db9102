"""JIT capture: archive every Triton kernel a workload compiles or loads while a capture is active.

::

    with karchive.capture("model-kernels", version="1.0") as cap:
        run_workload()
    cap.save("model-kernels.karc")

Where the kernels come from (Triton >= 3.4, which has ``triton.knobs``):

- ``knobs.compilation.listener`` fires on every ``triton.compile`` (fresh compile or Triton cache hit)
  with the source and the cache files; it runs on the compiling thread.
- ``knobs.runtime.jit_post_compile_hook`` covers async compile mode, where the listener runs on a pool
  thread but the hook runs on the thread that waits for the result.
- ``JITFunction.run`` is wrapped while captures are active, so kernels already in a JIT function's
  in-memory cache (compiled before the capture began) are recorded when launched (``record_launches``).
- ``Autotuner.run`` is wrapped (and ``knobs.autotuning.listener`` chained on 3.8+) to record the chosen
  config per autotune key (:mod:`karchive.producer.autotune`).
- Kernels compiled by other processes (torch.compile's compile workers) are harvested from the Triton
  cache directory at exit: entries created during the capture that no in-process compile produced.

Each capture is bound to the thread that entered it (a thread-local stack), so two threads capturing
different workloads each get only their own kernels. Previously installed listeners and hooks are
chained and restored when the last capture ends.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
import threading
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

from ..errors import CaptureError, UnsupportedKernelError
from .autotune import AutotuneLog, call_args, innermost_jit, tuning_key
from .describe import BINARY_EXT, IR_STAGES, CompiledVariant, describe_variant
from .pack import ArchiveBuilder
from .triton_cache import (
    CacheEntry,
    build_fingerprint,
    cache_dir_name,
    describe_entry,
    entries_in_dir,
    entry_from_group,
    local_cache_dir,
)

F = TypeVar("F", bound=Callable[..., Any])

_tls = threading.local()
#: Cache-dir entry names produced by compiles in this process (any thread) while hooks were installed;
#: harvesting skips them, so only other processes' entries are harvested.
_inprocess_entries: set[str] = set()
_inprocess_lock = threading.Lock()


def _stack() -> list["Capture"]:
    stack = getattr(_tls, "stack", None)
    if stack is None:
        stack = _tls.stack = []
    return stack


def active_captures() -> list["Capture"]:
    """Captures active on the calling thread, outermost first (each once)."""
    seen: list[Capture] = []
    for cap in _stack():
        if cap not in seen:
            seen.append(cap)
    return seen


# --- describing a compile ------------------------------------------------------------------------
def _module_source(fn: Any) -> str | None:
    module = sys.modules.get(getattr(fn, "module", None) or getattr(getattr(fn, "fn", None), "__module__", ""))
    if module is None:
        return None
    try:
        return inspect.getsource(module)
    except (OSError, TypeError):
        return None


def _constexpr_names(fn: Any) -> set[str]:
    params = getattr(fn, "params", None)
    if params is not None:
        return {p.name for p in params if getattr(p, "is_constexpr", False)}
    return {fn.arg_names[i] for i in getattr(fn, "constexprs", [])}


def describe_source(src: Any, entry: CacheEntry, *, origin: str = "capture", include_ir: bool = True,
                    hooks: list[dict] | None = None, provenance_extra: dict | None = None) -> CompiledVariant:
    """Describe a compile from its ``ASTSource`` exactly as AOT describes one: same params, same key."""
    from .aot import pipeline_hooks

    fn = src.fn
    kernel = fn.__name__
    names = list(fn.arg_names)
    signature = dict(src.signature)
    consts: dict[int, Any] = {}
    for path, value in dict(src.constants).items():
        path = (path,) if isinstance(path, int) else path
        if isinstance(path, str):
            path = (names.index(path),)
        if len(path) != 1:
            raise UnsupportedKernelError(f"{kernel}: tuple parameters are not supported by the launch ABI")
        consts[path[0]] = value
    declared_constexpr = _constexpr_names(fn)
    types: dict[str, str] = {}
    constexprs: dict[str, Any] = {}
    equal_to_1: dict[str, str] = {}
    for i, name in enumerate(names):
        typ = signature.get(name, signature.get(i))  # type: ignore[call-overload]
        if not isinstance(typ, str):
            raise UnsupportedKernelError(f"{kernel}: parameter {name!r} has type {typ!r} (tuples are not supported)")
        types[name] = typ
        if typ == "constexpr":
            value = consts.get(i)
            if name not in declared_constexpr and type(value) is int and value == 1:
                equal_to_1[name] = "i32"  # Triton specialised an int argument equal to 1
            constexprs[name] = value
    divisibility: dict[str, int] = {}
    for path, attrs in dict(src.attrs or {}).items():
        path = (path,) if isinstance(path, int) else tuple(path)
        for attr in attrs or []:
            attr_name, attr_value = attr[0], attr[1]
            if attr_name != "tt.divisibility" or len(path) != 1:
                raise UnsupportedKernelError(
                    f"{kernel}: specialisation {attr_name}={attr_value} on argument {path} is not expressible in a "
                    "variant's hints (only tt.divisibility is)")
            divisibility[names[path[0]]] = int(attr_value)
    backend = entry.metadata["target"]["backend"] if isinstance(entry.metadata["target"], dict) \
        else entry.metadata["target"].backend
    asm = {k: v for k, v in entry.read_asm().items() if k in IR_STAGES.get(backend, ()) or k == BINARY_EXT.get(backend)}
    return describe_variant(
        kernel=kernel, param_names=names, param_types=types, constexprs=constexprs, divisibility=divisibility,
        equal_to_1=equal_to_1, metadata=entry.metadata, asm=asm, source_key=fn.cache_key,
        source_text=_module_source(fn), hooks=pipeline_hooks() if hooks is None else hooks, origin=origin,
        include_ir=include_ir, provenance_extra=provenance_extra,
    )


@dataclass
class CaptureEvent:
    """One kernel seen by a capture (for reports and tests)."""

    kernel: str
    key: str | None
    triton_hash: str | None
    how: str  # compiled | cache-hit | launched | async | autotune | harvested
    note: str = ""


# --- the capture object --------------------------------------------------------------------------
class Capture:
    """Records kernels compiled on the entering thread while active; usable as context manager or decorator."""

    def __init__(self, name: str, version: str, *, path: str | os.PathLike | None = None, include_ir: bool = True,
                 record_launches: bool = True, harvest: bool = True, strict: bool = False) -> None:
        if not isinstance(name, str) or not name.strip():
            raise CaptureError("capture needs a non-empty archive name")
        if not isinstance(version, str) or not version.strip():
            raise CaptureError("capture needs a non-empty version string, e.g. version='1.0'")
        self.name = name
        self.version = version
        self.path = path
        self.include_ir = include_ir
        self.record_launches = record_launches
        self.harvest = harvest
        self.strict = strict
        self.variants: dict[str, CompiledVariant] = {}
        self.events: list[CaptureEvent] = []
        self.warnings: list[str] = []
        self.errors: list[str] = []
        self.autotune = AutotuneLog()
        self._hash_to_key: dict[str, str | None] = {}
        self._lock = threading.RLock()
        self._depth: dict[int, int] = {}
        self._snapshot: dict[str, set[str]] = {}

    # -- lifecycle ---------------------------------------------------------------------------------
    def __enter__(self) -> "Capture":
        _HOOKS.acquire()
        try:
            with self._lock:
                if not any(self._depth.values()) and self.harvest:
                    self._snapshot = _snapshot_cache()
                tid = threading.get_ident()
                self._depth[tid] = self._depth.get(tid, 0) + 1
            _stack().append(self)
        except BaseException:
            _HOOKS.release()
            raise
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        stack = _stack()
        for i in range(len(stack) - 1, -1, -1):
            if stack[i] is self:
                del stack[i]
                break
        try:
            with self._lock:
                tid = threading.get_ident()
                self._depth[tid] = self._depth.get(tid, 1) - 1
                last = not any(self._depth.values())
            if last and self.harvest:
                self._harvest()
        finally:
            _HOOKS.release()
        if exc_type is None and last:
            if self.strict and self.errors:
                raise CaptureError(f"capture {self.name!r} hit {len(self.errors)} error(s): " + "; ".join(self.errors))
            if self.path is not None:
                self.save(self.path)

    def __call__(self, fn: F) -> F:
        """Decorator: every call of ``fn`` runs under this capture (and saves to ``path`` if given)."""

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self:
                return fn(*args, **kwargs)

        wrapper.capture = self  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    # -- recording ---------------------------------------------------------------------------------
    def _seen(self, triton_hash: str | None) -> bool:
        with self._lock:
            return triton_hash is not None and triton_hash in self._hash_to_key

    def _add(self, variant: CompiledVariant | None, triton_hash: str | None, how: str, kernel: str,
             note: str = "") -> None:
        with self._lock:
            key = None
            if variant is not None:
                key = variant.key
                if key not in self.variants:
                    self.variants[key] = variant
            if triton_hash is not None:
                self._hash_to_key[triton_hash] = key
            self.events.append(CaptureEvent(kernel, key, triton_hash, how, note))

    def _fail(self, kernel: str, triton_hash: str | None, how: str, exc: BaseException) -> None:
        with self._lock:
            if isinstance(exc, UnsupportedKernelError):
                self.warnings.append(f"{kernel}: not archived: {exc}")
            else:
                self.errors.append(f"{kernel}: {type(exc).__name__}: {exc}")
            if triton_hash is not None:
                self._hash_to_key[triton_hash] = None
            self.events.append(CaptureEvent(kernel, None, triton_hash, how, f"failed: {exc}"))

    def variant_for_hash(self, triton_hash: str) -> str | None:
        with self._lock:
            return self._hash_to_key.get(triton_hash)

    def add_compiled_kernel(self, kernel: Any, how: str = "launched") -> str | None:
        """Record a ``CompiledKernel`` (from ``fn.warmup`` or a JIT cache) and return its variant key."""
        triton_hash = getattr(kernel, "hash", None)
        if self._seen(triton_hash):
            return self.variant_for_hash(triton_hash)
        name = getattr(getattr(getattr(kernel, "src", None), "fn", None), "__name__", getattr(kernel, "name", "?"))
        try:
            variant = _describe_kernel_object(kernel, self.include_ir)
        except Exception as exc:  # noqa: BLE001 - recorded, never raised into the workload
            self._fail(name, triton_hash, how, exc)
            return None
        self._add(variant, triton_hash, how, name)
        return variant.key

    # -- harvesting other processes' compiles ------------------------------------------------------
    def _harvest(self) -> None:
        before = self._snapshot
        self._snapshot = {}
        for cache_dir, names in before.items():
            try:
                now = set(os.listdir(cache_dir))
            except OSError:
                continue
            with _inprocess_lock:
                mine = set(_inprocess_entries)
            for name in sorted(now - names - mine):
                entry_dir = os.path.join(cache_dir, name)
                if name.startswith("tmp.") or not os.path.isdir(entry_dir):
                    continue
                for entry in entries_in_dir(entry_dir):
                    if self._seen(entry.triton_hash):
                        continue
                    try:
                        fp = build_fingerprint(entry.metadata["target"])
                        variant = describe_entry(entry, origin="triton-cache", include_ir=self.include_ir,
                                                 provenance_extra={"triton_cache": fp, "harvested": True})
                    except Exception as exc:  # noqa: BLE001
                        self._fail(entry.stem, entry.triton_hash, "harvested", exc)
                        continue
                    self._add(variant, entry.triton_hash, "harvested", entry.stem,
                              "compiled by another process; params are the binary's runtime arguments only")

    # -- results -----------------------------------------------------------------------------------
    def kernels(self) -> list[str]:
        with self._lock:
            return sorted({v.kernel for v in self.variants.values()})

    def builder(self, **kwargs: Any) -> ArchiveBuilder:
        from .aot import toolchain_versions

        with self._lock:
            variants = list(self.variants.values())
            autotune = self.autotune.to_json()
        if not variants:
            raise CaptureError(
                f"capture {self.name!r} recorded no kernels: nothing Triton compiled or launched on this thread while "
                "it was active" + (f" ({len(self.warnings)} skipped: {'; '.join(self.warnings)})" if self.warnings else ""))
        produced = {k: (None if v is None else str(v)) for k, v in toolchain_versions().items()}
        builder = ArchiveBuilder(self.name, self.version, produced_by=produced, **kwargs)
        builder.extend(variants)
        if autotune:
            builder.autotune = autotune
        return builder

    def save(self, path: str | os.PathLike, **kwargs: Any) -> Any:
        """Write the archive (atomically); returns the writer's stats."""
        return self.builder(**kwargs).write(path)

    def summary(self) -> dict:
        with self._lock:
            hows: dict[str, int] = {}
            for e in self.events:
                hows[e.how] = hows.get(e.how, 0) + 1
            return {"variants": len(self.variants), "kernels": self.kernels(), "events": hows,
                    "autotune_records": len(self.autotune.records), "warnings": list(self.warnings),
                    "errors": list(self.errors)}


def capture(name: str, version: str, **kwargs: Any) -> Capture:
    """``with karchive.capture(name, version=...) as cap:`` or ``@karchive.capture(...)``; see :class:`Capture`."""
    return Capture(name, version, **kwargs)


def _describe_kernel_object(kernel: Any, include_ir: bool) -> CompiledVariant:
    group = getattr(kernel, "metadata_group", None)
    src = getattr(kernel, "src", None)
    if not group:
        raise CaptureError("the compiled kernel carries no metadata_group (file map); cannot read its files")
    entry = entry_from_group(group)
    fp = build_fingerprint(entry.metadata["target"])
    if src is not None and hasattr(src, "fn"):
        return describe_source(src, entry, include_ir=include_ir, provenance_extra={"triton_cache": fp})
    return describe_entry(entry, origin="capture", include_ir=include_ir, provenance_extra={"triton_cache": fp})


def _snapshot_cache() -> dict[str, set[str]]:
    try:
        cache_dir = local_cache_dir()
    except Exception:  # noqa: BLE001
        return {}
    try:
        return {cache_dir: set(os.listdir(cache_dir))}
    except OSError:
        return {cache_dir: set()}


# --- Triton hooks (process-wide, installed while any capture is active) ---------------------------
def _on_compile(*, src: Any = None, metadata: Any = None, metadata_group: Any = None, cache_hit: bool = False,
                **_: Any) -> None:
    triton_hash = metadata.get("hash") if isinstance(metadata, dict) else getattr(metadata, "hash", None)
    if isinstance(triton_hash, str):
        try:
            with _inprocess_lock:
                _inprocess_entries.add(cache_dir_name(triton_hash))
        except CaptureError:
            pass
    caps = [c for c in active_captures() if not c._seen(triton_hash)]
    if not caps or not metadata_group:
        return
    kernel = getattr(src, "name", "?")
    how = "cache-hit" if cache_hit else "compiled"
    by_ir: dict[bool, CompiledVariant | BaseException] = {}
    for cap in caps:
        if cap.include_ir not in by_ir:
            try:
                entry = entry_from_group(metadata_group)
                fp = build_fingerprint(entry.metadata["target"])
                if hasattr(src, "fn"):
                    by_ir[cap.include_ir] = describe_source(src, entry, include_ir=cap.include_ir,
                                                            provenance_extra={"triton_cache": fp})
                else:  # compiled from an IR file: describe from the entry
                    by_ir[cap.include_ir] = describe_entry(entry, origin="capture", include_ir=cap.include_ir,
                                                           provenance_extra={"triton_cache": fp})
            except Exception as exc:  # noqa: BLE001
                by_ir[cap.include_ir] = exc
        result = by_ir[cap.include_ir]
        if isinstance(result, BaseException):
            cap._fail(kernel, triton_hash, how, result)
        else:
            cap._add(result, triton_hash, how, kernel)


def _on_post_compile(*, key: Any = None, fn: Any = None, compile: Any = None, **_: Any) -> None:
    caps = active_captures()
    if not caps or fn is None:
        return
    jit_fn = getattr(fn, "jit_function", None)
    device = (compile or {}).get("device")
    try:
        kernel = jit_fn.device_caches[device][0].get(key)
    except Exception:  # noqa: BLE001 - layout differs across versions; the listener remains the main path
        return
    if not _is_compiled_kernel(kernel):  # async mode stores the CompiledKernel before calling the hook
        return
    for cap in caps:
        cap.add_compiled_kernel(kernel, how="async")


def _is_compiled_kernel(obj: Any) -> bool:
    """Checked by type name: probing attributes of a FutureKernel would block on its compile."""
    return type(obj).__name__ == "CompiledKernel"


def _after_jit_run(kernel: Any) -> None:
    if not _is_compiled_kernel(kernel):  # a FutureKernel is recorded by the post-compile hook
        return
    for cap in active_captures():
        if cap.record_launches:
            cap.add_compiled_kernel(kernel, how="launched")


def _after_autotune(tuner: Any, args: tuple, kwargs: dict, before: set, ret: Any, heard: dict | None) -> None:
    caps = active_captures()
    if not caps:
        return
    if heard is not None:
        key, timings, chosen = heard["key"], heard.get("configs_timings"), heard.get("best_config")
    else:
        new = [k for k in tuner.cache if k not in before]
        key = new[0] if len(new) == 1 else tuning_key(tuner, call_args(tuner, args, kwargs))
        chosen = tuner.cache.get(key, getattr(tuner, "best_config", None)) if len(tuner.configs) > 1 \
            else tuner.configs[0]
        timings = getattr(tuner, "configs_timings", None) if new else None
    for cap in caps:
        variant_key = cap.add_compiled_kernel(ret, how="autotune") if _is_compiled_kernel(ret) else None
        try:
            cap.autotune.observe(tuner, args, kwargs, key=key, chosen=chosen, timings=timings, variant_key=variant_key)
        except Exception as exc:  # noqa: BLE001
            cap._fail(getattr(innermost_jit(tuner), "__name__", "autotuner"), None, "autotune", exc)
        for w in cap.autotune.warnings:
            if w not in cap.warnings:
                cap.warnings.append(w)


class _Hooks:
    """Refcounted installation of the listener, hooks and wrappers; chained and restored."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users = 0
        self._restore: list[Callable[[], None]] = []

    def acquire(self) -> None:
        with self._lock:
            if self._users == 0:
                try:
                    self._install()
                except BaseException:
                    self._undo()
                    raise
            self._users += 1

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            if self._users == 0:
                self._undo()

    def _undo(self) -> None:
        for undo in reversed(self._restore):
            try:
                undo()
            except Exception:  # noqa: BLE001 - restoring must not mask the workload's result
                pass
        self._restore = []

    def _install(self) -> None:
        try:
            import triton
            from triton import knobs
        except ImportError as exc:
            raise CaptureError("capture needs Triton >= 3.4 installed (pip install 'karchive[producer]')") from exc
        if not hasattr(getattr(knobs, "compilation", None), "listener"):
            raise CaptureError(f"capture needs Triton >= 3.4 (triton.knobs.compilation.listener); found Triton "
                               f"{getattr(triton, '__version__', '?')}")
        self._restore = []
        self._chain(knobs.compilation, "listener", _on_compile)
        if hasattr(knobs.runtime, "jit_post_compile_hook"):
            self._chain(knobs.runtime, "jit_post_compile_hook", _on_post_compile)
        if hasattr(getattr(knobs, "autotuning", None), "listener"):
            self._chain(knobs.autotuning, "listener", _on_autotune_listener)
        self._wrap_jit_run()
        self._wrap_autotuner()

    def _chain(self, owner: Any, attr: str, ours: Callable[..., Any]) -> None:
        previous = getattr(owner, attr)

        def chained(*args: Any, **kwargs: Any) -> Any:
            try:
                ours(**kwargs)
            except Exception:  # noqa: BLE001 - a capture must never break compilation
                pass
            if previous is not None:
                return previous(*args, **kwargs)
            return None

        chained.__karchive__ = True  # type: ignore[attr-defined]
        setattr(owner, attr, chained)

        def undo() -> None:
            if getattr(owner, attr) is chained:  # someone installed theirs on top: leave it (ours is inert)
                setattr(owner, attr, previous)

        self._restore.append(undo)

    def _wrap_jit_run(self) -> None:
        from triton.runtime.jit import JITFunction

        original = JITFunction.run

        def run(self: Any, *args: Any, **kwargs: Any) -> Any:
            kernel = original(self, *args, **kwargs)
            if getattr(_tls, "stack", None):
                try:
                    _after_jit_run(kernel)
                except Exception:  # noqa: BLE001
                    pass
            return kernel

        JITFunction.run = run  # type: ignore[method-assign]
        self._restore.append(lambda: setattr(JITFunction, "run", original) if JITFunction.run is run else None)

    def _wrap_autotuner(self) -> None:
        try:
            from triton.runtime.autotuner import Autotuner
        except ImportError:
            return
        original = Autotuner.run

        def run(self: Any, *args: Any, **kwargs: Any) -> Any:
            if not getattr(_tls, "stack", None):
                return original(self, *args, **kwargs)
            before = set(getattr(self, "cache", {}) or {})
            _tls.heard = None
            ret = original(self, *args, **kwargs)
            heard, _tls.heard = getattr(_tls, "heard", None), None
            try:
                _after_autotune(self, args, kwargs, before, ret, heard)
            except Exception:  # noqa: BLE001
                pass
            return ret

        Autotuner.run = run  # type: ignore[method-assign]
        self._restore.append(lambda: setattr(Autotuner, "run", original) if Autotuner.run is run else None)


def _on_autotune_listener(*, key: Any = None, best_config: Any = None, configs_timings: Any = None, **_: Any) -> None:
    """Triton 3.8+: the tuner tells us the key and timings directly; picked up by the Autotuner.run wrapper."""
    if getattr(_tls, "stack", None):
        _tls.heard = {"key": key, "best_config": best_config, "configs_timings": configs_timings}


_HOOKS = _Hooks()


__all__ = ["Capture", "CaptureEvent", "capture", "describe_source", "active_captures"]
