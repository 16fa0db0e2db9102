"""Every supported Triton release builds the probe kernels, byte-reproducibly (issue 19).

Marked ``tritons``. For each venv that ``bash tools/tritons.sh`` made under ``.venv-triton/`` (one Triton
release each, only ``pip install -e .`` and ``triton==X.Y.*``; CI makes the oldest supported, 3.6 and the
newest), the real CLI of that venv builds tests/data/probes/build.toml (pointer arithmetic, masked loads,
``tl.atomic_add``, ``tl.dot``, libdevice math and a device-side tensor descriptor with global scratch,
for cuda:80, cuda:90 and hip:gfx942) twice: from two checkouts at different paths, by two users with
their own homes and caches, and a third time with the release imported from another install prefix.
The archives must be identical, name no directory of this machine, keep line
info under canonical names in each release's debug-info format, pass ``karchive verify``, and be reproduced
byte for byte by ``karchive rebuild --check`` with the same release, and by ``--reuse`` of itself. Without the venvs every test is skipped
with the command that makes them.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest
from repro_support import clean_env, make_checkout, manifest, members
from support import needs_triton
from triton_releases import KERNELS, PROBES, ROOT, TARGETS, VENVS, Venv, build, floor, venvs

pytestmark = pytest.mark.tritons

_FLOOR = tuple(int(p) for p in floor().split("."))
_FOUND = venvs()
_PARAMS = [
    pytest.param(
        v,
        id=f"triton-{v.version}",
        marks=[]
        if v.key >= _FLOOR
        else pytest.mark.skip(
            reason=f"triton {v.version} is below pyproject.toml's floor triton>={floor()} (a stale venv: rm -r it)"
        ),
    )
    for v in _FOUND
] or [
    pytest.param(
        None,
        id="no-venvs",
        marks=pytest.mark.skip(
            reason=f"no Triton release venvs under {VENVS}: make them with `bash tools/tritons.sh` (CI set) or "
            "`bash tools/tritons.sh all` (every supported minor)"
        ),
    )
]

#: Every source file name a probe's debug info may give: the probes' own module and Triton's language helpers
#: (tl.sum in the atomic probe), each by its import path, whatever the release and wherever Triton is installed.
CANONICAL = {"probe_kernels.py", "triton/language/standard.py"}


@pytest.fixture(scope="module", params=_PARAMS)
def built(request, tmp_path_factory) -> dict:
    """Build A (-j 2, from inside its checkout) and B (-j 1, from elsewhere) with one Triton release."""
    venv: Venv = request.param
    root = tmp_path_factory.mktemp(f"triton-{venv.version}")
    checkouts = [root / "alice" / "proj", root / "farm" / "job-9" / "src" / "proj"]
    homes = [root / "home" / "kuser_a12", root / "home" / "kuser_b34"]
    for c, h in zip(checkouts, homes):
        shutil.copytree(PROBES, c)
        h.mkdir(parents=True)
    envs = [
        clean_env(
            HOME=str(h),
            USER=h.name,
            LOGNAME=h.name,
            KARCHIVE_CACHE_DIR=str(root / f"kc-{i}"),
            TRITON_CACHE_DIR=str(root / f"tc-{i}"),
        )
        for i, h in enumerate(homes)
    ]
    out_a, out_b, out_c = root / "a.karc", root / "b.karc", root / "c.karc"
    build(venv, checkouts[0] / "build.toml", out_a, cwd=checkouts[0], env=envs[0], jobs=2)
    build(venv, checkouts[1] / "build.toml", out_b, cwd=root, env=envs[1], jobs=1)
    # C: the same release imported from another install prefix (its package reached through /opt-like path).
    prefix = root / "opt" / "tools-7" / "pylib"
    prefix.mkdir(parents=True)
    (package,) = venv.python.parent.parent.glob("lib/python*/site-packages/triton")
    (prefix / "triton").symlink_to(package, target_is_directory=True)
    env_c = dict(
        envs[1], PYTHONPATH=os.pathsep.join([str(prefix), envs[1]["PYTHONPATH"]]), KARCHIVE_CACHE_DIR=str(root / "kc-c")
    )
    where = subprocess.run(
        [str(venv.python), "-c", "import triton; print(triton.__file__)"],
        env=env_c,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert where.startswith(str(prefix)), where
    build(venv, checkouts[1] / "build.toml", out_c, cwd=root, env=env_c, jobs=2)
    return {
        "venv": venv,
        "root": root,
        "a": out_a,
        "b": out_b,
        "c": out_c,
        "checkouts": checkouts,
        "homes": homes,
        "env": envs[0],
        "prefix": prefix,
    }


def test_every_probe_builds_for_every_target(built):
    m = manifest(built["a"])
    got = sorted((v["kernel"], v["target"]["backend"] + ":" + str(v["target"]["arch"])) for v in m["variants"])
    assert got == sorted((f"probe_kernels:{k}", t) for k in KERNELS for t in TARGETS)  # module:qualname
    assert m["produced_by"]["triton"] == built["venv"].version


def test_two_checkouts_two_homes_same_bytes(built):
    a, b = built["a"].read_bytes(), built["b"].read_bytes()
    assert a == b, f"triton {built['venv'].version}: {len(a)} vs {len(b)} bytes"


def test_another_install_prefix_gives_the_same_bytes(built):
    """Triton 3.5-3.8 hash AMD's device libraries by path into their cache key (metadata ``hash``); karchive
    hashes them by content, so where Triton is installed does not change the archive."""
    a, c = built["a"].read_bytes(), built["c"].read_bytes()
    assert a == c, f"triton {built['venv'].version}: {len(a)} vs {len(c)} bytes"


def test_no_member_names_a_machine_path(built):
    venv = built["venv"]
    needles = {
        str(built["root"]),
        "kuser_a12",
        "kuser_b34",
        "site-packages",
        str(venv.python.parent.parent),
        "tools-7",
        str(PROBES.parent.parent.parent),
        *(str(c) for c in built["checkouts"]),
    }
    found = [(name, n) for name, data in members(built["a"]).items() for n in needles if n.encode() in data]
    assert not found, found


def _named_files(text: bytes) -> set[str]:
    """Source files named by TTIR/TTGIR ``loc("f.py":l:c)``, LLVM ``DIFile``, PTX ``.file N "f"`` and AMDGCN
    ``.file N "dir" "f"`` (directory and name joined, as a debugger would)."""
    names = set(re.findall(rb'loc\("([^"]+\.py)":', text))
    names |= {(d + b"/" + f if f else d) for d, f in re.findall(rb'\.file\s+\d+\s+"([^"]*)"(?:[ \t]+"([^"]*)")?', text)}
    names |= {
        (d + b"/" + f if d else f) for f, d in re.findall(rb'DIFile\(filename: "([^"]*)", directory: "([^"]*)"', text)
    }
    return {n.decode() for n in names}


def test_line_info_under_canonical_names_in_each_debug_info_format(built):
    """Every IR stage names only the canonical files, with line numbers; so do the binaries' line tables."""
    m = manifest(built["a"])
    files = members(built["a"])
    seen: set[str] = set()
    for v in m["variants"]:
        ir = v["files"]["ir"]
        named = _named_files(b"".join(files[ir[stage]["path"]] for stage in ir))
        assert named <= CANONICAL and "probe_kernels.py" in named, (v["kernel"], v["target"], named)
        assert re.search(rb'loc\("probe_kernels.py":\d+:\d+\)', files[ir["ttir"]["path"]])
        # DWARF in the cubin / hsaco keeps file names as strings (a directory and a base name may be apart).
        binary = files[v["files"]["binary"]["path"]]
        in_binary = {n.decode() for n in re.findall(rb"[\x21-\x7e]*\.py(?![\x21-\x7e])", binary)}
        assert in_binary <= CANONICAL | {"standard.py"}, (v["kernel"], v["target"], in_binary)
        seen |= named
    assert seen == CANONICAL  # the atomic probe's tl.sum really reached Triton's own package


