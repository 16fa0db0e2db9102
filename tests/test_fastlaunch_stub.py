"""``karchive/runtime/_fastlaunch.pyi`` says what ``_fastlaunch.c`` takes and exports.

mypy checks the Python that calls the compiled launcher against this stub only, so a stub that drifts
from the C file would let a wrong keyword or a removed method through unnoticed. The keyword names of
each call are read from the C source's ``kwlist`` arrays (no build needed); the exported names are
compared with the built module where it is built.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

RUNTIME = Path(__file__).resolve().parent.parent / "karchive" / "runtime"
STUB = ast.parse((RUNTIME / "_fastlaunch.pyi").read_text())
#: The compiled launcher's whole source: _fastlaunch.c and the files of c-ext/ it includes.
C_SOURCE = "\n".join(p.read_text() for p in [RUNTIME / "_fastlaunch.c", *sorted((RUNTIME / "c-ext").glob("*.[ch]"))])

#: C function that parses the arguments -> where the stub declares them (class or None, function).
PARSERS = {
    "entry_new": ("Entry", "__new__"),
    "dispatcher_new": ("Dispatcher", "__new__"),
    "bound_configure": ("Bound", "_configure"),
    "time_launches": (None, "time_launches"),
}


def _c_keywords(function: str) -> list[str]:
    """The ``kwlist`` of one C function, in order."""
    m = re.search(rf"^{function}\(.*?static char \*kwlist\[\] = \{{(.*?)\}};", C_SOURCE, re.S | re.M)
    assert m, f"no kwlist in {function} of _fastlaunch.c"
    names = [n.strip() for n in m.group(1).split(",")]
    assert names[-1] == "NULL"
    return [ast.literal_eval(n) for n in names[:-1]]


def _stub_def(owner: str | None, name: str) -> ast.FunctionDef:
    body = STUB.body
    if owner is not None:
        body = next(n for n in body if isinstance(n, ast.ClassDef) and n.name == owner).body
    return next(n for n in body if isinstance(n, ast.FunctionDef) and n.name == name)


def _stub_params(fn: ast.FunctionDef) -> list[str]:
    params = [a.arg for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs]
    return params[1:] if params and params[0] in ("self", "cls") else params


@pytest.mark.parametrize("function", sorted(PARSERS))
def test_stub_keywords_are_the_c_keywords(function: str) -> None:
    owner, name = PARSERS[function]
    assert _stub_params(_stub_def(owner, name)) == _c_keywords(function)


def _stub_names() -> dict[str, set[str]]:
    """Module-level names, and per class the names it declares (``_``-prefixed stub-only types left out)."""
    out: dict[str, set[str]] = {"": set()}
    for node in STUB.body:
        if isinstance(node, ast.ClassDef):
            if any(isinstance(b, ast.Name) and b.id == "Protocol" for b in node.bases):
                continue  # the Python side of the contract (DispatcherOwner ...): not in the module
            if not node.name.startswith("_"):
                out[""].add(node.name)
                out[node.name] = {n.name for n in node.body if isinstance(n, ast.FunctionDef)} - {"__new__"}
        elif isinstance(node, ast.FunctionDef):
            out[""].add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out[""].add(node.target.id)
    return out


def test_stub_names_exist_in_the_built_module() -> None:
    from karchive.runtime import launch_path

    module = launch_path.extension()
    if module is None:
        pytest.skip(f"the compiled launcher is not built here: {launch_path.status().detail}")
    exported = {n for n in vars(module) if not n.startswith("__")}
    names = _stub_names()
    assert names[""] == exported
    for cls, members in names.items():
        if cls:
            assert members <= set(dir(getattr(module, cls))), f"{cls}: {members - set(dir(getattr(module, cls)))}"
