"""The typed front door: ``karchive/__init__.pyi`` gives users' type checkers the names ``karchive/__init__.py``
imports lazily, each from where ``__init__`` takes it, and both say the same ``__all__``."""

from __future__ import annotations

import ast
import os
import pathlib
import subprocess
import sys

import karchive

ROOT = pathlib.Path(__file__).resolve().parent.parent
STUB = ROOT / "karchive" / "__init__.pyi"


def _stub() -> tuple[dict[str, tuple[str, str | None]], list[str], set[str]]:
    """(name -> (module, attribute or None for a module) of each import, ``__all__``, annotated names)."""
    tree = ast.parse(STUB.read_text())
    names: dict[str, tuple[str, str | None]] = {}
    declared: set[str] = set()
    all_: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            base = "karchive" + (f".{node.module}" if node.module else "") if node.level else node.module or ""
            for a in node.names:
                target = f"{base}.{a.name}"
                where = ROOT.joinpath(*target.split("."))
                is_module = where.is_dir() or where.with_suffix(".py").is_file()
                names[a.asname or a.name] = (target, None) if is_module else (base, a.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            declared.add(node.target.id)
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            all_ = list(ast.literal_eval(node.value))
    return names, all_, declared


def test_the_stub_names_every_lazy_name_where_init_takes_it():
    names, _all, declared = _stub()
    assert set(names) == set(karchive._LAZY), sorted(set(names) ^ set(karchive._LAZY))
    # karchive.serve, the package, is callable as its serve(): the stub types it as that call
    assert names.pop("serve") == ("karchive.serve", "serve") and karchive._LAZY["serve"] == ("karchive.serve", None)
    assert callable(karchive.serve)
    assert names == {n: t for n, t in karchive._LAZY.items() if n != "serve"}
    assert declared == {"__version__"}


def test_the_stub_and_init_export_the_same_names():
    _names, all_, _declared = _stub()
    assert all_ == karchive.__all__ and len(set(all_)) == len(all_)
    assert set(all_) == {"__version__"} | set(karchive._LAZY) - {"torch"}


def test_a_star_import_gives_every_exported_name_without_torch():
    code = (
        "import sys; sys.modules['torch'] = None\nfrom karchive import *\n"
        "import karchive\nmissing = [n for n in karchive.__all__ if n not in globals()]\nprint(missing)"
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_a_checker_sees_the_types_of_the_lazy_names(tmp_path):
    """mypy, as a user's checker: ``karchive.open`` returns an Archive, ``karchive.Registry`` is the class."""
    user = tmp_path / "user.py"
    user.write_text(
        "import karchive\n\n"
        "arc = karchive.open('x.karc')\n"
        "reveal_type(arc)\n"
        "reveal_type(karchive.OpenOptions(fetch='lazy'))\n"
        "n: int = karchive.open\n"
    )
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--no-incremental",
            "--follow-imports=silent",
            "--ignore-missing-imports",
            str(user),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=str(tmp_path),
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    out = r.stdout
    assert 'Revealed type is "karchive.runtime.archive.Archive"' in out, out
    assert 'Revealed type is "karchive.registry.options.OpenOptions"' in out, out
    assert "user.py:6: error: Incompatible types in assignment" in out, out  # a function is not an int
