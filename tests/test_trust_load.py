"""``karchive.open(PATH_OR_URL, trust=POLICY)`` and ``$KARCHIVE_TRUST_POLICY``: the sidecar beside a
local file or a URL decides, before a reader exists (spec/SIGNING.md §6.1). Real keys, real archives,
a real HTTP server and the S3 (moto) server."""

from __future__ import annotations

import datetime
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("cryptography")

from registry_servers import ROOT, StaticHTTPServer, s3_server, subprocess_env
from registry_support import isolated, small_archive  # noqa: F401 - fixture
from trust_support import UTC, binary_paths, load_policy, make_keys, nothing_loaded, write_policy

import karchive
from karchive.errors import IntegrityError, TrustError, UntrustedArchiveError
from karchive.format.check import index_sha256_from_footer
from karchive.resolve import open as open_ref
from karchive.trust import reasons
from karchive.trust.sidecar import sidecar_path, sidecar_url
from karchive.trust.sign import sign_archive
from karchive.trust.verify import verify_archive_signatures

pytestmark = pytest.mark.usefixtures("isolated")


@pytest.fixture(scope="module")
def keys():
    return make_keys()


@pytest.fixture
def signed(keys, tmp_path: Path) -> Path:
    path = tmp_path / "examples-0.1.0.karc"
    path.write_bytes(small_archive("examples", "0.1.0").read_bytes())
    sign_archive(path, keys["ci"])
    return path


def test_a_signed_local_file_opens_and_reports_who_signed(signed: Path, keys, tmp_path: Path) -> None:
    policy = write_policy(tmp_path / "p.toml", keys)
    arc = karchive.open(signed, trust=policy)
    assert arc.name == "examples"
    arc.close()
    reader = open_ref(str(signed), trust=str(policy))
    result = reader.verdict.result  # verified now: a path has no receipt
    data = signed.read_bytes()
    import hashlib

    assert result.sha256 == hashlib.sha256(data).hexdigest()
    assert result.index_sha256 == index_sha256_from_footer(data[-72:])
    assert [s.key.name for s in result.signers] == ["ci"]
    reader.source.close()


