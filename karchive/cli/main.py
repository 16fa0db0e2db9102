"""Entry point of the `karchive` console script."""

from __future__ import annotations

import argparse
import difflib
import importlib
import os
import re
import sys
from collections.abc import Callable
from typing import NoReturn

from .. import __version__
from ..errors import KarchiveError
from . import hints
from .output import EXIT_BROKEN_PIPE, EXIT_ERROR, EXIT_INTERRUPTED, emit_json, err

#: Command-group modules under karchive.cli; each defines register(subparsers).
COMMAND_MODULES = (
    "build_cmds",  # compile, build
    "inspect_cmds",  # inspect, verify, extract
    "registry_cmds",  # publish, pull, ls, lock, cache
    "cache_cmds",  # export-triton-cache, import-triton-cache
    "diff_cmds",  # diff
    "trust_cmds",  # keygen, sign
    "regmeta_cmds",  # registry-meta refresh, registry-meta show
    "rebuild_cmds",  # rebuild --check
    "doctor_cmds",  # doctor
    "tune_cmds",  # tune --export/--import (on-device tuning decisions)
    "oci_cmds",  # oci-image (archives as an OCI image for Kubernetes image volumes)
)


#: Help for flags many commands share, where a command registers one without its own text.
COMMON_HELP = {
    "json": "machine-readable output (JSON on stdout)",
    "no_progress": "no progress output",
    "progress": "show progress on stderr (default: only when stderr is a terminal)",
    "archive": "path, URL, or NAME[@VERSION] in the registry",
    "refs": "archives to pin, each NAME@VERSION (or NAME@latest)",
}


#: Optional packages a command may need, and the extra that installs each (pyproject.toml): a command run
#: without one says what to install instead of printing a traceback.
EXTRAS = {
    "triton": "producer",
    "rich": "cli",
    "cuda": "cuda",
    "hip": "hip",
    "s3fs": "s3",
    "gcsfs": "gcs",
    "aiohttp": "http",
    "cryptography": "trust",
    "ray": "ray",
}


class HelpFormatter(argparse.HelpFormatter):
    """Shows each option's default (``(default: 4)``) unless the help text already says it or there is none."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            not action.option_strings
            or default in (None, False, [], "")
            or default is argparse.SUPPRESS
            or "default" in text.lower()
            or isinstance(action, argparse._VersionAction)
        ):
            return text
        return f"{text} (default: %(default)s)" if text else "(default: %(default)s)"


def _show_help(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    def run(_args: argparse.Namespace) -> int:
        parser.print_help()
        return 0

    return run


def _finish(parser: argparse.ArgumentParser) -> None:
    """Applied to every (sub)parser once all commands registered: one formatter, shared help texts, and a
    command group given without its action (bare ``karchive``, ``karchive cache``) prints its help."""
    parser.formatter_class = HelpFormatter
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            action.required = False
            parser.set_defaults(func=_show_help(parser))
            for child in action.choices.values():
                _finish(child)
        elif action.help is None:
            action.help = COMMON_HELP.get(action.dest)


class Parser(argparse.ArgumentParser):
    """argparse, plus "did you mean" for a misspelt command or choice (``karchive inspec``), and a
    usage error as JSON on stdout when ``--json`` was given (same exit status, 2)."""

    def error(self, message: str) -> NoReturn:
        m = re.search(r"invalid choice: '([^']*)'", message)
        if m:
            choices = [str(c) for a in self._actions if a.choices for c in a.choices]
            close = difflib.get_close_matches(m.group(1), choices, n=1, cutoff=0.6)
            if close:
                message += f"; did you mean '{close[0]}'?"
        if _json_requested:
            emit_json({"error": "UsageError", "message": message})
        self.print_usage(sys.stderr)
        self.exit(EXIT_ERROR, f"{self.prog}: error: {message}\n")


_json_requested = False  # set by main(): usage errors happen before there is a Namespace to ask


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="karchive",
        description="Versioned archives of prebuilt Triton kernels.",
        epilog="Run 'karchive COMMAND --help' for a command's options. Exit status: 0 success, "
        "1 a negative result (verify: damage, diff: different, build --keep-going: failed "
        "variants), 2 error (a build with failed variants without --keep-going), 3 rebuild "
        "--check could not reproduce everything, 130 interrupted, 141 output cut (| head). "
        "Documents: README.md, spec/BUILD.md, spec/REGISTRY.md, docs/cli.md.",
    )
    parser.add_argument("--version", action="version", version=f"karchive {__version__}")
    sub = parser.add_subparsers(
        dest="command", metavar="COMMAND", help="one of these (karchive COMMAND --help for more):"
    )
    for name in COMMAND_MODULES:
        importlib.import_module(f"{__package__}.{name}").register(sub)
    _finish(parser)
    return parser


def exit_code_for(exc: BaseException) -> int:
    """The one mapping from a failure to an exit status (the table: docs/cli.md). Commands return 0, 1
    (a negative result) or 3 themselves; everything raised lands here."""
    if isinstance(exc, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    return EXIT_ERROR  # KarchiveError, OSError (disk full, permission, a missing file): one class for all


def _fail(args: argparse.Namespace, exc: BaseException, message: str) -> int:
    """Report a failure once: a line on stderr for people; with ``--json`` also the error object on stdout."""
    err(message)
    if getattr(args, "json", False):
        if isinstance(exc, KarchiveError):
            payload = {**exc.to_json(), "message": message}
        else:
            filename = getattr(exc, "filename", None)
            payload = {"error": type(exc).__name__, "message": message, **({"path": str(filename)} if filename else {})}
        emit_json(payload)
    return exit_code_for(exc)


def _quiet_stdout() -> None:
    """The reader of stdout went away (``| head``): point stdout at /dev/null so that the flush at exit
    does not raise again, and stop quietly with status 141, as git does (killed by SIGPIPE): the answer
    was not read in full, so it is never reported as 0 (``diff``'s "identical")."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def main(argv: list[str] | None = None) -> int:
    global _json_requested
    from .logs import configure

    configure()
    argv = sys.argv[1:] if argv is None else argv
    _json_requested = "--json" in argv
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        try:
            code = int(args.func(args) or 0)
        except KarchiveError as exc:
            code = _fail(args, exc, str(exc) + hints.suggest(exc, args))
        except ModuleNotFoundError as exc:
            extra = EXTRAS.get((exc.name or "").split(".")[0])
            if extra is None:
                raise  # not an optional dependency: a bug, and its traceback is the report
            code = _fail(
                args, exc, f"this command needs {exc.name}, which is not installed: pip install 'karchive[{extra}]'"
            )
        except BrokenPipeError:
            raise
        except OSError as exc:  # the machine refused (disk full, permission): one line, not a traceback
            code = _fail(args, exc, f"{exc.strerror or exc}: {exc.filename}" if exc.filename else str(exc))
        except KeyboardInterrupt as exc:
            code = _fail(args, exc, "interrupted")
        sys.stdout.flush()  # here, not at exit: a closed pipe is handled below
        return code
    except BrokenPipeError:  # `karchive inspect ... | head`
        _quiet_stdout()
        return EXIT_BROKEN_PIPE
    except SystemExit:  # --help, --version, a usage error: argparse exits; its output may meet `| head` too
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            _quiet_stdout()
        raise


if __name__ == "__main__":
    sys.exit(main())
