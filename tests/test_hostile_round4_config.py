"""Issue 34 (round 4 of the adversarial pass), the configuration items, and issue 35 item 5.

- 2: strict serving failed open in child processes (the boot ``sitecustomize`` swallowed the failure);
- 3: a security-relevant variable set but empty silently meant "unset" (``KARCHIVE_LOCKFILE=`` unpinned);
- 7: configured paths (the lockfile, files the CLI reads) were read without the non-regular-file guard;
- 10: numeric variables (``KARCHIVE_RETRIES=nan``) crashed with a traceback or were silently the default;
- 14: the import shim's version check accepted non-ASCII digits;
- the serving stance: archives served unsigned are said loudly (report, warning, doctor);
- issue 35 item 5: ``python -m karchive.serve`` answered user mistakes with 44-line tracebacks.

Every child process runs with a timeout, so a regression that hangs fails instead of hanging the suite.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from karchive.core import settings
from karchive.errors import KarchiveError, SettingsError

ROOT = Path(__file__).resolve().parent.parent
BOOT = ROOT / "karchive" / "serve" / "boot"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KARCHIVE_") or k == "KARCHIVE_REQUIRE_EXTENSION"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "tests")])
    env.update(extra)
    return env


def _python(*args: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args], env=env, capture_output=True, text=True, timeout=timeout, cwd=str(ROOT)
    )


def _one_line_error(r: subprocess.CompletedProcess, *needles: str) -> None:
    """Exit 2, no traceback, one line on stderr that says what is wrong."""
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


# --------------------------------------------------------------------------------------------------
# 3. Set but empty: an error for every security-relevant variable, never "unset"
# --------------------------------------------------------------------------------------------------
#: Each security-relevant variable and the accessor a load reads it through.
GUARDED = {
    "KARCHIVE_REGISTRY": settings.registry,
    "KARCHIVE_LOCKFILE": settings.lockfile,
    "KARCHIVE_STORAGE_OPTIONS": settings.storage_options,
    "KARCHIVE_TRUST_POLICY": settings.trust_policy,
    "KARCHIVE_REGISTRY_KEY": settings.registry_key,
    "KARCHIVE_SERVE": settings.serve_archives,
    "KARCHIVE_SERVE_MODE": settings.serve_mode,
}


def test_the_guarded_set_is_declared_in_settings_and_documented():
    assert {v.name for v in settings.VARIABLES if v.guarded} == set(GUARDED)
    doc = (ROOT / "docs" / "settings.md").read_text()
    section = doc.split("## Set but empty", 1)[1].split("\n## ", 1)[0]
    listed = section.split("These are", 1)[1].split("Unset", 1)[0]
    assert set(re.findall(r"`(KARCHIVE_[A-Z_]+)`", listed)) == set(GUARDED)


@pytest.mark.parametrize("name", sorted(GUARDED))
@pytest.mark.parametrize("value", ["", "  ", "\n"])
def test_a_guarded_variable_set_but_empty_is_an_error_naming_it(monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError) as err:
        GUARDED[name]()
    assert err.value.variable == name and name in str(err.value) and "unset" in str(err.value)
    monkeypatch.delenv(name)
    assert GUARDED[name]() is None


def test_an_empty_lockfile_variable_no_longer_opens_an_unpinned_version(tmp_path, monkeypatch):
    """``KARCHIVE_LOCKFILE=`` opened the newest version unpinned; now the open fails naming the variable."""
    from registry_support import small_archive

    import karchive
    from karchive.registry import Registry

    for var in ("KARCHIVE_REGISTRY", "KARCHIVE_CACHE_DIR", "KARCHIVE_TRUST_POLICY", "KARCHIVE_LOCKFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    reg = Registry(str(tmp_path / "reg"))
    reg.publish(small_archive("examples", "0.1.0"))
    monkeypatch.setenv("KARCHIVE_LOCKFILE", "")
    with pytest.raises(SettingsError, match="KARCHIVE_LOCKFILE"):
        karchive.open("examples@latest", registry=reg)
    monkeypatch.setenv("KARCHIVE_REGISTRY", "")
    monkeypatch.delenv("KARCHIVE_LOCKFILE")
    with pytest.raises(SettingsError, match="KARCHIVE_REGISTRY"):
        karchive.open("examples@latest")


def test_the_cli_refuses_empty_guarded_variables_in_one_line(tmp_path):
    from registry_support import small_archive

    arc = small_archive("examples", "0.1.0")
    for name, args in (
        ("KARCHIVE_LOCKFILE", ["inspect", "examples@latest"]),
        ("KARCHIVE_REGISTRY", ["ls"]),
        ("KARCHIVE_STORAGE_OPTIONS", ["ls"]),
        ("KARCHIVE_REGISTRY_KEY", ["publish", str(arc), "--registry", str(tmp_path / "r")]),
    ):
        r = _python(
            "-m",
            "karchive",
            *args,
            env=_env(**{name: "", "XDG_DATA_HOME": str(tmp_path / "d"), "XDG_CACHE_HOME": str(tmp_path / "c")}),
        )
        _one_line_error(r, name)


def test_doctor_names_every_refused_setting_instead_of_failing():
    r = _python(
        "-m",
        "karchive",
        "doctor",
        "--no-probe",
        "--json",
        env=_env(KARCHIVE_LOCKFILE="", KARCHIVE_RETRIES="nan", KARCHIVE_SERVE_MODE="sometimes"),
    )
    assert r.returncode == 1, r.stderr
    report = json.loads(r.stdout)
    assert report["ok"] is False
    problems = " ".join(report["settings"]["problems"])
    assert all(v in problems for v in ("KARCHIVE_LOCKFILE", "KARCHIVE_RETRIES", "KARCHIVE_SERVE_MODE"))


# --------------------------------------------------------------------------------------------------
# 10. Numeric variables: a clear error naming the variable (was: a traceback, or silently the default)
# --------------------------------------------------------------------------------------------------
NUMBERS = {
    "KARCHIVE_RETRIES": (
        settings.retries,
        ["nan", "inf", "-inf", "abc", "0", "-1", "1.5", "1e3", "٣", "0x5"],
        [("3", 3), (" 7 ", 7)],
    ),
    "KARCHIVE_RETRY_DELAY": (
        settings.retry_delay,
        ["nan", "inf", "abc", "-0.5", "٣", "1e999"],
        [("0", 0.0), ("0.05", 0.05), ("2", 2.0)],
    ),
    "KARCHIVE_REGISTRY_TIMEOUT": (
        settings.registry_timeout,
        ["nan", "inf", "abc", "0", "-3", "٣", "1e999"],
        [("2.5", 2.5), ("60", 60.0)],
    ),
}


def test_every_numeric_variable_is_covered():
    assert {v.name for v in settings.VARIABLES if v.kind in ("int", "number")} == set(NUMBERS)


@pytest.mark.parametrize("name", sorted(NUMBERS))
def test_numeric_variables_refuse_what_is_not_a_usable_number(monkeypatch, name):
    accessor, bad, good = NUMBERS[name]
    for value in bad:
        monkeypatch.setenv(name, value)
        with pytest.raises(SettingsError) as err:
            accessor()
        assert err.value.variable == name and name in str(err.value) and repr(value) in str(err.value), value
    for value, parsed in good:
        monkeypatch.setenv(name, value)
        assert accessor() == parsed
    monkeypatch.setenv(name, " ")  # blank is unset for these: the default applies
    assert accessor() is None


def test_retry_policy_reads_the_checked_numbers(monkeypatch):
    from karchive.registry.retry import RetryPolicy

    monkeypatch.setenv("KARCHIVE_RETRIES", "abc")
    with pytest.raises(SettingsError, match="KARCHIVE_RETRIES"):
        RetryPolicy.from_env()
    monkeypatch.setenv("KARCHIVE_RETRIES", "2")
    monkeypatch.setenv("KARCHIVE_RETRY_DELAY", "0.5")
    p = RetryPolicy.from_env()
    assert (p.attempts, p.base_delay) == (2, 0.5)


@pytest.mark.parametrize(
    "name,value",
    [
        ("KARCHIVE_RETRIES", "nan"),
        ("KARCHIVE_RETRIES", "inf"),
        ("KARCHIVE_RETRIES", "abc"),
        ("KARCHIVE_RETRY_DELAY", "nan"),
        ("KARCHIVE_REGISTRY_TIMEOUT", "inf"),
    ],
)
def test_registry_commands_give_one_line_for_a_bad_number(tmp_path, name, value):
    r = _python("-m", "karchive", "ls", "--registry", str(tmp_path / "reg"), env=_env(**{name: value}))
    _one_line_error(r, name, repr(value))


# --------------------------------------------------------------------------------------------------
# 7. Paths from configuration are read through the non-regular-file guard
# --------------------------------------------------------------------------------------------------
def _must_not_hang(code: str, timeout: float = 60) -> subprocess.CompletedProcess:
    try:
        return _python("-c", code, env=_env(), timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail("reading a configured path hung")


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "directory"])
def test_a_lockfile_that_is_not_a_regular_file_is_refused_at_once(tmp_path, kind):
    from karchive.registry.lockfile import Lockfile

    if kind == "fifo":
        path = tmp_path / "karchive.lock"
        os.mkfifo(path)
    elif kind == "dev-zero":
        path = Path("/dev/zero")
    else:
        path = tmp_path
    done = _must_not_hang(f"""
