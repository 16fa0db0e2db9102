"""Signatures in a registry, enforced at load: real Ed25519 keys, real archives (Triton-compiled),
real stores (local directory, S3 through the moto server, GCS through fake-gcs-server).

Every refusal is a karchive error naming its reason, raised before ``karchive.open`` returns: no
runtime Archive is made and no driver is touched (``nothing_loaded``)."""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("cryptography")

from registry_servers import ROOT, StaticHTTPServer, gcs_server, s3_server, subprocess_env
from registry_support import isolated, release_together, small_archive  # noqa: F401 - fixture
from trust_support import (
    UTC,
    load_policy,
    make_keys,
    make_store,
    nothing_loaded,
    replace_archive,
    signature_bytes,
    tamper_envelope,
    write_policy,
)

import karchive
from karchive.errors import (
    ConflictError,
    FormatError,
    IntegrityError,
    KarchiveError,
    TrustError,
    UntrustedArchiveError,
)
from karchive.registry import OpenOptions, Registry
from karchive.registry.store_layout import blob_path, signature_index_path, signature_path, signatures_dir
from karchive.trust import reasons
from karchive.trust.sidecar import sidecar_path

pytestmark = pytest.mark.usefixtures("isolated")
BACKENDS = ["local", "s3", "gcs"]


@pytest.fixture(scope="module")
def keys():
    return make_keys()


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path):
    return make_store(request.param, tmp_path)


def test_publish_signed_then_open_and_pull_under_a_policy(store, keys, tmp_path: Path) -> None:
    writer = store.registry(tmp_path / "wcache")
    published = writer.publish(small_archive("examples", "0.1.0"), sign=[keys["ci"]])
    assert published.created and [(s.key_id, s.created, s.source) for s in published.signatures] == [
        (keys["ci"].key_id, True, "key")
    ]
    digest = published.record.sha256
    # The envelope sits beside the blob, one object per signer, plus the derived index for HTTP readers.
    assert writer.store.read(signature_path(digest, keys["ci"].key_id)) is not None
    assert json.loads(writer.store.read(signature_index_path(digest)))["keyids"] == [keys["ci"].key_id]
    assert writer.store.read(blob_path(digest)) == small_archive("examples", "0.1.0").read_bytes()

    policy = write_policy(tmp_path / "policy.toml", keys)
    reg = store.registry(tmp_path / "cache")
    pulled = reg.pull("examples@0.1.0", options=OpenOptions(trust=policy))
    assert pulled.trust is not None and pulled.trust.key_ids == (keys["ci"].key_id,)
    assert not pulled.trust.from_receipt and pulled.trust.result.signers[0].statement.sha256 == digest
    reader = reg.open("examples@0.1.0", trust=policy)
    verdict = reader.verdict
    assert verdict.from_receipt and verdict.signers == ((keys["ci"].key_id, "ci"),)
    reader.source.close()
    arc = karchive.open("examples@0.1.0", registry=reg, trust=policy)
    assert arc.name == "examples" and arc.kernels() == ["kernels:add_kernel"]
    arc.close()
    if store.kind != "local":  # a lazy (ranged) open verifies through the index digest, with no download
        lazy = store.registry(tmp_path / "lazy-cache")
        reader = lazy.open("examples@0.1.0", trust=policy, fetch="lazy")
        verdict = reader.verdict
        assert verdict.index_sha256 == published.record.index_sha256 and not verdict.from_receipt
        assert not list((tmp_path / "lazy-cache").glob("blobs/sha256/*.karc"))


