"""The compiler's own reason for a failed compile, in one message.

Triton wraps an error raised inside a helper (``tl.sigmoid`` on fp16: "Expected dtype ['fp32', 'fp64']
but got fp16") in a ``CompilationError`` for each calling function, and only the innermost carries the
reason: ``str()`` of the outer one is a source excerpt and a caret with no words. So the message keeps
the outer excerpt (the user's own line) and adds the innermost reason, walking ``__cause__``.
"""

from __future__ import annotations


def compiler_message(exc: BaseException) -> str:
    """``Type: message`` of ``exc``, plus the innermost cause's reason when the outer text lacks it."""
    text = str(exc).strip() or type(exc).__name__
    message = f"{type(exc).__name__}: {text}"
    inner, seen = exc, {id(exc)}
    while inner.__cause__ is not None and id(inner.__cause__) not in seen:  # bounded: each link once
        inner = inner.__cause__
        seen.add(id(inner))
    reason = getattr(inner, "error_message", None) or (str(inner).strip().splitlines() or [""])[-1]
    # The innermost Triton error names the helper it failed in (its excerpt); one line of it is enough.
    if inner is not exc and reason and reason not in text:
        message += f"\n{type(inner).__name__}: {reason}"
    return message
