"""Host tensor-descriptor kernels build ahead of time and are captured from the JIT (issue 21), on CPU.

Real Triton compiles (no GPU: the capture uses the fake driver of capture_fakes.py). Blackwell cubins
cannot run here; they are proven by their ELF header (the SM number in ``e_flags``), by ``cuobjdump`` where
the Triton wheel ships it, and by the selection tests of test_tensordesc_runtime.py.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import struct
import subprocess
import sys

import pytest
from support import needs_triton

ROOT = pathlib.Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
KERNELS = DATA / "tma_kernels.py"
if str(DATA) not in sys.path:
    sys.path.insert(0, str(DATA))

pytestmark = needs_triton

DESC = "tensordesc<fp16[64, 64]>"


def _compile(
    target: str, kernel: str = "desc_copy", signature: str = f"{DESC}, {DESC}", constexprs: dict | None = None
):
    from karchive.producer.compile.aot import VariantRequest, compile_variant

    return compile_variant(
        VariantRequest(
            f"{KERNELS}:{kernel}",
            signature,
            target,
            constexprs if constexprs is not None else {"BLOCK_M": 64, "BLOCK_N": 64},
            {"num_warps": 4},
        )
    )


def cubin_sm(cubin: bytes) -> int:
    """The SM number a cubin's ELF header names (EM_CUDA; e_flags: bits 8-15 from ELF ABI version 8 on,
    bits 0-7 before)."""
    assert cubin[:4] == b"\x7fELF" and struct.unpack_from("<H", cubin, 18)[0] == 190  # EM_CUDA
    flags = struct.unpack_from("<I", cubin, 48 if cubin[4] == 2 else 36)[0]
    return (flags >> 8) & 0xFF if cubin[8] >= 8 else flags & 0xFF


def _cuobjdump() -> str | None:
    import triton

    tool = pathlib.Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    return str(tool) if tool.exists() else shutil.which("cuobjdump")


def _installed_ptxas_has(arch: str) -> bool:
    """Does the Triton wheel's ptxas know ``sm_<arch>a``? (cuda:103 and cuda:120 need a recent one.)"""
    import triton

    bin_dir = pathlib.Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    for name in ("ptxas-blackwell", "ptxas"):
        tool = bin_dir / name
        if tool.exists():
            out = subprocess.run([str(tool), "--help"], capture_output=True, text=True).stdout
            if f"sm_{arch}" in out:
                return True
    return False


@pytest.mark.parametrize("arch", ["90", "100", "103", "120"])
def test_descriptor_kernels_build_for_hopper_and_blackwell_with_tma_expansion(arch, tmp_path):
    """cuda:90/100/103/120: the binary is an arch-specific cubin (``sm_XXa``) for exactly that model, and
    each descriptor is recorded as a CUtensorMap plus shape and strides, as the PTX entry takes them."""
    if arch != "90" and not _installed_ptxas_has(arch):
        pytest.skip(f"the installed Triton's ptxas does not offer sm_{arch}")
    import triton

    from karchive.format.tensordesc import convention_for_triton

    cv = _compile(f"cuda:{arch}")
    abi = cv.variant.abi
    assert abi.binary_arch == f"sm_{arch}a" and abi.version == 2
    descs = [p for p in abi.params if p.kind == "tensordesc"]
    assert [p.name for p in descs] == ["in_desc", "out_desc"]
    for p in descs:
        d = p.desc
        assert d is not None and d.mode == "tma" and d.convention == convention_for_triton(triton.__version__)
        assert d.block_shape == (64, 64) and d.elem_size == 2 and d.rank == 2 and not d.fp4_padded
    ptx = cv.files["ptx"].decode()
    assert f".target sm_{arch}a" in ptx and ptx.count(".param .align 64 .b8") == 2  # two 128-byte maps by value
    cubin = cv.files["binary"]
    assert cubin_sm(cubin) == int(arch)
    tool = _cuobjdump()
    if tool:
        path = tmp_path / "k.cubin"
        path.write_bytes(cubin)
        listing = subprocess.run([tool, "-elf", str(path)], capture_output=True, text=True).stdout
        assert f"-arch sm_{arch}a" in listing, listing[:2000]


