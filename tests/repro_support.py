"""Small checkouts and helpers for the reproducibility and rebuild tests (real Triton compiles, few variants)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

from support import EXAMPLES, ROOT

HELPERS = '''"""A helper module: its JIT function is inlined into a kernel of another file."""
import triton


@triton.jit
def twice(x):
    return x * 2
'''

MYKERN = '''"""A kernel that calls a JIT helper defined in another module (helpers.py)."""
import triton
import triton.language as tl

from helpers import twice


@triton.jit
def scaled_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, twice(x) + tl.load(y_ptr + offs, mask=mask), mask=mask)
'''

#: softmax reaches triton/language/standard.py (tl.max, tl.sum) and a helper in its own file; cuda:80
#: is compiled by Triton's pre-sm_90 ptxas, which records the mtime of a `.file` it finds in the cwd.
SPEC = """[archive]
name = "repro"
version = "1.0"
dictionary = "none"

[[kernel]]
source = "kernels.py:softmax_kernel"
signature = "*fp32:16, *fp32:16, i32, i32, i32"
constexprs = { BLOCK = [256] }
targets = ["cuda:80", "hip:gfx942"]

[[kernel]]
source = "mykern.py:scaled_add"
signature = "*fp32:16, *fp32:16, *fp32:16, i32"
constexprs = { BLOCK = [256] }
targets = ["cuda:90", "hip:gfx942"]
"""

#: The same kernels compiled the way Triton's JIT does (triton.compile on the function), without karchive.
JIT_PREWARM = r"""
import sys
sys.path.insert(0, sys.argv[1])
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
import kernels, mykern
jobs = [(kernels.softmax_kernel, {"out_ptr": "*fp32", "in_ptr": "*fp32", "in_row_stride": "i32",
         "out_row_stride": "i32", "n_cols": "i32", "BLOCK": "constexpr"}, [("cuda", 80, 32), ("hip", "gfx942", 64)]),
        (mykern.scaled_add, {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"},
         [("cuda", 90, 32), ("hip", "gfx942", 64)])]
for fn, sig, targets in jobs:
    attrs = {(i,): [["tt.divisibility", 16]] for i, t in enumerate(sig.values()) if t.startswith("*")}
    for t in targets:
        triton.compile(ASTSource(fn, sig, {"BLOCK": 256}, attrs), target=GPUTarget(*t))
print("warm")
"""


def make_checkout(directory: pathlib.Path) -> pathlib.Path:
    """A project checkout: the example kernels, a kernel using a helper module, and the spec. Returns the spec."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "kernels.py").write_bytes((EXAMPLES / "kernels.py").read_bytes())
    (directory / "helpers.py").write_text(HELPERS)
    (directory / "mykern.py").write_text(MYKERN)
    spec = directory / "build.toml"
    spec.write_text(SPEC)
    return spec


def clean_env(**extra: str | None) -> dict[str, str]:
    """The test process's environment without the variables a build controls, plus ``extra`` (None removes)."""
    from karchive.producer.compile.buildenv import CLEARED_ENV, CODEGEN_ENV

    env = {k: v for k, v in os.environ.items() if k not in CODEGEN_ENV | CLEARED_ENV}
    env["PYTHONPATH"] = str(ROOT)
    for k, v in extra.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


def karchive(
    args: list[str], *, cwd: pathlib.Path, env: dict[str, str], umask: int = 0o022, check: bool = True
) -> subprocess.CompletedProcess:
    """Run the real CLI in a fresh interpreter (its own cwd, environment and umask).

    The child sets its umask itself: a ``preexec_fn`` would run Python in the forked child, and where
    the test process has imported JAX (multithreaded) its at-fork hook rightly warns of a deadlock."""
    boot = f"import os, runpy; os.umask({umask:#o}); runpy.run_module('karchive', run_name='__main__', alter_sys=True)"
    out = subprocess.run([sys.executable, "-c", boot, *args], cwd=cwd, env=env, capture_output=True, text=True)
    if check and out.returncode != 0:
        raise AssertionError(f"karchive {' '.join(args)} exited {out.returncode}:\n{out.stdout}\n{out.stderr}")
    return out


def jit_prewarm(checkout: pathlib.Path, triton_cache: pathlib.Path) -> None:
    env = clean_env(TRITON_CACHE_DIR=str(triton_cache), TRITON_DEFAULT_FP_FUSION="1")
    subprocess.run(
        [sys.executable, "-c", JIT_PREWARM, str(checkout)],
        cwd=checkout,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )


def members(path: os.PathLike) -> dict[str, bytes]:
    """Every member of an archive, each checked against its digest."""
    from karchive.format.reader import ArchiveReader

    reader = ArchiveReader.from_path(path)
    return {name: reader.read(name) for name in sorted(reader.members)}


def cache_entries(cache: pathlib.Path) -> set[str]:
    return {str(p.relative_to(cache)) for p in cache.rglob("*") if p.is_file()} if cache.exists() else set()


def manifest(path: os.PathLike) -> dict:
    """The whole manifest (format 2: the header and every shard, assembled by the reader)."""
    from karchive.format.reader import ArchiveReader

    return ArchiveReader.from_path(path).manifest
