"""A minimal ``triton`` for processes without Triton: enough for library modules that only decorate and launch
kernels to import, so that ``karchive.serve`` serves their launches from archives (docs/serving.md).

Installed by ``karchive.serve`` only when serving and only when ``import triton`` fails (Triton not installed,
or blocked with ``sys.modules["triton"] = None``): loaded from here as ``triton``, never through ``sys.path``. Nothing here compiles: a launch that the
archives do not serve raises. Kernel bodies are never executed, so ``tl.*`` functions are inert stubs; what
a module calls *at import time* must be here (see docs/serving.md for which libraries import this way).
"""
