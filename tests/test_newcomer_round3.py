"""Issue 35, "the first hour, round 3": what a third fresh-machine trial hit, each reproduced as a user
meets it (scripts and commands in child processes, through real pipes)."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest
from support import ROOT, needs_triton


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


def two_variant_spec(directory: pathlib.Path, name: str = "pasted") -> pathlib.Path:
    spec = directory / "spec.toml"
    spec.write_text(
        textwrap.dedent(f"""\
        [archive]
        name = "{name}"
        version = "0.1.0"
        targets = ["cuda:90"]

        [[kernel]]
        source = "{ROOT / "examples" / "kernels.py"}:add_kernel"
        signature = "*fp32:16, *fp32:16, *fp32:16, i32"
        constexprs = {{ BLOCK = [128, 256] }}
        """)
    )
    return spec


# -- 1. the README's Python build snippet, pasted into a script ----------------------------------------
SNIPPET = """\
import karchive.build
karchive.build.build_archive(karchive.build.load_spec({spec!r}), {out!r}, jobs=2, progress=False)
print("built")
"""


@needs_triton
@pytest.mark.parametrize("how", ["script", "stdin"])
def test_the_readme_build_snippet_runs_pasted_into_a_script_or_stdin(tmp_path, how):
    """No ``if __name__ == "__main__":`` guard, as pasted: the worker processes must not re-run it."""
    spec, out = two_variant_spec(tmp_path), tmp_path / "pasted.karc"
    code = SNIPPET.format(spec=str(spec), out=str(out))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KARCHIVE_CACHE_DIR": str(tmp_path / "cache")}
    if how == "script":
        (tmp_path / "build_it.py").write_text(code)
        done = subprocess.run(
            [sys.executable, "build_it.py"], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600
        )
    else:
        done = subprocess.run(
            [sys.executable, "-"], input=code, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600
        )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout == "built\n"  # once: no worker ran the script again
    assert "Traceback" not in done.stderr
    from karchive.format.reader import ArchiveReader

    assert len(ArchiveReader.from_path(str(out)).model.variants) == 2


# -- 3. an unusable build cache; 10. an output that cannot be written: one line, before compiling ------
@needs_triton
@pytest.mark.parametrize("cache", ["{tmp}/a-file", "/proc/karchive-cache"])
def test_an_unusable_build_cache_is_one_line_before_compiling(tmp_path, cache):
    (tmp_path / "a-file").write_text("not a directory")
    cache = cache.format(tmp=tmp_path)
    done = karchive(
        "build",
        str(two_variant_spec(tmp_path)),
        "-o",
        str(tmp_path / "out.karc"),
        "-j",
        "1",
        env={"KARCHIVE_CACHE_DIR": cache},
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr  # one line: no progress, no per-variant failures
    assert done.stderr.startswith(f"karchive: error: the build cache {cache}/triton-build cannot be used (")
    assert "KARCHIVE_CACHE_DIR" in done.stderr and not (tmp_path / "out.karc").exists()


@needs_triton
@pytest.mark.parametrize("out", ["/proc/x.karc", "/proc/"])
def test_an_output_on_a_special_filesystem_is_refused_before_compiling_with_the_true_reason(tmp_path, out):
    done = karchive(
        "build",
        str(two_variant_spec(tmp_path)),
        "-o",
        out,
        "-j",
        "1",
        env={"KARCHIVE_CACHE_DIR": str(tmp_path / "cache")},
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert "files cannot be created in /proc (a special filesystem" in done.stderr
    assert "does not exist" not in done.stderr
    assert not (tmp_path / "cache").exists()  # nothing compiled


def test_a_write_that_fails_in_an_existing_directory_does_not_say_it_is_missing():
    from karchive.core.fsio import atomic_write
    from karchive.errors import DestinationError

    with pytest.raises(DestinationError, match=r"files cannot be created in /proc \(a special filesystem"):
        atomic_write("/proc/karchive-x.karc", b"x")


# -- 6. diff after editing one kernel of a module -------------------------------------------------------
THREE_KERNELS = """\
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


