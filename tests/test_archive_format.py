"""The .karc container end to end on real Triton output: determinism, schema, random access, tools."""

import json
import shutil
import subprocess

import pytest
from support import EXAMPLES, needs_triton

from karchive.errors import SentinelError, UnsupportedKernelError, UnsupportedVersionError
from karchive.format.constants import FORMAT_VERSION, PATH_SENTINEL
from karchive.format.manifest import Manifest
from karchive.format.reader import ArchiveReader
from karchive.format.sentinel import restore_paths, rewrite_paths
from karchive.format.source import BytesSource
from karchive.producer.build.pack import ArchiveBuilder

pytestmark = needs_triton


def _build(variants, **kw):
    b = ArchiveBuilder("t", "1.0", produced_by={"triton": "x"}, **kw)
    b.extend(variants)
    return b.to_bytes()[0]


def test_same_inputs_give_byte_identical_archives(add_variants, monkeypatch):
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    a = _build(add_variants)
    b = _build(list(reversed(add_variants)))
    assert a == b
    manifest = ArchiveReader.from_bytes(a).manifest
    assert manifest["created"] is None
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    c = _build(add_variants)
    assert c != a
    assert ArchiveReader.from_bytes(c).manifest["created"] == "2023-11-14T22:13:20Z"
    assert c == _build(add_variants)


def test_full_build_is_reproducible_across_job_counts(examples_archive, tmp_path):
    from karchive.producer.build.pipeline import build_archive
    from karchive.producer.build.spec_file import load_spec

    again = tmp_path / "again.karc"
    build_archive(load_spec(EXAMPLES / "build.toml"), again, jobs=1, progress=False)
    assert again.read_bytes() == examples_archive.read_bytes()


def test_examples_archive_validates_against_schema(examples_archive):
    jsonschema = pytest.importorskip("jsonschema")
    from karchive.format.schema import load_schema

    reader = ArchiveReader.from_path(examples_archive)
    jsonschema.Draft202012Validator(load_schema()).validate(reader.manifest)
    manifest = Manifest.from_json(reader.manifest)
    assert reader.verify() == []
    kernels = {v.kernel for v in manifest.variants}
    assert kernels == {"kernels:add_kernel", "kernels:softmax_kernel", "kernels:matmul_kernel", "kernels:scale_kernel"}
    targets = {str(v.target) for v in manifest.variants}
    assert targets == {"cuda:80", "cuda:90", "hip:gfx942"}
    # Several variants of one kernel name coexist, each with its own key.
    mm90 = [v for v in manifest.variants if v.kernel == "kernels:matmul_kernel" and str(v.target) == "cuda:90"]
    assert len(mm90) == 8 and len({v.key for v in mm90}) == 8
    assert any(v.abi.shared > 48 * 1024 for v in mm90), "one matmul variant must need > 48 KB of shared memory"
    assert any(v.abi.num_warps == 8 for v in mm90)
    scale = [v for v in manifest.variants if v.kernel == "kernels:scale_kernel" and str(v.target) == "cuda:90"]
    assert sorted(p.equal_to_1 for v in scale for p in v.params if p.name == "stride") == [False, True]
    for v in manifest.variants:
        names = [p.name for p in v.abi.params]
        assert names[-2:] == ["global_scratch", "profile_scratch"]
        assert v.target.warp_size == (64 if v.target.backend == "hip" else 32)
        assert v.abi.binary_format == ("hsaco" if v.target.backend == "hip" else "cubin")
        meta = json.loads(reader.read(v.metadata.path))
        assert meta["name"] == v.abi.entry
        assert not any(s.startswith("/") for s in _strings(meta)), "absolute paths must be rewritten"


def _strings(node):
    if isinstance(node, str):
        yield node
    elif isinstance(node, list):
        for v in node:
            yield from _strings(v)
    elif isinstance(node, dict):
        for v in node.values():
            yield from _strings(v)


def test_one_variant_reads_only_the_tail_and_its_frame(examples_archive):
    data = examples_archive.read_bytes()
    source = BytesSource(data)
    reader = ArchiveReader(source)
    opened_requests, opened_bytes = source.requests, source.bytes_read
    assert opened_requests <= 2
    kernel = "kernels:matmul_kernel"
    target = reader.model.summary()[[s.kernel for s in reader.model.summary()].index(kernel)].targets[-1][0]
    # Its shard for that target (format 2.1): in the tail already, or one read; no other target's is read.
    variant = reader.model.variants_of(kernel, target)[1]
    assert str(variant.target) == target
    (part,) = [i for i in reader._shard_of[kernel] if reader._shards[i].target == target]
    assert reader._registered == {part}
    shard = reader.frames[reader._members[reader._shards[part].path].frame]
    assert source.requests - opened_requests <= 1 and source.bytes_read - opened_bytes in (0, shard.length)
    opened_requests, opened_bytes = source.requests, source.bytes_read
    cubin = reader.read(variant.binary.path)
    reader.read(variant.metadata.path)  # same frame: no further read
    assert source.requests == opened_requests + 1
    frame = reader.frames[reader.members[variant.binary.path].frame]
    assert source.bytes_read - opened_bytes == frame.length
    assert frame.length < len(data) / 10
    assert len(cubin) == variant.binary.size


