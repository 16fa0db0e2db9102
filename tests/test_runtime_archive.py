"""karchive.open: paths, fsspec URLs, registry references; opening reads no binaries."""

from __future__ import annotations

import pytest

import karchive
from karchive.errors import NoMatchingVariantError
from karchive.runtime import DeviceInfo
from karchive.resolve import looks_like_registry_ref
from test_runtime_helpers import cuda_archive  # noqa: F401 - fixture


def test_open_path_lists_kernels_and_reads_only_the_tail(cuda_archive):
    arc = karchive.open(cuda_archive)
    assert arc.kernels() == ["add_kernel", "matmul_kernel", "scale_kernel"]
    requests = arc.reader.source.requests
    add = arc.kernel("add_kernel")
    add.select(0x1000, 0x2000, 0x3000, 4, device=DeviceInfo.describe_target("cuda:90"))
    assert arc.reader.source.requests == requests  # selection needs the manifest only
    assert arc.kernel("add_kernel") is add and arc["add_kernel"] is add
    with pytest.raises(NoMatchingVariantError, match="no kernel 'nope'; kernels: add_kernel, matmul_kernel"):
        arc.kernel("nope")


def test_open_fsspec_url(cuda_archive):
    fsspec = pytest.importorskip("fsspec")
    fs = fsspec.filesystem("memory")
    fs.pipe("/rt/cuda.karc", cuda_archive.read_bytes())
    arc = karchive.open("memory://rt/cuda.karc")
    assert "add_kernel" in arc.kernels()
    v = arc.variants("add_kernel")[0]
    assert arc.reader.read(v.binary.path)[:4] == b"\x7fELF"  # a cubin


def test_registry_references_are_delegated(cuda_archive, monkeypatch):
    import karchive.registry as registry
    from karchive.format.open import open_reader

    seen = {}

    def fake_open_reader(ref, **kw):
        seen["ref"], seen["kw"] = ref, kw
        return open_reader(str(cuda_archive))

    monkeypatch.setattr(registry, "open_reader", fake_open_reader, raising=False)
    arc = karchive.open("examples@0.1.0", registry="file:///somewhere")
    assert seen["ref"] == "examples@0.1.0" and seen["kw"]["registry"] == "file:///somewhere"
    assert seen["kw"]["storage_options"] is None and seen["kw"]["limits"] is not None  # passed through
    assert "add_kernel" in arc.kernels()


@pytest.mark.parametrize(("ref", "is_registry"), [
    ("examples", True), ("examples@0.1.0", True), ("my-kernels@latest", True), ("examples.karc", False),
    ("./examples", False), ("s3://b/x.karc", False), ("/abs/path", False), ("a b", False),
])
def test_registry_ref_heuristic(ref, is_registry, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert looks_like_registry_ref(ref) is is_registry
    (tmp_path / "examples").mkdir()
    assert looks_like_registry_ref("examples") is True  # a directory is never an archive: still a registry name
    (tmp_path / "kernels").write_bytes(b"")
    assert looks_like_registry_ref("kernels") is False  # an existing file wins


def test_missing_file_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        karchive.open(str(tmp_path / "missing.karc"))