@triton.jit
def third(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) - 1.0, mask=offs < n)
"""


@pytest.fixture(scope="module")
def three_versions(tmp_path_factory):
    """v1; v2: `second` edited in place (no line added); v3: a line added to `second`, so `third` moves."""
    tmp = tmp_path_factory.mktemp("three")
    src = tmp / "three.py"
    spec = tmp / "spec.toml"
    blocks = "".join(
        f'\n[[kernel]]\nsource = "{src}:{k}"\nsignature = "*fp32:16, i32"\nconstexprs = {{ BLOCK = [128, 256] }}\n'
        for k in ("first", "second", "third")
    )
    spec.write_text('[archive]\nname = "three"\nversion = "1"\ntargets = ["cuda:90"]\n' + blocks)
    env = {"KARCHIVE_CACHE_DIR": str(tmp / "cache")}
    texts = [
        THREE_KERNELS,
        THREE_KERNELS.replace("* 2.0", "* 3.0"),
        THREE_KERNELS.replace("* 2.0, mask=offs < n)\n", "* 2.0, mask=offs < n)\n    return\n"),
    ]
    for i, text in enumerate(texts, 1):
        src.write_text(text)
        done = karchive("build", str(spec), "-o", str(tmp / f"v{i}.karc"), "-j", "1", "--quiet", env=env, timeout=300)
        assert done.returncode == 0, done.stderr
    return tmp


@needs_triton
def test_diff_says_which_kernel_changed_and_which_only_sit_in_the_edited_module(three_versions):
    v1, v2 = str(three_versions / "v1.karc"), str(three_versions / "v2.karc")
    data = json.loads(karchive("diff", v1, v2, "--json").stdout)
    assert data["summary"]["kernels"]["changed"] == ["three:second"]
    assert data["summary"]["kernels"]["module_only"] == ["three:first", "three:third"]
    causes = {(v["kernel"], v["specialisation"]): v["cause"] for v in data["variants"]}
    assert causes[("three:second", "BLOCK=128")] == "the kernel's own code changed"
    assert causes[("three:first", "BLOCK=256")].startswith("only the module text around the kernel changed")
    text = karchive("diff", v1, v2)
    assert text.returncode == 1  # the archives differ (the stored module did)
    assert text.stdout.count("only the module text around it") == 4
    assert text.stdout.count("\n~ ") == 2  # details only for the kernel that changed, once per variant
    assert "kernels: 1 changed, 2 with only the module text around them changed" in text.stdout
    stat = karchive("diff", v1, v2, "--stat").stdout
    assert next(x for x in stat.splitlines() if x.startswith("three:first ")).endswith(
        "only the module text around it (source, provenance.build.sources)"
    )
    assert "the kernel's own code changed: " in next(x for x in stat.splitlines() if x.startswith("three:second "))
    # A line added to `second`: `third`'s text is the same, at other lines (Triton's key counts the line).
    moved = json.loads(karchive("diff", v1, str(three_versions / "v3.karc"), "--json").stdout)
    codes = {v["kernel"]: v["code"] for v in moved["variants"]}
    assert codes == {"three:first": None, "three:second": "edited", "three:third": "moved"}


# -- 7. diff | head: never "identical" when the output was cut ------------------------------------------
def test_a_diff_cut_by_head_is_141_not_identical(tmp_path):
    from hostile_factory import honest_v2

    a, b = tmp_path / "a.karc", tmp_path / "b.karc"
    a.write_bytes(honest_v2({"k": 600})[0])
    b.write_bytes(honest_v2({"k": 600}, ir=False)[0])  # every variant changed: every output far over a pipe's 64 KiB
    for argv in (["diff", a, b], ["diff", a, b, "--json"], ["diff", a, b, "--stat"], ["inspect", a, "--json"]):
        cmd = " ".join([sys.executable, "-m", "karchive.cli.main", *map(str, argv)])
        done = subprocess.run(
            ["bash", "-c", f"set -o pipefail; {cmd} | head -1"],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        if "--stat" in argv:  # two lines of table: written whole (the true answer, 1) or cut (141)
            assert done.returncode in (1, 141), done.stderr
        else:
            assert done.returncode == 141, (argv, done.returncode, done.stderr)
        assert done.stderr == ""
    assert karchive("diff", str(a), str(b)).returncode == 1  # read whole: "they differ"


# -- 8. inspect --summary honours -k; the records footer says what the records hold -------------------
@pytest.fixture(scope="module")
def wrapped_archive(tmp_path_factory):
    """An ahead-of-time build of an autotuned kernel with a heuristic below it, and a plain kernel."""
    tmp = tmp_path_factory.mktemp("wrapped")
    kernels = ROOT / "tests" / "wrapped_kernels.py"
    spec = tmp / "spec.toml"
    spec.write_text(
        textwrap.dedent(f"""\
        [archive]
        name = "wrapped"
        version = "1"
        targets = ["cuda:90"]

        [[kernel]]
        source = "{kernels}:at_over_h"
        signature = "*fp32:16, *fp32:16, i32"
        configs = [1]

        [[kernel]]
        source = "{ROOT / "examples" / "kernels.py"}:add_kernel"
        signature = "*fp32:16, *fp32:16, *fp32:16, i32"
        constexprs = {{ BLOCK = [128] }}
        """)
    )
    out = tmp / "w.karc"
    done = karchive(
        "build",
        str(spec),
        "-o",
        str(out),
        "-j",
        "1",
        "--quiet",
        env={"KARCHIVE_CACHE_DIR": str(tmp / "cache")},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return out


@needs_triton
def test_inspect_summary_honours_k_and_says_did_you_mean(wrapped_archive):
    done = karchive("inspect", "--summary", str(wrapped_archive), "-k", "nothere")
    assert done.returncode == 2 and done.stdout == "" and "no variant of wrapped 1 matches -k nothere" in done.stderr
    near = karchive("inspect", "--summary", str(wrapped_archive), "-k", "add_kernell", "--json")
    assert near.returncode == 2 and "did you mean 'kernels:add_kernel'?" in json.loads(near.stdout)["message"]
    assert "did you mean 'kernels:add_kernel'?" in karchive("inspect", str(wrapped_archive), "-k", "ad_kernel").stderr
    assert (
        "did you mean 'kernels:add_kernel'?"
        in karchive("diff", str(wrapped_archive), str(wrapped_archive), "-k", "add_kernl").stderr
    )
    one = json.loads(karchive("inspect", "--summary", str(wrapped_archive), "-k", "add_kernel", "--json").stdout)
    assert [k["kernel"] for k in one["kernels"]] == ["kernels:add_kernel"] and one["shown"] == 1
    assert "autotune" not in one and "heuristics" not in one  # add_kernel has no records
    text = karchive("inspect", "--summary", str(wrapped_archive), "-k", "add_kernel").stdout
    assert "1 kernel, targets cuda:90" in text and "at_over_h" not in text


@needs_triton
@pytest.mark.parametrize("summary", [[], ["--summary"]])
def test_the_records_footer_says_what_an_ahead_of_time_build_holds(wrapped_archive, summary):
    out = karchive("inspect", str(wrapped_archive), *summary).stdout
    assert "0 chosen configs" not in out and "0 recorded cases" not in out
    assert (
        "autotune records: 2 configs, none chosen yet (each autotune key is tuned on the device at "
        "its first launch), for wrapped_kernels:at_over_h"
    ) in out
    assert "heuristics records: 1 stored expression computing EVEN for wrapped_kernels:at_over_h" in out
    plain = karchive("inspect", str(wrapped_archive), "-k", "add_kernel", *summary).stdout
    assert "autotune records" not in plain and "heuristics records" not in plain  # -k: the shown kernels' records


# -- 9. a signature missing one parameter: the missing one is named, the types never shift ---------------
ADD = ["x_ptr", "y_ptr", "out_ptr", "n_elements", "BLOCK"]


@pytest.mark.parametrize(
    "sig, table, says",
    [
        ("*fp32:16, *fp32:16, i32, 1024", {}, "one of x_ptr, y_ptr or out_ptr is missing"),
        # read as the non-constexpr parameters this was silent: out_ptr typed i32, n_elements the constant 1024
        ("*fp32:16, *fp32:16, i32, 1024", {"BLOCK": 1024}, "one of x_ptr, y_ptr or out_ptr is missing"),
        (
            "*fp32:16, *fp32:16, i32",
            {"BLOCK": 1024},
            "3 entries for the 4 parameters the constexprs table does not give",
        ),
        ("*fp32:16, *fp32:16, *fp32:16, 1024", {}, "n_elements is missing"),
    ],
)
def test_a_signature_missing_a_parameter_names_it(sig, table, says):
    from karchive.errors import SignatureError
    from karchive.producer.compile.signature import resolve

    with pytest.raises(SignatureError) as err:
        resolve(ADD, ["BLOCK"], sig, table, "add_kernel")
    assert says in str(err.value) and "(BLOCK): no type or constexpr value given" not in str(err.value)
    # what is complete still resolves, either way
    assert resolve(ADD, ["BLOCK"], "*fp32:16, *fp32:16, *fp32:16, i32", {"BLOCK": 64}).constexprs == {"BLOCK": 64}
    assert resolve(ADD, ["BLOCK"], "*fp32:16, *fp32:16, *fp32:16, i32, 64").constexprs == {"BLOCK": 64}
    assert resolve(["x_ptr", "bias_ptr", "n", "BLOCK"], ["BLOCK"], "*fp32:16, None, i32", {"BLOCK": 64}).constexprs == {
        "bias_ptr": None,
        "BLOCK": 64,
    }  # None for an optional pointer is not a shifted constant


@needs_triton
def test_compile_and_build_name_the_missing_parameter_before_compiling(tmp_path):
    kernels = str(ROOT / "examples" / "kernels.py")
    env = {"KARCHIVE_CACHE_DIR": str(tmp_path / "cache")}
    done = karchive(
        "compile",
        kernels,
        "-n",
        "add_kernel",
        "-s",
        "*fp32:16, *fp32:16, i32, 1024",
        "-t",
        "cuda:90",
        "-o",
        str(tmp_path / "x.karc"),
        env=env,
    )
    assert done.returncode == 2 and "one of x_ptr, y_ptr or out_ptr is missing" in done.stderr
    spec = tmp_path / "spec.toml"
    spec.write_text(
        textwrap.dedent(f"""\
        [archive]
        name = "shift"
        version = "1"
        targets = ["cuda:90"]

        [[kernel]]
        source = "{kernels}:add_kernel"
        signature = "*fp32:16, *fp32:16, i32, 1024"
        constexprs = {{ BLOCK = [1024] }}
        """)
    )
    done = karchive("build", str(spec), "-o", str(tmp_path / "y.karc"), env=env)
    assert done.returncode == 2 and "one of x_ptr, y_ptr or out_ptr is missing" in done.stderr
    assert "Unsupported ptr type" not in done.stderr and not (tmp_path / "y.karc").exists()
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]  # nothing compiled


# -- 11. smaller: verify NAME@V --trust after signing only the local file ---------------------------------
def test_verify_of_a_published_version_signed_only_locally_says_where_to_sign(tmp_path):
    pytest.importorskip("cryptography")
    from hostile_factory import honest_v2
    from trust_support import make_keys, write_policy

    keys = make_keys()
    key = tmp_path / "ci.key"
    key.write_bytes(keys["ci"].to_pem())
    policy = write_policy(tmp_path / "policy.toml", keys)
    arc = tmp_path / "hostile.karc"
    arc.write_bytes(honest_v2()[0])
    env = {"KARCHIVE_REGISTRY": str(tmp_path / "reg"), "KARCHIVE_CACHE_DIR": str(tmp_path / "cache")}
    assert karchive("publish", str(arc), "--create-registry", env=env).returncode == 0
    signed = karchive("sign", str(arc), "--key", str(key), env=env)
    assert signed.returncode == 0, signed.stderr
    local = karchive("verify", str(arc), "--trust", str(policy), env=env)
    assert local.returncode == 0, local.stdout + local.stderr
    done = karchive("verify", "hostile@2", "--trust", str(policy), env=env)
    assert done.returncode == 1 and "unsigned" in done.stdout
    assert "karchive sign hostile@2 --key KEY" in done.stdout and "publish ARCHIVE --sign KEY" in done.stdout
    report = json.loads(karchive("verify", "hostile@2", "--trust", str(policy), "--json", env=env).stdout)
    assert "karchive sign hostile@2 --key KEY" in report["trust"]["hint"]


def test_the_serve_miss_reason_blames_the_release_only_when_the_releases_differ():
    from types import SimpleNamespace

    from karchive.serve.identity import CACHE_KEY, LiveIdentity, find

    def archive(built_with: str) -> SimpleNamespace:
        v = SimpleNamespace(provenance=SimpleNamespace(source_key="a" * 64, triton_version=built_with))
        return SimpleNamespace(name="arc", version="1", kernels=lambda: ["m:k"], variants=lambda _name: [v])

    live = LiveIdentity("m:k", "k", "b" * 64, CACHE_KEY, "3.9.0")
    _, same = find(archive("3.9.0"), live)
    assert "between releases" not in same[0] and "built with this process's Triton 3.9.0: the kernel's code" in same[0]
    _, other = find(archive("3.6.0"), live)
    assert (
        "built with Triton 3.6.0, this process runs Triton 3.9.0: Triton's source keys differ between releases"
        in other[0]
    )


def test_publish_to_a_mistyped_registry_is_refused_not_created(tmp_path):
    from hostile_factory import honest_v2

    arc = tmp_path / "h.karc"
    arc.write_bytes(honest_v2()[0])
    env = {"KARCHIVE_CACHE_DIR": str(tmp_path / "cache"), "XDG_DATA_HOME": str(tmp_path / "data")}
    typo = tmp_path / "regsitry"
    done = karchive("publish", str(arc), "--registry", str(typo), env=env)
    assert done.returncode == 2 and "holds no karchive registry" in done.stderr and "--create-registry" in done.stderr
    assert not typo.exists()
    done = karchive("publish", str(arc), "--registry", str(tmp_path / "registry"), "--create-registry", env=env)
    assert done.returncode == 0, done.stderr
    again = karchive("publish", str(arc), "--registry", str(tmp_path / "registry"), env=env)
    assert again.returncode == 0 and "already published" in again.stdout  # an existing one needs no flag
    # the default local registry (a fresh machine's README commands) is made by its first publish
    first = karchive("publish", str(arc), env=env)
    assert first.returncode == 0 and str(tmp_path / "data" / "karchive" / "registry") in first.stdout


@pytest.mark.parametrize(
    "argv",
    [
        ["build", "{root}/examples/build.toml", "-o", "{tmp}/x.karc"],
        [
            "compile",
            "{root}/examples/kernels.py",
            "-n",
            "add_kernel",
            "-s",
            "*fp32:16, *fp32:16, *fp32:16, i32, 1024",
            "-t",
            "cuda:90",
            "-o",
            "{tmp}/x.karc",
        ],
    ],
)
def test_building_without_triton_names_the_producer_extra(tmp_path, argv):
    """Without the producer extra: one line naming it, not one "No module named 'triton'" per variant."""
    argv = [a.format(root=ROOT, tmp=tmp_path) for a in argv]
    code = (
        "import sys; sys.modules['triton'] = None  # as on a consumer-only install\n"
        "from karchive.cli.main import main; sys.exit(main(sys.argv[1:]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT), "KARCHIVE_CACHE_DIR": str(tmp_path / "c")},
    )
    assert done.returncode == 2
    assert done.stderr == (
        "karchive: error: compiling kernels needs Triton, which is not installed here: "
        "pip install 'karchive[producer]'\n"
    )


def test_doctor_is_not_ok_where_no_gpu_backend_is_usable():
    hidden = {"CUDA_VISIBLE_DEVICES": "", "HIP_VISIBLE_DEVICES": "", "ROCR_VISIBLE_DEVICES": ""}
    done = karchive("doctor", "--json", env=hidden, timeout=300)
    report = json.loads(done.stdout)
    assert done.returncode == 1 and report["ok"] is False and report["gpus"] == 0
    text = karchive("doctor", env=hidden, timeout=300)
    assert text.returncode == 1
    assert "NOT OK        no GPU backend is usable: archives cannot launch on this machine" in text.stdout
    # --no-probe asks no driver: it cannot say, so it does not say no
    quick = karchive("doctor", "--no-probe", "--json", env=hidden)
    assert quick.returncode == 0 and json.loads(quick.stdout)["gpus"] is None


@needs_triton
def test_triton_cache_dir_in_the_shell_is_ignored_with_one_warning(tmp_path):
    """spec/BUILD.md, "Environment": set in the shell, any controlled variable is ignored with one warning."""
    env = {"KARCHIVE_CACHE_DIR": str(tmp_path / "cache"), "TRITON_CACHE_DIR": str(tmp_path / "triton")}
    done = karchive(
        "build", str(two_variant_spec(tmp_path)), "-o", str(tmp_path / "o.karc"), "-j", "1", env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr
    warnings = [x for x in done.stderr.splitlines() if x.startswith("warning: ignoring ")]
    assert len(warnings) == 1 and f"TRITON_CACHE_DIR={tmp_path / 'triton'}" in warnings[0]
    assert "<karchive cache>/triton-build ($KARCHIVE_CACHE_DIR)" in warnings[0]
    assert not (tmp_path / "triton").exists()  # ignored indeed


@needs_triton
def test_an_interrupted_compile_leaves_no_triton_temporaries(tmp_path, monkeypatch):
    """Ctrl-C while ptxas runs: Triton's PTX/log temporaries (it removes them only on success) and its
    cache's tmp.pid_ directories are gone afterwards."""
    import tempfile

    import triton.backends.nvidia.compiler as nv

    from karchive.producer.compile.aot import VariantRequest, compile_variant

    system_tmp = tmp_path / "systmp"
    system_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(system_tmp))
    monkeypatch.setenv("TMPDIR", str(system_tmp))

    real_run = nv.subprocess.run
    ptxas_ran = []

    def interrupted(cmd, *a, **k):
        if any(str(c).startswith("--gpu-name=") for c in cmd):  # ptxas compiling the PTX Triton wrote
            ptxas_ran.append(cmd)
            raise KeyboardInterrupt
        return real_run(cmd, *a, **k)

    monkeypatch.setattr(nv.subprocess, "run", interrupted)
    req = VariantRequest(
        str(ROOT / "examples" / "kernels.py") + ":add_kernel",
        "*fp32:16, *fp32:16, *fp32:16, i32",
        "cuda:90",
        {"BLOCK": 64},
        {"num_warps": 4},
    )
    with pytest.raises(KeyboardInterrupt):
        compile_variant(req, cache_dir=str(tmp_path / "cache"))
    assert ptxas_ran
    assert list(system_tmp.iterdir()) == []
    assert not list((tmp_path / "cache").rglob("tmp.pid_*"))
    assert tempfile.tempdir == str(system_tmp)  # restored


