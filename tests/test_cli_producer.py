"""The producer-side CLI: compile, build, inspect, verify, extract — output for people and for machines."""

import json
import os
import subprocess
import sys

import pytest
from support import EXAMPLES, ROOT, needs_triton

from karchive.cli.main import main
from karchive.format.constants import FORMAT_VERSION

pytestmark = needs_triton
KERNELS = str(EXAMPLES / "kernels.py")


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_compile_mirrors_triton_compile_py(tmp_path, capsys):
    out = tmp_path / "add.karc"
    code, stdout, _ = run(
        capsys,
        "compile",
        KERNELS,
        "-n",
        "add_kernel",
        "-s",
        "*fp32:16, *fp32:16, *fp32:16, i32, 1024",
        "-t",
        "cuda:90",
        "-t",
        "hip:gfx942",
        "-w",
        "4",
        "-ns",
        "3",
        "-o",
        str(out),
    )
    assert code == 0 and "built 2 of 2" in stdout
    code, stdout, _ = run(capsys, "inspect", str(out), "--json")
    info = json.loads(stdout)
    assert code == 0 and info["name"] == "add_kernel" and info["format_version"] == "{}.{}".format(*FORMAT_VERSION)
    assert {v["target"] for v in info["variants"]} == {"cuda:90", "hip:gfx942"}
    for v in info["variants"]:
        assert v["kernel"] == "kernels:add_kernel" and len(v["key"]) == 64
        assert v["num_warps"] == 4 and v["num_stages"] == 3 and v["shared"] == 0
        assert [p["name"] for p in v["abi"]["params"]] == [
            "x_ptr",
            "y_ptr",
            "out_ptr",
            "n_elements",
            "global_scratch",
            "profile_scratch",
        ]
        roles = {f["role"] for f in v["files"]}
        assert {"binary", "metadata", "ttir", "ttgir", "llir", "source"} <= roles
        assert all(len(f["sha256"]) == 64 and f["size"] > 0 for f in v["files"])


def test_inspect_table_filters_and_ir(examples_archive, capsys):
    code, stdout, _ = run(capsys, "inspect", str(examples_archive), "-k", "softmax_kernel", "-t", "cuda:80")
    assert code == 0 and "examples 0.1.0" in stdout and "launch ABI v1" in stdout
    rows = [line for line in stdout.splitlines() if line.startswith("kernels:softmax_kernel")]
    assert len(rows) == 2 and all("cuda:80" in r for r in rows)
    info = json.loads(run(capsys, "inspect", str(examples_archive), "--json", "-k", "add_kernel", "-t", "cuda:90")[1])
    key = info["variants"][0]["key"]
    code, ptx, _ = run(capsys, "inspect", str(examples_archive), "--key", key[:10], "--ir", "ptx")
    assert code == 0 and ".entry add_kernel" in ptx and ".target sm_90a" in ptx
    code, _, err = run(capsys, "inspect", str(examples_archive), "-k", "add_kernel", "--ir", "ptx")
    assert code == 2 and "exactly one variant" in err
    code, _, err = run(capsys, "inspect", str(examples_archive), "--key", key[:10], "--ir", "amdgcn")
    assert code == 2 and "no 'amdgcn' stage" in err


def test_verify_passes_then_names_the_damage(examples_archive, tmp_path, capsys):
    code, stdout, _ = run(capsys, "verify", str(examples_archive))
    assert code == 0 and stdout.startswith("OK")
    from karchive.format.reader import ArchiveReader

    reader = ArchiveReader.from_path(examples_archive)
    variant = reader.manifest["variants"][3]
    frame = reader.frames[reader.members[variant["files"]["binary"]["path"]].frame]
    data = bytearray(examples_archive.read_bytes())
    data[frame.offset + frame.length // 2] ^= 0xFF
    bad = tmp_path / "bad.karc"
    bad.write_bytes(bytes(data))
    code, stdout, _ = run(capsys, "verify", str(bad), "--json")
    result = json.loads(stdout)
    assert code == 1 and not result["ok"]
    assert any("frame" in p for p in result["problems"])


def test_extract_restores_paths_and_stays_inside(examples_archive, tmp_path, capsys):
    dest = tmp_path / "out"
    code, stdout, _ = run(capsys, "extract", str(examples_archive), "-C", str(dest), "--restore-paths", "/opt/site")
    assert code == 0
    metas = list(dest.glob("variants/*/kernel.json"))
    assert len(metas) == 42
    text = metas[0].read_text()
    assert "@KARCHIVE_ROOT@" not in text and "/opt/site/triton/backends" in text
    code, _, err = run(capsys, "extract", str(examples_archive), "-C", str(dest))
    assert code == 2 and "already exists" in err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["-t", "cuda:abc"], "bad CUDA arch"),
        (["-t", "vulkan:1"], "unknown backend"),
        (["-s", "*fp32:16, *fp32:16, *fp32:16, i32, 1024, 7"], "signature has 6 entries"),
        (["-s", "*fp32:16, *fp32:16, *fp3:16, i32, 1024"], "parameter 2 (out_ptr): unknown type '*fp3'"),
        (["-n", "nope_kernel"], "'nope_kernel' not found"),
    ],
)
def test_compile_errors_are_clear(argv, message, tmp_path, capsys):
    base = {"-n": "add_kernel", "-s": "*fp32:16, *fp32:16, *fp32:16, i32, 1024", "-t": "cuda:90"}
    for flag, value in zip(argv[::2], argv[1::2]):
        base[flag] = value
    args = ["compile", KERNELS, "-o", str(tmp_path / "x.karc")]
    for flag, value in base.items():
        args += [flag, value]
    code, _, err = run(capsys, *args)
    assert code == 2 and message in err, err
    assert not (tmp_path / "x.karc").exists()


