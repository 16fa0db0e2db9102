"""Issue 15, the first hour of a new user: each rough edge of the CLI found in a fresh-machine trial,
reproduced, plus its siblings. Real Triton compiles (no GPU needed); commands whose output is printed
by C++ (ptxas, LLVM, MLIR) run in a child process so every byte they print is seen."""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest
from support import EXAMPLES, ROOT, needs_triton

from karchive.cli.main import build_parser, main

KERNELS = str(EXAMPLES / "kernels.py")
ADD_SIG = "*fp32:16, *fp32:16, *fp32:16, i32, 1024"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def child(
    *argv: str, cwd: pathlib.Path | None = None, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    """``karchive ARGV`` in a fresh process: what a user's terminal would show, C++ output included."""
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "karchive.cli.main", *argv],
        capture_output=True,
        text=True,
        cwd=str(cwd or ROOT),
        env=full_env,
        timeout=timeout,
    )


def write_spec(directory: pathlib.Path, body: str, name: str = "spec.toml") -> pathlib.Path:
    path = directory / name
    path.write_text(textwrap.dedent(body))
    return path


def add_spec(
    directory: pathlib.Path, *, targets: str = '["cuda:90"]', extra: str = "", constexprs: str = "{ BLOCK = [256] }"
) -> pathlib.Path:
    return write_spec(
        directory,
        f"""
        [archive]
        name = "trial"
        version = "0.1.0"
        targets = {targets}

        [[kernel]]
        source = "{KERNELS}:add_kernel"
        signature = "*fp32:16, *fp32:16, *fp32:16, i32"
        constexprs = {constexprs}
        {extra}
        """,
    )


BROKEN_KERNEL = """
import triton
import triton.language as tl


@triton.jit
def broken_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * not_defined_anywhere, mask=offs < n)
"""


# -- 2. extract -C into something that is not a directory --------------------------------------------
def test_extract_into_a_file_is_one_clear_error_and_writes_nothing(examples_archive, tmp_path, capsys):
    existing = tmp_path / "existing_file"
    existing.write_text("keep me")
    code, _, err = run(capsys, "extract", str(examples_archive), "-C", str(existing))
    assert code == 2 and "is a file" in err and "Traceback" not in err
    assert existing.read_text() == "keep me"
    code, _, err = run(capsys, "extract", str(examples_archive), "-C", str(existing / "below"))
    assert code == 2 and f"{existing} is a file, not a directory" in err
    code, out, _ = run(capsys, "extract", str(examples_archive), "-C", str(tmp_path / "new" / "deeper"))
    assert code == 0 and (tmp_path / "new" / "deeper" / "karchive" / "manifest.json").is_file()
    assert re.search(r"extracted \d+ members into", out)


# -- 3. build/compile -o: the destination is checked before anything compiles -------------------------
@needs_triton
def test_build_checks_the_destination_before_compiling(tmp_path, capsys):
    (tmp_path / "broken.py").write_text(BROKEN_KERNEL)
    spec = write_spec(
        tmp_path,
        """
        [archive]
        name = "b"
        version = "1"
        targets = ["cuda:90"]
        [[kernel]]
        source = "broken.py:broken_kernel"
        signature = "*fp32:16, i32"
        constexprs = { BLOCK = [64] }
        """,
    )
    afile = tmp_path / "afile"
    afile.write_text("")
    # The kernel cannot compile: an error about the destination proves nothing was compiled first.
    code, _, err = run(capsys, "build", str(spec), "-o", str(afile / "x.karc"))
    assert code == 2 and "afile is a file, not a directory" in err and "[1/1]" not in err
    code, _, err = run(capsys, "build", str(spec), "-o", str(tmp_path))  # an existing directory, no name: fine,
    assert "directory" not in err and "not_defined_anywhere" in err  # ... it only then fails to compile