from karchive.registry.lockfile import Lockfile
from karchive.errors import LockfileError
try:
    Lockfile.load({str(path)!r})
except LockfileError as exc:
    print("REFUSED", exc)
""")
    assert "REFUSED" in done.stdout and "MemoryError" not in done.stderr, done.stdout + done.stderr
    assert "regular file" in done.stdout or "directory" in done.stdout
    assert Lockfile  # imported here too: the module itself must import without reading anything


def test_an_oversized_lockfile_is_refused_before_it_is_read_whole(tmp_path):
    from karchive.errors import LockfileError
    from karchive.registry.lockfile import MAX_LOCKFILE_BYTES, Lockfile

    big = tmp_path / "karchive.lock"
    with open(big, "wb") as fh:
        fh.truncate(MAX_LOCKFILE_BYTES + 1)
    with pytest.raises(LockfileError, match="larger than"):
        Lockfile.load(big)


def test_the_lockfile_variable_pointing_at_a_fifo_fails_the_cli_in_one_line(tmp_path):
    fifo = tmp_path / "lock"
    os.mkfifo(fifo)
    try:
        r = _python(
            "-m",
            "karchive",
            "inspect",
            "examples@1",
            "--registry",
            str(tmp_path / "reg"),
            env=_env(KARCHIVE_LOCKFILE=str(fifo)),
            timeout=60,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("a FIFO lockfile hung the CLI")
    _one_line_error(r, str(fifo))


@pytest.mark.parametrize("args", [["tune", "{arc}", "--import", "{fifo}"], ["build", "{fifo}", "-o", "{out}"]])
def test_files_the_cli_reads_are_not_read_when_they_are_fifos(tmp_path, args):
    from registry_support import small_archive

    fifo = tmp_path / "f.toml"
    os.mkfifo(fifo)
    argv = [a.format(arc=small_archive("examples", "0.1.0"), fifo=fifo, out=tmp_path / "o.karc") for a in args]
    try:
        r = _python("-m", "karchive", *argv, env=_env(), timeout=90)
    except subprocess.TimeoutExpired:
        pytest.fail(f"karchive {' '.join(args)} hung on a FIFO")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "regular file" in r.stderr, r.stderr


def test_tuning_cache_files_that_are_fifos_are_skipped_not_waited_on(tmp_path):
    """The tuning cache lives under ``KARCHIVE_CACHE_DIR``: a FIFO named like a decisions file is no decision."""
    done = _must_not_hang(f"""
