"""The trust core with real Ed25519 (cryptography) and real archives: keys, DSSE, statements,
policies, and every reason the verifier refuses an archive (spec/SIGNING.md)."""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("cryptography")

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from support import ROOT

from karchive.errors import (
    EnvelopeError,
    KarchiveError,
    KeyFileError,
    TrustError,
    TrustPolicyError,
    UntrustedArchiveError,
)
from karchive.trust import reasons
from karchive.trust.buildinfo import check_build_info, collect_build_info
from karchive.trust.dsse import INTOTO_PAYLOAD_TYPE, Envelope, Signature, pae, verify_signature
from karchive.trust.keys import (
    SigningKey,
    load_private_key,
    load_public_key,
    parse_inline_public_key,
    save_keypair,
)
from karchive.trust.policy import TrustPolicy
from karchive.trust.provenance import build_statement, parse_statement, statement_bytes
from karchive.trust.verify import verify_archive_signatures

UTC = datetime.timezone.utc
NOW = datetime.datetime(2026, 6, 1, tzinfo=UTC)


# --- real archives ---------------------------------------------------------------------------------
class Archive:
    """A real archive file (Triton-compiled variants) with its sha256 and manifest."""

    def __init__(self, path: Path) -> None:
        from karchive.format.check import index_sha256_from_footer
        from karchive.format.open import open_location as open_reader

        self.path = path
        self.sha256 = hashlib.sha256(path.read_bytes()).hexdigest()
        self.index_sha256 = index_sha256_from_footer(path.read_bytes()[-72:])
        reader = open_reader(path)
        self.manifest = reader.manifest
        reader.source.close()
        self.name, self.version = self.manifest["name"], self.manifest["version"]


@pytest.fixture(scope="module")
def archives(add_variants, tmp_path_factory):
    """``a``: kernels@1.0.0; ``rebuilt``: other bytes, same name and version; ``other``: another
    name; ``v2``: kernels@2.0.0."""
    from karchive.producer.build.pack import ArchiveBuilder
    from karchive.producer.compile.aot import toolchain_versions

    root = tmp_path_factory.mktemp("trust-archives")
    tools = toolchain_versions()  # what `karchive build` records in produced_by

    def make(label: str, name: str, version: str, variants) -> Archive:
        b = ArchiveBuilder(name, version, produced_by=tools, level=3)
        for v in variants:
            b.add(v)
        b.write(root / f"{label}.karc")
        return Archive(root / f"{label}.karc")

    return {
        "a": make("a", "kernels", "1.0.0", add_variants),
        "rebuilt": make("rebuilt", "kernels", "1.0.0", add_variants[:1]),
        "other": make("other", "other-kernels", "1.0.0", add_variants),
        "v2": make("v2", "kernels", "2.0.0", add_variants),
    }


@pytest.fixture(scope="module")
def keys():
    return {n: SigningKey.generate() for n in ("ci", "old", "new", "alice", "bob", "stranger", "gone")}


def policy_for(keys, body: str, revoked: tuple[str, ...] = ()) -> TrustPolicy:
    """A policy listing every test key (name = dict key) followed by ``body`` (rules, windows)."""
    lines = ["version = 1"]
    if revoked:
        lines.append("revoked = [" + ", ".join(f'"{keys[n].key_id}"' for n in revoked) + "]")
    text = "\n".join(lines) + "\n" + textwrap.dedent(body)
    for n, k in keys.items():
        text = text.replace(f"@{n}@", k.public.inline())
    return TrustPolicy.from_bytes(text.encode(), "test-policy.toml")


def envelope_for(archive: Archive, *signers: SigningKey, build_info=None) -> Envelope:
    payload = statement_bytes(
        build_statement(archive.manifest, archive.sha256, build_info, index_sha256=archive.index_sha256)
    )
    env = Envelope(INTOTO_PAYLOAD_TYPE, payload)
    for k in signers:
        env = env.add_signature(k)
    return env


def check(archive: Archive, envelopes, policy, *, version="same", now=NOW):
    return verify_archive_signatures(
        sha256=archive.sha256,
        name=archive.name,
        version=archive.version if version == "same" else version,
        envelopes=envelopes,
        policy=policy,
        now=now,
    )


def refused(archive: Archive, envelopes, policy, **kw) -> UntrustedArchiveError:
    with pytest.raises(UntrustedArchiveError) as info:
        check(archive, envelopes, policy, **kw)
    return info.value


SIMPLE = """
[[keys]]
name = "ci"
public_key = "@ci@"

[[keys]]
name = "gone"
public_key = "@gone@"

[[rules]]
names = ["kernels", "kernels-*"]
keys = ["ci", "gone"]
"""


