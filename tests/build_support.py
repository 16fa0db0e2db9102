"""A small project checkout and CLI helpers for the build-at-scale tests (tests/test_build_ray.py, test_reuse.py).

Builds run the real CLI in subprocesses: each build imports the checkout's modules afresh (a test
edits them between builds), and nothing of them stays in the pytest process.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

from repro_support import HELPERS  # the same helper module as the reproducibility checkout
from support import EXAMPLES, ROOT

#: A plain module (no JIT function) that the kernel module imports: it must travel to Ray workers too.
CONFIG = '''"""Tuning constants shared by the kernels of this checkout."""
import triton.language as tl

SCALE = tl.constexpr(3)
'''

MYKERN = '''"""A kernel that calls a JIT helper of another module and reads a constexpr from a plain module."""
import triton
import triton.language as tl

from config import SCALE
from helpers import twice


@triton.jit
def scaled_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, twice(x) * SCALE + tl.load(y_ptr + offs, mask=mask), mask=mask)
'''

#: 8 variants: two modules, a helper module, a config module; cuda:80 (pre-sm_90 ptxas), cuda:90, gfx942.
SPEC = """[archive]
name = "scale"
version = "1.0"
dictionary = "none"
level = 3

[[kernel]]
source = "kernels.py:add_kernel"
signature = "*fp32:16, *fp32:16, *fp32:16, i32"
constexprs = { BLOCK = [256, 1024] }
targets = ["cuda:90", "hip:gfx942"]

[[kernel]]
source = "kernels.py:softmax_kernel"
signature = "*fp32:16, *fp32:16, i32, i32, i32"
constexprs = { BLOCK = [256] }
targets = ["cuda:80", "hip:gfx942"]

[[kernel]]
source = "mykern.py:scaled_add"
signature = "*fp32:16, *fp32:16, *fp32:16, i32"
constexprs = { BLOCK = [256] }
num_warps = [4]
targets = ["cuda:90", "hip:gfx942"]
"""
SPEC_VARIANTS = 8


def make_checkout(directory: pathlib.Path, spec: str = SPEC) -> pathlib.Path:
    """The example kernels, a kernel with a helper and a config module, and the spec. Returns the spec path."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "kernels.py").write_bytes((EXAMPLES / "kernels.py").read_bytes())
    (directory / "helpers.py").write_text(HELPERS)
    (directory / "config.py").write_text(CONFIG)
    (directory / "mykern.py").write_text(MYKERN)
    (directory / "build.toml").write_text(spec)
    return directory / "build.toml"


def karchive(
    *args: str, env: dict[str, str] | None = None, cwd: os.PathLike | str | None = None, timeout: float = 600
) -> subprocess.CompletedProcess:
    """Run the karchive CLI in a fresh interpreter."""
    full = {**os.environ, **(env or {})}
    full["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), full.get("PYTHONPATH", "")]))
    return subprocess.run(
        [sys.executable, "-m", "karchive", *args], capture_output=True, text=True, env=full, cwd=cwd, timeout=timeout
    )


def build(
    spec: pathlib.Path, out: pathlib.Path, *extra: str, env: dict[str, str] | None = None, expect: int = 0
) -> dict:
    """``karchive build SPEC -o OUT --json ...``: the summary, after checking the exit status."""
    r = karchive("build", str(spec), "-o", str(out), "--json", *extra, env=env)
    assert r.returncode == expect, f"exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    return json.loads(r.stdout)
