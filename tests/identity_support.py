"""Two modules that each define ``add_kernel`` with a different body (tests/test_kernel_identity.py and
tests/gpu/test_gpu_identity.py): kernels are filed as ``module:qualname``, so both are archived."""

from __future__ import annotations

import pathlib

ALPHA = '''"""alpha.add_kernel: out = x + y."""
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)
'''

#: Same name, same signature, another body: out = x - y.
BETA = '''"""beta.add_kernel: the same name and signature as alpha's, but out = x - y."""
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) - tl.load(y_ptr + offs, mask=mask), mask=mask)
'''

#: A kernel made inside a function (qualname ``make.<locals>.scale``).
NESTED = '''"""A kernel defined inside a function."""
import triton
import triton.language as tl


def make():
    @triton.jit
    def scale(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 3, mask=mask)
    return scale


scale = make()
'''

SIG = "*fp32:16, *fp32:16, *fp32:16, i32"


def spec_text(targets: tuple[str, ...] = ("cuda:90",), nested: bool = True) -> str:
    t = ", ".join(f'"{x}"' for x in targets)
    text = f'''[archive]
name = "twins"
version = "1.0"
targets = [{t}]

[[kernel]]
source = "alpha.py:add_kernel"
signature = "{SIG}"
constexprs = {{ BLOCK = [256] }}

[[kernel]]
source = "beta.py:add_kernel"
signature = "{SIG}"
constexprs = {{ BLOCK = [256] }}
'''
    if nested:
        text += """
[[kernel]]
source = "nested.py:scale"
signature = "*fp32:16, *fp32:16, i32"
constexprs = { BLOCK = [256] }
"""
    return text


def make_checkout(root: pathlib.Path, **kw) -> pathlib.Path:
    """The two modules, the nested one and a build spec under ``root``; returns the spec's path."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "alpha.py").write_text(ALPHA)
    (root / "beta.py").write_text(BETA)
    (root / "nested.py").write_text(NESTED)
    spec = root / "build.toml"
    spec.write_text(spec_text(**kw))
    return spec
