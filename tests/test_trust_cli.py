"""`karchive keygen`, `karchive sign` and the `verify --trust` report, on real archive files."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("cryptography")

from support import ROOT

from karchive.cli.main import main
from karchive.cli.trust_cmds import print_trust, trust_lines, trust_report
from karchive.trust.dsse import Envelope
from karchive.trust.sidecar import sidecar_path


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def built(add_variants, tmp_path_factory) -> dict[str, Path]:
    from karchive.producer.build.pack import ArchiveBuilder
    from karchive.producer.compile.aot import toolchain_versions

    root = tmp_path_factory.mktemp("trust-cli")
    out = {}
    for label, name, version, variants in (
        ("a", "kernels", "1.0.0", add_variants),
        ("rebuilt", "kernels", "1.0.0", add_variants[:1]),
    ):
        b = ArchiveBuilder(name, version, produced_by=toolchain_versions(), level=3)
        for v in variants:
            b.add(v)
        b.write(root / f"{label}.karc")
        out[label] = root / f"{label}.karc"
    return out


@pytest.fixture
def archive(built, tmp_path) -> Path:
    """A fresh copy of kernels@1.0.0 per test (its sidecar is per test too)."""
    path = tmp_path / "kernels-1.0.0.karc"
    path.write_bytes(built["a"].read_bytes())
    return path


def keygen(capsys, prefix: Path, *extra: str) -> dict:
    code, out, err = run(capsys, "keygen", "-o", str(prefix), "--json", *extra)
    assert code == 0, err
    return json.loads(out)


def write_policy(path: Path, *keys: dict, rule: str = 'names = ["kernels*"]', threshold: int = 1) -> Path:
    """The policy a user writes by pasting `karchive keygen`'s snippets."""
    names = ", ".join(f'"{k["name"]}"' for k in keys)
    path.write_text(
        "version = 1\n\n"
        + "\n".join(k["policy_snippet"] for k in keys)
        + f"\n[[rules]]\n{rule}\nkeys = [{names}]\nthreshold = {threshold}\n"
    )
    return path


def test_keygen_writes_a_key_pair_and_a_policy_snippet(tmp_path, capsys):
    code, out, _ = run(capsys, "keygen", "-o", str(tmp_path / "ci"))
    assert code == 0
    assert (tmp_path / "ci.key").exists() and (tmp_path / "ci.pub").exists()
    assert "key id " in out and '[[keys]]\nname = "ci"\npublic_key = "ed25519:' in out
    code, _, err = run(capsys, "keygen", "-o", str(tmp_path / "ci"))
    assert code == 2 and "refusing to overwrite" in err
    code, _, err = run(capsys, "keygen", "-o", str(tmp_path / "x"), "--name", "bad name")
    assert code == 2 and "cannot be used in a trust policy" in err and not (tmp_path / "x.key").exists()


def test_keygen_and_sign_with_an_encrypted_key(tmp_path, capsys, archive, monkeypatch):
    code, _, err = run(capsys, "keygen", "-o", str(tmp_path / "enc"), "--passphrase-env", "KARCHIVE_TEST_PW")
    assert code == 2 and "not set" in err
    monkeypatch.setenv("KARCHIVE_TEST_PW", "correct horse")
    keygen(capsys, tmp_path / "enc", "--passphrase-env", "KARCHIVE_TEST_PW")
    assert b"ENCRYPTED PRIVATE KEY" in (tmp_path / "enc.key").read_bytes()
    code, _, err = run(capsys, "sign", str(archive), "--key", str(tmp_path / "enc.key"))
    assert code == 2 and "is encrypted" in err and not Path(sidecar_path(archive)).exists()
    code, _, err = run(
        capsys, "sign", str(archive), "--key", str(tmp_path / "enc.key"), "--passphrase-env", "KARCHIVE_TEST_PW"
    )
    assert code == 0, err


