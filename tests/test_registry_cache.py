"""The local cache: verify once, reuse without hashing, many pullers, killed writers, pruning."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from registry_servers import ROOT, StaticHTTPServer, s3_server, subprocess_env
from registry_support import big_archive, isolated, release_together, run_cli, small_archive  # noqa: F401

import karchive.registry.cache as cache_mod
from karchive.registry import Cache, Registry

pytestmark = pytest.mark.usefixtures("isolated")


@pytest.fixture
def counted_checks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every full verification (hash + structure) the cache runs, by path."""
    calls: list[str] = []
    real = cache_mod.check_archive_file

    def counting(path, **kw):  # type: ignore[no-untyped-def]
        calls.append(str(path))
        return real(path, **kw)

    monkeypatch.setattr(cache_mod, "check_archive_file", counting)
    return calls


def test_verified_once_then_reused_without_hashing(tmp_path: Path, counted_checks: list[str]) -> None:
    reg = Registry(tmp_path / "registry", cache=tmp_path / "cache")
    record = reg.publish(big_archive()).record
    counted_checks.clear()
    reg.pull("big@1.0.0")
    assert len(counted_checks) == 1
    times = []
    for _ in range(20):
        t = time.perf_counter()
        reader = reg.open("big@1.0.0")
        times.append(time.perf_counter() - t)
    assert reader.manifest["name"] == "big"
    assert len(counted_checks) == 1, "a cache hit must not re-hash or re-verify"
    times.sort()
    print(
        f"\ncache-hit open of a {record.size} B, {record.variants}-variant archive: median "
        f"{times[len(times) // 2] * 1e3:.2f} ms (resolve from cached record + receipt check + tail read)"
    )

    blob = Cache(tmp_path / "cache").blob_path(record.sha256)
    os.utime(blob, ns=(time.time_ns(), time.time_ns() + 10**9))  # the file changed identity
    reg.open("big@1.0.0")
    assert len(counted_checks) == 2  # verified again, once
    reg.open("big@1.0.0")
    assert len(counted_checks) == 2


def test_tampered_cache_file_is_evicted_and_refetched(tmp_path: Path) -> None:
    reg = Registry(tmp_path / "registry", cache=tmp_path / "cache")
    record = reg.publish(small_archive()).record
    path = reg.pull("examples@0.1.0").path
    data = bytearray(path.read_bytes())
    data[100] ^= 1
    os.chmod(path, 0o644)
    path.write_bytes(bytes(data))
    again = reg.pull("examples@0.1.0")
    assert again.downloaded
    assert again.path.read_bytes() == small_archive().read_bytes()
    assert Cache(tmp_path / "cache").lookup(record.sha256) == again.path


_PULL = """
import sys
from karchive.registry import Registry
url, cache = sys.argv[1], sys.argv[2]
reg = Registry(url, cache=cache)
reg.store.size("karchive-registry.json")  # connect and import everything before the start line
print("ready", flush=True)
sys.stdin.readline()
r = reg.pull("big@1.0.0")
print("downloaded" if r.downloaded else "cached", r.path)
"""


def test_eight_processes_pull_one_archive(tmp_path: Path) -> None:
    s3 = s3_server()
    url = f"s3://{s3.new_bucket()}/reg"
    record = Registry(url, s3.storage_options(), cache=tmp_path / "w").publish(big_archive()).record
    cache = tmp_path / "shared-cache"
    mark = s3.mark()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _PULL, url, str(cache)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=subprocess_env(**s3.env()),
            cwd=str(ROOT),
        )
        for _ in range(8)
    ]
    results = [out.split() for out in release_together(procs, timeout=180)]
    assert sorted(r[0] for r in results) == ["cached"] * 7 + ["downloaded"]
    assert len({r[1] for r in results}) == 1
    blobs = list(cache.glob("blobs/sha256/*.karc"))
    assert len(blobs) == 1 and blobs[0].read_bytes() == big_archive().read_bytes()
    assert not list(cache.rglob("*.part")) and not list(cache.rglob("*.tmp"))
    served = sum(r["bytes"] for r in s3.requests_for(record.sha256, mark))
    assert served == record.size, "one process downloads; the other seven wait and reuse its verified file"


