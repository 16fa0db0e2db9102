"""`karchive rebuild --check`: rebuild every variant from the archive alone and compare with what it ships."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from repro_support import clean_env, karchive, make_checkout, manifest
from support import needs_triton

from karchive.cli.main import main
from karchive.format.names import short_name

pytestmark = needs_triton


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The repro spec built from a checkout that is deleted afterwards: a rebuild has only the archive."""
    root = tmp_path_factory.mktemp("rebuild")
    spec = make_checkout(root / "checkout")
    out = root / "repro.karc"
    env = clean_env(KARCHIVE_CACHE_DIR=str(root / "kc"))
    karchive(["build", str(spec), "-o", str(out), "-j", "2", "--quiet"], cwd=root, env=env)
    shutil.rmtree(spec.parent)
    return out


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _compiled(archive):
    """The archive's variants back as CompiledVariants (to write altered archives the way a publisher could)."""
    from karchive.format.manifest import Manifest
    from karchive.format.reader import ArchiveReader
    from karchive.producer.compile.describe import CompiledVariant

    reader = ArchiveReader.from_path(archive)
    manifest = Manifest.from_json(reader.manifest)
    by_sha = {s.sha256: reader.read(s.path).decode() for s in manifest.sources}
    out = []
    for v in manifest.variants:
        files = {"binary": reader.read(v.binary.path), "metadata": reader.read(v.metadata.path)}
        files.update({stage: reader.read(ref.path) for stage, ref in v.ir.items()})
        sources = [by_sha[s["sha256"]] for s in (v.provenance.build or {}).get("sources", [])]
        out.append(CompiledVariant.assemble(v, files, sources[0] if sources else None, extra_sources=sources))
    return reader.manifest, out


def _write(manifest, variants, path, **kw):
    from karchive.producer.build.pack import ArchiveBuilder

    builder = ArchiveBuilder(
        manifest["name"],
        manifest["version"],
        produced_by=kw.pop("produced_by", {k: v for k, v in manifest["produced_by"].items() if k != "karchive"}),
        dictionary="none",
        **kw,
    )
    builder.extend(variants)
    builder.write(path)
    return path


def test_rebuild_reproduces_every_variant_from_the_archive_alone(built, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, "rebuild", "--check", str(built), "-j", "2")
    assert code == 0, out + err
    assert "4 variants: 4 reproduced -- every variant reproduced byte for byte" in out
    assert err.count("reproduced") == 4  # one progress line per variant
    code, out, _ = run(capsys, "rebuild", "--check", str(built), "--json", "-k", "scaled_add")
    report = json.loads(out)
    assert code == 0 and report["exit_code"] == 0 and report["counts"] == {"reproduced": 2}
    assert all(v["rebuilt_key"] == v["key"] for v in report["variants"])
    assert report["toolchain"]["differs"] == []


def test_a_binary_that_does_not_come_from_its_source_is_named(built, capsys, tmp_path):
    """A publisher ships a cubin that differs (digests consistent): variant, member and first offset are named."""
    m, variants = _compiled(built)
    i, target = next(
        (i, v)
        for i, v in enumerate(variants)
        if short_name(v.kernel) == "scaled_add" and v.variant.target.backend == "cuda"
    )
    cubin = bytearray(target.files["binary"])
    cubin[len(cubin) - 40] ^= 0x01
    variants[i] = target.replaced(target.variant, {**target.files, "binary": bytes(cubin)})
    bad = _write(m, variants, tmp_path / "bad.karc")
    code, out, _ = run(capsys, "rebuild", "--check", str(bad), "--json", "-k", "scaled_add")
    report = json.loads(out)
    assert code == 1 and report["exit_code"] == 1
    (mis,) = [v for v in report["variants"] if v["status"] == "mismatch"]
    assert mis["key"] == target.key and mis["target"] == "cuda:90"
    assert mis["differences"] == [
        {
            "member": f"variants/{mis['key']}/kernel.cubin",
            "offset": len(cubin) - 40,
            "archived_size": len(cubin),
            "rebuilt_size": len(cubin),
        }
    ]
    code, out, _ = run(capsys, "rebuild", "--check", str(bad), "-k", "scaled_add")
    assert code == 1 and f"kernel.cubin differs at byte {len(cubin) - 40}" in out and "MISMATCH" in out


def test_a_launch_abi_that_does_not_match_is_named(built, capsys, tmp_path):
    m, variants = _compiled(built)
    from dataclasses import replace

    i, target = next(
        (i, v)
        for i, v in enumerate(variants)
        if short_name(v.kernel) == "softmax_kernel" and v.variant.target.backend == "hip"
    )
    abi = replace(target.variant.abi, shared=target.variant.abi.shared + 1024)
    variants[i] = target.replaced(replace(target.variant, abi=abi))
    bad = _write(m, variants, tmp_path / "abi.karc")
    code, out, _ = run(capsys, "rebuild", "--check", str(bad), "--json", "-k", "softmax_kernel")
    mis = [v for v in json.loads(out)["variants"] if v["status"] == "mismatch"]
    assert code == 1 and len(mis) == 1
    assert mis[0]["differences"][0]["field"] == "abi.shared"
    assert mis[0]["differences"][0]["rebuilt"] == mis[0]["differences"][0]["archived"] - 1024