def test_signing_a_published_version_adds_a_signer(store, keys, tmp_path: Path) -> None:
    writer = store.registry(tmp_path / "wcache")
    writer.publish(small_archive("examples", "0.1.0"), sign=[keys["alice"]])
    two = load_policy(write_policy(tmp_path / "two.toml", keys, signers=("alice", "bob"), threshold=2))
    with pytest.raises(UntrustedArchiveError) as e:
        store.registry(tmp_path / "c1").open("examples@0.1.0", trust=two)
    assert e.value.reason == reasons.THRESHOLD_NOT_MET
    out = store.registry(tmp_path / "bob-cache").sign("examples@0.1.0", keys["bob"])
    assert out.signature.created and out.index_current
    again = store.registry(tmp_path / "bob-cache").sign("examples@0.1.0", keys["bob"])
    assert not again.signature.created  # the same key, the same statement: identical bytes, a no-op
    _reader = store.registry(tmp_path / "c2").open("examples@0.1.0", trust=two)
    verdict = _reader.verdict
    assert sorted(n for _, n in verdict.signers) == ["alice", "bob"]
    # A signer's object is never replaced: another statement by the same key is a conflict.
    with pytest.raises(ConflictError, match="never replaced"):
        store.registry(tmp_path / "bob-cache").sign(
            "examples@0.1.0", keys["bob"], build_info={"builder_id": "https://ci.example/other"}
        )
    with pytest.raises(KarchiveError, match="say which version"):
        writer.sign("examples", keys["bob"])


_SIGN = """
import sys
from karchive.registry import Registry
from karchive.trust.keys import load_private_key
url, pem, cache = sys.argv[1:4]
key = load_private_key(pem)
reg = Registry(url, cache=cache)
reg.resolve("examples@0.1.0")
print("ready", flush=True)
sys.stdin.readline()
out = reg.sign("examples@0.1.0", key)
print("created" if out.signature.created else "noop", key.key_id)
"""


def test_concurrent_signers_keep_every_signature(store, keys, tmp_path: Path) -> None:
    """Three processes sign the same version at the same moment: every signature survives (each signer
    creates its own object; there is no read-modify-write to lose one in)."""
    from karchive.trust.keys import save_keypair

    store.registry(tmp_path / "w").publish(small_archive("examples", "0.1.0"))
    env = s3_server().env() if store.kind == "s3" else gcs_server().env() if store.kind == "gcs" else {}
    names = ("alice", "bob", "carol")
    procs = []
    for n in names:
        save_keypair(keys[n], tmp_path / f"{n}.key", tmp_path / f"{n}.pub")
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", _SIGN, store.url, str(tmp_path / f"{n}.key"), str(tmp_path / f"cache-{n}")],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=subprocess_env(**env),
                cwd=str(ROOT),
            )
        )
    outs = release_together(procs)
    assert sorted(o.split()[0] for o in outs) == ["created"] * 3, outs
    reg = store.registry(tmp_path / "check")
    assert reg.signers("examples@0.1.0") == sorted(keys[n].key_id for n in names)
    three = write_policy(tmp_path / "three.toml", keys, signers=names, threshold=3)
    _reader = reg.open("examples@0.1.0", trust=three)
    verdict = _reader.verdict
    assert len(verdict.signers) == 3
    digest = reg.resolve("examples@0.1.0").sha256
    assert sorted(json.loads(reg.store.read(signature_index_path(digest)))["keyids"]) == sorted(
        keys[n].key_id for n in names
    )


