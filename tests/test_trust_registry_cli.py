"""The signing commands against a registry, as a shell user runs them (real child processes):
``publish --sign``, ``sign NAME@VERSION --registry``, ``pull --trust``, ``verify --trust`` (human and
``--json``), and ``reindex`` rebuilding the derived signature index."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("cryptography")

from registry_support import isolated, run_cli, small_archive  # noqa: F401 - fixture
from trust_support import make_keys, write_policy

from karchive.registry import Registry
from karchive.registry.store_layout import signature_index_path
from karchive.trust.keys import save_keypair

pytestmark = pytest.mark.usefixtures("isolated")


@pytest.fixture(scope="module")
def keys():
    return make_keys()


@pytest.fixture
def setup(keys, tmp_path: Path) -> dict:
    for n in ("ci", "alice"):
        save_keypair(keys[n], tmp_path / f"{n}.key", tmp_path / f"{n}.pub")
    archive = tmp_path / "examples-0.1.0.karc"
    archive.write_bytes(small_archive("examples", "0.1.0").read_bytes())
    return {
        "archive": archive,
        "registry": str(tmp_path / "registry"),
        "cache": str(tmp_path / "cache"),
        "policy": str(write_policy(tmp_path / "policy.toml", keys, signers=("ci", "alice"))),
        "two": str(write_policy(tmp_path / "two.toml", keys, signers=("ci", "alice"), threshold=2)),
        "ci": str(tmp_path / "ci.key"),
        "alice": str(tmp_path / "alice.key"),
    }


def test_publish_sign_pull_trust_and_verify(setup: dict, keys) -> None:
    reg = ["--registry", setup["registry"]]
    cache = ["--cache-dir", setup["cache"]]
    done = run_cli("publish", str(setup["archive"]), *reg, "--sign", setup["ci"], "--create-registry")
    assert done.returncode == 0, done.stderr
    assert f"signature by key {keys['ci'].key_id[:16]} (signed now): stored" in done.stdout
    done = run_cli("publish", str(setup["archive"]), *reg, "--sign", setup["ci"], "--json")
    out = json.loads(done.stdout)
    assert out["created"] is False and out["signatures"] == [
        {"key_id": keys["ci"].key_id, "created": False, "source": "key"}
    ]

    done = run_cli("pull", "examples@0.1.0", *reg, *cache, "--trust", setup["policy"])
    assert done.returncode == 0, done.stderr
    assert f"signed by ci ({keys['ci'].key_id[:16]}); verified now" in done.stdout
    done = run_cli("pull", "examples@0.1.0", *reg, *cache, "--trust", setup["policy"], "--json")
    trust = json.loads(done.stdout)["trust"]
    assert (
        trust["ok"] and trust["from_receipt"] and trust["signers"] == [{"key_id": keys["ci"].key_id, "key_name": "ci"}]
    )
    refused = run_cli("pull", "examples@0.1.0", *reg, *cache, "--trust", setup["two"])
    assert (
        refused.returncode == 2 and "fewer distinct trusted signers" in refused.stderr and "1 valid" in refused.stderr
    )

    done = run_cli("verify", "examples@0.1.0", *reg, *cache, "--trust", setup["policy"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "every digest matches" in done.stdout and "trust: OK" in done.stdout
    assert f"signed by ci (key {keys['ci'].key_id[:16]}): examples@0.1.0" in done.stdout  # who signed what
    done = run_cli("verify", "examples@0.1.0", *reg, *cache, "--trust", setup["two"], "--json")
    doc = json.loads(done.stdout)
    assert done.returncode == 1 and doc["ok"] is False and doc["trust"]["reason"] == "threshold-not-met"
    assert doc["problems"] == ["trust: threshold-not-met"] and "members" in doc  # the digests were checked too

    # One more signer for the published version, from another shell; then the two-key policy accepts it.
    done = run_cli("sign", "examples@0.1.0", "--key", setup["alice"], *reg, "--cache-dir", setup["cache"] + "-a")
    assert done.returncode == 0 and "signed examples@0.1.0" in done.stdout, done.stderr
    done = run_cli("verify", "examples@0.1.0", *reg, *cache, "--trust", setup["two"], "--json")
    doc = json.loads(done.stdout)
    assert doc["ok"] and sorted(s["key_name"] for s in doc["trust"]["signers"]) == ["alice", "ci"]
    assert all(s["statement"]["sha256"] == doc["trust"]["sha256"] for s in doc["trust"]["signers"])
    done = run_cli("sign", "examples@0.1.0", "--key", setup["alice"], *reg, "--replace")
    assert done.returncode == 2 and "never replaces a signature" in done.stderr


def test_verify_trust_of_a_local_file_and_the_environment_variable(setup: dict, keys) -> None:
    done = run_cli("sign", str(setup["archive"]), "--key", setup["ci"])
    assert done.returncode == 0, done.stderr
    done = run_cli("verify", str(setup["archive"]), "--trust", setup["policy"], "--json")
    doc = json.loads(done.stdout)
    assert doc["ok"] and doc["trust"]["signers"][0]["key_name"] == "ci"
    assert doc["trust"]["index_sha256"] == doc["trust"]["signers"][0]["statement"]["index_sha256"]
    # $KARCHIVE_TRUST_POLICY applies to verify as it does to every load.
    done = run_cli("verify", str(setup["archive"]), env={"KARCHIVE_TRUST_POLICY": setup["two"]})
    assert done.returncode == 1 and "trust: REFUSED" in done.stdout and "threshold-not-met" in done.stdout
    done = run_cli("inspect", str(setup["archive"]), env={"KARCHIVE_TRUST_POLICY": setup["two"]})
    assert done.returncode == 2 and "not trusted" in done.stderr


def test_reindex_rebuilds_signature_indexes(setup: dict, keys, tmp_path: Path) -> None:
    reg = Registry(setup["registry"], cache=tmp_path / "w")
    record = reg.publish(setup["archive"], sign=[keys["ci"], keys["alice"]]).record
    index = Path(setup["registry"]) / signature_index_path(record.sha256)
    index.unlink()
    done = run_cli("reindex", "--registry", setup["registry"])
    assert done.returncode == 0, done.stderr
    assert sorted(json.loads(index.read_text())["keyids"]) == sorted([keys["ci"].key_id, keys["alice"].key_id])
