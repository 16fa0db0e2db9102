"""Signed registry metadata (spec/SIGNING.md §11): the snapshot of every name's versions and the
short-lived timestamp that signs it, issued by publish/sign/refresh and verified at resolution.

Real Ed25519 keys, real Triton-compiled archives, real stores (local directory, S3 through the moto
server, GCS through fake-gcs-server), real concurrent processes; every attack is what a
writer-compromised bucket (no private key) can do: put back old metadata, stop re-signing, hide a
version, add one, rewrite a record, forge or under-sign the metadata."""

from __future__ import annotations

import datetime
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("cryptography")

from registry_servers import ROOT, gcs_server, s3_server, subprocess_env
from registry_support import isolated, release_together, run_cli, small_archive  # noqa: F401 - fixture
from trust_support import UTC, hide_version, make_keys, make_store, nothing_loaded, policy_text, replace_archive

import karchive
from karchive.errors import ConflictError, KarchiveError, RegistryError, RegistryMetadataError, TrustPolicyError
from karchive.registry import OpenOptions, Registry
from karchive.registry.metadata_store import TIMESTAMP_PATH, Snapshot, seen_versions, snapshot_path
from karchive.registry.store_layout import version_record_path
from karchive.trust import reasons
from karchive.trust.metadata import Timestamp
from karchive.trust.policy import TrustPolicy

pytestmark = pytest.mark.usefixtures("isolated")
BACKENDS = ["local", "s3", "gcs"]
PAST = datetime.datetime.now(UTC) - datetime.timedelta(days=10)


@pytest.fixture(scope="module")
def keys():
    return make_keys()


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path):
    return make_store(request.param, tmp_path)


def meta_policy(
    path: Path,
    keys,
    *,
    meta: tuple[str, ...] = ("alice",),
    threshold: int = 1,
    extra: tuple[str, ...] = ("alice", "bob"),
    timestamp: tuple[str, ...] | None = None,
) -> Path:
    """Archives signed by ci; registry metadata by ``meta`` (``threshold`` of them)."""
    text = policy_text(keys, signers=("ci",), extra_keys=extra)
    text += "\n[registry]\nrequire_signed_metadata = true\nkeys = [" + ", ".join(f'"{n}"' for n in meta) + "]\n"
    text += f"threshold = {threshold}\n"
    if timestamp:
        text += "timestamp_keys = [" + ", ".join(f'"{n}"' for n in timestamp) + "]\n"
    path.write_text(text)
    return path


def refused(reg: Registry, ref: str, policy: Path, reason: str, **kw) -> RegistryMetadataError:
    with pytest.raises(RegistryMetadataError) as e:
        reg.pull(ref, options=OpenOptions(trust=policy, **kw))
    assert e.value.reason == reason, str(e.value)
    if reason not in (reasons.METADATA_SIGNATURE, reasons.METADATA_MALFORMED):  # those list their own details
        assert reasons.MEANING[reason] in str(e.value)
    assert e.value.registry == reg.url and e.value.policy_sha256
    return e.value


