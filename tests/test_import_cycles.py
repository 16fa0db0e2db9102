"""No import circle anywhere in the package: every module can be read (and imported) after the ones it imports.

A circle means no module of it can be understood, tested or replaced alone, and an import-order bug waits
in it. Every import counts: at module level, in ``if TYPE_CHECKING:`` blocks (a type's dependency is a design
dependency too) and inside functions (a lazy import is a dependency that waits; it makes a circle all the
same). A compiled extension with a stub (``_fastlaunch.pyi``) is a module of its own.
"""

from __future__ import annotations

import ast
import pathlib
import sys

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "karchive"

#: Circles not removed yet, each the sorted tuple of its modules. The list only shrinks (the second test fails
#: when a circle here is gone).
KNOWN: set[tuple[str, ...]] = set()


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(name: str, modules: set[str]) -> str | None:
    """The package module an import names (a name imported from a module resolves to that module)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement of a module, inside functions too."""
    return [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]


def import_graph() -> dict[str, set[str]]:
    paths = sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)
    modules = {_module_name(p) for p in paths} | {_module_name(p) for p in PACKAGE.rglob("*.pyi")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for path in paths:
        me = _module_name(path)
        package = me if path.name == "__init__.py" else me.rpartition(".")[0]
        for node in _imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - (node.level - 1)]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                targets = [f"{module}.{a.name}" for a in node.names]
            for t in targets:
                hit = _resolve(t, modules)
                if hit is not None and hit != me:
                    graph[me].add(hit)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[tuple[str, ...]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[tuple[str, ...]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(tuple(sorted(comp)))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def test_no_import_cycle_in_the_package():
    found = set(cycles(import_graph()))
    new = found - KNOWN
    assert not new, "import circles (every import counts, lazy and TYPE_CHECKING ones too):\n" + "\n".join(
        " <-> ".join(c) for c in sorted(new)
    )


def test_the_known_list_holds_only_live_circles():
    """A circle fixed elsewhere must leave KNOWN, so the list only shrinks."""
    found = set(cycles(import_graph()))
    assert KNOWN <= found, f"no longer circular, remove from KNOWN: {sorted(KNOWN - found)}"


def test_the_checker_finds_circles_through_lazy_and_type_only_imports(tmp_path, monkeypatch):
    pkg = tmp_path / "karchive"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from . import _ext\n")
    (pkg / "sub" / "_ext.pyi").write_text("def f() -> None: ...\n")  # an extension module: not the package
    (pkg / "sub" / "a.py").write_text("from . import b\n")
    (pkg / "sub" / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import X\n")
    (pkg / "sub" / "c.py").write_text("from .d import f\n")
    (pkg / "sub" / "d.py").write_text("def f():\n    from .c import g\n")
    (pkg / "sub" / "e.py").write_text("from . import _ext\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", pkg)
    assert cycles(import_graph()) == [("karchive.sub.a", "karchive.sub.b"), ("karchive.sub.c", "karchive.sub.d")]


def test_runtime_module_names_are_not_used_by_other_packages():
    """A name means one thing: ``runtime/pack.py`` beside ``producer/pack.py`` made readers open the wrong one.
    (Scoped to runtime/ here; the package-wide rule belongs with the producer/ regroup of issue 24.)"""
    names = lambda paths: {p.stem.lstrip("_") for p in paths if p.name != "__init__.py"}  # noqa: E731
    runtime = names((PACKAGE / "runtime").rglob("*.py"))
    others = names(p for p in PACKAGE.rglob("*.py") if "runtime" not in p.relative_to(PACKAGE).parts)
    assert not runtime & others, f"runtime modules named like modules elsewhere: {sorted(runtime & others)}"