def _flip_in_binary(path: Path) -> None:
    from karchive.format.open import open_location

    reader = open_location(path)
    member = reader.members[binary_paths(path)[0]]
    frame = reader.frames[member.frame]
    reader.source.close()
    data = bytearray(path.read_bytes())
    data[frame.offset + frame.length // 2] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "case",
    [
        "tampered-archive",
        "tampered-envelope",
        "swapped-envelope",
        "wrong-key",
        "revoked-key",
        "expired-rotation-window",
        "unsigned",
        "unsigned-allowed",
    ],
)
def test_each_local_refusal_happens_before_anything_is_read(
    case: str, signed: Path, keys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = datetime.datetime.now(UTC)
    policy_kw: dict = {}
    expected = {
        "tampered-archive": reasons.DIGEST_MISMATCH,
        "tampered-envelope": reasons.BAD_SIGNATURE,
        "swapped-envelope": reasons.SWAPPED_ENVELOPE,
        "wrong-key": reasons.UNKNOWN_KEY,
        "revoked-key": reasons.REVOKED_KEY,
        "expired-rotation-window": reasons.KEY_EXPIRED,
        "unsigned": reasons.UNSIGNED,
        "unsigned-allowed": None,
    }[case]
    side = Path(sidecar_path(signed))
    if case == "tampered-archive":
        _flip_in_binary(signed)  # the footer and index are unchanged: only the whole-file hash can tell
    elif case == "tampered-envelope":
        env = json.loads(side.read_text())
        env["payload"] = env["payload"][:-8] + ("AAAAAAA=" if not env["payload"].endswith("AAAAAAA=") else "BBBBBBB=")
        side.write_text(json.dumps(env))
    elif case == "swapped-envelope":
        other = tmp_path / "examples-0.2.0.karc"
        other.write_bytes(small_archive("examples", "0.2.0").read_bytes())
        sign_archive(other, keys["ci"])
        shutil.copyfile(sidecar_path(other), side)
    elif case == "wrong-key":
        sign_archive(signed, keys["stranger"], replace=True)
    elif case == "revoked-key":
        policy_kw = {"revoked": ("ci",)}
    elif case == "expired-rotation-window":
        sign_archive(signed, keys["old"], replace=True)
        policy_kw = {
            "signers": ("old", "new"),
            "windows": {
                "old": (None, now - datetime.timedelta(hours=1)),
                "new": (now - datetime.timedelta(days=9), None),
            },
        }
    elif case in ("unsigned", "unsigned-allowed"):
        side.unlink()
        policy_kw = {"threshold": 0} if case == "unsigned-allowed" else {}
    policy = write_policy(tmp_path / "p.toml", keys, **policy_kw)
    if expected is None:
        assert karchive.open(signed, trust=policy).version == "0.1.0"
        return
    with nothing_loaded(monkeypatch, no_member_reads=True):
        with pytest.raises(UntrustedArchiveError) as e:
            karchive.open(signed, trust=policy)
    assert e.value.reason == expected, str(e.value)
    assert reasons.MEANING[expected] in str(e.value)


def test_a_lockfile_never_applies_to_a_path_and_trust_false_means_no_policy(
    signed: Path, keys, tmp_path, monkeypatch
) -> None:
    policy = write_policy(tmp_path / "p.toml", keys, revoked=("ci",))
    monkeypatch.setenv("KARCHIVE_TRUST_POLICY", str(policy))
    with pytest.raises(UntrustedArchiveError):
        karchive.open(signed)
    arc = karchive.open(signed, trust=False)  # explicitly none: for tools that check signatures themselves
    assert arc.name == "examples"
    with pytest.raises(TypeError):
        karchive.open(signed, trust=42)


def test_the_environment_variable_protects_code_that_passes_nothing(signed: Path, keys, tmp_path: Path) -> None:
    """A server that does not change code: the variable alone makes every load checked, in a new process."""
    policy = write_policy(tmp_path / "p.toml", keys)
    code = textwrap.dedent(f"""
        import karchive, json
        from karchive.errors import UntrustedArchiveError
        out = {{}}
        out["signed"] = karchive.open({str(signed)!r}).name
        try:
            karchive.open({str(small_archive("examples", "0.2.0"))!r})
        except UntrustedArchiveError as exc:
            out["unsigned"] = exc.reason
        print(json.dumps(out))
    """)
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=str(ROOT),
        timeout=120,
        env=subprocess_env(KARCHIVE_TRUST_POLICY=str(policy)),
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"signed": "examples", "unsigned": "unsigned"}


def test_without_cryptography_a_policy_fails_closed(signed: Path, keys, tmp_path: Path) -> None:
    policy = write_policy(tmp_path / "p.toml", keys)
    code = textwrap.dedent(f"""
        import sys
        sys.modules["cryptography"] = None  # as if the trust extra were not installed
        import karchive
        from karchive.errors import TrustError
        assert karchive.open({str(signed)!r}, trust=False).name == "examples"  # no policy: no cryptography needed
        try:
            karchive.open({str(signed)!r}, trust={str(policy)!r})
        except TrustError as exc:
            print(exc.reason)
    """)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=str(ROOT), timeout=120, env=subprocess_env()
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == reasons.MISSING_DEPENDENCY


