"""Byte-reproducible archives: the same spec and sources give the same bytes on any machine.

Two real checkouts at different paths, built by different users with different homes, locales,
umasks, -j, shells (codegen variables set or not) and Triton caches — one empty, one warmed by a
plain JIT-style compile of the same kernels from a third path — must give identical archives that
name no machine path, user or home anywhere, and keep line info under canonical source names.
"""

from __future__ import annotations

import getpass
import json
import os
import subprocess
import sys

import pytest
from repro_support import cache_entries, clean_env, jit_prewarm, karchive, make_checkout, manifest, members
from support import needs_triton

pytestmark = needs_triton


@pytest.fixture(scope="module")
def two_builds(tmp_path_factory):
    """Build A (-j 1, from inside its checkout, empty caches) and B (-j 4, elsewhere, JIT-warmed Triton cache)."""
    root = tmp_path_factory.mktemp("repro")
    spec_a = make_checkout(root / "alice-work" / "proj")
    spec_b = make_checkout(root / "build-farm" / "job-17" / "src" / "proj")
    third = root / "jit-user" / "notebooks"
    make_checkout(third)
    warm = root / "triton-cache-b"
    jit_prewarm(third, warm)
    warm_before = cache_entries(warm)
    assert warm_before, "the JIT-style prewarm compiled nothing"

    home_a, home_b = root / "home" / "kuser_a91", root / "home" / "kuser_b37"
    home_a.mkdir(parents=True)
    home_b.mkdir(parents=True)
    env_a = clean_env(
        HOME=str(home_a),
        USER="kuser_a91",
        LOGNAME="kuser_a91",
        LC_ALL="C",
        LANG="C",
        TRITON_CACHE_DIR=str(root / "triton-cache-a"),
        KARCHIVE_CACHE_DIR=str(root / "karchive-cache-a"),
        TRITON_DEFAULT_FP_FUSION="1",
        TRITON_F32_DEFAULT="ieee",
        TRITON_DISABLE_LINE_INFO="1",
    )
    env_b = clean_env(
        HOME=str(home_b),
        USER="kuser_b37",
        LOGNAME="kuser_b37",
        LC_ALL="C.UTF-8",
        LANG="de_DE.UTF-8",
        TRITON_CACHE_DIR=str(warm),
        KARCHIVE_CACHE_DIR=str(root / "karchive-cache-b"),
        TRITON_DEFAULT_FP_FUSION=None,
        PYTHONHASHSEED="12345",
    )
    out_a, out_b = root / "a.karc", root / "b.karc"
    # A runs where kernels.py sits in the working directory (what ptxas would stat); B from far away.
    run_a = karchive(["build", "build.toml", "-o", str(out_a), "-j", "1"], cwd=spec_a.parent, env=env_a, umask=0o022)
    run_b = karchive(["build", str(spec_b), "-o", str(out_b), "-j", "4"], cwd=root, env=env_b, umask=0o077)
    return {
        "root": root,
        "a": out_a,
        "b": out_b,
        "run_a": run_a,
        "run_b": run_b,
        "spec_b": spec_b,
        "warm": warm,
        "warm_before": warm_before,
        "env_b": env_b,
        "homes": [home_a, home_b],
        "checkouts": [spec_a.parent, spec_b.parent, third],
    }


def test_two_checkouts_two_machines_same_bytes(two_builds):
    a, b = two_builds["a"].read_bytes(), two_builds["b"].read_bytes()
    assert len(a) == len(b) and a == b, f"{len(a)} vs {len(b)} bytes"
    m = manifest(two_builds["a"])
    assert len(m["variants"]) == 4
    # The JIT-warmed Triton cache was never used or written: builds compile in karchive's own namespace.
    assert cache_entries(two_builds["warm"]) == two_builds["warm_before"]
    assert (two_builds["root"] / "karchive-cache-b" / "triton-build").is_dir()


def test_a_cache_warm_from_another_checkout_gives_the_same_bytes(two_builds, tmp_path):
    """B's sources built again, now with the karchive cache that checkout A warmed."""
    env = dict(two_builds["env_b"], KARCHIVE_CACHE_DIR=str(two_builds["root"] / "karchive-cache-a"))
    out = tmp_path / "c.karc"
    karchive(["build", str(two_builds["spec_b"]), "-o", str(out), "-j", "2", "--quiet"], cwd=tmp_path, env=env)
    assert out.read_bytes() == two_builds["a"].read_bytes()


def test_no_member_names_a_machine_path_user_or_home(two_builds):
    import triton

    root = two_builds["root"]
    needles = {
        str(root),
        os.path.realpath(root),
        "kuser_a91",
        "kuser_b37",
        os.path.expanduser("~"),
        os.path.dirname(os.path.dirname(triton.__file__)),
        sys.prefix,
        os.getcwd(),
        "site-packages",
    }
    needles |= {str(c) for c in two_builds["checkouts"]}
    user = getpass.getuser()
    needles |= {f"/{user}/", f"/home/{user}"}
    found = [(name, n) for name, data in members(two_builds["a"]).items() for n in needles if n and n.encode() in data]
    assert not found, found