# -- tools/venv.sh says what its silent first install is doing --------------------------------------------
def test_the_first_install_says_what_it_does_and_a_rerun_says_nothing(tmp_path):
    import shutil

    repo = tmp_path / "repo"
    (repo / "tools").mkdir(parents=True)
    (repo / "karchive" / "runtime").mkdir(parents=True)
    shutil.copy(ROOT / "tools" / "venv.sh", repo / "tools" / "venv.sh")
    shutil.copy(ROOT / "pyproject.toml", repo / "pyproject.toml")
    shutil.copy(ROOT / "karchive" / "runtime" / "_fastlaunch.c", repo / "karchive" / "runtime" / "_fastlaunch.c")
    shutil.copytree(ROOT / "karchive" / "runtime" / "c-ext", repo / "karchive" / "runtime" / "c-ext")
    # `python3 -m venv` made by a stand-in: a venv whose python succeeds at every `-m pip` (nothing installed)
    fakebin = tmp_path / "bin"
    fakebin.mkdir()
    (fakebin / "python3").write_text(
        textwrap.dedent(f"""\
        #!/bin/sh
        if [ "$1" = -m ] && [ "$2" = venv ]; then
          mkdir -p "$3/bin"
          printf '#!/bin/sh\\nif [ "$1" = -m ] && [ "$2" = pip ]; then exit 0; fi\\nexec {sys.executable} "$@"\\n' > "$3/bin/python"
          chmod +x "$3/bin/python"
          exit 0
        fi
        exec {sys.executable} "$@"
        """)
    )
    (fakebin / "python3").chmod(0o755)

    def source() -> subprocess.CompletedProcess:
        return subprocess.run(
            ["bash", "-c", f'set -euo pipefail; cd {repo}; source tools/venv.sh "producer,cli"'],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PATH": f"{fakebin}:{os.environ['PATH']}", "KARCHIVE_VENV": str(repo / "venv")},
        )

    first = source()
    assert first.returncode == 0, first.stderr
    assert first.stderr.startswith(f"tools/venv.sh: first install of karchive[cli,producer] into {repo / 'venv'}: ")
    assert "a few minutes" in first.stderr and len(first.stderr.splitlines()) == 1
    again = source()  # the record is current: no pip, and nothing said
    assert again.returncode == 0 and again.stderr == ""
    (repo / "pyproject.toml").write_text((repo / "pyproject.toml").read_text() + "\n")  # an edit: a reinstall, said
    edited = source()
    assert (
        edited.stderr.startswith("tools/venv.sh: installing karchive[cli,producer]") and edited.stderr.count("\n") == 1
    )