def test_the_descriptor_probe_asks_for_global_scratch_on_hopper(built):
    """On sm_90 the descriptors are TMA descriptors written to global scratch (sm_80 and gfx942 lower them
    to plain loads and stores), so the archive's ABI must carry a scratch size the runtime allocates."""
    (v,) = [
        v
        for v in manifest(built["a"])["variants"]
        if v["kernel"] == "probe_kernels:descriptor_kernel" and v["target"]["arch"] == "90"
    ]
    assert v["abi"]["global_scratch"]["size"] > 0, v["abi"]


def test_karchive_verify_passes(built):
    r = subprocess.run(
        [str(built["venv"].python), "-m", "karchive", "verify", str(built["a"])],
        env=built["env"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stdout + r.stderr


@needs_triton
def test_canonical_names_reach_both_places_a_release_reads(tmp_path, monkeypatch):
    """Triton >= 3.8 reads ``JITFunction.file_name``, 3.4-3.7 read ``fn.fn.__code__.co_filename`` at compile time
    (``get_jit_fn_file_line``): both are renamed for the compile and put back exactly after, helpers and Triton's
    own language functions included. With the installed Triton; the venv tests above compile with each release."""
    import triton.language.standard as std

    from karchive.producer.compile.canonical import canonical_locations, source_file
    from karchive.producer.compile.kernel_ref import load_kernel

    spec = make_checkout(tmp_path / "proj")
    fn, _ = load_kernel(f"{spec.parent / 'mykern.py'}:scaled_add")
    helper = sys.modules["helpers"].twice
    tl_max = std.max
    before = {f: (getattr(f, "file_name", None), f.fn.__code__) for f in (fn, helper, tl_max)}
    with canonical_locations(fn) as canon:
        for f, name in ((fn, "mykern.py"), (helper, "helpers.py"), (tl_max, "triton/language/standard.py")):
            assert f.fn.__code__.co_filename == name and source_file(f) == name
            if before[f][0] is not None:
                assert f.file_name == name
            assert f.fn.__code__.co_firstlineno == before[f][1].co_firstlineno  # line numbers untouched
        assert {"mykern.py", "helpers.py", "triton/language/standard.py"} <= set(canon.names)
    for f, (name, code) in before.items():
        assert f.fn.__code__ is code and getattr(f, "file_name", None) == name


@needs_triton
def test_a_release_without_file_name_is_named_from_the_code_object(tmp_path):
    """What Triton 3.4-3.7 look like to karchive: no ``file_name`` attribute. The name still comes from the code
    object, so the module is found and the kernel is not named by its base name only."""
    from karchive.producer.compile.canonical import canonical_locations, source_file
    from karchive.producer.compile.kernel_ref import load_kernel

    spec = make_checkout(tmp_path / "pkgdir")
    fn, _ = load_kernel(f"{spec.parent / 'mykern.py'}:scaled_add")
    saved = fn.__dict__.pop("file_name", None)
    try:
        assert source_file(fn) == str(spec.parent / "mykern.py")
        with canonical_locations(fn) as canon:
            assert fn.fn.__code__.co_filename == "mykern.py" and "file_name" not in fn.__dict__
            assert [s.name for s in canon.sources] == ["mykern.py", "helpers.py"]
        assert fn.fn.__code__.co_filename == str(spec.parent / "mykern.py")
    finally:
        if saved is not None:
            fn.file_name = saved


def test_rebuild_check_reproduces_every_variant(built, tmp_path):
    """The same release recompiles the archive from its own sources (imported from the archive, so the code
    objects carry canonical names already) and gets every variant byte for byte."""
    env = dict(built["env"], KARCHIVE_CACHE_DIR=str(tmp_path / "kc"))
    r = subprocess.run(
        [str(built["venv"].python), "-m", "karchive", "rebuild", "--check", str(built["a"]), "-j", "2"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"{len(KERNELS) * len(TARGETS)} variants: {len(KERNELS) * len(TARGETS)} reproduced" in r.stdout, r.stdout


def test_an_incremental_build_reuses_every_variant(built, tmp_path):
    """``--reuse`` finds each kernel's sources (the same lookup Ray's shipping uses) under every release."""
    out = tmp_path / "again.karc"
    cmd = [
        str(built["venv"].python),
        "-m",
        "karchive",
        "build",
        str(built["checkouts"][1] / "build.toml"),
        "-o",
        str(out),
        "--reuse",
        str(built["a"]),
        "-j",
        "1",
    ]
    env = dict(built["env"], KARCHIVE_CACHE_DIR=str(tmp_path / "kc"))
    r = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"reusing {len(KERNELS) * len(TARGETS)} of {len(KERNELS) * len(TARGETS)} variant(s)" in r.stderr + r.stdout
    assert out.read_bytes() == built["a"].read_bytes()


def test_a_second_run_of_tritons_sh_needs_no_package_index():
    """CI runs tools/tritons.sh before every test run, the second time without network: venvs it made are
    reused without pip (pip is pointed at nothing here, so any install attempt would fail)."""
    if not _FOUND:
        pytest.skip("no Triton release venvs (bash tools/tritons.sh)")
    minors = [v.minor for v in _FOUND if v.key >= _FLOOR]
    env = dict(
        clean_env(PIP_NO_INDEX="1", PIP_FIND_LINKS=os.devnull, PIP_CONFIG_FILE=os.devnull),
        KARCHIVE_TRITON_VENVS=str(VENVS),
    )
    r = subprocess.run(
        ["bash", str(ROOT / "tools" / "tritons.sh"), "--check", *minors],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("ready, reused") == len(minors), r.stdout


def test_the_supported_range_is_stated_the_same_everywhere():
    """pyproject.toml (floor and comment), the README and tools/tritons.sh (the newest CI builds with) agree."""
    pyproject = (ROOT / "pyproject.toml").read_text()
    readme = (ROOT / "README.md").read_text()
    newest = re.search(r"^NEWEST=(\d+\.\d+)$", (ROOT / "tools" / "tritons.sh").read_text(), re.M)
    stated = re.search(r"supported Triton range \(also in README.md\): (\d+\.\d+) to (\d+\.\d+)", pyproject)
    in_readme = re.search(r"Triton (\d+\.\d+) to (\d+\.\d+)", readme)
    assert newest and stated and in_readme
    assert stated.groups() == in_readme.groups() == (floor(), newest.group(1))