def test_line_info_kept_under_canonical_names(two_builds, tmp_path):
    """PTX .file entries, TTIR locs and the cubin's line table name kernels.py / triton/language/standard.py."""
    m = manifest(two_builds["a"])
    files = members(two_builds["a"])
    softmax = next(
        v for v in m["variants"] if v["kernel"] == "kernels:softmax_kernel" and v["target"]["backend"] == "cuda"
    )
    ptx = files[softmax["files"]["ir"]["ptx"]["path"]].decode()
    assert '.file\t1 "kernels.py"' in ptx and '"triton/language/standard.py"' in ptx
    assert 'loc("kernels.py":' in files[softmax["files"]["ir"]["ttir"]["path"]].decode()
    helper = next(v for v in m["variants"] if v["kernel"] == "mykern:scaled_add" and v["target"]["backend"] == "hip")
    llir = files[helper["files"]["ir"]["llir"]["path"]].decode()
    assert 'DIFile(filename: "mykern.py", directory: "")' in llir and 'DIFile(filename: "helpers.py"' in llir
    from triton.backends.nvidia.compiler import get_ptxas

    nvdisasm = os.path.join(os.path.dirname(get_ptxas(80).path), "nvdisasm")
    if not os.path.isfile(nvdisasm):
        pytest.skip("Triton's bundled nvdisasm is not installed")
    cubin = tmp_path / "softmax.cubin"
    cubin.write_bytes(files[softmax["files"]["binary"]["path"]])
    out = subprocess.run([nvdisasm, "-g", "-c", str(cubin)], capture_output=True, text=True, check=True).stdout
    lines = {line.strip() for line in out.splitlines() if "//## File" in line}
    assert any('File "kernels.py", line ' in line for line in lines), sorted(lines)[:5]
    assert any('File "triton/language/standard.py", line ' in line for line in lines)
    assert not any("/" + "tmp" in line or os.sep + "work" in line for line in lines)


def test_the_shell_does_not_decide_and_is_told_once(two_builds):
    """A's shell set TRITON_F32_DEFAULT and TRITON_DISABLE_LINE_INFO (ignored, one warning); B set nothing."""
    err_a, err_b = two_builds["run_a"].stderr, two_builds["run_b"].stderr
    assert err_a.count("warning: ignoring") == 1 and "TRITON_F32_DEFAULT=ieee" in err_a
    assert "TRITON_DEFAULT_FP_FUSION is unset" not in err_b  # Triton's warning, once per worker before
    for v in manifest(two_builds["a"])["variants"]:
        build = v["provenance"]["build"]
        assert build["env"] == {} and build["options"]["enable_fp_fusion"] is True
        assert v["provenance"]["triton_cache"]["env_vars"] == {}


def test_helper_module_sources_are_stored_for_a_rebuild(two_builds):
    m = manifest(two_builds["a"])
    v = next(v for v in m["variants"] if v["kernel"] == "mykern:scaled_add" and v["target"]["backend"] == "cuda")
    build = v["provenance"]["build"]
    assert [(s["module"], s["name"]) for s in build["sources"]] == [("mykern", "mykern.py"), ("helpers", "helpers.py")]
    stored = {s["sha256"] for s in m["sources"]}
    assert {s["sha256"] for s in build["sources"]} <= stored
    assert build["module"] == "mykern" and build["attr"] == "scaled_add" and build["target"] == "cuda:90"
    jsonschema = pytest.importorskip("jsonschema")
    from karchive.format.schema import load_schema

    jsonschema.Draft202012Validator(load_schema()).validate(m)


def test_spec_env_is_applied_recorded_and_keyed(tmp_path):
    """[archive] env reaches Triton (no line info at all), is recorded, and changes the key."""
    spec = make_checkout(tmp_path / "proj")
    text = spec.read_text().replace(
        'dictionary = "none"', 'dictionary = "none"\nenv = { TRITON_DISABLE_LINE_INFO = "1" }'
    )
    text = text[: text.index('[[kernel]]\nsource = "mykern.py')]  # softmax only
    spec.write_text(text.replace('targets = ["cuda:80", "hip:gfx942"]', 'targets = ["cuda:80"]'))
    env = clean_env(KARCHIVE_CACHE_DIR=str(tmp_path / "kc"))
    out = tmp_path / "noline.karc"
    karchive(["build", str(spec), "-o", str(out), "-j", "1", "--quiet"], cwd=tmp_path, env=env)
    (v,) = manifest(out)["variants"]
    assert v["provenance"]["build"]["env"] == {"TRITON_DISABLE_LINE_INFO": "1"}
    assert v["provenance"]["triton_cache"]["env_vars"] == {"TRITON_DISABLE_LINE_INFO": "true"}  # Triton's spelling
    ptx = members(out)[v["files"]["ir"]["ptx"]["path"]].decode()
    assert ".file" not in ptx and ".loc" not in ptx
    spec.write_text(spec.read_text().replace('env = { TRITON_DISABLE_LINE_INFO = "1" }\n', ""))
    plain = tmp_path / "plain.karc"
    karchive(["build", str(spec), "-o", str(plain), "-j", "1", "--quiet"], cwd=tmp_path, env=env)
    assert manifest(plain)["variants"][0]["key"] != v["key"]


