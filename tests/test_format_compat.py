"""Old archives stay readable: format 1.0 archives written by the 1.0 writer (tests/data/, built at the
last commit before format 2.0) are read, verified, launched (selection, no GPU), inspected and
extracted by this version, byte for byte; and the 1.0 writer, still available, writes them again
identically."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

import karchive
from karchive.cli.main import main
from karchive.format.constants import FORMAT_VERSION
from karchive.format.extract import extract_all
from karchive.format.manifest import Manifest
from karchive.format.reader import ArchiveReader
from karchive.runtime.device import DeviceInfo

DATA = Path(__file__).resolve().parent / "data"
FIXTURES = sorted(DATA.glob("v1_0-*.karc"))
A = 0x7F0000000000


def _expected(path: Path) -> dict:
    return json.loads(path.with_name(path.name + ".members.json").read_text())


def test_fixtures_are_there_and_untouched():
    assert [p.name for p in FIXTURES] == ["v1_0-dict.karc", "v1_0-plain.karc"]
    for path in FIXTURES:
        assert hashlib.sha256(path.read_bytes()).hexdigest() == _expected(path)["archive_sha256"]


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_a_1_0_archive_reads_and_verifies(path):
    reader = ArchiveReader.from_path(path)
    assert reader.format_version == (1, 0) and not reader.sharded
    assert reader.verify() == []
    members = _expected(path)["members"]
    assert sorted(reader.members) == sorted(members)
    assert {n: hashlib.sha256(reader.read(n)).hexdigest() for n in reader.members} == members
    assert {n: hashlib.sha256(d).hexdigest() for n, d in reader.iter_members()} == members
    model = reader.model
    assert not model.is_sharded and model.format_version == "1.0"
    assert model.kernels() == ["add_kernel", "scale_kernel", "softmax_kernel"] and len(model) == 4
    assert model.targets() == ["cuda:80", "cuda:90", "hip:gfx942"]
    assert [v.to_json() for v in model.variants] == reader.manifest["variants"]
    assert Manifest.from_json(reader.manifest).to_json() == reader.manifest


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_a_1_0_archive_opens_for_launch_and_selects(path):
    arc = karchive.open(path)
    h100 = DeviceInfo.describe_target("cuda:90", shared_optin=227 * 1024)
    v = arc.kernel("add_kernel").select(A, A, A, 4096, BLOCK=1024, device=h100)
    assert str(v.target) == "cuda:90" and arc.reader.read(v.binary.path).startswith(b"\x7fELF")
    mi300 = DeviceInfo.describe_target("hip:gfx942")
    assert str(arc.kernel("add_kernel").select(A, A, A, 4096, BLOCK=256, device=mi300).target) == "hip:gfx942"
    # Issue 19: written before qualified names and signature records. Bare names are looked up as they
    # are (a qualified name is not guessed onto them); an omitted BLOCK is taken where the device's
    # variants hold one value, as before, since no order decides anything there.
    assert (
        arc.kernels() == ["add_kernel", "scale_kernel", "softmax_kernel"]
        and arc.kernel("add_kernel").name == "add_kernel"
    )
    assert all(p.has_default is None for v in arc.variants() for p in v.params)
    assert arc.kernel("add_kernel").select(A, A, A, 4096, device=h100).constexprs == {"BLOCK": 1024}
    with pytest.raises(karchive.KernelNameError, match="no kernel named 'kernels:add_kernel'"):
        arc.kernel("kernels:add_kernel")


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_a_1_0_archive_through_the_cli(path, tmp_path, capsys):
    assert main(["verify", str(path)]) == 0
    assert "OK" in capsys.readouterr().out
    assert main(["inspect", str(path), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["format_version"] == "1.0" and len(info["variants"]) == 4
    assert main(["inspect", str(path), "--summary", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["variants"] == 4 and {k["kernel"]: k["variants"] for k in summary["kernels"]} == {
        "add_kernel": 2,
        "scale_kernel": 1,
        "softmax_kernel": 1,
    }
    written = extract_all(ArchiveReader.from_path(path), tmp_path / "out")
    members = _expected(path)["members"]
    assert sorted(written) == sorted(members)
    assert all(hashlib.sha256((tmp_path / "out" / n).read_bytes()).hexdigest() == d for n, d in members.items())


def _compiled(reader: ArchiveReader) -> list:
    """The archive's variants as the producer hands them to the builder (bytes from the archive)."""
    from karchive.producer.compile.describe import CompiledVariant

    out = []
    for v in reader.model.variants:
        files = {"binary": reader.read(v.binary.path), "metadata": reader.read(v.metadata.path)}
        files.update({stage: reader.read(ref.path) for stage, ref in v.ir.items()})
        out.append(CompiledVariant(v, files, reader.read(v.source).decode() if v.source else None))
    return out


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_the_tests_1_0_writer_writes_what_the_old_writer_wrote(path, monkeypatch):
    """karchive writes format 2 only; the 1.0 archives its frozen reader is tested with (hostile inputs
    included) come from tests/format1_writer.py, which must reproduce the old writer's bytes exactly."""
    from format1_writer import build_format1

    from karchive.producer.build.pack import ArchiveBuilder

    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    reader = ArchiveReader.from_path(path)
    old = reader.model
    builder = ArchiveBuilder(
        old.name, old.version, produced_by={"triton": "3.9.0"}, dictionary="auto" if reader.has_dictionary else "none"
    )
    builder.extend(_compiled(reader))
    data, _ = build_format1(builder)
    expected = path.read_bytes()
    if old.produced_by.get("karchive") != karchive.__version__:
        pytest.skip("karchive's version changed since the fixture was written (it is in produced_by)")
    assert data == expected


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_a_1_0_archive_repacked_as_2_0_keeps_every_variant_and_byte(path):
    from karchive.producer.build.pack import ArchiveBuilder

    reader = ArchiveReader.from_path(path)
    old = reader.model
    builder = ArchiveBuilder(old.name, old.version, produced_by={"triton": "3.9.0"})
    builder.extend(_compiled(reader))
    data, _ = builder.to_bytes()
    new = ArchiveReader.from_bytes(data)
    assert new.format_version == FORMAT_VERSION and new.verify() == []
    assert [v.to_json() for v in new.model.variants] == [v.to_json() for v in old.variants]
    members = _expected(path)["members"]
    for name, digest in members.items():
        if not name.startswith("karchive/"):
            assert hashlib.sha256(new.read(name)).hexdigest() == digest
    assert {k: v for k, v in new.manifest.items() if k != "format_version"} == {
        k: v for k, v in reader.manifest.items() if k != "format_version"
    }


def test_karchive_writes_format_2_only():
    """Writers have no format choice left (issue 24): what the package writes is the current format."""
    import dataclasses

    from karchive.format.writer import ArchiveWriter
    from karchive.producer.build.pack import ArchiveBuilder

    assert "format_version" not in {f.name for f in dataclasses.fields(ArchiveWriter)}
    assert "format_version" not in {f.name for f in dataclasses.fields(ArchiveBuilder)}
    w = ArchiveWriter(level=1, dictionary="none")
    w.add_group([("sources/x.py", b"print(1)\n")])
    data = w.to_bytes(
        {
            "format": "karchive",
            "format_version": "2.0",
            "abi_version": 1,
            "name": "n",
            "version": "1",
            "produced_by": {},
            "created": None,
            "sources": [],
            "variants": [],
        }
    )
    reader = ArchiveReader.from_bytes(data)
    assert reader.format_version == FORMAT_VERSION and FORMAT_VERSION[0] == 2