@needs_triton
def test_missing_parents_are_created_and_a_directory_gets_name_version(tmp_path, capsys):
    out = tmp_path / "missing" / "dir" / "x.karc"
    code, stdout, _ = run(capsys, "build", str(add_spec(tmp_path)), "-o", str(out), "-j", "1", "--quiet")
    assert code == 0 and out.is_file() and f"wrote {out}" in stdout
    code, stdout, _ = run(
        capsys,
        "compile",
        KERNELS,
        "-n",
        "add_kernel",
        "-s",
        ADD_SIG,
        "-t",
        "cuda:90",
        "-o",
        str(tmp_path / "fresh") + "/",
    )
    assert code == 0 and (tmp_path / "fresh" / "add_kernel-0.0.0.karc").is_file()


@needs_triton
def test_producer_api_checks_the_destination_first(tmp_path):
    from karchive.errors import DestinationError
    from karchive.producer.build.pipeline import build_archive
    from karchive.producer.build.spec_file import BuildSpec
    from karchive.producer.compile.aot import VariantRequest

    (tmp_path / "broken.py").write_text(BROKEN_KERNEL)
    afile = tmp_path / "afile"
    afile.write_text("")
    req = VariantRequest(str(tmp_path / "broken.py") + ":broken_kernel", "*fp32:16, i32", "cuda:90", {"BLOCK": 64})
    with pytest.raises(DestinationError) as info:  # not BuildError: the broken kernel was never compiled
        build_archive(BuildSpec("b", "1", [req]), afile / "x.karc", progress=False)
    assert isinstance(info.value, OSError) and info.value.path == str(afile / "x.karc")
    with pytest.raises(DestinationError, match="is a directory"):
        build_archive(BuildSpec("b", "1", [req]), tmp_path, progress=False)


# -- 4. compile failures: no --keep-going hint where it cannot help -----------------------------------
@needs_triton
def test_compile_failure_does_not_suggest_a_flag_compile_lacks(tmp_path, capsys):
    (tmp_path / "broken.py").write_text(BROKEN_KERNEL)
    code, _, err = run(
        capsys,
        "compile",
        str(tmp_path / "broken.py"),
        "-n",
        "broken_kernel",
        "-s",
        "*fp32:16, i32, 64",
        "-t",
        "cuda:90",
        "-t",
        "cuda:80",
        "-o",
        str(tmp_path / "b.karc"),
    )
    assert code == 2 and "--keep-going" not in err
    assert "2 of 2 targets failed to compile; nothing written" in err and "not_defined_anywhere" in err
    assert not (tmp_path / "b.karc").exists()


@needs_triton
def test_build_hint_only_when_something_built(tmp_path, capsys):
    (tmp_path / "broken.py").write_text(BROKEN_KERNEL)
    all_broken = write_spec(
        tmp_path,
        """
        [archive]
        name = "b"
        version = "1"
        targets = ["cuda:90"]
        [[kernel]]
        source = "broken.py:broken_kernel"
        signature = "*fp32:16, i32"
        constexprs = { BLOCK = [64] }
        """,
    )
    code, _, err = run(capsys, "build", str(all_broken), "-o", str(tmp_path / "b.karc"), "--quiet", "-j", "1")
    assert code == 2 and "--keep-going" not in err and "1 of 1 variant failed" in err
    code, _, err = run(capsys, "build", str(all_broken), "-o", str(tmp_path / "b.karc"), "--quiet", "--keep-going")
    assert code == 2 and "nothing to pack" in err and "not_defined_anywhere" in err  # the reasons, not only the verdict
    mixed = write_spec(
        tmp_path,
        f"""
        [archive]
        name = "m"
        version = "1"
        targets = ["cuda:90"]
        [[kernel]]
        source = "broken.py:broken_kernel"
        signature = "*fp32:16, i32"
        constexprs = {{ BLOCK = [64] }}
        [[kernel]]
        source = "{KERNELS}:add_kernel"
        signature = "*fp32:16, *fp32:16, *fp32:16, i32"
        constexprs = {{ BLOCK = [256] }}
        """,
        "mixed.toml",
    )
    code, _, err = run(capsys, "build", str(mixed), "-o", str(tmp_path / "m.karc"), "--quiet", "-j", "1")
    assert code == 2 and "(use --keep-going to pack the rest)" in err


