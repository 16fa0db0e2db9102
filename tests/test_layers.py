"""The folders show the architecture, and this test keeps them honest.

format is the bottom (with the neutral primitives in core and the exception hierarchy); producer,
registry and trust build on it; runtime, interop and the CLI sit on top. Consumer code (format,
registry, trust, runtime, interop) never imports producer code, so an inference server never needs
Triton. Inside producer, compile is the base that build and capture share. Every import in the package
counts, including the lazy ones inside functions and those only for type checkers; no module name is used
twice. (No import circle: tests/test_import_cycles.py.)
"""

from __future__ import annotations

import ast
import pathlib

from support import missing_extra

from karchive.errors import KarchiveError

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
    "serve": {"errors", "core", "format", "runtime"},  # unchanged call sites served from archives (docs/serving.md)
    "cli": {
        "errors",
        "core",
        "format",
        "producer",
        "trust",
        "registry",
        "resolve",
        "audit",
        "runtime",
        "interop",
        "serve",
    },
    # The public faces of producer/build and producer/compile (karchive.build, karchive.compile).
    "build": {"errors", "core", "format", "producer"},
    "compile": {"errors", "core", "format", "producer"},
}
CONSUMER = {"format", "registry", "trust", "resolve", "runtime", "interop", "serve"}

#: Inside producer: subpackage -> what it may import of the other subpackages. compile (one kernel, one
#: variant) is the base; build and capture both compile; capture packs its archive through build's packer and
#: nothing else of build; build never imports capture.
PRODUCER: dict[str, set[str]] = {
    "compile": set(),
    "build": {"karchive.producer.compile"},
    "capture": {"karchive.producer.compile", "karchive.producer.build.pack"},
}

#: Module basenames that may repeat (a leading underscore does not make a new name).
SHARED_BASENAMES = {"__init__", "__main__"}
#: Twins whose runtime half is not renamed yet; each entry must still be a twin (the list only shrinks).
KNOWN_TWINS: set[str] = set()


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


def _module_name(path: pathlib.Path) -> str:
    mod = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return mod[: -len(".__init__")] if mod.endswith(".__init__") else mod


def test_producer_subpackages_follow_their_order():
    bad = []
    for path in _modules():
        parts = path.relative_to(PACKAGE).parts
        if parts[0] != "producer" or len(parts) < 3:
            continue
        sub = parts[1]
        for line, target in _imports(path):
            tparts = target.split(".")
            if tparts[:2] != ["karchive", "producer"] or len(tparts) < 3 or tparts[2] == sub:
                continue
            if not any(target == ok or target.startswith(ok + ".") for ok in PRODUCER[sub]):
                bad.append(f"{path.relative_to(PACKAGE.parent)}:{line}: producer/{sub} imports {target}")
    assert not bad, "producer order (compile <- build <- capture) broken:\n" + "\n".join(bad)


def test_no_module_name_is_used_twice():
    """``pack`` in two packages is two concepts under one name (or one concept twice): rename or merge."""
    seen: dict[str, list[str]] = {}
    for path in _modules():
        name = path.stem.lstrip("_") or path.stem
        if path.stem in SHARED_BASENAMES:
            continue
        if "shim" in path.relative_to(PACKAGE).parts[:2]:  # serve/shim/triton mirrors Triton's module layout
            continue
        seen.setdefault(name, []).append(str(path.relative_to(PACKAGE.parent)))
    twins = {name: paths for name, paths in seen.items() if len(paths) > 1 and not set(paths) & KNOWN_TWINS}
    assert not twins, f"module names used twice: {twins}"
    known = {p for paths in seen.values() if len(paths) > 1 for p in paths}
    stale = KNOWN_TWINS - known
    assert not stale, f"no longer twins, remove them from KNOWN_TWINS: {sorted(stale)}"


def test_public_packages_declare_their_names():
    """Every package says what it exports (``__all__``), and every name it lists exists."""
    import importlib

    missing = []
    for init in sorted(PACKAGE.rglob("__init__.py")):
        mod = _module_name(init)
        if mod == "karchive":
            continue  # the root package's names are lazy attributes (karchive/__init__.py's _LAZY)
        if mod.startswith("karchive.serve.shim"):
            continue  # a stand-in for Triton's own namespace (docs/serving.md), not karchive's API
        m = importlib.import_module(mod)
        names = getattr(m, "__all__", None)
        if names is None:
            missing.append(mod)
            continue
        for name in names:
            try:
                if not hasattr(m, name):
                    importlib.import_module(f"{mod}.{name}")  # a listed submodule: importable
            except KarchiveError as exc:  # a lazy name of an extra not installed: its error names the extra
                if not missing_extra(exc):
                    raise
    assert not missing, f"packages without __all__: {missing}"


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
