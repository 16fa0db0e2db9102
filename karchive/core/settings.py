"""Every ``KARCHIVE_*`` environment variable, read here and nowhere else (huggingface_hub's
``constants.py`` plays this part there).

Each variable is declared once (:data:`VARIABLES`: its name, default and meaning; docs/settings.md
is the same table for people, and ``tests/test_settings.py`` keeps the two equal) and read by one
accessor below. Accessors read the environment *when called*, never at import: tests, servers and
``karchive`` itself set variables after the package is imported, and the value in force at the call
is the one that counts. What every value must be is decided here, once (issue 34): a security-relevant
(``guarded``) variable set but empty is an error, never "unset"; numbers are checked (ASCII digits, finite,
in range); choices are read stripped and in any case; a refused value is a :class:`SettingsError` naming
the variable (:func:`problems` lists them all for ``karchive doctor``). What a value *means* beyond that (a
trust policy file, JSON storage options) stays with the layer that uses it.

``tests/test_settings.py`` fails when another module of the package reads ``os.environ`` for a
``KARCHIVE_*`` name.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from typing import Literal

from ..errors import SettingsError

#: How a value is read: text (a path, a URL, JSON ...), a choice among ``choices`` (stripped, any case, as the
#: switches are), an integer >= 1 or a finite number (ASCII digits only; blank is unset).
Kind = Literal["text", "choice", "int", "number", "switch"]


@dataclass(frozen=True)
class Variable:
    """One environment variable karchive reads: ``default`` is what applies when it is unset (text for
    people; the accessor returns None then). ``guarded``: security-relevant, so set but empty (or blank)
    is an error naming it, never "unset" (an emptied variable must not switch a check off, issue 34)."""

    name: str
    default: str
    meaning: str
    guarded: bool = False
    kind: Kind = "text"
    choices: tuple[str, ...] = ()
    above_zero: bool = False  # a ``number`` that must be more than 0 (else 0 or more)

    def raw(self) -> str | None:
        """The value now, or None when the variable is unset (set but empty is returned as "")."""
        return os.environ.get(self.name)

    def text(self) -> str | None:
        """The value now; unset and empty both read as None (for variables where "" means "not given")."""
        return os.environ.get(self.name) or None

    def value(self) -> str | None:
        """The value now, as its rules say: None when unset; set but blank is None, or for a guarded
        variable a :class:`SettingsError`; a choice is returned lower-case and must be one of ``choices``."""
        raw = os.environ.get(self.name)
        if raw is None:
            return None
        if not raw.strip():
            if self.guarded:
                raise SettingsError(
                    f"${self.name} is set but empty: give a value, or unset the variable (unset means {self.default})",
                    variable=self.name,
                )
            return None
        if self.kind == "choice":
            choice = raw.strip().lower()
            if choice not in self.choices:
                raise SettingsError(
                    f"${self.name} must be {_one_of(self.choices)} (any case), not {raw!r}", variable=self.name
                )
            return choice
        return raw

    def number(self) -> float | None:
        """An ``int`` or ``number`` variable's value (None when unset or blank), checked: ASCII digits only
        (Python's ``float`` also takes "nan", "inf" and other scripts' digits), finite, in range."""
        raw = self.value()
        if raw is None:
            return None
        text = raw.strip()
        pattern = _INT if self.kind == "int" else _NUMBER
        value = float(text) if pattern.fullmatch(text) else math.nan
        low_ok = value >= 1 if self.kind == "int" else (value > 0 if self.above_zero else value >= 0)
        if not (math.isfinite(value) and low_ok):
            want = (
                "a whole number of at least 1"
                if self.kind == "int"
                else f"a finite number of seconds{' above 0' if self.above_zero else ' (0 or more)'}"
            )
            raise SettingsError(f"${self.name} must be {want}, not {raw!r}", variable=self.name)
        return value


_INT = re.compile(r"[0-9]{1,9}", re.ASCII)
_NUMBER = re.compile(r"([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]{1,3})?", re.ASCII)


def _one_of(choices: tuple[str, ...]) -> str:
    return ", ".join(choices[:-1]) + f" or {choices[-1]}" if len(choices) > 1 else choices[0]


REGISTRY = Variable(
    "KARCHIVE_REGISTRY",
    "$XDG_DATA_HOME/karchive/registry",
    "the registry NAME[@VERSION] references resolve through (a directory or an fsspec URL)",
    guarded=True,
)
CACHE_DIR = Variable(
    "KARCHIVE_CACHE_DIR",
    "$XDG_CACHE_HOME/karchive",
    "the cache root: pulled archives, receipts, the producer's Triton build cache, tuning decisions",
)
LOCKFILE = Variable(
    "KARCHIVE_LOCKFILE", "(none)", "a lockfile every registry reference is checked against", guarded=True
)
FETCH = Variable(
    "KARCHIVE_FETCH",
    "auto",
    "how a registry archive is read: auto (cached or local: from disk; remote: ranged reads), "
    "lazy (never pull), full (always pull)",
    kind="choice",
    choices=("auto", "lazy", "full"),
)
STORAGE_OPTIONS = Variable(
    "KARCHIVE_STORAGE_OPTIONS",
    "{}",
    "non-secret fsspec options for the CLI, as a JSON object (e.g. an endpoint_url)",
    guarded=True,
)
REGISTRY_TIMEOUT = Variable(
    "KARCHIVE_REGISTRY_TIMEOUT",
    "60",
    "seconds one registry operation may wait on the registry, retries included",
    kind="number",
    above_zero=True,
)
RETRIES = Variable("KARCHIVE_RETRIES", "5", "attempts per registry request", kind="int")
RETRY_DELAY = Variable(
    "KARCHIVE_RETRY_DELAY", "0.2", "first retry backoff in seconds (full-jitter exponential)", kind="number"
)
TRUST_POLICY = Variable(
    "KARCHIVE_TRUST_POLICY", "(none)", "a trust policy every load without an explicit trust= applies", guarded=True
)
REGISTRY_KEY = Variable(
    "KARCHIVE_REGISTRY_KEY",
    "(none)",
    "the private key `karchive registry-meta` signs snapshots and timestamps with",
    guarded=True,
)
LAUNCH_PATH = Variable(
    "KARCHIVE_LAUNCH_PATH", "auto", "the launch path: auto (the C extension when built), extension, or python"
)
TORCH_ABI = Variable(
    "KARCHIVE_TORCH_ABI",
    "1",
    "0, false, no or off: the compiled launcher reads torch tensors through data_ptr(), .dtype and "
    "get_device() instead of torch's stable C ABI",
    kind="switch",
)
TUNING_CACHE = Variable(
    "KARCHIVE_TUNING_CACHE",
    "1",
    "0, false, no or off: do not remember benchmarked autotune decisions on disk",
    kind="switch",
)
DEBUG = Variable("KARCHIVE_DEBUG", "(unset)", "any non-empty value: the CLI logs everything, tracebacks included")
SERVE = Variable(
    "KARCHIVE_SERVE",
    "(none)",
    "archives (comma-separated NAME@VERSION or paths) that serve unchanged kernel[grid] call sites in a "
    "process started by `python -m karchive.serve` (docs/serving.md)",
    guarded=True,
)
SERVE_MODE = Variable(
    "KARCHIVE_SERVE_MODE",
    "strict",
    "strict, fallback or audit (docs/serving.md)",
    guarded=True,
    kind="choice",
    choices=("strict", "fallback", "audit"),
)
SERVE_REPORT = Variable(
    "KARCHIVE_SERVE_REPORT", "(none)", "1 or stderr: the serve report as text on stderr at exit; a path: as JSON there"
)
SERVE_MISSES = Variable("KARCHIVE_SERVE_MISSES", "(none)", "fallback mode: write the misses as a build spec here")

#: Every variable, in the order docs/settings.md lists them.
VARIABLES: tuple[Variable, ...] = (
    REGISTRY,
    CACHE_DIR,
    LOCKFILE,
    FETCH,
    STORAGE_OPTIONS,
    REGISTRY_TIMEOUT,
    RETRIES,
    RETRY_DELAY,
    TRUST_POLICY,
    REGISTRY_KEY,
    LAUNCH_PATH,
    TORCH_ABI,
    TUNING_CACHE,
    DEBUG,
    SERVE,
    SERVE_MODE,
    SERVE_REPORT,
    SERVE_MISSES,
)


def registry() -> str | None:
    return REGISTRY.value()


def cache_dir() -> str | None:
    return CACHE_DIR.text()


def lockfile() -> str | None:
    return LOCKFILE.value()


def fetch() -> str | None:
    """auto, lazy or full (any case), None when unset; another value is refused here."""
    return FETCH.value()


def storage_options() -> str | None:
    """The raw JSON text (parsed, bounded, by :func:`karchive.registry.config.storage_options_from_env`)."""
    return STORAGE_OPTIONS.value()


def registry_timeout() -> float | None:
    """Seconds (a finite number above 0); None when unset or blank."""
    return REGISTRY_TIMEOUT.number()


def retries() -> int | None:
    """Attempts per request (a whole number, at least 1); None when unset or blank."""
    value = RETRIES.number()
    return None if value is None else int(value)


def retry_delay() -> float | None:
    """The first backoff in seconds (finite, 0 or more); None when unset or blank."""
    return RETRY_DELAY.number()


def trust_policy() -> str | None:
    """The policy file's path; set but empty is refused (issue 20: ``KARCHIVE_TRUST_POLICY=`` once switched
    enforcement off; :func:`karchive.trust.enforce.policy_from_env` reports it as a TrustPolicyError)."""
    return TRUST_POLICY.value()


def registry_key() -> str | None:
    return REGISTRY_KEY.value()


def serve_archives() -> list[str] | None:
    """The archive references of ``KARCHIVE_SERVE`` (comma-separated); None when unset. A value that names
    no archive (empty, blank, only commas) is refused: a serving process must not start unserved."""
    value = SERVE.value()
    if value is None:
        return None
    refs = [r.strip() for r in value.split(",") if r.strip()]
    if not refs:
        raise SettingsError(
            f"${SERVE.name} names no archive ({value!r}): give NAME@VERSION or paths, "
            "comma-separated, or unset the variable",
            variable=SERVE.name,
        )
    return refs


def serve_mode() -> str | None:
    """strict, fallback or audit (any case), None when unset."""
    return SERVE_MODE.value()


def launch_path() -> str | None:
    """Raw (None when unset): the launch path module reports a value it ignores."""
    return LAUNCH_PATH.raw()


def torch_abi() -> bool:
    return (TORCH_ABI.raw() or "1").strip().lower() not in ("0", "false", "no", "off")


def tuning_cache() -> bool:
    return (TUNING_CACHE.raw() or "1").strip().lower() not in ("0", "false", "no", "off")


def debug() -> bool:
    return bool(DEBUG.raw())


#: The accessor of each variable whose value can be refused (``karchive doctor`` asks each).
_CHECKED = (
    registry,
    lockfile,
    fetch,
    storage_options,
    registry_timeout,
    retries,
    retry_delay,
    trust_policy,
    registry_key,
    serve_archives,
    serve_mode,
)


def problems() -> list[str]:
    """What is wrong with the environment now: one message per variable whose value is refused."""
    out = []
    for accessor in _CHECKED:
        try:
            accessor()
        except SettingsError as exc:
            out.append(str(exc))
    return out
