"""Where compile tasks run: worker processes on this machine (``-j N``) or a Ray cluster (``--executor``).

Every executor runs the same compile (:func:`karchive.producer.compile.aot.compile_variant`) on the same
request and hands back the same :class:`CompiledVariant`, so the archive never depends on where a
variant compiled; the build sorts and packs what comes back (tests/test_build_ray.py checks that a
Ray build and a ``-j`` build are byte-identical). Ray is optional: this module never imports it, and
:func:`make_executor` imports :mod:`karchive.producer.build.executors_ray` only when a Ray executor is asked for.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from collections.abc import Callable
from typing import Any

from ...errors import BuildError, KarchiveError
from ..compile.aot import VariantRequest, compile_variant
from ..compile.buildenv import strip_shell
from ..compile.describe import CompiledVariant


@dataclass
class TaskOutcome:
    """One finished compile task: the variant or the compiler's message, and where it ran."""

    index: int  # position of the request in the list handed to run()
    variant: CompiledVariant | None
    error: str | None
    seconds: float  # time inside the task (import + compile + describe), as the worker measured it
    worker: str = ""  # "pid 123", or "node 1a2b3c4d pid 123" on Ray: for progress lines and the summary


OnOutcome = Callable[[TaskOutcome], None]


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
        return f"{jobs} local worker process{'es' if jobs != 1 else ''}"

    def run(self, requests: list[VariantRequest], on_outcome: OnOutcome) -> None:
        workers = self._workers(len(requests))
        if workers <= 1 or len(requests) <= 1:
            for i, req in enumerate(requests):
                variant, error, secs = compile_one(req)
                on_outcome(TaskOutcome(i, variant, error, secs, f"pid {os.getpid()}"))
            return
        # spawn: workers start clean (no inherited Triton state or threads) on every platform, and
        # strip_shell runs before they import Triton, which freezes some variables into defaults.
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=strip_shell) as pool:
            futures = [pool.submit(_compile_indexed, i, req) for i, req in enumerate(requests)]
            for fut in as_completed(futures):
                index, variant, error, secs, pid = fut.result()
                on_outcome(TaskOutcome(index, variant, error, secs, f"pid {pid}"))


#: ``HOST:PORT`` of a Ray cluster's GCS, as ``ray start --head`` prints it (IPv6 in brackets).
_GCS_ADDRESS = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):\d{1,5}")

EXECUTOR_HELP = ("local (default: -j worker processes here), ray (a local Ray started for this build), "
                 "auto (the Ray cluster this machine belongs to: RAY_ADDRESS or the one `ray start` made), "
                 "ray://HOST:PORT (Ray Client) or HOST:PORT (a cluster's GCS address); with a cluster, -j caps the "
                 "compiles in flight (default: as many as the cluster schedules)")


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
    from .executors_ray import RayExecutor

    if text == "ray":
        return RayExecutor(None, num_cpus=jobs or None, log_to_driver=verbose)
    return RayExecutor(text, max_in_flight=jobs or None, log_to_driver=verbose)