def test_another_triton_compares_signature_and_abi_not_bytes(built, capsys, tmp_path):
    """An archive that says another Triton built it: bytes cannot be compared; what must still match, does."""
    m, variants = _compiled(built)
    produced = {k: v for k, v in m["produced_by"].items() if k != "karchive"}
    older = _write(m, variants, tmp_path / "older.karc", produced_by=dict(produced, triton="3.8.0"))
    code, out, _ = run(capsys, "rebuild", "--check", str(older), "--json", "-k", "scaled_add")
    report = json.loads(out)
    assert code == 3 and report["toolchain"]["differs"] == ["triton"]
    assert {v["status"] for v in report["variants"]} == {"consistent"}
    assert all("signature and launch ABI" in v["reason"] for v in report["variants"])


def test_a_different_ptxas_is_named_and_the_rest_still_compared(built, capsys, monkeypatch):
    """A real second ptxas (the CUDA toolkit's, if this machine has one unlike Triton's bundled one)."""
    from triton.backends.nvidia.compiler import get_ptxas

    other = shutil.which("ptxas", path="/usr/local/cuda/bin:" + os.environ.get("PATH", ""))
    if other is None or os.path.realpath(other) == os.path.realpath(get_ptxas(80).path):
        pytest.skip("no second ptxas on this machine")
    monkeypatch.setenv("TRITON_PTXAS_PATH", other)
    if str(get_ptxas(80).version) == manifest(built)["produced_by"].get("ptxas_below_sm90"):
        pytest.skip("the toolkit's ptxas has the same version as Triton's")
    code, out, _ = run(capsys, "rebuild", "--check", str(built), "--json", "-k", "softmax_kernel")
    report = json.loads(out)
    statuses = {v["target"]: v for v in report["variants"]}
    assert code == 3 and "ptxas_below_sm90" in report["toolchain"]["differs"]
    assert statuses["cuda:80"]["status"] == "consistent" and "ptxas differs" in statuses["cuda:80"]["reason"]
    assert statuses["hip:gfx942"]["status"] == "reproduced"


def test_variants_that_cannot_be_rebuilt_say_why(built, capsys, tmp_path):
    """An imported Triton-cache entry has no source or constexprs; a variant whose sources are missing neither."""
    from karchive.producer.capture.triton_cache import import_cache
    from karchive.producer.compile.aot import VariantRequest, compile_variant

    spec = make_checkout(tmp_path / "co")
    cache = tmp_path / "tc"
    compile_variant(
        VariantRequest(
            f"{spec.parent / 'mykern.py'}:scaled_add", "*fp32:16, *fp32:16, *fp32:16, i32", "hip:gfx942", {"BLOCK": 128}
        ),
        cache_dir=str(cache),
    )
    (imported,) = import_cache(str(cache)).variants
    m, variants = _compiled(built)
    from karchive.producer.compile.describe import CompiledVariant

    found = next(v for v in variants if short_name(v.kernel) == "softmax_kernel")
    orphan = CompiledVariant.assemble(found.variant, found.files, None, extra_sources=[])
    odd = _write(m, [imported, orphan], tmp_path / "odd.karc")
    code, out, _ = run(capsys, "rebuild", "--check", str(odd), "--json")
    report = json.loads(out)
    assert code == 3 and report["counts"] == {"not-rebuildable": 2}
    reasons = {short_name(v["kernel"]): v["reason"] for v in report["variants"]}
    assert "imported from a Triton cache" in reasons["scaled_add"]
    assert "is not in the archive" in reasons["softmax_kernel"]


@pytest.mark.parametrize(
    "change, reason",
    [
        (lambda b: b.update(env={"LD_PRELOAD": "/tmp/x.so"}), "cannot be set by a build"),
        (lambda b: b["sources"][0].update(module="os; import x"), "invalid module"),
        (lambda b: b["sources"][0].update(module="triton.language"), "invalid module"),
        (lambda b: b["sources"][0].update(name="../../etc/kernels.py"), "does not follow the canonical name"),
        (lambda b: b.update(sources="kernels.py"), "not a list"),
        (lambda b: b.update(scheme=99), "scheme 99"),
    ],
)
def test_a_hostile_build_record_is_refused_before_anything_runs(built, capsys, tmp_path, change, reason):
    m, variants = _compiled(built)
    (v,) = [v for v in variants if short_name(v.kernel) == "scaled_add" and v.variant.target.backend == "hip"]
    change(v.variant.provenance.build)
    odd = _write(m, [v], tmp_path / "odd.karc")
    code, out, _ = run(capsys, "rebuild", "--check", str(odd), "--json")
    (check,) = json.loads(out)["variants"]
    assert code == 3 and check["status"] == "not-rebuildable" and reason in check["reason"], check


def test_rebuild_by_registry_reference(built, capsys, tmp_path, monkeypatch):
    """NAME@VERSION resolves through the registry; publishing identical bytes again is a no-op."""
    monkeypatch.setenv("KARCHIVE_REGISTRY", str(tmp_path / "registry"))
    monkeypatch.setenv("KARCHIVE_CACHE_DIR", str(tmp_path / "cache"))
    code, out, _ = run(capsys, "publish", str(built), "--create-registry")
    assert code == 0 and out.startswith("published repro@1.0")
    copy = tmp_path / "again.karc"
    copy.write_bytes(built.read_bytes())
    code, out, _ = run(capsys, "publish", str(copy))
    assert code == 0 and "already published (identical bytes, nothing to do)" in out
    code, out, _ = run(capsys, "rebuild", "--check", "repro@1.0", "-k", "scaled_add", "--json")
    assert code == 0 and json.loads(out)["counts"] == {"reproduced": 2}


def test_rebuild_needs_check_and_a_real_archive(capsys, tmp_path):
    with pytest.raises(SystemExit):
        main(["rebuild", str(tmp_path / "x.karc")])
    code, _, err = run(capsys, "rebuild", "--check", str(tmp_path / "missing.karc"))
    assert code == 2 and "no such archive" in err
