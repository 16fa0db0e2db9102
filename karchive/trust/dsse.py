"""DSSE envelopes (github.com/secure-systems-lab/dsse, protocol v1): sign, parse, verify one signature.

A signature covers ``PAE(payloadType, payload)``, so the payload type is authenticated together with
the bytes: checking the type beside the signature rather than inside it was CVE-2022-35929 (cosign).
:func:`verify_signature` checks the signature over the exact payload bytes held by the
:class:`Envelope`; callers then parse *those* bytes, never a second decoding of the JSON text.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass, replace

from ..errors import EnvelopeError, FormatError
from .keys import PublicKey, SigningKey

#: in-toto attestations travel with this payload type (in-toto attestation spec, envelope layer).
INTOTO_PAYLOAD_TYPE = "application/vnd.in-toto+json"
#: A sidecar holds one provenance statement and a few signatures; far larger is hostile.
MAX_ENVELOPE_BYTES = 4 * 1024 * 1024
MAX_SIGNATURES = 256

_B64_STD = re.compile(r"[A-Za-z0-9+/]*={0,2}")
_B64_URL = re.compile(r"[A-Za-z0-9_-]*={0,2}")


def pae(payload_type: str, payload: bytes) -> bytes:
    """Pre-Authentication Encoding: ``"DSSEv1" SP LEN(type) SP type SP LEN(body) SP body``, where LEN
    is the ASCII decimal byte length (DSSE protocol.md)."""
    t = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(payload), payload)


def b64decode(text: object, what: str, where: str) -> bytes:
    """Base64 as DSSE allows it (envelope.md): standard or URL-safe alphabet, padding optional. ``what`` is
    the field, ``where`` the envelope (its file, or what was read)."""
    if not isinstance(text, str):
        raise EnvelopeError(f"{what} is not a string", path=where)
    if _B64_STD.fullmatch(text):
        body = text
    elif _B64_URL.fullmatch(text):
        body = text.replace("-", "+").replace("_", "/")
    else:
        raise EnvelopeError(f"{what} is not base64", path=where)
    body = body.rstrip("=")
    try:
        return base64.b64decode(body + "=" * (-len(body) % 4), validate=True)
    except binascii.Error as exc:
        raise EnvelopeError(f"{what} is not base64 ({exc})", path=where) from exc


@dataclass(frozen=True)
class Signature:
    keyid: str  # an unauthenticated hint (DSSE): it narrows which key to try, it decides nothing
    sig: bytes


@dataclass(frozen=True)
class Envelope:
    payload_type: str
    payload: bytes
    signatures: tuple[Signature, ...] = ()

    @classmethod
    def create(cls, payload_type: str, payload: bytes, key: SigningKey) -> Envelope:
        return cls(payload_type, payload).add_signature(key)

    def add_signature(self, key: SigningKey) -> Envelope:
        """Sign PAE(type, payload) with ``key``; an earlier signature by the same key is replaced
        (Ed25519 is deterministic, so it is the same signature unless the envelope was altered)."""
        sig = Signature(key.key_id, key.sign(pae(self.payload_type, self.payload)))
        others = tuple(s for s in self.signatures if s.keyid != key.key_id)
        return replace(self, signatures=others + (sig,))

    def to_json(self) -> dict:
        return {
            "payloadType": self.payload_type,
            "payload": base64.b64encode(self.payload).decode(),
            "signatures": [{"keyid": s.keyid, "sig": base64.b64encode(s.sig).decode()} for s in self.signatures],
        }

    def to_bytes(self) -> bytes:
        """Indented, sorted JSON (readable in a diff); any byte form is valid, only PAE is signed."""
        return (json.dumps(self.to_json(), indent=2, sort_keys=True, ensure_ascii=True) + "\n").encode()

    @classmethod
    def parse(cls, data: bytes, where: str = "envelope") -> Envelope:
        """Strict JSON (ASCII, no duplicate keys, no NaN, bounded); unknown fields are ignored, as
        DSSE requires; a missing ``keyid`` is the empty string."""
        from ..format.reader import Limits, load_json

        if len(data) > MAX_ENVELOPE_BYTES:
            raise EnvelopeError(f"{where} is larger than {MAX_ENVELOPE_BYTES} bytes", path=where)
        try:
            obj = load_json(data, where, Limits(max_json_values=4 * MAX_SIGNATURES + 64))
        except FormatError as exc:
            raise EnvelopeError(f"{where}: {exc}", path=where) from exc
        if type(obj) is not dict:
            raise EnvelopeError(f"{where} is not a DSSE envelope (a JSON object)", path=where)
        for field, typ in (("payloadType", str), ("payload", str), ("signatures", list)):
            if type(obj.get(field)) is not typ:
                raise EnvelopeError(f"{where}: field {field!r} is missing or not a {typ.__name__}", path=where)
        if len(obj["signatures"]) > MAX_SIGNATURES:
            raise EnvelopeError(f"{where} holds more than {MAX_SIGNATURES} signatures", path=where)
        sigs = []
        for i, s in enumerate(obj["signatures"]):
            if type(s) is not dict or type(s.get("sig")) is not str or type(s.get("keyid", "")) is not str:
                raise EnvelopeError(
                    f"{where}: signatures[{i}] needs a string 'sig' (and an optional string 'keyid')", path=where
                )
            try:
                sigs.append(Signature(s.get("keyid", ""), b64decode(s["sig"], f"signatures[{i}].sig", where)))
            except EnvelopeError as exc:
                raise EnvelopeError(f"{where}: {exc}", path=where) from exc
        try:
            payload = b64decode(obj["payload"], "payload", where)
        except EnvelopeError as exc:
            raise EnvelopeError(f"{where}: {exc}", path=where) from exc
        return cls(obj["payloadType"], payload, tuple(sigs))


def verify_signature(envelope: Envelope, signature: Signature, key: PublicKey) -> bool:
    """True if ``key`` signed PAE(envelope.payload_type, envelope.payload) — type and bytes together."""
    return key.verify(signature.sig, pae(envelope.payload_type, envelope.payload))
