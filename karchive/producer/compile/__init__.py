"""Compile: one Triton kernel, one target, one variant, on a machine with no GPU (and what every compile shares)."""
