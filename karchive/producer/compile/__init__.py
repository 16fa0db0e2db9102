"""Compile: one Triton kernel, one signature, one target -> one archived variant, on a machine with no GPU.

Everything a single compile needs and both producers share: the request and the compile (:mod:`.aot`), the
signature syntax (:mod:`.signature`), the toolchain's targets and identity (:mod:`.toolchain`), the compile
environment (:mod:`.buildenv`), canonical source names (:mod:`.canonical`), the manifest entry
(:mod:`.describe`) and its stable key (:mod:`.variant_key`), finding kernels (:mod:`.kernel_ref`) and
ahead-of-time plans for ``@triton.autotune`` / ``@triton.heuristics`` kernels (:mod:`.wrapped`).

This package imports nothing from :mod:`karchive.producer.build` or :mod:`karchive.producer.capture`
(tests/test_layers.py). Importing it does not import Triton; a compile does.
"""

from .aot import VariantRequest, compile_variant, specialize, toolchain_versions
from .buildenv import compile_environment, strip_shell
from .canonical import kernel_name, module_sources
from .describe import CompiledVariant
from .kernel_ref import load_kernel
from .signature import Specialization
from .toolchain import build_fingerprint, check_target, cuda_capabilities, toolchain_report
from .variant_key import variant_key

__all__ = [
    "CompiledVariant",
    "Specialization",
    "VariantRequest",
    "build_fingerprint",
    "check_target",
    "compile_environment",
    "compile_variant",
    "cuda_capabilities",
    "kernel_name",
    "load_kernel",
    "module_sources",
    "specialize",
    "strip_shell",
    "toolchain_report",
    "toolchain_versions",
    "variant_key",
]