# --- DSSE ------------------------------------------------------------------------------------------
def test_pae_matches_the_dsse_spec_test_vector():
    # secure-systems-lab/dsse protocol.md: the spec's own example.
    assert (
        pae("http://example.com/HelloWorld", b"hello world")
        == b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )
    # LEN is the byte length, not the character length.
    assert pae("t\u00e9", b"\xff") == b"DSSEv1 3 t\xc3\xa9 1 \xff"


def test_envelope_round_trip_and_dsse_parsing_rules(keys):
    env = Envelope.create("application/vnd.example+json", b'{"x":1}', keys["ci"])
    back = Envelope.parse(env.to_bytes())
    assert back == env and verify_signature(back, back.signatures[0], keys["ci"].public)
    # DSSE: standard or URL-safe base64, padding optional; keyid optional; unknown fields ignored.
    doc = env.to_json()
    doc["payload"] = base64.urlsafe_b64encode(b'{"x":1}').decode().rstrip("=")
    doc["signatures"] = [{"sig": base64.urlsafe_b64encode(env.signatures[0].sig).decode().rstrip("="), "extra": 1}]
    doc["future_field"] = {"a": 1}
    lax = Envelope.parse(json.dumps(doc).encode())
    assert lax.payload == b'{"x":1}' and lax.signatures[0].keyid == ""
    assert verify_signature(lax, lax.signatures[0], keys["ci"].public)


@pytest.mark.parametrize(
    "doc, fragment",
    [
        (b"not json", "not valid JSON"),
        (b"[]", "not a DSSE envelope"),
        (b'{"payloadType": "t", "signatures": []}', "'payload'"),
        (b'{"payload": "", "payloadType": 1, "signatures": []}', "'payloadType'"),
        (b'{"payload": "!!", "payloadType": "t", "signatures": []}', "not base64"),
        (b'{"payload": "", "payloadType": "t", "signatures": [{"keyid": "k"}]}', "needs a string 'sig'"),
        (b'{"payload": "", "payloadType": "t", "signatures": [{"sig": "a"}]}', "not base64"),
        (b'{"payload": "", "payloadType": "t", "signatures": [], "payload": "eA=="}', "duplicate JSON key"),
        (b'{"payload": NaN, "payloadType": "t", "signatures": []}', "NaN"),
    ],
)
def test_malformed_envelopes_are_refused(doc, fragment):
    with pytest.raises(EnvelopeError, match=fragment) as info:
        Envelope.parse(doc, "x.sig.json")
    assert info.value.reason == reasons.MALFORMED_ENVELOPE and info.value.path == "x.sig.json"


def test_envelope_limits():
    sigs = ",".join('{"sig": "AA=="}' for _ in range(257))
    with pytest.raises(EnvelopeError, match="more than 256 signatures"):
        Envelope.parse(f'{{"payload": "", "payloadType": "t", "signatures": [{sigs}]}}'.encode())
    with pytest.raises(EnvelopeError, match="larger than"):
        Envelope.parse(b" " * (4 * 1024 * 1024 + 1))


def test_signature_covers_payload_type_and_bytes(keys):
    """CVE-2022-35929 (cosign checked the type beside the signature): PAE binds the type."""
    env = Envelope.create(INTOTO_PAYLOAD_TYPE, b'{"a":1}', keys["ci"])
    sig = env.signatures[0]
    retyped = Envelope("application/vnd.other+json", env.payload, env.signatures)
    altered = Envelope(env.payload_type, b'{"a":2}', env.signatures)
    assert verify_signature(env, sig, keys["ci"].public)
    assert not verify_signature(retyped, sig, keys["ci"].public)
    assert not verify_signature(altered, sig, keys["ci"].public)
    assert not verify_signature(env, sig, keys["bob"].public)
    assert not verify_signature(env, Signature(sig.keyid, sig.sig[:-1] + bytes([sig.sig[-1] ^ 1])), keys["ci"].public)


