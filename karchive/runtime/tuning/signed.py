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

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ...core.jsonio import canonical_json, parse_json
from ...errors import KarchiveError, TrustError
from ...format.tuned import tables
from ...trust import reasons
from ...trust.dsse import Envelope, verify_signature
from ...trust.keys import PublicKey, SigningKey
from .decisions import DeviceKey, TuningStore, archive_kernels, as_decision

PAYLOAD_TYPE = "application/vnd.karchive.tuning+json"
FORMAT = "karchive-tuned/1"


def sign_tuning(document: dict[str, Any], keys: Sequence[SigningKey]) -> Envelope:
    """An envelope over the document's canonical JSON, signed by every key (deterministic: Ed25519)."""
    if not keys:
        source = document.get("archive") or {}  # the archive the decisions were tuned for (its name and version)
        raise TrustError(
            "a tuning sidecar is signed: give --sign KEY",
            reason=reasons.UNSIGNED,
            archive=f"{source.get('name')}@{source.get('version')}" if source.get("name") else None,
        )
    env = Envelope(PAYLOAD_TYPE, canonical_json(document))
    for k in keys:
        env = env.add_signature(k)
    return env


def verify_tuning(
    raw: bytes, keys: Sequence[PublicKey], where: str = "tuning sidecar", archive: str | None = None
) -> dict[str, Any]:
    """The document inside a signed tuning sidecar, after one of ``keys`` verified its signature over
    exactly these payload bytes and type; :class:`TrustError` otherwise, naming ``archive`` (NAME@VERSION:
    the archive the sidecar is imported into; None where it is verified on its own)."""
    env = Envelope.parse(raw, where)
    if env.payload_type != PAYLOAD_TYPE:
        raise TrustError(
            f"{where} holds a {env.payload_type!r} payload, not karchive tuning decisions",
            reason=reasons.WRONG_PAYLOAD_TYPE,
            archive=archive,
        )
    if not env.signatures:
        raise TrustError(f"{where} has no signature", reason=reasons.UNSIGNED, archive=archive)
    ok = [s for s in env.signatures for k in keys if verify_signature(env, s, k)]
    if not ok:
        raise TrustError(
            f"{where}: no given key verifies its signature(s) (signed by key id(s) "
            f"{', '.join(sorted({s.keyid or '?' for s in env.signatures}))})",
            reason=reasons.UNKNOWN_KEY,
            archive=archive,
        )
    doc = parse_json(env.payload, where, error=TrustError)
    if (
        not isinstance(doc, dict)
        or doc.get("format") != FORMAT
        or not isinstance(doc.get("kernels"), list)
        or not isinstance(doc.get("archive"), dict)
    ):
        raise TrustError(
            f"{where}: the signed payload is not a {FORMAT} document",
            reason=reasons.MALFORMED_STATEMENT,
            archive=archive,
        )
    return doc


def is_envelope(raw: bytes) -> bool:
    """Does this file look like a DSSE envelope (rather than a plain ``karchive tune --export`` file)?"""
    head = raw[:4096]
    return b'"payloadType"' in head or b'"signatures"' in head


# -- the document, and its decisions into the local cache -------------------------------------------------------
def tables_document(
    manifest: Any, records: Sequence[Mapping[str, Any]], device_name: str, archive: Mapping[str, Any]
) -> dict[str, Any]:
    """The sidecar document: per kernel (with its content digest), the tuning tables for ``device_name``."""
    digests = dict(archive_kernels(manifest))
    kernels = []
    for r in records:
        name = r.get("kernel")
        mine = [t for t in tables(r) if isinstance(t.get("device"), dict) and t["device"].get("name") == device_name]
        if isinstance(name, str) and mine and name in digests:
            kernels.append({"kernel": name, "digest": digests[name], "tuned": mine})
    return {"format": FORMAT, "archive": dict(archive), "kernels": kernels}


def import_tables(
    manifest: Any, document: Mapping[str, Any], root: Path | None = None, local: Any = None
) -> dict[str, Any]:
    """Write a (verified) sidecar document's decisions into this machine's tuning cache, for the kernels whose
    content (digest) is the same here: per GPU model, under this machine's driver version when ``local`` (its
    device) is that GPU model (tables are per model; the cache is per driver too), else the table's."""
    from ...format.tuned import check_tables

    mine = dict(archive_kernels(manifest))
    records = {r.get("kernel"): r for r in (manifest.autotune or []) if isinstance(r, dict)}
    kernels = document.get("kernels") or []
    for k in kernels:  # the whole document is checked before anything is written: nothing half-imported
        if not isinstance(k, dict):
            raise KarchiveError("a tuning sidecar's kernels entry must be an object")
        _check_tables(k, check_tables)
    written, skipped = 0, []
    for k in kernels:
        name = str(k.get("kernel"))
        if mine.get(name) != k.get("digest") or name not in records:
            skipped.append(f"{name}: the archive's kernel differs from the tuned one (digest)")
            continue
        configs = records[name].get("configs") or []
        store = TuningStore(name, mine[name], root)
        for table in tables({"tuned": k.get("tuned")}):
            dev = table.get("device") or {}
            prov = table.get("provenance")
            driver = prov.get("driver") if isinstance(prov, dict) and isinstance(prov.get("driver"), int) else None
            if local is not None and getattr(local, "name", None) == dev.get("name"):
                driver = getattr(local, "driver_version", driver)
            device = DeviceKey(str(dev.get("name") or ""), driver)
            for e in table.get("entries") or []:
                i = e.get("config") if isinstance(e, dict) else None
                if isinstance(i, int) and not isinstance(i, bool) and 0 <= i < len(configs):
                    store.put(device, list(e.get("key") or []), as_decision(configs[i]))
                    written += 1
    return {"written": written, "skipped": skipped}


def _check_tables(kernel: Mapping[str, Any], check_tables: Callable[[Mapping[str, Any], str], None]) -> None:
    """A sidecar kernel entry's tables: the shape the format states (``check_tables``), and every entry an
    object whose ``key`` is an autotune key as JSON stores it (a list of scalars, a non-finite float as
    ``{"float": ...}``). A signature says who sent the document, not that it is well formed (issue 34)."""
    where = f"tuning sidecar kernel {str(kernel.get('kernel'))[:200]!r}"
    check_tables({"tuned": kernel.get("tuned")}, where)
    for t, table in enumerate(kernel.get("tuned") or []):
        for n, entry in enumerate(table["entries"]):
            key = entry.get("key") if isinstance(entry, dict) else None
            if not isinstance(entry, dict):
                raise KarchiveError(f"{where}: tuned[{t}] entry {n} is not an object")
            if not isinstance(key, list) or not all(_key_part(v) for v in key):
                raise KarchiveError(
                    f"{where}: tuned[{t}] entry {n}: the key must be a list of numbers, strings, "
                    f"booleans or nulls, not {repr(key)[:120]}"
                )


def _key_part(value: Any) -> bool:
    if value is None or isinstance(value, (str, int, float, bool)):
        return True
    return isinstance(value, dict) and list(value) == ["float"] and isinstance(value["float"], str)
