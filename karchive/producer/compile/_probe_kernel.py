"""The smallest kernel there is: compiled once per HIP target to ask Triton whether it supports it
(:mod:`karchive.producer.compile.toolchain`). Imported only by that check; importing it imports Triton."""

import triton
import triton.language as tl


@triton.jit
def karchive_probe(x):
    tl.store(x, tl.load(x) + 1.0)