import os, pathlib, types
from karchive.runtime.tuning.decisions import TuningStore
store = TuningStore("m:k", "ab" * 32, pathlib.Path({str(tmp_path)!r}))
device = types.SimpleNamespace(name="Fake GPU", driver_version=1)
path = store._path(device)
path.parent.mkdir(parents=True, exist_ok=True)
os.mkfifo(path)
print("GOT", store.get(device, [1], [{{"kwargs": {{}}, "options": {{}}}}]))
""")
    assert "GOT None" in done.stdout, done.stdout + done.stderr


# --------------------------------------------------------------------------------------------------
# 2. Strict serving fails closed in child processes; the mode is parsed as the other choices are
# --------------------------------------------------------------------------------------------------
_CHILD = "import sys\nprint('RAN UNSERVED' if 'karchive.serve' not in sys.modules else 'RAN SERVED')\n"


def _child(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    """A Python process started the way ``python -m karchive.serve`` starts the program's children: the boot
    directory on PYTHONPATH and the variables set."""
    prog = tmp_path / "child.py"
    prog.write_text(_CHILD)
    full = _env(**env)
    full["PYTHONPATH"] = os.pathsep.join([str(BOOT), full["PYTHONPATH"]])
    return _python(str(prog), env=full, timeout=300)


@pytest.mark.parametrize("mode", ["strict", "fallback", "audit"])
def test_a_child_that_cannot_open_its_archive_does_not_run(tmp_path, mode):
    r = _child(tmp_path, KARCHIVE_SERVE=str(tmp_path / "gone.karc"), KARCHIVE_SERVE_MODE=mode)
    assert "RAN" not in r.stdout, r.stdout
    _one_line_error(r, "karchive.serve", "gone.karc", "child.py")


@pytest.mark.parametrize("value", ["strictly", "", "1", "strict,fallback"])
def test_a_child_with_an_invalid_mode_does_not_run(tmp_path, cuda_archive, value):
    r = _child(tmp_path, KARCHIVE_SERVE=str(cuda_archive), KARCHIVE_SERVE_MODE=value)
    assert "RAN" not in r.stdout, r.stdout
    _one_line_error(r, "KARCHIVE_SERVE_MODE", "strict, fallback or audit" if value else "set but empty")


def test_mode_values_are_case_insensitive_as_every_choice_variable_is(tmp_path, cuda_archive, monkeypatch):
    """``Strict`` once failed activation and the worker ran unserved; choices are read as the launch path and
    the switches are (stripped, any case), so ``Strict`` is strict."""
    for value, mode in (("Strict", "strict"), (" AUDIT ", "audit"), ("Fallback", "fallback")):
        monkeypatch.setenv("KARCHIVE_SERVE_MODE", value)
        assert settings.serve_mode() == mode
    monkeypatch.setenv("KARCHIVE_FETCH", "Lazy")
    assert settings.fetch() == "lazy"
    r = _child(tmp_path, KARCHIVE_SERVE=str(cuda_archive), KARCHIVE_SERVE_MODE="Strict")
    assert r.returncode == 0 and "RAN SERVED" in r.stdout, r.stdout + r.stderr


def test_a_child_refused_by_the_trust_policy_does_not_run(tmp_path, cuda_archive):
    pytest.importorskip("cryptography")
    from trust_support import make_keys, write_policy

    policy = write_policy(tmp_path / "p.toml", make_keys())
    r = _child(tmp_path, KARCHIVE_SERVE=str(cuda_archive), KARCHIVE_TRUST_POLICY=str(policy))
    assert "RAN" not in r.stdout, r.stdout
    _one_line_error(r, "karchive.serve", "no signature")


def test_a_child_with_an_empty_archive_list_does_not_run(tmp_path):
    r = _child(tmp_path, KARCHIVE_SERVE=" , ")
    assert "RAN" not in r.stdout
    _one_line_error(r, "KARCHIVE_SERVE")


# --------------------------------------------------------------------------------------------------
# issue 35 item 5: python -m karchive.serve answers user mistakes in one line, exit 2
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "case", ["missing-archive", "bad-mode-env", "no-archives", "no-program-file", "no-module", "empty-serve"]
)
def test_the_runner_answers_user_mistakes_in_one_line(tmp_path, cuda_archive, case):
    prog = tmp_path / "prog.py"
    prog.write_text("print('PROGRAM RAN')\n")
    env, args = _env(), ["--", str(prog)]
    if case == "missing-archive":
        args = ["--archive", str(tmp_path / "gone.karc"), *args]
        needles = ["gone.karc"]
    elif case == "bad-mode-env":
        env.update(KARCHIVE_SERVE=str(cuda_archive), KARCHIVE_SERVE_MODE="strictt")
        needles = ["KARCHIVE_SERVE_MODE"]
    elif case == "no-archives":
        needles = ["--archive", "KARCHIVE_SERVE"]
    elif case == "no-program-file":
        args = ["--archive", str(cuda_archive), "--", str(tmp_path / "nope.py")]
        needles = ["nope.py"]
    elif case == "no-module":
        args = ["--archive", str(cuda_archive), "--", "-m", "no_such_module_here"]
        needles = ["no_such_module_here"]
    else:
        env.update(KARCHIVE_SERVE="")
        needles = ["KARCHIVE_SERVE"]
    r = _python("-m", "karchive.serve", *args, env=env, timeout=300)
    assert "PROGRAM RAN" not in r.stdout
    _one_line_error(r, "python -m karchive.serve", *needles)


def test_the_runner_still_reports_the_programs_own_errors_as_python_does(tmp_path, cuda_archive):
    prog = tmp_path / "prog.py"
    prog.write_text("import no_such_module_inside_the_program\n")
    r = _python("-m", "karchive.serve", "--archive", str(cuda_archive), "--", str(prog), env=_env(), timeout=300)
    assert r.returncode == 1 and "Traceback" in r.stderr and "no_such_module_inside_the_program" in r.stderr


# --------------------------------------------------------------------------------------------------
# 14. The import shim's version: ASCII digits only
# --------------------------------------------------------------------------------------------------
def test_the_shim_version_takes_ascii_digits_only():
    from packaging.version import Version

    from karchive.serve import shim_version

    assert shim_version("3.4.0") == "3.4.0+karchive.shim"
    Version(shim_version("3.4.0"))
    for odd in ("٣.٤.٠", "3.4.٠", "３.４", "3.4.0\n", "3", "3.4.0.1", "test", None, ""):
        assert shim_version(odd) is None, odd


# --------------------------------------------------------------------------------------------------
# The stance: archives served unsigned are said loudly
# --------------------------------------------------------------------------------------------------
def test_serving_unsigned_archives_is_reported_and_warned_once(cuda_archive, monkeypatch, caplog):
    pytest.importorskip("triton")
    import karchive.serve

    monkeypatch.delenv("KARCHIVE_TRUST_POLICY", raising=False)
    monkeypatch.setattr(karchive.serve, "_WARNED", set())
    try:
        with caplog.at_level(logging.WARNING, logger="karchive.serve"):
            report = karchive.serve(str(cuda_archive), mode="audit")
            karchive.serve(str(cuda_archive), mode="audit")
        data = report.to_json()
        assert data["unsigned"] == ["rt@1.0"] and data["trust"] == {"rt@1.0": "unsigned: no trust policy checked it"}
        assert "UNSIGNED" in str(report) and "KARCHIVE_TRUST_POLICY" in str(report)
        warned = [r for r in caplog.records if "unsigned" in r.getMessage()]
        assert len(warned) == 1 and "rt@1.0" in warned[0].getMessage()
        assert "any kernel's source" in warned[0].getMessage()
    finally:
        karchive.serve.stop()


def test_serving_under_a_configured_policy_checks_signatures(cuda_archive, tmp_path, monkeypatch):
    pytest.importorskip("triton")
    pytest.importorskip("cryptography")
    from trust_support import make_keys, write_policy

    import karchive.serve
    from karchive.errors import UntrustedArchiveError
    from karchive.trust.sign import sign_archive

    keys = make_keys()
    policy = write_policy(tmp_path / "p.toml", keys)
    monkeypatch.setenv("KARCHIVE_TRUST_POLICY", str(policy))
    with pytest.raises(UntrustedArchiveError):
        karchive.serve(str(cuda_archive), mode="audit")
    signed = tmp_path / "rt.karc"
    signed.write_bytes(cuda_archive.read_bytes())
    sign_archive(signed, keys["ci"])
    try:
        report = karchive.serve(str(signed), mode="audit")
        data = report.to_json()
        assert data["unsigned"] == [] and data["trust"]["rt@1.0"].startswith("signed: ")
        assert keys["ci"].key_id[:16] in data["trust"]["rt@1.0"] and "UNSIGNED" not in str(report)
    finally:
        karchive.serve.stop()


def test_doctor_says_when_serving_would_be_unsigned():
    r = _python("-m", "karchive", "doctor", "--no-probe", env=_env(KARCHIVE_SERVE="x@1"))
    assert "unsigned" in r.stdout and "KARCHIVE_TRUST_POLICY" in r.stdout, r.stdout + r.stderr


def test_errors_are_karchive_errors():
    assert issubclass(SettingsError, KarchiveError) and issubclass(SettingsError, ValueError)


def test_a_report_path_that_is_a_fifo_does_not_hang_the_exit(tmp_path, cuda_archive):
    """``KARCHIVE_SERVE_REPORT`` is a path from configuration: at exit it is replaced, never opened and waited on."""
    prog = tmp_path / "prog.py"
    prog.write_text("print('PROGRAM RAN')\n")
    fifo = tmp_path / "report.json"
    os.mkfifo(fifo)
    try:
        r = _python(
            "-m",
            "karchive.serve",
            "--archive",
            str(cuda_archive),
            "--report",
            str(fifo),
            "--",
            str(prog),
            env=_env(),
            timeout=120,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("writing the serve report to a FIFO hung the process at exit")
    assert r.returncode == 0 and "PROGRAM RAN" in r.stdout, r.stderr
    assert json.loads(fifo.read_text())["unsigned"] == ["rt@1.0"]


def test_a_fifo_in_a_triton_cache_directory_does_not_hang_the_import(tmp_path):
    """``karchive import-triton-cache DIR``: DIR is the user's; a FIFO named like a group file is refused."""
    entry = tmp_path / "cache" / "ab"
    entry.mkdir(parents=True)
    os.mkfifo(entry / "__grp__k.json")
    try:
        r = _python(
            "-m",
            "karchive",
            "import-triton-cache",
            str(tmp_path / "cache"),
            "-o",
            str(tmp_path / "o.karc"),
            env=_env(),
            timeout=120,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("import-triton-cache hung on a FIFO")
    assert r.returncode == 2 and "Traceback" not in r.stderr and "regular file" in r.stderr, r.stderr
