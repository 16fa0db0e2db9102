"""A real OCI registry for the tests: the CNCF distribution registry (Debian's ``docker-registry``,
installed by tools/oci_registry.sh) on 127.0.0.1 with htpasswd authentication, and a fault-injecting
proxy in front of it (429/503 with Retry-After, a tampered blob, a registry killed mid-upload).

Each :class:`OciRegistry` is its own process with its own storage directory, so a test can kill it.
The htpasswd file's bcrypt hash is made by Apache's ``htpasswd`` (apache2-utils) where present.
"""

from __future__ import annotations

import http.client
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from registry_servers import free_port

USER, PASSWORD = "kernels", "s3cret-pass"
BINARY = shutil.which("docker-registry") or shutil.which("registry")


def require_registry() -> str:
    if BINARY is None:
        pytest.skip(
            "needs the CNCF distribution registry (Debian: apt-get install docker-registry; "
            "tools/oci_registry.sh installs it)"
        )
    try:
        import oras  # noqa: F401
    except ImportError:
        pytest.skip("needs oras-py (pip install 'karchive[oci]')")
    return BINARY


def _htpasswd(path: Path) -> None:
    tool = shutil.which("htpasswd")
    if tool:
        out = subprocess.run([tool, "-Bbn", USER, PASSWORD], capture_output=True, text=True, check=True).stdout
        path.write_text(out)
        return
    import bcrypt  # type: ignore[import-not-found]

    path.write_text(f"{USER}:{bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt()).decode()}\n")


class OciRegistry:
    """``docker-registry serve`` on a free loopback port; :meth:`stop` kills it (SIGKILL by default)."""

    def __init__(self, auth: bool = True, root: Path | None = None) -> None:
        binary = require_registry()
        self.dir = Path(tempfile.mkdtemp(prefix="karchive-oci-"))
        self.data = root or self.dir / "data"
        self.port = free_port()
        self.auth = auth
        lines = [
            "version: 0.1",
            "log:",
            "  level: error",
            "storage:",
            "  filesystem:",
            f"    rootdirectory: {self.data}",
            "  delete:",
            "    enabled: true",
            "http:",
            f"  addr: 127.0.0.1:{self.port}",
        ]
        if auth:
            _htpasswd(self.dir / "htpasswd")
            lines += ["auth:", "  htpasswd:", "    realm: karchive-tests", f"    path: {self.dir / 'htpasswd'}"]
        (self.dir / "config.yml").write_text("\n".join(lines) + "\n")
        self.log = open(self.dir / "log.txt", "wb")
        self.proc = subprocess.Popen(
            [binary, "serve", str(self.dir / "config.yml")], stdout=self.log, stderr=subprocess.STDOUT
        )
        _wait_port(self.port, self.proc)

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def url(self, namespace: str = "kernels") -> str:
        return f"oci://{self.host}/{namespace}"

    def options(self, **extra: Any) -> dict[str, Any]:
        return {"username": USER, "password": PASSWORD, **extra} if self.auth else dict(extra)

    def restart(self) -> None:
        self.stop()
        self.proc = subprocess.Popen(
            [str(BINARY), "serve", str(self.dir / "config.yml")], stdout=self.log, stderr=subprocess.STDOUT
        )
        _wait_port(self.port, self.proc)

    def stop(self, sig: int = signal.SIGKILL) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(10)

    def close(self) -> None:
        self.stop()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def _wait_port(port: int, proc: subprocess.Popen, timeout: float = 20) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"docker-registry exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), 0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("docker-registry did not start")


# -- a fault-injecting proxy ----------------------------------------------------------------------
Fault = Callable[["FaultProxy", str, str, dict[str, str]], "tuple[int, dict[str, str], bytes] | None"]


class FaultProxy:
    """An HTTP/1.1 proxy on loopback to ``upstream``; ``fault(proxy, method, path, headers)`` may answer
    instead (``(status, headers, body)``); ``rewrite(method, path, status, body)`` may change a body.
    ``log`` lists ``(method, path, status, Range, bytes)`` of every request that reached the upstream."""

    def __init__(self, upstream: OciRegistry) -> None:
        self.upstream = upstream
        self.fault: Fault | None = None
        self.rewrite: Callable[[str, str, int, bytes], bytes] | None = None
        self.log: list[tuple[str, str, int, str, int]] = []
        self.faults: list[tuple[str, str, int]] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                if proxy.fault is not None:
                    answer = proxy.fault(proxy, self.command, self.path, headers)
                    if answer is not None:
                        status, extra, payload = answer
                        proxy.faults.append((self.command, self.path, status))
                        self.send_response(status)
                        for k, v in extra.items():
                            self.send_header(k, v)
                        self.send_header("Content-Length", str(len(payload)))
                        self.end_headers()
                        self.wfile.write(payload)
                        return
                conn = http.client.HTTPConnection("127.0.0.1", proxy.upstream.port, timeout=30)
                try:
                    conn.request(self.command, self.path, body=body or None, headers=headers)
                    resp = conn.getresponse()
                    data = resp.read()
                except OSError:
                    self.close_connection = True
                    return
                finally:
                    conn.close()
                if proxy.rewrite is not None:
                    data = proxy.rewrite(self.command, self.path, resp.status, data)
                proxy.log.append((self.command, self.path, resp.status, self.headers.get("Range", ""), len(data)))
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() in ("connection", "transfer-encoding", "date", "server"):
                        continue
                    if k.lower() == "content-length":
                        if self.command == "HEAD":
                            self.send_header(k, v)  # HEAD: the upstream's length, not the empty body's
                        continue
                    if k.lower() == "location":
                        v = v.replace(f"127.0.0.1:{proxy.upstream.port}", f"127.0.0.1:{proxy.port}")
                    self.send_header(k, v)
                if self.command != "HEAD":
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_HEAD = do_PUT = do_POST = do_PATCH = do_DELETE = _any

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def url(self, namespace: str = "kernels") -> str:
        return f"oci://{self.host}/{namespace}"

    def mark(self) -> int:
        return len(self.log)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def env_for(reg: OciRegistry | FaultProxy, registry: OciRegistry) -> dict[str, str]:
    """Environment for a CLI child process reaching ``reg`` with ``registry``'s credentials."""
    import json

    return {"KARCHIVE_REGISTRY": reg.url(), "KARCHIVE_STORAGE_OPTIONS": json.dumps(registry.options())}


__all__ = ["OciRegistry", "FaultProxy", "env_for", "require_registry", "USER", "PASSWORD"]