@pytest.mark.parametrize(
    "env, message",
    [
        ({"TRITON_DEFAULT_FP_FUSION": "0"}, "set that option instead"),
        ({"LD_PRELOAD": "x.so"}, "cannot be set by a build"),
        ({"TRITON_F32_DEFAULT": ["ieee"]}, "must be a string"),
    ],
)
def test_spec_env_refuses_what_a_build_must_not_set(env, message, tmp_path):
    from karchive.errors import SpecFileError
    from karchive.producer.build.spec_file import parse_spec

    data = {
        "archive": {"name": "x", "version": "1", "targets": ["cuda:90"], "env": env},
        "kernel": [{"source": "k.py:f", "signature": "*fp32"}],
    }
    with pytest.raises(SpecFileError, match=message):
        parse_spec(data, base_dir=str(tmp_path))


def test_variants_compiled_in_process_restore_the_callers_state(tmp_path, monkeypatch):
    """compile_variant leaves JIT functions' file names, the cwd, env and Triton's cache dir as they were."""
    from triton import knobs

    from karchive.producer.compile.aot import VariantRequest, compile_variant
    from karchive.producer.compile.kernel_ref import load_kernel

    spec = make_checkout(tmp_path / "proj")
    monkeypatch.setenv("KARCHIVE_CACHE_DIR", str(tmp_path / "kc"))
    monkeypatch.setenv("TRITON_F32_DEFAULT", "tf32x3")
    ref = f"{spec.parent / 'mykern.py'}:scaled_add"
    fn, module = load_kernel(ref)
    helper = sys.modules["helpers"].twice
    before = (fn.file_name, helper.file_name, os.getcwd(), knobs.cache.dir)
    v = compile_variant(VariantRequest(ref, "*fp32:16, *fp32:16, *fp32:16, i32", "hip:gfx942", {"BLOCK": 64}))
    assert (fn.file_name, helper.file_name, os.getcwd(), knobs.cache.dir) == before
    assert os.environ["TRITON_F32_DEFAULT"] == "tf32x3"
    assert before[0] == str(spec.parent / "mykern.py")  # Triton's own name outside a karchive compile
    assert v.variant.to_json()["provenance"]["build"]["env"] == {}
    from karchive.producer.compile.canonical import module_sources

    assert [(s.module, s.name) for s in module_sources(fn)] == [("mykern", "mykern.py"), ("helpers", "helpers.py")]
    assert fn.file_name == before[0]


def test_a_machine_path_that_escapes_canonicalisation_is_refused():
    from karchive.producer.compile.canonical import find_machine_paths, machine_roots

    roots = machine_roots(["/srv/builds/proj"])
    files = {"ptx": b'.file 1 "kernels.py"\n', "llir": b'!DIFile(filename: "k.py", directory: "/srv/builds/proj")'}
    assert find_machine_paths(files, roots) == [("llir", "/srv/builds/proj", files["llir"].index(b"/srv"))]


def test_the_scan_finds_what_a_plain_jit_compile_leaks(two_builds):
    """Triton's own JIT-style output names the checkout (PTX .file, and DW_AT_comp_dir spelled as .b8 bytes)."""
    from karchive.producer.compile.canonical import find_machine_paths, machine_roots

    third = str(two_builds["checkouts"][2])
    ptx_files = sorted(two_builds["warm"].rglob("*.ptx"))
    assert ptx_files
    ptx = ptx_files[0].read_bytes()
    assert find_machine_paths({"ptx": ptx}, machine_roots([third]))[0][1] == third
    without_file_lines = b"\n".join(line for line in ptx.splitlines() if not line.lstrip().startswith(b".file"))
    assert third.encode() not in without_file_lines
    assert find_machine_paths({"ptx": without_file_lines}, [third]) == [("ptx", third, -1)]


def test_cli_json_summary_lists_warnings(two_builds):
    """--json carries the same warning for machines."""
    env = dict(two_builds["env_b"], TRITON_ENABLE_ASAN="1")
    out = two_builds["root"] / "j.karc"
    run = karchive(
        ["build", str(two_builds["spec_b"]), "-o", str(out), "-j", "1", "--json"],
        cwd=two_builds["root"],
        env=dict(env, KARCHIVE_CACHE_DIR=str(two_builds["root"] / "karchive-cache-a")),
    )
    summary = json.loads(run.stdout)
    assert any("TRITON_ENABLE_ASAN=1" in w for w in summary["warnings"])
    assert out.read_bytes() == two_builds["a"].read_bytes()
