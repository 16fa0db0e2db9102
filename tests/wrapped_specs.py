"""The build-spec blocks that build tests/wrapped_kernels.py's kernels ahead of time, in one place for the CPU
tests (test_aot_wrapped.py, test_tune_keys.py) and the GPU phases (tests/gpu/wrapped_phases.py). No Triton
import here: GPU phases that run with Triton blocked read it too."""

from __future__ import annotations

import os


def kernel_blocks(module: str | os.PathLike) -> str:
    """``[[kernel]]`` blocks for at_copy, h_over_at (offsets both as a tensor and as None) and at_over_h."""
    return f"""[[kernel]]
source = "{module}:at_copy"
signature = "*fp32:16, *fp32:16, i32"
[[kernel]]
source = "{module}:h_over_at"
# offsets is a tensor (IS_VARLEN built both ways) or None (the constexpr None: IS_VARLEN evaluates to False)
signatures = ["*fp32:16, *fp32:16, *fp32:16, i32, fp32", "*fp32:16, *fp32:16, None, i32, fp32"]
[[kernel]]
source = "{module}:at_over_h"
signature = "*fp32:16, *fp32:16, i32"
"""
