"""Compile many variants in parallel (worker processes or a Ray cluster), with progress, then pack one archive.

Where the compiles run is an executor's business (executors.py); what is packed is decided here, in
one place, so every executor and every incremental build (reuse.py) yields the same bytes.
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...core.destination import output_file
from ...core.text import plural
from ...errors import BuildError
from ..compile.aot import VariantRequest, toolchain_versions
from ..compile.buildenv import check_cache_root, shell_warning
from ..compile.describe import CompiledVariant
from ..compile.toolchain import require_triton
from ..compile.wrapped import align_kernel_names
from ..compile.wrapped import expand as expand_wrapped
from .executors import Executor, LocalExecutor, TaskOutcome
from .pack import ArchiveBuilder
from .spec_file import BuildSpec

__all__ = [
    "BuildResult",
    "EXECUTOR_HELP",
    "Progress",
    "build_archive",
    "compile_all",
    "executor_kind",
    "make_executor",
]


@dataclass
class BuildResult:
    built: list[CompiledVariant] = field(default_factory=list)
    failed: list[tuple[VariantRequest, str]] = field(default_factory=list)
    duplicates: int = 0
    seconds: float = 0.0
    archive_bytes: int = 0
    raw_bytes: int = 0
    warnings: list[str] = field(default_factory=list)
    compiled: int = 0  # variants compiled by this build (the rest of `built` was reused)
    reused: int = 0  # variants copied from the previous archive (--reuse)
    from_cache: int = 0  # of `compiled`: served by Triton from the build cache (nothing compiled again)
    reuse: dict[str, Any] | None = None  # reuse.ReuseReport.to_json(), with --reuse
    executor: dict[str, Any] = field(default_factory=dict)  # Executor.describe(): where the compiles ran


class Progress:
    """A rich progress bar on a terminal, one plain line per variant otherwise (CI logs)."""

    def __init__(self, total: int, enabled: bool = True) -> None:
        self.total = total
        self.done = 0
        self.enabled = enabled
        self._bar = None
        if enabled and sys.stderr.isatty():
            try:
                from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
                from rich.progress import Progress as RichProgress
                from rich.table import Column

                # The label is the one flexible column, cut with "…" at the terminal's edge (a long label
                # otherwise squeezes the bar away); markup=False: "[cuda:90]" is text, not a rich style tag.
                fixed = Column(no_wrap=True)
                self._bar = RichProgress(
                    TextColumn("compiling", table_column=fixed),
                    BarColumn(bar_width=24, table_column=Column(no_wrap=True)),
                    MofNCompleteColumn(table_column=Column(no_wrap=True)),
                    TimeElapsedColumn(table_column=Column(no_wrap=True)),
                    TextColumn(
                        "{task.description}",
                        markup=False,
                        table_column=Column(no_wrap=True, overflow="ellipsis", ratio=1),
                    ),
                    transient=True,
                    expand=True,
                )
                self._bar.start()
                self._task = self._bar.add_task("", total=total)
            except ImportError:
                self._bar = None

    def step(self, label: str, ok: bool, seconds: float, where: str = "", cached: bool = False) -> None:
        self.done += 1
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.update(self._task, advance=1, description=label + (f" ({where})" if where else ""))
        else:
            status = "ok  " if ok else "FAIL"
            on = f" on {where}" if where else ""
            how = ", from the build cache" if cached else ""
            print(f"[{self.done}/{self.total}] {status} {label} ({seconds:.2f}s{on}{how})", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()


def compile_all(
    requests: list[VariantRequest],
    jobs: int = 0,
    progress: bool = True,
    on_result: Callable[[VariantRequest, CompiledVariant | None, str | None], None] | None = None,
    executor: Executor | None = None,
) -> tuple[list[CompiledVariant], list[tuple[VariantRequest, str]]]:
    """Compile ``requests`` on ``executor`` (default: ``jobs`` local worker processes).

    Returns (built, failed); ``failed`` is in request order. The executor is its caller's: it starts
    itself when first used, and the caller closes it.
    """
    executor = executor or make_executor("local", jobs)
    show_where = executor.kind != "local"  # on a cluster, say which node and worker compiled each variant
    bar = Progress(len(requests), progress)
    built: list[CompiledVariant] = []
    failed: list[tuple[int, VariantRequest, str]] = []

    def record(out: TaskOutcome) -> None:
        req = requests[out.index]
        if out.variant is not None:
            built.append(out.variant)
        else:
            failed.append((out.index, req, out.error or "unknown error"))
        bar.step(
            req.label(),
            out.variant is not None,
            out.seconds,
            out.worker if show_where else "",
            cached=out.variant is not None and out.variant.from_cache,
        )
        if on_result:
            on_result(req, out.variant, out.error)

    try:
        if requests:
            executor.run(requests, record)
    finally:
        bar.close()
    # Results arrive in completion order; the archive is sorted when packed, and failures are listed in
    # request order, so nothing depends on scheduling.
    failed.sort(key=lambda f: f[0])
    return built, [(req, msg) for _, req, msg in failed]


def build_archive(
    spec: BuildSpec,
    output: str | os.PathLike,
    *,
    jobs: int = 0,
    keep_going: bool = False,
    progress: bool = True,
    executor: str | Executor | None = None,
    reuse: Any = None,
    reuse_label: str = "",
) -> BuildResult:
    """Compile every request of ``spec`` and write the archive; fail unless all built or ``keep_going``.

    ``executor``: an :class:`Executor` or a ``--executor`` value (executors.make_executor; default
    ``jobs`` local worker processes). ``reuse``: an open reader of a previous archive whose variants
    are copied instead of compiled where their build inputs are unchanged (reuse.py); the archive
    is the same bytes either way.
    """
    start = time.perf_counter()
    output = output_file(output)  # a destination that cannot work fails now, not after every compile
    if spec.requests:
        require_triton()  # before the kernels' modules are imported (their `import triton`), naming the extra
    if not isinstance(executor, Executor):
        executor_kind(executor)  # a mistyped --executor fails now, not after the reuse plan
    warning = shell_warning()  # once here, not once per worker
    result = BuildResult(warnings=[warning] if warning else [])
    # Autotuned / heuristics kernels: one request per config, and their records as data (wrapped.py).
    wrapped = expand_wrapped(spec.requests)
    spec.requests = wrapped.requests
    result.warnings.extend(w for w in wrapped.warnings if w not in result.warnings)
    requests = spec.requests
    reused: list[CompiledVariant] = []
    if reuse is not None:
        from .reuse import plan_reuse

        plan = plan_reuse(requests, reuse, label=reuse_label)
        reused, requests, result.reuse = plan.reused, plan.to_compile, plan.report.to_json()
        if progress:
            print(plan.report.headline(), file=sys.stderr, flush=True)
    built: list[CompiledVariant] = []
    if requests:  # a build that reuses everything starts no workers (and imports no Ray)
        owned = not isinstance(executor, Executor)
        ex = executor if isinstance(executor, Executor) else make_executor(executor, jobs, verbose=progress)
        if ex.kind == "local":  # an unusable build cache fails here, once, not once per variant (Ray nodes have theirs)
            check_cache_root()
        try:
            if owned:
                ex.start()
            if progress and ex.kind != "local":
                print(f"compiling {plural(len(requests), 'variant')} on {ex.headline()}", file=sys.stderr, flush=True)
            built, result.failed = compile_all(requests, progress=progress, executor=ex)
            result.executor = ex.describe()
        finally:
            if owned:
                ex.close()
    result.compiled, result.reused = len(built), len(reused)
    result.from_cache = sum(1 for v in built if v.from_cache)
    result.built = reused + built
    lines = "\n".join(f"  - {msg}" for _, msg in result.failed)
    failures = tuple((req.label(), msg) for req, msg in result.failed)
    if result.failed and not keep_going:
        result.seconds = time.perf_counter() - start
        hint = " (use --keep-going to pack the rest)" if result.built else ""  # only where there is a rest
        noun = "variant" if len(spec.requests) == 1 else "variants"
        raise BuildError(
            f"{len(result.failed)} of {len(spec.requests)} {noun} failed{hint}:\n{lines}", failures=failures
        )
    if not result.built:
        raise BuildError("no variant was built; nothing to pack" + (f":\n{lines}" if lines else ""), failures=failures)
    builder = ArchiveBuilder(
        spec.name, spec.version, produced_by=toolchain_versions(), level=spec.level, dictionary=spec.dictionary
    )
    for v in result.built:
        if not builder.add(v):
            result.duplicates += 1
    kernels = {v.kernel for v in result.built}
    if wrapped.autotune:
        builder.autotune = align_kernel_names(wrapped.autotune, kernels)
    if wrapped.heuristics:
        builder.heuristics = align_kernel_names(wrapped.heuristics, kernels)
    stats = builder.write(output)
    result.archive_bytes = stats.archive_bytes
    result.raw_bytes = stats.raw_bytes
    result.seconds = time.perf_counter() - start
    return result


# --- which executor runs the compiles ---------------------------------------------------------
#: ``HOST:PORT`` of a Ray cluster's GCS, as ``ray start --head`` prints it (IPv6 in brackets).
_GCS_ADDRESS = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):\d{1,5}")

EXECUTOR_HELP = (
    "local (default: -j worker processes here), ray (a local Ray started for this build), "
    "auto (the Ray cluster this machine belongs to: RAY_ADDRESS or the one `ray start` made), "
    "ray://HOST:PORT (Ray Client) or HOST:PORT (a cluster's GCS address); with a cluster, -j caps the "
    "compiles in flight (default: as many as the cluster schedules)"
)


def executor_kind(spec: str | None) -> str:
    """``local`` or ``ray`` for a ``--executor`` value; anything else is refused (before any work)."""
    text = (spec or "local").strip()
    if text == "local":
        return "local"
    if text in ("ray", "auto") or text.startswith("ray://") or _GCS_ADDRESS.fullmatch(text):
        return "ray"
    raise BuildError(f"unknown executor {text!r}: use {EXECUTOR_HELP}")


def make_executor(spec: str | None = None, jobs: int = 0, *, verbose: bool = True) -> Executor:
    """The executor a ``--executor`` value names (see :data:`EXECUTOR_HELP`); Ray is imported only here.

    ``verbose`` False keeps a cluster's worker logs off this process's stdout (``--json``, ``--quiet``).
    """
    text = (spec or "local").strip()
    if executor_kind(text) == "local":
        return LocalExecutor(jobs)
    from .executors_ray import RayExecutor  # Ray itself is imported there, only now

    if text == "ray":
        return RayExecutor(None, num_cpus=jobs or None, log_to_driver=verbose)
    return RayExecutor(text, max_in_flight=jobs or None, log_to_driver=verbose)
