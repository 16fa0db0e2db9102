"""Shared primitives below every other layer: canonical JSON, digests, atomic file writes, units.

Nothing here knows about archives, registries or kernels, and nothing here imports anything beyond the
standard library and :mod:`karchive.errors`; every other subpackage may build on it.
"""

#: The submodules: the API lives there, and importing this package imports none of them.
__all__ = ["destination", "digest", "fsio", "grammar", "jsonio", "paths", "text", "tomlio", "units"]
