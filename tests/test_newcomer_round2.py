"""Issue 19, "the first hour, round 2": the rough edges a second fresh-machine trial found
(/work/shared/reference/newcomer-trial-2026-11.md), each reproduced. Commands run as a user runs them:
in a child process, through real pipes."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import stat
import subprocess
import sys
import textwrap

import pytest
from support import ROOT, needs_triton

OFFLINE = {"PIP_NO_INDEX": "1", "PIP_INDEX_URL": "http://127.0.0.1:9/", "PIP_FIND_LINKS": ""}


# -- tools/venv.sh: a rerun runs no pip -------------------------------------------------------------
@pytest.fixture
def fake_checkout(tmp_path: pathlib.Path) -> pathlib.Path:
    """A checkout holding only what tools/venv.sh reads, and a venv whose python records every ``-m pip``
    (and succeeds) while running everything else with this interpreter: the skip logic, without installing."""
    repo = tmp_path / "repo"
    (repo / "tools").mkdir(parents=True)
    (repo / "karchive" / "runtime").mkdir(parents=True)
    shutil.copy(ROOT / "tools" / "venv.sh", repo / "tools" / "venv.sh")
    shutil.copy(ROOT / "pyproject.toml", repo / "pyproject.toml")
    shutil.copy(ROOT / "karchive" / "runtime" / "_fastlaunch.c", repo / "karchive" / "runtime" / "_fastlaunch.c")
    shutil.copytree(ROOT / "karchive" / "runtime" / "c-ext", repo / "karchive" / "runtime" / "c-ext")
    python = repo / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(
        textwrap.dedent(f"""\
        #!/bin/sh
        if [ "$1" = -m ] && [ "$2" = pip ]; then
          echo "$* | PYTHONWARNINGS=$PYTHONWARNINGS" >> "{tmp_path}/pip.log"
          exit 0
        fi
        exec {sys.executable} "$@"
        """)
    )
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    return repo


def _source_venv(repo: pathlib.Path, extras: str, env: dict[str, str] | None = None) -> list[str]:
    """Source tools/venv.sh from another directory as the scripts do; the pip commands it ran."""
    log = repo.parent / "pip.log"
    log.unlink(missing_ok=True)
    script = f'set -euo pipefail; cd {repo}; source tools/venv.sh "{extras}"; echo "PY=$PY"'
    done = subprocess.run(
        ["bash", "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
        env={**os.environ, "KARCHIVE_VENV": str(repo / "venv"), **(env or {})},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith(f"PY={repo}/venv/bin/python")
    return log.read_text().splitlines() if log.exists() else []


def test_venv_rerun_runs_no_pip(fake_checkout):
    first = _source_venv(fake_checkout, "producer,cli,test")
    # First install: the build backend into the venv, then the project without build isolation, with
    # setuptools' build notes silenced (not pip's errors). No `--upgrade pip`: the venv existed.
    assert [line.split(" | ")[0] for line in first] == [
        f"-m pip install -q -r {fake_checkout}/venv/.karchive-build-requires",
        "-m pip install -q --no-build-isolation -e .[cli,producer,test]",
    ]
    assert all(
        "ignore:`[tool.setuptools.ext-modules]`" in line and "ignore:Editable installation" in line for line in first
    )
    assert (fake_checkout / "venv" / ".karchive-build-requires").read_text().split() == ["setuptools>=74.1", "wheel"]
    # Rerun, with the package index unreachable: pip is not run at all, nor for a subset of the extras.
    assert _source_venv(fake_checkout, "producer,cli,test", OFFLINE) == []
    assert _source_venv(fake_checkout, "producer,cli", OFFLINE) == []
    # A new extra: installed together with those already there (a later subset stays covered).
    assert (
        _source_venv(fake_checkout, "cli,ray")[-1].split(" | ")[0]
        == "-m pip install -q --no-build-isolation -e .[cli,producer,ray,test]"
    )
    assert _source_venv(fake_checkout, "test") == []


@pytest.mark.parametrize("edit", ["pyproject.toml", "karchive/runtime/_fastlaunch.c", "karchive/runtime/c-ext/pack.c"])
def test_venv_reinstalls_when_pyproject_or_the_c_source_changes(fake_checkout, edit):
    assert _source_venv(fake_checkout, "cli")
    assert _source_venv(fake_checkout, "cli") == []
    with open(fake_checkout / edit, "a") as f:
        f.write("\n# edited\n")
    assert _source_venv(fake_checkout, "cli")[-1].split(" | ")[0] == "-m pip install -q --no-build-isolation -e .[cli]"
    assert _source_venv(fake_checkout, "cli") == []


def test_venv_a_failed_install_is_not_recorded(fake_checkout, tmp_path):
    python = fake_checkout / "venv" / "bin" / "python"
    python.write_text(python.read_text().replace("exit 0", "exit 1"))
    log = tmp_path / "pip.log"
    done = subprocess.run(
        ["bash", "-c", f"set -euo pipefail; cd {fake_checkout}; source tools/venv.sh cli"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "KARCHIVE_VENV": str(fake_checkout / "venv")},
    )
    assert done.returncode != 0 and log.exists()
    assert not (fake_checkout / "venv" / ".karchive-install").exists()


def test_the_real_venv_reruns_offline():
    """This checkout's own venv, when tools/venv.sh made it: sourcing it again with no index is a no-op."""
    import importlib.metadata

    venv = pathlib.Path(sys.prefix)
    if not (venv / ".karchive-install").exists():
        pytest.skip(f"{venv} was not made by tools/venv.sh (no .karchive-install)")

    # another checkout's venv (a git worktree run with a shared venv): a "rerun" would repoint its install. The
    # venv's own record (a checkout's karchive.egg-info, first on sys.path, has no direct_url.json)
    site = [p for p in sys.path if p.startswith(str(venv)) and p.endswith("site-packages")]
    try:
        dist = next(iter(importlib.metadata.distributions(name="karchive", path=site)))
        url = json.loads(dist.read_text("direct_url.json") or "{}").get("url")
    except (StopIteration, ValueError):
        url = None
    if url != ROOT.as_uri():
        pytest.skip(f"{venv} holds the install of {url}, not of this checkout ({ROOT})")
    have = (venv / ".karchive-install").read_text().split()[1]
    before = (venv / ".karchive-install").read_text()
    done = subprocess.run(
        ["bash", "-c", f'set -euo pipefail; source "{ROOT}/tools/venv.sh" "{have}"'],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**os.environ, "KARCHIVE_VENV": str(venv), **OFFLINE},
    )
    if done.returncode != 0 or (venv / ".karchive-install").read_text() != before:
        pytest.fail(f"rerun was not a no-op: rc {done.returncode}\n{done.stderr}")
    assert done.stderr == ""