def test_publish_two_versions_then_every_attack_is_refused(
    store, keys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = store.registry(tmp_path / "w")
    # Version 1 of the metadata was issued ten days ago with a one-day timestamp: long expired.
    writer.publish(small_archive("examples", "0.1.0"), sign=[keys["ci"]])
    old = writer.update_metadata([keys["alice"]], now=PAST)
    assert (old.snapshot_version, old.timestamp_version, old.snapshot_created) == (1, 1, True)
    old_timestamp = writer.store.read(TIMESTAMP_PATH)
    new = writer.publish(small_archive("examples", "0.2.0"), sign=[keys["ci"]], registry_keys=[keys["alice"]]).metadata
    assert new is not None and (new.snapshot_version, new.timestamp_version, new.versions) == (2, 2, 2)
    policy = meta_policy(tmp_path / "p.toml", keys)

    # An honest registry: latest and an exact version resolve, and the cache remembers what it verified.
    seen = store.registry(tmp_path / "seen")
    assert seen.pull("examples", options=OpenOptions(trust=policy)).record.version == "0.2.0"
    assert seen.pull("examples@0.1.0", options=OpenOptions(trust=policy)).record.version == "0.1.0"
    assert seen_versions(seen) == (2, 2)
    arc = karchive.open("examples@latest", registry=seen, trust=policy)
    assert arc.version == "0.2.0"
    arc.close()

    # Rollback: the bucket serves the old timestamp (and so the old snapshot, where latest is 0.1.0).
    current_timestamp = writer.store.read(TIMESTAMP_PATH)
    writer.store.replace(TIMESTAMP_PATH, old_timestamp)
    e = refused(seen, "examples", policy, reasons.METADATA_ROLLBACK)
    assert (e.role, e.version, e.seen) == ("timestamp", 1, 2)
    e = refused(store.registry(tmp_path / "fresh1"), "examples", policy, reasons.METADATA_EXPIRED)
    assert e.role == "timestamp" and e.expires
    writer.store.replace(TIMESTAMP_PATH, current_timestamp)

    # Freeze: nobody re-signed the timestamp (one issued in the past, now expired); refresh repairs it.
    writer.update_metadata([keys["alice"]], snapshot=False, now=PAST)
    refused(store.registry(tmp_path / "fresh2"), "examples@0.1.0", policy, reasons.METADATA_EXPIRED)
    refresh = writer.update_metadata([keys["alice"]], snapshot=False)
    assert (refresh.snapshot_created, refresh.snapshot_version, refresh.timestamp_version) == (False, 2, 4)
    assert (
        store.registry(tmp_path / "fresh3").pull("examples", options=OpenOptions(trust=policy)).record.version
        == "0.2.0"
    )

    # A version the registry serves but the snapshot lacks (published without the metadata key) is
    # refused, and latest stays the snapshot's.
    writer.publish(small_archive("examples", "0.3.0"), sign=[keys["ci"]])
    assert Registry(store.url, store.options, cache=tmp_path / "plain").resolve("examples").version == "0.3.0"
    client = store.registry(tmp_path / "fresh4")
    refused(client, "examples@0.3.0", policy, reasons.VERSION_NOT_IN_SNAPSHOT)
    assert client.pull("examples", options=OpenOptions(trust=policy)).record.version == "0.2.0"

    # A digest swapped: 0.1.0's record (and blob) rewritten to other bytes, the snapshot unchanged.
    record_010 = writer.store.read(version_record_path("examples", "0.1.0"))
    replace_archive(writer, "examples", "0.1.0", small_archive("examples", "0.1.0", block=256))
    with nothing_loaded(monkeypatch):
        with pytest.raises(RegistryMetadataError) as err:
            karchive.open("examples@0.1.0", registry=store.registry(tmp_path / "fresh5"), trust=policy)
    assert err.value.reason == reasons.METADATA_MISMATCH and err.value.archive == "examples@0.1.0"
    writer.store.replace(version_record_path("examples", "0.1.0"), record_010)

    # Withheld: the snapshot says 0.2.0, the registry serves only 0.1.0's record.
    hide_version(writer, "examples", "0.2.0")
    e = refused(store.registry(tmp_path / "fresh6"), "examples", policy, reasons.VERSION_WITHHELD)
    assert e.archive == "examples@0.2.0"
    assert (
        store.registry(tmp_path / "fresh7").pull("examples@0.1.0", options=OpenOptions(trust=policy)).record.version
        == "0.1.0"
    )
    # ... and the metadata key will not sign a snapshot without it either.
    with pytest.raises(RegistryError, match="record is gone"):
        writer.update_metadata([keys["alice"]])


def test_signatures_on_the_metadata_are_checked_like_archive_signatures(
    store, keys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = store.registry(tmp_path / "w")
    writer.publish(small_archive("examples", "0.1.0"), sign=[keys["ci"]], registry_keys=[keys["alice"]])
    client = store.registry(tmp_path / "c")

    # Signed by a key the policy does not trust for metadata (bob is the registry key it names).
    e = refused(client, "examples", meta_policy(tmp_path / "bob.toml", keys, meta=("bob",)), reasons.METADATA_SIGNATURE)
    assert e.role == "timestamp" and [r["reason"] for r in e.rejected] == [reasons.KEY_NOT_ALLOWED]
    e = refused(
        client,
        "examples",
        meta_policy(tmp_path / "bob-only.toml", keys, meta=("bob",), extra=("bob",)),
        reasons.METADATA_SIGNATURE,
    )
    assert [r["reason"] for r in e.rejected] == [reasons.UNKNOWN_KEY]
    # A revoked metadata key counts for nothing.
    text = (
        meta_policy(tmp_path / "rev.toml", keys)
        .read_text()
        .replace("version = 1\n", f'version = 1\nrevoked = ["{keys["alice"].key_id}"]\n')
    )
    (tmp_path / "rev.toml").write_text(text)
    e = refused(client, "examples", tmp_path / "rev.toml", reasons.METADATA_SIGNATURE)
    assert [r["reason"] for r in e.rejected] == [reasons.REVOKED_KEY]

    # Threshold 2 with one signature is refused; both keys signing meets it.
    two = meta_policy(tmp_path / "two.toml", keys, meta=("alice", "bob"), threshold=2)
    e = refused(client, "examples", two, reasons.METADATA_SIGNATURE)
    assert "1 valid signature(s)" in str(e) and "2 needed" in str(e)
    writer.update_metadata([keys["alice"], keys["bob"]])
    assert store.registry(tmp_path / "c2").pull("examples", options=OpenOptions(trust=two)).record.version == "0.1.0"

    # A separate (online) timestamp key: the snapshot by alice, the timestamp by carol.
    split = meta_policy(tmp_path / "split.toml", keys, extra=("alice", "bob", "carol"), timestamp=("carol",))
    refused(store.registry(tmp_path / "c3"), "examples", split, reasons.METADATA_SIGNATURE)
    writer.update_metadata([keys["alice"]], timestamp_keys=[keys["carol"]])
    assert store.registry(tmp_path / "c4").pull("examples", options=OpenOptions(trust=split)).record.version == "0.1.0"

    # Forged snapshot: the signed bytes altered (a version added to it) — the timestamp's digest no longer
    # matches (mix-and-match); and the forged snapshot re-pointed by a forged timestamp fails its signature.
    ts_bytes = writer.store.read(TIMESTAMP_PATH)
    from karchive.trust.dsse import Envelope

    ts = Timestamp.parse(Envelope.parse(ts_bytes).payload, "ts")
    snap_env = Envelope.parse(writer.store.read(snapshot_path(ts.snapshot_version)))
    doc = json.loads(snap_env.payload)
    doc["names"]["examples"]["9.9.9"] = doc["names"]["examples"]["0.1.0"]
    forged = Envelope(snap_env.payload_type, json.dumps(doc).encode(), snap_env.signatures).to_bytes()
    writer.store.replace(snapshot_path(ts.snapshot_version), forged)
    refused(store.registry(tmp_path / "c5"), "examples", split, reasons.METADATA_MISMATCH)
    ts_doc = json.loads(Envelope.parse(ts_bytes).payload)
    ts_doc["snapshot"].update(sha256=hashlib.sha256(forged).hexdigest(), size=len(forged))
    ts_env = Envelope.parse(ts_bytes)
    writer.store.replace(
        TIMESTAMP_PATH, Envelope(ts_env.payload_type, json.dumps(ts_doc).encode(), ts_env.signatures).to_bytes()
    )
    with nothing_loaded(monkeypatch, no_member_reads=True):
        with pytest.raises(RegistryMetadataError) as err:
            karchive.open("examples", registry=store.registry(tmp_path / "c6"), trust=split, fetch="lazy")
    assert err.value.reason == reasons.METADATA_SIGNATURE and [r["reason"] for r in err.value.rejected] == [
        reasons.BAD_SIGNATURE
    ]

    # No metadata at all, under a policy that requires it.
    bare = make_store("local", tmp_path / "bare")
    Registry(bare.url, cache=tmp_path / "bw").publish(small_archive("examples", "0.1.0"), sign=[keys["ci"]])
    refused(
        bare.registry(tmp_path / "c7"),
        "examples@0.1.0",
        meta_policy(tmp_path / "p.toml", keys),
        reasons.METADATA_MISSING,
    )


_PUBLISH = """
import sys
from karchive.registry import Registry
from karchive.trust.keys import load_private_key
url, pem, cache, archive = sys.argv[1:5]
key = load_private_key(pem)
reg = Registry(url, cache=cache)
reg.require_registry()
print("ready", flush=True)
sys.stdin.readline()
out = reg.publish(archive, registry_keys=[key])
print(out.record.version, out.metadata.snapshot_version, out.metadata.attempts, out.metadata.timestamp_snapshot)
"""


def test_concurrent_publishers_each_get_a_snapshot_and_the_last_lists_all(store, keys, tmp_path: Path) -> None:
    """Three processes publish three versions at the same moment, each issuing a snapshot: the
    exclusive create gives each its own number (losers take the next one), and the newest snapshot,
    which the timestamp names, lists every version."""
    from karchive.trust.keys import save_keypair

    writer = store.registry(tmp_path / "w")
    writer.publish(small_archive("examples", "0.1.0"), registry_keys=[keys["alice"]])
    save_keypair(keys["alice"], tmp_path / "alice.key", tmp_path / "alice.pub")
    env = s3_server().env() if store.kind == "s3" else gcs_server().env() if store.kind == "gcs" else {}
    versions = ("1.0.0", "1.1.0", "1.2.0")
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                _PUBLISH,
                store.url,
                str(tmp_path / "alice.key"),
                str(tmp_path / f"cache-{v}"),
                str(small_archive("examples", v)),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=subprocess_env(**env),
            cwd=str(ROOT),
        )
        for v in versions
    ]
    outs = [o.split() for o in release_together(procs)]
    assert sorted(int(o[1]) for o in outs) == [2, 3, 4], outs  # one number each: none lost, none shared
    assert all(int(o[3]) >= int(o[1]) for o in outs)
    policy = meta_policy(tmp_path / "p.toml", keys)
    client = store.registry(tmp_path / "c")
    loaded = TrustPolicy.load(policy)
    assert client.record_for("examples", policy=loaded).version == "1.2.0"  # (the archives are unsigned)
    assert seen_versions(client)[0] == 4
    from karchive.registry.metadata_store import load_trusted

    meta = load_trusted(client, loaded)
    assert sorted(meta.snapshot.versions("examples")) == ["0.1.0", *versions]


