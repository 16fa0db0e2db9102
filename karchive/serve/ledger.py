"""What a serving session did: kernels served (and from which archive), launches missed and why.

``karchive.serve_report()`` returns a :class:`Report`; ``str(report)`` is a readable summary, ``to_json()`` a
JSON-ready dict (``KARCHIVE_SERVE_REPORT=path.json`` writes it at exit). A miss is listed once per
(kernel, reason) with the first call that met it and how many calls did.
"""

from __future__ import annotations

import threading
from typing import Any

_MAX_CALL = 600  # characters of a call description kept per miss


class Report:
    """Served and missed kernels of one session (thread-safe; a few entries per kernel, never per call)."""

    def __init__(self, mode: str, archives: list[str]) -> None:
        self.mode = mode
        self.archives = archives
        self._routes: dict[str, list[tuple[str, Any]]] = {}  # kernel -> [(the archive its route found first, route)]
        self._misses: dict[tuple[str, str], dict[str, Any]] = {}
        self._would: dict[str, set[tuple[str, str]]] = {}  # audit: kernel -> (archive, variant key) selection picked
        #: NAME@VERSION -> how its signatures were checked ("signed: ...", "unsigned: ..."), set by serve()
        self.trust: dict[str, str] = {}
        self._lock = threading.Lock()
        self._announced: set[tuple[str, str]] = set()
        #: name -> a function giving a part of the report another serving layer keeps (``inductor``: what
        #: torch.compile's autotuning was answered with); in ``to_json()`` where it gives something
        self.sources: dict[str, Any] = {}

    def routed(self, kernel: str, archive: str, route: Any) -> None:
        with self._lock:
            self._routes.setdefault(kernel, []).append((archive, route))

    def missed(self, kernel: str, reason: str, call: str) -> bool:
        """Record a miss; True the first time this (kernel, reason) is seen (the caller reports it once)."""
        with self._lock:
            key = (kernel, reason)
            hit = self._misses.get(key)
            if hit is None:
                self._misses[key] = {"kernel": kernel, "reason": reason, "call": call[:_MAX_CALL], "count": 1}
                first = True
            else:
                hit["count"] += 1
                first = False
        if first and self.mode != "strict":
            import logging

            logging.getLogger("karchive.serve").warning(
                "karchive.serve(%s): not served: %s: %s", self.mode, call[:_MAX_CALL], reason
            )
        return first

    def again(self, kernel: str, reason: str) -> None:
        """One more call of a miss already recorded (remembered by call shape: no description made)."""
        with self._lock:
            hit = self._misses.get((kernel, reason))
            if hit is not None:
                hit["count"] += 1

    def would_serve(self, kernel: str, variant: str, archive: str) -> None:
        with self._lock:
            self._would.setdefault(kernel, set()).add((archive, variant))

    # -- reading -------------------------------------------------------------------------------------------
    @property
    def served(self) -> dict[str, dict[str, Any]]:
        """kernel -> {"archive", "calls", "direct"} for every kernel an archive serves: ``archive`` is the first
        archive (in the order given) that holds the kernel, ``calls`` the launches *it* served through serve's
        own step (heuristics computed, fallback, ``.run``); ``direct``: the call site's ``kernel[grid]`` is the
        archive kernel's own launcher (strict, nothing to compute), whose launches are not counted (counting
        would cost every launch a Python step). ``also_served_by``: {archive: launches} of later archives that
        served calls the first could not (each launch is credited to the archive whose binary ran). Audit
        mode adds ``would_launch``: the variants selection picked (Triton launched), ``KEY (ARCHIVE)`` where
        that variant is another archive's."""
        out: dict[str, dict[str, Any]] = {}
        with self._lock:
            for kernel, entries in sorted(self._routes.items()):
                first = entries[0][0]
                counts = _credit(entries)
                routes = [r for _a, r in entries]
                out[kernel] = {"archive": first, "calls": counts.pop(first, 0), "direct": any(r.direct for r in routes)}
                others = {a: n for a, n in sorted(counts.items()) if n or any(a == e for e, _r in entries)}
                if others:
                    out[kernel]["also_served_by"] = others
                if any(
                    getattr(r, "tunes_on_device", False)
                    or getattr(getattr(r.kernel, "resolver", None), "tune_on_device", False)
                    for r in routes
                ):
                    # an archive built ahead of time holds configs but no decisions: the runtime times them on
                    # the device once per key (and remembers it in the local tuning cache)
                    out[kernel]["tunes_on_device"] = True
                if kernel in self._would:
                    out[kernel]["would_launch"] = sorted(
                        v if a == first else f"{v} ({a})" for a, v in self._would[kernel]
                    )
        return out

    @property
    def unsigned(self) -> list[str]:
        """The archives served without a verified signature (no trust policy, or one that allows unsigned)."""
        return [a for a in self.archives if not self.trust.get(a, "unsigned").startswith("signed")]

    @property
    def missed_list(self) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(m) for m in self._misses.values()]

    def to_json(self) -> dict[str, Any]:
        out = {
            "format": "karchive-serve-report/1",
            "mode": self.mode,
            "archives": list(self.archives),
            "trust": {a: self.trust.get(a, "unsigned: not checked") for a in self.archives},
            "unsigned": self.unsigned,
            "served": self.served,
            "missed": self.missed_list,
        }
        for name, part in self.sources.items():
            got = part()
            if got is not None:
                out[name] = got
        return out

    def __str__(self) -> str:
        from ..core.text import printable

        served = self.served
        missed = self.missed_list
        lines = [
            f"karchive.serve({self.mode}) from {', '.join(self.archives) or '(no archives)'}: "
            f"{len(served)} kernel(s) served, {len(missed)} miss(es)"
        ]
        for archive in self.unsigned:
            lines.append(
                f"  UNSIGNED {archive}: served without a verified signature "
                f"({self.trust.get(archive, 'unsigned: not checked').partition(': ')[2]}); an archive can "
                "claim any kernel's source key: set KARCHIVE_TRUST_POLICY (docs/serving.md)"
            )
        for kernel, info in served.items():
            extra = f", would launch {', '.join(info['would_launch'])}" if "would_launch" in info else ""
            direct = " + direct kernel[grid] launches (not counted)" if info["direct"] else ""
            tunes = ", tunes new keys on the device (no recorded decisions)" if info.get("tunes_on_device") else ""
            also = "".join(f"; from {a}: {n} launch(es)" for a, n in info.get("also_served_by", {}).items())
            lines.append(
                f"  served  {kernel} from {info['archive']}: {info['calls']} launch(es){direct}{also}{extra}{tunes}"
            )
        for m in missed:
            head, *rest = str(m["reason"]).splitlines() or [""]
            lines.append(f"  missed  {m['kernel']} ({m['count']} call(s)): {head}")
            lines += [f"          {r}" for r in rest]
            lines.append(f"          first call: {m['call']}")
        # names and reasons come from archives and user code: one printable line each
        return "\n".join(printable(line) for line in lines)


def trust_of(arc: Any) -> str:
    """How an archive's signatures were checked when it was opened: the verdict of the trust policy (the one
    given as ``trust=``, else ``KARCHIVE_TRUST_POLICY``), or none."""
    verdict = getattr(getattr(arc, "reader", None), "verdict", None)
    if verdict is None:
        return "unsigned: no trust policy checked it"
    signers = getattr(verdict, "signers", ())
    if not signers:
        return "unsigned: the trust policy allows unsigned archives"
    return "signed: " + ", ".join(f"{name} ({key[:16]})" for key, name in signers)


def _credit(entries: list[tuple[str, Any]]) -> dict[str, int]:
    """archive -> the launches whose binary came from it: a route's own archive gets its calls less those a
    later archive served (``alt_calls``), which go to that archive."""
    counts: dict[str, int] = {}
    for archive, route in entries:
        alt = dict(getattr(route, "alt_calls", None) or {})
        counts[archive] = counts.get(archive, 0) + route.calls - sum(alt.values())
        for other, n in alt.items():
            counts[other] = counts.get(other, 0) + n
    return counts
