"""The `karchive` command line. Each command group lives in its own module with a `register()`."""

__all__ = ["main"]  # the command line is the interface: karchive.cli.main:main, the `karchive` script
