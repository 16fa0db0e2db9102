"""Where compile tasks run: worker processes on this machine (``-j N``) or a Ray cluster (``--executor``).

Every executor runs the same compile (:func:`karchive.producer.compile.aot.compile_variant`) on the same
request and hands back the same :class:`CompiledVariant`, so the archive never depends on where a
variant compiled; the build sorts and packs what comes back (tests/test_build_ray.py checks that a
Ray build and a ``-j`` build are byte-identical). This module holds the contract (:class:`Executor`,
:class:`TaskOutcome`) and the local executor; :mod:`.executors_ray` builds on it, and the choice between them
(:func:`karchive.producer.build.pipeline.make_executor`) lives with the build, so Ray is imported only
when a Ray executor is asked for and no executor module imports another that imports it back.
"""

from __future__ import annotations

import multiprocessing.context
import os
import sys
import threading
import time
import types
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any

from ...core.text import plural
from ...errors import KarchiveError
from ..compile.aot import VariantRequest, compile_variant
from ..compile.buildenv import strip_shell
from ..compile.describe import CompiledVariant

__all__ = ["Executor", "LocalExecutor", "OnOutcome", "TaskOutcome", "compile_one", "worker_context"]


@dataclass
class TaskOutcome:
    """One finished compile task: the variant or the compiler's message, and where it ran."""

    index: int  # position of the request in the list handed to run()
    variant: CompiledVariant | None
    error: str | None
    seconds: float  # time inside the task (import + compile + describe), as the worker measured it
    worker: str = ""  # "pid 123", or "node 1a2b3c4d pid 123" on Ray: for progress lines and the summary


OnOutcome = Callable[[TaskOutcome], None]


_MAIN_SWAP = threading.Lock()


class _WorkerProcess(multiprocessing.context.SpawnProcess):
    """A spawn process that does not re-run the caller's ``__main__``.

    multiprocessing's spawn re-imports the parent's main script (or module) in every child so that
    functions defined there unpickle. Compile tasks are karchive functions on plain data, so the child
    needs none of it, and re-running a script without an ``if __name__ == "__main__":`` guard (a pasted
    README snippet) starts the build again in every worker (BrokenProcessPool), while ``python -`` makes
    the children look for a script named ``<stdin>``. The parent's main module is hidden while the child
    is started, so no main module is named to it; the caller's module itself is never touched.
    """

    @staticmethod
    def _Popen(process_obj: Any) -> Any:
        with _MAIN_SWAP:
            main = sys.modules.get("__main__")
            sys.modules["__main__"] = types.ModuleType("__main__")
            try:
                return multiprocessing.context.SpawnProcess._Popen(process_obj)
            finally:
                if main is not None:
                    sys.modules["__main__"] = main


class _WorkerContext(multiprocessing.context.SpawnContext):
    Process = _WorkerProcess


def worker_context() -> multiprocessing.context.SpawnContext:
    """The start method of karchive's worker pools: spawn, without the caller's main module.

    spawn: workers start clean (no inherited Triton state or threads) on every platform. Without the
    main module: the library is safe to call from any script, guarded or not, and from ``python -``.
    """
    return _WorkerContext()


def compile_one(req: VariantRequest) -> tuple[CompiledVariant | None, str | None, float]:
    """Run one compile; returns (variant, error text, seconds) and never raises across a process boundary."""
    start = time.perf_counter()
    try:
        return compile_variant(req), None, time.perf_counter() - start
    except KarchiveError as exc:
        return None, str(exc), time.perf_counter() - start
    except Exception as exc:  # noqa: BLE001 - an unexpected compiler crash is still one variant's failure
        return None, f"{req.label()}: {type(exc).__name__}: {exc}", time.perf_counter() - start


def _compile_indexed(index: int, req: VariantRequest) -> tuple[int, CompiledVariant | None, str | None, float, int]:
    variant, error, secs = compile_one(req)
    return index, variant, error, secs, os.getpid()


class Executor:
    """Runs compile tasks and reports each as it finishes; ``start``/``close`` bracket its resources."""

    kind = "abstract"

    def start(self) -> None:
        """Acquire workers (a process pool is made per run; a Ray executor connects here)."""

    def describe(self) -> dict[str, Any]:
        """What runs the tasks, for the progress header and the ``--json`` summary."""
        return {"kind": self.kind}

    def headline(self) -> str:
        return self.kind

    def run(self, requests: list[VariantRequest], on_outcome: OnOutcome) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Release what ``start`` acquired; safe to call twice."""

    def __enter__(self) -> Executor:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class LocalExecutor(Executor):
    """``-j N`` spawn worker processes on this machine (in-process for one job or one variant)."""

    kind = "local"

    def __init__(self, jobs: int = 0) -> None:
        self.jobs = jobs

    def _workers(self, n: int) -> int:
        return max(1, min(n, self.jobs or os.cpu_count() or 1))

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "jobs": self.jobs or os.cpu_count() or 1}

    def headline(self) -> str:
        jobs = self.jobs or os.cpu_count() or 1
        return plural(jobs, "local worker process", "local worker processes")

    def run(self, requests: list[VariantRequest], on_outcome: OnOutcome) -> None:
        workers = self._workers(len(requests))
        if workers <= 1 or len(requests) <= 1:
            for i, req in enumerate(requests):
                variant, error, secs = compile_one(req)
                on_outcome(TaskOutcome(i, variant, error, secs, f"pid {os.getpid()}"))
            return
        # worker_context: spawned clean, without re-running the caller's script; strip_shell runs before
        # they import Triton, which freezes some variables into defaults.
        with ProcessPoolExecutor(max_workers=workers, mp_context=worker_context(), initializer=strip_shell) as pool:
            futures = [pool.submit(_compile_indexed, i, req) for i, req in enumerate(requests)]
            for fut in as_completed(futures):
                index, variant, error, secs, pid = fut.result()
                on_outcome(TaskOutcome(index, variant, error, secs, f"pid {pid}"))