def test_below_sm90_descriptors_take_the_decomposed_expansion():
    """cuda:80 has no TMA: Triton passes base pointer, shape and strides twice (and one i1 flag per
    release-dependent option); the record says so and agrees with the PTX parameter list."""
    import triton

    from karchive.format.tensordesc import convention_for_triton

    cv = _compile("cuda:80")
    abi = cv.variant.abi
    assert abi.binary_arch == "sm_80" and cubin_sm(cv.files["binary"]) == 80
    d = abi.params[0].desc
    assert d is not None and d.mode == "decomposed"
    flags = 1 if convention_for_triton(triton.__version__) == "triton-3.5" else 2
    assert d.slots == ("*fp16", "i64", "i64", "i64", "i64") + ("i1",) * flags + ("i32", "i32", "i64", "i64")


def test_persistent_matmul_and_attention_build_for_cuda90():
    """The GPU proof's kernels (three and four descriptors) build on CPU with every descriptor recorded."""
    mm = _compile(
        "cuda:90",
        "desc_matmul_persistent",
        f"{DESC}, {DESC}, {DESC}, i32, i32, i32",
        {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64, "NUM_PROGRAMS": 4},
    )
    assert [p.kind for p in mm.variant.abi.params][:4] == ["tensordesc"] * 3 + ["scalar"]
    att = _compile(
        "cuda:90",
        "desc_attention_fwd",
        f"{DESC}, {DESC}, {DESC}, {DESC}, i32, fp32",
        {"HEAD_DIM": 64, "BLOCK_M": 64, "BLOCK_N": 64},
    )
    assert sum(p.kind == "tensordesc" for p in att.variant.abi.params) == 4


def test_unknown_triton_release_is_refused_at_build_time():
    from karchive.errors import UnsupportedKernelError
    from karchive.producer.compile.tensordesc_abi import tensordesc_records

    meta = {"triton_version": "3.10.0", "target": {"backend": "cuda"}, "tensordesc_meta": []}
    with pytest.raises(UnsupportedKernelError, match="Triton 3.10.0") as err:
        tensordesc_records("k", ["d"], {"d": DESC}, meta)
    assert err.value.kernel == "k"
    # 3.7 is read (its launcher passes descriptors as 3.8's does) and records triton-3.8, decomposed and TMA
    meta = {"triton_version": "3.7.1", "target": {"backend": "cuda"}, "tensordesc_meta": []}
    assert tensordesc_records("k", ["d"], {"d": DESC}, meta)["d"].slots == (
        "*fp16",
        "i64",
        "i64",
        "i64",
        "i64",
        "i1",
        "i1",
        "i32",
        "i32",
        "i64",
        "i64",
    )
    meta["tensordesc_meta"] = [
        {"swizzle": 3, "elem_size": 2, "elem_type": 6, "block_size": [64, 64], "fp4_padded": False}
    ]
    rec = tensordesc_records("k", ["d"], {"d": DESC}, meta)["d"]
    assert (rec.convention, rec.mode, rec.im2col) == ("triton-3.8", "tma", False)
    meta = {"triton_version": "3.9.0", "target": {"backend": "hip"}, "tensordesc_meta": []}
    with pytest.raises(UnsupportedKernelError, match="CUDA only"):
        tensordesc_records("k", ["d"], {"d": DESC}, meta)


def test_captured_descriptor_kernel_equals_the_aot_build(triton_cache_dir, fake_gpu_driver, tmp_path):
    """A JIT call with Triton's own TensorDescriptor objects is captured (no refusal, no warning) with the
    same key and launch ABI as the ahead-of-time build of the same specialisation; the archive verifies."""
    import tma_kernels
    import triton.language as tl
    from capture_fakes import MockPtr, fresh
    from triton.tools.tensor_descriptor import TensorDescriptor

    import karchive
    from karchive.format.manifest import Manifest
    from karchive.format.open import open_location

    fresh(tma_kernels.desc_copy)
    with karchive.capture("cap", version="1.0") as cap:
        a = TensorDescriptor(MockPtr(tl.float16), [256, 128], [128, 1], [64, 64])
        b = TensorDescriptor(MockPtr(tl.float16), [256, 128], [128, 1], [64, 64])
        tma_kernels.desc_copy[(4, 2)](a, b, BLOCK_M=64, BLOCK_N=64)
    assert cap.warnings == [] and [e.how for e in cap.events] == ["compiled"]
    (captured,) = cap.variants.values()
    aot = _compile("cuda:90")
    for field in ("key", "params", "abi", "options", "target"):
        assert captured.variant.to_json()[field] == aot.variant.to_json()[field], field
    out = tmp_path / "cap.karc"
    cap.save(out)
    reader = open_location(out)
    assert reader.verify() == []
    (v,) = Manifest.from_json(reader.manifest).variants
    assert v.abi.params[0].desc == aot.variant.abi.params[0].desc