# -- the CLI: pipes, exit codes, JSON errors, "did you mean" -----------------------------------------
def karchive(
    *argv: str, cwd: pathlib.Path | None = None, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess:
    """``karchive ARGV`` in a fresh process, as a terminal runs it."""
    return subprocess.run(
        [sys.executable, "-m", "karchive.cli.main", *argv],
        capture_output=True,
        text=True,
        cwd=str(cwd or ROOT),
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def big_archive(tmp_path_factory) -> pathlib.Path:
    """An archive (no Triton needed) whose `inspect --json` is far larger than a pipe's buffer."""
    from hostile_factory import honest_v2

    path = tmp_path_factory.mktemp("big") / "big.karc"
    path.write_bytes(honest_v2({"k": 300})[0])
    return path


@pytest.mark.parametrize(
    "argv",
    [
        ["inspect", "{big}", "--json"],
        ["inspect", "{big}"],
        ["diff", "{big}", "{big}", "--json"],
        ["--help"],
        ["inspect", "--help"],
    ],
)
def test_a_command_piped_into_head_exits_quietly(big_archive, argv):
    cmd = " ".join([sys.executable, "-m", "karchive.cli.main", *(a.format(big=big_archive) for a in argv)])
    done = subprocess.run(
        ["bash", "-c", f"set -o pipefail; {cmd} | head -1"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    # 141 where the output was cut, as git (issue 35.7): the JSON is far larger than a pipe; a short text
    # may be written whole before head exits (0)
    assert done.returncode == 141 if "--json" in argv else done.returncode in (0, 141), done.stderr
    assert done.stderr == ""  # no "Broken pipe", no "Exception ignored"
    assert len(done.stdout.splitlines()) == 1


def _missing_file_commands(tmp: pathlib.Path) -> list[list[str]]:
    """Every command that reads a file, each given one that does not exist (with --json where it has it)."""
    nope = str(tmp / "nope.karc")
    return [
        ["inspect", nope, "--json"],
        ["verify", nope, "--json"],
        ["diff", nope, nope, "--json"],
        ["rebuild", "--check", nope, "--json"],
        ["export-triton-cache", nope, "--json"],
        ["publish", nope, "--json", "--registry", str(tmp / "reg")],
        ["sign", nope, "--key", str(tmp / "k.key"), "--json"],
        ["build", str(tmp / "nope.toml"), "-o", str(tmp / "out/"), "--json"],
        ["import-triton-cache", str(tmp / "nodir"), "-o", str(tmp / "x.karc"), "--json"],
        ["verify", nope, "--trust", str(tmp / "nopolicy.toml"), "--json"],
        ["extract", nope, "-C", str(tmp / "dest")],
    ]


def test_a_missing_file_is_exit_2_everywhere_and_json_says_so(tmp_path):
    for argv in _missing_file_commands(tmp_path):
        done = karchive(*argv, cwd=tmp_path)
        assert done.returncode == 2, (argv, done.stdout, done.stderr)
        assert done.stderr.startswith("karchive: error: "), (argv, done.stderr)
        if "--json" in argv:
            payload = json.loads(done.stdout)
            assert payload["error"] and payload["message"] in done.stderr, (argv, payload)
        else:
            assert done.stdout == ""


def test_json_errors_carry_the_error_fields(tmp_path, big_archive):
    done = karchive("inspect", str(tmp_path / "nope.karc"), "--json")
    assert json.loads(done.stdout) == {
        "error": "ArchiveNotFoundError",
        "message": f"no such archive: {tmp_path}/nope.karc",
        "path": f"{tmp_path}/nope.karc",
    }  # every declared field, filled
    # A usage error has no Namespace yet: still JSON, still exit 2.
    done = karchive("inspect", str(big_archive), "--json", "--no-such-flag")
    assert done.returncode == 2 and json.loads(done.stdout)["error"] == "UsageError"
    assert "unrecognized arguments: --no-such-flag" in done.stderr
    # A filter that matches nothing is the same kind of mistake in inspect as in diff: 2.
    done = karchive("inspect", str(big_archive), "-k", "nosuch", "--json")
    assert done.returncode == 2 and "it has kernels k" in json.loads(done.stdout)["message"]


def test_a_negative_answer_is_1_and_json_is_the_answer(tmp_path, big_archive):
    damaged = tmp_path / "damaged.karc"
    data = bytearray(big_archive.read_bytes())
    data[len(data) // 3] ^= 0xFF
    damaged.write_bytes(bytes(data))
    done = karchive("verify", str(damaged), "--json")
    assert done.returncode == 1 and json.loads(done.stdout)["ok"] is False


def test_the_exit_code_table_is_documented_once_and_matches_the_code():
    from karchive.cli import output

    table = (ROOT / "docs" / "cli.md").read_text()
    for name, code in [
        ("EXIT_OK", 0),
        ("EXIT_NEGATIVE", 1),
        ("EXIT_ERROR", 2),
        ("EXIT_PARTIAL", 3),
        ("EXIT_INTERRUPTED", 130),
    ]:
        assert getattr(output, name) == code
        assert f"| **{code}** |" in table, code


@pytest.mark.parametrize(
    "argv, says",
    [
        (["inspec"], "did you mean 'inspect'?"),
        (["verfy", "x"], "did you mean 'verify'?"),
        (["cache", "lss"], "did you mean 'ls'?"),
        (["pull", "mykernels:1.1.0"], "did you mean 'mykernels@1.1.0'?"),
        (["inspect", "mykernels==1.1.0"], "did you mean 'mykernels@1.1.0'?"),
        (["inspect", "{py}"], "did you mean `karchive compile {py} -n KERNEL ...`?"),
        (["verify", "{toml}"], "did you mean `karchive build {toml} -o out/`?"),
        (["rebuild", "--check", "{toml}"], "did you mean `karchive build {toml} -o out/`?"),
        (["publish", "{py}"], "did you mean `karchive compile {py}"),
        (["build", "{py}", "-o", "out/"], "did you mean `karchive compile {py} -n KERNEL"),
    ],
)
def test_the_wrong_kind_of_input_gets_did_you_mean(tmp_path, argv, says):
    py, toml = tmp_path / "mykernels.py", tmp_path / "build.toml"
    py.write_text("import triton\n")
    toml.write_text('[archive]\nname = "x"\nversion = "1"\n')
    argv = [a.format(py=py, toml=toml) for a in argv]
    done = karchive(
        *argv,
        cwd=tmp_path,
        env={"KARCHIVE_REGISTRY": str(tmp_path / "reg"), "KARCHIVE_CACHE_DIR": str(tmp_path / "cache")},
    )
    assert done.returncode == 2, done.stderr
    assert says.format(py=py, toml=toml) in done.stderr


# -- the cache: the build cache counted, pruned, and named in a rebuild ------------------------------
def _small_spec(directory: pathlib.Path) -> pathlib.Path:
    spec = directory / "spec.toml"
    spec.write_text(
        textwrap.dedent(f"""\
        [archive]
        name = "cached"
        version = "0.1.0"
        targets = ["cuda:90", "hip:gfx942"]

        [[kernel]]
        source = "{ROOT / "examples" / "kernels.py"}:add_kernel"
        signature = "*fp32:16, *fp32:16, *fp32:16, i32"
        constexprs = {{ BLOCK = [256] }}
        """)
    )
    return spec


@needs_triton
def test_a_rebuild_from_the_build_cache_says_so_and_cache_ls_prune_count_it(tmp_path):
    env = {"KARCHIVE_CACHE_DIR": str(tmp_path / "cache")}
    spec = _small_spec(tmp_path)
    first = karchive("build", str(spec), "-o", str(tmp_path / "a.karc"), "-j", "1", "--json", env=env, timeout=300)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["from_cache"] == 0
    # The second run compiles nothing: the first compile of a fresh process looks in the same build-cache
    # namespace as the rest (aot.py imports Triton's code generator before naming sources).
    again = karchive("build", str(spec), "-o", str(tmp_path / "b.karc"), "-j", "1", env=env, timeout=300)
    assert "cached 0.1.0: 2 variants to build" in again.stderr and "to compile" not in again.stderr
    assert "2 from the build cache, 0 compiled" in again.stdout
    assert again.stderr.count(", from the build cache)") == 2  # each progress line says so
    assert (tmp_path / "a.karc").read_bytes() == (tmp_path / "b.karc").read_bytes()

    listed = json.loads(karchive("cache", "ls", "--json", env=env).stdout)
    assert listed["archives"] == [] and listed["build_cache"]["entries"] >= 2
    assert listed["build_cache"]["bytes"] > 0 and listed["disk_bytes"] >= listed["build_cache"]["bytes"]
    text = karchive("cache", "ls", env=env).stdout
    assert "compiled variants, " in text and str(tmp_path / "cache" / "triton-build") in text
    # Too young for --max-age 1d: kept. --max-size 0: everything goes, and the namespaces with it.
    kept = json.loads(karchive("cache", "prune", "--max-age", "1d", "--json", env=env).stdout)
    assert kept["build_cache"]["removed"] == 0 and kept["build_cache"]["kept"] == listed["build_cache"]["entries"]
    gone = json.loads(karchive("cache", "prune", "--max-size", "0", "--json", env=env).stdout)
    assert gone["build_cache"]["removed"] == listed["build_cache"]["entries"]
    assert gone["build_cache"]["freed_bytes"] == listed["build_cache"]["bytes"]
    assert list((tmp_path / "cache" / "triton-build").iterdir()) == []
    assert json.loads(karchive("cache", "ls", "--json", env=env).stdout)["build_cache"]["entries"] == 0
    # After a prune the same build compiles again, and says so.
    third = karchive("build", str(spec), "-o", str(tmp_path / "c.karc"), "-j", "1", "--json", env=env, timeout=300)
    assert json.loads(third.stdout)["from_cache"] == 0


def test_cache_prune_without_a_limit_says_what_it_needs(tmp_path):
    done = karchive("cache", "prune", env={"KARCHIVE_CACHE_DIR": str(tmp_path / "cache")})
    assert done.returncode == 0 and "without --max-size SIZE or --max-age AGE" in done.stderr


@needs_triton
def test_compile_variant_says_when_triton_answered_from_the_cache(tmp_path):
    from karchive.producer.compile.aot import VariantRequest, compile_variant

    req = VariantRequest(
        str(ROOT / "examples" / "kernels.py") + ":add_kernel",
        "*fp32:16, *fp32:16, *fp32:16, i32",
        "cuda:90",
        {"BLOCK": 128},
        {"num_warps": 4},
    )
    first = compile_variant(req, cache_dir=str(tmp_path / "c"))
    second = compile_variant(req, cache_dir=str(tmp_path / "c"))
    fresh = compile_variant(req, cache_dir=str(tmp_path / "other"))
    assert (first.from_cache, second.from_cache, fresh.from_cache) == (False, True, False)
    assert first.files == second.files == fresh.files


# -- diff --stat, and what docs/audit.md says about line numbers --------------------------------------
TWO_KERNELS = """\
import triton
import triton.language as tl


@triton.jit
def first(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1.0, mask=offs < n)


@triton.jit
def second(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2.0, mask=offs < n)
"""


@needs_triton
def test_diff_stat_is_one_line_per_kernel_and_moved_lines_change_keys(tmp_path):
    """docs/audit.md: a kernel's line numbers enter its key, so editing `first` (one line added) gives the
    untouched `second`, below it, new keys and binaries too; `diff --stat` says so in one line per kernel."""
    src = tmp_path / "two.py"
    src.write_text(TWO_KERNELS)
    spec = tmp_path / "spec.toml"
    spec.write_text(
        textwrap.dedent(f"""\
        [archive]
        name = "two"
        version = "1"
        targets = ["cuda:90"]

        [[kernel]]
        source = "{src}:first"
        signature = "*fp32:16, i32"
        constexprs = {{ BLOCK = [128, 256] }}

        [[kernel]]
        source = "{src}:second"
        signature = "*fp32:16, i32"
        constexprs = {{ BLOCK = [128] }}
        """)
    )
    env = {"KARCHIVE_CACHE_DIR": str(tmp_path / "cache")}
    assert (
        karchive(
            "build", str(spec), "-o", str(tmp_path / "v1.karc"), "-j", "1", "--quiet", env=env, timeout=300
        ).returncode
        == 0
    )
    src.write_text(
        TWO_KERNELS.replace(
            "    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n",
            "    pid = tl.program_id(0)\n    offs = pid * BLOCK + tl.arange(0, BLOCK)\n",
            1,
        )
    )
    assert (
        karchive(
            "build", str(spec), "-o", str(tmp_path / "v2.karc"), "-j", "1", "--quiet", env=env, timeout=300
        ).returncode
        == 0
    )
    done = karchive("diff", str(tmp_path / "v1.karc"), str(tmp_path / "v2.karc"), "--stat")
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    # kernels are filed under module:qualname (the spec's module is its file, two.py)
    first_line = next(line for line in lines if line.startswith("two:first "))
    second_line = next(line for line in lines if line.startswith("two:second "))
    assert "2 changed" in first_line and "1 changed" in second_line
    assert "binary" in second_line  # not edited, only moved down one line: new code bytes all the same
    assert len(lines) < 12  # the summary, not 2 x 3 detail blocks
    stat = json.loads(karchive("diff", str(tmp_path / "v1.karc"), str(tmp_path / "v2.karc"), "--stat", "--json").stdout)
    assert [(k["kernel"], k["changed"], k["unchanged"]) for k in stat["kernels"]] == [
        ("two:first", 2, 0),
        ("two:second", 1, 0),
    ]
    assert "binary" in stat["kernels"][1]["fields"] and stat["identical"] is False
    same = karchive("diff", str(tmp_path / "v2.karc"), str(tmp_path / "v2.karc"), "--stat")
    assert same.returncode == 0 and "identical" in same.stdout


def test_the_docs_say_what_the_code_does():
    signing = (ROOT / "spec" / "SIGNING.md").read_text()
    assert (
        "Not wired yet: `karchive build --sign" not in signing
        and "`karchive build --sign KEY [--provenance]`" in signing
    )
    from karchive.cli.main import build_parser

    build_help = build_parser()._subparsers._group_actions[0].choices["build"].format_help()  # type: ignore[union-attr]
    assert "--sign" in build_help and "--provenance" in build_help
    synopsis = (ROOT / "spec" / "BUILD.md").read_text().splitlines()[0]
    for flag in ("--sign", "--provenance", "--quiet", "--json", "--reuse", "--executor"):
        assert flag in synopsis and flag in build_help
    audit = (ROOT / "docs" / "audit.md").read_text()
    assert "Line numbers are part of a kernel's identity" in audit and "--stat" in audit


# -- doctor -------------------------------------------------------------------------------------------
_NO_EXTENSION = (
    "import sys\n"
    "class Block:\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name == 'karchive.runtime._fastlaunch':\n"
    "            raise ImportError('not built (this test)')\n"
    "sys.meta_path.insert(0, Block())\n"
    "from karchive.cli.main import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


@pytest.mark.parametrize("asked, code", [("extension", 1), ("auto", 0), ("python", 0)])
def test_doctor_fails_when_the_launch_path_asked_for_is_unavailable(asked, code):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KARCHIVE_LAUNCH_PATH": asked}
    done = subprocess.run(
        [sys.executable, "-c", _NO_EXTENSION, "doctor", "--no-probe", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == code, done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] is (code == 0) and report["launch_path"]["extension_built"] is False
    text = subprocess.run(
        [sys.executable, "-c", _NO_EXTENSION, "doctor", "--no-probe"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert text.returncode == code
    assert ("REQUESTED BUT NOT BUILT" in text.stdout) is (code == 1)


def test_doctor_reports_toolchain_and_locations(tmp_path):
    env = {
        "KARCHIVE_CACHE_DIR": str(tmp_path / "cache"),
        "KARCHIVE_REGISTRY": str(tmp_path / "reg"),
        "KARCHIVE_TRUST_POLICY": str(tmp_path / "policy.toml"),
    }
    done = karchive("doctor", "--json", env=env, timeout=300)
    r = json.loads(done.stdout)
    assert done.returncode == (0 if r["gpus"] else 1) and r["ok"] is bool(r["gpus"]), done.stderr  # issue 35.11
    assert r["locations"] == {
        "cache": str(tmp_path / "cache"),
        "build_cache": str(tmp_path / "cache" / "triton-build"),
        "registry": str(tmp_path / "reg"),
        "registry_from_env": True,
        "trust_policy": str(tmp_path / "policy.toml"),
        "lockfile": None,
        "serve": {"archives": None, "signed_only": True},
    }
    tc = r["toolchain"]
    try:
        import triton
    except ImportError:
        assert tc["triton"] is None
        assert "nothing can be built here" in karchive("doctor", env=env, timeout=300).stdout
        return
    assert tc["triton"] == triton.__version__ and tc["probed"] is True
    assert "nvidia" in tc["backends"] and "cuda:90" in tc["cuda_targets"]
    assert tc["ptxas"] and all(os.path.isfile(p["path"]) and p["version"] for p in tc["ptxas"])
    assert tc["hip"]["llvm"] is ("amd" in tc["backends"])
    text = karchive("doctor", env=env, timeout=300).stdout
    assert f"triton        {triton.__version__}" in text and "ptxas" in text and "cuda:90" in text
    assert f"registry      {tmp_path / 'reg'} ($KARCHIVE_REGISTRY)" in text
    quick = json.loads(karchive("doctor", "--no-probe", "--json", env=env).stdout)["toolchain"]
    assert quick == {"triton": triton.__version__, "probed": False}


# -- wording ------------------------------------------------------------------------------------------
def test_publish_says_nothing_to_do_only_when_nothing_was_done(tmp_path, big_archive):
    pytest.importorskip("cryptography")
    archive = tmp_path / "big.karc"
    shutil.copy(big_archive, archive)
    env = {"KARCHIVE_REGISTRY": str(tmp_path / "reg"), "KARCHIVE_CACHE_DIR": str(tmp_path / "cache")}
    assert karchive("publish", str(archive), "--create-registry", env=env).stdout.startswith("published hostile@2 ")
    assert karchive("keygen", "-o", str(tmp_path / "ci"), env=env).returncode == 0
    assert karchive("sign", str(archive), "--key", str(tmp_path / "ci.key"), env=env).returncode == 0
    again = karchive("publish", str(archive), env=env).stdout
    assert again.startswith("already published (identical bytes): ") and "nothing to do" not in again
    assert "(from the sidecar): stored" in again
    third = karchive("publish", str(archive), env=env).stdout
    assert "nothing to do" in third and "already stored" in third


def test_cache_commands_offer_no_progress_flags():
    for action in ("ls", "prune"):
        text = karchive("cache", action, "--help").stdout
        assert "--progress" not in text and "--cache-dir" in text