def test_signing_never_changes_the_archive(tmp_path, capsys, archive):
    before = archive.read_bytes()
    st = os.stat(archive)
    keygen(capsys, tmp_path / "ci")
    code, out, err = run(capsys, "sign", str(archive), "--key", str(tmp_path / "ci.key"))
    assert code == 0, err
    assert archive.read_bytes() == before  # byte-identical
    after = os.stat(archive)
    assert (after.st_ino, after.st_mtime_ns, after.st_size) == (st.st_ino, st.st_mtime_ns, st.st_size)
    side = Path(sidecar_path(archive))
    assert side.name == "kernels-1.0.0.karc.sig.json" and side.exists()
    assert f"signed kernels 1.0.0 (sha256 {hashlib.sha256(before).hexdigest()})" in out
    env = Envelope.parse(side.read_bytes())
    assert env.payload_type == "application/vnd.in-toto+json" and len(env.signatures) == 1
    # Ed25519 is deterministic and the statement canonical: signing again gives the same sidecar.
    first = side.read_bytes()
    assert run(capsys, "sign", str(archive), "--key", str(tmp_path / "ci.key"))[0] == 0
    assert side.read_bytes() == first and archive.read_bytes() == before


def test_verify_report_names_who_signed_what(tmp_path, capsys, archive):
    ci = keygen(capsys, tmp_path / "ci")
    policy = write_policy(tmp_path / "policy.toml", ci)
    report = trust_report(str(archive), str(policy))
    assert report["ok"] is False and report["reason"] == "unsigned"
    assert print_trust(report) == 1 and "trust: REFUSED" in capsys.readouterr().out

    assert run(capsys, "sign", str(archive), "--key", str(tmp_path / "ci.key"))[0] == 0
    report = trust_report(str(archive), str(policy))
    assert report["ok"] is True, report
    signer = report["signers"][0]
    assert signer["key_name"] == "ci" and signer["key_id"] == ci["key_id"]
    assert signer["statement"]["subject"] == "kernels@1.0.0"
    assert signer["statement"]["sha256"] == hashlib.sha256(archive.read_bytes()).hexdigest()
    assert report["policy"]["sha256"] == hashlib.sha256(policy.read_bytes()).hexdigest()
    lines = trust_lines(report)
    assert lines[0].startswith("trust: OK under policy") and f"signed by ci (key {ci['key_id'][:16]})" in lines[1]
    assert "triton" in lines[2]
    assert print_trust(report, as_json=True) == 0
    assert json.loads(capsys.readouterr().out)["signers"][0]["key_name"] == "ci"


def test_co_signing_meets_a_threshold_of_two(tmp_path, capsys, archive):
    alice, bob = keygen(capsys, tmp_path / "alice"), keygen(capsys, tmp_path / "bob")
    policy = write_policy(tmp_path / "policy.toml", alice, bob, threshold=2)
    assert run(capsys, "sign", str(archive), "--key", str(tmp_path / "alice.key"))[0] == 0
    assert trust_report(str(archive), str(policy))["reason"] == "threshold-not-met"
    code, out, _ = run(capsys, "sign", str(archive), "--key", str(tmp_path / "bob.key"), "--json")
    info = json.loads(out)
    assert code == 0 and info["cosigned"] and info["signatures"] == 2
    report = trust_report(str(archive), str(policy))
    assert report["ok"] and sorted(s["key_name"] for s in report["signers"]) == ["alice", "bob"]


def test_sign_with_build_info(tmp_path, capsys, archive):
    from karchive.trust.buildinfo import collect_build_info

    keygen(capsys, tmp_path / "ci")
    spec = ROOT / "examples" / "build.toml"
    info = collect_build_info(command="build", spec_path=spec, parameters={"jobs": 2})
    (tmp_path / "build-info.json").write_text(json.dumps(info))
    code, out, err = run(
        capsys,
        "sign",
        str(archive),
        "--key",
        str(tmp_path / "ci.key"),
        "--provenance",
        str(tmp_path / "build-info.json"),
        "--json",
    )
    assert code == 0, err
    ext = json.loads(out)["statement"]["predicate"]["buildDefinition"]["externalParameters"]
    assert ext["spec"]["sha256"] == hashlib.sha256(spec.read_bytes()).hexdigest() and ext["command"] == "build"
    # A co-signer who brings a different statement must choose: co-sign the existing one, or replace.
    keygen(capsys, tmp_path / "bob")
    (tmp_path / "other-info.json").write_text(json.dumps({**info, "parameters": {"jobs": 3}}))
    code, _, err = run(
        capsys,
        "sign",
        str(archive),
        "--key",
        str(tmp_path / "bob.key"),
        "--provenance",
        str(tmp_path / "other-info.json"),
    )
    assert code == 2 and "different provenance statement" in err
    (tmp_path / "typo.json").write_text(json.dumps({"comand": "build"}))
    code, _, err = run(
        capsys, "sign", str(archive), "--key", str(tmp_path / "bob.key"), "--provenance", str(tmp_path / "typo.json")
    )
    assert code == 2 and "unknown field(s) 'comand'" in err


