"""`karchive build --sign KEY [--provenance]`: the build signs what it wrote, in one command.

A real build (one add kernel for cuda:90, compiled by Triton) through the CLI in a fresh interpreter;
the signature is then checked by `karchive verify --trust` exactly as a consumer would.
"""

from __future__ import annotations

import hashlib
import json

import pytest

pytest.importorskip("cryptography")
pytest.importorskip("triton")

from build_support import build, karchive, make_checkout

from karchive.trust.sidecar import sidecar_path

SPEC = """[archive]
name = "kernels"
version = "1.0"
level = 3

[[kernel]]
source = "kernels.py:add_kernel"
signature = "*fp32:16, *fp32:16, *fp32:16, i32"
constexprs = { BLOCK = [256] }
targets = ["cuda:90"]
"""


def _keygen(prefix) -> dict:
    r = karchive("keygen", "-o", str(prefix), "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_build_signs_with_provenance_and_a_policy_accepts_it(tmp_path):
    spec = make_checkout(tmp_path / "src", SPEC)
    ci, bob = _keygen(tmp_path / "ci"), _keygen(tmp_path / "bob")
    policy = tmp_path / "policy.toml"
    names = ", ".join(f'"{k["name"]}"' for k in (ci, bob))
    policy.write_text(
        "version = 1\n\n"
        + ci["policy_snippet"]
        + "\n"
        + bob["policy_snippet"]
        + f'\n[[rules]]\nnames = ["kernels*"]\nkeys = [{names}]\nthreshold = 2\n'
    )

    plain = build(spec, tmp_path / "plain.karc")
    signed = build(
        spec,
        tmp_path / "signed.karc",
        "--sign",
        str(tmp_path / "ci.key"),
        "--sign",
        str(tmp_path / "bob.key"),
        "--provenance",
    )
    # Signing never touches the archive: the same bytes as the unsigned build, the signatures beside it.
    assert (tmp_path / "signed.karc").read_bytes() == (tmp_path / "plain.karc").read_bytes()
    assert "signed" not in plain
    assert [s["key_id"] for s in signed["signed"]] == [ci["key_id"], bob["key_id"]]
    assert [s["provenance"] for s in signed["signed"]] == [True, False]
    assert signed["signed"][0]["sidecar"] == sidecar_path(tmp_path / "signed.karc")

    r = karchive("verify", str(tmp_path / "signed.karc"), "--trust", str(policy), "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads(r.stdout)["trust"]
    assert report["ok"] and {s["key_id"] for s in report["signers"]} == {ci["key_id"], bob["key_id"]}
    # The one statement both keys signed records the spec that was built (by digest) and the parameters.
    envelope = json.loads((tmp_path / "signed.karc.sig.json").read_text())
    assert len(envelope["signatures"]) == 2
    import base64

    statement = json.loads(base64.b64decode(envelope["payload"]))
    ext = statement["predicate"]["buildDefinition"]["externalParameters"]
    assert ext["command"] == "build" and ext["parameters"]["executor"] == "local"
    assert ext["spec"]["sha256"] == hashlib.sha256(spec.read_bytes()).hexdigest()
    assert (
        statement["subject"][0]["digest"]["sha256"]
        == hashlib.sha256((tmp_path / "signed.karc").read_bytes()).hexdigest()
    )


def test_build_refuses_bad_signing_arguments_before_compiling(tmp_path):
    spec = make_checkout(tmp_path / "src", SPEC)
    r = karchive("build", str(spec), "-o", str(tmp_path / "a.karc"), "--provenance")
    assert r.returncode == 2 and "give --sign KEY too" in r.stderr
    (tmp_path / "junk.key").write_text("not a key\n")
    r = karchive("build", str(spec), "-o", str(tmp_path / "a.karc"), "--sign", str(tmp_path / "junk.key"))
    assert r.returncode == 2 and "junk.key" in r.stderr
    assert not (tmp_path / "a.karc").exists()  # nothing compiled, nothing written