def test_policy_registry_section_is_typed_strictly(keys, tmp_path: Path) -> None:
    base = policy_text(keys, signers=("ci",), extra_keys=("alice", "bob"))
    good = TrustPolicy.from_bytes(
        (
            base + '[registry]\nrequire_signed_metadata = true\nkeys = ["alice", "bob"]\n'
            'threshold = 2\ntimestamp_keys = ["bob"]\n'
        ).encode()
    )
    assert good.registry is not None and good.registry.require_signed_metadata
    assert (good.registry.snapshot.keys, good.registry.snapshot.threshold) == (("alice", "bob"), 2)
    assert (good.registry.timestamp.keys, good.registry.timestamp.threshold) == (("bob",), 1)
    assert TrustPolicy.from_bytes(base.encode()).registry is None
    for body, says in [
        ('require_signed_metadata = "yes"\nkeys = ["alice"]\n', "true or false"),
        ('require_signed_metadata = 1\nkeys = ["alice"]\n', "true or false"),
        ("require_signed_metadata = true\n", "non-empty list"),
        ('require_signed_metadata = true\nkeys = ["mallory"]\n', "unknown key name"),
        ('require_signed_metadata = true\nkeys = ["alice"]\nthreshold = 2\n', "more distinct keys"),
        ('require_signed_metadata = true\nkeys = ["alice"]\nthreshold = 0\n', ">= 1"),
        ('require_signed_metadata = true\nkeys = ["alice"]\nthreshold = true\n', ">= 1"),
        ('require_signed_metadata = true\nkeys = ["alice"]\nthreshold = 1.0\n', ">= 1"),
        ('require_signed_metadata = true\nkeys = ["alice"]\nexpires = "1d"\n', "unknown field"),
    ]:
        with pytest.raises(TrustPolicyError, match=says):
            TrustPolicy.from_bytes((base + "[registry]\n" + body).encode())
    with pytest.raises(TrustPolicyError, match="must be a table"):
        TrustPolicy.from_bytes((base.replace("version = 1\n", 'version = 1\nregistry = "yes"\n')).encode())


