"""Capture: what Triton's JIT compiles while a workload runs, and Triton's on-disk cache read and written back."""
