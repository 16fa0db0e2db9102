"""The archive format (spec/FORMAT.md): the manifest model, the container's reader and writer, and the
records an archive carries (autotune choices, heuristics, kernel names, targets). Below every other layer
but core and errors; the producer writes through it and every consumer reads through it.

The API lives in the submodules (``karchive.format.manifest``, ``.reader``, ``.open``, ...); importing this
package imports none of them.
"""

__all__ = [
    "autotune",
    "check",
    "constants",
    "dtypes",
    "extract",
    "heuristics",
    "heuristics_expr",
    "inductor_records",
    "inductor_source",
    "layout",
    "manifest",
    "names",
    "open",
    "probes",
    "reader",
    "schema",
    "sentinel",
    "shard",
    "source",
    "target",
    "tarheader",
    "writer",
]
