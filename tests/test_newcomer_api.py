"""Issue 15 for the Python API: every public entry point raises karchive errors only (a subclass may
also derive from the builtin), errors are one ``except karchive.KarchiveError`` away, the toolchain
check refuses targets in one line, and the objects a user explores print short and readable."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from support import EXAMPLES, ROOT, needs_triton

import karchive
from karchive import errors

KERNELS = str(EXAMPLES / "kernels.py")
ADD_SIG = "*fp32:16, *fp32:16, *fp32:16, i32"


# -- 5. errors inside the hierarchy ------------------------------------------------------------------
def test_open_missing_file_is_a_karchive_error_and_a_file_not_found(tmp_path):
    with pytest.raises(karchive.KarchiveError) as info:
        karchive.open(tmp_path / "nosuch.karc")
    assert isinstance(info.value, FileNotFoundError) and isinstance(info.value, karchive.ArchiveNotFoundError)


@pytest.mark.parametrize(
    "ref, cls, builtin",
    [
        ("foo://bucket/x.karc", "UnsupportedLocationError", ValueError),  # unknown fsspec protocol
        ("/", "FormatError", None),  # a directory
        ("nosuchname@1.0", "NotFoundError", None),
    ],
)
def test_open_and_resolve_open_raise_karchive_errors(tmp_path, monkeypatch, ref, cls, builtin):
    from karchive.resolve import open as open_ref

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("KARCHIVE_REGISTRY", raising=False)
    for opener in (karchive.open, open_ref):
        with pytest.raises(getattr(karchive, cls)) as info:
            opener(ref)
        assert isinstance(info.value, karchive.KarchiveError)
        if builtin:
            assert isinstance(info.value, builtin)


def test_not_an_archive(tmp_path):
    bad = tmp_path / "notarc.karc"
    bad.write_bytes(b"hello")
    with pytest.raises(karchive.FormatError, match="too small to be a karchive archive"):
        karchive.open(bad)


def test_kernel_lookup_with_a_wrong_name(examples_archive):
    arc = karchive.open(examples_archive)
    for name in ("typo", None, 3):  # None used to mean "all variants" and failed deep in the dispatcher
        with pytest.raises(karchive.KernelNameError, match="it has: kernels:add_kernel, kernels:matmul_kernel") as info:
            arc.kernel(name)
        assert isinstance(info.value, KeyError) and isinstance(info.value, karchive.NoMatchingVariantError)


def test_errors_are_exported_lazily_and_listed():
    code = textwrap.dedent("""
        import sys, karchive
        assert "karchive.errors" not in sys.modules, "import karchive stays light"
        listed = dir(karchive)
        for name in ("open", "capture", "Registry", "Archive", "KarchiveError", "NotFoundError", "DestinationError"):
            assert name in listed, name
        assert karchive.KarchiveError is __import__("karchive.errors").errors.KarchiveError
        print("ok")
    """)
    r = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=str(ROOT),
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert r.stdout.strip() == "ok", r.stderr


def test_every_exported_error_is_a_karchive_error():
    names = [n for n in dir(karchive) if n.endswith("Error")]
    assert len(names) >= 20
    assert all(issubclass(getattr(karchive, n), errors.KarchiveError) for n in names)


# -- writing: the error names the user's file, never the temporary one -----------------------------------
def test_atomic_writer_names_the_destination(tmp_path):
    from karchive.core.fsio import atomic_write

    for dest, says in [(tmp_path / "missing" / "x.bin", "does not exist"), (tmp_path, "it is a directory")]:
        with pytest.raises(errors.DestinationError) as info:
            atomic_write(dest, b"data")
        assert str(dest) in str(info.value) and says in str(info.value) and ".tmp" not in str(info.value)
        assert isinstance(info.value, OSError) and info.value.path == str(dest)
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no temporary left behind


@needs_triton
def test_builder_and_capture_writes_name_the_path(tmp_path, add_variants):
    from karchive.producer.build.pack import ArchiveBuilder

    builder = ArchiveBuilder("a", "1")
    builder.extend(add_variants)
    target = tmp_path / "nope" / "a.karc"
    with pytest.raises(errors.DestinationError, match=f"cannot write {target}: its directory"):
        builder.write(target)


def test_destination_checks(tmp_path):
    from karchive.core.destination import output_dir, output_file

    afile = tmp_path / "afile"
    afile.write_text("x")
    assert output_file(tmp_path / "a" / "b" / "x.karc") == str(tmp_path / "a" / "b" / "x.karc")
    assert (tmp_path / "a" / "b").is_dir()
    assert output_file(str(tmp_path / "into") + "/", default_name="n-1.karc") == str(tmp_path / "into" / "n-1.karc")
    with pytest.raises(errors.DestinationError, match="is a directory; give a file name"):
        output_file(tmp_path)
    with pytest.raises(errors.DestinationError, match="afile is a file, not a directory"):
        output_file(afile / "x.karc")
    with pytest.raises(errors.DestinationError, match="it is a file"):
        output_dir(afile)
    assert output_dir(tmp_path / "later", create=False) and not (tmp_path / "later").exists()


# -- producer API -------------------------------------------------------------------------------------
def test_load_spec_errors_are_spec_file_errors(tmp_path):
    from karchive.producer.build.spec_file import load_spec

    binary = tmp_path / "b.toml"
    binary.write_bytes(b"\xb5\x00\xff")
    for path, says in [
        (tmp_path, "is a directory"),
        (binary, "not a text file"),
        (tmp_path / "none.toml", "not found"),
    ]:
        with pytest.raises(errors.SpecFileError, match=says):
            load_spec(path)


@needs_triton
def test_signature_errors(tmp_path):
    from karchive.producer.compile.aot import VariantRequest, compile_variant

    ref = KERNELS + ":add_kernel"
    with pytest.raises(errors.SignatureError, match="not int"):
        compile_variant(VariantRequest(ref, 5, "cuda:90", {"BLOCK": 64}))
    with pytest.raises(errors.SignatureError, match=r"unknown constexpr 'BLOCKK' \(did you mean 'BLOCK'\?\)"):
        compile_variant(VariantRequest(ref, ADD_SIG, "cuda:90", {"BLOCKK": 64}))


# -- 7. targets the installed toolchain cannot build ---------------------------------------------------
@needs_triton
def test_toolchain_knows_its_cuda_targets():
    from karchive.producer.compile.toolchain import check_target, cuda_capabilities

    caps = cuda_capabilities()
    assert {75, 80, 86, 89, 90, 100, 120} <= set(caps) and 88 not in caps and 999 not in caps
    for ok in ("cuda:80", "cuda:90", "cuda:100"):
        assert str(check_target(ok)) == ok


@needs_triton
@pytest.mark.parametrize(
    "target, probe, says",
    [
        ("cuda:999", False, "no sm_999a"),
        ("cuda:88", False, r"ptxas \(CUDA 12"),
        ("hip:gfx9999", False, "knows no AMD GPU 'gfx9999'"),
        ("hip:gfx803", True, "unsupported target: 'gfx803'"),
    ],
)
def test_toolchain_refuses_in_one_line_and_prints_nothing(capfd, target, probe, says):
    from karchive.producer.compile.toolchain import check_target

    with pytest.raises(errors.TargetError, match=says) as info:
        check_target(target, probe=probe)
    assert "\n" not in str(info.value) and info.value.target == target
    out, err = capfd.readouterr()
    assert out == "" and err == ""  # the MLIR reproducer and LLVM lines went nowhere


@needs_triton
@pytest.mark.parametrize("target", ["hip:gfx90a", "hip:gfx942", "hip:gfx950", "hip:gfx1100", "hip:gfx1201"])
def test_toolchain_probe_accepts_what_it_names(target):
    """The examples the error message names are targets this Triton builds."""
    from karchive.producer.compile.toolchain import HIP_EXAMPLES, check_target

    assert target.split(":")[1] in HIP_EXAMPLES
    check_target(target, probe=True)


@needs_triton
def test_compile_variant_refuses_before_compiling(capfd):
    from karchive.producer.compile.aot import VariantRequest, compile_variant

    with pytest.raises(errors.TargetError, match="cuda:999"):
        compile_variant(VariantRequest(KERNELS + ":add_kernel", ADD_SIG, "cuda:999", {"BLOCK": 64}))
    assert capfd.readouterr().err == ""


# -- 19. exploring from Python ------------------------------------------------------------------------
def test_archive_and_variant_reprs_are_short(examples_archive):
    arc = karchive.open(examples_archive)
    assert repr(arc) == f"<karchive.Archive examples 0.1.0: 42 variants of 4 kernels, from {examples_archive}>"
    reprs = [repr(v) for v in arc.variants()]
    assert len(reprs) == 42 and max(len(r) for r in reprs) < 160
    scale = [repr(v) for v in arc.variants("scale_kernel") if str(v.target) == "cuda:90"]
    assert any(
        r.startswith("<Variant kernels:scale_kernel cuda:90 stride==1 BLOCK=1024 warps=4 stages=3 key=") for r in scale
    )
    assert "sha256" not in "".join(reprs)


def test_archive_summary_reads_like_inspect(examples_archive):
    text = karchive.open(examples_archive).summary()
    lines = text.splitlines()
    assert lines[0].startswith("examples 0.1.0: 42 variants of 4 kernels (")
    row = next(line for line in lines if line.startswith("kernels:add_kernel"))
    assert "6 variants" in row and "cuda:80, cuda:90, hip:gfx942" in row and "BLOCK=256|1024" in row
    assert "stride==1 (in 3) BLOCK=1024" in next(line for line in lines if line.startswith("kernels:scale_kernel"))


def test_variant_repr_escapes_terminal_control_characters(examples_archive):
    import dataclasses

    v = karchive.open(examples_archive).variants()[0]
    hostile = dataclasses.replace(v, kernel="k\x1b[31mred")
    assert "\x1b" not in repr(hostile) and "\\x1b" in repr(hostile)


@pytest.mark.parametrize(
    "typed, means",
    [
        ("gfx942", "hip:gfx942"),
        ("GFX90A", "hip:gfx90a"),
        ("sm_90", "cuda:90"),
        ("90", "cuda:90"),
        ("foo", None),
        ("cuda", None),
    ],
)
def test_a_bare_arch_suggests_the_target_it_means(typed, means):
    from karchive.format.target import Target

    with pytest.raises(errors.TargetError) as info:
        Target.parse(typed)
    assert info.value.target == typed
    if means:
        assert str(info.value).endswith(f"did you mean {means!r}?")
        assert str(Target.parse(means)) == means  # and what it suggests parses
    else:
        assert "did you mean" not in str(info.value)