# --- keys ------------------------------------------------------------------------------------------
def test_key_files_round_trip_in_standard_formats(tmp_path, keys):
    k = keys["ci"]
    save_keypair(k, tmp_path / "ci.key", tmp_path / "ci.pub")
    assert stat.S_IMODE(os.stat(tmp_path / "ci.key").st_mode) == 0o600
    assert (tmp_path / "ci.key").read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    assert (tmp_path / "ci.pub").read_bytes().startswith(b"-----BEGIN PUBLIC KEY-----")
    assert load_private_key(tmp_path / "ci.key").key_id == k.key_id
    assert load_public_key(tmp_path / "ci.pub").key_id == k.key_id
    # The key id is sha256 of the 32 raw public-key bytes, as spec/SIGNING.md §2 says.
    raw = k.public.raw
    assert len(raw) == 32 and k.key_id == hashlib.sha256(raw).hexdigest()
    assert parse_inline_public_key(k.public.inline()).key_id == k.key_id
    (tmp_path / "inline.pub").write_text(k.public.inline() + "\n")
    assert load_public_key(tmp_path / "inline.pub").key_id == k.key_id
    # Never overwrite a key file.
    with pytest.raises(KeyFileError, match="refusing to overwrite"):
        save_keypair(SigningKey.generate(), tmp_path / "ci.key", tmp_path / "other.pub")
    assert not (tmp_path / "other.pub").exists() and load_private_key(tmp_path / "ci.key").key_id == k.key_id


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_openssl_reads_our_key_files(tmp_path, keys):
    save_keypair(keys["ci"], tmp_path / "k.key", tmp_path / "k.pub")
    out = subprocess.run(
        ["openssl", "pkey", "-in", str(tmp_path / "k.key"), "-pubout"], capture_output=True, check=True
    )
    assert out.stdout == (tmp_path / "k.pub").read_bytes()


def test_encrypted_private_keys(tmp_path, keys):
    save_keypair(keys["alice"], tmp_path / "a.key", tmp_path / "a.pub", passphrase=b"s3cret")
    assert b"ENCRYPTED PRIVATE KEY" in (tmp_path / "a.key").read_bytes()
    assert load_private_key(tmp_path / "a.key", b"s3cret").key_id == keys["alice"].key_id
    with pytest.raises(KeyFileError, match="is encrypted"):
        load_private_key(tmp_path / "a.key")
    with pytest.raises(KeyFileError, match="wrong passphrase"):
        load_private_key(tmp_path / "a.key", b"wrong")