# --- every refusal, on every store ----------------------------------------------------------------------
def _attack(case: str, writer: Registry, keys, tmp_path: Path) -> tuple[str, object]:
    """Set up one case on a fresh registry; return (policy path, expected reason or None for accepted)."""
    now = datetime.datetime.now(UTC)
    a = small_archive("examples", "0.1.0")
    if case == "unsigned":
        writer.publish(a)
        return str(write_policy(tmp_path / "p.toml", keys)), reasons.UNSIGNED
    if case == "unsigned-allowed":
        writer.publish(a)
        return str(write_policy(tmp_path / "p.toml", keys, threshold=0)), None
    if case == "wrong-key":
        writer.publish(a, sign=[keys["stranger"]])
        return str(write_policy(tmp_path / "p.toml", keys)), reasons.UNKNOWN_KEY
    if case == "revoked-key":
        writer.publish(a, sign=[keys["ci"]])
        return str(write_policy(tmp_path / "p.toml", keys, revoked=("ci",))), reasons.REVOKED_KEY
    if case == "expired-rotation-window":
        writer.publish(a, sign=[keys["old"]])
        windows = {"old": (None, now - datetime.timedelta(days=1)), "new": (now - datetime.timedelta(days=30), None)}
        return str(
            write_policy(tmp_path / "p.toml", keys, signers=("old", "new"), windows=windows)
        ), reasons.KEY_EXPIRED
    if case == "tampered-envelope":
        record = writer.publish(a, sign=[keys["ci"]]).record
        path = signature_path(record.sha256, keys["ci"].key_id)
        writer.store.replace(path, tamper_envelope(signature_bytes(writer, record.sha256, keys["ci"].key_id)))
        return str(write_policy(tmp_path / "p.toml", keys)), reasons.BAD_SIGNATURE
    if case == "swapped-envelope":  # the validly signed envelope of 0.2.0 put beside 0.1.0's blob
        record = writer.publish(a, sign=[keys["ci"]]).record
        other = writer.publish(small_archive("examples", "0.2.0"), sign=[keys["ci"]]).record
        writer.store.replace(
            signature_path(record.sha256, keys["ci"].key_id), signature_bytes(writer, other.sha256, keys["ci"].key_id)
        )
        return str(write_policy(tmp_path / "p.toml", keys)), reasons.SWAPPED_ENVELOPE
    if case == "tampered-archive":  # other bytes under 0.1.0, record rewritten to match, signature kept
        record = writer.publish(a, sign=[keys["ci"]]).record
        new = replace_archive(writer, "examples", "0.1.0", small_archive("examples", "0.1.0", block=256))
        writer.store.replace(
            signature_path(new.sha256, keys["ci"].key_id), signature_bytes(writer, record.sha256, keys["ci"].key_id)
        )
        return str(write_policy(tmp_path / "p.toml", keys)), reasons.DIGEST_MISMATCH
    raise AssertionError(case)


CASES = [
    "unsigned",
    "unsigned-allowed",
    "wrong-key",
    "revoked-key",
    "expired-rotation-window",
    "tampered-envelope",
    "swapped-envelope",
    "tampered-archive",
]


