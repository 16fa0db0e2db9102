"""Serve unchanged ``kernel[grid](...)`` call sites from archives: zero JIT at start-up (docs/serving.md).

``karchive.serve(*archives, mode="strict")`` routes every launch of an archived kernel -- through
``JITFunction``, ``Autotuner``, ``Heuristics`` and the wrappers libraries put around them -- to karchive's
launcher, matched by module, qualified name and source digest (:mod:`.identity`). Modes: ``strict``
(Triton never compiles; a miss raises :class:`karchive.errors.ServeMissError`), ``fallback`` (a miss runs
through Triton, is reported once and recorded as a build spec), ``audit`` (Triton runs everything; the
report says what karchive would have served). ``karchive.serve_report()`` says what happened.

For processes whose code you do not touch: ``KARCHIVE_SERVE=NAME@VERSION,...`` (and ``KARCHIVE_SERVE_MODE``,
``KARCHIVE_SERVE_REPORT``, ``KARCHIVE_SERVE_MISSES``) with ``python -m karchive.serve -- PROGRAM ARGS``, which
also makes child Python processes serve (:mod:`.boot`).

This is a consumer package: it never imports the producer; without Triton installed it installs a small
import shim (:mod:`.shim`) so that library modules that only decorate and launch kernels import.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import re
import sys
from typing import Any, NoReturn

from ..core import settings
from ..errors import KarchiveError
from .core import AUDIT, FALLBACK, MODES, STRICT, Session, active, install, uninstall
from .ledger import Report, trust_of

__all__ = [
    "serve",
    "serve_report",
    "stop",
    "activate_from_env",
    "STRICT",
    "FALLBACK",
    "AUDIT",
    "Report",
    "ENV_ARCHIVES",
    "ENV_MODE",
    "ENV_REPORT",
    "ENV_MISSES",
    "shim_active",
    "shim_version",
]

# The variables are declared (and documented) in karchive/core/settings.py.
ENV_ARCHIVES = settings.SERVE.name
ENV_MODE = settings.SERVE_MODE.name
ENV_REPORT = settings.SERVE_REPORT.name  # "1"/"stderr": text to stderr at exit; a path: JSON there
ENV_MISSES = settings.SERVE_MISSES.name  # fallback misses as a build spec at this path

_SHIM_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "shim")
_MISSING = object()
_exit_hook: dict[str, Any] = {"registered": False, "where": None}


def shim_active() -> bool:
    """Is ``triton`` karchive's import shim (no real Triton in this process)?"""
    mod = sys.modules.get("triton")
    return bool(getattr(mod, "__karchive_shim__", False))


def _ensure_triton(version: str | None = None) -> bool:
    """Import Triton, or install the shim where Triton cannot be imported (not installed, or blocked with
    ``sys.modules["triton"] = None``); True when the shim is in use. The shim reports ``version`` (the Triton
    the archives were built with) as ``triton.__version__``, so library code that branches on the version
    takes the branch the archived binaries were compiled for."""
    have = sys.modules.get("triton", _MISSING)
    if have is not _MISSING and have is not None:
        return shim_active()
    if have is _MISSING:
        try:
            import triton  # noqa: F401 - real Triton: its classes are patched

            return shim_active()
        except ImportError:
            pass
    # The shim, loaded from its own directory (never through sys.path, so a blocked or broken Triton stays out)
    for name in [m for m in sys.modules if m.startswith("triton.")]:
        del sys.modules[name]  # a half-imported Triton must not shadow the shim's submodules
    package = os.path.join(_SHIM_DIR, "triton")
    spec = importlib.util.spec_from_file_location(
        "triton", os.path.join(package, "__init__.py"), submodule_search_locations=[package]
    )
    assert spec is not None and spec.loader is not None
    shim = importlib.util.module_from_spec(spec)
    sys.modules["triton"] = shim
    try:
        spec.loader.exec_module(shim)
    except BaseException:
        del sys.modules["triton"]
        raise
    shown = shim_version(version)
    if shown is not None:
        setattr(shim, "__version__", shown)  # noqa: B010
    return True


def shim_version(version: str | None) -> str | None:
    """What the shim reports as ``triton.__version__`` for archives built with Triton ``version``: the release
    (two or three dot-separated runs of ASCII digits: libraries parse it with ``packaging.Version``, which
    takes no other digits) with ``+karchive.shim``; None for anything else (the shim's own 0.0.0 stays)."""
    if isinstance(version, str) and re.fullmatch(r"[0-9]+(\.[0-9]+){1,2}", version, re.ASCII):
        return f"{version}+karchive.shim"
    return None