def _snapshot(**changes) -> bytes:
    doc = {
        "_type": "karchive-registry-snapshot",
        "spec_version": 1,
        "version": 3,
        "issued": "2026-01-01T00:00:00Z",
        "expires": "2026-02-01T00:00:00Z",
        "names": {"examples": {"0.1.0": {"sha256": "a" * 64, "size": 10, "index_sha256": "b" * 64}}},
    }
    doc.update(changes)
    return json.dumps(doc).encode()


@pytest.mark.parametrize(
    "payload, says",
    [
        (_snapshot(version=True), "'version' must be an integer"),
        (_snapshot(version=1.0), "'version' must be an integer"),
        (_snapshot(version=0), "'version' must be an integer"),
        (_snapshot(version=2**60), "'version' must be an integer"),
        (_snapshot(spec_version=2), "newer karchive"),
        (_snapshot(_type="karchive-registry-timestamp"), "'_type'"),
        (_snapshot(expires="2025-01-01T00:00:00Z"), "later than 'issued'"),
        (_snapshot(expires="2026-02-01T00:00:00+00:00"), "UTC time"),
        (_snapshot(expires="2026-02-31T00:00:00Z"), "not a real time"),
        (_snapshot(extra=1), "unknown field"),
        (_snapshot(names={"../up": {}}), "bad archive name"),
        (
            _snapshot(names={"examples": {"latest": {"sha256": "a" * 64, "size": 1, "index_sha256": "b" * 64}}}),
            "reserved",
        ),
        (_snapshot(names={"examples": {"0.1.0": {"sha256": "A" * 64, "size": 1, "index_sha256": "b" * 64}}}), "hex"),
        (_snapshot(names={"examples": {"0.1.0": {"sha256": "a" * 64, "size": -1, "index_sha256": "b" * 64}}}), "size"),
        (_snapshot(names={"examples": []}), "not an object"),
        (_snapshot().replace(b'"version": 3', b'"version": 3, "version": 4'), "duplicate JSON key"),
        (_snapshot().replace(b'"size": 10', b'"size": NaN'), "NaN"),
        (b"[" * 5000 + b"]" * 5000, "nested deeper than"),
        (b"\xff{}", "ASCII"),
    ],
)
def test_a_hostile_snapshot_is_a_named_error(payload: bytes, says: str) -> None:
    with pytest.raises(RegistryMetadataError, match=says) as e:
        Snapshot.parse(payload, "snap")
    assert e.value.reason == reasons.METADATA_MALFORMED and e.value.role == "snapshot"


