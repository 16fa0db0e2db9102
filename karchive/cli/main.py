"""Entry point of the `karchive` console script."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable

from .. import __version__
from ..errors import KarchiveError
from .output import err

#: Command-group modules under karchive.cli; each defines register(subparsers).
COMMAND_MODULES = (
    "build_cmds",     # compile, build
    "inspect_cmds",   # inspect, verify, extract
    "registry_cmds",  # publish, pull, ls, lock, cache
    "cache_cmds",     # export-triton-cache, import-triton-cache
    "diff_cmds",      # diff
    "trust_cmds",     # keygen, sign
    "regmeta_cmds",   # registry-meta refresh, registry-meta show
    "rebuild_cmds",   # rebuild --check
    "doctor_cmds",    # doctor
    "tune_cmds",      # tune --export/--import (on-device tuning decisions)
)


#: Help for flags many commands share, where a command registers one without its own text.
COMMON_HELP = {
    "json": "machine-readable output (JSON on stdout)",
    "no_progress": "no progress output",
    "progress": "show progress on stderr (default: only when stderr is a terminal)",
    "archive": "path, URL, or NAME[@VERSION] in the registry",
    "refs": "archives to pin, each NAME@VERSION (or NAME@latest)",
}


class HelpFormatter(argparse.HelpFormatter):
    """Shows each option's default (``(default: 4)``) unless the help text already says it or there is none."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (not action.option_strings or default in (None, False, [], "") or default is argparse.SUPPRESS
                or "default" in text.lower() or isinstance(action, argparse._VersionAction)):
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="karchive", description="Versioned archives of prebuilt Triton kernels.",
                                     epilog="Run 'karchive COMMAND --help' for a command's options. "
                                            "Documents: README.md, spec/BUILD.md, spec/REGISTRY.md.")
    parser.add_argument("--version", action="version", version=f"karchive {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", help="one of these (karchive COMMAND --help for more):")
    for name in COMMAND_MODULES:
        importlib.import_module(f"{__package__}.{name}").register(sub)
    _finish(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    from .logs import configure

    configure()
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KarchiveError as exc:
        err(str(exc))
        return 2
    except OSError as exc:  # the machine refused (disk full, permission): one line, not a traceback
        err(f"{exc.strerror or exc}: {exc.filename}" if exc.filename else str(exc))
        return 2
    except BrokenPipeError:  # `karchive inspect ... | head`
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        err("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
