"""JIT capture: archive every Triton kernel a workload compiles or loads while a capture is active.

::

    with karchive.capture("model-kernels", version="1.0") as cap:
        run_workload()                     # forward and backward, thread pools, torch.compile ...
    cap.save("model-kernels.karc")
    cap.summary()["left_out"]              # what the window saw that the archive does not hold, and why

Where the kernels come from (Triton >= 3.4, which has ``triton.knobs``):

- ``knobs.compilation.listener`` fires on every ``triton.compile`` (fresh compile or Triton cache hit)
  with the source and the cache files, on the compiling thread, whichever thread that is.
- ``knobs.runtime.jit_post_compile_hook`` covers async compile mode, where the listener runs on a pool
  thread but the hook runs on the thread that waits for the result.
- ``JITFunction.run`` is wrapped while captures are active, so kernels already in a JIT function's
  in-memory cache (compiled before the capture began) are recorded when launched (``record_launches``);
  the wrapper also reads the values ``@triton.heuristics`` passed on (:mod:`._heuristics_log`).
- ``Autotuner.run`` is wrapped (and ``knobs.autotuning.listener`` chained on 3.8+) to record the chosen
  config per autotune key (:mod:`._autotune_log`); ``Heuristics.run`` likewise for heuristics cases.
- ``torch.compile`` (Inductor): its kernels reach the listener through Inductor's own ``triton.compile`` calls and
  are filed under their path-independent identity (``inductor.k<digest>:<function>``); its autotune decisions and
  max-autotune template choices are recorded by :mod:`.inductor_capture` (the manifest's ``inductor`` section),
  which also keeps Inductor's compiles in this process while capturing.
- Kernels compiled by other processes (compile workers a capture did not reach) are harvested from the Triton
  cache directory at exit: entries created during the capture that no in-process compile produced.

Which capture a kernel compiled on some thread belongs to is :mod:`._scope`'s policy (a
process-wide default, ``scope="thread"`` to isolate); what the window saw but the archive lacks is
:mod:`._report`'s (a warning, ``summary()["left_out"]``, ``CaptureError`` under ``strict=True``).
Previously installed listeners and hooks are chained and restored when the last capture ends.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeGuard, TypeVar, cast

from ...core.jsonio import canonical_json
from ...errors import CaptureError, KarchiveError, UnsupportedKernelError
from ...format import inductor_source
from ...format.autotune import json_safe
from ..build.pack import ArchiveBuilder
from ..compile.canonical import kernel_name
from ..compile.describe import BINARY_EXT, IR_STAGES, CompiledVariant, describe_variant, signature_defaults
from ..compile.toolchain import build_fingerprint
from ..compile.wrapped import align_kernel_names
from . import _scope as scope
from . import inductor_capture
from ._autotune_log import AutotuneLog, call_args, innermost_jit, tuning_key
from ._heuristics_log import HeuristicsLog
from ._report import LEDGER, CacheWatch, LeftOut, describe_left_out, left_out, summarize
from .triton_cache import (
    CacheEntry,
    describe_entry,
    entry_from_group,
)

F = TypeVar("F", bound=Callable[..., Any])

#: Per-thread scratch of the hooks: what the autotuning listener heard, the open Heuristics.run frames.
_tls = threading.local()


class CaptureIncompleteWarning(UserWarning):
    """A capture window saw kernels that no archive of that window holds (the message says which and why)."""


# --- describing a compile ------------------------------------------------------------------------
def _module_source(fn: Any) -> str | None:
    from ..compile.aot import module_source

    name = getattr(fn, "module", None) or getattr(getattr(fn, "fn", None), "__module__", None)
    module = sys.modules.get(name) if isinstance(name, str) else None
    return None if module is None else module_source(module)


def describe_source(
    src: Any,
    entry: CacheEntry,
    *,
    origin: str = "capture",
    include_ir: bool = True,
    hooks: list[dict] | None = None,
    provenance_extra: dict | None = None,
) -> CompiledVariant:
    """Describe a compile from its ``ASTSource`` exactly as AOT describes one: same params, same key."""
    from ..compile.aot import constexpr_params, pipeline_hooks

    fn = src.fn
    inductor = inductor_capture.provenance(fn)  # Inductor's generated kernels: a name no path or user changes
    kernel = inductor[0] if inductor is not None else kernel_name(fn)
    if inductor is not None:
        provenance_extra = {**(provenance_extra or {}), "inductor": inductor[1]}
    names = list(fn.arg_names)
    signature = dict(src.signature)
    consts: dict[int, Any] = {}
    for path, value in dict(src.constants).items():
        path = (path,) if isinstance(path, int) else path
        if isinstance(path, str):
            path = (names.index(path),)
        if len(path) != 1:
            raise UnsupportedKernelError(
                f"{kernel}: tuple parameters are not supported by the launch ABI", kernel=kernel
            )
        consts[path[0]] = value
    declared_constexpr = set(constexpr_params(fn))
    types: dict[str, str] = {}
    constexprs: dict[str, Any] = {}
    equal_to_1: dict[str, str] = {}
    for i, name in enumerate(names):
        typ = signature.get(name, signature.get(i))
        if not isinstance(typ, str):
            raise UnsupportedKernelError(
                f"{kernel}: parameter {name!r} has type {typ!r} (tuples are not supported)", kernel=kernel
            )
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
                    "variant's hints (only tt.divisibility is)",
                    kernel=kernel,
                )
            divisibility[names[path[0]]] = int(attr_value)
    backend = (
        entry.metadata["target"]["backend"]
        if isinstance(entry.metadata["target"], dict)
        else entry.metadata["target"].backend
    )
    asm = {k: v for k, v in entry.read_asm().items() if k in IR_STAGES.get(backend, ()) or k == BINARY_EXT.get(backend)}
    return describe_variant(
        kernel=kernel,
        param_names=names,
        param_types=types,
        constexprs=constexprs,
        divisibility=divisibility,
        equal_to_1=equal_to_1,
        metadata=entry.metadata,
        asm=asm,
        source_key=fn.cache_key,
        source_text=_module_source(fn),
        hooks=pipeline_hooks() if hooks is None else hooks,
        origin=origin,
        include_ir=include_ir,
        provenance_extra=provenance_extra,
        signature_defaults=signature_defaults(fn),
    )


@dataclass
class CaptureEvent:
    """One kernel seen by a capture (for reports and tests)."""

    kernel: str
    key: str | None
    triton_hash: str | None
    how: str  # compiled | cache-hit | launched | async | autotune | harvested
    note: str = ""
    thread: str = ""


# --- the capture object --------------------------------------------------------------------------
class Capture:
    """Records the kernels a workload compiles or launches while active; a context manager or a decorator.

    ``scope="process"`` (default) records work on every thread of the process; ``scope="thread"`` only the
    entering thread's and what it hands over (thread-pool tasks, its autograd backward). See
    :mod:`karchive.producer.capture._scope`.
    """

    def __init__(
        self,
        name: str,
        version: str,
        *,
        path: str | os.PathLike | None = None,
        include_ir: bool = True,
        record_launches: bool = True,
        harvest: bool = True,
        strict: bool = False,
        scope: str = "process",
        inductor_in_process: bool = True,
        inductor_cache_artifacts: bool = True,
    ) -> None:
        if not isinstance(name, str) or not name.strip():
            raise CaptureError("capture needs a non-empty archive name")
        if not isinstance(version, str) or not version.strip():
            raise CaptureError("capture needs a non-empty version string, e.g. version='1.0'")
        if scope not in _SCOPES:
            raise CaptureError(f"capture scope must be one of {', '.join(map(repr, _SCOPES))}, got {scope!r}")
        self.name = name
        self.version = version
        self.path = path
        self.include_ir = include_ir
        self.record_launches = record_launches
        self.harvest = harvest
        self.strict = strict
        self.scope = scope
        self.inductor_in_process = inductor_in_process
        self.inductor_cache_artifacts = inductor_cache_artifacts
        #: torch's cache artifacts recorded before the window opened, and by when it closed (None: open)
        self._cache_window: tuple[frozenset[tuple[str, str]], frozenset[tuple[str, str]] | None] = (frozenset(), None)
        self._undo_threads: Callable[[], None] | None = None
        self.variants: dict[str, CompiledVariant] = {}
        self.events: list[CaptureEvent] = []
        self.warnings: list[str] = []
        self.errors: list[str] = []
        self.left_out: list[LeftOut] = []
        self.autotune = AutotuneLog()
        self.heuristics = HeuristicsLog()
        self.inductor = inductor_capture.InductorLog()  # torch.compile's decisions (autotune configs, templates)
        self._hash_to_key: dict[str, str | None] = {}
        self._inductor_names: dict[str, set[str]] = {}  # triton hash -> its Inductor identities recorded or failed
        self._failed: dict[str, tuple[str, str]] = {}  # triton hash -> (category, why)
        self._lock = threading.RLock()
        self._depth: dict[int, int] = {}
        self._window: tuple[int, CacheWatch] | None = None
        self._window_counts = {"windows": 0, "compiled": 0, "loaded_from_cache": 0, "other_processes": 0}

    # -- lifecycle ---------------------------------------------------------------------------------
    def __enter__(self) -> Capture:
        _HOOKS.acquire()
        try:
            with self._lock:
                if not any(self._depth.values()):
                    self._window = (LEDGER.mark(), CacheWatch.start())
                    scope.activate(self)
                    if self.inductor_cache_artifacts:
                        self._cache_window = (inductor_capture.cache_artifacts_mark(), None)
                    if self.inductor_in_process:
                        self._undo_threads = inductor_capture.compile_in_process()
                tid = threading.get_ident()
                self._depth[tid] = self._depth.get(tid, 0) + 1
            scope.stack().append(self)
        except BaseException:
            _HOOKS.release()
            raise
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        stack = scope.stack()
        for i in range(len(stack) - 1, -1, -1):
            if stack[i] is self:
                del stack[i]
                break
        lost: list[LeftOut] = []
        try:
            with self._lock:
                tid = threading.get_ident()
                self._depth[tid] = self._depth.get(tid, 1) - 1
                last = not any(self._depth.values())
                window, self._window = (self._window, None) if last else (None, self._window)
            if last:
                scope.deactivate(self)
                if self.inductor_cache_artifacts:
                    self._cache_window = (self._cache_window[0], inductor_capture.cache_artifacts_mark())
                if self._undo_threads is not None:
                    self._undo_threads()
                    self._undo_threads = None
                if window is not None:
                    lost = self._close_window(window[0], LEDGER.mark(), window[1])
        finally:
            _HOOKS.release()
        if exc_type is None and last:
            problems = [f"{len(self.errors)} error(s): " + "; ".join(self.errors)] if self.errors else []
            if lost:
                problems.append(
                    f"{len(lost)} kernel(s) compiled during the capture are not in the archive:\n"
                    + describe_left_out(lost)
                )
            if self.strict and problems:
                raise CaptureError(f"capture {self.name!r} (strict): " + "\n".join(problems))
            if self.path is not None:
                self.save(self.path)

    def _close_window(self, start: int, end: int, watch: CacheWatch) -> list[LeftOut]:
        """Harvest other processes' entries, then compare the window with the record; returns new losses."""
        sightings = LEDGER.between(start, end)
        extra_dirs = [s.entry_dir for s in sightings if s.entry_dir]
        try:
            new_entries = watch.new_entries(os.path.dirname(d) for d in extra_dirs)
        except Exception as exc:  # noqa: BLE001 - a report must never break the workload
            self.errors.append(f"could not list the Triton cache: {type(exc).__name__}: {exc}")
            new_entries = []
        in_process = LEDGER.entry_names()
        if self.harvest:
            self._harvest([e for name, e in new_entries if name not in in_process])
        items = left_out(self, sightings, new_entries, in_process, LEDGER.between(end))
        with self._lock:
            known = {(i.triton_hash, i.category) for i in self.left_out}
            fresh = [i for i in items if (i.triton_hash, i.category) not in known]
            self.left_out.extend(fresh)
            compiled = {s.triton_hash for s in sightings if not s.cache_hit}
            counts = self._window_counts
            counts["windows"] += 1
            counts["compiled"] += len(compiled)
            counts["loaded_from_cache"] += len({s.triton_hash for s in sightings if s.cache_hit} - compiled)
            counts["other_processes"] += len({e.triton_hash for name, e in new_entries if name not in in_process})
        lost = [i for i in fresh if i.lost]
        if lost:
            warnings.warn(
                CaptureIncompleteWarning(
                    f"karchive capture {self.name!r}: {len(lost)} kernel(s) compiled during the capture are not in "
                    f"the archive:\n{describe_left_out(lost)}"
                ),
                stacklevel=3,
            )
        return lost

    def __call__(self, fn: F) -> F:
        """Decorator: every call of ``fn`` runs under this capture (and saves to ``path`` if given)."""

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self:
                return fn(*args, **kwargs)

        wrapper.capture = self  # type: ignore[attr-defined]  # set on the function object, for the caller to find
        return cast(F, wrapper)  # functools.wraps made it look like fn; it takes the same arguments

    # -- recording ---------------------------------------------------------------------------------
    def _seen(self, triton_hash: str | None) -> TypeGuard[str]:
        return triton_hash is not None and triton_hash in self._hash_to_key  # a dict lookup: atomic in CPython

    def _wants(self, triton_hash: str | None, inductor_name: str | None) -> bool:
        """Record this compile? Once per Triton hash, and once more per Inductor identity of it: two generated
        modules (a graph's and a benchmark's, or two graphs') can hold the same kernel, one binary under two names,
        and serving looks a kernel up by the module it is launched from."""
        if not self._seen(triton_hash):
            return True
        return inductor_name is not None and inductor_name not in self._inductor_names.get(triton_hash, ())

    def _add(
        self, variant: CompiledVariant | None, triton_hash: str | None, how: str, kernel: str, note: str = ""
    ) -> None:
        with self._lock:
            key = None
            if variant is not None:
                key = variant.key
                if key not in self.variants:
                    self.variants[key] = variant
                if triton_hash is not None and inductor_source.is_inductor_name(variant.kernel):
                    self._inductor_names.setdefault(triton_hash, set()).add(variant.kernel)
            if triton_hash is not None:
                self._hash_to_key[triton_hash] = key
                self._failed.pop(triton_hash, None)
            self.events.append(CaptureEvent(kernel, key, triton_hash, how, note, threading.current_thread().name))

    def _fail(
        self, kernel: str, triton_hash: str | None, how: str, exc: BaseException, inductor_name: str | None = None
    ) -> None:
        """Report a compile not recorded. Where its binary is archived already (under another Inductor identity),
        the binary stays recorded; the identity is tried once, as a hash is."""
        with self._lock:
            if isinstance(exc, UnsupportedKernelError):
                self.warnings.append(f"{kernel}: not archived: {exc}")
                category = "unsupported"
            else:
                self.errors.append(f"{kernel}: {type(exc).__name__}: {exc}")
                category = "failed"
            if triton_hash is not None and inductor_name is not None:
                self._inductor_names.setdefault(triton_hash, set()).add(inductor_name)
            if triton_hash is not None and self._hash_to_key.get(triton_hash) is None:
                self._hash_to_key[triton_hash] = None
                self._failed[triton_hash] = (category, f"{type(exc).__name__}: {exc}")
            self.events.append(
                CaptureEvent(kernel, None, triton_hash, how, f"failed: {exc}", threading.current_thread().name)
            )

    def variant_for_hash(self, triton_hash: str) -> str | None:
        with self._lock:
            return self._hash_to_key.get(triton_hash)

    def recorded_hashes(self) -> set[str]:
        with self._lock:
            return {h for h, k in self._hash_to_key.items() if k is not None}

    def failures(self) -> dict[str, tuple[str, str]]:
        with self._lock:
            return dict(self._failed)

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
    def _harvest(self, entries: list[CacheEntry]) -> None:
        for entry in entries:
            if self._seen(entry.triton_hash):
                continue
            try:
                fp = build_fingerprint(entry.metadata["target"])
                variant = describe_entry(
                    entry,
                    origin="triton-cache",
                    include_ir=self.include_ir,
                    provenance_extra={"triton_cache": fp, "harvested": True},
                )
            except Exception as exc:  # noqa: BLE001 - a harvested entry that cannot be described is reported as left out, never fatal
                self._fail(entry.stem, entry.triton_hash, "harvested", exc)
                continue
            self._add(
                variant,
                entry.triton_hash,
                "harvested",
                entry.stem,
                "compiled by another process; params are the binary's runtime arguments only",
            )

    # -- results -----------------------------------------------------------------------------------
    def kernels(self) -> list[str]:
        with self._lock:
            return sorted({v.kernel for v in self.variants.values()})

    def builder(self, **kwargs: Any) -> ArchiveBuilder:
        """An :class:`ArchiveBuilder` holding what the capture recorded, every part checked to be storable.

        A variant whose manifest entry cannot be written (a value Triton handed over that JSON cannot hold)
        is left out with a ``LeftOut`` entry and the rest are kept; an autotune or heuristics record is made
        JSON-safe (:func:`json_safe`) or, failing that, left out with a warning: one odd value never costs
        the window.
        """
        from ..compile.aot import toolchain_versions

        with self._lock:
            variants = list(self.variants.values())
            autotune = self.autotune.to_json()
            heuristics = self.heuristics.to_json()
        variants = self._storable(variants)
        kernels = {v.kernel for v in variants}
        # Records name a kernel by its function's name; variants may name it module:qualname (describe.py).
        autotune = align_kernel_names(self._storable_records("autotune", autotune), kernels)
        heuristics = align_kernel_names(self._storable_records("heuristics", heuristics), kernels)
        if not variants:
            raise CaptureError(
                f"capture {self.name!r} recorded no kernels: nothing Triton compiled or launched "
                f"{'on this thread ' if self.scope == 'thread' else ''}while it was active"
                + (f" ({len(self.warnings)} skipped: {'; '.join(self.warnings)})" if self.warnings else "")
            )
        produced = {k: (None if v is None else str(v)) for k, v in toolchain_versions().items()}
        builder = ArchiveBuilder(self.name, self.version, produced_by=produced, **kwargs)
        builder.extend(variants)
        section = self.inductor.section(kernels)
        cache = (
            inductor_capture.cache_artifacts(self._cache_window, self.inductor.warnings)
            if self.inductor_cache_artifacts
            else None
        )
        if cache is not None:  # torch's own cache artifacts: Inductor's codegen skipped where serving trusts them
            data, record = cache
            section = {**(section or self.inductor.section(kernels, empty=True) or {}), "cache_artifacts": record}
            builder.members[record["path"]] = data
        if section is not None:
            builder.extra["inductor"] = section
        for w in self.inductor.warnings:
            if w not in self.warnings:
                self.warnings.append(w)
        if autotune:
            builder.autotune = autotune
        if heuristics:
            builder.heuristics = heuristics
        return builder

    def _storable(self, variants: list[CompiledVariant]) -> list[CompiledVariant]:
        """The variants whose manifest entry canonical JSON can hold; the others become ``LeftOut`` entries."""
        keep = []
        for v in variants:
            try:
                canonical_json(v.variant.to_json())
            except Exception as exc:  # noqa: BLE001 - one variant Triton described oddly must not cost the others
                with self._lock:
                    # by the events: a binary filed under two Inductor identities maps its hash to the later one
                    hashes = [e.triton_hash for e in self.events if e.key == v.key and e.triton_hash is not None]
                    item = LeftOut(
                        v.kernel,
                        hashes[0] if hashes else None,
                        "failed",
                        f"its manifest entry cannot be stored: {type(exc).__name__}: {exc}",
                    )
                    if item not in self.left_out:
                        self.left_out.append(item)
                    self.errors.append(f"{v.kernel}: left out: {item.reason}")
                continue
            keep.append(v)
        return keep

    def _storable_records(self, what: str, records: list[dict]) -> list[dict]:
        out = []
        for record in records:
            kernel = record.get("kernel", "?") if isinstance(record, dict) else "?"
            try:
                safe = json_safe(record)
                canonical_json(safe)
            except Exception as exc:  # noqa: BLE001 - a record that cannot be stored is reported, never fatal
                with self._lock:
                    msg = f"{kernel}: the {what} record is not stored ({type(exc).__name__}: {exc})"
                    if msg not in self.warnings:
                        self.warnings.append(msg)
                continue
            out.append(safe)
        return out

    def save(self, path: str | os.PathLike, **kwargs: Any) -> Any:
        """Write the archive (atomically); returns the writer's stats.

        Every failure is a :class:`~karchive.errors.KarchiveError`: what the capture cannot store is left
        out and reported (``summary()``), and an error writing the file names it.
        """
        try:
            return self.builder(**kwargs).write(path)
        except KarchiveError:
            raise
        except Exception as exc:  # the caller's window is worth a clear error, not a bare ValueError from json
            raise CaptureError(
                f"capture {self.name!r}: writing {os.fspath(path)} failed: {type(exc).__name__}: {exc}"
            ) from exc

    def summary(self) -> dict:
        """What the capture saw and recorded.

        ``window`` counts what happened while it was active, whoever it belongs to (``compiled``: fresh
        ``triton.compile`` runs in this process, ``loaded_from_cache``: Triton cache hits, ``other_processes``:
        new kernel entries other processes wrote); ``left_out`` lists every such kernel the archive does not hold,
        with category and reason; ``lost`` counts those no archive of the window holds.
        """
        with self._lock:
            return {
                "variants": len(self.variants),
                "kernels": self.kernels(),
                "events": dict(Counter(e.how for e in self.events)),
                "threads": dict(Counter(e.thread for e in self.events)),
                "scope": self.scope,
                "autotune_records": len(self.autotune.records),
                "inductor_decisions": len(self.inductor.decisions),
                "inductor_template_tables": sum(t.calls for t in self.inductor.templates),  # selections answered
                "inductor_bundles_not_restored": self.inductor.bundles_refused,
                "heuristics_records": len(self.heuristics.to_json()),
                "warnings": list(self.warnings),
                "errors": list(self.errors),
                "window": dict(self._window_counts),
                "left_out": [i.to_json() for i in self.left_out],
                "left_out_counts": summarize(self.left_out),
                "lost": sum(1 for i in self.left_out if i.lost),
            }


