"""Fallback misses written as a build spec (spec/BUILD.md), so ``karchive build`` turns them into the next archive.

Each distinct miss becomes one ``[[kernel]]`` entry: ``source`` names the kernel as its module imports it
(``pkg.mod:name``; a script's file path), ``signature`` is Triton's specialisation of the call (pointer
element types with ``:16`` for 16-byte-aligned addresses, ``i32``/``i64`` with ``:16`` / ``:1`` as Triton
specialises them, ``fp32`` for floats, ``i1`` for bools), ``constexprs`` the call's constexpr values and
the options it passed. An autotuned kernel's tuned meta-parameters are left out: the build compiles every
config and records them (spec/BUILD.md, "Autotuned and heuristics kernels"). What a spec cannot say (a
``None`` argument, an object that is neither tensor nor scalar) is written as a comment on the entry, and
such a kernel is better captured (``karchive capture``). The file is rewritten after each new miss.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from ..format.autotune import CONFIG_OPTIONS
from ..format.dtypes import POINTER_ELEMENT_TYPES
from ..runtime.arg_dtypes import triton_dtype


def _toml(value: Any) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string: JSON's escapes are valid TOML
    return None


def _source(jit: Any, name: str) -> str:
    module = getattr(jit, "__module__", None)
    if module and module != "__main__":
        return f"{module}:{name}"
    code = getattr(getattr(jit, "fn", None), "__code__", None)
    return f"{os.path.abspath(getattr(code, 'co_filename', 'unknown.py'))}:{name}"


#: A call as a spec entry states it: (signature entries, constexpr values, notes).
_Found = tuple[list[str], dict[str, Any], list[str]]


def signature_of(jit: Any, args: Sequence[Any], kwargs: Mapping[str, Any], skip: set[str]) -> _Found:
    """(signature entries of the non-constexpr parameters, constexpr values, notes) of a call, as Triton
    specialises it."""
    import inspect

    sig: list[str] = []
    cx: dict[str, Any] = {}
    notes: list[str] = []
    defaults = {
        n: p.default
        for n, p in getattr(jit, "signature", inspect.Signature()).parameters.items()
        if p.default is not inspect.Parameter.empty
    }
    for p in getattr(jit, "params", []):
        i, name = p.num, p.name
        if i < len(args):
            value = args[i]
        elif name in kwargs:
            value = kwargs[name]
        elif name in defaults:
            value = defaults[name]
        else:
            value = None if name in skip else inspect.Parameter.empty
        if getattr(p, "is_constexpr", False):
            if name in skip:
                continue
            text = _toml(value)
            if text is None:
                notes.append(f"{name}={value!r} (a constexpr a spec cannot state)")
            else:
                cx[name] = value
            continue
        dns = getattr(p, "do_not_specialize", False)
        dns_align = getattr(p, "do_not_specialize_on_alignment", False)
        if value is None:
            notes.append(f"{name}=None (Triton compiles None as a constexpr; capture this call)")
            sig.append("*i8")
        elif isinstance(value, bool):
            sig.append("i1")
        elif isinstance(value, int):
            t = "i32" if -(2**31) <= value < 2**31 else "i64"
            if not dns and value == 1:
                t += ":1"
            elif not dns and value % 16 == 0:
                t += ":16"
            sig.append(t)
        elif isinstance(value, float):
            sig.append("fp32")
        elif callable(getattr(value, "data_ptr", None)):
            dt = getattr(value, "dtype", None)
            elem = triton_dtype(dt) or (str(dt) if str(dt) in POINTER_ELEMENT_TYPES else "i8")
            aligned = value.data_ptr() % 16 == 0 and not dns_align
            sig.append(f"*{elem}" + (":16" if aligned else ""))
        else:
            notes.append(f"{name}: a {type(value).__name__} (not a tensor or scalar)")
            sig.append("*i8")
    return sig, cx, notes


class MissLog:
    """The misses of a session, as a build spec at ``path`` (rewritten on each new entry)."""

    def __init__(self, path: str | os.PathLike, name: str = "serve-misses", version: str = "1") -> None:
        self.path = os.fspath(path)
        self.name, self.version = name, version
        self.entries: list[dict[str, Any]] = []
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def add(self, route: Any, args: Sequence[Any], kwargs: Mapping[str, Any], reason: str) -> None:
        jit = route.jit
        tuned = set()
        tuner = getattr(route, "tuner", None)
        for cfg in getattr(tuner, "configs", None) or []:
            tuned |= set(getattr(cfg, "kwargs", {}) or {})
        found = signature_of(jit, args, kwargs, tuned)
        self._add(jit, route.live.name, found, kwargs, reason, tuner is not None and route.obj is not jit)

    def add_request(self, jit: Any, kernel: str, req: Any, reason: str) -> None:
        """A compile request the archives could not answer (serving at Triton's compile boundary): Triton's own
        specialisation of the call, as the build spec states it. Tuned meta-parameters are kept as asked: the
        build compiles exactly this config."""
        sig: list[str] = []
        cx: dict[str, Any] = {}
        notes: list[str] = []
        for n in req.names:
            t = req.types[n]
            value = req.constexprs.get(n)
            if t == "constexpr":
                if (
                    type(value) is int
                    and value == 1
                    and n not in getattr(jit, "constexprs_names", ())
                    and not any(getattr(p, "is_constexpr", False) for p in getattr(jit, "params", []) if p.name == n)
                ):
                    sig.append("i32:1")
                elif _toml(value) is not None:
                    cx[n] = value
                else:
                    notes.append(f"{n}: constexpr {value!r} cannot be written in a build spec")
            else:
                sig.append(t + (f":{req.divisibility[n]}" if n in req.divisibility else ""))
        self._add(jit, kernel, (sig, cx, notes), req.options, reason, False)

    def _add(self, jit: Any, kernel: str, found: _Found, options: Mapping[str, Any], reason: str, tuned: bool) -> None:
        """One entry: ``found`` is the call's (signature, constexprs, notes), as :func:`signature_of` gives them."""
        sig, cx, notes = found
        opts = {k: options[k] for k in CONFIG_OPTIONS if _toml(options.get(k)) is not None}
        entry = {
            "source": _source(jit, getattr(jit, "__name__", "kernel")),
            "signature": ", ".join(sig),
            "constexprs": cx,
            "options": opts,
            "notes": notes,
            "reason": reason.splitlines()[0][:300],
            "kernel": kernel,
            "autotuned": tuned,
        }
        ident = json.dumps(
            [entry["source"], entry["signature"], sorted(cx.items(), key=str), sorted(opts.items())], default=str
        )
        with self._lock:
            if ident in self._seen:
                return
            self._seen.add(ident)
            self.entries.append(entry)
            try:
                self._write()
            except OSError as exc:  # a misses file we cannot write must not fail the launch
                print(f"karchive.serve: cannot write {self.path}: {exc}", file=sys.stderr)

    def text(self) -> str:
        out = [
            "# Launches karchive.serve(fallback) could not serve; build them with:",
            f"#   karchive build {os.path.basename(self.path)} -o out/",
            "[archive]",
            f"name = {json.dumps(self.name)}",
            f"version = {json.dumps(self.version)}",
            'targets = ["cuda:90"]  # edit: the targets to build for',
            "",
        ]
        for e in self.entries:
            out.append("[[kernel]]")
            out.append(f"# {e['kernel']}: {e['reason']}".replace("\n", " "))
            for note in e["notes"]:
                out.append(f"# note: {note}")
            if e["autotuned"]:
                out.append(
                    "# autotuned: the build compiles every config and records no decision; served, the runtime "
                    "times the configs once per key on the device (capture the call, or ship decisions with "
                    "`karchive tune --import`, for none)"
                )
            out.append(f"source = {json.dumps(e['source'])}")
            out.append(f"signature = {json.dumps(e['signature'])}")
            if e["constexprs"]:
                out.append(
                    "constexprs = { " + ", ".join(f"{k} = [{_toml(v)}]" for k, v in e["constexprs"].items()) + " }"
                )
            for k, v in e["options"].items():
                out.append(f"{k} = {_toml(v)}")
            out.append("")
        return "\n".join(out)

    def _write(self) -> None:
        tmp = f"{self.path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(self.text())
        os.replace(tmp, self.path)
