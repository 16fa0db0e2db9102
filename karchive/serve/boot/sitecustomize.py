"""Serve from archives in every Python process started with this directory on ``PYTHONPATH``
(``python -m karchive.serve`` puts it there): ``KARCHIVE_SERVE`` / ``KARCHIVE_SERVE_MODE`` say what.

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


_chain()
from karchive.core import settings as _settings  # noqa: E402 - after the chain, as the chain must run first

if _settings.SERVE.text():
    from karchive.serve import activate_from_env

    activate_from_env()
