"""An archived Triton kernel inside jax.jit through jaxlib's Triton custom call (no Triton installed).

python examples/jax_example.py [examples.karc]       # karchive build examples/build.toml -o examples.karc
"""

import os
import sys


def skip(why: str) -> None:
    print(f"skipped: {why}")
    sys.exit(0)


ARCHIVE = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "examples.karc")

try:
    import jax
    import jax.numpy as jnp
except ImportError:
    skip("jax is not installed")
if not any(d.platform == "gpu" for d in jax.devices()):
    skip("JAX sees no CUDA GPU (pip install 'jax[cuda13]')")
if not os.path.exists(ARCHIVE):
    skip(f"no archive at {ARCHIVE} (karchive build examples/build.toml -o examples.karc)")

import karchive
from karchive.interop.jax import describe, triton_call

arc = karchive.open(ARCHIVE)
add = arc.kernel("add_kernel")
grid = lambda m: ((m["n_elements"] + m["BLOCK"] - 1) // m["BLOCK"],)  # noqa: E731


@jax.jit
def f(x, y):
    z = triton_call(add, x, y, x.size, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=grid, BLOCK=1024)
    return jnp.sin(z)


x = jnp.arange(1 << 20, dtype=jnp.float32)
y = jnp.ones_like(x)
assert jnp.allclose(f(x, y), jnp.sin(x + y))
d = describe(add, x, y, x.size, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=grid, BLOCK=1024)
print(f"jax example OK: {d.kernel_name} ran inside jax.jit from the archive's {d.path}")
