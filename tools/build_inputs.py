"""Print a digest of everything a build of SPEC reads, so a script can skip a build whose output is current.

    python tools/build_inputs.py examples/build.toml

The digest covers the spec file, every ``.py`` file beside it (the kernels it names and their helpers), the
karchive package's own sources and ``pyproject.toml``, and the installed Triton's version (which fixes its
ptxas and LLVM). A build reads nothing else that shapes its output: it ignores the shell's variables and is
byte-reproducible (spec/FORMAT.md §12), so equal digests mean the same archive. examples/demo.sh keeps the
digest of its last build beside the archive and rebuilds only when it changes. Imports neither karchive nor
Triton (the version is read from the installed metadata): it costs a Python start and a read of the files.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def inputs_digest(spec: pathlib.Path) -> str:
    files = [
        spec,
        *sorted(spec.parent.glob("*.py")),
        ROOT / "pyproject.toml",
        *sorted((ROOT / "karchive").rglob("*.py")),
    ]
    h = hashlib.sha256()
    for path in files:
        h.update(str(path.resolve().relative_to(ROOT) if path.resolve().is_relative_to(ROOT) else path).encode())
        h.update(b"\0" + path.read_bytes() + b"\0")
    try:
        triton = importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        triton = "none"
    h.update(f"triton {triton}".encode())
    return h.hexdigest()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python tools/build_inputs.py SPEC.toml")
    print(inputs_digest(pathlib.Path(sys.argv[1])))