# -- the demo's rerun: no build when nothing the build reads changed ----------------------------------------
def test_build_inputs_digest_changes_with_what_a_build_reads(tmp_path):
    import importlib.util
    import shutil

    spec = importlib.util.spec_from_file_location("build_inputs", ROOT / "tools" / "build_inputs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    shutil.copy(ROOT / "examples" / "build.toml", tmp_path / "build.toml")
    shutil.copy(ROOT / "examples" / "kernels.py", tmp_path / "kernels.py")
    first = mod.inputs_digest(tmp_path / "build.toml")
    assert mod.inputs_digest(tmp_path / "build.toml") == first
    (tmp_path / "kernels.py").write_text((tmp_path / "kernels.py").read_text() + "\n# edited\n")
    edited = mod.inputs_digest(tmp_path / "build.toml")
    (tmp_path / "helper.py").write_text("X = 1\n")  # a helper module beside the kernels counts too
    assert len({first, edited, mod.inputs_digest(tmp_path / "build.toml")}) == 3


def test_the_demo_skips_a_build_whose_inputs_are_unchanged(tmp_path):
    text = (ROOT / "examples" / "demo.sh").read_text()
    start = text.index('inputs=$("$PY" tools/build_inputs.py examples/build.toml)')
    end = text.index("\nfi\n", start) + 4
    snippet = text[start:end].replace("out/", f"{tmp_path}/")
    recorder = tmp_path / "karchive"
    recorder.write_text(f'#!/bin/sh\necho "$*" >> {tmp_path}/calls\ntouch {tmp_path}/examples.karc\n')
    recorder.chmod(0o755)

    def run() -> subprocess.CompletedProcess:
        return subprocess.run(
            ["bash", "-c", "set -euo pipefail\n" + snippet],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={**os.environ, "K": str(recorder), "PY": sys.executable},
            timeout=60,
        )

    assert run().returncode == 0 and len((tmp_path / "calls").read_text().splitlines()) == 1
    again = run()
    assert again.returncode == 0 and "up to date" in again.stdout
    assert len((tmp_path / "calls").read_text().splitlines()) == 1  # not rebuilt
    (tmp_path / "examples.karc").unlink()  # no archive: built again
    assert run().returncode == 0 and len((tmp_path / "calls").read_text().splitlines()) == 2


# -- 2. the kernel, built ahead of time: EVEN_N is computed from the call, never taken from it ---------
EVEN_KERNEL = """\
import triton
import triton.language as tl


@triton.heuristics({"EVEN_N": lambda args: args["n"] % args["BLOCK"] == 0})
@triton.jit
def copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr, EVEN_N: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN_N:
        tl.store(y_ptr + offs, tl.load(x_ptr + offs))
    else:
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)
"""


@needs_triton
def test_a_heuristics_value_passed_never_picks_the_variant_and_the_missing_argument_is_named(tmp_path):
    import karchive as ka
    from karchive.errors import NoMatchingVariantError

    (tmp_path / "evenk.py").write_text(EVEN_KERNEL)
    spec = tmp_path / "spec.toml"
    spec.write_text(
        textwrap.dedent(f"""\
        [archive]
        name = "even"
        version = "1"
        targets = ["cuda:90"]

        [[kernel]]
        source = "{tmp_path / "evenk.py"}:copy"
        signature = "*fp32:16, *fp32:16, i32"
        constexprs = {{ BLOCK = [1024] }}
        """)
    )
    done = karchive(
        "build",
        str(spec),
        "-o",
        str(tmp_path / "e.karc"),
        "-j",
        "1",
        "--quiet",
        env={"KARCHIVE_CACHE_DIR": str(tmp_path / "cache")},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    k = ka.open(str(tmp_path / "e.karc")).kernel("copy")
    x, y = 0x7F00_0000_1000, 0x7F00_0000_9000
    # BLOCK left out: Triton's heuristic fails on args["BLOCK"]; karchive names BLOCK, not EVEN_N
    with pytest.raises(
        NoMatchingVariantError, match=r"missing argument BLOCK: @triton.heuristics computes EVEN_N"
    ) as e:
        k.select(x, y, 1000, device="cuda:90")
    assert e.value.param == "BLOCK" and "pass EVEN_N" not in str(e.value)
    # EVEN_N=True with n=1000: computed (False), as Triton computes it: the masked variant, never the unmasked one
    assert k.select(x, y, 1000, BLOCK=1024, EVEN_N=True, device="cuda:90").constexprs == {
        "BLOCK": 1024,
        "EVEN_N": False,
    }
    assert k.select(x, y, 2048, BLOCK=1024, EVEN_N=False, device="cuda:90").constexprs == {
        "BLOCK": 1024,
        "EVEN_N": True,
    }
