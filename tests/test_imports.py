"""Every module of the package imports: a module moved or renamed leaves no import of its old name behind
(mypy does not catch those here: it ignores missing imports). A third-party module an optional extra brings
(torch, jax, cupy, ...) may be absent; a missing karchive module never."""

from __future__ import annotations

import importlib
import pkgutil

from support import missing_extra

import karchive
from karchive.errors import KarchiveError


def test_every_module_imports():
    broken = []
    for info in pkgutil.walk_packages(karchive.__path__, "karchive."):
        name = info.name
        if name.endswith(".__main__") or ".serve.shim" in name:  # a CLI entry point; a stand-in for Triton itself
            continue
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if (exc.name or "").split(".")[0] == "karchive":
                broken.append(f"{name}: {exc}")
        except ImportError as exc:
            broken.append(f"{name}: {exc}")
        except KarchiveError as exc:  # a module of an extra not installed (ray, cryptography) names the extra
            if not missing_extra(exc):
                broken.append(f"{name}: {exc}")
    assert not broken, "modules that do not import:\n" + "\n".join(broken)