def test_a_hostile_timestamp_is_a_named_error() -> None:
    good = {
        "_type": "karchive-registry-timestamp",
        "spec_version": 1,
        "version": 2,
        "issued": "2026-01-01T00:00:00Z",
        "expires": "2026-01-02T00:00:00Z",
        "snapshot": {"version": 1, "sha256": "c" * 64, "size": 5},
    }
    assert Timestamp.parse(json.dumps(good).encode(), "ts").snapshot_version == 1
    for bad in (
        {**good, "snapshot": {"version": 1, "sha256": "c" * 64}},
        {**good, "version": "2"},
        {**good, "snapshot": {"version": 1, "sha256": "c" * 64, "size": 5, "url": "x"}},
        {**good, "snapshot": [1]},
    ):
        with pytest.raises(RegistryMetadataError) as e:
            Timestamp.parse(json.dumps(bad).encode(), "ts")
        assert e.value.reason == reasons.METADATA_MALFORMED
    with pytest.raises(RegistryMetadataError, match="JSON values"):  # bounded before it is parsed
        Timestamp.parse(json.dumps({**good, "pad": list(range(100))}).encode(), "ts")


def test_oversized_metadata_is_refused_before_it_is_read(keys, tmp_path: Path) -> None:
    reg = Registry(tmp_path / "registry", cache=tmp_path / "w")
    reg.publish(small_archive("examples", "0.1.0"), sign=[keys["ci"]], registry_keys=[keys["alice"]])
    reg.store.replace(TIMESTAMP_PATH, b" " * (64 * 1024 + 1))
    e = refused(
        Registry(tmp_path / "registry", cache=tmp_path / "c"),
        "examples",
        meta_policy(tmp_path / "p.toml", keys),
        reasons.METADATA_MALFORMED,
    )
    assert "at most" in str(e)


