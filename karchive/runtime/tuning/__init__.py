"""Tuning among an archive's prebuilt configs, in one place: timing a config on the device (``bench``), the
decisions kept in the local cache and shipped between machines (``decisions``), keys files and the tuner of
``karchive tune`` (``tuner``), signed tuning sidecars (``signed``).

What tuning reads and writes in an archive is format data and lives with the format (the autotune records,
``format/autotune``; their per-GPU-model tables, ``format/tuned``); writing a tuned archive version is
producer work (``producer/build/tune_archive``); the resolver that asks for a decision at a launch is
``runtime/autotuned``. This package imports nothing on import.
"""

__all__ = ["bench", "decisions", "signed", "tuner"]
