"""``python -m karchive.serve [--archive REF ...] [--mode MODE] [--report WHERE] [--misses PATH] -- PROGRAM ARGS``.

Runs PROGRAM (a script path, or ``-m module``) in this interpreter with serving active, as
``KARCHIVE_SERVE`` / ``KARCHIVE_SERVE_MODE`` say (the options set them), and puts :mod:`karchive.serve.boot`
on ``PYTHONPATH`` so Python processes the program starts (workers, ``multiprocessing`` spawn) serve too.

A mistake of the user (no archive, one that cannot be opened or is refused, a bad mode, no program, a
program that is not there) is one line on stderr and exit status 2, as the ``karchive`` command answers
(issue 35); errors of the program itself are reported by Python, as without the runner.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import runpy
import sys

from ..core import settings

PROG = "python -m karchive.serve"
USAGE = (
    f"usage: {PROG} [--archive REF]... [--mode strict|fallback|audit] [--report stderr|PATH] "
    "[--misses PATH] -- PROGRAM.py|-m MODULE [ARGS...]"
)


class _Usage(Exception):
    """A mistake of the user: one line, exit 2."""


def _parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    if "--" not in argv:
        raise _Usage(f"give the program after --; {USAGE[len('usage: ') :]}")
    cut = argv.index("--")
    parser = argparse.ArgumentParser(prog=PROG)
    parser.add_argument("--archive", action="append", default=[], help="archive to serve from (repeatable)")
    parser.add_argument("--mode", type=str.lower, choices=("strict", "fallback", "audit"))
    parser.add_argument("--report", help="stderr, or a path for the JSON report, written at exit")
    parser.add_argument("--misses", help="fallback: write the misses as a build spec here")
    return parser.parse_args(argv[:cut]), argv[cut + 1 :]


def _check_program(prog: list[str]) -> None:
    """The program exists, before serving is set up: a typo is the user's mistake, not a traceback."""
    if not prog:
        raise _Usage("no program after --")
    if prog[0] == "-m":
        if len(prog) < 2:
            raise _Usage("-m needs a module")
        top = prog[1].partition(".")[0]  # its package only: finding a submodule would import the package
        try:
            found = importlib.util.find_spec(top) if top else None
        except (ImportError, ValueError):
            found = None
        if found is None:
            raise _Usage(f"no module named {top or prog[1]!r} (for -m {prog[1]})")
    elif not os.path.isfile(prog[0]):
        raise _Usage(f"cannot run {prog[0]!r}: no such file")


def main(argv: list[str] | None = None) -> int:
    from ..errors import KarchiveError

    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        ns, prog = _parse(argv)
        env = os.environ
        if ns.archive:
            env[settings.SERVE.name] = ",".join(ns.archive)
        for name, value in (
            (settings.SERVE_MODE.name, ns.mode),
            (settings.SERVE_REPORT.name, ns.report),
            (settings.SERVE_MISSES.name, ns.misses),
        ):
            if value:
                env[name] = value
        _check_program(prog)
        if settings.serve_archives() is None:
            raise _Usage(f"nothing to serve: give --archive REF or set ${settings.SERVE.name}")
        from . import activate_from_env

        activate_from_env()
    except (_Usage, KarchiveError, OSError) as exc:
        print(" ".join(f"{PROG}: {exc}".split()), file=sys.stderr)
        return 2
    boot = os.path.join(os.path.dirname(os.path.abspath(__file__)), "boot")
    env["PYTHONPATH"] = os.pathsep.join([boot] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    if prog[0] == "-m":
        sys.argv = prog[1:]
        runpy.run_module(prog[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = prog
        sys.path.insert(0, os.path.dirname(os.path.abspath(prog[0])))
        runpy.run_path(prog[0], run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