def test_killed_writer_leaves_nothing_mistaken_for_an_archive(tmp_path: Path) -> None:
    root = tmp_path / "served"
    record = Registry(root / "registry", cache=tmp_path / "w").publish(big_archive()).record
    http = StaticHTTPServer(root)
    cache = tmp_path / "cache"
    try:
        http.slow_suffix, http.slow_delay = ".karc", 0.01  # ~400 KiB/s: the pull takes seconds
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "karchive.cli.main",
                "pull",
                "big@1.0.0",
                "--registry",
                f"{http.url}/registry",
                "--cache-dir",
                str(cache),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=subprocess_env(),
            cwd=str(ROOT),
        )
        deadline = time.monotonic() + 60
        while not (list(cache.glob("tmp/*.part")) and sum(r["bytes"] for r in http.requests_for(".karc")) > 50_000):
            assert proc.poll() is None and time.monotonic() < deadline, "the pull should still be transferring"
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert not list(cache.glob("blobs/**/*.karc")), "no archive may appear before it is complete and verified"
        assert not list(cache.glob("receipts/*.json"))
        listing = json.loads(run_cli("cache", "ls", "--json", "--cache-dir", str(cache)).stdout)
        assert listing["archives"] == [] and listing["partial_downloads"] == 1

        http.slow_suffix = None
        reg = Registry(f"{http.url}/registry", cache=cache)
        result = reg.pull("big@1.0.0")
        assert result.downloaded and result.path.read_bytes() == big_archive().read_bytes()
        assert not list(cache.glob("tmp/*.part")), "the next puller cleans up after the dead one"
        assert Cache(cache).lookup(record.sha256) == result.path
    finally:
        http.stop()


def test_prune_by_age_and_size(tmp_path: Path) -> None:
    reg = Registry(tmp_path / "registry", cache=tmp_path / "cache")
    paths = {}
    for version in ["0.1.0", "0.2.0", "0.3.0"]:
        reg.publish(small_archive("examples", version))
        paths[version] = reg.pull(f"examples@{version}").path
    cache = Cache(tmp_path / "cache")
    now = time.time()
    # 0.1.0 last used 10 days ago, 0.2.0 two days ago, 0.3.0 now.
    for version, age in (("0.1.0", 10 * 86400), ("0.2.0", 2 * 86400)):
        receipt = tmp_path / "cache" / "receipts" / f"{paths[version].stem}.json"
        os.utime(receipt, (now - age, now - age))
    (tmp_path / "cache" / "tmp").mkdir(exist_ok=True)
    (tmp_path / "cache" / "tmp" / f"{'0' * 64}.123.abcd.part").write_bytes(b"partial")

    out = run_cli("cache", "prune", "--max-age", "7d", "--cache-dir", str(tmp_path / "cache"), "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert [e["refs"] for e in report["removed"]] == [["examples@0.1.0"]]
    assert report["partial_files_removed"] == 1
    assert not paths["0.1.0"].exists() and paths["0.2.0"].exists()

    size = paths["0.3.0"].stat().st_size
    report = cache.prune(max_size=size)
    assert [e.refs for e in report.removed] == [["examples@0.2.0"]]  # least recently used goes first
    assert [e.refs for e in cache.entries()] == [["examples@0.3.0"]]
    assert reg.pull("examples@0.1.0").downloaded  # pruned archives come back on demand

    human = run_cli("cache", "ls", "--cache-dir", str(tmp_path / "cache"))
    assert "examples@0.3.0" in human.stdout and "examples@0.1.0" in human.stdout
    bad = run_cli("cache", "prune", "--max-size", "lots", "--cache-dir", str(tmp_path / "cache"))
    assert bad.returncode == 2 and "bad size 'lots'" in bad.stderr
