"""Signatures are additive to registry layout 1: karchive from before them (the code at ``OLD``, taken
from this repository's history) reads a registry that holds signatures, and this karchive reads a
registry the old code published. The old code runs as itself, in a child process. It reads archive
format 1.0 only, so the archives it is given are written as 1.0 (``small_archive(format_version=...)``);
a 2.0 archive it refuses by the footer's major version (spec/FORMAT.md §2, §13), as the last test shows."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("cryptography")

from registry_servers import ROOT, subprocess_env
from registry_support import isolated, small_archive  # noqa: F401 - fixture
from trust_support import make_keys, write_policy

from karchive.errors import UntrustedArchiveError
from karchive.registry import Registry
from karchive.trust import reasons

pytestmark = pytest.mark.usefixtures("isolated")

#: The archive format the old code reads.
V1 = (1, 0)

#: main just before registry signatures (the merge of the trust core, issue 13 round 1, and later work).
OLD = "84e2c78efb9f4c2a6618f1842fd6dfc8a591a192"


@pytest.fixture(scope="module")
def old_karchive(tmp_path_factory) -> Path:
    """The karchive package as it was at ``OLD``, unpacked from git (skipped without the history)."""
    if shutil.which("git") is None:
        pytest.skip("needs git to take the old code from history")
    probe = subprocess.run(["git", "cat-file", "-e", f"{OLD}^{{commit}}"], cwd=ROOT, capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"commit {OLD[:12]} is not in this clone (shallow?)")
    root = tmp_path_factory.mktemp("old-karchive")
    archive = subprocess.run(
        ["git", "archive", "--format=tar", OLD, "karchive"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(root)], input=archive, check=True)
    assert not (root / "karchive" / "registry" / "signatures.py").exists()
    return root


def _old(old_karchive: Path, code: str, tmp_path: Path) -> dict:
    env = subprocess_env()
    env["PYTHONPATH"] = str(old_karchive)  # the old package only, not this checkout
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(tmp_path),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_old_code_reads_a_registry_with_signatures(old_karchive: Path, tmp_path: Path) -> None:
    keys = make_keys()
    reg = Registry(tmp_path / "registry", cache=tmp_path / "w")
    reg.publish(small_archive("examples", "0.1.0", format_version=V1), sign=[keys["ci"], keys["alice"]])
    reg.publish(small_archive("examples", "0.2.0", format_version=V1), sign=[keys["ci"]])
    out = _old(
        old_karchive,
        f"""
        import json, karchive
        from karchive.registry import Registry
        reg = Registry({str(tmp_path / "registry")!r}, cache={str(tmp_path / "old-cache")!r})
        assert karchive.__file__.startswith({str(old_karchive)!r}), karchive.__file__
        pulled = reg.pull("examples@0.1.0")
        reader = reg.open("examples")
        reg.publish({str(small_archive("examples", "0.3.0", format_version=V1))!r})
        reg.reindex()
        print(json.dumps({{"names": reg.names(), "versions": [r.version for r in reg.list("examples")],
                          "pulled": pulled.downloaded, "latest": reader.manifest["version"]}}))
    """,
        tmp_path,
    )
    assert out == {"names": ["examples"], "versions": ["0.1.0", "0.2.0", "0.3.0"], "pulled": True, "latest": "0.2.0"}
    # What the old code wrote (a version, reindexed indexes) leaves the signatures intact.
    policy = write_policy(tmp_path / "p.toml", keys)
    fresh = Registry(tmp_path / "registry", cache=tmp_path / "new-cache")
    assert len(fresh.open("examples@0.1.0", trust=policy).verdict.signers) == 1
    assert sorted(fresh.signers("examples@0.1.0")) == sorted([keys["ci"].key_id, keys["alice"].key_id])
    # The old code's cache: its receipts predate ctime, so each blob is verified once more, then reused.
    shared = Registry(tmp_path / "registry", cache=tmp_path / "old-cache")
    assert not shared.pull("examples@0.1.0").downloaded and shared.cache.verifications == 1
    assert shared.open("examples@0.1.0").manifest["version"] == "0.1.0" and shared.cache.verifications == 1


def test_a_registry_the_old_code_published_is_read_and_is_simply_unsigned(old_karchive: Path, tmp_path: Path) -> None:
    _old(
        old_karchive,
        f"""
        import json
        from karchive.registry import Registry
        reg = Registry({str(tmp_path / "registry")!r}, cache={str(tmp_path / "old-cache")!r})
        reg.publish({str(small_archive("examples", "0.1.0", format_version=V1))!r})
        print(json.dumps({{}}))
    """,
        tmp_path,
    )
    reg = Registry(tmp_path / "registry", cache=tmp_path / "cache")
    assert reg.pull("examples@0.1.0").downloaded
    assert reg.open("examples").manifest["version"] == "0.1.0"
    keys = make_keys()
    with pytest.raises(UntrustedArchiveError) as e:
        reg.open("examples@0.1.0", trust=write_policy(tmp_path / "p.toml", keys))
    assert e.value.reason == reasons.UNSIGNED
    assert reg.open("examples@0.1.0", trust=write_policy(tmp_path / "p0.toml", keys, threshold=0))
    # Signing it now is additive: the old version record and blob stay byte-for-byte the same.
    record_file = next((tmp_path / "registry" / "names" / "examples" / "versions").glob("*.json"))
    before = record_file.read_bytes()
    reg.sign("examples@0.1.0", keys["ci"])
    assert record_file.read_bytes() == before
    assert reg.open("examples@0.1.0", trust=tmp_path / "p.toml")


def test_the_old_code_refuses_a_2_0_archive_by_its_version(old_karchive: Path, tmp_path: Path) -> None:
    """A new major is refused cleanly, naming both versions, rather than misread (spec/FORMAT.md §2)."""
    out = _old(
        old_karchive,
        f"""
        import json
        from karchive.errors import UnsupportedVersionError
        from karchive.format.reader import ArchiveReader
        try:
            ArchiveReader.from_path({str(small_archive("examples", "0.4.0"))!r})
        except UnsupportedVersionError as exc:
            print(json.dumps({{"refused": str(exc)}}))
        else:
            print(json.dumps({{"refused": None}}))
    """,
        tmp_path,
    )
    from karchive.format.constants import FORMAT_VERSION

    written = f"{FORMAT_VERSION[0]}.{FORMAT_VERSION[1]}"  # 2.x: what this karchive writes
    assert out["refused"] and written in out["refused"] and "1.0" in out["refused"]