def test_ir_can_be_left_out(add_variants):
    from karchive.producer.compile.aot import VariantRequest, compile_variant

    slim = compile_variant(
        VariantRequest(
            str(EXAMPLES / "kernels.py") + ":add_kernel",
            "*fp32:16, *fp32:16, *fp32:16, i32",
            "cuda:90",
            {"BLOCK": 1024},
            {"num_warps": 4},
            include_ir=False,
        )
    )
    assert slim.variant.to_json()["key"] == add_variants[0].variant.to_json()["key"]
    reader = ArchiveReader.from_bytes(_build([slim]))
    (v,) = Manifest.from_json(reader.manifest).variants
    assert v.ir == {} and not any(n.endswith((".ptx", ".llir", ".ttir")) for n in reader.members)


def test_plain_archives_list_and_extract_with_standard_tar(add_variants, tmp_path):
    if not shutil.which("tar") or not shutil.which("zstd"):
        pytest.skip("needs GNU tar and zstd")
    path = tmp_path / "plain.karc"
    path.write_bytes(_build(add_variants, dictionary="none"))
    listing = subprocess.run(
        ["tar", "--zstd", "-tf", str(path)], capture_output=True, text=True, check=True
    ).stdout.split()
    assert "karchive/manifest.json" in listing and any(n.endswith(".cubin") for n in listing)
    out = tmp_path / "x"
    out.mkdir()
    subprocess.run(["tar", "--zstd", "-xf", str(path), "-C", str(out)], check=True)
    reader = ArchiveReader.from_path(path)
    for name in reader.members:
        if name != "karchive/manifest.json":
            assert (out / name).read_bytes() == reader.read(name)


def test_dictionary_archives_need_zstd_with_the_dictionary(examples_archive, tmp_path):
    if not shutil.which("tar") or not shutil.which("zstd"):
        pytest.skip("needs GNU tar and zstd")
    reader = ArchiveReader.from_path(examples_archive)
    assert reader._index["dictionary"]
    dict_path = tmp_path / "d.zdict"
    dict_path.write_bytes(reader._member_unchecked(reader.members[reader._index["dictionary"]]))
    tar = subprocess.run(
        f"zstd -dc -D {dict_path} {examples_archive} | tar -tf -",
        shell=True,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert sorted(tar) == sorted(reader.members)


def test_newer_manifest_major_version_is_refused_naming_both(add_variants):
    builder = ArchiveBuilder("t", "1.0")
    builder.extend(add_variants)
    manifest, writer = builder.manifest_and_writer()
    manifest["format_version"] = "7.3"
    with pytest.raises(UnsupportedVersionError, match=rf"7\.3.*{FORMAT_VERSION[0]}\.{FORMAT_VERSION[1]}"):
        ArchiveReader.from_bytes(writer.to_bytes(manifest))


def test_sentinel_rewrite_restore_and_refusal(tmp_path):
    meta = {
        "extern_libs": [["libdevice", "/opt/site/triton/backends/nvidia/lib/libdevice.10.bc"]],
        "cache": "/home/u/.triton/cache/abc",
        "name": "k",
        "other": "/elsewhere/x",
    }
    packed = rewrite_paths(meta, ["/opt/site", "/home/u/.triton/cache"])
    assert packed["extern_libs"][0][1] == f"{PATH_SENTINEL}/triton/backends/nvidia/lib/libdevice.10.bc"
    assert packed["cache"] == f"{PATH_SENTINEL}/abc" and packed["other"] == "/elsewhere/x"
    restored = restore_paths(packed, str(tmp_path))
    assert restored["extern_libs"][0][1] == str(tmp_path / "triton/backends/nvidia/lib/libdevice.10.bc")
    with pytest.raises(SentinelError):
        rewrite_paths({"x": f"{PATH_SENTINEL}/already"}, ["/opt"])


def test_kernels_whose_abi_cannot_be_described_are_refused():
    from karchive.producer.compile.describe import build_abi

    # a Triton release whose descriptor convention karchive has not read (a future 3.10) is refused, not guessed
    meta = {
        "name": "k",
        "num_warps": 4,
        "triton_version": "3.10.0",
        "target": {"backend": "cuda"},
        "tensordesc_meta": [{"swizzle": 3, "elem_size": 2, "elem_type": 6, "block_size": [64, 64]}],
    }
    with pytest.raises(UnsupportedKernelError, match="does not know how Triton 3.10.0 passes host tensor"):
        build_abi(
            kernel="k",
            param_names=["d"],
            param_types={"d": "tensordesc<fp16[64, 64]>"},
            metadata=meta,
            target={"backend": "cuda", "arch": "90", "warp_size": 32},
            asm={},
        )
    ptx = ".entry k(\n .param .u64 k_param_0,\n .param .u32 k_param_1,\n .param .u64 k_param_2\n)"
    with pytest.raises(UnsupportedKernelError, match="cannot map"):
        build_abi(
            kernel="k",
            param_names=["p", "n"],
            param_types={"p": "*fp32", "n": "i64"},
            metadata={"name": "k", "num_warps": 4},
            target={"backend": "cuda", "arch": "90", "warp_size": 32},
            asm={"ptx": ptx},
        )


def test_paths_from_another_triton_install_are_rewritten_and_hashed_locally():
    """Triton's cache can return metadata written by another install of the same build (seen in CI)."""
    import os

    import triton

    from karchive.producer.compile.describe import install_roots_in, triton_roots
    from karchive.producer.compile.variant_key import normalize_options

    local = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "lib", "libdevice.10.bc")
    foreign = "/elsewhere/venv/lib/python3.11/site-packages/triton/backends/nvidia/lib/libdevice.10.bc"
    opts_local = normalize_options({"extern_libs": [["libdevice", local]], "num_warps": 4})
    opts_foreign = normalize_options({"extern_libs": [["libdevice", foreign]], "num_warps": 4})
    assert opts_local == opts_foreign and len(opts_local["extern_libs"][0][1]) == 64
    meta = {"extern_libs": [["libdevice", foreign]]}
    packed = rewrite_paths(meta, triton_roots() + install_roots_in(meta))
    assert packed["extern_libs"][0][1] == f"{PATH_SENTINEL}/triton/backends/nvidia/lib/libdevice.10.bc"