def test_writer_refuses_to_sign_a_rewritten_record(keys, tmp_path: Path) -> None:
    reg = Registry(tmp_path / "registry", cache=tmp_path / "w")
    reg.publish(small_archive("examples", "0.1.0"), registry_keys=[keys["alice"]])
    replace_archive(reg, "examples", "0.1.0", small_archive("examples", "0.1.0", block=256))
    with pytest.raises(ConflictError, match="was rewritten"):
        reg.update_metadata([keys["alice"]])
    # A different key (a rotation) vouches for nothing the old key signed: it signs what it sees.
    assert reg.update_metadata([keys["bob"]]).snapshot_version == 2


def test_policy_without_the_requirement_ignores_metadata_and_lockfiles_bypass_it(keys, tmp_path: Path) -> None:
    reg = Registry(tmp_path / "registry", cache=tmp_path / "w")
    reg.publish(small_archive("examples", "0.1.0"), sign=[keys["ci"]], registry_keys=[keys["alice"]])
    reg.publish(small_archive("examples", "0.2.0"), sign=[keys["ci"]])  # not in the snapshot
    relaxed = meta_policy(tmp_path / "p.toml", keys)
    relaxed.write_text(relaxed.read_text().replace("require_signed_metadata = true", "require_signed_metadata = false"))
    assert (
        Registry(tmp_path / "registry", cache=tmp_path / "c1")
        .pull("examples", options=OpenOptions(trust=relaxed))
        .record.version
        == "0.2.0"
    )
    strict = meta_policy(tmp_path / "s.toml", keys)
    lock, _ = Registry(tmp_path / "registry", cache=tmp_path / "c2").lock(["examples@0.1.0"], OpenOptions(trust=strict))
    lock.write(tmp_path / "karchive.lock")
    # A lockfile pins the chosen bytes; it is honoured without the metadata (SIGNING.md §11.5).
    reg.store.replace(TIMESTAMP_PATH, b"{}")
    pulled = Registry(tmp_path / "registry", cache=tmp_path / "c3").pull(
        "examples", options=OpenOptions(lockfile=tmp_path / "karchive.lock", trust=strict)
    )
    assert pulled.record.version == "0.1.0"


