"""The stable variant key: sha256 over a canonical description that no path or host can change.

Triton's own cache key hashes the installed compiler's files and ``libtriton.so`` and the absolute
paths of extern libraries, so it differs between two installs of the same version. This key uses
only what decides the binary: the kernel's source and the source of the jitted functions it calls
(Triton's ``JITFunction.cache_key``), signature, constexprs, specialisation hints, target, codegen
options (extern libraries by content hash, not path), the Triton version, and any pipeline hook.
"""

from __future__ import annotations

import hashlib
import os
from functools import lru_cache
from typing import Any

from ...core.jsonio import canonical_json

__all__ = ["KEY_SCHEMA", "RESULT_FIELDS", "file_sha256", "local_triton_file", "normalize_options", "variant_key"]

KEY_SCHEMA = 1

#: Metadata fields that describe the compiled result, not the request; they stay out of the key.
RESULT_FIELDS = frozenset(
    {
        "hash",
        "name",
        "shared",
        "tmem_size",
        "global_scratch_size",
        "global_scratch_align",
        "profile_scratch_size",
        "profile_scratch_align",
        "target",
        "triton_version",
        "tensordesc_meta",
        "cluster_dims",
        "num_tma_descriptors",
        "ir_override",
    }
)


@lru_cache(maxsize=64)
def file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def local_triton_file(path: str) -> str | None:
    """The file a metadata path names, found in this machine's Triton install if it names another's."""
    marker = f"{os.sep}triton{os.sep}"
    if os.path.isfile(path):
        return path
    i = path.rfind(marker + "backends" + os.sep)
    if i < 0:
        return None
    try:
        import triton
    except ImportError:
        return None
    local = os.path.join(os.path.dirname(os.path.abspath(triton.__file__)), path[i + len(marker) :])
    return local if os.path.isfile(local) else None


def _jsonable(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


def normalize_options(metadata: dict) -> dict:
    """Codegen options from compiled metadata, with extern libraries named by content hash."""
    options = {}
    for key, value in metadata.items():
        # Upper-case entries are environment variables Triton copies into its metadata (for its own
        # cache key). Their effect on codegen shows in the options themselves (TRITON_DEFAULT_FP_FUSION
        # -> enable_fp_fusion); the environment stays out of the key, and in provenance.
        if key in RESULT_FIELDS or key.isupper():
            continue
        if key == "extern_libs":
            libs = []
            for name, path in value or []:
                local = local_triton_file(str(path))
                digest = file_sha256(local) if local else None
                libs.append([name, digest or os.path.basename(str(path))])
            options[key] = sorted(libs)
            continue
        options[key] = _jsonable(value)
    return options


def variant_key(
    *,
    kernel: str,
    source_key: str,
    signature: dict[str, str],
    constexprs: dict[str, Any],
    hints: dict[str, Any],
    target: dict,
    options: dict,
    triton_version: str,
    hooks: list[dict],
    env: dict[str, str] | None = None,
) -> str:
    description = {
        "key_schema": KEY_SCHEMA,
        "kernel": kernel,
        "source": source_key,
        "signature": signature,
        "constexprs": _jsonable(constexprs),
        "hints": _jsonable(hints),
        "target": target,
        "options": options,
        "triton": triton_version,
        "hooks": hooks,
    }
    if env:
        # A build's explicit codegen environment ([archive] env, buildenv.py) changes the binary; an
        # empty one leaves the description, and so every key built without one, as it was.
        description["env"] = dict(sorted(env.items()))
    return hashlib.sha256(canonical_json(description)).hexdigest()
