"""karchive: versioned archives of prebuilt Triton kernels, and a light runtime to launch them."""

__version__ = "0.1.0"

#: Public names imported on first use, so ``import karchive`` stays light (no Triton, no zstd).
_LAZY = {
    "capture": ("karchive.producer.capture", "capture"),
    "open": ("karchive.runtime.archive", "open_archive"),
    "Registry": ("karchive.registry", "Registry"),
    "torch": ("karchive.interop.torch", None),  # the module itself: karchive.torch.custom_op(...)
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        mod = importlib.import_module(module)
        return mod if attr is None else getattr(mod, attr)
    raise AttributeError(f"module 'karchive' has no attribute {name!r}")
