"""Compile tasks on a Ray cluster: ``karchive build SPEC -o OUT --executor ray|auto|ray://HOST:PORT|HOST:PORT``.

Each variant is one Ray task (``num_cpus=1``) that carries its request and, by object reference, its
kernel's module sources (_executors_ship.py): workers need karchive and Triton installed, never the
driver's files. Ray retries a task whose worker process or node dies (``max_retries``,
:data:`MAX_RETRIES`); a compile error is not an exception to Ray but a returned message, so it is
reported once, as in a local build, and never retried. The driver packs what comes back exactly as a
local build does, so the archive is byte-identical to ``-j N`` (tests/test_build_ray.py).

This is the only module that imports Ray; nothing imports it unless an executor of Ray is asked for.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from typing import Any

try:
    import ray
except ImportError as exc:  # pragma: no cover - exercised in a subprocess without Ray (tests/test_build_ray.py)
    from ...errors import BuildError

    raise BuildError(
        f"--executor ray needs Ray on this machine and on the cluster: pip install 'karchive[ray]' ({exc})"
    ) from exc

from ...core.text import plural
from ...errors import BuildError
from ..compile.aot import VariantRequest
from ._executors_ship import ShippedKernel, ShippedModule, compile_shipped, ship_requests, toolchain_identity
from .executors import Executor, OnOutcome, TaskOutcome

__all__ = ["CLIENT_CONNECT_ATTEMPTS", "MAX_RETRIES", "RayExecutor", "WAIT_BATCH", "WAIT_S"]

#: Attempts after the first when a worker process or node dies mid-task (Ray's default for tasks is 3).
MAX_RETRIES = 3
#: Attempts at a ``ray://`` client connection whose server side fails to start (see RayExecutor._init_cluster).
CLIENT_CONNECT_ATTEMPTS = 3

#: Outcomes are collected in batches of up to this many (or after WAIT_S): ray.wait on the whole pending
#: list once per finished task would cost O(tasks^2) on a 10,000-variant build.
WAIT_BATCH = 64
WAIT_S = 0.2


def _ray_compile(request: VariantRequest, modules: tuple[ShippedModule, ...]) -> tuple[Any, str | None, float, dict]:
    """The Ray task: compile one shipped variant; report who ran it with which toolchain."""
    variant, error, secs = compile_shipped(request, modules)
    try:
        node = ray.get_runtime_context().get_node_id()
    except Exception:  # noqa: BLE001 - only for progress lines; an unknown node is not a failure
        node = None
    who = {"node": node, "pid": os.getpid(), "toolchain": toolchain_identity()}
    return variant, error, secs, who


def _short(node: str | None) -> str:
    return (node or "?")[:8]


class RayExecutor(Executor):
    """Compile on Ray: a local instance started for this build (``address=None``) or an existing cluster."""

    kind = "ray"

    def __init__(
        self,
        address: str | None,
        *,
        num_cpus: int | None = None,
        max_in_flight: int | None = None,
        max_retries: int = MAX_RETRIES,
        log_to_driver: bool = True,
    ) -> None:
        self.address = address
        self.log_to_driver = log_to_driver  # Ray prints worker logs on this process's stdout: not with --json
        self.num_cpus = num_cpus
        self.max_in_flight = max_in_flight
        self.max_retries = max_retries
        self._connected = False
        self._owned = False
        self._stdout: Any = None
        self.workers: dict[str, int] = {}  # "node <id> pid <pid>" -> variants compiled there

    # -- connection ------------------------------------------------------------------------------
    def start(self) -> None:
        if self._connected:
            return
        # While connected, Ray's driver threads print cluster messages ("A worker died ...") with a plain
        # print() to sys.stdout (ray/_private/worker.py, listen_error_messages / print_to_stdstream):
        # they are diagnostics, and stdout belongs to the build's own output (--json), so they go to stderr.
        self._stdout, sys.stdout = sys.stdout, sys.stderr
        if ray.is_initialized():  # a library caller connected already: use that connection, leave it open
            self._connected = True
            return
        kwargs: dict[str, Any] = {"logging_level": logging.WARNING, "log_to_driver": self.log_to_driver}
        try:
            if self.address is None:
                # "local": always a new instance, never a cluster found through RAY_ADDRESS or `ray start`.
                ray.init(address="local", num_cpus=self.num_cpus, include_dashboard=False, **kwargs)
            else:
                self._init_cluster(kwargs)
        except Exception as exc:
            self._restore_stdout()
            where = "a local Ray instance" if self.address is None else f"the Ray cluster at {self.address}"
            raise BuildError(f"cannot start or reach {where}: {type(exc).__name__}: {exc}") from exc
        self._connected = self._owned = True

    def _init_cluster(self, kwargs: dict[str, Any]) -> None:
        """Connect to an existing cluster. A ``ray://`` connection is retried when the server side fails
        to start: Ray's client proxy starts one server process per connection, and when that process
        dies while the proxy polls it (ray/util/client/server/proxier.py, ``start_specific_server``:
        ``psutil.ZombieProcess``) the client sees ``ConnectionAbortedError: Initialization failure from
        server``; a new connection starts a new server. Anything else fails at once."""
        attempts = CLIENT_CONNECT_ATTEMPTS if str(self.address).startswith("ray://") else 1
        for attempt in range(1, attempts + 1):
            try:
                ray.init(address=self.address, **kwargs)
                return
            except ConnectionError as exc:  # ConnectionAbortedError is one
                if attempt == attempts:
                    raise
                print(
                    f"karchive: Ray client connection to {self.address} failed ({type(exc).__name__}); "
                    f"retrying ({attempt}/{attempts - 1})",
                    file=sys.stderr,
                    flush=True,
                )
                with contextlib.suppress(Exception):
                    ray.shutdown()  # a half-made client connection must not be taken for a live one
                time.sleep(2.0 * attempt)

    def close(self) -> None:
        try:
            if self._owned and ray.is_initialized():
                ray.shutdown()  # stops a local instance this build started; only disconnects from a cluster
        finally:
            self._connected = self._owned = False
            self._restore_stdout()

    def _restore_stdout(self) -> None:
        if self._stdout is not None:
            sys.stdout, self._stdout = self._stdout, None

    def cluster(self) -> dict[str, Any]:
        """Alive nodes and CPUs, as the cluster reports them now."""
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        cpus = sum(float((n.get("Resources") or {}).get("CPU", 0)) for n in nodes)
        return {"nodes": len(nodes), "cpus": cpus}

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "address": self.address or "local"}
        if self._connected:
            out.update(self.cluster())
        out["workers"] = [{"worker": w, "variants": n} for w, n in sorted(self.workers.items())]
        return out

    def headline(self) -> str:
        c = self.cluster() if self._connected else {"nodes": "?", "cpus": "?"}
        where = "a local Ray instance" if self.address is None else f"Ray cluster {self.address}"
        cpus = c["cpus"]
        cpus = int(cpus) if isinstance(cpus, float) and cpus.is_integer() else cpus
        nodes = f"{plural(c['nodes'], 'node')}" if isinstance(c["nodes"], int) else f"{c['nodes']} nodes"
        cpus_text = plural(cpus, "CPU") if isinstance(cpus, int) else f"{cpus} CPUs"
        return f"{where}: {nodes}, {cpus_text}"

    # -- running ---------------------------------------------------------------------------------
    def run(self, requests: list[VariantRequest], on_outcome: OnOutcome) -> None:
        self.start()
        shipped, kernels = ship_requests(requests)  # reads the driver's modules before anything is sent
        self.run_shipped(shipped, kernels, on_outcome)

    def run_shipped(
        self, requests: list[VariantRequest], kernels: dict[str, ShippedKernel], on_outcome: OnOutcome
    ) -> None:
        """Run requests already rewritten by :func:`ship_requests`: from here on no driver file is read."""
        self.start()
        expected = toolchain_identity()
        # Each distinct module set once (every kernel of one checkout ships the same), not once per task.
        bundles: dict[tuple[ShippedModule, ...], Any] = {}
        refs: dict[str, Any] = {}
        for kernel_ref, k in kernels.items():
            if k.modules not in bundles:
                bundles[k.modules] = ray.put(k.modules)
            refs[kernel_ref] = bundles[k.modules]
        task = ray.remote(_ray_compile).options(num_cpus=1, max_retries=self.max_retries, retry_exceptions=False)
        todo = list(range(len(requests)))
        todo.reverse()  # pop() from the end submits in request order
        pending: dict[Any, int] = {}
        limit = self.max_in_flight or len(requests)
        try:
            while todo or pending:
                while todo and len(pending) < limit:
                    i = todo.pop()
                    pending[task.remote(requests[i], refs[requests[i].kernel_ref])] = i
                done, _ = ray.wait(list(pending), num_returns=min(WAIT_BATCH, len(pending)), timeout=WAIT_S)
                for ref in done:
                    i = pending.pop(ref)
                    on_outcome(self._outcome(i, requests[i], ref, expected))
        finally:
            for ref in pending:
                ray.cancel(ref, force=True)

    def _outcome(self, index: int, req: VariantRequest, ref: Any, expected: dict) -> TaskOutcome:
        try:
            variant, error, secs, who = ray.get(ref)
        except ray.exceptions.RayError as exc:
            # The task could not finish: its worker or node died more than max_retries times, or Ray
            # could not run it at all (a worker without karchive cannot even unpickle the request).
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            return TaskOutcome(
                index,
                None,
                f"{req.label()}: the Ray task failed ({type(exc).__name__}, "
                f"after up to {self.max_retries} retries): {first}",
                0.0,
                "",
            )
        worker = f"node {_short(who.get('node'))} pid {who.get('pid')}"
        got = who.get("toolchain") or {}
        if got != expected:
            differs = ", ".join(
                f"{k} {got.get(k)} (worker) vs {expected.get(k)} (here)"
                for k in sorted(set(got) | set(expected))
                if got.get(k) != expected.get(k)
            )
            raise BuildError(
                f"worker {worker} compiles with another toolchain ({differs}); an archive records one "
                "toolchain, so every worker needs the same karchive, Triton and ptxas as this machine "
                "(docs/build-at-scale.md)"
            )
        self.workers[worker] = self.workers.get(worker, 0) + 1
        return TaskOutcome(index, variant, error, secs, worker)
