"""Build side: compile Triton kernels ahead of time (no GPU needed) or capture the JIT, and pack archives.

Three activities, one subpackage each: :mod:`.compile` (one kernel -> one variant, shared by the other two),
:mod:`.build` (a spec's variants in parallel -> an archive) and :mod:`.capture` (what a workload's JIT
compiled -> an archive). The public entry points are also at the top: :mod:`karchive.compile`,
:mod:`karchive.build` and ``karchive.capture(...)``.

Importing this package does not import Triton; the modules that need it import it when called.
"""

__all__ = ["build", "capture", "compile"]
