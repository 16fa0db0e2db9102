"""Capture: archive what Triton's JIT compiles while a workload runs, and read or write Triton's on-disk cache.

The capture window and its hooks (:mod:`.jit_capture`; ``karchive.capture(...)`` is its entry point), which
captures a compile belongs to (:mod:`._scope`), what the window saw but did not record (:mod:`._report`),
the autotune and heuristics choices heard at run time (:mod:`._autotune_log`, :mod:`._heuristics_log`), and
Triton's cache directory as a source and a destination (:mod:`.triton_cache`).

Builds on :mod:`karchive.producer.compile`, and on :mod:`karchive.producer.build.pack` to write the archive
(tests/test_layers.py). Importing it does not import Triton; a capture does.
"""

from ._report import LeftOut
from .jit_capture import Capture, CaptureIncompleteWarning, capture
from .triton_cache import ExportResult, ImportResult, export_archive, import_cache, iter_cache, local_cache_dir

__all__ = [
    "Capture",
    "CaptureIncompleteWarning",
    "ExportResult",
    "ImportResult",
    "LeftOut",
    "capture",
    "export_archive",
    "import_cache",
    "iter_cache",
    "local_cache_dir",
]
