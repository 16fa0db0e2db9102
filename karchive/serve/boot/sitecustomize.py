"""Serve from archives in every Python process started with this directory on ``PYTHONPATH``
(``python -m karchive.serve`` puts it there): ``KARCHIVE_SERVE`` / ``KARCHIVE_SERVE_MODE`` say what.

A process that cannot serve does not run (issue 34): an archive that is gone, a mode that is not one of
strict, fallback or audit, an archive the trust policy refuses... is one line on stderr and exit status 2,
before any of the program's code. (Python's ``site`` module would print an exception raised here and run
the program anyway, unserved, through Triton's JIT.)

A ``sitecustomize`` found later on the path (the environment's own) still runs, after this one.
"""

from __future__ import annotations

import importlib.util
import os
import sys


def _chain() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        if not entry or os.path.abspath(entry) == here:
            continue
        candidate = os.path.join(entry, "sitecustomize.py")
        if os.path.isfile(candidate):
            spec = importlib.util.spec_from_file_location("_karchive_next_sitecustomize", candidate)
            if spec is not None and spec.loader is not None:
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
            return


def _where() -> str:
    """The process, for the one line: its pid and what it runs (``sys.argv`` is not set yet at site time)."""
    argv = getattr(sys, "orig_argv", None) or [sys.executable]
    return f"karchive.serve in process {os.getpid()} ({' '.join(argv)[:300]})"


def _activate() -> None:
    try:
        from karchive.core import settings

        if settings.SERVE.raw() is None:  # nothing asked here: nothing more imported
            return
        from karchive.serve import activate_from_env

        activate_from_env()
    except BaseException as exc:  # noqa: BLE001 - every failure, a bug's included: the process must not run
        try:
            from karchive.serve import fail_closed
        except BaseException:  # noqa: BLE001 - karchive cannot be imported by this interpreter: say so without it
            sys.stderr.write(f"{_where()}: cannot serve, so it does not run: {type(exc).__name__}: {exc}\n")
            sys.stderr.flush()
            os._exit(2)
        fail_closed(exc, _where())


_chain()
_activate()
