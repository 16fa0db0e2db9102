"""The types of ``karchive``'s public names, for users' type checkers.

``karchive/__init__.py`` imports these names lazily, on first use (PEP 562 ``__getattr__``), so that
``import karchive`` stays light; a checker cannot follow that, so this stub names each one where it lives
(as python-zstandard ships ``__init__.pyi`` beside its ``__init__.py``). tests/test_front_door.py fails when the
two disagree.
"""

from . import build as build
from . import compile as compile
from .errors import ArchiveNotFoundError as ArchiveNotFoundError
from .errors import ArgumentError as ArgumentError
from .errors import BuildError as BuildError
from .errors import CacheError as CacheError
from .errors import CaptureError as CaptureError
from .errors import CompileError as CompileError
from .errors import ConflictError as ConflictError
from .errors import DamagedRegistryError as DamagedRegistryError
from .errors import DestinationError as DestinationError
from .errors import DigestMismatchError as DigestMismatchError
from .errors import DriverError as DriverError
from .errors import FormatError as FormatError
from .errors import IntegrityError as IntegrityError
from .errors import KarchiveError as KarchiveError
from .errors import KernelNameError as KernelNameError
from .errors import LaunchError as LaunchError
from .errors import LockfileError as LockfileError
from .errors import LockfileMismatchError as LockfileMismatchError
from .errors import LockfilePinError as LockfilePinError
from .errors import NoDeviceError as NoDeviceError
from .errors import NoMatchingVariantError as NoMatchingVariantError
from .errors import NotFoundError as NotFoundError
from .errors import ProducerError as ProducerError
from .errors import RegistryError as RegistryError
from .errors import RegistryValueError as RegistryValueError
from .errors import RuntimeLoadError as RuntimeLoadError
from .errors import ServeMissError as ServeMissError
from .errors import SpecFileError as SpecFileError
from .errors import TargetError as TargetError
from .errors import TransferError as TransferError
from .errors import TrustError as TrustError
from .errors import UnsupportedLocationError as UnsupportedLocationError
from .errors import UntrustedArchiveError as UntrustedArchiveError
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

__all__ = [
    "__version__",
    "Archive",
    "ArchiveNotFoundError",
    "ArgumentError",
    "BuildError",
    "CacheError",
    "CaptureError",
    "CompileError",
    "ConflictError",
    "DamagedRegistryError",
    "DestinationError",
    "DigestMismatchError",
    "DriverError",
    "FormatError",
    "IntegrityError",
    "KarchiveError",
    "KernelNameError",
    "LaunchError",
    "LockfileError",
    "LockfileMismatchError",
    "LockfilePinError",
    "NoDeviceError",
    "NoMatchingVariantError",
    "NotFoundError",
    "OpenOptions",
    "ProducerError",
    "Registry",
    "RegistryError",
    "RegistryValueError",
    "RuntimeLoadError",
    "ServeMissError",
    "SpecFileError",
    "TargetError",
    "TensorDescriptor",
    "TransferError",
    "TrustError",
    "UnsupportedLocationError",
    "UntrustedArchiveError",
    "build",
    "capture",
    "compile",
    "open",
    "serve",
    "serve_report",
]