# -- 7. targets the toolchain cannot build: one line, before anything compiles --------------------------
@needs_triton
@pytest.mark.parametrize(
    "target, says",
    [
        ("cuda:999", "has no sm_999a; CUDA targets it can build: "),
        ("cuda:88", "has no sm_88"),  # the sm_80 ptxas lacks it; LLVM would abort the whole process
        ("hip:gfx9999", "its LLVM knows no AMD GPU 'gfx9999'"),
        ("hip:gfx1030", "AMD backend (unsupported target: 'gfx1030')"),  # LLVM knows it, Triton's AMD backend does not
        ("rocm:gfx942", "AMD targets are spelled 'hip:gfx942'"),
    ],
)
def test_unsupported_target_is_one_line(tmp_path, target, says):
    r = child(
        "compile",
        KERNELS,
        "-n",
        "add_kernel",
        "-s",
        ADD_SIG,
        "-t",
        "cuda:90",
        "-t",
        target,
        "-o",
        str(tmp_path / "x.karc"),
    )
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.returncode == 2 and len(lines) == 1, r.stderr[-3000:]
    assert lines[0].startswith("karchive: error: ") and says in lines[0]
    assert not (tmp_path / "x.karc").exists()


@needs_triton
def test_build_refuses_an_unknown_target_before_compiling(tmp_path):
    spec = add_spec(tmp_path, targets='["cuda:90", "cuda:999"]')
    r = child("build", str(spec), "-o", str(tmp_path / "x.karc"))
    assert r.returncode == 2 and "cuda:999" in r.stderr and "[1/" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


# -- 8. a directory given as the archive ---------------------------------------------------------------
def test_inspect_a_directory_says_so(tmp_path, capsys):
    code, _, err = run(capsys, "inspect", str(tmp_path))
    assert code == 2 and "is a directory, not an archive" in err and "registry" not in err


# -- 10. the build summary counts what the archive holds -----------------------------------------------
@needs_triton
def test_duplicate_variants_are_compiled_once_and_counted_once(tmp_path, capsys):
    spec = add_spec(tmp_path, targets='["cuda:90", "cuda:90"]')
    out = tmp_path / "dup.karc"
    code, stdout, err = run(capsys, "build", str(spec), "-o", str(out), "-j", "1")
    assert code == 0 and "listed 2 times; it is compiled once" in err
    assert err.count("[1/1] ok") == 1 and "built 1 of 1 variant in" in stdout
    assert "1 variant\n" in stdout or stdout.rstrip().count(" 1 variant") >= 1
    info = json.loads(run(capsys, "inspect", str(out), "--json")[1])
    assert len(info["variants"]) == 1


@needs_triton
def test_summary_counts_distinct_keys(tmp_path):
    """Requests that differ in nothing compile to one key: the summary says 1 (the archive holds 1)."""
    from karchive.cli.build_cmds import _summary
    from karchive.format.reader import ArchiveReader
    from karchive.producer.build.pipeline import build_archive
    from karchive.producer.build.spec_file import BuildSpec
    from karchive.producer.compile.aot import VariantRequest

    req = lambda: VariantRequest(  # noqa: E731
        KERNELS + ":add_kernel",
        "*fp32:16, *fp32:16, *fp32:16, i32",
        "cuda:90",
        {"BLOCK": 128},
    )
    out = tmp_path / "same.karc"
    result = build_archive(BuildSpec("same", "1", [req(), req()]), out, jobs=1, progress=False)
    summary = _summary(result, str(out), 2)
    held = len(ArchiveReader.from_path(out).manifest["variants"])
    assert summary["built"] == held == 1 and summary["duplicates"] == 1
    assert summary["per_kernel_target"] == [{"kernel": "kernels:add_kernel", "target": "cuda:90", "variants": 1}]


