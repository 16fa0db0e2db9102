"""karchive: versioned archives of prebuilt Triton kernels, and a light runtime to launch them.

``karchive.open(ref)`` opens an archive (a path, a URL, or NAME@VERSION from a registry);
``karchive.capture(name, version)`` records what Triton's JIT compiles; :mod:`karchive.build` and
:mod:`karchive.compile` build ahead of time; ``karchive.serve(arc)`` serves unchanged ``kernel[grid](...)``
call sites from archives; ``karchive.Registry`` publishes and pulls. Every error karchive raises derives
from ``karchive.KarchiveError``; the main subclasses are here too (``karchive.NotFoundError``,
``karchive.NoMatchingVariantError``, ...). ``dir(karchive)`` lists them all.
"""

__version__ = "0.1.0"

#: Public names imported on first use, so ``import karchive`` stays light (no Triton, no zstd).
_LAZY = {
    "capture": ("karchive.producer.capture.jit_capture", "capture"),
    "open": ("karchive.runtime.archive", "open_archive"),
    "Archive": ("karchive.runtime.archive", "Archive"),
    "Registry": ("karchive.registry", "Registry"),
    "TensorDescriptor": ("karchive.runtime.descriptors", "TensorDescriptor"),
    "OpenOptions": ("karchive.registry.options", "OpenOptions"),
    "torch": ("karchive.interop.torch", None),  # the module itself: karchive.torch.custom_op(...)
    "build": ("karchive.build", None),  # karchive.build.build_archive(...), as `karchive build` does
    "compile": ("karchive.compile", None),  # karchive.compile.compile_variant(...)
    "serve": ("karchive.serve", None),  # a callable package: karchive.serve(ARCHIVES, mode=...) (docs/serving.md)
    "serve_report": ("karchive.serve", "serve_report"),
}

#: The exception hierarchy's base and main classes, one ``except`` away (karchive/errors.py has them all).
_ERRORS = (
    "KarchiveError",
    "FormatError",
    "ArchiveNotFoundError",
    "IntegrityError",
    "DigestMismatchError",
    "UnsupportedLocationError",
    "TargetError",
    "ProducerError",
    "CompileError",
    "SpecFileError",
    "BuildError",
    "CaptureError",
    "RegistryError",
    "DamagedRegistryError",
    "RegistryValueError",
    "CacheError",
    "NotFoundError",
    "ConflictError",
    "LockfileError",
    "LockfilePinError",
    "LockfileMismatchError",
    "TransferError",
    "RuntimeLoadError",
    "NoDeviceError",
    "NoMatchingVariantError",
    "KernelNameError",
    "ArgumentError",
    "LaunchError",
    "DriverError",
    "ServeMissError",
    "TrustError",
    "UntrustedArchiveError",
    "DestinationError",
)
_LAZY.update({name: ("karchive.errors", name) for name in _ERRORS})

#: What ``from karchive import *`` gives: every public name but the torch bridge (a star import must not need torch).
#: ``karchive/__init__.pyi`` states the same names with their types, for checkers (tests/test_front_door.py).
__all__ = ["__version__", *sorted(n for n in _LAZY if n != "torch")]


def __getattr__(name: str) -> object:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        mod = importlib.import_module(module)
        return mod if attr is None else getattr(mod, attr)
    raise AttributeError(f"module 'karchive' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The lazy attributes too (PEP 562), so tab completion and ``dir(karchive)`` show ``open`` & co."""
    return sorted(set(globals()) | set(_LAZY))
