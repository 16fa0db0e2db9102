"""The launch path: from ``kernel[grid](...)`` to the driver's launch function.

``kernel.py`` (the :class:`~.kernel.Kernel` users hold) → ``_plan.py`` (what a call's selection key
reads) → ``_pypath.py`` (the Python path, a plain function) or ``_native.py`` (the compiled path's
objects, made from the plan and the records) → ``_record.py`` (one loaded variant: its plain
:class:`~._record.VariantRecord` and its launch) → ``_argpack.py`` (the parameter buffer) → the
driver behind ``runtime/backend.Backend``. docs/architecture.md walks it in one page.

This package imports nothing on import, so that importing one of its modules never drags in another.
"""

#: Nothing is re-exported here (importing the package must not import its modules); users hold
#: ``karchive.runtime.launch.kernel.Kernel`` through ``Archive.kernel()``.
__all__: list[str] = []
