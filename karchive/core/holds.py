"""A setting held at a value while any of its holders is open, whichever order they open and close in.

Captures and serving sessions each set a process-wide setting for as long as they are open (Inductor's
``compile_threads`` at 1, its environment variable) and may overlap: a plain save-and-restore per holder puts the
old value back while another still needs it, and the last to close restores what the first replaced only by
chance. Here the first holder saves the value, the last puts it back.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

_lock = threading.Lock()
_MISSING = object()
#: slot -> [holders, the value before the first held it]
_held: dict[tuple[Any, ...], list[Any]] = {}


def _hold(
    slot: tuple[Any, ...], read: Callable[[], Any], write: Callable[[Any], None], value: Any
) -> Callable[[], None]:
    with _lock:
        state = _held.get(slot)
        if state is None:
            state = _held[slot] = [0, read()]
        state[0] += 1
        write(value)
    done = False

    def release() -> None:
        nonlocal done
        with _lock:
            if done:
                return
            done = True
            state[0] -= 1
            if state[0] == 0:
                del _held[slot]
                write(state[1])

    return release


def hold_attr(owner: Any, attr: str, value: Any) -> Callable[[], None]:
    """``owner.attr = value`` until the returned release; the value before the first holder is put back by the
    last release."""
    return _hold(("attr", id(owner), attr), lambda: getattr(owner, attr), lambda v: setattr(owner, attr, v), value)


def hold_env(variable: str, value: str) -> Callable[[], None]:
    """``os.environ[variable] = value`` until the returned release (unset again where it was unset)."""

    def write(v: Any) -> None:
        if v is _MISSING:
            os.environ.pop(variable, None)
        else:
            os.environ[variable] = v

    return _hold(("env", variable), lambda: os.environ.get(variable, _MISSING), write, value)


__all__ = ["hold_attr", "hold_env"]
