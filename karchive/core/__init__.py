"""Shared primitives below every other layer: canonical JSON, digests, atomic file writes, units.

Nothing here knows about archives, registries or kernels, and nothing here imports anything beyond the
standard library and :mod:`karchive.errors`; every other subpackage may build on it.
"""
