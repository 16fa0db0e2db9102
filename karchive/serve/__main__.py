"""``python -m karchive.serve [--archive REF ...] [--mode MODE] [--report WHERE] [--misses PATH] -- PROGRAM ARGS``.

Runs PROGRAM (a script path, or ``-m module``) in this interpreter with serving active, as
``KARCHIVE_SERVE`` / ``KARCHIVE_SERVE_MODE`` say (the options set them), and puts :mod:`karchive.serve.boot`
on ``PYTHONPATH`` so Python processes the program starts (workers, ``multiprocessing`` spawn) serve too.
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys

from ..core import settings


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" not in argv:
        print("usage: python -m karchive.serve [--archive REF]... [--mode strict|fallback|audit] "
              "[--report stderr|PATH] [--misses PATH] -- PROGRAM.py|-m MODULE [ARGS...]", file=sys.stderr)
        return 2
    cut = argv.index("--")
    opts, prog = argv[:cut], argv[cut + 1:]
    parser = argparse.ArgumentParser(prog="python -m karchive.serve")
    parser.add_argument("--archive", action="append", default=[], help="archive to serve from (repeatable)")
    parser.add_argument("--mode", choices=("strict", "fallback", "audit"))
    parser.add_argument("--report", help="stderr, or a path for the JSON report, written at exit")
    parser.add_argument("--misses", help="fallback: write the misses as a build spec here")
    ns = parser.parse_args(opts)
    env = os.environ
    if ns.archive:
        env[settings.SERVE.name] = ",".join(ns.archive)
    for name, value in ((settings.SERVE_MODE.name, ns.mode), (settings.SERVE_REPORT.name, ns.report),
                        (settings.SERVE_MISSES.name, ns.misses)):
        if value:
            env[name] = value
    if not prog:
        print("python -m karchive.serve: no program after --", file=sys.stderr)
        return 2
    boot = os.path.join(os.path.dirname(os.path.abspath(__file__)), "boot")
    env["PYTHONPATH"] = os.pathsep.join([boot] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    from . import activate_from_env

    activate_from_env()
    if prog[0] == "-m":
        if len(prog) < 2:
            print("python -m karchive.serve: -m needs a module", file=sys.stderr)
            return 2
        sys.argv = prog[1:]
        runpy.run_module(prog[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = prog
        sys.path.insert(0, os.path.dirname(os.path.abspath(prog[0])))
        runpy.run_path(prog[0], run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
