"""karchive's import shim: ``triton.compiler.compiler``, present for torch's import-time probes only."""
