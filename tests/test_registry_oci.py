"""oci:// registries against a real one: the CNCF distribution registry (Debian's docker-registry) on
127.0.0.1 with htpasswd authentication, reached through oras-py; a fault-injecting proxy in front of it
for throttling, tampering and a registry killed mid-upload (tests/oci_servers.py).

Everything goes through the same ``Registry`` as directories and buckets (spec/REGISTRY.md §10)."""

from __future__ import annotations

import json
import threading
import time
import uuid
from pathlib import Path

import pytest
from oci_servers import FaultProxy, OciRegistry, env_for, require_registry
from registry_support import big_archive, isolated, run_cli, small_archive  # noqa: F401 - fixture

from karchive.errors import (
    ConflictError,
    IntegrityError,
    LockfileMismatchError,
    NotFoundError,
    RegistryError,
    TransferError,
)
from karchive.registry import OpenOptions, Registry, RetryPolicy
from karchive.registry import oci_layout as L

pytestmark = pytest.mark.usefixtures("isolated")
FAST = RetryPolicy(attempts=4, base_delay=0.01, timeout=30)


@pytest.fixture(scope="module")
def oci():
    require_registry()
    reg = OciRegistry()
    yield reg
    reg.close()


@pytest.fixture
def proxy(oci: OciRegistry):
    p = FaultProxy(oci)
    yield p
    p.close()


def ns() -> str:
    return "t" + uuid.uuid4().hex[:10]


def registry(
    where: OciRegistry | FaultProxy, upstream: OciRegistry, cache: Path, namespace: str, **options: object
) -> Registry:
    return Registry(where.url(namespace), upstream.options(**options), cache=cache, retry=FAST)


def raw(oci: OciRegistry):
    import requests

    s = requests.Session()
    s.auth = (oci.options()["username"], oci.options()["password"])
    return s


def test_publish_list_pull_open_and_the_artifact_layout(oci: OciRegistry, proxy: FaultProxy, tmp_path: Path) -> None:
    space = ns()
    archive = small_archive("examples", "0.1.0")
    pub = registry(proxy, oci, tmp_path / "w", space).publish(archive)
    assert pub.created and pub.record.sha256

    # The artifact as any OCI client sees it: karchive's artifactType, one .karc layer, annotations.
    http = raw(oci)
    got = http.get(f"http://{oci.host}/v2/{space}/examples/manifests/0.1.0", headers={"Accept": L.MANIFEST_TYPE})
    manifest = got.json()
    assert manifest["artifactType"] == L.ARCHIVE_ARTIFACT and manifest["config"]["mediaType"] == L.EMPTY_TYPE
    assert [(x["mediaType"], x["digest"], x["size"]) for x in manifest["layers"]] == [
        (L.ARCHIVE_LAYER, f"sha256:{pub.record.sha256}", archive.stat().st_size)
    ]
    notes = manifest["annotations"]
    assert (notes[L.A_NAME], notes[L.A_VERSION], notes[L.A_TARGETS]) == ("examples", "0.1.0", "cuda:90")
    assert notes[L.A_FORMAT].startswith("2.") and notes[L.A_TRITON]
    digest = L.digest_of(got.content)

    # ls reads annotations only: no blob request at all.
    mark = proxy.mark()
    reader = registry(proxy, oci, tmp_path / "r", space)
    assert reader.names() == ["examples"]
    [record] = reader.list()
    assert (record.ref, record.sha256, record.variants, record.targets, record.manifest) == (
        "examples@0.1.0",
        pub.record.sha256,
        1,
        ("cuda:90",),
        digest,
    )
    assert not [r for r in proxy.log[mark:] if "/blobs/" in r[1]]

    pulled = reader.pull("examples@0.1.0", tmp_path / "out.karc")
    assert pulled.downloaded and (tmp_path / "out.karc").read_bytes() == archive.read_bytes()
    # Publishing the same bytes again is a no-op, and the manifest is a function of the archive alone.
    again = registry(oci, oci, tmp_path / "w2", space).publish(archive)
    assert not again.created
    assert (
        L.digest_of(
            http.get(
                f"http://{oci.host}/v2/{space}/examples/manifests/0.1.0", headers={"Accept": L.MANIFEST_TYPE}
            ).content
        )
        == digest
    )


def test_a_namespace_without_archives_is_not_an_empty_registry(oci: OciRegistry, tmp_path: Path) -> None:
    with pytest.raises(NotFoundError, match="a mistyped location"):
        registry(oci, oci, tmp_path / "c", ns()).names()