@pytest.mark.parametrize("minor,convention,flags", [("3.6", "triton-3.5", 1), ("3.7", "triton-3.8", 2)])
def test_release_venvs_record_their_own_convention(minor, convention, flags, tmp_path):
    """Where tools/tritons.sh made a Triton 3.6 (3.7) venv, its interpreter builds the copy kernel with this
    checkout's karchive and records the ``triton-3.5`` (``triton-3.8``) convention, which the producer checks
    there against that release's own PTX entry, parameter by parameter, for cuda:90 (TMA) and cuda:80
    (decomposed: one i1 flag, or nan and round_f32_to_tf32)."""
    venv = pathlib.Path(os.environ.get("KARCHIVE_TRITON_VENVS", ROOT / ".venv-triton")) / minor
    python = venv / "bin" / "python"
    if not python.exists():
        pytest.skip(f"no Triton {minor} venv: bash tools/tritons.sh {minor}")
    out = tmp_path / f"t{minor}.karc"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRITON_", "PYTHON"))}
    env["TRITON_CACHE_DIR"] = str(tmp_path / "cache")
    # ``-m karchive`` from the checkout root: this karchive, also with a venv made for another checkout
    proc = subprocess.run(
        [
            str(python),
            "-m",
            "karchive",
            "compile",
            str(KERNELS),
            "-n",
            "desc_copy",
            "-s",
            f"{DESC}, {DESC}, 64, 64",
            "-t",
            "cuda:90",
            "-t",
            "cuda:80",
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    from karchive.format.manifest import Manifest
    from karchive.format.open import open_location

    m = Manifest.from_json(open_location(out).manifest)
    by_arch = {v.target.arch: v.abi.params[0].desc for v in m.variants}
    assert m.produced_by["triton"].startswith(minor)
    assert by_arch["90"] is not None and by_arch["90"].convention == convention and by_arch["90"].mode == "tma"
    assert by_arch["80"] is not None and by_arch["80"].convention == convention
    assert by_arch["80"].mode == "decomposed" and by_arch["80"].slots.count("i1") == flags


def _has_gluon() -> bool:
    try:
        import triton.experimental.gluon  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.skipif(not _has_gluon(), reason="the installed Triton has no triton.experimental.gluon")
def test_gluon_kernels_build_ahead_of_time_and_are_captured(triton_cache_dir, fake_gpu_driver, tmp_path):
    """A Gluon kernel builds for cuda:80/90/100 (through GluonASTSource, as Gluon's JIT compiles it) and a
    JIT call of it is captured with the same key and ABI as the ahead-of-time build."""
    import gluon_kernels
    from capture_fakes import MockPtr, fresh

    import karchive
    from karchive.producer.compile.aot import VariantRequest, compile_variant

    sig = "*fp32:16, *fp32:16, i32, fp32"
    built = {}
    for t in ("80", "90", "100"):
        cv = compile_variant(
            VariantRequest(
                f"{DATA / 'gluon_kernels.py'}:gluon_scale", sig, f"cuda:{t}", {"BLOCK": 1024}, {"num_warps": 4}
            )
        )
        assert cubin_sm(cv.files["binary"]) == int(t) and cv.variant.abi.version == 1
        built[t] = cv
    import triton.language as tl

    fresh(gluon_kernels.gluon_scale)
    with karchive.capture("gl", version="1.0") as cap:
        gluon_kernels.gluon_scale[(4,)](MockPtr(tl.float32), MockPtr(tl.float32), 4001, 2.0, BLOCK=1024, num_warps=4)
    assert cap.warnings == []
    (captured,) = cap.variants.values()
    for field in ("key", "params", "abi", "options", "target"):
        assert captured.variant.to_json()[field] == built["90"].variant.to_json()[field], field


def test_autotuned_descriptor_configs_build_from_named_blocks_with_the_jit_keys(triton_cache_dir, fake_gpu_driver):
    """``tensordesc<fp16[BLOCK_M, BLOCK_K]>`` in a build spec binds each config's block (what the autotune
    pre_hook sets for the JIT): every config builds with the key and ABI the JIT capture gives it."""
    import tma_kernels
    import triton.language as tl
    from capture_fakes import MockPtr, fresh
    from triton.tools.tensor_descriptor import TensorDescriptor

    import karchive

    fresh(tma_kernels.desc_matmul_tuned)
    fake_gpu_driver._timings = iter([2.0, 1.0])
    with karchive.capture("tuned", version="1.0") as cap:
        ds = [TensorDescriptor(MockPtr(tl.float16), [256, 128], [128, 1], [1, 1]) for _ in range(2)]
        c = TensorDescriptor(MockPtr(tl.float16), [256, 256], [256, 1], [1, 1])
        tma_kernels.desc_matmul_tuned[lambda m: (4,)](ds[0], ds[1], c, 256, 256, 128)
    captured = {v.variant.constexprs["BLOCK_M"]: v.variant for v in cap.variants.values()}
    assert set(captured) == {64, 128}
    sig = (
        "tensordesc<fp16[BLOCK_M, BLOCK_K]>, tensordesc<fp16[BLOCK_N, BLOCK_K]>, "
        "tensordesc<fp16[BLOCK_M, BLOCK_N]>, i32:16, i32:16, i32:16"
    )  # 256, 256, 128: divisible by 16
    for bm, warps in ((64, 4), (128, 8)):
        from karchive.producer.compile.aot import VariantRequest, compile_variant

        aot = compile_variant(
            VariantRequest(
                f"{KERNELS}:desc_matmul_tuned",
                sig,
                "cuda:90",
                {"BLOCK_M": bm, "BLOCK_N": 64, "BLOCK_K": 64},
                {"num_warps": warps},
            )
        )
        assert aot.variant.params[0].type == f"tensordesc<fp16[{bm}, 64]>"
        for field in ("key", "params", "abi"):
            assert aot.variant.to_json()[field] == captured[bm].to_json()[field], (bm, field)
    from karchive.errors import UnsupportedKernelError
    from karchive.producer.compile.tensordesc_abi import bind_descriptor_blocks

    with pytest.raises(UnsupportedKernelError, match="'BLOCK_Q', which is not an int constexpr"):
        bind_descriptor_blocks({"a": "tensordesc<fp16[BLOCK_Q, 64]>"}, {"BLOCK_M": 64})


def test_the_gpu_proof_archive_builds_on_cpu(tmp_path):
    """tests/gpu/build_tensordesc.py (what the lead runs before carrying .gpu/ to the H100) builds every
    kernel of tests/gpu/tensordesc_build.toml for cuda:90 and cuda:100."""
    out = tmp_path / "gpu"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "gpu" / "build_tensordesc.py"), str(out)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    from karchive.format.manifest import Manifest
    from karchive.format.open import open_location

    m = Manifest.from_json(open_location(out / "tensordesc.karc").manifest)
    kinds = {(v.kernel.split(":")[-1], v.target.arch) for v in m.variants}
    for k in (
        "desc_copy",
        "desc_add",
        "desc_matmul_persistent",
        "desc_attention_fwd",
        "device_desc_copy",
        "desc_matmul_tuned",
    ):
        assert (k, "90") in kinds and (k, "100") in kinds
    assert m.autotune and m.autotune[0]["kernel"].endswith("desc_matmul_tuned")
    if _has_gluon() and hasattr(
        __import__("triton.experimental.gluon.language.nvidia.hopper", fromlist=["tma"]).tma, "async_load_im2col"
    ):
        (v,) = Manifest.from_json(open_location(out / "im2col.karc").manifest).variants
        assert v.kernel.endswith("im2col_gather") and v.abi.params[0].desc is not None
        assert v.abi.params[0].desc.im2col and v.abi.binary_arch == "sm_90a"
    else:
        assert not (out / "im2col.karc").exists() and "skipped im2col.karc" in proc.stdout


@pytest.mark.parametrize("arch", ["90", "100"])
def test_fp8_pointers_and_an_fp8_descriptor_build_and_are_recorded(arch):
    """``*fp8e4nv``/``*fp8e5`` pointers and a ``tensordesc<fp8e4nv[...]>`` (1-byte elements) build; the
    descriptor record carries the element size the map is encoded with."""
    if arch != "90" and not _installed_ptxas_has(arch):
        pytest.skip(f"the installed Triton's ptxas does not offer sm_{arch}")
    cv = _compile(
        f"cuda:{arch}", "fp8_scale", "*fp8e4nv:16, *fp8e5:16, tensordesc<fp8e4nv[128]>, i32, fp32", {"BLOCK": 128}
    )
    params = cv.variant.abi.params
    assert [p.type for p in params[:2]] == ["*fp8e4nv", "*fp8e5"] and params[2].kind == "tensordesc"
    d = params[2].desc
    assert d is not None and d.dtype == "fp8e4nv" and d.elem_size == 1 and d.rank == 1 and d.block_shape == (128,)


def test_gpu_proof_build_skips_release_venvs_without_a_known_convention(tmp_path, monkeypatch, capsys):
    """tests/gpu/build_tensordesc.py builds with every release venv whose Triton has a descriptor convention and
    skips, with a printed note, one whose Triton has none (karchive's producer would refuse its descriptor
    kernels) or that holds no single Triton, instead of failing the whole GPU proof build."""
    import importlib.util
    import json

    spec = importlib.util.spec_from_file_location("build_tensordesc", ROOT / "tests" / "gpu" / "build_tensordesc.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    base = tmp_path / "venvs"
    for name, dists in {
        "3.6": ["3.6.0"],
        "3.7": ["3.7.1"],
        "3.10": ["3.10.0"],
        "odd": [],
        "two": ["3.8.0", "3.9.0"],
    }.items():
        (base / name / "bin").mkdir(parents=True)
        (base / name / "bin" / "python").write_text("")
        for d in dists:
            (base / name / "lib" / "python3.11" / "site-packages" / f"triton-{d}.dist-info").mkdir(parents=True)
    (base / "no-python").mkdir()
    use, notes = mod.release_venvs(base)
    assert [v.name for v in use] == ["3.6", "3.7"]
    assert len(notes) == 3 and "Triton 3.10.0" in notes[0] and "triton-3.8: Triton 3.7, 3.8, 3.9" in notes[0]
    assert all("no single triton" in n for n in notes[1:])

    built: list[str] = []

    def fake_build(python: str, out: pathlib.Path, spec: pathlib.Path = mod.SPEC) -> str:  # the real one compiles
        built.append(python if spec == mod.SPEC else f"{python} {spec.name}")
        out.write_bytes(b"karc")
        return (
            "3.9.0"
            if python == sys.executable
            else {"3.6": "3.6.0", "3.7": "3.7.1"}[pathlib.Path(python).parent.parent.name]
        )

    monkeypatch.setattr(mod, "_build", fake_build)
    monkeypatch.setattr(mod, "VENVS", base)
    assert mod.main([str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    assert "note: skipped" in printed and "Triton 3.10.0" in printed
    im2col = [f"{sys.executable} im2col_build.toml"] if mod.has_gluon_im2col() else []  # this Triton's only
    assert built == [
        sys.executable,
        str(base / "3.6" / "bin" / "python"),
        str(base / "3.7" / "bin" / "python"),
        *im2col,
    ]
    assert json.loads((tmp_path / "out" / "index.json").read_text()) == {
        "3.6.0": "tensordesc-triton-3.6.0.karc",
        "3.7.1": "tensordesc-triton-3.7.1.karc",
        "3.9.0": "tensordesc.karc",
    }