BROKEN = """
import triton
import triton.language as tl

@triton.jit
def broken_kernel(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs) + undefined_name)

@triton.jit
def fine_kernel(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs) * 2)
"""


def test_build_reports_failures_and_keep_going(tmp_path, capsys):
    (tmp_path / "k.py").write_text(BROKEN)
    (tmp_path / "spec.toml").write_text("""
[archive]
name = "mixed"
version = "1"
targets = ["cuda:80"]
[[kernel]]
source = "k.py:broken_kernel"
signature = "*fp32"
constexprs = { BLOCK = [128] }
[[kernel]]
source = "k.py:fine_kernel"
signature = "*fp32"
constexprs = { BLOCK = [128, 256] }
""")
    out = tmp_path / "mixed.karc"
    code, _, err = run(capsys, "build", str(tmp_path / "spec.toml"), "-o", str(out), "-j", "1", "--quiet")
    assert code == 2 and "1 of 3 variants failed" in err and "undefined_name" in err
    assert not out.exists()
    code, stdout, _ = run(
        capsys, "build", str(tmp_path / "spec.toml"), "-o", str(out), "-j", "1", "--keep-going", "--json"
    )
    summary = json.loads(stdout)
    assert code == 1 and summary["built"] == 2 and len(summary["failed"]) == 1
    assert "broken_kernel" in summary["failed"][0]["variant"] and out.exists()


def test_spec_file_errors(tmp_path, capsys):
    spec = tmp_path / "s.toml"
    spec.write_text(
        '[archive]\nname = "x"\nversion = "1"\ntargets = ["cuda:90"]\n[[kernel]]\nsource = "%s:add_kernel"\n'
        'signature = "*fp32, *fp32, *fp32, i32"\nconstexprs = { BLOCK = [64] }\nwaves_per_eu = 2\n' % KERNELS
    )
    code, _, err = run(capsys, "build", str(spec), "-o", str(tmp_path / "o.karc"))
    assert code == 2 and "waves_per_eu" in err and "do not apply to cuda" in err


def test_console_entry_point_runs(examples_archive):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, "-m", "karchive", "inspect", str(examples_archive)], env=env, capture_output=True, text=True
    )
    assert out.returncode == 0 and "matmul_kernel" in out.stdout


TMA = """
import triton
import triton.language as tl

@triton.jit
def tma_copy(in_desc, out_desc, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    out_desc.store([pid * BLOCK, 0], in_desc.load([pid * BLOCK, 0]))
"""


def test_kernels_with_tensor_descriptors_build_with_their_expansion_recorded(tmp_path, capsys):
    """A host tensor-descriptor kernel builds for cuda:90 (TMA) and cuda:80 (decomposed); each variant's ABI
    records per descriptor how the installed Triton expands it, checked against the PTX entry."""
    import triton

    from karchive.format.manifest import Manifest
    from karchive.format.reader import ArchiveReader
    from karchive.format.tensordesc import convention_for_triton

    (tmp_path / "tma.py").write_text(TMA)
    out = tmp_path / "tma.karc"
    code, _, err = run(
        capsys,
        "compile",
        str(tmp_path / "tma.py"),
        "-n",
        "tma_copy",
        "-s",
        "tensordesc<fp16[64, 64]>, tensordesc<fp16[64, 64]>, 64",
        "-t",
        "cuda:90",
        "-t",
        "cuda:80",
        "-o",
        str(out),
    )
    assert code == 0, err
    convention = convention_for_triton(triton.__version__)
    manifest = Manifest.from_json(ArchiveReader.from_path(out).manifest)
    by_arch = {v.target.arch: v for v in manifest.variants}
    assert manifest.abi_version == 2
    tma = by_arch["90"].abi
    assert tma.version == 2 and [p.kind for p in tma.params[:2]] == ["tensordesc", "tensordesc"]
    d = tma.params[0].desc
    assert d is not None and d.convention == convention and d.mode == "tma" and d.block_shape == (64, 64)
    assert d.slots == ("tensormap", "i32", "i32", "i64", "i64") and d.elem_size == 2 and d.swizzle == 3
    dec = by_arch["80"].abi.params[0].desc
    assert dec is not None and dec.mode == "decomposed" and dec.slots[0] == "*fp16"
    assert dec.slots.count("i1") == (1 if convention == "triton-3.5" else 2)