def test_wrong_key_files_are_clear_errors(tmp_path, keys):
    save_keypair(keys["bob"], tmp_path / "b.key", tmp_path / "b.pub")
    with pytest.raises(KeyFileError, match="this is a public key"):
        load_private_key(tmp_path / "b.pub")
    with pytest.raises(KeyFileError, match="is a private key"):
        load_public_key(tmp_path / "b.key")
    ec_key = ec.generate_private_key(ec.SECP256R1())
    (tmp_path / "ec.key").write_bytes(
        ec_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    with pytest.raises(KeyFileError, match="Ed25519 only"):
        load_private_key(tmp_path / "ec.key")
    with pytest.raises(KeyFileError, match="cannot read key file"):
        load_private_key(tmp_path / "missing.key")
    with pytest.raises(KeyFileError, match="32-byte key"):
        parse_inline_public_key("ed25519:AAAA")
    assert issubclass(KeyFileError, KarchiveError)


# --- provenance statement ----------------------------------------------------------------------------
def test_statement_is_derived_from_the_manifest(archives):
    a = archives["a"]
    st = build_statement(a.manifest, a.sha256, index_sha256=a.index_sha256)
    assert st["_type"] == "https://in-toto.io/Statement/v1"
    assert st["predicateType"] == "https://slsa.dev/provenance/v1"
    assert st["subject"] == [
        {
            "name": "kernels@1.0.0",
            "digest": {"sha256": a.sha256},
            "annotations": {"karchive": {"index_sha256": a.index_sha256}},
        }
    ]
    build = st["predicate"]["buildDefinition"]
    assert build["externalParameters"]["kernels"] == ["kernels:add_kernel"]
    assert build["externalParameters"]["targets"] == ["cuda:90", "hip:gfx942"]
    srcs = {s["path"]: s["sha256"] for s in a.manifest["sources"]}
    assert {d["name"]: d["digest"]["sha256"] for d in build["resolvedDependencies"]} == srcs
    version = st["predicate"]["runDetails"]["builder"]["version"]
    import triton

    assert version["triton"] == triton.__version__ and version["karchive"] == a.manifest["produced_by"]["karchive"]
    # Same inputs, same bytes: provenance is as reproducible as the archive.
    assert statement_bytes(st) == statement_bytes(build_statement(a.manifest, a.sha256, index_sha256=a.index_sha256))
    parsed = parse_statement(statement_bytes(st))
    assert (parsed.name, parsed.version, parsed.sha256, parsed.index_sha256) == (
        "kernels",
        "1.0.0",
        a.sha256,
        a.index_sha256,
    )
    # The index digest is required: without it a ranged reader could not be bound to the signature.
    del st["subject"][0]["annotations"]
    with pytest.raises(TrustError, match="index_sha256") as e:
        parse_statement(statement_bytes(st))
    assert e.value.reason == reasons.MALFORMED_STATEMENT


def test_build_info_goes_into_the_predicate(archives, tmp_path, monkeypatch):
    a = archives["a"]
    spec = ROOT / "examples" / "build.toml"
    monkeypatch.setenv("ROCM_PATH", str(tmp_path / "rocm"))
    (tmp_path / "rocm" / ".info").mkdir(parents=True)
    (tmp_path / "rocm" / ".info" / "version").write_text("6.2.4-120\n")
    info = collect_build_info(command="build", spec_path=spec, parameters={"jobs": 8, "keep_going": False})
    assert info["spec"] == {"name": "build.toml", "sha256": hashlib.sha256(spec.read_bytes()).hexdigest()}
    assert "started_on" not in info and str(ROOT) not in json.dumps(info)  # no path, no time unless asked
    info["builder_id"] = "https://ci.example/workflows/build@refs/heads/main"
    info["dependencies"] = [{"uri": "git+https://example.com/kernels", "digest": {"gitCommit": "ab" * 20}}]
    st = build_statement(a.manifest, a.sha256, info, index_sha256=a.index_sha256)
    ext = st["predicate"]["buildDefinition"]["externalParameters"]
    assert ext["command"] == "build" and ext["spec"] == info["spec"] and ext["parameters"]["jobs"] == 8
    builder = st["predicate"]["runDetails"]["builder"]
    assert builder["id"] == info["builder_id"]
    assert builder["version"]["rocm"] == "6.2.4-120" and builder["version"]["platform"] == info["platform"]
    assert {"uri": "git+https://example.com/kernels", "digest": {"gitCommit": "ab" * 20}} in st["predicate"][
        "buildDefinition"
    ]["resolvedDependencies"]
    timed = collect_build_info(command="build", timestamps=True)
    assert (
        timed["started_on"].endswith("Z")
        and "metadata"
        in build_statement(a.manifest, a.sha256, timed, index_sha256=a.index_sha256)["predicate"]["runDetails"]
    )


@pytest.mark.parametrize(
    "info, fragment",
    [
        ({"comand": "build"}, "unknown field"),
        ({"spec": {"sha256": "xyz"}}, "'spec' must be"),
        ({"toolchain": {"rocm": 6}}, "'toolchain.rocm' must be a string"),
        ({"started_on": "yesterday"}, "RFC 3339"),
        ({"dependencies": [{"uri": "x"}]}, "dependencies\\[0\\]"),
        ({"parameters": {"x": float("nan")}}, "not a JSON value"),
    ],
)
def test_bad_build_info_is_refused(info, fragment):
    with pytest.raises(TrustError, match=fragment) as e:
        check_build_info(info)
    assert e.value.reason == "bad-build-info"


def test_build_info_cannot_contradict_the_manifest(archives):
    a = archives["a"]
    with pytest.raises(TrustError, match="build info says triton 0.0.1, the archive's manifest says"):
        build_statement(a.manifest, a.sha256, {"toolchain": {"triton": "0.0.1"}}, index_sha256=a.index_sha256)


# --- policy ------------------------------------------------------------------------------------------
def test_policy_parses_keys_rules_windows_and_revocations(keys):
    p = policy_for(
        keys,
        """
        [[keys]]
        name = "old"
        public_key = "@old@"
        not_after = 2026-07-01T00:00:00Z

        [[keys]]
        name = "new"
        public_key = "@new@"
        id = "%s"
        not_before = "2026-05-01T00:00:00+02:00"

        [[rules]]
        names = ["kernels*"]
        keys = ["old", "new"]
        threshold = 1

        [[rules]]
        names = ["*"]
        threshold = 0
    """
        % keys["new"].key_id,
        revoked=("gone",),
    )
    assert [k.name for k in p.keys] == ["old", "new"]
    assert p.key(keys["new"].key_id).not_before == datetime.datetime(2026, 4, 30, 22, tzinfo=UTC)
    assert p.rule_for("kernels-x").index == 0 and p.rule_for("anything").threshold == 0
    assert keys["gone"].key_id in p.revoked and len(p.sha256) == 64


@pytest.mark.parametrize(
    "body, fragment",
    [
        ('[[rules]]\nnames=["*"]\nthreshold=0\nextra=1', "unknown field"),
        ('[[keys]]\nname="k"\npublic_key="@ci@"\nid="00"\n[[rules]]\nnames=["*"]\nkeys=["k"]', "copied wrongly"),
        (
            '[[keys]]\nname="k"\npublic_key="@ci@"\n[[keys]]\nname="k2"\npublic_key="@ci@"\n[[rules]]\nnames=["*"]\nkeys=["k"]',
            "listed twice",
        ),
        (
            '[[keys]]\nname="k"\npublic_key="@ci@"\n[[keys]]\nname="k"\npublic_key="@bob@"\n[[rules]]\nnames=["*"]\nkeys=["k"]',
            "unique",
        ),
        ('[[rules]]\nnames=["*"]\nkeys=["nobody"]', "unknown key name"),
        ('[[keys]]\nname="k"\npublic_key="@ci@"\n[[rules]]\nnames=["*"]\nkeys=["k"]\nthreshold=2', "threshold 2"),
        (
            '[[keys]]\nname="k"\npublic_key="@ci@"\nnot_after=2026-01-01T00:00:00\n[[rules]]\nnames=["*"]\nkeys=["k"]',
            "UTC offset",
        ),
        (
            '[[keys]]\nname="k"\npublic_key="@ci@"\nnot_before=2027-01-01T00:00:00Z\nnot_after=2026-01-01T00:00:00Z\n'
            '[[rules]]\nnames=["*"]\nkeys=["k"]',
            "earlier than",
        ),
        ('[[keys]]\nname="k"\npublic_key="ssh-ed25519 AAAA"\n[[rules]]\nnames=["*"]\nkeys=["k"]', "ed25519:"),
        ("", "no \\[\\[rules\\]\\]"),
        ('revoked = ["abc"]\n[[rules]]\nnames=["*"]\nthreshold=0', "key ids"),
        ("[[rules]]\nnames=[]\nthreshold=0", "non-empty list"),
    ],
)
def test_bad_policies_are_refused_with_the_reason(keys, body, fragment):
    with pytest.raises(TrustPolicyError, match=fragment) as e:
        policy_for(keys, body)
    assert e.value.reason == "bad-policy" and e.value.path == "test-policy.toml"


def test_policy_version_and_toml_errors(tmp_path):
    with pytest.raises(TrustPolicyError, match="'version = 1' is required"):
        TrustPolicy.from_bytes(b"version = 2\n[[rules]]\nnames=['*']\nthreshold=0\n")
    with pytest.raises(TrustPolicyError, match="not valid TOML"):
        TrustPolicy.from_bytes(b"version = = 1")
    with pytest.raises(TrustPolicyError, match="cannot read trust policy"):
        TrustPolicy.load(tmp_path / "missing.toml")


# --- verification: accepted ----------------------------------------------------------------------
def test_a_trusted_signature_is_accepted_and_names_its_signer(archives, keys):
    a = archives["a"]
    result = check(a, [envelope_for(a, keys["ci"])], policy_for(keys, SIMPLE))
    assert [s.key.name for s in result.signers] == ["ci"] and result.key_ids == (keys["ci"].key_id,)
    doc = result.to_json()
    assert doc["ok"] and doc["signers"][0]["statement"]["subject"] == "kernels@1.0.0"
    assert doc["signers"][0]["statement"]["sha256"] == a.sha256 and doc["rejected"] == []
    # Without a version, any version the signer named is accepted (the caller checks the manifest's).
    assert check(a, [envelope_for(a, keys["ci"])], policy_for(keys, SIMPLE), version=None).signers


def test_keyid_is_only_a_hint(archives, keys):
    """DSSE: keyid is unauthenticated. An empty one still verifies (every key is tried); one that
    names another policy key narrows the search to that key, so the signature is refused, never
    attributed to the wrong key."""
    a = archives["a"]
    env = envelope_for(a, keys["ci"])
    sig = env.signatures[0]
    no_hint = Envelope(env.payload_type, env.payload, (Signature("", sig.sig),))
    assert check(a, [no_hint], policy_for(keys, SIMPLE)).signers[0].key.name == "ci"
    lying = Envelope(env.payload_type, env.payload, (Signature(keys["gone"].key_id, sig.sig),))
    assert refused(a, [lying], policy_for(keys, SIMPLE)).reason == reasons.BAD_SIGNATURE


def test_policy_without_signatures_allows_unsigned_archives(archives, keys):
    p = policy_for(keys, '[[rules]]\nnames = ["kernels"]\nthreshold = 0\n')
    result = check(archives["a"], [], p)
    assert result.signers == () and result.rule.threshold == 0


# --- verification: every refusal, each with its reason ------------------------------------------------
def test_unsigned_archive_is_refused(archives, keys):
    e = refused(archives["a"], [], policy_for(keys, SIMPLE))
    assert e.reason == reasons.UNSIGNED and e.archive == "kernels@1.0.0"
    assert "has no signature" in str(e)
    e = refused(archives["a"], [Envelope(INTOTO_PAYLOAD_TYPE, b"{}")], policy_for(keys, SIMPLE))
    assert e.reason == reasons.UNSIGNED


def test_wrong_key_is_refused_as_unknown(archives, keys):
    a = archives["a"]
    e = refused(a, [envelope_for(a, keys["stranger"])], policy_for(keys, SIMPLE))
    assert e.reason == reasons.UNKNOWN_KEY and e.key_id == keys["stranger"].key_id
    assert e.rejected[0]["verified"] is False


def test_revoked_key_is_refused(archives, keys):
    a = archives["a"]
    p = policy_for(keys, SIMPLE, revoked=("gone",))
    e = refused(a, [envelope_for(a, keys["gone"])], p)
    assert e.reason == reasons.REVOKED_KEY and e.key_id == keys["gone"].key_id
    # A revoked key's signature does not count even beside a good one (it just is not counted).
    ok = check(a, [envelope_for(a, keys["gone"], keys["ci"])], p)
    assert [s.key.name for s in ok.signers] == ["ci"] and ok.rejected[0].reason == reasons.REVOKED_KEY
    # Revocation by id alone, for a key the policy no longer lists.
    p2 = policy_for(
        keys, '[[keys]]\nname = "ci"\npublic_key = "@ci@"\n[[rules]]\nnames = ["*"]\nkeys = ["ci"]\n', revoked=("gone",)
    )
    assert refused(a, [envelope_for(a, keys["gone"])], p2).reason == reasons.REVOKED_KEY


ROTATION = """
[[keys]]
name = "old"
public_key = "@old@"
not_after = 2026-07-01T00:00:00Z

[[keys]]
name = "new"
public_key = "@new@"
not_before = 2026-05-01T00:00:00Z

[[rules]]
names = ["kernels"]
keys = ["old", "new"]
"""


def test_key_rotation_windows(archives, keys):
    a = archives["a"]
    p = policy_for(keys, ROTATION)
    old_only, new_only = [envelope_for(a, keys["old"])], [envelope_for(a, keys["new"])]
    during = datetime.datetime(2026, 6, 1, tzinfo=UTC)
    after = datetime.datetime(2026, 8, 1, tzinfo=UTC)
    before = datetime.datetime(2026, 4, 1, tzinfo=UTC)
    assert check(a, old_only, p, now=during).signers[0].key.name == "old"  # overlap: both keys valid
    assert check(a, new_only, p, now=during).signers[0].key.name == "new"
    e = refused(a, old_only, p, now=after)  # old key rotated out
    assert e.reason == reasons.KEY_EXPIRED and "valid until 2026-07-01T00:00:00Z" in str(e)
    assert check(a, [envelope_for(a, keys["old"], keys["new"])], p, now=after).signers[0].key.name == "new"
    assert refused(a, new_only, p, now=before).reason == reasons.KEY_NOT_YET_VALID


def test_key_not_allowed_for_this_name_and_names_without_a_rule(archives, keys):
    p = policy_for(
        keys,
        SIMPLE + '\n[[keys]]\nname = "bob"\npublic_key = "@bob@"\n[[rules]]\nnames = ["other-*"]\nkeys = ["bob"]\n',
    )
    a, other = archives["a"], archives["other"]
    e = refused(a, [envelope_for(a, keys["bob"])], p)
    assert e.reason == reasons.KEY_NOT_ALLOWED and "allowed: ci, gone" in str(e)
    assert check(other, [envelope_for(other, keys["bob"])], p).signers[0].key.name == "bob"
    e = refused(archives["a"], [], policy_for(keys, '[[rules]]\nnames = ["x"]\nthreshold = 0\n'))
    assert e.reason == reasons.NO_RULE


def test_tampered_archive_is_refused_signature_does_not_cover_its_bytes(archives, keys, tmp_path):
    a = archives["a"]
    env = envelope_for(a, keys["ci"])
    tampered = tmp_path / "t.karc"
    data = bytearray(a.path.read_bytes())
    data[100] ^= 0x01
    tampered.write_bytes(bytes(data))
    digest = hashlib.sha256(tampered.read_bytes()).hexdigest()
    with pytest.raises(UntrustedArchiveError) as e:
        verify_archive_signatures(
            sha256=digest, name=a.name, version=a.version, envelopes=[env], policy=policy_for(keys, SIMPLE), now=NOW
        )
    assert e.value.reason == reasons.DIGEST_MISMATCH and a.sha256 in str(e.value) and digest in str(e.value)
    # A rebuild under the same name and version (other bytes) is refused the same way.
    rebuilt = archives["rebuilt"]
    assert rebuilt.sha256 != a.sha256
    assert refused(rebuilt, [env], policy_for(keys, SIMPLE)).reason == reasons.DIGEST_MISMATCH


def test_tampered_envelope_is_refused(archives, keys):
    a = archives["a"]
    env = envelope_for(a, keys["ci"])
    statement = json.loads(env.payload)
    statement["predicate"]["runDetails"]["builder"]["id"] = "https://evil.example"
    forged = Envelope(env.payload_type, statement_bytes(statement), env.signatures)
    e = refused(a, [forged], policy_for(keys, SIMPLE))
    assert e.reason == reasons.BAD_SIGNATURE and e.key_id == keys["ci"].key_id
    # Changing only the payload type (cosign CVE-2022-35929's shape) breaks the signature too.
    retyped = Envelope("application/vnd.karchive.other+json", env.payload, env.signatures)
    assert refused(a, [retyped], policy_for(keys, SIMPLE)).reason == reasons.BAD_SIGNATURE


def test_envelope_swapped_from_another_archive_is_refused(archives, keys):
    a, other, v2 = archives["a"], archives["other"], archives["v2"]
    p = policy_for(keys, SIMPLE.replace('names = ["kernels", "kernels-*"]', 'names = ["*"]'))
    e = refused(a, [envelope_for(other, keys["ci"])], p)
    assert e.reason == reasons.SWAPPED_ENVELOPE and "about other-kernels@1.0.0, not kernels@1.0.0" in str(e)
    # Another version's envelope: the statement names 2.0.0 for archive 1.0.0 (a rollback aid).
    e = refused(a, [envelope_for(v2, keys["ci"])], p)
    assert e.reason == reasons.SWAPPED_ENVELOPE and "kernels@2.0.0" in str(e)


def test_wrong_payload_type_is_refused_even_when_validly_signed(archives, keys):
    a = archives["a"]
    payload = statement_bytes(build_statement(a.manifest, a.sha256, index_sha256=a.index_sha256))
    env = Envelope.create("application/json", payload, keys["ci"])
    e = refused(a, [env], policy_for(keys, SIMPLE))
    assert e.reason == reasons.WRONG_PAYLOAD_TYPE and "'application/json'" in str(e)


def test_signed_garbage_is_a_malformed_statement(archives, keys):
    a = archives["a"]
    for payload in (
        b"[1, 2]",
        b'{"_type": "https://in-toto.io/Statement/v1"}',
        b"\xff\xfe",
        b'{"_type":"https://in-toto.io/Statement/v1","_type":"x"}',
    ):
        e = refused(a, [Envelope.create(INTOTO_PAYLOAD_TYPE, payload, keys["ci"])], policy_for(keys, SIMPLE))
        assert e.reason == reasons.MALFORMED_STATEMENT


def test_thresholds_count_distinct_keys(archives, keys):
    a = archives["a"]
    p = policy_for(
        keys,
        """
        [[keys]]
        name = "alice"
        public_key = "@alice@"

        [[keys]]
        name = "bob"
        public_key = "@bob@"

        [[rules]]
        names = ["kernels"]
        keys = ["alice", "bob"]
        threshold = 2
    """,
    )
    one = envelope_for(a, keys["alice"])
    e = refused(a, [one], p)
    assert e.reason == reasons.THRESHOLD_NOT_MET and "2 signature(s) needed, 1 valid" in str(e)
    twice = Envelope(one.payload_type, one.payload, one.signatures * 2)
    assert refused(a, [twice], p).reason == reasons.THRESHOLD_NOT_MET  # one key counts once
    both = check(a, [envelope_for(a, keys["alice"], keys["bob"])], p)
    assert sorted(s.key.name for s in both.signers) == ["alice", "bob"]
    # Two envelopes (independent statements, e.g. a rebuild verifier's) count together.
    assert len(check(a, [envelope_for(a, keys["alice"]), envelope_for(a, keys["bob"])], p).signers) == 2


def test_the_most_telling_reason_is_reported(archives, keys):
    """Several bad signatures: the one that got furthest through verification names the refusal,
    and every one is listed."""
    a, other = archives["a"], archives["other"]
    p = policy_for(keys, SIMPLE.replace('names = ["kernels", "kernels-*"]', 'names = ["*"]'))
    env = envelope_for(a, keys["stranger"])
    e = refused(a, [env, envelope_for(other, keys["ci"])], p)
    assert e.reason == reasons.SWAPPED_ENVELOPE
    assert sorted(r["reason"] for r in e.rejected) == [reasons.SWAPPED_ENVELOPE, reasons.UNKNOWN_KEY]
    assert isinstance(e, TrustError) and e.policy_sha256 == p.sha256


def test_verification_budget_bounds_work_on_hostile_envelopes(archives, keys):
    """Floods of hint-less signatures cannot make verification try every key for each of them, nor
    hash a large payload thousands of times."""
    from karchive.trust import verify as verify_mod

    a = archives["a"]
    big = policy_for(
        keys,
        "".join(
            f'\n[[keys]]\nname = "k{i}"\npublic_key = "{SigningKey.generate().public.inline()}"\n' for i in range(40)
        )
        + '\n[[rules]]\nnames = ["*"]\nkeys = ["k0"]\n',
    )
    env = envelope_for(a, keys["stranger"])
    large = Envelope.create(INTOTO_PAYLOAD_TYPE, b" " * (3 * 1024 * 1024), keys["stranger"])
    calls = []
    real = verify_mod.verify_signature
    try:
        verify_mod.verify_signature = lambda *args: calls.append(1) or real(*args)
        for e, limit in (
            (env, verify_mod.MAX_VERIFICATIONS),
            (large, verify_mod.MAX_VERIFIED_BYTES // len(large.payload)),
        ):
            flood = Envelope(e.payload_type, e.payload, tuple(Signature("", e.signatures[0].sig) for _ in range(256)))
            calls.clear()
            assert refused(a, [flood], big).reason == reasons.UNKNOWN_KEY
            assert 0 < len(calls) <= limit and len(calls) < 256 * 40
    finally:
        verify_mod.verify_signature = real


# --- import weight -------------------------------------------------------------------------------------
def test_cryptography_is_loaded_only_when_keys_or_signatures_are_used():
    code = textwrap.dedent("""
        import sys, json
        import karchive, karchive.errors, karchive.trust
        from karchive.cli.main import build_parser
        build_parser()
        from karchive.trust.sidecar import sidecar_path
        sidecar_path("a.karc")
        light = "cryptography" not in sys.modules
        karchive.trust.SigningKey
        print(json.dumps([light, "cryptography" in sys.modules]))
    """)
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert json.loads(out.stdout) == [True, True]


def test_the_policy_example_in_the_spec_means_what_the_spec_says(keys):
    """spec/SIGNING.md §5's example, with its elided ids and keys filled in, loads and applies the
    first matching rule."""
    import re

    text = (ROOT / "spec" / "SIGNING.md").read_text()
    example = re.search(r"## 5\. Trust policy.*?```toml\n(.*?)```", text, re.S).group(1)
    example = example.replace('"9c1f…e2"', f'"{keys["gone"].key_id}"')
    example = re.sub(r'id = "e9767c5d…2c".*\n', "", example)
    example = example.replace('public_key = "ed25519:..."', f'public_key = "{keys["new"].public.inline()}"')
    for n in ("alice", "bob", "carol"):
        example += f'\n[[keys]]\nname = "release-{n}"\npublic_key = "{SigningKey.generate().public.inline()}"\n'
    p = TrustPolicy.from_bytes(example.encode())
    assert keys["gone"].key_id in p.revoked
    assert p.rule_for("kernels-fp8").keys == ("ci-2025", "ci-2026") and p.rule_for("kernels").threshold == 1
    assert p.rule_for("scratch-1").threshold == 0
    assert p.rule_for("anything").threshold == 2
    old, new = p.keys[0], p.keys[1]
    assert (old.name, new.name) == ("ci-2025", "ci-2026") and new.not_before < old.not_after  # the overlap


def test_reason_codes_have_one_definition_and_the_spec_lists_them_all():
    import re

    from karchive import errors

    codes = {v for k, v in vars(reasons).items() if k.isupper() and isinstance(v, str)}
    assert codes == set(reasons.MEANING)
    assert set(reasons.STAGE) <= codes
    # errors.py cannot import the trust package (it is the bottom layer): its defaults must agree.
    assert {
        errors.TrustPolicyError.reason,
        errors.KeyFileError.reason,
        errors.EnvelopeError.reason,
        errors.PinnedSignerError.reason,
        errors.DowngradeError.reason,
    } <= codes
    table = (ROOT / "spec" / "SIGNING.md").read_text().split("## 7. Reason codes")[1].split("## 8.")[0]
    assert set(re.findall(r"^\| `([a-z-]+)` \|", table, re.M)) == codes
