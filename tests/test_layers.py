"""The folders show the architecture, and this test keeps them honest.

format is the bottom (with the neutral primitives in core and the exception hierarchy); producer,
registry and trust build on it; runtime, interop and the CLI sit on top. Consumer code (format,
registry, trust, runtime, interop) never imports producer code, so an inference server never needs
Triton. Every import in the package counts, including the lazy ones inside functions.
"""

from __future__ import annotations

import ast
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "karchive"

#: layer -> layers it may import (the root package ``karchive`` itself, which holds only the version and
#: lazy attributes, may be imported from anywhere).
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "core": {"errors"},
    "format": {"errors", "core"},
    "producer": {"errors", "core", "format"},
    "trust": {"errors", "core", "format"},
    "registry": {"errors", "core", "format", "trust"},
    "resolve": {"errors", "core", "format", "registry", "trust"},
    "audit": {"errors", "core", "format", "registry", "resolve"},
    "runtime": {"errors", "core", "format", "registry", "resolve", "trust"},
    "interop": {"errors", "core", "format", "runtime"},
    "cli": {"errors", "core", "format", "producer", "trust", "registry", "resolve", "audit", "runtime", "interop"},
}
CONSUMER = {"format", "registry", "trust", "resolve", "runtime", "interop"}


def _layer(module: str) -> str | None:
    """``karchive.runtime.dispatch`` -> ``runtime``; the root package -> None."""
    parts = module.split(".")
    if parts[0] != "karchive" or len(parts) == 1:
        return None
    return parts[1]


def _imports(path: pathlib.Path) -> list[tuple[int, str]]:
    module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    if path.name == "__init__.py":
        module = module[: -len(".__init__")]
        package = module
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if node.module is None and node.level:  # "from . import x": x is a module, or a name in the package
                for alias in node.names:
                    sub = PACKAGE.parent.joinpath(*target.split("."), alias.name)
                    is_module = sub.is_dir() or sub.with_suffix(".py").is_file()
                    out.append((node.lineno, f"{target}.{alias.name}" if is_module else target))
            else:
                out.append((node.lineno, target))
    return out


def _modules() -> list[pathlib.Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def test_every_module_belongs_to_a_known_layer():
    layers = {_layer(".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts)) for p in _modules()}
    layers.discard(None)
    layers.discard("__init__")
    layers.discard("__main__")
    assert layers <= set(ALLOWED), f"new top-level modules need a place in the layer table: {layers - set(ALLOWED)}"


def test_imports_follow_the_layers():
    bad = []
    for path in _modules():
        src = _layer(".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts))
        if src in (None, "__init__", "__main__"):
            continue
        for line, target in _imports(path):
            dst = _layer(target)
            if not target.startswith("karchive") or dst is None or dst == src:
                continue
            if dst not in ALLOWED[src]:
                bad.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {src} imports {target} ({dst})")
    assert not bad, "layer violations:\n" + "\n".join(bad)


def test_consumer_code_never_imports_producer_code():
    for layer in CONSUMER:
        assert "producer" not in ALLOWED[layer], layer


def test_the_checker_sees_relative_and_lazy_imports(tmp_path, monkeypatch):
    """The test above would pass vacuously if the import walker missed imports: check it does not."""
    runtime = PACKAGE / "runtime" / "archive.py"
    found = {t for _, t in _imports(runtime)}
    assert "karchive.format.manifest" in found  # relative, module level
    assert "karchive.runtime.backend" in found  # relative, inside a function


def test_registry_and_trust_depend_one_way():
    """The registry calls down into the trust layer (policies, decide, envelopes); the trust layer never
    names the registry, so a trust decision can be read without the registry's code (issue 24)."""
    assert "trust" in ALLOWED["registry"] and "registry" not in ALLOWED["trust"]
    for path in (PACKAGE / "trust").rglob("*.py"):
        assert not [t for _, t in _imports(path) if _layer(t) == "registry"], path


def test_one_function_makes_the_trust_decision():
    """Every load route (path, URL, registry, `verify --trust`) goes through trust/decide.decide: nothing else
    in the package calls the signature verifier itself."""
    callers = set()
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                f = node.func
                name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
                if name == "verify_archive_signatures":
                    callers.add(str(path.relative_to(PACKAGE)))
    assert callers == {"trust/decide.py"}, callers
