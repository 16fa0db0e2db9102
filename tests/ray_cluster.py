"""A real Ray cluster on this machine: a head and worker nodes, each a separate `ray start` process tree.

Used by tests/test_build_ray.py and tools/bench_build.py. Every node runs `ray start --block` in a
session of its own, so stopping the cluster signals exactly the process groups this helper started
(never `ray stop`, which would stop every Ray on the machine). Nodes keep their files in a private
temp dir (short: Ray's Unix sockets live there) and use token authentication with a token of their own.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

RAY = str(Path(sys.executable).with_name("ray"))

#: Waits for a cluster with N alive nodes, through the same client API the build uses.
_WAIT_NODES = r"""
import sys, time, ray
ray.init(address=sys.argv[1], logging_level="ERROR")
want, deadline = int(sys.argv[2]), time.time() + float(sys.argv[3])
while time.time() < deadline:
    alive = [n for n in ray.nodes() if n.get("Alive")]
    if len(alive) >= want:
        print(len(alive)); sys.exit(0)
    time.sleep(0.2)
sys.exit(f"only {len(alive)} of {want} Ray nodes came up")
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalRayCluster:
    """``with LocalRayCluster(workers=1) as c: ... c.address ...``: head + ``workers`` nodes, ``cpus`` each."""

    def __init__(
        self,
        workers: int = 1,
        cpus: int = 1,
        env: dict[str, str] | None = None,
        client_server: bool = False,
        log_dir: Path | None = None,
    ) -> None:
        self.workers, self.cpus = workers, cpus
        # Token authentication with a token of this cluster's own (Ray 2.5x: a local cluster otherwise
        # writes ~/.ray/auth_token); a driver needs driver_env to connect.
        self.auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32), "RAY_USAGE_STATS_ENABLED": "0"}
        self.env = {**os.environ, **self.auth, **(env or {})}
        self.client_port = free_port() if client_server else None
        self.port = free_port()
        self.temp_dir = tempfile.mkdtemp(prefix="kray-", dir="/tmp")
        self.log_dir = log_dir or Path(self.temp_dir)
        self.procs: list[subprocess.Popen] = []

    def driver_env(self, **extra: str) -> dict[str, str]:
        """This process's environment plus what a driver needs to connect to this cluster."""
        return {**os.environ, **self.auth, **extra}

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def client_address(self) -> str:
        return f"ray://127.0.0.1:{self.client_port}"

    def _start(self, name: str, args: list[str]) -> None:
        log = open(self.log_dir / f"{name}.log", "wb")
        self.procs.append(
            subprocess.Popen(
                [
                    RAY,
                    "start",
                    "--block",
                    f"--num-cpus={self.cpus}",
                    f"--temp-dir={self.temp_dir}",
                    "--disable-usage-stats",
                    *args,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=self.temp_dir,
                start_new_session=True,
            )
        )

    def start(self, timeout: float = 120.0) -> LocalRayCluster:
        head = ["--head", f"--port={self.port}", "--include-dashboard=false"]
        if self.client_port:
            head.append(f"--ray-client-server-port={self.client_port}")
        self._start("head", head)
        deadline = time.time() + timeout
        while not self._gcs_answers():  # the GCS port answers once the head is up
            if time.time() > deadline or self.procs[0].poll() is not None:
                logs = self.logs()
                self.stop()
                raise RuntimeError(f"the Ray head did not start: {logs}")
            time.sleep(0.2)
        for i in range(self.workers):
            self._start(f"worker{i}", [f"--address={self.address}"])
        r = subprocess.run(
            [
                sys.executable,
                "-c",
                _WAIT_NODES,
                self.address,
                str(self.workers + 1),
                str(max(10.0, deadline - time.time())),
            ],
            capture_output=True,
            text=True,
            env=self.env,
        )
        if r.returncode != 0:
            logs = self.logs()
            self.stop()
            raise RuntimeError(f"the Ray cluster did not come up: {r.stderr[-2000:]}\n{logs}")
        return self

    def _gcs_answers(self) -> bool:
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
            return True
        except OSError:
            return False

    def logs(self) -> str:
        out = []
        for f in sorted(self.log_dir.glob("*.log")):
            out.append(f"--- {f.name}\n{f.read_text(errors='replace')[-1500:]}")
        return "\n".join(out)

    def owns(self, pid: int) -> bool:
        """Whether ``pid`` descends from one of this cluster's `ray start` processes."""
        roots = {p.pid for p in self.procs}
        try:
            proc = psutil.Process(pid)
            return any(a.pid in roots for a in proc.parents())
        except psutil.Error:
            return False

    def task_processes(self, title: str) -> list[psutil.Process]:
        """This cluster's worker processes whose title (Ray sets ``ray::<task>`` while running one) is ``title``."""
        found = []
        for p in self.procs:
            try:
                for child in psutil.Process(p.pid).children(recursive=True):
                    try:
                        if child.cmdline()[:1] == [title] or child.name() == title:
                            found.append(child)
                    except psutil.Error:
                        continue
            except psutil.Error:
                continue
        return found

    def stop(self) -> None:
        """SIGTERM each node's `ray start --block` (it then stops its node), SIGKILL what remains of its group."""
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in reversed(self.procs):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(p.pid, signal.SIGKILL)  # anything of that node still alive (its group is its own)
            except (ProcessLookupError, PermissionError):
                pass
            p.wait()
        self.procs.clear()
        shutil.rmtree(self.temp_dir, ignore_errors=True)

    def __enter__(self) -> LocalRayCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