@pytest.mark.parametrize("case", CASES)
def test_each_refusal_is_a_named_error_and_nothing_is_loaded(
    store, keys, tmp_path: Path, case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = store.registry(tmp_path / "wcache")
    policy, expected = _attack(case, writer, keys, tmp_path)
    fetches = ["full"] if store.kind == "local" else ["full", "lazy"]
    for i, fetch in enumerate(fetches):
        reg = store.registry(tmp_path / f"cache-{fetch}")
        if expected is None:
            arc = karchive.open("examples@0.1.0", registry=reg, trust=policy, fetch=fetch)
            assert arc.version == "0.1.0"
            arc.close()
            continue
        with nothing_loaded(monkeypatch, no_member_reads=fetch == "lazy"):
            with pytest.raises(UntrustedArchiveError) as e:
                karchive.open("examples@0.1.0", registry=reg, trust=policy, fetch=fetch)
        assert e.value.reason == expected, (fetch, str(e.value))
        assert e.value.archive == "examples@0.1.0" and reasons.MEANING[expected] in str(e.value)
        assert isinstance(e.value, TrustError) and e.value.policy_sha256
        with pytest.raises(UntrustedArchiveError):  # pull refuses the same way (and copies nothing out)
            reg.pull("examples@0.1.0", tmp_path / f"out-{i}.karc", OpenOptions(trust=policy))
        assert not (tmp_path / f"out-{i}.karc").exists()


def test_a_blob_changed_in_the_bucket_never_loads(keys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bytes flipped in the stored blob, record untouched: a full pull fails its digest check; a lazy
    reader whose footer still matches passes the signature check (the index is unchanged) but
    ``read()`` refuses the altered frame before its bytes reach anyone."""
    s3 = make_store("s3", tmp_path)
    writer = s3.registry(tmp_path / "w")
    record = writer.publish(small_archive("examples", "0.1.0"), sign=[keys["ci"]]).record
    data = bytearray(writer.store.read(blob_path(record.sha256)))
    arc = karchive.open("examples@0.1.0", registry=writer)
    binary = arc.reader.manifest["variants"][0]["files"]["binary"]["path"]
    frame = arc.reader.frames[arc.reader.members[binary].frame]
    arc.close()
    data[frame.offset + frame.length // 2] ^= 0xFF
    writer.store.replace(blob_path(record.sha256), bytes(data))
    policy = write_policy(tmp_path / "p.toml", keys)
    with nothing_loaded(monkeypatch):
        with pytest.raises(IntegrityError):
            karchive.open("examples@0.1.0", registry=s3.registry(tmp_path / "c1"), trust=policy, fetch="full")
    arc = karchive.open("examples@0.1.0", registry=s3.registry(tmp_path / "c2"), trust=policy, fetch="lazy")
    with pytest.raises(FormatError):  # zstd's frame checksum or the member's sha256, whichever notices first
        arc.reader.read(binary)
    arc.close()


def test_http_registry_reads_signatures_through_the_derived_index(keys, tmp_path: Path) -> None:
    root = tmp_path / "served"
    writer = Registry(root / "registry", cache=tmp_path / "w")
    writer.publish(small_archive("examples", "0.1.0"), sign=[keys["ci"]])
    writer.publish(small_archive("examples", "0.2.0"))
    http = StaticHTTPServer(root)
    try:
        policy = write_policy(tmp_path / "p.toml", keys)
        reg = Registry(f"{http.url}/registry", cache=tmp_path / "c")
        reader = reg.open("examples@0.1.0", trust=policy, fetch="lazy")
        verdict = reader.verdict
        assert verdict.key_ids == (keys["ci"].key_id,)
        assert any("index.json" in r["path"] and ".sigs" in r["path"] for r in http.log)
        with pytest.raises(UntrustedArchiveError) as e:
            reg.open("examples@0.2.0", trust=policy)
        assert e.value.reason == reasons.UNSIGNED
    finally:
        http.stop()


def test_publish_stores_the_sidecar_signatures_and_refuses_a_stale_one(keys, tmp_path: Path) -> None:
    from karchive.trust.sign import sign_archive

    a = tmp_path / "examples-0.1.0.karc"
    a.write_bytes(small_archive("examples", "0.1.0").read_bytes())
    sign_archive(a, keys["alice"])
    sign_archive(a, keys["bob"])
    reg = Registry(tmp_path / "registry", cache=tmp_path / "c")
    out = reg.publish(a, sign=[keys["carol"]])
    assert sorted((s.key_id, s.source) for s in out.signatures) == sorted(
        [(keys["carol"].key_id, "key"), (keys["alice"].key_id, "sidecar"), (keys["bob"].key_id, "sidecar")]
    )
    three = write_policy(tmp_path / "three.toml", keys, signers=("alice", "bob", "carol"), threshold=3)
    assert len(reg.open("examples@0.1.0", trust=three).verdict.signers) == 3
    # A sidecar left over from another build is refused before anything is written.
    b = tmp_path / "examples-0.2.0.karc"
    b.write_bytes(small_archive("examples", "0.2.0").read_bytes())
    Path(sidecar_path(b)).write_bytes(Path(sidecar_path(a)).read_bytes())
    with pytest.raises(TrustError, match="stale signature file") as e:
        reg.publish(b)
    assert e.value.reason == reasons.DIGEST_MISMATCH
    with pytest.raises(KarchiveError):
        reg.resolve("examples@0.2.0")
    assert reg.publish(b, sidecar=False).created


def test_unreadable_signature_objects_are_rejections_not_crashes(keys, tmp_path: Path) -> None:
    reg = Registry(tmp_path / "registry", cache=tmp_path / "c")
    record = reg.publish(small_archive("examples", "0.1.0"), sign=[keys["ci"]]).record
    junk = "ab" * 32
    reg.store.create(signature_path(record.sha256, junk), b'{"payload": 1}')
    policy = write_policy(tmp_path / "p.toml", keys)
    _reader = Registry(tmp_path / "registry", cache=tmp_path / "c2").open("examples@0.1.0", trust=policy)
    verdict = _reader.verdict
    assert [r["reason"] for r in verdict.result.to_json()["rejected"]] == [reasons.MALFORMED_ENVELOPE]
    # With nothing else, the garbage object is the reason given.
    (tmp_path / "registry" / signature_path(record.sha256, keys["ci"].key_id)).unlink()
    with pytest.raises(UntrustedArchiveError) as e:
        Registry(tmp_path / "registry", cache=tmp_path / "c3").open("examples@0.1.0", trust=policy)
    assert e.value.reason == reasons.MALFORMED_ENVELOPE and junk[:16] in str(e.value)
    assert signatures_dir(record.sha256).endswith(".karc.sigs")