_SCOPES = scope.SCOPES


def capture(name: str, version: str, **kwargs: Any) -> Capture:
    """``with karchive.capture(name, version=...) as cap:`` or ``@karchive.capture(...)``; see :class:`Capture`."""
    return Capture(name, version, **kwargs)


def _describe_kernel_object(kernel: Any, include_ir: bool) -> CompiledVariant:
    group = getattr(kernel, "metadata_group", None)
    if not group:
        raise CaptureError("the compiled kernel carries no metadata_group (file map); cannot read its files")
    return _describe_group(group, getattr(kernel, "src", None), include_ir)


def _describe_group(group: Any, src: Any, include_ir: bool) -> CompiledVariant:
    """A compile from Triton's file map: from its ``src`` where it has a JIT function, else (compiled from an
    IR file) from the cache entry alone."""
    entry = entry_from_group(group)
    extra = {"triton_cache": build_fingerprint(entry.metadata["target"])}
    if hasattr(src, "fn"):
        return describe_source(src, entry, include_ir=include_ir, provenance_extra=extra)
    return describe_entry(entry, origin="capture", include_ir=include_ir, provenance_extra=extra)


# --- Triton hooks (process-wide, installed while any capture is active) ---------------------------
def _entry_dir(metadata_group: Any) -> str | None:
    try:
        path = next(iter(metadata_group.values()))
        return os.path.dirname(os.path.abspath(path))
    except Exception:  # noqa: BLE001 - no usable path in Triton's metadata group: the caller falls back
        return None