# -- 11. a constexpr typo names the unknown key --------------------------------------------------------
@needs_triton
def test_constexpr_typo_is_named_with_a_suggestion(tmp_path, capsys):
    spec = add_spec(tmp_path, constexprs="{ BLOCKK = [256] }")
    code, _, err = run(capsys, "build", str(spec), "-o", str(tmp_path / "x.karc"))
    assert code == 2 and "unknown constexpr 'BLOCKK' (did you mean 'BLOCK'?)" in err and "[1/" not in err
    code, _, err = run(
        capsys,
        "compile",
        KERNELS,
        "-n",
        "add_kernel",
        "-s",
        "*fp32:16, *fp32:16, *fp32:16, i32, x",
        "-t",
        "cuda:90",
        "-o",
        str(tmp_path / "y.karc"),
    )
    assert code == 2 and "Traceback" not in err


# -- 13. NAME@VERSION with --registry / --cache-dir -----------------------------------------------------
def test_inspect_extract_export_take_registry_and_cache_dir(examples_archive, tmp_path, capsys, monkeypatch):
    from karchive.registry import Registry

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    for var in ("KARCHIVE_REGISTRY", "KARCHIVE_CACHE_DIR", "KARCHIVE_LOCKFILE"):
        monkeypatch.delenv(var, raising=False)
    reg = tmp_path / "reg"
    Registry(str(reg), cache=str(tmp_path / "c0")).publish(examples_archive)
    cache = tmp_path / "mycache"
    code, out, _ = run(
        capsys, "inspect", "examples@0.1.0", "--registry", str(reg), "--cache-dir", str(cache), "-k", "add_kernel"
    )
    assert code == 0 and "examples 0.1.0" in out and cache.is_dir() and any(cache.rglob("*"))
    code, out, _ = run(capsys, "verify", "examples@0.1.0", "--registry", str(reg), "--cache-dir", str(cache))
    assert code == 0 and out.startswith("OK examples@0.1.0")
    code, out, _ = run(capsys, "extract", "examples@0.1.0", "--registry", str(reg), "-C", str(tmp_path / "x"))
    assert code == 0 and (tmp_path / "x" / "karchive" / "manifest.json").is_file()
    code, out, _ = run(
        capsys,
        "export-triton-cache",
        "examples@0.1.0",
        "--registry",
        str(reg),
        "--cache-dir",
        str(tmp_path / "tc"),
        "--json",
    )
    assert json.loads(out)["archive"] == "examples@0.1.0"
    code, _, err = run(capsys, "inspect", "examples@0.1.0")  # the default (empty, isolated) registry
    assert code == 2 and "no archive named 'examples'" in err


# -- 14. progress lines name parameters as inspect does; the bar shows the target ------------------------
@needs_triton
def test_progress_lines_use_parameter_names(tmp_path, capsys):
    spec = write_spec(
        tmp_path,
        f"""
        [archive]
        name = "s"
        version = "1"
        targets = ["cuda:90"]
        [[kernel]]
        source = "{EXAMPLES / "kernels.py"}:scale_kernel"
        signature = "*fp32:16, *fp32:16, i32, i32:1, fp32"
        constexprs = {{ BLOCK = [1024] }}
        """,
    )
    code, _, err = run(capsys, "build", str(spec), "-o", str(tmp_path / "s.karc"), "-j", "1")
    assert code == 0 and "scale_kernel[cuda:90](stride==1,BLOCK=1024)" in err and "arg3" not in err
    code, out, _ = run(capsys, "inspect", str(tmp_path / "s.karc"))
    assert "stride==1 BLOCK=1024" in out


@needs_triton
def test_progress_bar_on_a_terminal_shows_the_target(tmp_path):
    """rich read "[cuda:90]" in a label as a style tag and dropped it; in a real pseudo-terminal it shows."""
    import pty

    master, slave = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "160", "TERM": "xterm"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "karchive.cli.main",
            "build",
            str(add_spec(tmp_path)),
            "-o",
            str(tmp_path / "t.karc"),
            "-j",
            "1",
        ],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env,
    )
    os.close(slave)
    seen = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    os.close(master)
    assert proc.wait(timeout=300) == 0
    text = seen.decode("utf-8", "replace")
    assert "add_kernel[cuda:90](BLOCK=256)" in text, text[-2000:]


