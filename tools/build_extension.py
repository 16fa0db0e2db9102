"""Compile karchive's launch extension in place, offline, with whatever this machine has.

    python tools/build_extension.py            # -> karchive/runtime/_fastlaunch<EXT_SUFFIX>

``pip install -e .`` builds it too (setuptools >= 74.1 reads it from pyproject.toml). This script is
for machines where that cannot run: no network for build isolation and an older setuptools, or no
setuptools at all. The extension's name and sources are read from pyproject.toml
(``[tool.setuptools] ext-modules``), so they are written down once. It needs a C compiler and the
Python headers, nothing from CUDA or ROCm. Exit status 0 and the path of the module on success.
"""

from __future__ import annotations

import pathlib
import re
import shlex
import subprocess
import sys
import sysconfig

ROOT = pathlib.Path(__file__).resolve().parents[1]


def extension_spec() -> tuple[str, list[str]]:
    """(module name, sources) of the one ext-modules entry in pyproject.toml."""
    text = (ROOT / "pyproject.toml").read_text()
    try:
        import tomllib  # Python >= 3.11

        entry = tomllib.loads(text)["tool"]["setuptools"]["ext-modules"][0]
        return entry["name"], list(entry["sources"])
    except ImportError:  # Python 3.10: read the two fields of the inline table
        m = re.search(r'name\s*=\s*"([^"]+)",\s*sources\s*=\s*\[([^\]]*)\]', text)
        if not m:
            raise SystemExit("pyproject.toml has no ext-modules entry this script can read") from None
        return m.group(1), re.findall(r'"([^"]+)"', m.group(2))


def build_with_setuptools(name: str, sources: list[str]) -> None:
    from setuptools import Distribution, Extension

    dist = Distribution({"name": "karchive-extension", "ext_modules": [Extension(name, sources)]})
    cmd = dist.get_command_obj("build_ext")
    cmd.inplace = True
    cmd.force = True  # the sources include c-ext/ files that setuptools does not date-check here
    dist.run_command("build_ext")


def build_with_compiler(name: str, sources: list[str]) -> None:
    """No setuptools: the compiler and flags this Python was built with (sysconfig), as setuptools would."""
    cc = shlex.split(sysconfig.get_config_var("CC") or "cc")
    flags = shlex.split(sysconfig.get_config_var("CFLAGS") or "") + shlex.split(
        sysconfig.get_config_var("CCSHARED") or "-fPIC"
    )
    ldshared = shlex.split(sysconfig.get_config_var("LDSHARED") or "cc -shared")
    out = ROOT / (name.replace(".", "/") + sysconfig.get_config_var("EXT_SUFFIX"))
    include = sysconfig.get_paths()["include"]
    objects = []
    for src in sources:
        obj = ROOT / "build" / (pathlib.Path(src).stem + ".o")
        obj.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([*cc, *flags, "-O2", f"-I{include}", "-c", str(ROOT / src), "-o", str(obj)], check=True)
        objects.append(str(obj))
    subprocess.run([*ldshared, *objects, "-o", str(out)], check=True)


def main() -> int:
    name, sources = extension_spec()
    try:
        import setuptools  # noqa: F401
    except ImportError:
        build_with_compiler(name, sources)
    else:
        import os

        os.chdir(ROOT)
        build_with_setuptools(name, sources)
    built = sorted(ROOT.glob(name.replace(".", "/") + "*" + (sysconfig.get_config_var("EXT_SUFFIX") or ".so")))
    if not built:
        print("the extension was not built", file=sys.stderr)
        return 1
    print(built[-1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