def _on_compile(
    *, src: Any = None, metadata: Any = None, metadata_group: Any = None, cache_hit: bool = False, **_: Any
) -> None:
    triton_hash = metadata.get("hash") if isinstance(metadata, dict) else getattr(metadata, "hash", None)
    triton_hash = triton_hash if isinstance(triton_hash, str) else None
    targets, rule = scope.targets()
    kernel = getattr(src, "name", "?")
    LEDGER.note(
        triton_hash, kernel, bool(cache_hit), rule, targets, _entry_dir(metadata_group) if metadata_group else None
    )
    generated = inductor_capture.provenance(src.fn) if hasattr(src, "fn") else None
    inductor_name = generated[0] if generated is not None else None
    caps = [c for c in targets if c._wants(triton_hash, inductor_name)]
    if not caps or not metadata_group:
        return
    how = "cache-hit" if cache_hit else "compiled"
    note = "" if rule == "own thread" else rule
    by_ir: dict[bool, CompiledVariant | BaseException] = {}
    for cap in caps:
        if cap.include_ir not in by_ir:
            try:
                by_ir[cap.include_ir] = _describe_group(metadata_group, src, cap.include_ir)
            except Exception as exc:  # noqa: BLE001 - kept per include_ir; every capture it concerns reports it as failed
                by_ir[cap.include_ir] = exc
        result = by_ir[cap.include_ir]
        if isinstance(result, BaseException):
            cap._fail(kernel, triton_hash, how, result, inductor_name)
        else:
            cap._add(result, triton_hash, how, kernel, note)


