"""With no network (or a mistyped endpoint), registry commands fail at once, in one line, without tracebacks.

Cloud clients retry connection errors on their own before karchive's policy sees them (gcsfs: six
attempts, ~30 s of backoff), so a name that does not resolve used to take minutes and print a traceback
per attempt (issue 15, item 1). A host under ``.invalid`` never resolves (RFC 2606).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

from karchive.registry.retry import RetryPolicy, cannot_resolve, is_transient


def _karchive(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "karchive.cli.main", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=120,
    )


@pytest.mark.parametrize(
    ("url", "env"),
    [
        pytest.param("gs://bucket/prefix", {"STORAGE_EMULATOR_HOST": "http://nosuchhost.invalid:4443"}, id="gcs"),
        pytest.param(
            "s3://bucket/prefix",
            {"KARCHIVE_STORAGE_OPTIONS": '{"endpoint_url": "http://nosuchhost.invalid:9000", "anon": true}'},
            id="s3",
        ),
        pytest.param("http://nosuchhost.invalid:8000/registry", {}, id="http"),
    ],
)
def test_an_unresolvable_registry_host_fails_fast_in_one_line(url, env, tmp_path):
    pytest.importorskip({"gs": "gcsfs", "s3": "s3fs", "ht": "aiohttp"}[url[:2]])
    start = time.monotonic()
    done = _karchive("ls", "--registry", url, env={**env, "HOME": str(tmp_path)})
    took = time.monotonic() - start
    assert done.returncode == 2, done.stderr
    assert "cannot resolve nosuchhost.invalid" in done.stderr
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert took < 20, f"took {took:.1f} s"


def test_name_resolution_failures_are_never_retried():
    try:
        socket.getaddrinfo("nosuchhost.invalid", None)
    except socket.gaierror as exc:
        gaierror = exc
    else:  # pragma: no cover - a resolver that answers for .invalid
        pytest.skip("this resolver answers for .invalid")

    class ClientConnectorDNSError(OSError):  # the aiohttp class, by name (it is matched by name)
        pass

    wrapped = ClientConnectorDNSError("Cannot connect to host nosuchhost.invalid:443")
    wrapped.__cause__ = gaierror
    for exc in (gaierror, wrapped):
        assert cannot_resolve(exc) and not is_transient(exc)
    calls = []

    def fail():
        calls.append(1)
        raise wrapped

    from karchive.errors import TransferError

    with pytest.raises(TransferError):
        RetryPolicy(attempts=5, base_delay=0).call(fail, "list", sleep=lambda s: None)
    assert len(calls) == 1
    assert is_transient(ConnectionResetError("reset"))  # a dropped connection is still retried