def test_a_stale_sidecar_is_not_co_signed(tmp_path, capsys, archive, built):
    """The archive was rebuilt (other bytes, same name): its old sidecar no longer covers it."""
    keygen(capsys, tmp_path / "ci")
    assert run(capsys, "sign", str(archive), "--key", str(tmp_path / "ci.key"))[0] == 0
    archive.write_bytes(built["rebuilt"].read_bytes())
    policy = write_policy(tmp_path / "policy.toml", keygen(capsys, tmp_path / "other"))
    assert trust_report(str(archive), str(policy))["reason"] == "unknown-key"
    code, _, err = run(capsys, "sign", str(archive), "--key", str(tmp_path / "ci.key"))
    assert code == 2 and "the archive was rebuilt; use --replace" in err
    code, out, _ = run(capsys, "sign", str(archive), "--key", str(tmp_path / "ci.key"), "--replace", "--json")
    assert code == 0 and not json.loads(out)["cosigned"]


def test_tampered_archive_and_envelope_reports(tmp_path, capsys, archive):
    ci = keygen(capsys, tmp_path / "ci")
    policy = write_policy(tmp_path / "policy.toml", ci)
    assert run(capsys, "sign", str(archive), "--key", str(tmp_path / "ci.key"))[0] == 0
    side = Path(sidecar_path(archive))
    good = side.read_bytes()
    doc = json.loads(good)
    doc["payloadType"] = "application/json"
    side.write_text(json.dumps(doc))
    assert trust_report(str(archive), str(policy))["reason"] == "bad-signature"
    side.write_text("{not json")
    report = trust_report(str(archive), str(policy))
    assert report["reason"] == "malformed-envelope" and str(side) in report["error"]
    side.write_bytes(good)
    data = bytearray(archive.read_bytes())
    data[200] ^= 0xFF  # inside a member frame: the archive still opens, its bytes are not the signed ones
    archive.write_bytes(bytes(data))
    report = trust_report(str(archive), str(policy))
    assert report["reason"] == "digest-mismatch"
    assert any("digest-mismatch" in line for line in trust_lines(report))
    data[-200] ^= 0xFF  # the index: not even the archive's name can be read
    archive.write_bytes(bytes(data))
    report = trust_report(str(archive), str(policy))
    assert report["reason"] == "damaged-archive" and "index digest" in report["error"]
    bad_policy = tmp_path / "bad.toml"
    bad_policy.write_text("version = 1\n")
    assert trust_report(str(archive), str(bad_policy))["reason"] == "bad-policy"


def test_damaged_archives_are_not_signed(tmp_path, capsys, archive):
    keygen(capsys, tmp_path / "ci")
    data = bytearray(archive.read_bytes())
    data[200] ^= 0xFF
    archive.write_bytes(bytes(data))
    code, _, err = run(capsys, "sign", str(archive), "--key", str(tmp_path / "ci.key"))
    assert code == 2 and "karchive: error:" in err and not Path(sidecar_path(archive)).exists()
    code, _, err = run(capsys, "sign", str(tmp_path / "missing.karc"), "--key", str(tmp_path / "ci.key"))
    assert code == 2 and "no such archive file" in err
    code, _, err = run(capsys, "sign", str(archive), "--key", str(tmp_path / "ci.pub"))
    assert code == 2 and "this is a public key" in err


def test_console_script_end_to_end(tmp_path, built):
    """As a user runs it: keygen, sign, then the report, in child processes."""
    archive = tmp_path / "k.karc"
    archive.write_bytes(built["a"].read_bytes())
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cli = [sys.executable, "-m", "karchive"]
    gen = subprocess.run(
        cli + ["keygen", "-o", str(tmp_path / "rel"), "--json"], capture_output=True, text=True, env=env
    )
    assert gen.returncode == 0, gen.stderr
    signed = subprocess.run(
        cli + ["sign", str(archive), "--key", str(tmp_path / "rel.key")], capture_output=True, text=True, env=env
    )
    assert signed.returncode == 0 and "is unchanged" in signed.stdout, signed.stderr
    policy = write_policy(tmp_path / "p.toml", json.loads(gen.stdout))
    code = (
        "import sys; from karchive.cli.trust_cmds import trust_report, print_trust; "
        f"sys.exit(print_trust(trust_report({str(archive)!r}, {str(policy)!r})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0 and "signed by rel" in out.stdout, out.stdout + out.stderr
