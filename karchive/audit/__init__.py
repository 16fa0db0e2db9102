"""Audit: compare archives (``karchive diff``). Pure functions over manifests and archive readers.

Nothing here imports the producer or a GPU runtime: auditing needs only the format reader.
"""

#: The submodules: the API lives there.
__all__ = ["diff", "match", "resources"]