def test_inspect_summary_reads_only_the_header(examples_archive, capsys):
    """`karchive inspect --summary`: counts per kernel and target from a format-2 header, no shard read."""
    from karchive.cli.main import main

    assert main(["inspect", str(examples_archive), "--summary", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["format_version"] == "{}.{}".format(*FORMAT_VERSION) and info["variants"] == 42
    kernels = {k["kernel"]: k for k in info["kernels"]}
    assert set(kernels) == {
        "kernels:add_kernel",
        "kernels:softmax_kernel",
        "kernels:matmul_kernel",
        "kernels:scale_kernel",
    }
    assert kernels["kernels:matmul_kernel"]["targets"]["cuda:90"] == 8
    assert sum(k["variants"] for k in info["kernels"]) == 42
    assert main(["inspect", str(examples_archive), "--summary"]) == 0
    text = capsys.readouterr().out
    assert "42 variants" in text and "matmul_kernel" in text and "cuda:90 8" in text
    source = BytesSource(examples_archive.read_bytes())
    reader = ArchiveReader(source)
    assert reader.model.summary()[0].variants and not reader._registered, "the summary reads no shard"


def test_format_2_members_are_grouped_per_kernel_and_target(examples_archive):
    """Launch members share frames per kernel and target, and so does the IR; no frame mixes kernels
    or targets."""
    reader = ArchiveReader.from_path(examples_archive)
    owner: dict[int, set[str]] = {}
    targets: dict[int, set[str]] = {}
    for v in reader.model.variants:
        for ref in v.members():
            owner.setdefault(reader.members[ref.path].frame, set()).add(v.kernel)
            targets.setdefault(reader.members[ref.path].frame, set()).add(str(v.target))
        launch = reader.members[v.binary.path].frame
        assert reader.members[v.metadata.path].frame == launch
        assert all(reader.members[r.path].frame != launch for r in v.ir.values()), "IR is not in the launch frame"
    assert all(len(k) == 1 for k in owner.values()) and all(len(t) == 1 for t in targets.values())
    assert len(owner) < len(reader.model.variants), "variants share frames"
    launch = {reader.members[v.binary.path].frame for v in reader.model.variants}
    assert max(reader.frames[f].size for f in launch) <= 256 * 1024 + 64 * 1024
    assert max(reader.frames[f].size for f in owner) <= 32 * 1024 * 1024 + 64 * 1024
