"""Every ``KARCHIVE_*`` environment variable, read here and nowhere else (huggingface_hub's
``constants.py`` plays this part there).

Each variable is declared once (:data:`VARIABLES`: its name, default and meaning; docs/settings.md
is the same table for people, and ``tests/test_settings.py`` keeps the two equal) and read by one
accessor below. Accessors read the environment *when called*, never at import: tests, servers and
``karchive`` itself set variables after the package is imported, and the value in force at the call
is the one that counts. Parsing that belongs to a layer above (a registry timeout, a trust policy
path, JSON storage options) stays with that layer; what it asks here is the raw text.

``tests/test_settings.py`` fails when another module of the package reads ``os.environ`` for a
``KARCHIVE_*`` name.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Variable:
    """One environment variable karchive reads: ``default`` is what applies when it is unset (text for
    people; the accessor returns None then)."""

    name: str
    default: str
    meaning: str

    def raw(self) -> str | None:
        """The value now, or None when the variable is unset (set but empty is returned as "")."""
        return os.environ.get(self.name)

    def text(self) -> str | None:
        """The value now; unset and empty both read as None (for variables where "" means "not given")."""
        return os.environ.get(self.name) or None


REGISTRY = Variable("KARCHIVE_REGISTRY", "$XDG_DATA_HOME/karchive/registry",
                    "the registry NAME[@VERSION] references resolve through (a directory or an fsspec URL)")
CACHE_DIR = Variable("KARCHIVE_CACHE_DIR", "$XDG_CACHE_HOME/karchive",
                     "the cache root: pulled archives, receipts, the producer's Triton build cache, tuning decisions")
LOCKFILE = Variable("KARCHIVE_LOCKFILE", "(none)", "a lockfile every registry reference is checked against")
FETCH = Variable("KARCHIVE_FETCH", "auto",
                 "how a registry archive is read: auto (cached or local: from disk; remote: ranged reads), "
                 "lazy (never pull), full (always pull)")
STORAGE_OPTIONS = Variable("KARCHIVE_STORAGE_OPTIONS", "{}",
                           "non-secret fsspec options for the CLI, as a JSON object (e.g. an endpoint_url)")
REGISTRY_TIMEOUT = Variable("KARCHIVE_REGISTRY_TIMEOUT", "60",
                            "seconds one registry operation may wait on the registry, retries included")
RETRIES = Variable("KARCHIVE_RETRIES", "5", "attempts per registry request")
RETRY_DELAY = Variable("KARCHIVE_RETRY_DELAY", "0.2", "first retry backoff in seconds (full-jitter exponential)")
TRUST_POLICY = Variable("KARCHIVE_TRUST_POLICY", "(none)",
                        "a trust policy every load without an explicit trust= applies; set but empty is an error")
REGISTRY_KEY = Variable("KARCHIVE_REGISTRY_KEY", "(none)",
                        "the private key `karchive registry-meta` signs snapshots and timestamps with")
LAUNCH_PATH = Variable("KARCHIVE_LAUNCH_PATH", "auto",
                       "the launch path: auto (the C extension when built), extension, or python")
TORCH_ABI = Variable("KARCHIVE_TORCH_ABI", "1",
                     "0, false, no or off: the compiled launcher reads torch tensors through data_ptr(), .dtype and "
                     "get_device() instead of torch's stable C ABI")
TUNING_CACHE = Variable("KARCHIVE_TUNING_CACHE", "1",
                        "0, false, no or off: do not remember benchmarked autotune decisions on disk")
DEBUG = Variable("KARCHIVE_DEBUG", "(unset)", "any non-empty value: the CLI logs everything, tracebacks included")
SERVE = Variable("KARCHIVE_SERVE", "(none)",
                 "archives (comma-separated NAME@VERSION or paths) that serve unchanged kernel[grid] call sites in a "
                 "process started by `python -m karchive.serve` (docs/serving.md)")
SERVE_MODE = Variable("KARCHIVE_SERVE_MODE", "strict", "strict, fallback or audit (docs/serving.md)")
SERVE_REPORT = Variable("KARCHIVE_SERVE_REPORT", "(none)",
                        "1 or stderr: the serve report as text on stderr at exit; a path: as JSON there")
SERVE_MISSES = Variable("KARCHIVE_SERVE_MISSES", "(none)", "fallback mode: write the misses as a build spec here")

#: Every variable, in the order docs/settings.md lists them.
VARIABLES: tuple[Variable, ...] = (REGISTRY, CACHE_DIR, LOCKFILE, FETCH, STORAGE_OPTIONS, REGISTRY_TIMEOUT, RETRIES,
                                   RETRY_DELAY, TRUST_POLICY, REGISTRY_KEY, LAUNCH_PATH, TORCH_ABI, TUNING_CACHE, DEBUG,
                                   SERVE, SERVE_MODE, SERVE_REPORT, SERVE_MISSES)


def registry() -> str | None:
    return REGISTRY.text()


def cache_dir() -> str | None:
    return CACHE_DIR.text()


def lockfile() -> str | None:
    return LOCKFILE.text()


def fetch() -> str | None:
    return FETCH.text()


def storage_options() -> str | None:
    """The raw JSON text (parsed, bounded, by :func:`karchive.registry.config.storage_options_from_env`)."""
    return STORAGE_OPTIONS.text()


def registry_timeout() -> str | None:
    """The raw text (checked by :func:`karchive.registry.deadline.timeout_from_env`): blank is unset."""
    raw = REGISTRY_TIMEOUT.raw()
    return raw if raw is not None and raw.strip() else None


def retries() -> str | None:
    return RETRIES.text()


def retry_delay() -> str | None:
    return RETRY_DELAY.text()


def trust_policy() -> str | None:
    """Raw, "" included: an empty ``$KARCHIVE_TRUST_POLICY`` must be refused, never read as "no policy"
    (:func:`karchive.trust.enforce.policy_from_env`)."""
    return TRUST_POLICY.raw()


def registry_key() -> str | None:
    return REGISTRY_KEY.text()


def launch_path() -> str | None:
    """Raw (None when unset): the launch path module reports a value it ignores."""
    return LAUNCH_PATH.raw()


def torch_abi() -> bool:
    return (TORCH_ABI.raw() or "1").strip().lower() not in ("0", "false", "no", "off")


def tuning_cache() -> bool:
    return (TUNING_CACHE.raw() or "1").strip().lower() not in ("0", "false", "no", "off")


def debug() -> bool:
    return bool(DEBUG.raw())
