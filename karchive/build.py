"""Build archives from Python, as ``karchive build`` does: the public face of :mod:`karchive.producer.build`.

::

    from karchive.build import build_archive, load_spec

    result = build_archive(load_spec("build.toml"), "kernels.karc", jobs=8)   # or executor="ray"
    print(len(result.built), "built,", len(result.failed), "failed")

or from requests made in code::

    from karchive.build import BuildSpec, VariantRequest, build_archive

    req = VariantRequest("kernels.py:add_kernel", "*fp32:16, *fp32:16, *fp32:16, i32", "cuda:90", {"BLOCK": 1024})
    build_archive(BuildSpec("my-kernels", "1.0", [req]), "my-kernels.karc")

:class:`ArchiveBuilder` packs variants compiled elsewhere (:func:`karchive.compile.compile_variant`).
Needs the ``producer`` extra (Triton), imported when a compile runs; ``executor="ray"`` needs ``ray``.
"""

from .producer.build import *  # noqa: F403 - the face is the package's own list of names
from .producer.build import __all__ as __all__
