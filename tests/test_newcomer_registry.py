"""Issue 15's trial items in the registry and driver messages (items 6, 9, 12, 17 and what they led to)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from registry_servers import subprocess_env
from registry_support import isolated, small_archive  # noqa: F401 - fixture

import karchive
from karchive.errors import ArchiveNotFoundError, NotFoundError, TransferError, UnsupportedLocationError
from karchive.registry import Registry

pytestmark = pytest.mark.usefixtures("isolated")


def run_cli(*args: str, cwd: Path | None = None) -> tuple[int, str, str]:
    """`karchive ARGS` in a child process, in ``cwd`` (relative -o paths), with the isolated environment."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "karchive.cli.main", *args],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=120,
        cwd=str(cwd) if cwd else None,
    )
    return done.returncode, done.stdout, done.stderr


def test_a_mistyped_registry_location_is_an_error_not_an_empty_registry(tmp_path: Path) -> None:
    reg = Registry(tmp_path / "registyr", cache=tmp_path / "c")  # the typo: nothing is there
    with pytest.raises(NotFoundError, match="is not a karchive registry .* mistyped location"):
        reg.list()
    with pytest.raises(NotFoundError, match="is not a karchive registry"):
        reg.resolve("examples")
    code, out, err = run_cli("ls", "--registry", str(tmp_path / "registyr"))
    assert code == 2 and "is not a karchive registry" in err and "empty" not in out
    empty_dir = tmp_path / "just-a-dir"
    empty_dir.mkdir()
    with pytest.raises(NotFoundError, match="is not a karchive registry"):
        Registry(empty_dir, cache=tmp_path / "c").list()
    real = Registry(tmp_path / "registry", cache=tmp_path / "c")
    real.publish(small_archive("examples", "0.1.0"))
    assert [r.ref for r in real.list()] == ["examples@0.1.0"]  # the first publish makes it a registry


def test_the_default_registry_before_its_first_publish_is_empty(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.delenv("KARCHIVE_REGISTRY", raising=False)
    assert Registry(cache=tmp_path / "c").list() == []
    code, out, _ = run_cli("ls")
    assert code == 0 and "is empty" in out


def test_publishing_a_non_archive_names_the_users_file(tmp_path: Path) -> None:
    bogus = tmp_path / "notarc.karc"
    bogus.write_bytes(b"definitely not an archive" * 10)
    code, _, err = run_cli("publish", str(bogus), "--registry", str(tmp_path / "registry"))
    assert code == 2 and str(bogus) in err and "karchive-publish-" not in err, err


def test_pull_into_a_directory_that_does_not_exist_yet(tmp_path: Path, monkeypatch) -> None:
    reg_dir = tmp_path / "registry"
    Registry(reg_dir, cache=tmp_path / "c").publish(small_archive("examples", "0.1.0"))
    code, out, err = run_cli(
        "pull", "examples@0.1.0", "-o", "pulled/", "--registry", str(reg_dir), "--json", cwd=tmp_path
    )
    assert code == 0, err
    assert (tmp_path / "pulled").is_dir() and (tmp_path / "pulled" / "examples-0.1.0.karc").is_file()
    assert json.loads(out)["path"].endswith(os.path.join("pulled", "examples-0.1.0.karc"))
    code, _, err = run_cli("pull", "examples@0.1.0", "-o", "deep/er/x.karc", "--registry", str(reg_dir), cwd=tmp_path)
    assert code == 0 and (tmp_path / "deep" / "er" / "x.karc").is_file(), err
    (tmp_path / "afile").write_text("x")
    code, _, err = run_cli("pull", "examples@0.1.0", "-o", "afile/x.karc", "--registry", str(reg_dir), cwd=tmp_path)
    assert code == 2 and "afile is a file, not a directory" in err and err.count("cannot write") == 1, err


def test_lock_and_keygen_create_missing_parent_directories(tmp_path: Path, monkeypatch) -> None:
    reg_dir = tmp_path / "registry"
    Registry(reg_dir, cache=tmp_path / "c").publish(small_archive("examples", "0.1.0"))
    code, _, err = run_cli(
        "lock", "examples@0.1.0", "-o", "locks/new/karchive.lock", "--registry", str(reg_dir), cwd=tmp_path
    )
    assert code == 0 and (tmp_path / "locks" / "new" / "karchive.lock").is_file(), err
    pytest.importorskip("cryptography")
    code, _, err = run_cli("keygen", "-o", "keys/me", "--name", "me", cwd=tmp_path)
    assert code == 0 and (tmp_path / "keys" / "me.key").is_file() and (tmp_path / "keys" / "me.pub").is_file(), err


def test_what_is_not_a_reference_is_a_karchive_error(tmp_path: Path) -> None:
    with pytest.raises(UnsupportedLocationError, match="not int"):
        karchive.open(5)  # type: ignore[arg-type]
    with pytest.raises(karchive.KarchiveError, match="'cuda' or 'hip'"):
        karchive.open(str(small_archive()), backend="opencl")


def test_http_refused_is_a_network_error_and_404_a_missing_archive(tmp_path: Path) -> None:
    pytest.importorskip("aiohttp")
    from registry_servers import StaticHTTPServer

    with pytest.raises(TransferError, match="cannot reach"):
        karchive.open("http://127.0.0.1:1/x.karc")  # nothing listens on port 1
    server = StaticHTTPServer(tmp_path)
    try:
        with pytest.raises(ArchiveNotFoundError):
            karchive.open(f"{server.url}/missing.karc")
    finally:
        server.stop()


def test_driver_load_failures_show_text_not_bytes_reprs():
    from karchive.runtime.backend import plain_text

    hip_message = RuntimeError(
        "failed to dlopen 'b'libamdhip64.so'': b'libamdhip64.so: cannot open shared object file'"
    )
    shown = plain_text(hip_message)
    assert shown == "failed to dlopen 'libamdhip64.so': libamdhip64.so: cannot open shared object file"
    assert "b'" not in shown
