"""karchive's import shim: ``triton.compiler``, present for torch's import-time probes; it has no compiler
(``triton.compile`` does not exist here: a library that compiles needs real Triton)."""