# -- 15. filters that match nothing --------------------------------------------------------------------
@pytest.mark.parametrize(
    "args, says",
    [
        (
            ["-k", "nosuch"],
            "matches -k nosuch; it has kernels kernels:add_kernel, kernels:matmul_kernel, kernels:scale_kernel, "
            "kernels:softmax_kernel",
        ),
        (["-t", "cuda:75"], "matches -t cuda:75; it has kernels"),
        (["--key", "ffffffff"], "matches --key ffffffff"),
    ],
)
def test_filters_matching_nothing_say_what_exists(examples_archive, capsys, args, says):
    # A filter naming nothing is a mistake (exit 2, as in diff: one exit-code table, docs/cli.md).
    code, out, err = run(capsys, "inspect", str(examples_archive), *args)
    assert code == 2 and says in err and "targets cuda:80, cuda:90, hip:gfx942" in err and out == ""
    code, out, err = run(capsys, "inspect", str(examples_archive), *args, "--json")
    assert code == 2 and says in json.loads(out)["message"] and json.loads(out)["error"] == "KarchiveError"


def test_target_filters_are_spelled_as_archives_spell_them(examples_archive, capsys):
    code, out, _ = run(capsys, "inspect", str(examples_archive), "-t", "CUDA:sm_90", "-k", "add_kernel")
    assert code == 0 and out.count("add_kernel  cuda:90") == 2 and "2 shown" in out


def test_export_with_an_unknown_kernel_names_the_kernels(examples_archive, tmp_path, capsys):
    code, _, err = run(
        capsys, "export-triton-cache", str(examples_archive), "--cache-dir", str(tmp_path / "tc"), "-k", "nosuch"
    )
    assert code == 2 and "has no kernel 'nosuch'; it has: kernels:add_kernel" in err and not (tmp_path / "tc").exists()


# -- 16. counts that cannot be right -------------------------------------------------------------------
@pytest.mark.parametrize(
    "argv, says",
    [
        (["build", "x.toml", "-o", "x.karc", "-j", "0"], "-j/--jobs: must be at least 1, got 0"),
        (["build", "x.toml", "-o", "x.karc", "-j", "-3"], "-j/--jobs: must be at least 1, got -3"),
        (["build", "x.toml", "-o", "x.karc", "-j", "many"], "expected a whole number, got 'many'"),
        (["rebuild", "--check", "x.karc", "-j", "0"], "-j/--jobs: must be at least 1"),
        (["compile", "k.py", "-n", "k", "-s", "i32", "-t", "cuda:90", "-o", "x", "-w", "3"], "power of two"),
        (["compile", "k.py", "-n", "k", "-s", "i32", "-t", "cuda:90", "-o", "x", "-w", "0"], "at least 1"),
        (
            ["compile", "k.py", "-n", "k", "-s", "i32", "-t", "cuda:90", "-o", "x", "-ns", "-1"],
            "num_stages must be at least 0",
        ),
        (["compile", "k.py", "-n", "k", "-s", "i32", "-t", "cuda:90", "-o", "x", "--num-ctas", "0"], "at least 1"),
    ],
)
def test_bad_counts_are_refused(capsys, argv, says):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2 and says in capsys.readouterr().err


# -- 18. help ------------------------------------------------------------------------------------------
def _parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child_parser in action.choices.items():
                yield from _parsers(child_parser, (*path, name))


def test_every_argument_of_every_command_has_help():
    missing = [
        (" ".join(path), a.option_strings or a.dest)
        for path, p in _parsers(build_parser())
        for a in p._actions
        if not (a.help and a.help.strip())
    ]
    assert not missing


