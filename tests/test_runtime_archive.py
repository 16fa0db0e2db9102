"""karchive.open: paths, fsspec URLs, registry references; opening reads no binaries."""

from __future__ import annotations

import pytest

import karchive
from karchive.errors import NoMatchingVariantError
from karchive.registry.refs import is_registry_ref
from karchive.runtime import DeviceInfo


def test_open_path_lists_kernels_and_reads_only_the_tail(cuda_archive):
    arc = karchive.open(cuda_archive)
    assert arc.kernels() == ["kernels:add_kernel", "kernels:matmul_kernel", "kernels:scale_kernel"]
    requests = arc.reader.source.requests
    add = arc.kernel("add_kernel")
    add.select(0x1000, 0x2000, 0x3000, 4, device=DeviceInfo.describe_target("cuda:90"))
    assert arc.reader.source.requests == requests  # selection needs the manifest only
    # the short name finds the one kernel of that name; both names give the same dispatcher
    assert arc.kernel("add_kernel") is add and arc["add_kernel"] is add and arc.kernel("kernels:add_kernel") is add
    assert add.name == "kernels:add_kernel"
    with pytest.raises(NoMatchingVariantError, match="no kernel named 'nope'; it has: kernels:add_kernel, ") as info:
        arc.kernel("nope")
    assert isinstance(info.value, KeyError) and info.value.available == (
        "kernels:add_kernel",
        "kernels:matmul_kernel",
        "kernels:scale_kernel",
    )
    with pytest.raises(NoMatchingVariantError, match="no kernel named 'other:add_kernel'"):
        arc.kernel("other:add_kernel")  # a qualified name is never matched by its short name


def test_open_fsspec_url(cuda_archive):
    fsspec = pytest.importorskip("fsspec")
    fs = fsspec.filesystem("memory")
    fs.pipe("/rt/cuda.karc", cuda_archive.read_bytes())
    arc = karchive.open("memory://rt/cuda.karc")
    assert "kernels:add_kernel" in arc.kernels()
    v = arc.variants("add_kernel")[0]
    assert arc.reader.read(v.binary.path)[:4] == b"\x7fELF"  # a cubin


def test_registry_references_resolve_through_the_registry(cuda_archive, tmp_path):
    from karchive.registry import Registry

    reg = Registry(tmp_path / "registry", cache=tmp_path / "cache")
    record = reg.publish(cuda_archive).record
    arc = karchive.open(
        f"{record.name}@{record.version}", registry=str(tmp_path / "registry"), cache_dir=tmp_path / "cache"
    )
    assert "kernels:add_kernel" in arc.kernels()
    assert arc.reader.source.describe().endswith(f"{record.sha256}.karc")  # served from the verified cache


@pytest.mark.parametrize(
    ("ref", "is_registry"),
    [
        ("examples", True),
        ("examples@0.1.0", True),
        ("my-kernels@latest", True),
        ("examples.karc", False),
        ("./examples", False),
        ("s3://b/x.karc", False),
        ("/abs/path", False),
        ("a b", True),
    ],
)
def test_registry_ref_heuristic(ref, is_registry, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert is_registry_ref(ref) is is_registry
    (tmp_path / "examples").mkdir()
    assert is_registry_ref("examples") is True  # a directory is never an archive: still a registry name
    (tmp_path / "kernels").write_bytes(b"")
    assert is_registry_ref("kernels") is False  # an existing file wins


def test_missing_file_is_file_not_found(tmp_path):
    from karchive.errors import ArchiveNotFoundError

    with pytest.raises(FileNotFoundError) as info:  # existing `except FileNotFoundError` keeps working
        karchive.open(str(tmp_path / "missing.karc"))
    assert isinstance(info.value, ArchiveNotFoundError) and info.value.path == str(tmp_path / "missing.karc")


def test_unknown_url_protocol_is_a_karchive_error():
    from karchive.errors import UnsupportedLocationError

    with pytest.raises(UnsupportedLocationError, match="nosuchproto"):
        karchive.open("nosuchproto://bucket/x.karc")


def test_a_directory_named_like_a_registry_name_is_explained(tmp_path, monkeypatch):
    from karchive.errors import NotFoundError

    monkeypatch.chdir(tmp_path)
    (tmp_path / "adir").mkdir()
    with pytest.raises(NotFoundError, match="directory 'adir' here, but a directory is not an archive"):
        karchive.open("adir", registry=str(tmp_path / "empty-registry"), cache_dir=tmp_path / "c")


def test_a_kernel_for_the_devices_targets_reads_only_their_shards(cuda_archive):
    """arc.kernel(name, targets=[...]) (issue 24 A): a format-2.1 archive keeps each kernel's variants of
    one target in a shard of their own; a dispatcher for one target reads and parses that one alone, and
    selects what the full dispatcher selects for a device of that target."""
    arc = karchive.open(cuda_archive)
    targets = [t for s in arc.manifest.summary() if s.kernel == "kernels:add_kernel" for t, _ in s.targets]
    assert "cuda:90" in targets and len(targets) > 1
    dev = DeviceInfo.describe_target("cuda:90")
    add90 = arc.kernel("add_kernel", targets=["cuda:90"])
    assert {str(v.target) for v in add90.variants} == {"cuda:90"} and len(arc.reader._registered) == 1
    assert arc.kernel("kernels:add_kernel", targets=("cuda:90",)) is add90
    chosen = add90.select(0x1000, 0x2000, 0x3000, 4, device=dev)
    assert chosen == arc.kernel("add_kernel").select(0x1000, 0x2000, 0x3000, 4, device=dev)
    with pytest.raises(NoMatchingVariantError, match="no variant for cuda:1 .it has cuda:"):
        arc.kernel("add_kernel", targets=["cuda:1"])