def _on_post_compile(*, key: Any = None, fn: Any = None, compile: Any = None, **_: Any) -> None:
    caps, _rule = scope.targets()
    if not caps or fn is None:
        return
    jit_fn = getattr(fn, "jit_function", None)
    if jit_fn is None:
        return
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
    """Checked by type name: probing attributes of a FutureKernel would block on its compile. A kernel
    ``karchive.serve`` made from an archive is not a compile to record (it is in an archive already)."""
    return type(obj).__name__ == "CompiledKernel" and "_karchive_served" not in obj.__dict__


def _after_jit_run(kernel: Any, kwargs: dict) -> None:
    frames = getattr(_tls, "heur_frames", None)
    if frames:  # the values @triton.heuristics passed on, exactly as Triton computed them
        for frame in frames:
            if frame["produced"] is None:
                frame["produced"] = {n: kwargs[n] for n in frame["names"] if n in kwargs}
    if not _is_compiled_kernel(kernel):  # a FutureKernel is recorded by the post-compile hook
        return
    caps, _rule = scope.targets()
    for cap in caps:
        if cap.record_launches:
            cap.add_compiled_kernel(kernel, how="launched")


def _after_autotune(
    tuner: Any, args: tuple, kwargs: dict, before: int, ret: Any, heard: dict | None, caps: list[Capture]
) -> None:
    if heard is not None:
        key, timings, chosen = heard["key"], heard.get("configs_timings"), heard.get("best_config")
    else:
        new = list(tuner.cache)[before:]  # a dict keeps insertion order: the keys this call tuned
        key = new[0] if len(new) == 1 else tuning_key(tuner, call_args(tuner, args, kwargs))
        chosen = (
            tuner.cache.get(key, getattr(tuner, "best_config", None)) if len(tuner.configs) > 1 else tuner.configs[0]
        )
        timings = getattr(tuner, "configs_timings", None) if new else None
    # @triton.heuristics above this autotuner: their frames are still open, and what they computed reached
    # the tuner as keywords (part of its key: the runtime must compute them before the key).
    outer = [n for frame in getattr(_tls, "heur_frames", None) or () for n in frame["names"] if n in kwargs]
    for cap in caps:
        variant_key = cap.add_compiled_kernel(ret, how="autotune") if _is_compiled_kernel(ret) else None
        try:
            with cap._lock:
                cap.autotune.observe(
                    tuner, args, kwargs, key=key, chosen=chosen, timings=timings, variant_key=variant_key, outer=outer
                )
        except Exception as exc:  # noqa: BLE001 - capture must never break the user's workload: the failure is reported
            cap._fail(getattr(innermost_jit(tuner), "__name__", "autotuner"), None, "autotune", exc)
        with cap._lock:
            for w in cap.autotune.warnings:
                if w not in cap.warnings:
                    cap.warnings.append(w)