def test_defaults_are_shown(capsys):
    with pytest.raises(SystemExit):
        main(["compile", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "a power of two (default: 4)" in text and "archive version (default: 0.0.0)" in text
    assert "(default: None)" not in text and "(default: False)" not in text


@pytest.mark.parametrize("argv, shows", [([], "Run 'karchive COMMAND --help'"), (["cache"], "ls or prune")])
def test_a_bare_command_group_prints_its_help(capsys, argv, shows):
    code, out, err = run(capsys, *argv)
    assert code == 0 and shows in out and "usage: karchive" in out and err == ""


def test_readme_use_section_names_every_command():
    text = (ROOT / "README.md").read_text()
    use = text[text.index("## Use") : text.index("## Documents")]
    commands = [
        path
        for path, p in _parsers(build_parser())
        if path and not any(isinstance(a, argparse._SubParsersAction) for a in p._actions)
    ]
    absent = [" ".join(c) for c in commands if f"karchive {' '.join(c)}" not in use]
    assert not absent


# -- 20. cosmetics -------------------------------------------------------------------------------------
@needs_triton
def test_inspect_wording(tmp_path, capsys):
    out = tmp_path / "one.karc"
    assert run(capsys, "compile", KERNELS, "-n", "add_kernel", "-s", ADD_SIG, "-t", "cuda:90", "-o", str(out))[0] == 0
    code, text, _ = run(capsys, "inspect", str(out))
    assert code == 0 and "1 variant)" in text and "1 variants" not in text and "unset" not in text
    assert "specialisation" in text.splitlines()[4] and "constexprs" not in text


# -- spec files: what a new user plausibly gets wrong --------------------------------------------------
@pytest.mark.parametrize(
    "body, says",
    [
        ('[archive]\nname="a"\nversion="1"\ntargets=["cuda:90"]\n[kernel]\nsource="k.py:k"\n', "[[kernel]]"),
        (
            '[archive]\nname="a"\nversion="1"\ninclude_ir="no"\n[[kernel]]\nsource="k.py:k"\n',
            "include_ir must be true or false",
        ),
        ('[archive]\nname="a"\nversion="1"\nlevel="max"\n[[kernel]]\nsource="k.py:k"\n', "zstd level from 1 to 22"),
        (
            '[archive]\nname="a"\nversion="1"\ntargets=["cuda:90"]\n[[kernel]]\nsource="k.py:k"\nsignature="i32"\n'
            'num_warps="four"\n',
            "num_warps must be an integer, not 'four'",
        ),
        (
            '[archive]\nname="a"\nversion="1"\ntargets=["cuda:90"]\n[[kernel]]\nsource="k.py:k"\nsignature="i32"\n'
            "num_warps=[4, 6]\n",
            "num_warps must be a power of two",
        ),
        (
            '[archive]\nname="a"\nversion="1"\ntargets=["cuda:90"]\n[[kernel]]\nsource="k.py:k"\nsignature="i32"\n'
            "constexprs={ BLOCK = [] }\n",
            "BLOCK = [] lists no values",
        ),
        (
            '[archive]\nname="a"\nversion="1"\ntargets=["cuda:90"]\n[[kernel]]\nsource="k.py:k"\nsignature="i32"\n'
            "constexprs={ BLOCK = [{ a = 1 }] }\n",
            "a value is an integer, float, boolean or string",
        ),
        (
            '[archive]\nname="a"\nversion="1"\ntargets=["hip:gfx942"]\n[[kernel]]\nsource="k.py:k"\nsignature="i32"\n'
            "hip={ waves_per_eu = -1 }\n",
            "waves_per_eu must be at least 0",
        ),
    ],
)
def test_spec_mistakes_are_named(tmp_path, capsys, body, says):
    spec = tmp_path / "s.toml"
    spec.write_text(body)
    code, _, err = run(capsys, "build", str(spec), "-o", str(tmp_path / "x.karc"))
    assert code == 2 and says in err and "Traceback" not in err


def test_spec_path_that_is_not_a_spec(tmp_path, examples_archive, capsys):
    code, _, err = run(capsys, "build", str(tmp_path), "-o", str(tmp_path / "x.karc"))
    assert code == 2 and "is a directory; give the build spec file" in err
    code, _, err = run(capsys, "build", str(examples_archive), "-o", str(tmp_path / "x.karc"))
    assert code == 2 and "not a text file" in err


def test_os_errors_reach_the_terminal_as_one_line(examples_archive, tmp_path, capsys):
    """Whatever the machine refuses (here: a directory name longer than the file system allows) is one
    line naming the path, not a traceback."""
    too_long = tmp_path / ("d" * 300)
    code, _, err = run(capsys, "extract", str(examples_archive), "-C", str(too_long))
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("karchive: error: ") and "name too long" in lines[0]


# -- found in the redo of the trial ---------------------------------------------------------------------
HELPER_MISUSE = """
import triton
import triton.language as tl


@triton.jit
def silu_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(x_ptr + offs, x * tl.sigmoid(x), mask=offs < n)
"""


@needs_triton
def test_a_compile_error_in_a_helper_says_why(tmp_path, capsys):
    """tl.sigmoid on fp16 fails inside Triton's standard library; the outer error was a caret and no words."""
    (tmp_path / "silu.py").write_text(HELPER_MISUSE)
    code, _, err = run(
        capsys,
        "compile",
        str(tmp_path / "silu.py"),
        "-n",
        "silu_kernel",
        "-s",
        "*fp16:16, i32, 256",
        "-t",
        "cuda:90",
        "-o",
        str(tmp_path / "s.karc"),
    )
    assert code == 2 and "x * tl.sigmoid(x)" in err and "Expected dtype ['fp32', 'fp64'] but got fp16" in err


@pytest.mark.parametrize(
    "edit, says",
    [
        (("num_warps = [4]", "num_warp = [4]"), "unknown key 'num_warp' (did you mean 'num_warps'?)"),
        (("targets = ", "target = "), "unknown [archive] key 'target' (did you mean 'targets'?)"),
        (
            ('version = "0.1.0"', "version = 1.0"),
            'needs version = "...", a non-empty string (quote it: version = "1.0")',
        ),
    ],
)
def test_spec_key_mistakes_suggest_the_key(tmp_path, capsys, edit, says):
    spec = add_spec(tmp_path, extra="num_warps = [4]")
    spec.write_text(spec.read_text().replace(*edit))
    code, _, err = run(capsys, "build", str(spec), "-o", str(tmp_path / "x.karc"))
    assert code == 2 and says in err


def test_rebuild_with_an_unknown_kernel_names_the_kernels(examples_archive, capsys):
    code, _, err = run(capsys, "rebuild", "--check", str(examples_archive), "-k", "nosuch")
    assert code == 2 and "has no kernel 'nosuch'; it has: kernels:add_kernel, kernels:matmul_kernel" in err


def test_lockfile_write_error_names_the_file_once(tmp_path):
    from karchive.errors import LockfileError
    from karchive.registry import Lockfile

    target = tmp_path / "missing" / "k.lock"
    with pytest.raises(LockfileError) as info:
        Lockfile({}).write(target)
    assert str(info.value) == f"cannot write {target}: its directory {target.parent} does not exist"


@needs_triton
def test_output_never_replaces_a_file_that_is_not_an_archive(tmp_path, capsys):
    source = tmp_path / "kernels_copy.py"
    source.write_text("# my kernels\n")
    argv = ["compile", KERNELS, "-n", "add_kernel", "-s", ADD_SIG, "-t", "cuda:90"]
    code, _, err = run(capsys, *argv, "-o", str(source))
    assert code == 2 and "exists and is not a karchive archive; not replacing it" in err
    assert source.read_text() == "# my kernels\n"
    out = tmp_path / "a.karc"
    assert run(capsys, *argv, "-o", str(out))[0] == 0
    assert run(capsys, *argv[:-1], "cuda:80", "-o", str(out))[0] == 0  # an archive is replaced (atomically)
    assert "cuda:80" in run(capsys, "inspect", str(out))[1]
