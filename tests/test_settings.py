"""One module reads every KARCHIVE_* environment variable (karchive/core/settings.py), lazily, and the
people's table in docs/settings.md lists exactly the variables it declares."""

from __future__ import annotations

import ast
import pathlib
import re

import pytest

from karchive.core import settings
from karchive.errors import SettingsError

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "karchive"
DOCS = PACKAGE.parent / "docs" / "settings.md"
OWNER = PACKAGE / "core" / "settings.py"


def _env_reads(tree: ast.AST) -> list[ast.AST]:
    """The first argument of every ``os.environ.get(X)``, ``os.environ[X]``, ``os.getenv(X)``,
    ``environ.get(X)``, ``os.environ.pop/setdefault(X)``."""
    out: list[ast.AST] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and _is_environ(node.value):
            out.append(node.slice)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            if node.func.attr in ("get", "pop", "setdefault") and _is_environ(node.func.value):
                out.append(node.args[0])
            elif node.func.attr == "getenv":
                out.append(node.args[0])
    return out


def _is_environ(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "environ") or (
        isinstance(node, ast.Name) and node.id == "environ"
    )


def _karchive_names(tree: ast.AST) -> set[str]:
    """Names this module binds to a ``"KARCHIVE_..."`` literal or to a settings variable's ``.name``."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            v = node.value
            if (isinstance(v, ast.Constant) and isinstance(v.value, str) and v.value.startswith("KARCHIVE_")) or (
                isinstance(v, ast.Attribute) and v.attr == "name"
            ):
                names.add(node.targets[0].id)
    return names


def _offenders(path: pathlib.Path, env_names: set[str]) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    local = _karchive_names(tree) | env_names
    bad = []
    for arg in _env_reads(tree):
        literal = isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith("KARCHIVE_")
        named = (isinstance(arg, ast.Name) and arg.id in local) or (
            isinstance(arg, ast.Attribute) and (arg.attr in local or arg.attr == "name")
        )
        if literal or named:
            bad.append(f"{path}:{arg.lineno}")
    return bad


def _all_env_constant_names() -> set[str]:
    names: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        names |= _karchive_names(ast.parse(path.read_text(), str(path)))
    return names


def test_no_module_but_settings_reads_a_karchive_variable():
    names = _all_env_constant_names()
    bad = [hit for path in sorted(PACKAGE.rglob("*.py")) if path != OWNER for hit in _offenders(path, names)]
    assert not bad, "read KARCHIVE_* variables through karchive.core.settings:\n" + "\n".join(bad)


def test_the_checker_catches_direct_reads(tmp_path):
    """It would pass vacuously if the walker missed reads: each spelling below must be caught."""
    src = tmp_path / "m.py"
    src.write_text(
        'import os\nX_ENV = "KARCHIVE_X"\nos.environ.get("KARCHIVE_A")\nos.environ[X_ENV]\n'
        'os.getenv(X_ENV)\nos.environ.get(settings.FETCH.name)\nos.environ.get("HOME")\n'
    )
    assert [hit.rsplit(":", 1)[1] for hit in _offenders(src, set())] == ["3", "4", "5", "6"]  # not HOME


def test_settings_are_read_when_asked_not_at_import(monkeypatch):
    monkeypatch.setenv("KARCHIVE_FETCH", "lazy")
    assert settings.fetch() == "lazy"
    monkeypatch.setenv("KARCHIVE_FETCH", "full")
    assert settings.fetch() == "full"
    monkeypatch.delenv("KARCHIVE_FETCH")
    assert settings.fetch() is None
    monkeypatch.setenv("KARCHIVE_TRUST_POLICY", "")
    with pytest.raises(SettingsError, match="KARCHIVE_TRUST_POLICY"):  # never "no policy" (issues 20, 34)
        settings.trust_policy()
    monkeypatch.setenv("KARCHIVE_TUNING_CACHE", "Off")
    assert settings.tuning_cache() is False
    monkeypatch.setenv("KARCHIVE_REGISTRY_TIMEOUT", "  ")
    assert settings.registry_timeout() is None
    monkeypatch.setenv("KARCHIVE_REGISTRY_TIMEOUT", "2.5")
    assert settings.registry_timeout() == 2.5


def test_every_variable_the_package_names_is_declared_and_documented():
    declared = {v.name for v in settings.VARIABLES}
    assert len(declared) == len(settings.VARIABLES)
    mentioned = set()
    for path in PACKAGE.rglob("*.py"):
        mentioned |= set(re.findall(r"\bKARCHIVE_[A-Z_]+\b", path.read_text()))
    mentioned.discard("KARCHIVE_ROOT")  # the path sentinel @KARCHIVE_ROOT@, not a variable
    assert mentioned <= declared, f"undeclared: {sorted(mentioned - declared)}"
    table = {m for m in re.findall(r"^\| `(KARCHIVE_[A-Z_]+)` \|", DOCS.read_text(), re.M)}
    assert table == declared, f"docs/settings.md lists {sorted(table)}, settings declares {sorted(declared)}"


def test_the_table_says_what_the_code_declares():
    """Each row of docs/settings.md is the variable's declared default and meaning, word for word."""
    rows = dict(re.findall(r"^\| `(KARCHIVE_[A-Z_]+)` \| (.*) \|$", DOCS.read_text(), re.M))
    for v in settings.VARIABLES:
        assert rows[v.name] == f"{v.default} | {v.meaning}", v.name