def test_an_existing_tag_is_never_moved_to_other_bytes(oci: OciRegistry, tmp_path: Path) -> None:
    space = ns()
    first = registry(oci, oci, tmp_path / "a", space).publish(small_archive("examples", "0.1.0"))
    with pytest.raises(ConflictError, match="already exists .* with different bytes"):
        registry(oci, oci, tmp_path / "b", space).publish(small_archive("examples", "0.1.0", block=256))
    assert registry(oci, oci, tmp_path / "c", space).resolve("examples@0.1.0").sha256 == first.record.sha256


def test_credentials_missing_and_wrong_are_refused_clearly(oci: OciRegistry, tmp_path: Path) -> None:
    space = ns()
    registry(oci, oci, tmp_path / "w", space).publish(small_archive("examples", "0.1.0"))
    anonymous = Registry(oci.url(space), {}, cache=tmp_path / "a", retry=FAST)
    with pytest.raises(RegistryError, match="asks for credentials and none were given"):
        anonymous.pull("examples@0.1.0")
    wrong = Registry(oci.url(space), {"username": "kernels", "password": "nope"}, cache=tmp_path / "b", retry=FAST)
    with pytest.raises(RegistryError, match="refused the credentials given"):
        wrong.pull("examples@0.1.0")
    with pytest.raises(RegistryError, match="refused the credentials given"):
        wrong.publish(small_archive("examples", "0.2.0"))
    # The CLI says the same in one line, through KARCHIVE_STORAGE_OPTIONS.
    env = {
        **env_for(oci, oci),
        "KARCHIVE_REGISTRY": oci.url(space),
        "KARCHIVE_STORAGE_OPTIONS": json.dumps({"username": "kernels", "password": "nope"}),
    }
    out = run_cli("pull", "examples@0.1.0", env=env)
    assert out.returncode != 0 and "refused the credentials" in out.stderr and "Traceback" not in out.stderr


def test_a_python_process_finds_credentials_in_dockers_configuration(
    oci: OciRegistry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """karchive.open / KARCHIVE_SERVE in a server: no storage options, `docker login`'s credentials."""
    import base64

    space = ns()
    registry(oci, oci, tmp_path / "w", space).publish(small_archive("examples", "0.1.0"))
    auth = base64.b64encode(f"{oci.options()['username']}:{oci.options()['password']}".encode()).decode()
    (tmp_path / "docker").mkdir()
    (tmp_path / "docker" / "config.json").write_text(json.dumps({"auths": {oci.host: {"auth": auth}}}))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))
    from karchive.resolve import open as open_ref

    reader = open_ref("examples@0.1.0", registry=oci.url(space), cache_dir=tmp_path / "c")
    assert reader.header["name"] == "examples"


