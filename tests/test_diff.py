"""`karchive diff A B` on real archives: kernels written here, compiled by Triton for cuda:90 in child
processes with `karchive build`, as a user would (no GPU needed)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from registry_support import run_cli
from support import needs_triton

from karchive.audit.diff import diff_archives
from karchive.format.names import short_name
from karchive.format.reader import ArchiveReader
from karchive.format.writer import ArchiveWriter

pytestmark = needs_triton

KERNELS_V1 = """\
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * alpha, mask=mask)
"""
# The same module with add_kernel's `+` turned into `-` (same line numbers: scale_kernel's own
# source key stays the same, only the module file around it changes).
KERNELS_V2 = KERNELS_V1.replace("mask=mask) + tl.load(y_ptr", "mask=mask) - tl.load(y_ptr")

EXTRA = """\
import triton
import triton.language as tl


@triton.jit
def mul_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * tl.load(y_ptr + offs, mask=mask), mask=mask)
"""

SPEC = """\
[archive]
name = "kernels"
version = "{version}"
targets = ["cuda:90"]

[[kernel]]
source = "kernels.py:add_kernel"
signature = "*fp32:16, *fp32:16, *fp32:16, i32"
constexprs = {{ BLOCK = [{add_block}] }}

[[kernel]]
source = "kernels.py:scale_kernel"
signature = "*fp32:16, *fp32:16, i32, fp32"
constexprs = {{ BLOCK = [1024] }}
num_warps = [{scale_warps}]
{extra}"""

EXTRA_SPEC = """
[[kernel]]
source = "extra.py:mul_kernel"
signature = "*fp32:16, *fp32:16, *fp32:16, i32"
constexprs = { BLOCK = [1024] }
"""


def _build(
    root: Path,
    name: str,
    *,
    source: str = KERNELS_V1,
    version: str = "1.4.0",
    add_block: int = 1024,
    scale_warps: str = "4, 8",
    extra: bool = False,
    env: dict[str, str] | None = None,
    flags: tuple[str, ...] = (),
) -> Path:
    """Write the kernel module and a spec, then `karchive build` them in a child process."""
    (root / "kernels.py").write_text(source)
    (root / "extra.py").write_text(EXTRA)
    spec = root / f"{name}.toml"
    spec.write_text(
        SPEC.format(version=version, add_block=add_block, scale_warps=scale_warps, extra=EXTRA_SPEC if extra else "")
    )
    out = root / f"{name}.karc"
    done = run_cli(
        "build",
        str(spec),
        "-o",
        str(out),
        "-j",
        "1",
        *flags,
        env={"TRITON_DEFAULT_FP_FUSION": "1", **(env or {})},
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def _other_ptxas() -> str | None:
    """Triton ships two ptxas builds; the one it does not use for sm_90 gives a real second toolchain."""
    import triton

    bin_dir = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    used, other = bin_dir / "ptxas-blackwell", bin_dir / "ptxas"
    if not (used.is_file() and other.is_file()):
        return None
    versions = [
        subprocess.run([str(p), "--version"], capture_output=True, text=True, check=False).stdout for p in (used, other)
    ]
    return str(other) if versions[0] != versions[1] else None


@pytest.fixture(scope="module")
def archives(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("diff")
    out = {
        "base": _build(root, "base"),
        "same": _build(root, "same"),  # the same inputs again: a reproducible build
        "edited": _build(root, "edited", source=KERNELS_V2, version="1.5.0"),
        # add_kernel's BLOCK 1024 -> 512 (a new constexpr set), scale_kernel num_warps {4, 8} -> {4, 2},
        # and a new kernel from another module.
        "reshaped": _build(root, "reshaped", version="1.6.0", add_block=512, scale_warps="4, 2", extra=True),
        "slim": _build(root, "slim", flags=("--no-ir",)),  # binaries and metadata only
    }
    other = _other_ptxas()
    if other:
        out["toolchain"] = _build(root, "toolchain", env={"TRITON_PTXAS_BLACKWELL_PATH": other})
    return out


def diff(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return run_cli("diff", *map(str, args), env=env)


def diff_json(*args: str) -> tuple[int, dict]:
    done = diff(*args, "--json")
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout)


def _by(doc: dict, kernel: str, status: str | None = None) -> list[dict]:
    return [
        v for v in doc["variants"] if short_name(v["kernel"]) == kernel and (status is None or v["status"] == status)
    ]


def _fields(v: dict) -> list[str]:
    return [c["field"] for c in v["changes"]]


# -- identical ------------------------------------------------------------------------------------
def test_a_reproducible_rebuild_is_identical(archives: dict[str, Path]) -> None:
    done = diff(archives["base"], archives["same"])
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "identical: 3 variants in both, every member digest checked"
    code, doc = diff_json(archives["base"], archives["same"])
    assert code == 0 and doc["identical"] and doc["members_checked"]
    assert doc["summary"]["variants"] == {"added": 0, "removed": 0, "changed": 0, "unchanged": 3}
    assert all(v["status"] == "unchanged" and v["matched_by"] == "key" for v in doc["variants"])
    # registers and stack come from the cubins themselves
    assert all(
        v["a"]["resources"]["registers"] > 0 and v["a"]["resources"] == v["b"]["resources"] for v in doc["variants"]
    )


# -- changed source --------------------------------------------------------------------------------
def test_changed_source_is_a_changed_variant_with_source_digest_and_unified_diff(archives: dict[str, Path]) -> None:
    done = diff(archives["base"], archives["edited"], "--source")
    assert done.returncode == 1, done.stderr
    out = done.stdout
    assert "A: kernels 1.4.0" in out and "B: kernels 1.5.0" in out
    assert "-    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr" in out
    assert "+    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) - tl.load(y_ptr" in out
    # one module holds both kernels: its diff is shown once, naming every variant it concerns
    assert out.count("\n+++ ") == 1 and "source of kernels:add_kernel cuda:90 BLOCK=1024; kernels:scale_kernel" in out
    # add_kernel was edited; scale_kernel, above it in the same module, has its key and binary (issue 35.6)
    assert out.strip().splitlines()[-1] == (
        "kernels: 1 changed, 1 with only the module text around them changed; "
        "variants: 0 added, 0 removed, 3 changed (2 only in the module text), "
        "0 unchanged"
    )

    code, doc = diff_json(archives["base"], archives["edited"])
    assert code == 1 and not doc["identical"]
    [add] = _by(doc, "add_kernel")
    assert add["status"] == "changed" and add["matched_by"] == "options"  # new key, same options
    fields = _fields(add)
    assert {"key", "source", "source_key", "binary", "ir.ptx"} <= set(fields)
    source = next(c for c in add["changes"] if c["field"] == "source")
    assert source["a"]["sha256"] != source["b"]["sha256"] and len(source["a"]["sha256"]) == 64
    # scale_kernel's own code did not change: same key, same binary; only the module around it did
    for v in _by(doc, "scale_kernel"):
        # (the AOT build record lists the module sources a rebuild imports: it changed with them)
        assert v["matched_by"] == "key" and set(_fields(v)) == {"source", "provenance.build.sources"}


def test_ir_ptx_shows_the_instruction_that_changed(archives: dict[str, Path]) -> None:
    done = diff(archives["base"], archives["edited"], "--ir", "ptx", "-k", "add_kernel", "-U", "0")
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    assert "ptx of kernels:add_kernel cuda:90 BLOCK=1024:" in lines
    assert any(line.startswith("-\tadd.f32") for line in lines) and any(line.startswith("+\tsub.f32") for line in lines)
    code, doc = diff_json(archives["base"], archives["edited"], "--ir", "ptx", "-k", "add_kernel")
    [text] = doc["texts"]
    assert text["what"] == "ptx" and text["variants"] == ["kernels:add_kernel cuda:90 BLOCK=1024"]
    assert text["a_path"].endswith("/kernel.ptx") and "+\tsub.f32" in text["diff"] and text["note"] is None
    # variants whose PTX did not change get no diff
    code, doc = diff_json(archives["base"], archives["edited"], "--ir", "ptx", "-k", "scale_kernel")
    assert code == 1 and doc["texts"] == []


def test_ir_metadata_is_pretty_printed_before_diffing(archives: dict[str, Path]) -> None:
    done = diff(archives["base"], archives["edited"], "--ir", "metadata", "-k", "add_kernel", "-U", "0")
    assert done.returncode == 1
    assert any(line.startswith('- "hash": "') for line in done.stdout.splitlines())


def test_a_slim_archive_differs_by_its_missing_ir(archives: dict[str, Path]) -> None:
    code, doc = diff_json(archives["base"], archives["slim"], "--ir", "ptx", "-k", "add_kernel")
    assert code == 1
    [add] = doc["variants"]
    assert add["matched_by"] == "key" and _fields(add) == ["ir.llir", "ir.ptx", "ir.ttgir", "ir.ttir"]
    assert all(c["b"] is None and c["a"]["size"] > 0 for c in add["changes"])
    [text] = doc["texts"]
    assert text["note"] == f"no ptx stage stored in {archives['slim']}" and text["diff"] == ""
    human = diff(archives["base"], archives["slim"], "--ir", "ptx", "-k", "add_kernel").stdout
    assert f"    (no ptx stage stored in {archives['slim']})" in human


# -- added / removed / options / constexprs -------------------------------------------------------
def test_added_kernel_new_constexpr_and_changed_num_warps(archives: dict[str, Path]) -> None:
    code, doc = diff_json(archives["base"], archives["reshaped"])
    assert code == 1
    assert doc["summary"]["kernels"]["added"] == ["extra:mul_kernel"] and doc["summary"]["kernels"]["removed"] == []
    assert [v["status"] for v in _by(doc, "mul_kernel")] == ["added"]
    # a changed constexpr set: BLOCK=1024 removed, BLOCK=512 added (different slots never pair)
    add = {v["status"]: v["specialisation"] for v in _by(doc, "add_kernel")}
    assert add == {"removed": "BLOCK=1024", "added": "BLOCK=512"}
    # scale_kernel: num_warps 4 kept, 8 became 2: the one left on each side pairs as changed
    scale = _by(doc, "scale_kernel")
    assert [(v["status"], v["matched_by"]) for v in scale] == [("unchanged", "key"), ("changed", "slot")]
    changed = scale[1]
    assert changed["a"]["num_warps"] == 8 and changed["b"]["num_warps"] == 2
    nw = next(c for c in changed["changes"] if c["field"] == "num_warps")
    assert (nw["a"], nw["b"]) == (8, 2) and "binary" in _fields(changed)
    assert doc["summary"]["variants"] == {"added": 2, "removed": 1, "changed": 1, "unchanged": 1}

    text = diff(archives["base"], archives["reshaped"]).stdout
    rows = [line.split() for line in text.splitlines() if line.split()[:1] in (["added"], ["removed"], ["changed"])]
    assert len(rows) == 4  # unchanged variants are counted, not listed
    assert ["added", "extra:mul_kernel", "cuda:90", "BLOCK=1024", "4/3"] in [r[:5] for r in rows]
    assert ["added", "kernels:add_kernel", "cuda:90", "BLOCK=512", "4/3"] in [r[:5] for r in rows]
    assert ["removed", "kernels:add_kernel", "cuda:90", "BLOCK=1024", "4/3"] in [r[:5] for r in rows]
    assert ["changed", "kernels:scale_kernel", "cuda:90", "BLOCK=1024", "8/3", "->", "2/3"] in [r[:7] for r in rows]
    assert "~ kernels:scale_kernel cuda:90 BLOCK=1024, warps/stages 8/3 -> 2/3  (paired by slot)" in text
    assert "    num_warps  " in text and "8 -> 2" in text

    code, back = diff_json(archives["reshaped"], archives["base"])
    assert code == 1 and back["summary"]["kernels"]["removed"] == ["extra:mul_kernel"]


def test_filters_and_a_filter_that_matches_nothing(archives: dict[str, Path]) -> None:
    code, doc = diff_json(archives["base"], archives["reshaped"], "-k", "scale_kernel", "-t", "cuda:90")
    assert code == 1 and {v["kernel"] for v in doc["variants"]} == {"kernels:scale_kernel"}
    assert diff(archives["base"], archives["reshaped"], "-k", "add_kernel", "-k", "mul_kernel").returncode == 1
    code, doc = diff_json(archives["base"], archives["edited"], "-k", "nosuch", "-k", "scale_kernel", "-t", "cuda:90")
    assert code == 1 and len(doc["variants"]) == 2
    none = diff(archives["base"], archives["reshaped"], "-k", "nosuch")
    assert none.returncode == 2 and "no variant in either archive matches" in none.stderr
    assert "kernels:add_kernel (cuda:90)" in none.stderr and "Traceback" not in none.stderr
    assert diff(archives["base"], archives["reshaped"], "-t", "cuda:80").returncode == 2


# -- toolchain -------------------------------------------------------------------------------------
def test_a_different_ptxas_is_reported_per_archive_and_per_variant(archives: dict[str, Path]) -> None:
    if "toolchain" not in archives:
        pytest.skip("this Triton install ships one ptxas only")
    code, doc = diff_json(archives["base"], archives["toolchain"])
    assert code == 1
    [ptxas] = [c for c in doc["archive_changes"] if c["field"] == "produced_by.ptxas"]
    assert ptxas["a"] != ptxas["b"]
    for v in doc["variants"]:
        assert v["status"] == "changed" and v["matched_by"] == "key"  # same inputs, other assembler
        backend = next(c for c in v["changes"] if c["field"] == "backend")
        assert "ptxas" in backend["a"] and backend["a"] != backend["b"]
    text = diff(archives["base"], archives["toolchain"]).stdout
    assert "archive:" in text and "produced_by.ptxas" in text
    assert any(line.strip().startswith("backend") and "ptxas V" in line for line in text.splitlines())
    assert "archive: produced_by.ptxas" in text.splitlines()[-1]


# -- errors ----------------------------------------------------------------------------------------
def _damage_binary(src: Path, dst: Path) -> None:
    reader = ArchiveReader.from_path(src)
    variant = reader.manifest["variants"][0]
    frame = reader.frames[reader.members[variant["files"]["binary"]["path"]].frame]
    data = bytearray(src.read_bytes())
    data[frame.offset + frame.length // 2] ^= 0xFF
    dst.write_bytes(bytes(data))


def test_damaged_missing_and_foreign_inputs_exit_2_with_a_karchive_error(
    archives: dict[str, Path], tmp_path: Path
) -> None:
    bad = tmp_path / "bad.karc"
    _damage_binary(archives["same"], bad)
    done = diff(archives["base"], bad)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("karchive: error: ") and "Traceback" not in done.stderr
    # --manifest-only trusts the (intact) manifest: it is documented to miss damaged members
    assert diff(archives["base"], bad, "--manifest-only").returncode == 0

    truncated = tmp_path / "truncated.karc"
    truncated.write_bytes(archives["base"].read_bytes()[:-100])
    foreign = tmp_path / "notes.txt"
    foreign.write_text("not an archive\n" * 20)
    for other in (truncated, foreign, tmp_path / "missing.karc", tmp_path):
        done = diff(archives["base"], other)
        assert done.returncode == 2, (other, done.stdout, done.stderr)
        assert done.stderr.startswith("karchive: error: ") and "Traceback" not in done.stderr, done.stderr
    assert "missing.karc" in diff(tmp_path / "missing.karc", archives["base"]).stderr
    bad_stage = diff(archives["base"], archives["same"], "--ir", "sass")
    assert bad_stage.returncode == 2 and "invalid choice" in bad_stage.stderr
    assert diff(archives["base"], archives["same"], "-U", "-1").returncode == 2


def test_hostile_names_never_reach_the_terminal(archives: dict[str, Path], tmp_path: Path) -> None:
    """A kernel named with escape sequences is refused by the manifest model (issue 20: kernel names
    follow a grammar), and the refusal shows the name escaped."""
    reader = ArchiveReader.from_path(archives["base"])
    manifest = json.loads(reader.manifest_bytes)
    manifest["variants"][0]["kernel"] = "add\x1b[2J\x1b]0;pwned\x07"
    writer = ArchiveWriter(level=3, dictionary="none")
    for name in sorted(reader.members):
        if not name.startswith("karchive/"):
            writer.add_group([(name, reader.read(name))])
    hostile = tmp_path / "hostile.karc"
    writer.write(hostile, manifest)
    done = diff(archives["base"], hostile)
    out = done.stdout + done.stderr
    assert done.returncode == 2 and "\x1b" not in out and "\x07" not in out
    assert "is not a kernel name" in out and "add\\x1b[2J" in out


# -- the Python API, without the CLI --------------------------------------------------------------
def test_diff_archives_is_usable_from_python(archives: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = ArchiveReader.from_path(archives["base"]), ArchiveReader.from_path(archives["edited"])
    result = diff_archives(a, b, source=True, ir="ttir")
    assert not result.identical and result.count("changed") == 3
    assert [t.what for t in result.texts] == ["source", "ttir"]
    assert result.to_json()["summary"]["kernels"]["changed"] == ["kernels:add_kernel"]
    assert result.to_json()["summary"]["kernels"]["module_only"] == ["kernels:scale_kernel"]
    assert diff_archives(a, a).identical
    # texts too large for difflib get a note instead of a diff
    monkeypatch.setattr("karchive.audit.diff.MAX_TEXT_BYTES", 100)
    big = diff_archives(a, b, source=True, ir="ptx", kernels=["add_kernel"])
    assert [t.lines for t in big.texts] == [[], []] and all("too large for a text diff" in t.note for t in big.texts)


# -- NAME@VERSION through a registry ---------------------------------------------------------------
def test_name_at_version_through_a_local_registry(archives: dict[str, Path], tmp_path: Path) -> None:
    registry, cache = tmp_path / "registry", tmp_path / "cache"
    for name in ("base", "edited"):
        done = run_cli("publish", str(archives[name]), "--registry", str(registry), "--create-registry")
        assert done.returncode == 0, done.stderr
    args = ["--registry", str(registry), "--cache-dir", str(cache)]
    done = diff("kernels@1.4.0", "kernels@1.5.0", *args)
    assert done.returncode == 1, done.stderr
    assert "A: kernels 1.4.0  (kernels@1.4.0, 3 variants)" in done.stdout
    assert any(line.split()[:2] == ["changed", "kernels:add_kernel"] for line in done.stdout.splitlines())
    assert diff("kernels@1.4.0", archives["base"], *args).returncode == 0
    # the registry also comes from the environment, as for every other command
    env = {"KARCHIVE_REGISTRY": str(registry), "KARCHIVE_CACHE_DIR": str(cache)}
    assert diff("kernels@1.5.0", "kernels@1.5.0", env=env).returncode == 0
    missing = diff("kernels@9.9.9", "kernels@1.4.0", *args)
    assert missing.returncode == 2 and "1.5.0" in missing.stderr and "Traceback" not in missing.stderr
    assert (
        diff(
            "kernels@1.4.0", "kernels@1.5.0", "--registry", str(tmp_path / "nowhere"), "--cache-dir", str(cache)
        ).returncode
        == 2
    )


def test_help_documents_matching_and_exit_status() -> None:
    done = run_cli("diff", "--help")
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    assert "paired by kernel name, target and specialisation" in text
    assert "removed plus added" in text and "0 when the archives hold the same" in text
    assert "--registry" in text and "--cache-dir" in text and "--ir STAGE" in text


def test_cwd_independent_labels(archives: dict[str, Path]) -> None:
    """Refs are shown as the user typed them (relative paths stay relative)."""
    rel = os.path.relpath(archives["base"], Path(__file__).resolve().parent.parent)
    done = diff(rel, archives["same"])
    assert done.returncode == 0 and f"({rel}, 3 variants)" in done.stdout
