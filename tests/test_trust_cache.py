"""What the cache remembers about trust, and what it must not trust: receipts bound to ctime (a byte
flipped in place with mtime put back), trust verdicts per policy (a stricter policy re-verifies),
the rollback ratchet for ``NAME@latest``, and signer pins in lockfiles."""

from __future__ import annotations

import datetime
import json
import os
import time
from pathlib import Path

import pytest

pytest.importorskip("cryptography")

from registry_support import isolated, run_cli, small_archive  # noqa: F401 - fixture
from trust_support import UTC, hide_version, make_keys, nothing_loaded, write_policy

import karchive
import karchive.registry.cache as cache_mod
import karchive.trust.verify as verify_mod
from karchive.errors import DowngradeError, PinnedSignerError, UntrustedArchiveError
from karchive.registry import Cache, Lockfile, OpenOptions, Registry
from karchive.trust import reasons

pytestmark = pytest.mark.usefixtures("isolated")


@pytest.fixture(scope="module")
def keys():
    return make_keys()


@pytest.fixture
def verifications(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Each signature verification run (by archive), to tell a fresh check from a receipt's verdict."""
    calls: list[str] = []
    real = verify_mod.verify_archive_signatures

    def counting(**kw):  # type: ignore[no-untyped-def]
        calls.append(f"{kw['name']}@{kw['version']}")
        return real(**kw)

    monkeypatch.setattr(verify_mod, "verify_archive_signatures", counting)
    return calls


def _flip_in_place_keeping_mtime(blob: Path) -> os.stat_result:
    """What a writer with access to the cache can do: change a byte of the read-only blob in place,
    then put its mtime back. Same inode, same size, same mtime; only ctime moves (the kernel sets it)."""
    before = blob.stat()
    time.sleep(0.05)  # past the file system's timestamp granularity (a kernel tick): see REGISTRY.md §5
    os.chmod(blob, 0o644)
    with open(blob, "r+b") as fh:
        fh.seek(before.st_size // 2)
        b = fh.read(1)
        fh.seek(before.st_size // 2)
        fh.write(bytes([b[0] ^ 0xFF]))
    os.chmod(blob, 0o444)
    os.utime(blob, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = blob.stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (before.st_ino, before.st_size, before.st_mtime_ns)
    assert after.st_ctime_ns != before.st_ctime_ns
    return after


def test_a_byte_flipped_in_the_cache_with_mtime_restored_is_not_served(tmp_path: Path) -> None:
    """Issue 13: this used to answer "from cache" with exit 0. The receipt now holds ctime, so the
    changed blob is verified again, fails, is removed, and the archive is downloaded again."""
    registry, cache = tmp_path / "registry", tmp_path / "cache"
    original = small_archive("examples", "0.1.0").read_bytes()
    record = Registry(registry, cache=tmp_path / "w").publish(small_archive("examples", "0.1.0")).record
    args = ["--registry", str(registry), "--cache-dir", str(cache)]
    first = run_cli("pull", "examples@0.1.0", *args)
    assert first.returncode == 0 and "(downloaded)" in first.stdout
    assert "(from cache)" in run_cli("pull", "examples@0.1.0", *args).stdout
    blob = Cache(cache).blob_path(record.sha256)
    receipt = json.loads((cache / "receipts" / f"{record.sha256}.json").read_bytes())
    assert receipt["file"]["ctime_ns"] == blob.stat().st_ctime_ns and receipt["index_sha256"] == record.index_sha256
    _flip_in_place_keeping_mtime(blob)
    again = run_cli("pull", "examples@0.1.0", *args, "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["downloaded"] is True  # not "from cache"
    assert blob.read_bytes() == original


def test_loading_never_trusts_a_blob_whose_receipt_does_not_match(tmp_path: Path, monkeypatch) -> None:
    reg = Registry(tmp_path / "registry", cache=tmp_path / "cache")
    record = reg.publish(small_archive("examples", "0.1.0")).record
    reg.pull("examples@0.1.0")
    blob = reg.cache.blob_path(record.sha256)
    _flip_in_place_keeping_mtime(blob)
    assert reg.cache.receipt(record.sha256) is None
    before = reg.cache.verifications
    arc = karchive.open("examples@0.1.0", registry=reg)  # re-verified, refused, downloaded again
    assert reg.cache.verifications == before + 2 and arc.reader.source.size == record.size
    assert blob.read_bytes() == small_archive("examples", "0.1.0").read_bytes()
    arc.close()
    # A receipt written before ctime was recorded does not match either: verified once more, then reused.
    receipt_path = tmp_path / "cache" / "receipts" / f"{record.sha256}.json"
    old = json.loads(receipt_path.read_bytes())
    del old["file"]["ctime_ns"]
    receipt_path.write_text(json.dumps(old))
    n = reg.cache.verifications
    reg.open("examples@0.1.0").source.close()
    reg.open("examples@0.1.0").source.close()
    assert reg.cache.verifications == n + 1


def test_a_reader_is_bound_to_what_its_receipt_verified(tmp_path: Path, monkeypatch) -> None:
    """The blob swapped after the receipt check and before the reader opened it: the reader's own
    footer names another index than the receipt, so it is refused, not used."""
    reg = Registry(tmp_path / "registry", cache=tmp_path / "cache")
    record = reg.publish(small_archive("examples", "0.1.0")).record
    reg.pull("examples@0.1.0")
    blob = reg.cache.blob_path(record.sha256)
    real_lookup = reg.cache.lookup

    def lookup_then_swap(*a, **k):  # type: ignore[no-untyped-def]
        path = real_lookup(*a, **k)
        os.chmod(blob, 0o644)
        blob.write_bytes(small_archive("examples", "0.1.0", block=256).read_bytes())
        return path

    monkeypatch.setattr(reg.cache, "lookup", lookup_then_swap)
    with nothing_loaded(monkeypatch):
        with pytest.raises(karchive.errors.IntegrityError, match="changed after it was verified"):
            karchive.open("examples@0.1.0", registry=reg)


def test_the_receipt_remembers_verdicts_per_policy_and_a_stricter_policy_re_verifies(
    keys, tmp_path: Path, verifications: list[str]
) -> None:
    reg = Registry(tmp_path / "registry", cache=tmp_path / "cache")
    record = reg.publish(small_archive("examples", "0.1.0"), sign=[keys["ci"]]).record
    lenient = write_policy(tmp_path / "lenient.toml", keys)
    reg.open("examples@0.1.0", trust=lenient).source.close()
    reg.open("examples@0.1.0", trust=lenient).source.close()
    assert verifications == ["examples@0.1.0"]  # once; then the receipt's verdict
    receipt = json.loads((tmp_path / "cache" / "receipts" / f"{record.sha256}.json").read_bytes())
    from karchive.trust.policy import TrustPolicy

    entry = receipt["trust"][TrustPolicy.load(lenient).sha256]
    assert entry["signers"] == [[keys["ci"].key_id, "ci"]] and entry["index_sha256"] == record.index_sha256
    stricter = write_policy(tmp_path / "strict.toml", keys, signers=("ci", "alice"), threshold=2)
    with pytest.raises(UntrustedArchiveError) as e:
        reg.open("examples@0.1.0", trust=stricter)
    assert e.value.reason == reasons.THRESHOLD_NOT_MET and len(verifications) == 2
    revoked = write_policy(tmp_path / "revoked.toml", keys, revoked=("ci",))  # the same file, edited: a new digest
    with pytest.raises(UntrustedArchiveError) as e:
        reg.open("examples@0.1.0", trust=revoked)
    assert e.value.reason == reasons.REVOKED_KEY
    reg.open("examples@0.1.0", trust=lenient).source.close()
    assert len(verifications) == 3  # the lenient verdict is still in the receipt


def test_a_verdict_runs_out_when_a_signer_key_window_closes(keys, tmp_path: Path, verifications, monkeypatch) -> None:
    now = datetime.datetime.now(UTC)
    reg = Registry(tmp_path / "registry", cache=tmp_path / "cache")
    record = reg.publish(small_archive("examples", "0.1.0"), sign=[keys["old"]]).record
    policy = write_policy(
        tmp_path / "p.toml", keys, signers=("old",), windows={"old": (None, now + datetime.timedelta(hours=1))}
    )
    reg.open("examples@0.1.0", trust=policy).source.close()
    reg.open("examples@0.1.0", trust=policy).source.close()
    assert len(verifications) == 1
    from karchive.trust.policy import TrustPolicy

    digest = TrustPolicy.load(policy).sha256
    assert reg.cache.trusted(record.sha256, digest) is not None
    assert reg.cache.trusted(record.sha256, digest, now=time.time() + 2 * 3600) is None

    class Later:
        @staticmethod
        def time() -> float:
            return time.time() + 2 * 3600

    monkeypatch.setattr(cache_mod, "time", Later)  # the cache's clock only: the verdict has run out
    reg.open("examples@0.1.0", trust=policy).source.close()
    assert len(verifications) == 2  # verified again (the verifier's own clock still accepts the key)


# --- rollback -------------------------------------------------------------------------------------------
def test_latest_may_not_go_back_below_a_verified_version(keys, tmp_path: Path) -> None:
    writer = Registry(tmp_path / "registry", cache=tmp_path / "w")
    for v in ("1.0.0", "2.0.0"):
        writer.publish(small_archive("examples", v), sign=[keys["ci"]])
    policy = write_policy(tmp_path / "p.toml", keys)
    reg = Registry(tmp_path / "registry", cache=tmp_path / "cache")
    assert karchive.open("examples", registry=reg, trust=policy).version == "2.0.0"
    assert reg.cache.newest_verified(reg.url, "examples") == {"final": "2.0.0", "any": "2.0.0"}

    hide_version(writer, "examples", "2.0.0")  # the bucket hides the newest release
    with pytest.raises(DowngradeError) as e:
        karchive.open("examples", registry=reg, trust=policy)
    assert (e.value.newest_seen, e.value.resolved, e.value.reason) == ("2.0.0", "1.0.0", reasons.DOWNGRADE)
    assert "--allow-downgrade" in str(e.value)
    with pytest.raises(DowngradeError):  # the mark applies to every load from this cache
        karchive.open("examples@latest", registry=reg)
    assert karchive.open("examples", registry=reg, trust=policy, allow_downgrade=True).version == "1.0.0"
    assert karchive.open("examples@1.0.0", registry=reg, trust=policy).version == "1.0.0"  # explicit: allowed
    assert reg.cache.newest_verified(reg.url, "examples")["final"] == "2.0.0"  # loading older never lowers it
    args = ["--registry", str(tmp_path / "registry"), "--cache-dir", str(tmp_path / "cache"), "--trust", str(policy)]
    refused = run_cli("pull", "examples", *args)
    assert refused.returncode == 2 and "already loaded and verified examples@2.0.0" in refused.stderr
    allowed = run_cli("pull", "examples", *args, "--allow-downgrade")
    assert allowed.returncode == 0 and "examples@1.0.0" in allowed.stdout


def test_only_verified_versions_raise_the_mark(keys, tmp_path: Path) -> None:
    """An unsigned 99.0.0 must not fast-forward the mark (it would lock clients out of real releases);
    a load without a policy verifies no signature, so it raises nothing either; a pre-release raises
    only the pre-release mark, so a final ``latest`` below it is not a downgrade."""
    writer = Registry(tmp_path / "registry", cache=tmp_path / "w")
    writer.publish(small_archive("examples", "2.0.0"), sign=[keys["ci"]])
    writer.publish(small_archive("examples", "3.0.0rc1"), sign=[keys["ci"]])
    writer.publish(small_archive("examples", "99.0.0"))  # the attacker's, unsigned
    policy = write_policy(tmp_path / "p.toml", keys)
    reg = Registry(tmp_path / "registry", cache=tmp_path / "cache")
    with pytest.raises(UntrustedArchiveError) as e:
        karchive.open("examples", registry=reg, trust=policy)
    assert e.value.reason == reasons.UNSIGNED
    assert reg.cache.newest_verified(reg.url, "examples") == {"final": None, "any": None}
    karchive.open("examples@99.0.0", registry=reg)  # no policy: nothing verified, nothing raised
    assert reg.cache.newest_verified(reg.url, "examples") == {"final": None, "any": None}
    karchive.open("examples@3.0.0rc1", registry=reg, trust=policy)
    assert reg.cache.newest_verified(reg.url, "examples") == {"final": None, "any": "3.0.0rc1"}
    hide_version(writer, "examples", "99.0.0")
    assert karchive.open("examples", registry=reg, trust=policy).version == "2.0.0"  # final latest: fine
    assert reg.cache.newest_verified(reg.url, "examples") == {"final": "2.0.0", "any": "3.0.0rc1"}


# --- lockfile signer pins -----------------------------------------------------------------------------------
def test_lock_pins_signers_and_a_locked_load_checks_digests_and_signers(keys, tmp_path: Path) -> None:
    now = datetime.datetime.now(UTC)
    writer = Registry(tmp_path / "registry", cache=tmp_path / "w")
    writer.publish(small_archive("examples", "0.1.0"), sign=[keys["old"]])
    policy = write_policy(tmp_path / "p.toml", keys, signers=("old", "new"))
    reg = Registry(tmp_path / "registry", cache=tmp_path / "cache")
    lock, verdicts = reg.lock(["examples@0.1.0"], OpenOptions(trust=policy))
    assert lock.pins["examples"].signers == (keys["old"].key_id,) and verdicts["examples"].signers[0][1] == "old"
    lock.write(tmp_path / "karchive.lock")
    doc = json.loads((tmp_path / "karchive.lock").read_text())
    assert doc["archives"]["examples"]["signers"] == [keys["old"].key_id]
    loaded = Lockfile.load(tmp_path / "karchive.lock")
    assert loaded.pins["examples"].signers == (keys["old"].key_id,)

    fresh = Registry(tmp_path / "registry", cache=tmp_path / "c2")
    assert (
        karchive.open("examples", registry=fresh, lockfile=tmp_path / "karchive.lock", trust=policy).version == "0.1.0"
    )
    with pytest.raises(PinnedSignerError) as e:  # pinned signers need a policy to be checked
        karchive.open("examples", registry=fresh, lockfile=tmp_path / "karchive.lock")
    assert e.value.reason == reasons.POLICY_REQUIRED

    # The key is rotated: "new" signs too, "old" leaves the policy's window. The policy still accepts
    # the archive (new's signature counts), but the lockfile pinned "old": refused until re-locked.
    fresh.sign("examples@0.1.0", keys["new"])
    rotated = write_policy(
        tmp_path / "rotated.toml",
        keys,
        signers=("old", "new"),
        windows={"old": (None, now - datetime.timedelta(minutes=1))},
    )
    assert karchive.open("examples@0.1.0", registry=fresh, trust=rotated).version == "0.1.0"
    with pytest.raises(PinnedSignerError) as e:
        karchive.open("examples", registry=fresh, lockfile=tmp_path / "karchive.lock", trust=rotated)
    assert e.value.reason == reasons.PINNED_SIGNER_MISSING and e.value.pinned == (keys["old"].key_id,)
    assert e.value.found == (keys["new"].key_id,) and "karchive lock" in str(e.value)
    relocked, _ = fresh.lock(["examples@0.1.0"], OpenOptions(trust=rotated))
    assert relocked.pins["examples"].signers == (keys["new"].key_id,)

    # Lockfiles without signers read and load exactly as before.
    plain, _ = reg.lock(["examples@0.1.0"])
    assert "signers" not in json.loads(plain.to_json())["archives"]["examples"]
    assert karchive.open("examples", registry=fresh, lockfile=plain).version == "0.1.0"


def test_lock_cli_shows_the_pinned_signers(keys, tmp_path: Path) -> None:
    Registry(tmp_path / "registry", cache=tmp_path / "w").publish(
        small_archive("examples", "0.1.0"), sign=[keys["alice"]]
    )
    policy = write_policy(tmp_path / "p.toml", keys, signers=("alice",))
    out = tmp_path / "k.lock"
    args = ["--registry", str(tmp_path / "registry"), "--cache-dir", str(tmp_path / "cache"), "-o", str(out)]
    done = run_cli("lock", "examples@0.1.0", *args, "--trust", str(policy))
    assert done.returncode == 0, done.stderr
    assert f"signer alice (key {keys['alice'].key_id[:16]})" in done.stdout
    done = run_cli("lock", "examples@0.1.0", *args, "--trust", str(policy), "--json")
    assert json.loads(done.stdout)["archives"]["examples"]["signers"] == [keys["alice"].key_id]
    done = run_cli("lock", "examples@0.1.0", *args)
    assert "no signers pinned" in done.stdout and "signers" not in json.loads(out.read_text())["archives"]["examples"]
