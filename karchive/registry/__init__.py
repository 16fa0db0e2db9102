"""Publish, pull and lazily read archives through a registry (local directory or fsspec URL).

See spec/REGISTRY.md for the layout and the guarantees. Importing this package needs only the
standard library, zstandard and fsspec; cloud backends are imported when a URL needs them.
"""

from .cache import Cache, CacheEntry, PruneReport
from .config import cache_dir, default_cache_dir, default_registry_dir, registry_url
from .lockfile import Lockfile, Pin
from .options import OpenOptions
from .records import VersionRecord
from .refs import Ref, parse_ref
from .registry import PublishResult, PullResult, Registry
from .retry import RetryPolicy
from .versions import newest, version_key

__all__ = [
    "Cache",
    "CacheEntry",
    "Lockfile",
    "OpenOptions",
    "Pin",
    "PruneReport",
    "PublishResult",
    "PullResult",
    "Ref",
    "Registry",
    "RetryPolicy",
    "VersionRecord",
    "cache_dir",
    "default_cache_dir",
    "default_registry_dir",
    "newest",
    "parse_ref",
    "registry_url",
    "version_key",
]