# -- the commands -----------------------------------------------------------------------------------------
def test_cli_publish_refresh_show_pull(keys, tmp_path: Path) -> None:
    from karchive.trust.keys import save_keypair

    for n in ("ci", "alice"):
        save_keypair(keys[n], tmp_path / f"{n}.key", tmp_path / f"{n}.pub")
    reg = ["--registry", str(tmp_path / "registry")]
    policy = str(meta_policy(tmp_path / "p.toml", keys))
    done = run_cli(
        "publish",
        str(small_archive("examples", "0.1.0")),
        *reg,
        "--sign",
        str(tmp_path / "ci.key"),
        "--registry-key",
        str(tmp_path / "alice.key"),
        "--create-registry",
    )
    assert done.returncode == 0, done.stderr
    assert "registry metadata: snapshot 1 issued (1 versions of 1 names" in done.stdout and "timestamp 1" in done.stdout
    done = run_cli(
        "publish",
        str(small_archive("examples", "0.2.0")),
        *reg,
        "--sign",
        str(tmp_path / "ci.key"),
        "--json",
        env={"KARCHIVE_REGISTRY_KEY": str(tmp_path / "alice.key")},
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["metadata"]["snapshot"] == {
        "version": 2,
        "created": True,
        "expires": json.loads(done.stdout)["metadata"]["snapshot"]["expires"],
    }
    done = run_cli("registry-meta", "refresh", *reg, "--key", str(tmp_path / "alice.key"), "--expires", "2h", "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["timestamp"]["version"] == 3 and out["snapshot"] == {**out["snapshot"], "version": 2, "created": False}
    expires = datetime.datetime.strptime(out["timestamp"]["expires"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    assert datetime.timedelta(hours=1) < expires - datetime.datetime.now(UTC) <= datetime.timedelta(hours=2)
    done = run_cli("registry-meta", "show", *reg, "--trust", policy, "--cache-dir", str(tmp_path / "c"))
    assert done.returncode == 0, done.stderr
    assert f"verified under {policy}" in done.stdout and "examples: 0.1.0, 0.2.0" in done.stdout
    assert "signed by: timestamp alice; snapshot alice" in done.stdout
    done = run_cli("registry-meta", "show", *reg, "--json")
    assert json.loads(done.stdout)["verified"] is False
    done = run_cli("pull", "examples", *reg, "--cache-dir", str(tmp_path / "c"), "--trust", policy)
    assert done.returncode == 0 and "examples@0.2.0" in done.stdout, done.stderr
    # sign NAME@VERSION --registry-key re-issues the snapshot as well.
    done = run_cli(
        "sign",
        "examples@0.1.0",
        *reg,
        "--key",
        str(tmp_path / "ci.key"),
        "--registry-key",
        str(tmp_path / "alice.key"),
        "--cache-dir",
        str(tmp_path / "s"),
    )
    assert done.returncode == 0 and "snapshot 3 issued" in done.stdout, done.stderr
    # A frozen registry, as the shell user sees it: one line naming the reason, exit status 2.
    Registry(tmp_path / "registry", cache=tmp_path / "w").update_metadata([keys["alice"]], snapshot=False, now=PAST)
    done = run_cli("pull", "examples", *reg, "--cache-dir", str(tmp_path / "c"), "--trust", policy)
    assert done.returncode == 2 and "expired" in done.stderr and "Traceback" not in done.stderr
    done = run_cli("registry-meta", "refresh", *reg)
    assert done.returncode == 2 and "needs --key" in done.stderr
    done = run_cli("registry-meta", "refresh", *reg, "--key", str(tmp_path / "alice.key"), "--expires", "0s")
    assert done.returncode == 2 and "positive duration" in done.stderr


def test_refresh_on_a_registry_without_a_snapshot_says_how_to_start(keys, tmp_path: Path) -> None:
    reg = Registry(tmp_path / "registry", cache=tmp_path / "w")
    reg.publish(small_archive("examples", "0.1.0"))
    with pytest.raises(KarchiveError, match="--snapshot"):
        reg.update_metadata([keys["alice"]], snapshot=False)
    assert reg.update_metadata([keys["alice"]]).snapshot_version == 1


def test_an_http_registry_serves_the_metadata_without_listing(keys, tmp_path: Path) -> None:
    from registry_servers import StaticHTTPServer

    root = tmp_path / "served"
    writer = Registry(root / "registry", cache=tmp_path / "w")
    writer.publish(small_archive("examples", "0.1.0"), sign=[keys["ci"]], registry_keys=[keys["alice"]])
    writer.publish(small_archive("examples", "0.2.0"), sign=[keys["ci"]])  # not in the snapshot
    http = StaticHTTPServer(root)
    try:
        policy = meta_policy(tmp_path / "p.toml", keys)
        reg = Registry(f"{http.url}/registry", cache=tmp_path / "c")
        assert reg.resolve("examples").version == "0.2.0"  # the name index, without the metadata
        assert (
            reg.pull("examples", options=OpenOptions(trust=policy)).record.version == "0.1.0"
        )  # the snapshot's latest
        refused(reg, "examples@0.2.0", policy, reasons.VERSION_NOT_IN_SNAPSHOT)
        assert any(r["path"].endswith("/metadata/snapshots/1.json") for r in http.log)
        (root / "registry" / TIMESTAMP_PATH).unlink()
        refused(
            Registry(f"{http.url}/registry", cache=tmp_path / "c2"), "examples@0.1.0", policy, reasons.METADATA_MISSING
        )
    finally:
        http.stop()


def test_a_timestamp_signed_as_a_snapshot_is_refused(keys, tmp_path: Path) -> None:
    """PAE binds the payload type: the snapshot key's signature over a timestamp body presented with the
    snapshot's payload type does not make it a timestamp."""
    from karchive.trust.metadata import SNAPSHOT_TYPE, TIMESTAMP_TYPE, sign_payload

    reg = Registry(tmp_path / "registry", cache=tmp_path / "w")
    reg.publish(small_archive("examples", "0.1.0"), sign=[keys["ci"]], registry_keys=[keys["alice"]])
    from karchive.trust.dsse import Envelope

    ts = Envelope.parse(reg.store.read(TIMESTAMP_PATH))
    assert ts.payload_type == TIMESTAMP_TYPE
    reg.store.replace(TIMESTAMP_PATH, sign_payload(SNAPSHOT_TYPE, ts.payload, [keys["alice"]]).to_bytes())
    e = refused(
        Registry(tmp_path / "registry", cache=tmp_path / "c"),
        "examples",
        meta_policy(tmp_path / "p.toml", keys),
        reasons.METADATA_SIGNATURE,
    )
    assert [r["reason"] for r in e.rejected] == [reasons.WRONG_PAYLOAD_TYPE]


def test_an_expired_snapshot_under_a_fresh_timestamp_is_refused(keys, tmp_path: Path) -> None:
    """Re-signing only the timestamp cannot keep a snapshot alive past its own expiry."""
    reg = Registry(tmp_path / "registry", cache=tmp_path / "w")
    reg.publish(small_archive("examples", "0.1.0"), sign=[keys["ci"]])
    reg.update_metadata([keys["alice"]], now=PAST, snapshot_expires=datetime.timedelta(days=2))
    fresh = reg.update_metadata([keys["alice"]], snapshot=False)
    assert not fresh.snapshot_created and fresh.snapshot_expires < fresh.timestamp_expires
    e = refused(
        Registry(tmp_path / "registry", cache=tmp_path / "c"),
        "examples",
        meta_policy(tmp_path / "p.toml", keys),
        reasons.METADATA_EXPIRED,
    )
    assert (e.role, e.version) == ("snapshot", 1) and "--snapshot" in str(e)
    assert reg.update_metadata([keys["alice"]]).snapshot_version == 2
    assert (
        Registry(tmp_path / "registry", cache=tmp_path / "c")
        .pull("examples", options=OpenOptions(trust=meta_policy(tmp_path / "p.toml", keys)))
        .record.version
        == "0.1.0"
    )
