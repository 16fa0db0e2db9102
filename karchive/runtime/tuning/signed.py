"""Signed tuning sidecars: an archive's tuning tables for one GPU model, shipped beside the archive (spec/SIGNING.md §12).

``karchive tune ARCHIVE --keys FILE --sidecar OUT --sign KEY`` writes, instead of a new archive version, a
DSSE envelope (payload type :data:`PAYLOAD_TYPE`, the same envelopes and Ed25519 keys as archive
signatures) whose payload is canonical JSON::

    {"format": "karchive-tuned/1",
     "archive": {"name": "ops", "version": "1", "sha256": "<archive file sha256>"},
     "kernels": [{"kernel": "ops:matmul", "digest": "<kernel digest, runtime/tuning/decisions.py>",
                  "tuned": [<a tuning table, spec/FORMAT.md §6.3>]}]}

``karchive tune ARCHIVE --import SIDECAR --key PUB`` verifies the signature with one of the given public
keys before anything is read from the payload, then writes the decisions into the local tuning cache for
the kernels whose content (digest) is the same here. Nothing in the payload is executed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...core.jsonio import canonical_json, parse_json
from ...errors import TrustError
from ...trust import reasons
from ...trust.dsse import Envelope, verify_signature
from ...trust.keys import PublicKey, SigningKey

PAYLOAD_TYPE = "application/vnd.karchive.tuning+json"
FORMAT = "karchive-tuned/1"


def sign_tuning(document: dict[str, Any], keys: Sequence[SigningKey]) -> Envelope:
    """An envelope over the document's canonical JSON, signed by every key (deterministic: Ed25519)."""
    if not keys:
        source = document.get("archive") or {}  # the archive the decisions were tuned for (its name and version)
        raise TrustError("a tuning sidecar is signed: give --sign KEY", reason=reasons.UNSIGNED,
                         archive=f"{source.get('name')}@{source.get('version')}" if source.get("name") else None)
    env = Envelope(PAYLOAD_TYPE, canonical_json(document))
    for k in keys:
        env = env.add_signature(k)
    return env


def verify_tuning(raw: bytes, keys: Sequence[PublicKey], where: str = "tuning sidecar",
                  archive: str | None = None) -> dict[str, Any]:
    """The document inside a signed tuning sidecar, after one of ``keys`` verified its signature over
    exactly these payload bytes and type; :class:`TrustError` otherwise, naming ``archive`` (NAME@VERSION:
    the archive the sidecar is imported into; None where it is verified on its own)."""
    try:
        env = Envelope.parse(raw, where)
    except TrustError:
        raise
    if env.payload_type != PAYLOAD_TYPE:
        raise TrustError(f"{where} holds a {env.payload_type!r} payload, not karchive tuning decisions",
                         reason=reasons.WRONG_PAYLOAD_TYPE, archive=archive)
    if not env.signatures:
        raise TrustError(f"{where} has no signature", reason=reasons.UNSIGNED, archive=archive)
    ok = [s for s in env.signatures for k in keys if verify_signature(env, s, k)]
    if not ok:
        raise TrustError(f"{where}: no given key verifies its signature(s) (signed by key id(s) "
                         f"{', '.join(sorted({s.keyid or '?' for s in env.signatures}))})", reason=reasons.UNKNOWN_KEY,
                         archive=archive)
    doc = parse_json(env.payload, where, error=TrustError)
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("kernels"), list) \
            or not isinstance(doc.get("archive"), dict):
        raise TrustError(f"{where}: the signed payload is not a {FORMAT} document",
                         reason=reasons.MALFORMED_STATEMENT, archive=archive)
    return doc


def is_envelope(raw: bytes) -> bool:
    """Does this file look like a DSSE envelope (rather than a plain ``karchive tune --export`` file)?"""
    head = raw[:4096]
    return b'"payloadType"' in head or b'"signatures"' in head
