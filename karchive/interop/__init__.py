"""Framework bridges: the same archive as torch custom ops, inside ``jax.jit``, and with CuPy / raw pointers.

- :mod:`karchive.interop.torch` — ``custom_op("lib::name", kernel, ...)``: a ``torch.library`` op with a
  fake implementation, so ``torch.compile(fullgraph=True)`` and CUDA graphs see one opaque node.
- :mod:`karchive.interop.jax` — ``triton_call(kernel, *args, out_shape=..., grid=...)``: jaxlib's Triton
  custom call fed from the archive (cubin or PTX), no Triton installed.
- CuPy, Numba and raw device pointers need no bridge: ``kernel[grid](...)`` takes them directly
  (see ``examples/cupy_example.py`` and ``docs/interop.md``).

Nothing here imports torch or JAX until the submodule is imported.
"""

from __future__ import annotations

from ..errors import InteropError  # the class lives with every other karchive error

__all__ = ["InteropError"]