def _after_heuristics(heur: Any, args: tuple, kwargs: dict, produced: dict | None, caps: list[Capture]) -> None:
    for cap in caps:
        try:
            with cap._lock:
                cap.heuristics.observe(heur, args, kwargs, produced)
                for w in cap.heuristics.warnings:
                    if w not in cap.warnings:
                        cap.warnings.append(w)
        except Exception as exc:  # noqa: BLE001 - capture must never break the user's workload: the failure is reported
            cap._fail(getattr(innermost_jit(heur), "__name__", "heuristics"), None, "heuristics", exc)


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
                LEDGER.clear()

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
            raise CaptureError(
                f"capture needs Triton >= 3.4 (triton.knobs.compilation.listener); found Triton "
                f"{getattr(triton, '__version__', '?')}"
            )
        self._restore = []
        self._chain(knobs.compilation, "listener", _on_compile)
        if hasattr(knobs.runtime, "jit_post_compile_hook"):
            self._chain(knobs.runtime, "jit_post_compile_hook", _on_post_compile)
        if hasattr(getattr(knobs, "autotuning", None), "listener"):
            self._chain(knobs.autotuning, "listener", _on_autotune_listener)
        self._wrap_jit_run()
        self._wrap_autotuner()
        self._wrap_heuristics()
        self._restore.extend(scope.install_followers())
        self._restore.extend(inductor_capture.install())

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

        chained.__karchive__ = True  # type: ignore[attr-defined]  # a marker on the function object: ours
        self._restore.append(scope.patch(owner, attr, chained))

    def _wrap_jit_run(self) -> None:
        from triton.runtime.jit import JITFunction

        original = JITFunction.run

        def run(self: Any, *args: Any, **kwargs: Any) -> Any:
            kernel = original(self, *args, **kwargs)
            if scope.any_active():
                try:
                    _after_jit_run(kernel, kwargs)
                except Exception:  # noqa: BLE001 - a hook inside Triton's launch must never break the user's workload
                    pass
            return kernel

        self._restore.append(scope.patch(JITFunction, "run", run))

    def _wrap_autotuner(self) -> None:
        try:
            from triton.runtime.autotuner import Autotuner
        except ImportError:
            return
        original = Autotuner.run

        def run(self: Any, *args: Any, **kwargs: Any) -> Any:
            caps = scope.targets()[0] if scope.any_active() else None
            if not caps:
                return original(self, *args, **kwargs)
            before = len(getattr(self, "cache", None) or ())
            _tls.heard = None
            ret = original(self, *args, **kwargs)
            heard, _tls.heard = getattr(_tls, "heard", None), None
            try:
                _after_autotune(self, args, kwargs, before, ret, heard, caps)
            except Exception:  # noqa: BLE001 - a hook inside Triton's autotuner must never break the user's workload
                pass
            return ret

        self._restore.append(scope.patch(Autotuner, "run", run))

    def _wrap_heuristics(self) -> None:
        try:
            from triton.runtime.autotuner import Heuristics
        except ImportError:
            return
        original = Heuristics.run

        def run(self: Any, *args: Any, **kwargs: Any) -> Any:
            caps = scope.targets()[0] if scope.any_active() else None
            if not caps:
                return original(self, *args, **kwargs)
            frames = getattr(_tls, "heur_frames", None)
            if frames is None:
                frames = _tls.heur_frames = []
            frame: dict[str, Any] = {"names": tuple(getattr(self, "values", {})), "produced": None}
            frames.append(frame)
            try:
                ret = original(self, *args, **kwargs)
            finally:
                for i in range(len(frames) - 1, -1, -1):  # by identity: frames of nested calls compare equal
                    if frames[i] is frame:
                        del frames[i]
                        break
            try:
                _after_heuristics(self, args, dict(kwargs), frame["produced"], caps)
            except Exception:  # noqa: BLE001 - a hook inside Triton's heuristics must never break the user's workload
                pass
            return ret

        self._restore.append(scope.patch(Heuristics, "run", run))


def _on_autotune_listener(*, key: Any = None, best_config: Any = None, configs_timings: Any = None, **_: Any) -> None:
    """Triton 3.8+: the tuner tells us the key and timings directly; picked up by the Autotuner.run wrapper."""
    if scope.any_active():
        _tls.heard = {"key": key, "best_config": best_config, "configs_timings": configs_timings}


_HOOKS = _Hooks()


__all__ = [
    "Capture",
    "CaptureEvent",
    "CaptureIncompleteWarning",
    "LeftOut",
    "capture",
    "describe_source",
]
