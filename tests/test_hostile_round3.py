"""Issue 20, round 3 of the adversarial pass: each test reproduces one attack that once got through.

The archives here are forged with every digest recomputed (the real writer is handed hostile names,
or :mod:`hostile_factory` takes an honest archive apart and puts it back together), so the only thing
a reader can refuse them for is the rule under test.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hostile_factory import put_together, take_apart, v2_variant

from karchive.errors import SchemaError
from karchive.format.open import open_location
from karchive.format.writer import ArchiveWriter

ROOT = Path(__file__).resolve().parent.parent
TRITON_HASH = "ab" * 32


def _cli(*args: object, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    full = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
    return subprocess.run([sys.executable, "-m", "karchive", *map(str, args)], env=full, capture_output=True,
                          text=True, timeout=timeout)


def _files_under(top: Path) -> set[Path]:
    return {p for p in top.rglob("*")}


# --------------------------------------------------------------------------------------------------
# 1. export-triton-cache wrote anywhere: kernel names (and IR stage names) from the archive in paths
# --------------------------------------------------------------------------------------------------


def _archive_naming(kernel: str, fmt: tuple[int, int], *, stage: str | None = None) -> bytes:
    """An archive (format ``fmt``) with one variant of ``kernel``, a Triton cache hash recorded, so that
    ``export-triton-cache --allow-unverified`` writes it; the writer computes every digest honestly.
    ``stage`` renames the variant's IR stage."""
    entry, launch, irm = v2_variant(kernel, 0, source=None)
    entry["provenance"]["triton_hash"] = TRITON_HASH
    if stage is not None:
        entry["files"]["ir"] = {stage: entry["files"]["ir"]["ptx"]}
    w = ArchiveWriter(format_version=fmt)
    w.add_group(launch + irm)
    manifest = {"format": "karchive", "format_version": f"{fmt[0]}.{fmt[1]}", "abi_version": 1, "name": "hostile",
                "version": "1", "produced_by": {"karchive": "test"}, "created": None,
                "path_sentinel": "@KARCHIVE_ROOT@", "sources": [], "variants": [entry]}
    return w.to_bytes(manifest)


def _renamed_in_v2(kernel: str) -> bytes:
    """An honest format-2 archive of kernel ``k`` whose header row and shard then say ``kernel``:
    the shard's and the header's digests recomputed (the shard's bulk path takes the header's name)."""
    parts = take_apart(_archive_naming("k", (2, 0)))
    for doc in parts.shards.values():
        doc["kernel"] = kernel
    for row in parts.header["shards"]:
        row["kernel"] = kernel
    return put_together(parts)


HOSTILE_KERNELS = ["../../pwn", "{abs}/owned", "a/b", "k\n", "k.", ".k", "m:", ":k", "k\0x", "k k", ""]


@pytest.mark.parametrize("kernel", HOSTILE_KERNELS)
@pytest.mark.parametrize("how", ["format1", "format2", "format2-renamed"])
def test_export_triton_cache_path_traversal_kernel_name_is_refused(tmp_path, kernel, how):
    """A kernel named ``../../pwn`` or ``/abs/dir/owned`` once passed ``verify`` and made
    ``export-triton-cache`` write outside ``--cache-dir``. Now the model refuses the name (SchemaError)
    and the export writes nothing anywhere."""
    from karchive.producer.triton_cache import export_archive

    outside = tmp_path / "outside"
    outside.mkdir()
    kernel = kernel.format(abs=outside)
    data = (_archive_naming(kernel, (1, 0)) if how == "format1" else _archive_naming(kernel, (2, 0))
            if how == "format2" else _renamed_in_v2(kernel))
    archive = tmp_path / "a" / "b" / "hostile.karc"
    archive.parent.mkdir(parents=True)
    archive.write_bytes(data)
    cache = tmp_path / "a" / "b" / "cache"
    before = _files_under(tmp_path)
    with pytest.raises(SchemaError) as err:
        reader = open_location(str(archive))
        model = reader.model
        for k in model.kernels():
            model.variants_of(k)
    assert "is not a kernel name" in str(err.value) and err.value.where
    pytest.importorskip("triton")
    with pytest.raises(SchemaError):
        export_archive(open_location(str(archive)), str(cache), allow_unverified=True)
    assert _files_under(tmp_path) == before  # nothing written, inside or outside the cache dir


def test_export_triton_cache_path_traversal_via_cli_verify_and_export(tmp_path):
    """The attack end to end through the CLI: ``verify`` refuses, ``export-triton-cache`` exits non-zero and
    the file two directories above ``--cache-dir`` is not created."""
    pytest.importorskip("triton")
    archive = tmp_path / "x" / "y" / "hostile.karc"
    archive.parent.mkdir(parents=True)
    archive.write_bytes(_renamed_in_v2("../../pwn"))
    r = _cli("verify", archive)
    assert r.returncode != 0 and "is not a kernel name" in r.stdout + r.stderr, r.stdout + r.stderr
    cache = tmp_path / "x" / "y" / "cache"
    r = _cli("export-triton-cache", archive, "--cache-dir", cache, "--allow-unverified")
    assert r.returncode != 0
    assert not list(tmp_path.rglob("pwn*"))
    assert not cache.exists() or not os.listdir(cache)


def test_export_triton_cache_path_traversal_ir_stage_name_is_refused(tmp_path):
    """An IR stage name becomes the file extension (``<kernel>.<stage>``): ``ptx/../../../x`` is refused
    by the model like a kernel name."""
    for fmt in ((1, 0), (2, 0)):
        archive = tmp_path / f"stage{fmt[0]}.karc"
        archive.write_bytes(_archive_naming("k", fmt, stage="ptx/../../../x"))
        with pytest.raises(SchemaError, match="IR stage"):
            reader = open_location(str(archive))
            reader.model.variants_of("k")


def test_export_triton_cache_qualified_name_uses_the_short_name(tmp_path):
    """A qualified name (``pkg.mod:Outer.<locals>.k``) is valid; Triton names the entry's files after the
    short name, and every file lands inside the entry directory under --cache-dir."""
    pytest.importorskip("triton")
    from karchive.producer.triton_cache import cache_dir_name, export_archive

    archive = tmp_path / "q.karc"
    archive.write_bytes(_archive_naming("pkg.mod:Outer.<locals>.k", (2, 0)))
    cache = tmp_path / "cache"
    results = export_archive(open_location(str(archive)), str(cache), allow_unverified=True)
    assert [r.status for r in results] == ["written"]
    entry = cache / cache_dir_name(TRITON_HASH)
    assert sorted(os.listdir(entry)) == ["__grp__k.json", "k.cubin", "k.json", "k.ptx"]
    assert {p.parent for p in cache.rglob("*") if p.is_file()} == {entry}


def test_export_triton_cache_write_entry_refuses_paths_from_archive_data(tmp_path):
    """The exporter's own check, independent of the model: a stem or extension that is not a plain
    name, or a hash with a trailing newline (``bytes.fromhex`` skips whitespace), writes nothing."""
    pytest.importorskip("triton")
    from karchive.errors import CaptureError
    from karchive.producer.triton_cache import write_entry

    cache = tmp_path / "cache"
    for stem, ext in (("../../pwn", "json"), (str(tmp_path / "abs"), "json"), ("k", "../x"), ("k", "a/b")):
        with pytest.raises(SchemaError):
            write_entry(str(cache), TRITON_HASH, stem, {ext: b"x"})
    with pytest.raises(CaptureError):
        write_entry(str(cache), TRITON_HASH + "\n", "k", {"json": b"x"})
    assert not cache.exists()
