"""`karchive publish | pull | ls | lock | reindex | cache` as a user runs them (child processes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from registry_servers import StaticHTTPServer, s3_server
from registry_support import big_archive, isolated, run_cli, small_archive  # noqa: F401 - fixture

pytestmark = pytest.mark.usefixtures("isolated")


def test_cli_round_trip_on_the_default_registry(tmp_path: Path) -> None:
    env = {"XDG_DATA_HOME": str(tmp_path / "data"), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    out = run_cli("publish", str(small_archive("examples", "0.1.0")), env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("published examples@0.1.0 sha256:")
    assert str(tmp_path / "data" / "karchive" / "registry") in out.stdout
    out = run_cli("publish", str(small_archive("examples", "0.1.0")), env=env)
    assert "already published" in out.stdout and out.returncode == 0
    assert run_cli("publish", str(small_archive("examples", "0.2.0")), env=env).returncode == 0

    conflict = run_cli("publish", str(small_archive("examples", "0.1.0", block=512)), env=env)
    assert conflict.returncode == 2 and "karchive: error: examples@0.1.0 already exists" in conflict.stderr
    assert "Traceback" not in conflict.stderr

    ls = run_cli("ls", env=env)
    assert "examples" in ls.stdout and "0.2.0 (2 versions)" in ls.stdout
    ls = run_cli("ls", "examples", env=env)
    lines = ls.stdout.splitlines()
    assert lines[0].startswith("registry:") and "0.2.0 (latest)" in lines[3] and "0.1.0" in lines[4]
    doc = json.loads(run_cli("ls", "examples", "--json", env=env).stdout)
    assert [a["version"] for a in doc["archives"]] == ["0.1.0", "0.2.0"]

    pulled = run_cli("pull", "examples", "-o", str(tmp_path), "--json", env=env)
    assert pulled.returncode == 0, pulled.stderr
    info = json.loads(pulled.stdout)
    assert info["version"] == "0.2.0" and info["downloaded"]
    assert Path(info["path"]) == tmp_path / "examples-0.2.0.karc"
    assert Path(info["path"]).read_bytes() == small_archive("examples", "0.2.0").read_bytes()
    again = run_cli("pull", "examples@0.2.0", env=env)
    assert "(from cache)" in again.stdout

    lock = run_cli("lock", "examples@0.1.0", "-o", str(tmp_path / "karchive.lock"), env=env)
    assert lock.returncode == 0, lock.stderr
    pins = json.loads((tmp_path / "karchive.lock").read_text())["archives"]
    assert pins["examples"]["version"] == "0.1.0"
    ok = run_cli("pull", "examples", "--lockfile", str(tmp_path / "karchive.lock"), "--json", env=env)
    assert json.loads(ok.stdout)["version"] == "0.1.0"

    missing = run_cli("pull", "examples@7", env=env)
    assert missing.returncode == 2 and "versions of examples: 0.2.0, 0.1.0" in missing.stderr
    bad = run_cli("pull", "../etc/passwd@1", env=env)
    assert bad.returncode == 2 and "bad archive name" in bad.stderr

    cache = run_cli("cache", "ls", "--json", env=env)
    refs = sorted(r for a in json.loads(cache.stdout)["archives"] for r in a["refs"])
    assert refs == ["examples@0.1.0", "examples@0.2.0"]


def test_cli_against_s3_uses_the_backends_own_configuration(tmp_path: Path) -> None:
    s3 = s3_server()
    url = f"s3://{s3.new_bucket()}/reg"
    env = {**s3.env(), "KARCHIVE_REGISTRY": url, "KARCHIVE_CACHE_DIR": str(tmp_path / "cache")}
    out = run_cli("publish", str(small_archive()), "--json", env=env)
    assert out.returncode == 2 and json.loads(out.stdout)["error"] == "NotFoundError"  # a new bucket: no registry yet
    assert "publish with --create-registry" in out.stderr
    out = run_cli("publish", str(small_archive()), "--json", "--create-registry", env=env)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["registry"] == url
    out = run_cli("pull", "examples@0.1.0", "--json", env=env)
    assert json.loads(out.stdout)["downloaded"] is True
    assert run_cli("reindex", env=env).returncode == 0


def test_progress_is_shown_when_asked(tmp_path: Path) -> None:
    root = tmp_path / "served"
    from karchive.registry import Registry

    Registry(root / "registry", cache=tmp_path / "w").publish(big_archive())
    http = StaticHTTPServer(root)
    try:
        http.slow_suffix, http.slow_delay = ".karc", 0.004  # about 1 MB/s: a couple of seconds
        url = f"{http.url}/registry"
        shown = run_cli("pull", "big@1.0.0", "--registry", url, "--cache-dir", str(tmp_path / "c1"), "--progress")
        assert shown.returncode == 0, shown.stderr
        assert "pull big@1.0.0:" in shown.stderr and "100%" in shown.stderr
        quiet = run_cli("pull", "big@1.0.0", "--registry", url, "--cache-dir", str(tmp_path / "c2"))
        assert quiet.returncode == 0 and quiet.stderr == ""  # not a terminal, not asked
    finally:
        http.stop()


def test_cli_reports_a_corrupt_index_without_a_traceback(tmp_path: Path) -> None:
    root = tmp_path / "served"
    from karchive.registry import Registry

    Registry(root / "registry", cache=tmp_path / "w").publish(small_archive())
    (root / "registry" / "index.json").write_text("garbage")
    http = StaticHTTPServer(root)
    try:
        out = run_cli("ls", "--registry", f"{http.url}/registry")
        assert out.returncode == 2
        assert "index.json is not valid JSON" in out.stderr and "Traceback" not in out.stderr
        fixed = run_cli("reindex", "--registry", str(root / "registry"))
        assert fixed.returncode == 0
        assert "examples" in run_cli("ls", "--registry", f"{http.url}/registry").stdout
    finally:
        http.stop()
