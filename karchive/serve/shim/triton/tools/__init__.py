"""karchive's import shim: ``triton.tools`` (only ``tensor_descriptor``: host descriptors that karchive launches)."""
