"""Compile one Triton kernel for one target, ahead of time and with no GPU: the public face of
:mod:`karchive.producer.compile`.

::

    from karchive.compile import VariantRequest, compile_variant

    req = VariantRequest("kernels.py:add_kernel", "*fp32:16, *fp32:16, *fp32:16, i32", "cuda:90", {"BLOCK": 1024})
    variant = compile_variant(req)      # a CompiledVariant: the manifest entry and its files

Needs the ``producer`` extra (Triton), imported when a compile runs. To build a whole spec into an archive,
see :mod:`karchive.build`.
"""

from .producer.compile import *  # noqa: F403 - the face is the package's own list of names
from .producer.compile import __all__ as __all__