def test_cli_publish_ls_pull_through_an_oci_registry(oci: OciRegistry, tmp_path: Path) -> None:
    space = ns()
    env = {**env_for(oci, oci), "KARCHIVE_REGISTRY": oci.url(space)}
    out = run_cli("publish", str(small_archive("examples", "0.1.0")), "--create-registry", env=env)
    assert out.returncode == 0, out.stderr
    listed = run_cli("ls", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    [shown] = json.loads(listed.stdout)["archives"]  # from the manifest's annotations: no blob read
    assert (shown["name"], shown["version"], shown["targets"]) == ("examples", "0.1.0", ["cuda:90"])
    assert shown["format_version"].startswith("2.") and shown["triton"] and shown["manifest"].startswith("sha256:")
    locked = run_cli("lock", "examples@0.1.0", "-o", str(tmp_path / "karchive.lock"), env=env)
    assert locked.returncode == 0, locked.stderr
    pin = json.loads((tmp_path / "karchive.lock").read_text())["archives"]["examples"]
    assert pin["manifest"].startswith("sha256:")
    verified = run_cli("verify", "examples@0.1.0", env=env)
    assert verified.returncode == 0, verified.stderr
    same = run_cli("diff", "examples@0.1.0", "examples@0.1.0", env=env)
    assert same.returncode == 0, same.stderr
    pulled = run_cli("pull", "examples@0.1.0", "-o", str(tmp_path / "x.karc"), env=env)
    assert pulled.returncode == 0, pulled.stderr
    assert (tmp_path / "x.karc").read_bytes() == small_archive("examples", "0.1.0").read_bytes()


def test_concurrent_publishers_of_one_version_one_wins(oci: OciRegistry, tmp_path: Path) -> None:
    space = ns()
    archives = [small_archive("examples", "0.1.0", block=b) for b in (128, 256, 512, 1024)]
    gate = threading.Barrier(len(archives))
    results: list[object] = [None] * len(archives)

    def publish(i: int) -> None:
        reg = registry(oci, oci, tmp_path / f"p{i}", space)
        gate.wait()
        try:
            results[i] = reg.publish(archives[i])
        except Exception as exc:  # collected and checked below
            results[i] = exc

    threads = [threading.Thread(target=publish, args=(i,)) for i in range(len(archives))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    winners = [r for r in results if not isinstance(r, Exception)]
    losers = [r for r in results if isinstance(r, Exception)]
    assert len(winners) == 1 and winners[0].created, results  # type: ignore[union-attr]
    assert all(isinstance(e, ConflictError) and "Versions are immutable" in str(e) for e in losers), losers
    served = registry(oci, oci, tmp_path / "r", space).pull("examples@0.1.0")
    assert served.record.sha256 == winners[0].record.sha256  # type: ignore[union-attr]


def test_registry_killed_mid_push_serves_nothing_half_published(tmp_path: Path) -> None:
    require_registry()
    upstream = OciRegistry()
    proxy = FaultProxy(upstream)
    try:
        space = ns()
        archive = small_archive("examples", "0.1.0")

        def kill_on_blob_upload(p: FaultProxy, method: str, path: str, headers: dict) -> None:
            if method == "PUT" and "/blobs/uploads/" in path and "digest=" in path:
                upstream.stop()  # the registry dies while the archive's bytes are on their way
            return None

        proxy.fault = kill_on_blob_upload
        with pytest.raises((TransferError, RegistryError)):
            Registry(
                proxy.url(space),
                upstream.options(),
                cache=tmp_path / "w",
                retry=RetryPolicy(attempts=2, base_delay=0.01, timeout=10),
            ).publish(archive)
        proxy.fault = None
        upstream.restart()
        reader = Registry(upstream.url(space), upstream.options(), cache=tmp_path / "r", retry=FAST)
        with pytest.raises(NotFoundError):
            reader.pull("examples@0.1.0")
        # ... and the publish, run again, completes.
        assert (
            Registry(upstream.url(space), upstream.options(), cache=tmp_path / "w2", retry=FAST)
            .publish(archive)
            .created
        )
        assert reader.pull("examples@0.1.0").record.size == archive.stat().st_size
    finally:
        proxy.close()
        upstream.close()


def test_429_and_503_with_retry_after_are_waited_for(oci: OciRegistry, proxy: FaultProxy, tmp_path: Path) -> None:
    space = ns()
    registry(oci, oci, tmp_path / "w", space).publish(small_archive("examples", "0.1.0"))
    answers = [(429, {"Retry-After": "1"}), (503, {"Retry-After": "1"})]

    def throttle(p: FaultProxy, method: str, path: str, headers: dict):
        if "/manifests/0.1.0" in path and answers:
            status, extra = answers.pop(0)
            return status, extra, b'{"errors":[{"code":"TOOMANYREQUESTS"}]}'
        return None

    proxy.fault = throttle
    start = time.monotonic()
    pulled = registry(proxy, oci, tmp_path / "r", space).pull("examples@0.1.0")
    assert pulled.downloaded and [f[2] for f in proxy.faults] == [429, 503]
    assert time.monotonic() - start >= 1.9  # both Retry-After honoured (the jittered backoff alone is ~0.02 s)

    proxy.fault = lambda p, m, path, h: (503, {"Retry-After": "0"}, b"") if "/manifests/" in path else None
    with pytest.raises(TransferError, match="failed after 4 attempts.*HTTP 503"):
        registry(proxy, oci, tmp_path / "r2", space).pull("examples@0.1.0")


def test_a_blob_that_does_not_match_its_digest_is_refused(oci: OciRegistry, proxy: FaultProxy, tmp_path: Path) -> None:
    space = ns()
    registry(oci, oci, tmp_path / "w", space).publish(small_archive("examples", "0.1.0"))

    def flip(method: str, path: str, status: int, body: bytes) -> bytes:
        if "/blobs/sha256:" in path and len(body) > 100:  # one bit of the footer's index digest
            return body[:-5] + bytes([body[-5] ^ 1]) + body[-4:]
        return body

    proxy.rewrite = flip
    hostile = registry(proxy, oci, tmp_path / "r", space)
    with pytest.raises(IntegrityError):
        hostile.pull("examples@0.1.0", tmp_path / "out.karc")
    assert not (tmp_path / "out.karc").exists()
    assert not list((tmp_path / "r").rglob("*.karc")), "nothing unverified entered the cache"
    with pytest.raises(IntegrityError, match="tampered"):  # the ranged read: index and footer checked
        registry(proxy, oci, tmp_path / "r2", space).open("examples@0.1.0", fetch="lazy")


def test_a_tag_moved_by_someone_else_is_refused_under_a_lockfile(oci: OciRegistry, tmp_path: Path) -> None:
    space = ns()
    reg = registry(oci, oci, tmp_path / "w", space)
    reg.publish(small_archive("examples", "0.1.0"))
    lock, _ = registry(oci, oci, tmp_path / "l", space).lock(["examples@0.1.0"])
    lock.write(tmp_path / "karchive.lock")
    assert lock.pins["examples"].manifest.startswith("sha256:")
    # Another client (not karchive) re-tags 0.1.0 to a manifest with other bytes.
    other = registry(oci, oci, tmp_path / "o", space)
    other.publish(small_archive("examples", "0.2.0", block=256))
    http = raw(oci)
    moved = http.get(f"http://{oci.host}/v2/{space}/examples/manifests/0.2.0", headers={"Accept": L.MANIFEST_TYPE})
    doc = moved.json()
    doc["annotations"][L.A_VERSION] = "0.1.0"
    body = L.encode(doc)
    assert (
        http.put(
            f"http://{oci.host}/v2/{space}/examples/manifests/0.1.0",
            data=body,
            headers={"Content-Type": L.MANIFEST_TYPE},
        ).status_code
        == 201
    )
    with pytest.raises(LockfileMismatchError, match="pins sha256"):
        registry(oci, oci, tmp_path / "fresh", space).pull(
            "examples@0.1.0", options=OpenOptions(lockfile=tmp_path / "karchive.lock")
        )


def test_lazy_open_of_a_large_archive_reads_ranges_only(oci: OciRegistry, proxy: FaultProxy, tmp_path: Path) -> None:
    space = ns()
    big = big_archive()
    record = registry(oci, oci, tmp_path / "w", space).publish(big).record
    mark = proxy.mark()
    reader = registry(proxy, oci, tmp_path / "r", space).open("big@1.0.0", fetch="lazy")
    variant = reader.manifest["variants"][200]
    reader.read(variant["files"]["binary"]["path"])
    blob = [r for r in proxy.log[mark:] if f"/blobs/sha256:{record.sha256}" in r[1]]
    served = sum(r[4] for r in blob)
    print(f"\nOCI lazy open: {record.size} bytes archive, {len(blob)} blob range requests, {served} bytes")
    assert blob and all(r[0] == "GET" and r[3].startswith("bytes=") and r[2] == 206 for r in blob)
    assert len(blob) <= 3 and served < record.size / 3


# -- signatures as referrers ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def keys():
    pytest.importorskip("cryptography")
    from trust_support import make_keys

    return make_keys()


def _policy(tmp_path: Path, keys, signer: str = "ci"):
    from trust_support import load_policy, write_policy

    return load_policy(write_policy(tmp_path / f"policy-{signer}.toml", keys, signers=(signer,)))


def _fallback(oci: OciRegistry, space: str, manifest: str) -> str:
    return f"http://{oci.host}/v2/{space}/examples/manifests/{L.fallback_tag(manifest)}"


def test_signatures_are_referrers_found_and_enforced_at_pull_and_open(oci: OciRegistry, keys, tmp_path: Path) -> None:
    from karchive.errors import UntrustedArchiveError

    space = ns()
    pub = registry(oci, oci, tmp_path / "w", space).publish(small_archive("examples", "0.1.0"), sign=[keys["ci"]])
    assert [(s.key_id, s.created) for s in pub.signatures] == [(keys["ci"].key_id, True)]
    reader = registry(oci, oci, tmp_path / "r", space)
    record = reader.resolve("examples@0.1.0")
    # distribution 2.8 serves no referrers API: the referrer is listed under the tag-schema fallback.
    http = raw(oci)
    assert http.get(f"http://{oci.host}/v2/{space}/examples/referrers/{record.manifest}").status_code == 404
    index = http.get(_fallback(oci, space, record.manifest), headers={"Accept": L.INDEX_TYPE}).json()
    [entry] = index["manifests"]
    assert entry["artifactType"] == L.SIGNATURE_ARTIFACT and entry["annotations"][L.A_KEY] == keys["ci"].key_id
    referrer = http.get(
        f"http://{oci.host}/v2/{space}/examples/manifests/{entry['digest']}", headers={"Accept": L.MANIFEST_TYPE}
    ).json()
    assert referrer["subject"]["digest"] == record.manifest and referrer["layers"][0]["mediaType"] == L.SIGNATURE_LAYER
    assert reader.signers("examples@0.1.0") == [keys["ci"].key_id]

    good = _policy(tmp_path, keys)
    assert reader.pull("examples@0.1.0", options=OpenOptions(trust=good)).trust.key_ids == (keys["ci"].key_id,)
    opened = registry(oci, oci, tmp_path / "lazy", space).open("examples@0.1.0", trust=good, fetch="lazy")
    assert opened.verdict is not None and opened.verdict.key_ids == (keys["ci"].key_id,)
    with pytest.raises(UntrustedArchiveError):
        registry(oci, oci, tmp_path / "o", space).pull(
            "examples@0.1.0", options=OpenOptions(trust=_policy(tmp_path, keys, "alice"))
        )
    # Signing later adds a second referrer without losing the first.
    assert registry(oci, oci, tmp_path / "s", space).sign("examples@0.1.0", keys["alice"]).signature.created
    assert sorted(registry(oci, oci, tmp_path / "s2", space).signers("examples@0.1.0")) == sorted(
        [keys["ci"].key_id, keys["alice"].key_id]
    )


def test_missing_swapped_or_tampered_referrers_are_refused(oci: OciRegistry, keys, tmp_path: Path) -> None:
    from trust_support import tamper_envelope

    from karchive.errors import UntrustedArchiveError

    space = ns()
    writer = registry(oci, oci, tmp_path / "w", space)
    writer.publish(small_archive("examples", "0.1.0"), sign=[keys["ci"]])
    writer.publish(small_archive("examples", "0.2.0", block=256), sign=[keys["ci"]])
    policy = _policy(tmp_path, keys)
    probe = registry(oci, oci, tmp_path / "p", space)
    first, second = probe.resolve("examples@0.1.0"), probe.resolve("examples@0.2.0")
    http = raw(oci)
    accept = {"Accept": L.INDEX_TYPE}
    index_one = http.get(_fallback(oci, space, first.manifest), headers=accept).content
    index_two = http.get(_fallback(oci, space, second.manifest), headers=accept).content

    def put_index(manifest: str, body: bytes) -> None:
        assert (
            http.put(_fallback(oci, space, manifest), data=body, headers={"Content-Type": L.INDEX_TYPE}).status_code
            == 201
        )

    # Missing: the referrers index emptied.
    put_index(first.manifest, L.encode({"schemaVersion": 2, "mediaType": L.INDEX_TYPE, "manifests": []}))
    with pytest.raises(UntrustedArchiveError):
        registry(oci, oci, tmp_path / "a", space).pull("examples@0.1.0", options=OpenOptions(trust=policy))
    # Swapped: 0.2.0's (valid) signature listed for 0.1.0.
    put_index(first.manifest, index_two)
    with pytest.raises((UntrustedArchiveError, IntegrityError)):
        registry(oci, oci, tmp_path / "b", space).pull("examples@0.1.0", options=OpenOptions(trust=policy))
    # Tampered: a forged envelope in a new referrer of the right subject, under the same key.
    entry = json.loads(index_one)["manifests"][0]
    old = http.get(
        f"http://{oci.host}/v2/{space}/examples/manifests/{entry['digest']}", headers={"Accept": L.MANIFEST_TYPE}
    ).json()
    envelope = http.get(f"http://{oci.host}/v2/{space}/examples/blobs/{old['layers'][0]['digest']}").content
    forged = tamper_envelope(envelope)
    start = http.post(f"http://{oci.host}/v2/{space}/examples/blobs/uploads/")
    location = start.headers["Location"]
    location = location if location.startswith("http") else f"http://{oci.host}{location}"
    assert http.put(location, params={"digest": L.digest_of(forged)}, data=forged).status_code == 201
    body = L.signature_manifest(old["subject"], keys["ci"].key_id, forged)
    assert (
        http.put(
            f"http://{oci.host}/v2/{space}/examples/manifests/{L.digest_of(body)}",
            data=body,
            headers={"Content-Type": L.MANIFEST_TYPE},
        ).status_code
        == 201
    )
    put_index(
        first.manifest,
        L.encode(
            {
                "schemaVersion": 2,
                "mediaType": L.INDEX_TYPE,
                "manifests": [{**entry, "digest": L.digest_of(body), "size": len(body)}],
            }
        ),
    )
    with pytest.raises(UntrustedArchiveError):
        registry(oci, oci, tmp_path / "c", space).pull("examples@0.1.0", options=OpenOptions(trust=policy))
    # Put back, the original referrer counts again.
    put_index(first.manifest, index_one)
    assert registry(oci, oci, tmp_path / "d", space).pull("examples@0.1.0", options=OpenOptions(trust=policy)).trust


# -- Kubernetes image volumes -----------------------------------------------------------------------
def _unpack_layout_layer(layout: Path, out: Path) -> dict:
    """What a container runtime does with an image volume, from the OCI layout on disk: index →
    manifest → the one layer, unpacked (tarfile's 'data' filter: no path escapes), then read-only."""
    import tarfile

    index = json.loads((layout / "index.json").read_text())
    [desc] = index["manifests"]
    manifest_bytes = (layout / "blobs" / "sha256" / desc["digest"][7:]).read_bytes()
    assert L.digest_of(manifest_bytes) == desc["digest"]
    manifest = json.loads(manifest_bytes)
    [layer] = manifest["layers"]
    blob = layout / "blobs" / "sha256" / layer["digest"][7:]
    assert L.digest_of(blob.read_bytes()) == layer["digest"] and layer["mediaType"].endswith(".tar")
    with tarfile.open(blob) as tar:
        tar.extractall(out, filter="data")
    _read_only(out)
    return {"index": index, "manifest": manifest}


def _read_only(root: Path) -> None:
    for path in sorted(root.rglob("*"), reverse=True):
        path.chmod(0o555 if path.is_dir() else 0o444)


def _open_from_mount(mount: Path, tmp_path: Path, ref: str = "examples") -> subprocess.CompletedProcess:
    """A pod's view: the mount, a writable cache, no registry client configured beyond the two variables."""
    code = (
        "import karchive.resolve as r; rd = r.open(%r); "
        "print(rd.header['name'], rd.header['version'], rd.verdict)" % ref
    )
    env = {
        "KARCHIVE_REGISTRY": str(mount / "karchive" / "registry"),
        "KARCHIVE_LOCKFILE": str(mount / "karchive" / "karchive.lock"),
        "XDG_CACHE_HOME": str(tmp_path / "pod-cache"),
        "KARCHIVE_STORAGE_OPTIONS": "",
    }
    import sys

    from registry_servers import subprocess_env

    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=subprocess_env(**env), timeout=120
    )


import subprocess  # noqa: E402


def test_oci_image_layout_mounted_read_only_opens_with_digests_checked(tmp_path: Path) -> None:
    one, two = small_archive("examples", "0.1.0"), small_archive("other", "2.0.0", block=256)
    out = run_cli("oci-image", str(one), str(two), "-o", str(tmp_path / "layout"), "--tag", "kernels-1", "--json")
    assert out.returncode == 0, out.stderr
    made = json.loads(out.stdout)
    assert made["archives"] == ["examples@0.1.0", "other@2.0.0"] and made["tag"] == "kernels-1"
    assert json.loads((tmp_path / "layout" / "oci-layout").read_text()) == {"imageLayoutVersion": "1.0.0"}
    seen = _unpack_layout_layer(tmp_path / "layout", tmp_path / "mount")
    assert seen["index"]["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"] == "kernels-1"
    mount = tmp_path / "mount"
    assert (mount / "karchive" / "registry" / "blobs" / "sha256").is_dir()
    opened = _open_from_mount(mount, tmp_path)
    assert opened.returncode == 0 and opened.stdout.split()[:2] == ["examples", "0.1.0"], opened.stderr
    assert _open_from_mount(mount, tmp_path, "other").stdout.split()[:2] == ["other", "2.0.0"]

    # A changed byte in the mounted archive is refused.
    bad = tmp_path / "bad"
    _unpack_layout_layer(tmp_path / "layout", bad)
    for p in sorted((bad / "karchive" / "registry" / "blobs" / "sha256").glob("*.karc")):
        p.chmod(0o644)
        data = bytearray(p.read_bytes())
        data[100] ^= 1
        p.write_bytes(bytes(data))
    refused = _open_from_mount(bad, tmp_path / "b")
    assert refused.returncode != 0 and ("IntegrityError" in refused.stderr or "DigestMismatch" in refused.stderr), (
        refused.stderr[-2000:]
    )


def test_oci_image_pushed_then_its_layer_pulled_and_opened(oci: OciRegistry, tmp_path: Path) -> None:
    import tarfile

    space = ns()
    env = {"KARCHIVE_STORAGE_OPTIONS": json.dumps(oci.options())}
    target = f"oci://{oci.host}/{space}/kernel-cache"
    out = run_cli("oci-image", str(small_archive("examples", "0.1.0")), "-o", target, "--json", env=env)
    assert out.returncode == 0, out.stderr
    made = json.loads(out.stdout)
    assert made["tag"] == "0.1.0"
    http = raw(oci)
    manifest = http.get(
        f"http://{oci.host}/v2/{space}/kernel-cache/manifests/0.1.0", headers={"Accept": L.MANIFEST_TYPE}
    )
    assert L.digest_of(manifest.content) == made["manifest"]
    [layer] = manifest.json()["layers"]
    blob = http.get(f"http://{oci.host}/v2/{space}/kernel-cache/blobs/{layer['digest']}").content
    assert L.digest_of(blob) == layer["digest"]
    (tmp_path / "layer.tar").write_bytes(blob)
    with tarfile.open(tmp_path / "layer.tar") as tar:
        tar.extractall(tmp_path / "mount", filter="data")
    _read_only(tmp_path / "mount")
    opened = _open_from_mount(tmp_path / "mount", tmp_path)
    assert opened.returncode == 0 and opened.stdout.split()[:2] == ["examples", "0.1.0"], opened.stderr
    # The tag is never moved to another image.
    other = run_cli("oci-image", str(small_archive("examples", "0.1.0", block=256)), "-o", target, env=env)
    assert other.returncode != 0 and "never moves a tag" in other.stderr


# -- signed registry metadata: rollback and freeze on mutable tags ----------------------------------
def test_signed_registry_metadata_on_oci_refuses_a_moved_tag(oci: OciRegistry, keys, tmp_path: Path) -> None:
    from trust_support import policy_text

    from karchive.errors import RegistryMetadataError
    from karchive.trust import reasons

    space = ns()
    writer = registry(oci, oci, tmp_path / "w", space)
    writer.publish(small_archive("examples", "0.1.0"), sign=[keys["ci"]], registry_keys=[keys["alice"]])
    writer.publish(small_archive("examples", "0.2.0", block=256), sign=[keys["ci"]], registry_keys=[keys["alice"]])
    text = policy_text(keys, signers=("ci",), extra_keys=("alice",))
    text += '\n[registry]\nrequire_signed_metadata = true\nkeys = ["alice"]\nthreshold = 1\n'
    (tmp_path / "policy.toml").write_text(text)
    policy = tmp_path / "policy.toml"
    # The documents are artifacts of NAMESPACE/karchive/metadata, never an archive's repository.
    tags = raw(oci).get(f"http://{oci.host}/v2/{space}/karchive/metadata/tags/list").json()["tags"]
    assert "timestamp" in tags and {"snapshot-1", "snapshot-2"} <= set(tags)
    assert registry(oci, oci, tmp_path / "r", space).names() == ["examples"]
    ok = registry(oci, oci, tmp_path / "ok", space).pull("examples", options=OpenOptions(trust=policy))
    assert ok.record.version == "0.2.0"

    # Someone with push rights re-tags 0.2.0 to other bytes: the snapshot's digest no longer matches.
    http = raw(oci)
    old = http.get(f"http://{oci.host}/v2/{space}/examples/manifests/0.1.0", headers={"Accept": L.MANIFEST_TYPE}).json()
    old["annotations"][L.A_VERSION] = "0.2.0"
    assert (
        http.put(
            f"http://{oci.host}/v2/{space}/examples/manifests/0.2.0",
            data=L.encode(old),
            headers={"Content-Type": L.MANIFEST_TYPE},
        ).status_code
        == 201
    )
    with pytest.raises(RegistryMetadataError) as refused:
        registry(oci, oci, tmp_path / "moved", space).pull("examples@0.2.0", options=OpenOptions(trust=policy))
    assert refused.value.reason == reasons.METADATA_MISMATCH


# -- no registry needed: grammar, hostile manifests, Retry-After ------------------------------------
def test_names_and_versions_that_cannot_be_oci_repositories_or_tags_are_refused_not_rewritten() -> None:
    from karchive.errors import RegistryValueError
    from karchive.registry.oci_store import parse_oci_url

    assert L.repository_component("flash-attn.v2") == "flash-attn.v2"
    with pytest.raises(RegistryValueError, match="lower case"):
        L.repository_component("FlashAttn")
    assert L.version_tag("1.2.3-rc.1") == "1.2.3-rc.1"
    with pytest.raises(RegistryValueError, match="cannot be an OCI tag"):
        L.version_tag("2.0.0+cu12")
    with pytest.raises(RegistryValueError, match="cannot be an OCI tag"):
        L.version_tag("sha256-" + "a" * 64)
    assert parse_oci_url("oci://user:pw@Reg.Example:5000/team/kernels") == ("reg.example:5000", "team/kernels")
    for bad in ("oci://", "oci://h/Team", "oci://h/a?x=1", "s3://b/k"):
        with pytest.raises(RegistryValueError):
            parse_oci_url(bad)


@pytest.mark.parametrize(
    "change, says",
    [
        (lambda m: m.update(artifactType="application/vnd.oci.image.config.v1+json"), "not a karchive archive"),
        (lambda m: m["layers"].append(dict(m["layers"][0])), "exactly one"),
        (lambda m: m["layers"][0].update(digest="sha512:" + "0" * 128), "not sha256"),
        (lambda m: m["layers"][0].update(size=-1), "non-negative"),
        (lambda m: m["annotations"].update({L.A_VARIANTS: "many"}), "not a count"),
        (lambda m: m["annotations"].update({L.A_NAME: "../etc"}), "corrupt version record"),
    ],
)
def test_a_hostile_archive_manifest_is_a_named_error(change, says: str) -> None:
    from karchive.errors import DamagedRegistryError
    from karchive.registry.records import VersionRecord

    record = VersionRecord("examples", "0.1.0", "a" * 64, 10, "b" * 64, variants=1, targets=("cuda:90",))
    doc = json.loads(L.archive_manifest(record))
    assert L.record_from_manifest(L.encode(doc), "m", "sha256:" + "c" * 64).sha256 == "a" * 64
    change(doc)
    with pytest.raises(DamagedRegistryError, match=says):
        L.record_from_manifest(L.encode(doc), "m", "sha256:" + "c" * 64)


def test_retry_after_is_honoured_within_a_cap() -> None:
    import email.utils

    from karchive.registry.oci_client import OciHttpError, retry_after
    from karchive.registry.retry import MAX_RETRY_AFTER

    assert retry_after("3") == 3.0 and retry_after(None) is None and retry_after("soon") is None
    later = email.utils.formatdate(time.time() + 20, usegmt=True)
    assert 17 < (retry_after(later) or 0) <= 20
    policy = RetryPolicy(base_delay=0.01)
    assert policy.wait(0, OciHttpError(429, "x", 2.0)) == 2.0
    assert policy.wait(0, OciHttpError(503, "x", 3600.0)) == MAX_RETRY_AFTER
    assert policy.wait(0, OciHttpError(503, "x")) <= 0.01


def test_the_referrers_api_is_used_where_the_registry_serves_it(
    oci: OciRegistry, proxy: FaultProxy, keys, tmp_path: Path
) -> None:
    """distribution 2.8 has no referrers API: the proxy serves one (from the fallback index, filtered by
    subject as the API is), and karchive reads it instead of the fallback tag."""
    import re

    space = ns()
    registry(oci, oci, tmp_path / "w", space).publish(small_archive("examples", "0.1.0"), sign=[keys["ci"]])
    http = raw(oci)
    asked: list[str] = []

    def referrers_api(p: FaultProxy, method: str, path: str, headers: dict):
        m = re.fullmatch(r"/v2/(.+)/referrers/(sha256:[0-9a-f]{64})(\?.*)?", path)
        if not m:
            return None
        asked.append(m.group(2))
        got = http.get(
            f"http://{oci.host}/v2/{m.group(1)}/manifests/{L.fallback_tag(m.group(2))}",
            headers={"Accept": L.INDEX_TYPE},
        )
        body = (
            got.content
            if got.status_code == 200
            else L.encode({"schemaVersion": 2, "mediaType": L.INDEX_TYPE, "manifests": []})
        )
        return 200, {"Content-Type": L.INDEX_TYPE}, body

    proxy.fault = referrers_api
    reader = registry(proxy, oci, tmp_path / "r", space)
    mark = proxy.mark()
    pulled = reader.pull("examples@0.1.0", options=OpenOptions(trust=_policy(tmp_path, keys)))
    assert pulled.trust is not None and asked == [pulled.record.manifest]
    assert not [r for r in proxy.log[mark:] if "/manifests/sha256-" in r[1]], "the fallback tag was not read"


def test_an_unreachable_registry_is_a_transfer_error_not_a_library_exception(tmp_path: Path) -> None:
    pytest.importorskip("oras")
    from registry_servers import free_port

    url = f"oci://127.0.0.1:{free_port()}/kernels"  # nothing listens there
    with pytest.raises(TransferError, match=r"failed after 4 attempts: ConnectionError"):
        Registry(url, cache=tmp_path / "c", retry=FAST).names()
    with pytest.raises(TransferError, match="failed after 4 attempts"):
        Registry(url, {"username": "u", "password": "p"}, cache=tmp_path / "c", retry=FAST).pull("examples@1.0")
