"""The types of ``karchive``'s public names, for users' type checkers.

``karchive/__init__.py`` imports these names lazily, on first use (PEP 562 ``__getattr__``), so that
``import karchive`` stays light; a checker cannot follow that, so this stub names each one where it lives
(as python-zstandard ships ``__init__.pyi`` beside its ``__init__.py``). tests/test_front_door.py fails when the
two disagree.
"""

from . import build as build
from . import compile as compile
from .errors import (
    KarchiveError as KarchiveError, FormatError as FormatError, ArchiveNotFoundError as ArchiveNotFoundError,
    IntegrityError as IntegrityError, DigestMismatchError as DigestMismatchError,
    UnsupportedLocationError as UnsupportedLocationError, TargetError as TargetError, ProducerError as ProducerError,
    CompileError as CompileError, SpecFileError as SpecFileError, BuildError as BuildError,
    CaptureError as CaptureError, RegistryError as RegistryError, DamagedRegistryError as DamagedRegistryError,
    RegistryValueError as RegistryValueError, CacheError as CacheError, NotFoundError as NotFoundError,
    ConflictError as ConflictError, LockfileError as LockfileError, LockfilePinError as LockfilePinError,
    LockfileMismatchError as LockfileMismatchError, TransferError as TransferError,
    RuntimeLoadError as RuntimeLoadError, NoDeviceError as NoDeviceError,
    NoMatchingVariantError as NoMatchingVariantError, KernelNameError as KernelNameError,
    ArgumentError as ArgumentError, LaunchError as LaunchError, DriverError as DriverError,
    ServeMissError as ServeMissError, TrustError as TrustError, UntrustedArchiveError as UntrustedArchiveError,
    DestinationError as DestinationError
)
from .interop import torch as torch
from .producer.capture.jit_capture import capture as capture
from .registry import Registry as Registry
from .registry.options import OpenOptions as OpenOptions
from .runtime.archive import Archive as Archive
from .runtime.archive import open_archive as open
from .runtime.descriptors import TensorDescriptor as TensorDescriptor
# karchive.serve is the package, callable as its serve(): typed here as the call people write
from .serve import serve as serve
from .serve import serve_report as serve_report

__version__: str

# everything but the torch bridge (karchive.torch): a star import must not need torch

__all__ = ["__version__", "Archive", "ArchiveNotFoundError", "ArgumentError", "BuildError", "CacheError",
           "CaptureError", "CompileError", "ConflictError", "DamagedRegistryError", "DestinationError",
           "DigestMismatchError", "DriverError", "FormatError", "IntegrityError", "KarchiveError", "KernelNameError",
           "LaunchError", "LockfileError", "LockfileMismatchError", "LockfilePinError", "NoDeviceError",
           "NoMatchingVariantError", "NotFoundError", "OpenOptions", "ProducerError", "Registry", "RegistryError",
           "RegistryValueError", "RuntimeLoadError", "ServeMissError", "SpecFileError", "TargetError",
           "TensorDescriptor", "TransferError", "TrustError", "UnsupportedLocationError", "UntrustedArchiveError",
           "build", "capture", "compile", "open", "serve", "serve_report"]
