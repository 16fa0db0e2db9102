"""Entry point of the `karchive` console script."""

from __future__ import annotations

import argparse
import importlib
import sys

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
    "rebuild_cmds",   # rebuild --check
    "doctor_cmds",    # doctor
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="karchive", description="Versioned archives of prebuilt Triton kernels.")
    parser.add_argument("--version", action="version", version=f"karchive {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMAND_MODULES:
        importlib.import_module(f"{__package__}.{name}").register(sub)
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
    except FileNotFoundError as exc:
        err(str(exc))
        return 2
    except BrokenPipeError:  # `karchive inspect ... | head`
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        err("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
