"""Error fields tell the truth (issue 24): every ``XxxError(...)`` in the package passes each field its class
declares, unless the class gives the field a real (non-None) default, and passes no field the class does
not declare. A field no raise site can fill is removed, or omitted by the subclasses it means nothing for
(``_omit``), so ``to_json()`` never emits a null that only means "not filled in": a site that passes None
says so, and the class's docstring says what None means there ("does not apply here").

Every raise site is held to the rule (the ratchet list of sites not yet brought to it is gone: none is left).
``python tests/test_error_fields.py`` prints the sites that break it, one per line.
"""

from __future__ import annotations

import ast
import collections
import pathlib

import karchive.errors as errors_module
from karchive.errors import KarchiveError

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "karchive"
CLASSES = {
    name: cls for name, cls in vars(errors_module).items() if isinstance(cls, type) and issubclass(cls, KarchiveError)
}


def _required(cls: type[KarchiveError]) -> list[str]:
    return [f for f in cls._field_names if getattr(cls, f) is None]


def _calls() -> list[tuple[str, int, str, ast.Call]]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = str(path.relative_to(PACKAGE))
        for node in ast.walk(ast.parse(path.read_text(), rel)):
            if isinstance(node, ast.Call):
                f = node.func
                name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
                if name in CLASSES:
                    out.append((rel, node.lineno, name, node))
    return out


def _unfilled() -> dict[tuple[str, str], list[str]]:
    found: dict[tuple[str, str], list[str]] = collections.defaultdict(list)
    for rel, line, name, node in _calls():
        if any(k.arg is None for k in node.keywords):
            continue  # **fields of another error: copied whole
        given = {k.arg for k in node.keywords}
        missing = [f for f in _required(CLASSES[name]) if f not in given]
        if missing:
            found[(rel, name)].append(f"{rel}:{line}: {name} without {', '.join(missing)}")
    return found


def test_no_raise_site_passes_a_field_its_class_does_not_declare():
    bad = [
        f"{rel}:{line}: {name}({k.arg}=...)"
        for rel, line, name, node in _calls()
        for k in node.keywords
        if k.arg is not None and k.arg not in CLASSES[name]._field_names
    ]
    assert not bad, "\n".join(bad)


def test_every_declared_field_is_filled_where_raised():
    found = _unfilled()
    assert not found, "raise sites that leave declared fields empty (fill them, or remove the field):\n" + "\n".join(
        s for sites in found.values() for s in sites
    )


def test_the_walker_sees_raise_sites():
    """It would pass vacuously if it found nothing: the package raises hundreds of karchive errors."""
    calls = _calls()
    assert len(calls) > 400
    assert {"ArgumentError", "LaunchError", "SchemaError", "TrustError"} <= {name for _, _, name, _ in calls}


def test_omitted_fields_are_neither_accepted_nor_emitted():
    from karchive.errors import DriverError, KeyFileError

    assert "archive" not in KeyFileError._field_names and "archive" not in KeyFileError("x", path="k").to_json()
    assert DriverError("x", call="cuLaunchKernel", code=700).to_json() == {
        "error": "DriverError",
        "message": "x",
        "call": "cuLaunchKernel",
        "code": 700,
    }
    import pytest

    with pytest.raises(TypeError):
        KeyFileError("x", archive="a@1")


def _cli(*argv: str, env: dict[str, str] | None = None) -> tuple[int, dict]:
    """``karchive ARGV --json`` in a fresh process: exit status and the error object on stdout."""
    import json
    import os
    import subprocess
    import sys

    full = {k: v for k, v in os.environ.items() if k != "KARCHIVE_TEST_NO_SUCH_VAR"}
    full["PYTHONPATH"] = str(PACKAGE.parent)
    done = subprocess.run(
        [sys.executable, "-m", "karchive", *argv, "--json"],
        capture_output=True,
        text=True,
        env={**full, **(env or {})},
        timeout=120,
    )
    return done.returncode, json.loads(done.stdout)


def test_the_cli_json_error_carries_the_filled_fields(tmp_path):
    """What a script reads: the class, the message and every declared field, none of them a null left unfilled."""
    code, out = _cli("cache", "prune", "--max-size", "lots", "--cache-dir", str(tmp_path / "cache"))
    assert code == 2 and out == {
        "error": "RegistryValueError",
        "value": "'lots'",
        "message": "bad size 'lots': use e.g. 500M, 2G, 1.5GiB or a byte count",
    }


def test_the_cli_json_error_of_keygen_carries_its_fields(tmp_path):
    import pytest

    pytest.importorskip("cryptography")  # keygen needs the trust extra (a consumer-only install skips)
    code, out = _cli("keygen", "-o", str(tmp_path / "k"), "--passphrase-env", "KARCHIVE_TEST_NO_SUCH_VAR")
    assert code == 2 and out == {
        "error": "KeyFileError",
        "reason": "bad-key-file",
        "path": str(tmp_path / "k.key"),
        "message": "--passphrase-env KARCHIVE_TEST_NO_SUCH_VAR: the variable is not set or empty",
    }
    assert not (tmp_path / "k.key").exists()


def test_a_cache_lock_held_past_its_timeout_is_a_cache_error_naming_the_lock(tmp_path):
    """Not a TransferError without a URL: nothing was transferred, and the cache serves every registry."""
    import pytest

    from karchive.errors import CacheError, RegistryError
    from karchive.registry.filelock import FileLock

    lock = tmp_path / "locks" / "x.lock"
    with FileLock(lock):  # a second open file description: flock refuses it as it would another process
        with pytest.raises(CacheError) as err:
            FileLock(lock, timeout=0.2).acquire()
    assert isinstance(err.value, RegistryError) and err.value.to_json() == {
        "error": "CacheError",
        "message": err.value.message,
        "path": str(lock),
    }


if __name__ == "__main__":  # `python tests/test_error_fields.py`: every site that breaks the rule, one per line
    for sites in _unfilled().values():
        print("\n".join(sites))
