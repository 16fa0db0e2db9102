"""Attribution: which active captures a kernel compiled or launched on the current thread belongs to.

Triton compiles on whatever thread runs the kernel: PyTorch's autograd engine runs backward passes
on its own device threads, ``concurrent.futures`` pools and Triton's async compile mode compile on
pool threads, servers on request threads. The policy (docs/capture.md, *Threads*), in order:

1. **own thread** - a thread inside one or more captures (it entered them): exactly those captures.
2. **handed over** - work a capturing thread handed to another thread, followed while captures are
   active: tasks submitted to a ``concurrent.futures.ThreadPoolExecutor`` carry the submitter's
   captures (``submit`` is wrapped), and while capturing threads are inside
   ``torch.autograd.backward``/``grad`` the threads that belong to no capture are taken to be the
   autograd engine working for them (when only one set of captures is waiting; else for all of them).
3. **unowned** - any other thread: every active capture with ``scope="process"`` (the default); a
   capture with ``scope="thread"`` records only 1 and 2.

Kernels compiled by other processes cannot be told apart at all: every harvesting capture gets them.
Whatever a capture did not get is named, with the reason, in its end-of-capture report
(:mod:`karchive.producer.capture._report`).
"""

from __future__ import annotations

import contextlib
import functools
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, Protocol


class ScopedCapture(Protocol):
    """A capture as attribution sees it (:class:`~.jit_capture.Capture` is one): only its scope matters here.

    A protocol rather than an import of ``Capture``: the capture imports this module, never the reverse."""

    @property
    def scope(self) -> str:  # "process" | "thread" (SCOPES)
        ...


#: What the registry hands back: the :class:`~.jit_capture.Capture` objects it was given. ``Any`` on purpose:
#: naming that class here would import the module that imports this one, and the rules below read only
#: ``scope`` (:class:`ScopedCapture`), so the caller gets its own type back unchanged.
Held = Any

SCOPES = ("process", "thread")

_tls = threading.local()
_lock = threading.Lock()
#: Captures active anywhere in the process (entered on some thread and not yet left there).
_active: list[Held] = []
#: Thread ident -> captures of a capturing thread that is inside torch.autograd.backward/grad.
_engine_waits: dict[int, tuple[Held, ...]] = {}


def _dedupe(caps: Any) -> list[Held]:
    out: list[Held] = []
    for c in caps:
        if c not in out:
            out.append(c)
    return out


def stack() -> list[Held]:
    """This thread's entered captures, outermost first (with repeats for nested re-entry)."""
    s = getattr(_tls, "stack", None)
    if s is None:
        s = _tls.stack = []
    return s


def owned() -> list[Held]:
    """Captures this thread works for: those it entered, then those whose work it is running."""
    mine = getattr(_tls, "stack", None) or []
    adopted = getattr(_tls, "adopted", None) or []
    if not adopted:
        return list(mine) if len(mine) < 2 else _dedupe(mine)
    return _dedupe([*mine, *(c for frame in adopted for c in frame)])


def any_active() -> bool:
    return bool(_active)


def activate(cap: ScopedCapture) -> None:
    with _lock:
        if cap not in _active:
            _active.append(cap)


def deactivate(cap: ScopedCapture) -> None:
    with _lock:
        if cap in _active:
            _active.remove(cap)


def active() -> list[Held]:
    with _lock:
        return list(_active)


def targets() -> tuple[list[Held], str]:
    """(captures, how) for work on the calling thread; ``how`` names the rule that decided."""
    if getattr(_tls, "stack", None):
        return owned(), "own thread"
    adopted = getattr(_tls, "adopted", None)
    if adopted:
        return owned(), "handed over (thread pool)"
    if not _active:
        return [], "no capture active"
    with _lock:
        waits = [w for t, w in _engine_waits.items() if t != threading.get_ident()]
        procs = [c for c in _active if c.scope == "process"]
    if waits:
        distinct = _dedupe(frozenset(w) for w in waits)
        if len(distinct) == 1:
            return list(waits[0]), "autograd engine (capturing thread inside backward)"
        return _dedupe(
            [*procs, *(c for w in waits for c in w)]
        ), "autograd engine (several capturing threads inside backward: cannot tell which)"
    return procs, "unowned thread"


@contextlib.contextmanager
def adopt(caps: list[Held]) -> Iterator[None]:
    """Run a handed-over task as work of ``caps`` on this thread."""
    frames = getattr(_tls, "adopted", None)
    if frames is None:
        frames = _tls.adopted = []
    frames.append(tuple(caps))
    try:
        yield
    finally:
        frames.pop()


def _run_adopted(caps: list[Held], fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    with adopt(caps):
        return fn(*args, **kwargs)


@contextlib.contextmanager
def engine_wait(caps: list[Held]) -> Iterator[None]:
    """Mark the calling thread as waiting in the autograd engine for ``caps``."""
    me = threading.get_ident()
    with _lock:
        previous = _engine_waits.get(me)
        _engine_waits[me] = tuple(caps)
    try:
        yield
    finally:
        with _lock:
            if previous is None:
                _engine_waits.pop(me, None)
            else:
                _engine_waits[me] = previous


# --- followers: installed with the Triton hooks, restored with them -------------------------------
def install_followers() -> list[Callable[[], None]]:
    """Wrap ``ThreadPoolExecutor.submit`` and (if torch is imported) ``torch.autograd.backward``/``grad``.

    Returns the undo callables. A wrapper that someone replaced in the meantime is left alone.
    """
    undo: list[Callable[[], None]] = []
    from concurrent.futures import ThreadPoolExecutor

    # As a plain callable: the wrapper forwards whatever it is given, so submit's generic signature adds nothing.
    original_submit: Callable[..., Any] = ThreadPoolExecutor.submit

    @functools.wraps(original_submit)
    def submit(self: Any, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        caps = owned() if (getattr(_tls, "stack", None) or getattr(_tls, "adopted", None)) else None
        if caps:
            return original_submit(self, functools.partial(_run_adopted, caps, fn), *args, **kwargs)
        return original_submit(self, fn, *args, **kwargs)

    undo.append(patch(ThreadPoolExecutor, "submit", submit))

    autograd = sys.modules.get("torch.autograd")  # only if the workload already imported torch
    for name in ("backward", "grad"):
        original = getattr(autograd, name, None) if autograd is not None else None
        if original is None or getattr(original, "__karchive__", False):
            continue
        undo.append(patch(autograd, name, _engine_wrapper(original)))
    return undo


def _engine_wrapper(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def call(*args: Any, **kwargs: Any) -> Any:
        caps = owned() if (getattr(_tls, "stack", None) or getattr(_tls, "adopted", None)) else None
        if not caps:
            return original(*args, **kwargs)
        with engine_wait(caps):
            return original(*args, **kwargs)

    call.__karchive__ = True  # type: ignore[attr-defined]  # a marker on the function object: ours, never wrap twice
    return call


def patch(owner: Any, name: str, ours: Any) -> Callable[[], None]:
    """Put ``ours`` at ``owner.name``; the undo puts back what was there, unless someone has installed theirs on
    top since (then it is left, and ours stays under it, inert)."""
    original = getattr(owner, name)
    setattr(owner, name, ours)
    return functools.partial(_restore, owner, name, ours, original)


def _restore(owner: Any, name: str, ours: Any, original: Any) -> None:
    if getattr(owner, name, None) is ours:
        setattr(owner, name, original)
