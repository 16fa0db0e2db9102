"""Autotuned kernels whose prune_configs_by a build can and cannot apply (tests/test_aot_prune.py; a plain module,
not collected, imported only where Triton is installed)."""

from __future__ import annotations

import triton
import triton.language as tl

CONFIGS = [
    triton.Config({"BLOCK": 64}, num_warps=2),
    triton.Config({"BLOCK": 128}, num_warps=4),
    triton.Config({"BLOCK": 256}, num_warps=8),
]


def _small_blocks(configs, named_args, **kwargs):
    """Looks at the configs only: the same answer for every call."""
    return [c for c in configs if c.kwargs["BLOCK"] <= 128]


def _at_least_head(configs, named_args, **kwargs):
    """Reads a constexpr the spec fixes (HEAD): the build knows it, per request."""
    return [c for c in configs if c.kwargs["BLOCK"] >= named_args["HEAD"]]


def _by_size(configs, named_args, **kwargs):
    """Reads a launch argument (n): only a call knows it."""
    return [c for c in configs if c.kwargs["BLOCK"] <= max(64, named_args["n"])]


def _probe_optional(configs, named_args, **kwargs):
    """Asks whether an argument is passed: unknowable before the call."""
    return configs[:1] if "bias_ptr" in named_args else configs


def _device_bound(configs, named_args, **kwargs):
    """Reads the device (as operator libraries do): fails without one, or would bake one GPU into the archive."""
    raise RuntimeError("no CUDA device")


def _model(**kwargs):
    return kwargs["BLOCK"]


@triton.autotune(configs=CONFIGS, key=["n"], prune_configs_by={"early_config_prune": _small_blocks})
@triton.jit
def pr_configs_only(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)


@triton.autotune(configs=CONFIGS, key=["n"], prune_configs_by={"early_config_prune": _at_least_head})
@triton.jit
def pr_spec_arg(x_ptr, out_ptr, n, HEAD: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) * HEAD, mask=m)


@triton.autotune(configs=CONFIGS, key=["n"], prune_configs_by={"early_config_prune": _by_size})
@triton.jit
def pr_launch_arg(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)


@triton.autotune(configs=CONFIGS, key=["n"], prune_configs_by={"early_config_prune": _probe_optional})
@triton.jit
def pr_membership(x_ptr, bias_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)


@triton.autotune(
    configs=CONFIGS, key=["n"], prune_configs_by={"early_config_prune": _device_bound, "perf_model": _model, "top_k": 2}
)
@triton.jit
def pr_device(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)


@triton.autotune(
    configs=CONFIGS, key=["n"], prune_configs_by={"early_config_prune": _small_blocks, "perf_model": _model, "top_k": 1}
)
@triton.jit
def pr_perf_model(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)
