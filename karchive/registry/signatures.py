"""Signatures stored beside a registry's blobs (spec/REGISTRY.md §3, "Signatures").

::

    blobs/sha256/<sha256>.karc.sigs/<keyid>.json   one signer's DSSE envelope (spec/SIGNING.md §3.1)
    blobs/sha256/<sha256>.karc.sigs/index.json     derived: the key ids present, for backends that cannot list

One object per signing key, created with the store's exclusive create, because signatures are added
after a version is published and by several people: two signers working at once each create their
own object, so neither can lose the other's (a shared envelope would need a read-modify-write,
which object stores cannot make atomic). An object is never replaced: the same key signing the same
statement again writes identical bytes (Ed25519 is deterministic) and is a no-op; a different
statement by that key is a :class:`ConflictError`. The object's name is the key id the signer
claims, which is only a hint (DSSE): verification decides whose signature it is.

Readers list the directory where the backend can list (the listing is authoritative) and read the
derived index where it cannot (plain HTTP); either way at most :data:`MAX_SIGNATURE_OBJECTS` objects
are fetched, those named by the policy's keys first. Nothing here imports ``cryptography`` until an
envelope is parsed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..core.digest import is_sha256_hex
from ..core.jsonio import canonical_json
from ..errors import ConflictError, DamagedRegistryError, EnvelopeError, RegistryError
from .records import _check_layout, load_json
from .store import Store
from .store_layout import LAYOUT_VERSION, SIGNATURE_SUFFIX, signature_index_path, signature_path, signatures_dir

if TYPE_CHECKING:  # pragma: no cover
    from ..trust.dsse import Envelope

SIGNATURE_INDEX_KIND = "karchive-signature-index"
#: Far above honest use (a few signers per archive); bounds what a stuffed bucket can make a loader fetch.
MAX_SIGNATURE_OBJECTS = 64


@dataclass(frozen=True)
class SignatureSet:
    """The envelopes stored for one blob, and the objects that could not be parsed (as ``(keyid, why)``)."""

    envelopes: tuple[Envelope, ...] = ()
    key_ids: tuple[str, ...] = ()  # the object names (claimed key ids), one per envelope
    unreadable: tuple[tuple[str, str], ...] = field(default=())
    where: str = ""

    def __len__(self) -> int:
        return len(self.envelopes) + len(self.unreadable)


def encode_signature_index(digest: str, key_ids: Collection[str]) -> bytes:
    return canonical_json(
        {"kind": SIGNATURE_INDEX_KIND, "layout": LAYOUT_VERSION, "sha256": digest, "keyids": sorted(set(key_ids))}
    )


def decode_signature_index(data: bytes, digest: str, where: str) -> list[str]:
    obj = load_json(data, where)
    if not isinstance(obj, dict) or obj.get("kind") != SIGNATURE_INDEX_KIND:
        raise DamagedRegistryError(f"{where}: corrupt signature index; rebuild it with `karchive reindex`", where=where)
    _check_layout(obj, where)
    keyids = obj.get("keyids")
    if obj.get("sha256") != digest or not isinstance(keyids, list) or not all(is_sha256_hex(k) for k in keyids):
        raise DamagedRegistryError(
            f"{where}: corrupt signature index (wrong digest or key ids); rebuild it with `karchive reindex`",
            where=where,
        )
    return list(keyids)


def _listed(store: Store, digest: str) -> list[str]:
    names = store.list_dir(signatures_dir(digest))
    return [
        n[: -len(SIGNATURE_SUFFIX)]
        for n in names
        if n.endswith(SIGNATURE_SUFFIX) and is_sha256_hex(n[: -len(SIGNATURE_SUFFIX)])
    ]


def signer_ids(store: Store, digest: str) -> list[str]:
    """The key ids that have a signature object for ``digest`` (listing, else the derived index)."""
    if store.can_list:
        return sorted(_listed(store, digest))
    path = signature_index_path(digest)
    data = store.read(path)
    return [] if data is None else sorted(decode_signature_index(data, digest, f"{store.url}/{path}"))


def read_signatures(store: Store, digest: str, prefer: Collection[str] = ()) -> SignatureSet:
    """Every signature object stored for the blob ``digest`` (bounded; ``prefer``'s key ids first)."""
    from ..trust.dsse import MAX_ENVELOPE_BYTES, Envelope

    ids = sorted(signer_ids(store, digest), key=lambda k: (k not in prefer, k))[:MAX_SIGNATURE_OBJECTS]
    envelopes: list[Envelope] = []
    names: list[str] = []
    unreadable: list[tuple[str, str]] = []
    for key_id in ids:
        path = signature_path(digest, key_id)
        where = f"{store.url}/{path}"
        data = store.read(path)
        if data is None:
            continue  # listed a moment ago, gone now (or a stale index entry): nothing to count
        if len(data) > MAX_ENVELOPE_BYTES:
            unreadable.append((key_id, f"{where} is larger than {MAX_ENVELOPE_BYTES} bytes"))
            continue
        try:
            envelopes.append(Envelope.parse(data, where))
            names.append(key_id)
        except EnvelopeError as exc:
            unreadable.append((key_id, str(exc)))
    return SignatureSet(tuple(envelopes), tuple(names), tuple(unreadable), f"{store.url}/{signatures_dir(digest)}")


def put_signature(store: Store, digest: str, key_id: str, data: bytes, ref: str) -> bool:
    """Create the signer's object exclusively. True: created; False: the identical object was already
    there. A different object under that key id is a :class:`ConflictError` (never overwritten)."""
    path = signature_path(digest, key_id)
    if store.create(path, data):
        return True
    existing = store.read(path)
    if existing == data:
        return False
    if existing is None:
        raise RegistryError(
            f"{store.url}/{path}: the backend refused to create it but it does not exist", registry=store.url
        )
    raise ConflictError(
        f"{ref} already has a signature by key {key_id[:16]} in {store.url} with a different statement "
        f"(object sha256 {hashlib.sha256(existing).hexdigest()[:16]}, this one {hashlib.sha256(data).hexdigest()[:16]}). "
        "A signer's signature is never replaced; sign with another key, or publish a new version",
        registry=store.url,
        ref=ref,
        existing_digest=hashlib.sha256(existing).hexdigest(),
        new_digest=hashlib.sha256(data).hexdigest(),
    )


def refresh_signature_index(store: Store, digest: str, rounds: int = 5) -> list[str]:
    """Rewrite the derived index until a fresh listing matches what was written (as name indexes
    are refreshed: the last writer always saw every object that existed before its write)."""
    listed: list[str] = []
    for _ in range(rounds):
        listed = sorted(_listed(store, digest))
        store.replace(signature_index_path(digest), encode_signature_index(digest, listed))
        if sorted(_listed(store, digest)) == listed:
            break
    return listed
