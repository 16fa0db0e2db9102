"""Kernels of the serve-fidelity scenarios (tests/fidelity_support.py): one per way a library drives Triton's runtime.

A plain module, imported only where Triton is installed (by the phase processes of tests/test_serve_fidelity.py).
Captured as ``fidelity_kernels:<name>``; the bodies are trivial on purpose (what is compared is what the runtime
does around them, not what they compute).
"""

from __future__ import annotations

import triton
import triton.language as tl

#: A constexpr global a kernel reads (Triton records it in ``used_global_vals`` and refuses a launch once it changed).
FACTOR = tl.constexpr(2)

#: What the library-side functions below saw, in call order (the scenarios read and clear it).
SEEN: list = []


@triton.jit
def copy(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)


@triton.jit
def scaled(x_ptr, out_ptr, n, alpha=2.0, flag: tl.int32 = 3, BLOCK: tl.constexpr = 128):
    """Runtime parameters with defaults (Triton binds them when omitted) and a defaulted constexpr."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) * alpha + flag, mask=m)


@triton.jit(do_not_specialize=["n"], do_not_specialize_on_alignment=["x_ptr"])
def unspecialized(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)


@triton.jit
def with_global(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) * FACTOR, mask=m)


def _launch_metadata(grid, metadata, args):
    """``@triton.jit(launch_metadata=...)``: what profilers (proton) read through the launch hooks."""
    return {"name": f"described[n={args['n']}]", "bytes": 8 * args["n"], "grid0": grid[0]}


@triton.jit(launch_metadata=_launch_metadata)
def described(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)


_CONFIGS = [
    triton.Config({"BLOCK": 64}, num_warps=2),
    triton.Config({"BLOCK": 128}, num_warps=4),
    triton.Config({"BLOCK": 256}, num_warps=8),
]


@triton.autotune(configs=list(_CONFIGS), key=["n"])
@triton.jit
def tuned(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)


@triton.autotune(configs=list(_CONFIGS), key=["n"])
@triton.jit
def prefilled(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)


def table_prune(configs, nargs, **kwargs):
    """A per-GPU tuning table read at run time (GemLite's pattern): one config built here, not one of ``configs``."""
    SEEN.append(("prune", sorted(nargs), sorted(kwargs), len(configs)))
    block = 512 if nargs["n"] >= 4096 else 32
    return [triton.Config({"BLOCK": block}, num_warps=8 if block == 512 else 1, num_stages=2)]


@triton.autotune(configs=list(_CONFIGS), key=["n"], prune_configs_by={"early_config_prune": table_prune})
@triton.jit
def table_tuned(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)


def perf_model(**kwargs):
    """``prune_configs_by['perf_model']``: an estimated time per config (smaller BLOCK: slower)."""
    SEEN.append(("perf_model", kwargs["BLOCK"], kwargs["num_warps"]))
    return 1000.0 / kwargs["BLOCK"]


@triton.autotune(configs=list(_CONFIGS), key=["n"], prune_configs_by={"perf_model": perf_model, "top_k": 2})
@triton.jit
def modelled(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)


def config_hook(nargs):
    """A config ``pre_hook`` (descriptor kernels set block shapes here): runs before every launch of its config."""
    from fidelity_support import benchmarking

    SEEN.append(("config_pre_hook", nargs["BLOCK"], sorted(nargs), benchmarking()))


def tuner_pre_hook(kwargs, reset_only=False):
    from fidelity_support import benchmarking

    SEEN.append(("tuner_pre_hook", reset_only, benchmarking()))


def tuner_post_hook(kwargs, exception):
    from fidelity_support import benchmarking

    SEEN.append(("tuner_post_hook", exception is None, benchmarking()))


@triton.autotune(
    configs=[triton.Config({"BLOCK": b}, num_warps=w, pre_hook=config_hook) for b, w in ((64, 2), (128, 4))],
    key=["n"],
    pre_hook=tuner_pre_hook,
    post_hook=tuner_post_hook,
)
@triton.jit
def hooked(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)


@triton.autotune(configs=list(_CONFIGS), key=["n"], reset_to_zero=["acc_ptr"], restore_value=["x_ptr"])
@triton.jit
def accumulating(x_ptr, acc_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.atomic_add(acc_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)


@triton.autotune(configs=list(_CONFIGS), key=["n"])
@triton.jit
def dtype_keyed(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)


@triton.jit
def sub_tuned_body(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)


def _heur_block(args):
    SEEN.append(("heuristic", sorted(args)))
    return 64 if args["n"] < 1024 else 256


@triton.heuristics({"BLOCK": _heur_block, "num_warps": lambda args: 2 if args["n"] < 1024 else 8})
@triton.jit
def heuristic(x_ptr, out_ptr, n, scale=1.0, BLOCK: tl.constexpr = 32):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) * scale, mask=m)


@triton.jit
def optional_bias(x_ptr, bias_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    if bias_ptr is not None:
        x += tl.load(bias_ptr + offs, mask=m)
    tl.store(out_ptr + offs, x, mask=m)


@triton.jit
def cast(x_ptr, out_ptr, n, DT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m).to(DT), mask=m)


@triton.jit
def masked(mask_ptr, out_ptr, n, invert, BLOCK: tl.constexpr):
    """A bool tensor (``*u1``) and a bool runtime scalar (``u1``)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    v = tl.load(mask_ptr + offs, mask=m)
    if invert:
        v = v == 0
    tl.store(out_ptr + offs, v.to(tl.float32), mask=m)


class LibTuner(triton.runtime.autotuner.Autotuner):
    """A library's Autotuner subclass (FlagGems' LibTuner, fla's CachedAutotuner): its own run and prune_configs."""

    def prune_configs(self, kwargs):
        SEEN.append(("LibTuner.prune_configs", sorted(kwargs)))
        return [c for c in self.configs if c.kwargs["BLOCK"] != 64]

    def run(self, *args, **kwargs):
        SEEN.append(("LibTuner.run", len(args), sorted(kwargs)))
        return super().run(*args, **kwargs)


sub_tuned = LibTuner(sub_tuned_body, sub_tuned_body.arg_names, list(_CONFIGS), ["n"], None, None)


@triton.autotune(
    configs=[triton.Config({"BLOCK": 64}, num_warps=2), triton.Config({"BLOCK": 128}, num_warps=4)], key=["n"]
)
@triton.heuristics({"EVEN": lambda args: args["n"] % args["BLOCK"] == 0})
@triton.jit
def tuned_even(x_ptr, out_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    """Heuristics under the autotuner (GemLite's stacking): they read the chosen config's values."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN:
        tl.store(out_ptr + offs, tl.load(x_ptr + offs))
    else:
        m = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)


@triton.heuristics({"HAS_B": lambda args: args["b_ptr"] is not None})
@triton.autotune(
    configs=[triton.Config({"BLOCK": 64}, num_warps=2), triton.Config({"BLOCK": 128}, num_warps=4)], key=["n", "HAS_B"]
)
@triton.jit
def biased_tuned(x_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr, HAS_B: tl.constexpr):
    """Heuristics above the autotuner (flash-linear-attention's stacking): their value is part of the tuning key."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    if HAS_B:
        x += tl.load(b_ptr + offs, mask=m)
    tl.store(out_ptr + offs, x, mask=m)
