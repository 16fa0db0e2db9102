"""karchive: versioned archives of prebuilt Triton kernels, and a light runtime to launch them."""

__version__ = "0.1.0"

#: Public names imported on first use, so ``import karchive`` stays light (no Triton, no zstd).
_LAZY = {
    "capture": ("karchive.producer.capture", "capture"),
    "open": ("karchive.runtime.archive", "open_archive"),
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'karchive' has no attribute {name!r}")
