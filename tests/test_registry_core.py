"""Registry building blocks: references, version order, records, configuration, lockfiles, bad input."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest
from registry_support import isolated, run_cli, small_archive  # noqa: F401 - fixture

from karchive.errors import ConflictError, LockfileError, NotAnArchiveError, NotFoundError, RegistryError, TransferError
from karchive.registry import Lockfile, Registry, RetryPolicy, newest, parse_ref
from karchive.registry.config import cache_dir, redact_url, registry_url
from karchive.registry.progress import Progress, make_progress
from karchive.registry.records import VersionRecord
from karchive.registry.retry import is_transient
from karchive.registry.store_layout import version_record_path
from karchive.registry.versions import sort_versions
from karchive.resolve import open as open_ref

pytestmark = pytest.mark.usefixtures("isolated")


# -- references and versions ----------------------------------------------------------------------
@pytest.mark.parametrize(
    "text,name,version",
    [
        ("examples", "examples", None),
        ("examples@latest", "examples", None),
        ("examples@LATEST", "examples", None),
        ("examples@1.2.3", "examples", "1.2.3"),
        ("my_kernels.v2@2.0.0-rc.1+cu12", "my_kernels.v2", "2.0.0-rc.1+cu12"),
    ],
)
def test_parse_ref(text: str, name: str, version: str | None) -> None:
    ref = parse_ref(text)
    assert (ref.name, ref.version) == (name, version)


@pytest.mark.parametrize(
    "text",
    ["", "@1.0", "a@", "../etc@1", "a/b@1", "a@1/2", "a@../x", ".hidden", "a b", 7, None, "a@" + "9" * 200, "x" * 129],
)
def test_bad_refs_are_registry_errors(text: object) -> None:
    with pytest.raises(RegistryError):
        parse_ref(text)


def test_version_order_is_pep440_and_semver_aware() -> None:
    versions = [
        "1.10.0",
        "1.2.0",
        "1.2.0rc1",
        "1.2.0-rc.2",
        "1.2.0.dev3",
        "1.2.0a1",
        "1.2.0.post1",
        "0.9",
        "2.0.0-beta",
        "v1.11",
        "nightly",
        "1.2.0+cu12",
    ]
    assert sort_versions(versions) == [
        "nightly",
        "0.9",
        "1.2.0.dev3",
        "1.2.0a1",
        "1.2.0rc1",
        "1.2.0-rc.2",
        "1.2.0",
        "1.2.0+cu12",
        "1.2.0.post1",
        "1.10.0",
        "v1.11",
        "2.0.0-beta",
    ]
    assert newest(versions) == "v1.11"  # pre-releases are not "latest" while a final release exists
    assert newest(["1.0.0-rc.1", "0.9.0-beta"]) == "1.0.0-rc.1"
    assert newest([]) is None


# -- configuration --------------------------------------------------------------------------------
def test_registry_and_cache_locations(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    assert registry_url() == str(isolated / "xdg-data" / "karchive" / "registry")
    assert cache_dir() == isolated / "xdg-cache" / "karchive"
    monkeypatch.setenv("KARCHIVE_REGISTRY", "s3://bucket/reg")
    monkeypatch.setenv("KARCHIVE_CACHE_DIR", str(isolated / "c"))
    assert registry_url() == "s3://bucket/reg" and cache_dir() == isolated / "c"
    assert registry_url("memory://x") == "memory://x" and cache_dir(isolated / "d") == isolated / "d"
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.delenv("KARCHIVE_REGISTRY")
    assert registry_url().endswith(os.path.join(".local", "share", "karchive", "registry"))


def test_default_registry_is_embedded(isolated: Path) -> None:  # noqa: F811
    reg = Registry()
    reg.publish(small_archive())
    assert (isolated / "xdg-data" / "karchive" / "registry" / version_record_path("examples", "0.1.0")).is_file()
    reader = open_ref("examples@0.1.0")
    assert reader.manifest["name"] == "examples"
    assert list((isolated / "xdg-cache" / "karchive" / "blobs" / "sha256").glob("*.karc"))


def test_redact_url() -> None:
    assert redact_url("https://user:pw@host:8443/reg?sig=abc#x") == "https://host:8443/reg"
    assert redact_url("/plain/path") == "/plain/path"


# -- records and bad registry content -------------------------------------------------------------
def test_record_round_trip_and_validation() -> None:
    record = VersionRecord("a", "1.0", "0" * 64, 10, "1" * 64, "2026-01-01T00:00:00Z", 2, ("k",), ("cuda:90",))
    assert VersionRecord.from_json(record.to_json(), "x") == record
    for bad in (
        b"{",
        b"[]",
        b'{"layout": 1}',
        json.dumps({**record.to_dict(), "sha256": "XYZ"}).encode(),
        json.dumps({**record.to_dict(), "size": -1}).encode(),
        json.dumps({**record.to_dict(), "layout": 99}).encode(),
    ):
        with pytest.raises(RegistryError):
            VersionRecord.from_json(bad, "names/a/versions/1.0.json")


def test_corrupt_registry_files_are_clear_errors(tmp_path: Path) -> None:
    root = tmp_path / "registry"
    reg = Registry(root, cache=tmp_path / "c")
    reg.publish(small_archive("examples", "0.1.0"))
    reg.publish(small_archive("examples", "0.2.0"))
    (root / "names" / "examples" / "index.json").write_text("{ not json")
    with pytest.raises(RegistryError, match=r"names/examples/index\.json is not valid JSON"):
        reg.list("examples")
    assert reg.reindex() == ["examples"]
    assert [r.version for r in reg.list("examples")] == ["0.1.0", "0.2.0"]

    (root / version_record_path("examples", "0.1.0")).write_text('{"kind": "karchive-version", "layout": 1}')
    with pytest.raises(RegistryError, match="corrupt version record"):
        Registry(root, cache=tmp_path / "c2").resolve("examples@0.1.0")
    record = VersionRecord.from_json((root / version_record_path("examples", "0.2.0")).read_bytes(), "x")
    (root / version_record_path("examples", "0.1.0")).write_bytes(record.to_json())  # claims to be 0.2.0
    with pytest.raises(RegistryError, match="describes examples@0.2.0"):
        Registry(root, cache=tmp_path / "c3").resolve("examples@0.1.0")

    (root / "karchive-registry.json").write_text('{"kind": "karchive-registry", "layout": 7}')
    with pytest.raises(RegistryError, match="newer than this karchive"):
        reg.publish(small_archive("examples", "0.3.0"))


def test_publish_refuses_bad_input(tmp_path: Path) -> None:
    reg = Registry(tmp_path / "registry", cache=tmp_path / "c")
    with pytest.raises(RegistryError, match="no such archive"):
        reg.publish(tmp_path / "missing.karc")
    junk = tmp_path / "junk.karc"
    junk.write_bytes(b"definitely not an archive" * 10)
    with pytest.raises(NotAnArchiveError):
        reg.publish(junk)
    damaged = tmp_path / "damaged.karc"
    data = bytearray(small_archive().read_bytes())
    data[600] ^= 0xFF  # inside the first frame
    damaged.write_bytes(bytes(data))
    with pytest.raises(Exception) as info:
        reg.publish(damaged)
    assert "karchive" in type(info.value).__module__
    from registry_support import compiled

    from karchive.producer.build.pack import ArchiveBuilder

    for name, version, match in (("bad/name", "1.0", "bad archive name"), ("ok", "latest", "reserved")):
        b = ArchiveBuilder(name, version, level=3)
        b.add(compiled())
        path = tmp_path / "x.karc"
        b.write(path)
        with pytest.raises(RegistryError, match=match):
            reg.publish(path)
    assert not (tmp_path / "registry").exists()  # a refused publish writes nothing, not even the marker


# -- lockfiles ------------------------------------------------------------------------------------
def test_lockfile_pins_digests(tmp_path: Path) -> None:
    a = Registry(tmp_path / "a", cache=tmp_path / "cache")
    a.publish(small_archive("examples", "1.0.0", block=1024))
    lock = Lockfile.from_records([a.resolve("examples@1.0.0")], a.url)
    lock.write(tmp_path / "karchive.lock")
    loaded = Lockfile.load(tmp_path / "karchive.lock")
    assert loaded.pins == lock.pins
    assert open_ref("examples", registry=a, lockfile=tmp_path / "karchive.lock").manifest["version"] == "1.0.0"

    # Another registry serves different bytes under the same name@version: refused, both digests shown.
    b = Registry(tmp_path / "b", cache=tmp_path / "cache-b")
    other = b.publish(small_archive("examples", "1.0.0", block=512)).record
    with pytest.raises(LockfileError) as info:
        open_ref("examples@1.0.0", registry=b, lockfile=tmp_path / "karchive.lock")
    assert other.sha256 in str(info.value) and lock.pins["examples"].sha256 in str(info.value)
    with pytest.raises(LockfileError, match="pins examples@1.0.0"):
        open_ref("examples@2.0.0", registry=a, lockfile=loaded)
    with pytest.raises(LockfileError, match="not pinned"):
        open_ref("other", registry=a, lockfile=loaded)


def test_lockfile_load_is_offline_when_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reg = Registry(tmp_path / "registry", cache=tmp_path / "cache")
    reg.publish(small_archive())
    Lockfile.from_records([reg.resolve("examples@0.1.0")]).write(tmp_path / "karchive.lock")
    reg.pull("examples@0.1.0")
    monkeypatch.setenv("KARCHIVE_LOCKFILE", str(tmp_path / "karchive.lock"))
    gone = Registry("http://127.0.0.1:9/nothing-here", cache=tmp_path / "cache", retry=RetryPolicy(1, 0))
    assert open_ref("examples", registry=gone).manifest["name"] == "examples"


@pytest.mark.parametrize(
    "content,match",
    [
        ("nope", "not valid JSON"),
        ("[]", "'archives'"),
        ('{"archives": {}}', "lockfile_version"),
        ('{"lockfile_version": 9, "archives": {}}', "newer"),
        (
            '{"lockfile_version": 1, "archives": {"x": {"version": "1", "sha256": "abc", "size": 1, "index_sha256": "abc"}}}',
            "sha256",
        ),
    ],
)
def test_malformed_lockfiles(tmp_path: Path, content: str, match: str) -> None:
    path = tmp_path / "karchive.lock"
    path.write_text(content)
    with pytest.raises(LockfileError, match=match):
        Lockfile.load(path)
    with pytest.raises(LockfileError, match="cannot read"):
        Lockfile.load(tmp_path / "absent.lock")


def test_lockfile_refuses_two_versions_of_one_name() -> None:
    r1 = VersionRecord("a", "1.0", "0" * 64, 1, "1" * 64)
    r2 = VersionRecord("a", "2.0", "2" * 64, 1, "1" * 64)
    with pytest.raises(LockfileError, match="asked for twice"):
        Lockfile.from_records([r1, r2])


# -- retries and progress -------------------------------------------------------------------------
def test_retry_policy_classifies_errors() -> None:
    class Resp(Exception):
        def __init__(self, status: int) -> None:
            self.status = status

    assert is_transient(ConnectionResetError()) and is_transient(TimeoutError()) and is_transient(Resp(503))
    assert not is_transient(FileNotFoundError()) and not is_transient(PermissionError()) and not is_transient(Resp(403))
    assert not is_transient(ConflictError("x"))
    calls: list[int] = []
    sleeps: list[float] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionResetError("reset")
        return "ok"

    policy = RetryPolicy(attempts=4, base_delay=0.1)
    assert policy.call(flaky, "thing", sleep=sleeps.append) == "ok" and len(sleeps) == 2
    assert all(0 <= s <= 0.1 * 2**i for i, s in enumerate(sleeps))
    with pytest.raises(TransferError, match="thing failed after 4 attempts: ConnectionResetError"):
        policy.call(lambda: (_ for _ in ()).throw(ConnectionResetError("down")), "thing", sleep=lambda s: None)
    with pytest.raises(FileNotFoundError):
        policy.call(lambda: (_ for _ in ()).throw(FileNotFoundError("x")), "thing", sleep=lambda s: None)


def test_progress_only_when_asked() -> None:
    stream = io.StringIO()
    p = Progress("pull big@1.0", 10 * 2**20, stream=stream, delay=0, interval=0)
    p.update(5 * 2**20)
    p.close()
    assert "pull big@1.0: 5.0 MiB / 10.0 MiB  50%" in stream.getvalue()
    assert type(make_progress(False, "x", 1)).__name__ == "NoProgress"
    assert type(make_progress(None, "x", 1)).__name__ == "NoProgress"  # stderr is not a terminal under pytest


def test_registry_module_imports_without_rich_or_cloud_backends() -> None:
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['rich'] = None; sys.modules['s3fs'] = None; sys.modules['gcsfs'] = None\n"
        "import karchive.registry, karchive.cli.registry_cmds\n"
        "assert 'rich' not in [m for m in sys.modules if sys.modules[m] is not None]"
    )
    from registry_servers import ROOT, subprocess_env

    out = subprocess.run(
        [sys.executable, "-c", code], env=subprocess_env(), cwd=str(ROOT), capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr


def test_missing_backend_is_a_registry_error() -> None:
    with pytest.raises(RegistryError):
        Registry("nosuchproto://bucket/reg")


def test_not_found_is_a_registry_error_subclass(tmp_path: Path) -> None:
    with pytest.raises(NotFoundError):
        Registry(tmp_path / "r", cache=tmp_path / "c").pull("examples@1.0")


def test_karchive_open_resolves_through_the_configured_registry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import karchive

    try:
        opener = karchive.open
    except (AttributeError, ImportError):
        pytest.skip("the runtime (karchive.open) is not in this build")
    monkeypatch.setenv("KARCHIVE_REGISTRY", str(tmp_path / "configured"))
    Registry().publish(small_archive("demo-kernels", "0.1.0"))
    archive = opener("demo-kernels@0.1.0")
    assert (archive.manifest.name, archive.manifest.version) == ("demo-kernels", "0.1.0")


def test_unwritable_places_are_registry_errors(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"  # a regular file where a directory must go: fails even for root
    blocker.write_text("x")
    with pytest.raises(RegistryError, match="cannot"):
        Registry(blocker / "registry", cache=tmp_path / "c").publish(small_archive())
    reg = Registry(tmp_path / "registry", cache=blocker / "cache")
    reg.publish(small_archive())
    with pytest.raises(RegistryError, match="local cache"):
        reg.pull("examples@0.1.0")
    out = run_cli("pull", "examples@0.1.0", "--registry", str(tmp_path / "registry"), "--cache-dir", str(blocker))
    assert out.returncode == 2 and "Traceback" not in out.stderr


def test_registry_errors_carry_fields_callers_can_act_on(tmp_path: Path) -> None:
    reg = Registry(tmp_path / "registry", cache=tmp_path / "c")
    reg.publish(small_archive("examples", "0.1.0"))
    with pytest.raises(NotFoundError) as missing:
        reg.resolve("examples@9.9.9")
    assert (missing.value.name, missing.value.version, missing.value.available) == ("examples", "9.9.9", ("0.1.0",))
    with pytest.raises(NotFoundError) as unknown:
        reg.resolve("nosuch")
    assert unknown.value.name == "nosuch" and unknown.value.available == ("examples",)
    other = small_archive("examples", "0.1.0", block=256)
    with pytest.raises(ConflictError) as conflict:
        reg.publish(other)
    published = reg.resolve("examples@0.1.0").sha256
    assert conflict.value.ref == "examples@0.1.0" and conflict.value.existing_digest == published
    assert conflict.value.new_digest not in (None, published)
    assert conflict.value.to_json()["existing_digest"] == published
