"""karchive's import shim: ``triton.backends``, present so that torch's import-time probes pass.

Why: torch decides "Triton is installed" by ``import triton`` succeeding, and then, at import of
``torch._inductor.runtime.hints`` (pulled in by libraries that import ``torch._dynamo`` / ``torch._inductor``
helpers, Liger-Kernel among them), runs ``import triton.backends.compiler`` and ``import triton.compiler.compiler``
unguarded, and ``torch.utils._triton`` reads ``triton.backends.backends``. No backend is registered: nothing in the
shim compiles; a library that needs one needs real Triton (docs/serving.md).
"""

from __future__ import annotations

from typing import Any

#: Triton's registry of installed backends (name -> backend); empty: the shim has no compiler.
backends: dict[str, Any] = {}
