"""Compile many variants in parallel worker processes, with progress, then pack one archive."""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Callable

from ..core.destination import output_file
from ..errors import BuildError, KarchiveError
from .aot import VariantRequest, compile_variant, toolchain_versions
from .buildenv import shell_warning, strip_shell
from .describe import CompiledVariant
from .pack import ArchiveBuilder
from .spec_file import BuildSpec


@dataclass
class BuildResult:
    built: list[CompiledVariant] = field(default_factory=list)
    failed: list[tuple[VariantRequest, str]] = field(default_factory=list)
    duplicates: int = 0
    seconds: float = 0.0
    archive_bytes: int = 0
    raw_bytes: int = 0
    warnings: list[str] = field(default_factory=list)


def _compile_one(req: VariantRequest) -> tuple[CompiledVariant | None, str | None, float]:
    """Worker entry: returns (variant, error text, seconds); never raises across the process boundary."""
    start = time.perf_counter()
    try:
        return compile_variant(req), None, time.perf_counter() - start
    except KarchiveError as exc:
        return None, str(exc), time.perf_counter() - start
    except Exception as exc:  # noqa: BLE001 - an unexpected compiler crash is still one variant's failure
        return None, f"{req.label()}: {type(exc).__name__}: {exc}", time.perf_counter() - start


class Progress:
    """A rich progress bar on a terminal, one plain line per variant otherwise (CI logs)."""

    def __init__(self, total: int, enabled: bool = True) -> None:
        self.total = total
        self.done = 0
        self.enabled = enabled
        self._bar = None
        if enabled and sys.stderr.isatty():
            try:
                from rich.progress import BarColumn, MofNCompleteColumn, Progress as RichProgress, TextColumn, TimeElapsedColumn

                from rich.table import Column

                # The label is the one flexible column, cut with "…" at the terminal's edge (a long label
                # otherwise squeezes the bar away); markup=False: "[cuda:90]" is text, not a rich style tag.
                fixed = Column(no_wrap=True)
                self._bar = RichProgress(TextColumn("compiling", table_column=fixed),
                                         BarColumn(bar_width=24, table_column=Column(no_wrap=True)),
                                         MofNCompleteColumn(table_column=Column(no_wrap=True)),
                                         TimeElapsedColumn(table_column=Column(no_wrap=True)),
                                         TextColumn("{task.description}", markup=False,
                                                    table_column=Column(no_wrap=True, overflow="ellipsis", ratio=1)),
                                         transient=True, expand=True)
                self._bar.start()
                self._task = self._bar.add_task("", total=total)
            except ImportError:
                self._bar = None

    def step(self, label: str, ok: bool, seconds: float) -> None:
        self.done += 1
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.update(self._task, advance=1, description=label)
        else:
            status = "ok  " if ok else "FAIL"
            print(f"[{self.done}/{self.total}] {status} {label} ({seconds:.2f}s)", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()


def compile_all(requests: list[VariantRequest], jobs: int = 0, progress: bool = True,
                on_result: Callable[[VariantRequest, CompiledVariant | None, str | None], None] | None = None
                ) -> tuple[list[CompiledVariant], list[tuple[VariantRequest, str]]]:
    jobs = jobs or min(len(requests), os.cpu_count() or 1)
    bar = Progress(len(requests), progress)
    built: list[CompiledVariant] = []
    failed: list[tuple[VariantRequest, str]] = []

    def record(req: VariantRequest, variant: CompiledVariant | None, error: str | None, secs: float) -> None:
        if variant is not None:
            built.append(variant)
        else:
            failed.append((req, error or "unknown error"))
        bar.step(req.label(), variant is not None, secs)
        if on_result:
            on_result(req, variant, error)

    try:
        if jobs <= 1 or len(requests) <= 1:
            for req in requests:
                record(req, *_compile_one(req))
        else:
            # spawn: workers start clean (no inherited Triton state or threads) on every platform, and
            # strip_shell runs before they import Triton, which freezes some variables into defaults.
            ctx = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=strip_shell) as pool:
                futures = {pool.submit(_compile_one, req): req for req in requests}
                for fut in as_completed(futures):
                    record(futures[fut], *fut.result())
    finally:
        bar.close()
    # Results arrive in completion order; sort so the archive never depends on scheduling.
    order = {id(r): i for i, r in enumerate(requests)}
    failed.sort(key=lambda f: order.get(id(f[0]), 0))
    return built, failed


def build_archive(spec: BuildSpec, output: str | os.PathLike, *, jobs: int = 0, keep_going: bool = False,
                  progress: bool = True) -> BuildResult:
    """Compile every request of ``spec`` and write the archive; fail unless all built or ``keep_going``."""
    start = time.perf_counter()
    output = output_file(output)  # a destination that cannot work fails now, not after every compile
    warning = shell_warning()  # once here, not once per worker
    built, failed = compile_all(spec.requests, jobs=jobs, progress=progress)
    result = BuildResult(built=built, failed=failed, warnings=[warning] if warning else [])
    lines = "\n".join(f"  - {msg}" for _, msg in failed)
    failures = tuple((req.label(), msg) for req, msg in failed)
    if failed and not keep_going:
        result.seconds = time.perf_counter() - start
        # The hint only where there is a rest to pack.
        hint = " (use --keep-going to pack the rest)" if built else ""
        noun = "variant" if len(spec.requests) == 1 else "variants"
        raise BuildError(f"{len(failed)} of {len(spec.requests)} {noun} failed{hint}:\n{lines}", failures=failures)
    if not built:
        raise BuildError("no variant was built; nothing to pack" + (f":\n{lines}" if lines else ""), failures=failures)
    builder = ArchiveBuilder(spec.name, spec.version, produced_by=toolchain_versions(), level=spec.level,
                             dictionary=spec.dictionary)
    for v in built:
        if not builder.add(v):
            result.duplicates += 1
    stats = builder.write(output)
    result.archive_bytes = stats.archive_bytes
    result.raw_bytes = stats.raw_bytes
    result.seconds = time.perf_counter() - start
    return result
