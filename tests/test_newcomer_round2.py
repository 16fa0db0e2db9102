"""Issue 19, "the first hour, round 2": the rough edges a second fresh-machine trial found
(/work/shared/reference/newcomer-trial-2026-11.md), each reproduced. Commands run as a user runs them:
in a child process, through real pipes."""

from __future__ import annotations

import os
import pathlib
import shutil
import stat
import subprocess
import sys
import textwrap

import pytest

from support import ROOT

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
    python = repo / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        if [ "$1" = -m ] && [ "$2" = pip ]; then
          echo "$* | PYTHONWARNINGS=$PYTHONWARNINGS" >> "{tmp_path}/pip.log"
          exit 0
        fi
        exec {sys.executable} "$@"
        """))
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    return repo


def _source_venv(repo: pathlib.Path, extras: str, env: dict[str, str] | None = None) -> list[str]:
    """Source tools/venv.sh from another directory as the scripts do; the pip commands it ran."""
    log = repo.parent / "pip.log"
    log.unlink(missing_ok=True)
    script = f'set -euo pipefail; cd {repo}; source tools/venv.sh "{extras}"; echo "PY=$PY"'
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60, cwd="/",
                          env={**os.environ, "KARCHIVE_VENV": str(repo / "venv"), **(env or {})})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith(f"PY={repo}/venv/bin/python")
    return log.read_text().splitlines() if log.exists() else []


def test_venv_rerun_runs_no_pip(fake_checkout):
    first = _source_venv(fake_checkout, "producer,cli,test")
    # First install: the build backend into the venv, then the project without build isolation, with
    # setuptools' build notes silenced (not pip's errors). No `--upgrade pip`: the venv existed.
    assert [line.split(" | ")[0] for line in first] == [
        f"-m pip install -q -r {fake_checkout}/venv/.karchive-build-requires",
        "-m pip install -q --no-build-isolation -e .[cli,producer,test]"]
    assert all("ignore:`[tool.setuptools.ext-modules]`" in line and "ignore:Editable installation" in line
               for line in first)
    assert (fake_checkout / "venv" / ".karchive-build-requires").read_text().split() == ["setuptools>=74.1", "wheel"]
    # Rerun, with the package index unreachable: pip is not run at all, nor for a subset of the extras.
    assert _source_venv(fake_checkout, "producer,cli,test", OFFLINE) == []
    assert _source_venv(fake_checkout, "producer,cli", OFFLINE) == []
    # A new extra: installed together with those already there (a later subset stays covered).
    assert _source_venv(fake_checkout, "cli,ray")[-1].split(" | ")[0] == \
        "-m pip install -q --no-build-isolation -e .[cli,producer,ray,test]"
    assert _source_venv(fake_checkout, "test") == []


@pytest.mark.parametrize("edit", ["pyproject.toml", "karchive/runtime/_fastlaunch.c"])
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
    done = subprocess.run(["bash", "-c", f'set -euo pipefail; cd {fake_checkout}; source tools/venv.sh cli'],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "KARCHIVE_VENV": str(fake_checkout / "venv")})
    assert done.returncode != 0 and log.exists()
    assert not (fake_checkout / "venv" / ".karchive-install").exists()


def test_the_real_venv_reruns_offline():
    """This checkout's own venv, when tools/venv.sh made it: sourcing it again with no index is a no-op."""
    venv = pathlib.Path(sys.prefix)
    if not (venv / ".karchive-install").exists():
        pytest.skip(f"{venv} was not made by tools/venv.sh (no .karchive-install)")
    have = (venv / ".karchive-install").read_text().split()[1]
    before = (venv / ".karchive-install").read_text()
    done = subprocess.run(["bash", "-c", f'set -euo pipefail; source "{ROOT}/tools/venv.sh" "{have}"'],
                          capture_output=True, text=True, timeout=60, cwd=ROOT,
                          env={**os.environ, "KARCHIVE_VENV": str(venv), **OFFLINE})
    if done.returncode != 0 or (venv / ".karchive-install").read_text() != before:
        pytest.fail(f"rerun was not a no-op: rc {done.returncode}\n{done.stderr}")
    assert done.stderr == ""