def test_urls_use_the_sidecar_beside_the_url(signed: Path, keys, tmp_path: Path, monkeypatch) -> None:
    """HTTP (read-only, ranged) and S3: the signature is bound through the index digest of the footer
    the reader opened from; nothing downloads the whole archive."""
    served = tmp_path / "served"
    served.mkdir()
    shutil.copyfile(signed, served / signed.name)
    shutil.copyfile(sidecar_path(signed), sidecar_path(served / signed.name))
    unsigned = served / "unsigned.karc"
    unsigned.write_bytes(small_archive("examples", "0.2.0").read_bytes())
    policy = load_policy(write_policy(tmp_path / "p.toml", keys))
    http = StaticHTTPServer(served)
    try:
        url = f"{http.url}/{signed.name}"
        assert sidecar_url(url + "?token=x") == url + ".sig.json?token=x"
        reader = open_ref(url, trust=policy)
        result = reader.verdict.result
        assert result.sha256 is None and result.index_sha256 == index_sha256_from_footer(signed.read_bytes()[-72:])
        assert reader.source.requests <= 2  # the tail only: opening never downloads the archive
        with nothing_loaded(monkeypatch, no_member_reads=True):
            with pytest.raises(UntrustedArchiveError) as e:
                karchive.open(f"{http.url}/unsigned.karc", trust=policy)
        assert e.value.reason == reasons.UNSIGNED
    finally:
        http.stop()
    s3 = s3_server()
    bucket = s3.new_bucket()
    import s3fs

    fs = s3fs.S3FileSystem(**s3.storage_options())
    fs.put_file(str(signed), f"{bucket}/a/{signed.name}")
    fs.put_file(sidecar_path(signed), f"{bucket}/a/{signed.name}.sig.json")
    arc = karchive.open(f"s3://{bucket}/a/{signed.name}", trust=policy, storage_options=s3.storage_options())
    assert arc.version == "0.1.0"
    fs.pipe_file(f"{bucket}/a/{signed.name}.sig.json", b"not json")
    with pytest.raises(TrustError) as e:
        karchive.open(f"s3://{bucket}/a/{signed.name}", trust=policy, storage_options=s3.storage_options())
    assert e.value.reason == reasons.MALFORMED_ENVELOPE


def test_verification_binds_to_the_index_digest_when_that_is_all_a_reader_knows(
    signed: Path, keys, tmp_path: Path
) -> None:
    from karchive.trust.sidecar import read_sidecar

    env = read_sidecar(sidecar_path(signed))
    policy = load_policy(write_policy(tmp_path / "p.toml", keys))
    index = index_sha256_from_footer(signed.read_bytes()[-72:])
    ok = verify_archive_signatures(
        sha256=None, index_sha256=index, name="examples", version="0.1.0", envelopes=[env], policy=policy
    )
    assert ok.index_sha256 == index and ok.sha256 is None
    other = index_sha256_from_footer(small_archive("examples", "0.1.0", block=256).read_bytes()[-72:])
    with pytest.raises(UntrustedArchiveError) as e:
        verify_archive_signatures(
            sha256=None, index_sha256=other, name="examples", version="0.1.0", envelopes=[env], policy=policy
        )
    assert e.value.reason == reasons.DIGEST_MISMATCH and "index digest" in str(e.value)
    with pytest.raises(TypeError, match="sha256 and/or index_sha256"):
        verify_archive_signatures(sha256=None, name="examples", version="0.1.0", envelopes=[env], policy=policy)


def test_a_file_changed_between_open_and_hash_is_refused(signed: Path, keys, tmp_path: Path, monkeypatch) -> None:
    """The sha256 and the reader's index come from one descriptor; bytes that change in between (here:
    the footer, as a file replaced in place would) are an integrity error, never a silent pass."""
    import karchive.trust.bind as bind

    real = bind.hash_source

    def swap_then_hash(source, index):
        data = bytearray(signed.read_bytes())
        data[-1] ^= 0xFF  # the footer's index digest changes under the open descriptor
        with open(signed, "r+b") as fh:
            fh.write(bytes(data))
        return real(source, index)

    monkeypatch.setattr(bind, "hash_source", swap_then_hash)
    policy = write_policy(tmp_path / "p.toml", keys)
    with pytest.raises(IntegrityError, match="changed while it was being opened"):
        karchive.open(signed, trust=policy)
    assert os.path.exists(signed)


def test_loads_without_a_policy_never_import_cryptography(tmp_path: Path) -> None:
    """Signing is opt-in: a consumer that sets no policy pays nothing for it, registry loads included."""
    from karchive.registry import Registry

    Registry(tmp_path / "registry", cache=tmp_path / "c").publish(small_archive("examples", "0.1.0"))
    code = textwrap.dedent(f"""
        import sys, json, karchive
        karchive.open({str(small_archive("examples", "0.1.0"))!r}).close()
        karchive.open("examples@0.1.0", registry={str(tmp_path / "registry")!r}, cache_dir={str(tmp_path / "c2")!r})
        print(json.dumps("cryptography" in sys.modules))
    """)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=str(ROOT), timeout=120, env=subprocess_env()
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) is False
