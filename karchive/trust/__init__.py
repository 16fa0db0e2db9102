"""Signed archives: Ed25519 keys, DSSE envelopes, in-toto/SLSA provenance, trust policies, and the
one verification entry point (spec/SIGNING.md).

Modules, one job each: :mod:`.keys` (key files, key ids), :mod:`.dsse` (envelopes, PAE),
:mod:`.buildinfo` and :mod:`.provenance` (the statement), :mod:`.policy` (TOML policy),
:mod:`.verify` (accept or refuse), :mod:`.sidecar` (``ARCHIVE.sig.json``), :mod:`.sign`,
:mod:`.reasons` (refusal codes). Names below are imported on first use: ``cryptography`` (the
``trust`` extra) is loaded only when keys or signatures are actually handled.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "SigningKey": "keys",
    "PublicKey": "keys",
    "load_private_key": "keys",
    "load_public_key": "keys",
    "save_keypair": "keys",
    "key_id_of": "keys",
    "Envelope": "dsse",
    "pae": "dsse",
    "INTOTO_PAYLOAD_TYPE": "dsse",
    "build_statement": "provenance",
    "parse_statement": "provenance",
    "Statement": "provenance",
    "collect_build_info": "buildinfo",
    "load_build_info": "buildinfo",
    "check_build_info": "buildinfo",
    "TrustPolicy": "policy",
    "verify_archive_signatures": "verify",
    "TrustResult": "verify",
    "sidecar_path": "sidecar",
    "read_sidecar": "sidecar",
    "write_sidecar": "sidecar",
    "sign_archive": "sign",
    "SignOutcome": "sign",
}

__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
