"""Old and new archive formats launch the same on a real GPU: the format 1.0 archive in tests/data/
(written by the 1.0 writer, before format 2.0 existed) and the same variants repacked as format 2.0
give bit-equal outputs, equal to torch's own. Skipped without an sm_90 GPU (see conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

import karchive
from karchive.format.reader import ArchiveReader

torch = pytest.importorskip("torch")
DATA = Path(__file__).resolve().parents[1] / "data"


def _repacked_as_2_0(path: Path, out: Path) -> Path:
    from karchive.producer.build.pack import ArchiveBuilder
    from karchive.producer.compile.describe import CompiledVariant

    reader = ArchiveReader.from_path(path)
    builder = ArchiveBuilder("v1-fixture", "2.0.0")
    for v in reader.model.variants:
        files = {"binary": reader.read(v.binary.path), "metadata": reader.read(v.metadata.path)}
        files.update({stage: reader.read(ref.path) for stage, ref in v.ir.items()})
        builder.add(CompiledVariant(v, files, reader.read(v.source).decode() if v.source else None))
    builder.write(out)
    return out


@pytest.mark.parametrize("name", ["v1_0-dict.karc", "v1_0-plain.karc"])
def test_a_1_0_archive_and_its_2_0_repack_launch_the_same(name, tmp_path):
    old = karchive.open(DATA / name)
    new = karchive.open(_repacked_as_2_0(DATA / name, tmp_path / "repacked.karc"))
    assert old.reader.format_version == (1, 0) and new.reader.format_version[0] == 2
    n = 100_003
    x = torch.randn(n, device="cuda")
    y = torch.randn(n, device="cuda")
    outs = []
    for arc in (old, new):
        out = torch.full_like(x, float("nan"))
        arc.kernel("add_kernel")[((n + 1023) // 1024,)](x, y, out, n, BLOCK=1024)
        outs.append(out)
    torch.cuda.synchronize()
    assert torch.equal(outs[0], x + y) and torch.equal(outs[1], outs[0])