def serve(
    *archives: Any,
    mode: str = STRICT,
    misses: str | os.PathLike | None = None,
    report_at_exit: bool | str = False,
    **open_kwargs: Any,
) -> Report:
    """Serve launches of the kernels in ``archives`` (Archive objects, paths, URLs or NAME@VERSION).

    ``misses``: in fallback mode, write the launches that were not served there as a build spec.
    ``report_at_exit``: True (or "stderr") prints the report at exit; a path writes it as JSON.
    ``open_kwargs`` go to ``karchive.open`` (``trust=``, ``registry=``, ``allow_ptx=``...). Calling ``serve``
    again replaces the previous session. Returns the session's (live) report.
    """
    if mode not in MODES:
        raise KarchiveError(f"karchive.serve: mode must be one of {', '.join(MODES)}, got {mode!r}")
    from ..runtime.archive import Archive, open_archive

    opened = [a if isinstance(a, Archive) else open_archive(a, **open_kwargs) for a in archives]
    built_with = next((str(v) for a in opened if (v := (a.manifest.produced_by or {}).get("triton"))), None)
    shim = _ensure_triton(built_with)
    if shim and mode != STRICT:
        raise KarchiveError(
            f"karchive.serve(mode={mode!r}) needs Triton to compile misses; it is not installed "
            "(only the import shim is): use mode='strict'"
        )
    log = None
    if misses is not None and mode == FALLBACK:
        from .misses import MissLog

        log = MissLog(misses)
    session = Session(opened, mode, log)
    session.report.trust = {f"{a.name}@{a.version}": trust_of(a) for a in opened}
    _warn_unsigned(session.report)
    install(session)
    if report_at_exit:
        _exit_hook["where"] = report_at_exit
        if not _exit_hook["registered"]:
            atexit.register(_report_at_exit)
            _exit_hook["registered"] = True
    return session.report


#: Archives already warned about in this process (the warning is said once, the report says it every time).
_WARNED: set[str] = set()


def _warn_unsigned(report: Report) -> None:
    """Serving identifies kernels by module, name and source digest, all of which an archive states itself: an
    archive nobody signed can claim any kernel's source and be served to its call sites (docs/serving.md)."""
    new = [a for a in report.unsigned if a not in _WARNED]
    if not new:
        return
    _WARNED.update(new)
    import logging

    logging.getLogger("karchive.serve").warning(
        "karchive.serve: serving %s unsigned (%s): an archive can claim any kernel's source key; set "
        "%s to serve only archives your keys signed (docs/serving.md)",
        ", ".join(new),
        report.trust.get(new[0], "").partition(": ")[2],
        settings.TRUST_POLICY.name,
    )


def serve_report() -> Report | None:
    """The active session's report (None when not serving)."""
    s = active()
    return None if s is None else s.report


def stop() -> Report | None:
    """Stop serving (Triton's own methods back); returns the last session's report."""
    s = uninstall()
    return None if s is None else s.report


def _report_at_exit() -> None:
    s = active()
    where = _exit_hook["where"]
    if s is None or not where:
        return
    if where is True or where in ("1", "stderr", "true", "yes"):
        print(str(s.report), file=sys.stderr)
        return
    import json

    from ..core.fsio import atomic_write

    try:  # a temporary file renamed into place: a FIFO at the path is replaced, not waited on at exit
        atomic_write(str(where), json.dumps(s.report.to_json(), indent=1, sort_keys=True).encode(), durable=False)
    except OSError as exc:
        print(f"karchive.serve: cannot write the report to {where}: {exc}", file=sys.stderr)


def activate_from_env() -> Report | None:
    """Serve as ``KARCHIVE_SERVE`` (comma-separated archives) and ``KARCHIVE_SERVE_MODE`` say; None if
    ``KARCHIVE_SERVE`` is unset. The values are read and checked by the settings module: set but empty, or a
    mode that is not strict, fallback or audit (any case), is a :class:`~karchive.errors.SettingsError`."""
    refs = settings.serve_archives()
    if refs is None:
        return None
    mode = settings.serve_mode() or STRICT
    report = settings.SERVE_REPORT.text() or False
    return serve(*refs, mode=mode, misses=settings.SERVE_MISSES.text(), report_at_exit=report)


def fail_closed(exc: BaseException, where: str) -> NoReturn:
    """A process asked to serve (``KARCHIVE_SERVE``) that cannot: one line on stderr, then exit 2 at once, so
    that no program code runs unserved (through Triton's JIT) in any mode. Python's ``site`` module prints
    and swallows a ``sitecustomize`` exception, so the boot module calls this instead of raising."""
    what = str(exc) if isinstance(exc, (KarchiveError, OSError)) else f"{type(exc).__name__}: {exc}"
    line = " ".join(f"{where}: cannot serve, so it does not run: {what}".split())
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    finally:
        os._exit(2)


class _ServeModule(type(sys)):  # type: ignore[misc]
    """``karchive.serve`` is this package once imported (``import karchive.serve`` sets the attribute), so the
    package itself is callable: ``karchive.serve(arc, mode="strict")`` is :func:`serve`."""

    def __call__(self, *archives: Any, **kwargs: Any) -> Report:
        return serve(*archives, **kwargs)


sys.modules[__name__].__class__ = _ServeModule
