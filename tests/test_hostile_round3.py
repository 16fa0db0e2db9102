"""Issue 20, round 3 of the adversarial pass: each test reproduces one attack that once got through.

The archives here are forged with every digest recomputed (the real writer is handed hostile names,
or :mod:`hostile_factory` takes an honest archive apart and puts it back together), so the only thing
a reader can refuse them for is the rule under test.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from format1_writer import Format1Writer
from hostile_factory import put_together, take_apart, v2_variant

from karchive.errors import SchemaError
from karchive.format.open import open_location
from karchive.format.writer import ArchiveWriter

ROOT = Path(__file__).resolve().parent.parent
TRITON_HASH = "ab" * 32


def _cli(*args: object, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    full = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", "karchive", *map(str, args)], env=full, capture_output=True, text=True, timeout=timeout
    )


def _files_under(top: Path) -> set[Path]:
    return {p for p in top.rglob("*")}


# --------------------------------------------------------------------------------------------------
# 1. export-triton-cache wrote anywhere: kernel names (and IR stage names) from the archive in paths
# --------------------------------------------------------------------------------------------------


def _archive_naming(
    kernel: str, fmt: tuple[int, int], *, stage: str | None = None, name: str = "hostile", version: str = "1"
) -> bytes:
    """An archive (format ``fmt``) with one variant of ``kernel``, a Triton cache hash recorded, so that
    ``export-triton-cache --allow-unverified`` writes it; the writer computes every digest honestly.
    ``stage`` renames the variant's IR stage."""
    entry, launch, irm = v2_variant(kernel, 0, source=None)
    entry["provenance"]["triton_hash"] = TRITON_HASH
    if stage is not None:
        entry["files"]["ir"] = {stage: entry["files"]["ir"]["ptx"]}
    w = Format1Writer() if fmt == (1, 0) else ArchiveWriter()
    w.add_group(launch + irm)
    manifest = {
        "format": "karchive",
        "format_version": f"{fmt[0]}.{fmt[1]}",
        "abi_version": 1,
        "name": name,
        "version": version,
        "produced_by": {"karchive": "test"},
        "created": None,
        "path_sentinel": "@KARCHIVE_ROOT@",
        "sources": [],
        "variants": [entry],
    }
    return w.to_bytes(manifest)


def _renamed_in_v2(kernel: str) -> bytes:
    """An honest format-2 archive of kernel ``k`` whose header row and shard then say ``kernel``:
    the shard's and the header's digests recomputed (the shard's bulk path takes the header's name)."""
    parts = take_apart(_archive_naming("k", (2, 0)))
    for doc in parts.shards.values():
        doc["kernel"] = kernel
    for row in parts.header["shards"]:
        row["kernel"] = kernel
    return put_together(parts)


HOSTILE_KERNELS = ["../../pwn", "{abs}/owned", "a/b", "k\n", "k.", ".k", "m:", ":k", "k\0x", "k k", ""]


@pytest.mark.parametrize("kernel", HOSTILE_KERNELS)
@pytest.mark.parametrize("how", ["format1", "format2", "format2-renamed"])
def test_export_triton_cache_path_traversal_kernel_name_is_refused(tmp_path, kernel, how):
    """A kernel named ``../../pwn`` or ``/abs/dir/owned`` once passed ``verify`` and made
    ``export-triton-cache`` write outside ``--cache-dir``. Now the model refuses the name (SchemaError)
    and the export writes nothing anywhere."""
    from karchive.producer.capture.triton_cache import export_archive

    outside = tmp_path / "outside"
    outside.mkdir()
    kernel = kernel.format(abs=outside)
    data = (
        _archive_naming(kernel, (1, 0))
        if how == "format1"
        else _archive_naming(kernel, (2, 0))
        if how == "format2"
        else _renamed_in_v2(kernel)
    )
    archive = tmp_path / "a" / "b" / "hostile.karc"
    archive.parent.mkdir(parents=True)
    archive.write_bytes(data)
    cache = tmp_path / "a" / "b" / "cache"
    before = _files_under(tmp_path)
    with pytest.raises(SchemaError) as err:
        reader = open_location(str(archive))
        model = reader.model
        for k in model.kernels():
            model.variants_of(k)
    assert "is not a kernel name" in str(err.value) and err.value.where
    pytest.importorskip("triton")
    with pytest.raises(SchemaError):
        export_archive(open_location(str(archive)), str(cache), allow_unverified=True)
    assert _files_under(tmp_path) == before  # nothing written, inside or outside the cache dir


def test_export_triton_cache_path_traversal_via_cli_verify_and_export(tmp_path):
    """The attack end to end through the CLI: ``verify`` refuses, ``export-triton-cache`` exits non-zero and
    the file two directories above ``--cache-dir`` is not created."""
    pytest.importorskip("triton")
    archive = tmp_path / "x" / "y" / "hostile.karc"
    archive.parent.mkdir(parents=True)
    archive.write_bytes(_renamed_in_v2("../../pwn"))
    r = _cli("verify", archive)
    assert r.returncode != 0 and "is not a kernel name" in r.stdout + r.stderr, r.stdout + r.stderr
    cache = tmp_path / "x" / "y" / "cache"
    r = _cli("export-triton-cache", archive, "--cache-dir", cache, "--allow-unverified")
    assert r.returncode != 0
    assert not list(tmp_path.rglob("pwn*"))
    assert not cache.exists() or not os.listdir(cache)


def test_export_triton_cache_path_traversal_ir_stage_name_is_refused(tmp_path):
    """An IR stage name becomes the file extension (``<kernel>.<stage>``): ``ptx/../../../x`` is refused
    by the model like a kernel name."""
    for fmt in ((1, 0), (2, 0)):
        archive = tmp_path / f"stage{fmt[0]}.karc"
        archive.write_bytes(_archive_naming("k", fmt, stage="ptx/../../../x"))
        with pytest.raises(SchemaError, match="IR stage"):
            reader = open_location(str(archive))
            reader.model.variants_of("k")


def test_export_triton_cache_qualified_name_uses_the_short_name(tmp_path):
    """A qualified name (``pkg.mod:Outer.<locals>.k``) is valid; Triton names the entry's files after the
    short name, and every file lands inside the entry directory under --cache-dir."""
    pytest.importorskip("triton")
    from karchive.producer.capture.triton_cache import cache_dir_name, export_archive

    archive = tmp_path / "q.karc"
    archive.write_bytes(_archive_naming("pkg.mod:Outer.<locals>.k", (2, 0)))
    cache = tmp_path / "cache"
    results = export_archive(open_location(str(archive)), str(cache), allow_unverified=True)
    assert [r.status for r in results] == ["written"]
    entry = cache / cache_dir_name(TRITON_HASH)
    assert sorted(os.listdir(entry)) == ["__grp__k.json", "k.cubin", "k.json", "k.ptx"]
    assert {p.parent for p in cache.rglob("*") if p.is_file()} == {entry}


def test_export_triton_cache_write_entry_refuses_paths_from_archive_data(tmp_path):
    """The exporter's own check, independent of the model: a stem or extension that is not a plain
    name, or a hash with a trailing newline (``bytes.fromhex`` skips whitespace), writes nothing."""
    pytest.importorskip("triton")
    from karchive.errors import CaptureError
    from karchive.producer.capture.triton_cache import write_entry

    cache = tmp_path / "cache"
    for stem, ext in (("../../pwn", "json"), (str(tmp_path / "abs"), "json"), ("k", "../x"), ("k", "a/b")):
        with pytest.raises(SchemaError):
            write_entry(str(cache), TRITON_HASH, stem, {ext: b"x"})
    with pytest.raises(CaptureError):
        write_entry(str(cache), TRITON_HASH + "\n", "k", {"json": b"x"})
    assert not cache.exists()


# --------------------------------------------------------------------------------------------------
# 2. A trailing newline passed every grammar: `$` matches before a final "\n"
# --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def keys():
    pytest.importorskip("cryptography")
    from trust_support import make_keys

    return make_keys()


def _policy(keys, *, revoked: str = "", key_name: str = "ci", version: str = "1", extra: str = "") -> bytes:
    body = (
        f'version = {version}\n{revoked}\n{extra}\n[[keys]]\nname = {key_name}\npublic_key = "{keys["ci"].public.inline()}"\n'
        '\n[[rules]]\nnames = ["*"]\nkeys = ["ci"]\nthreshold = 1\n'
    )
    return body.encode()


def test_trailing_newline_revocation_is_not_silently_ignored(keys):
    """``revoked = ["<id>\\n"]`` (what a TOML multi-line string yields) loaded and revoked nothing. Now the
    policy is refused, naming the bad entry, so no archive loads under it; the exact id still revokes."""
    from karchive.errors import TrustPolicyError
    from karchive.trust.policy import TrustPolicy

    kid = keys["ci"].key_id
    multi_line = f'revoked = ["""\n{kid}\n"""]'  # the TOML spelling that gives a leading and a trailing newline
    for revoked in (f'revoked = ["{kid}\\n"]', multi_line, f'revoked = ["{kid} "]', f'revoked = ["\\t{kid}"]'):
        with pytest.raises(TrustPolicyError, match="revoked"):
            TrustPolicy.from_bytes(_policy(keys, revoked=revoked, key_name='"ci"'))
    assert kid in TrustPolicy.from_bytes(_policy(keys, revoked=f'revoked = ["{kid}"]', key_name='"ci"')).revoked


def test_trailing_newline_revocation_blocks_the_signed_archive(keys, tmp_path, monkeypatch):
    """End to end: a signed archive under a policy whose revocation ends in a newline does not load."""
    from registry_support import small_archive

    import karchive
    from karchive.errors import TrustError
    from karchive.trust.sign import sign_archive

    for var in ("KARCHIVE_REGISTRY", "KARCHIVE_CACHE_DIR", "KARCHIVE_TRUST_POLICY"):
        monkeypatch.delenv(var, raising=False)
    arc = tmp_path / "examples-0.1.0.karc"
    arc.write_bytes(small_archive("examples", "0.1.0").read_bytes())
    sign_archive(arc, keys["ci"])
    policy = tmp_path / "p.toml"
    policy.write_bytes(_policy(keys, revoked=f'revoked = ["{keys["ci"].key_id}\\n"]', key_name='"ci"'))
    with pytest.raises(TrustError):
        karchive.open(arc, trust=policy)


@pytest.mark.parametrize("name", ['"ci\\n"', '"ci\\r\\n"', '" ci"', '"ci\\u0000"'])
def test_trailing_newline_key_name_is_refused(keys, name):
    from karchive.errors import TrustPolicyError
    from karchive.trust.policy import TrustPolicy, is_key_name

    with pytest.raises(TrustPolicyError, match="needs a name"):
        TrustPolicy.from_bytes(_policy(keys, key_name=name))
    assert not is_key_name("ci\n") and is_key_name("ci")


def test_trailing_newline_version_is_refused_at_publish(tmp_path, monkeypatch):
    """An archive versioned ``9.9.9\\n`` published beside ``9.9.9`` and became what ``pull NAME`` fetched."""
    from karchive.errors import RegistryError
    from karchive.registry import Registry
    from karchive.registry.refs import check_name, check_version
    from karchive.registry.versions import is_prerelease, version_key

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    reg = Registry(str(tmp_path / "reg"), cache=tmp_path / "cache")
    good = tmp_path / "good.karc"
    good.write_bytes(_archive_naming("k", (2, 0), version="9.9.9"))
    reg.publish(good)
    for bad_version in ("9.9.9\n", "9.9.10\n", "9.9.9\r", "9.9.9 "):
        bad = tmp_path / "bad.karc"
        bad.write_bytes(_archive_naming("k", (2, 0), version=bad_version))
        with pytest.raises(RegistryError, match="bad version"):
            reg.publish(bad)
    assert [r.version for r in reg.versions("hostile")] == ["9.9.9"]
    assert reg.resolve("hostile").version == "9.9.9"
    for bad_name in ("hostile\n", "a\n"):
        with pytest.raises(RegistryError):
            check_name(bad_name)
    with pytest.raises(RegistryError):
        check_version("1.0\n")
    assert version_key("1.0\n")[0] == 0 and not is_prerelease("1.0a1\n")  # not PEP 440: sorts as a plain string


def test_trailing_newline_hex_digests_are_refused():
    """Every 64-hex grammar: a digest with a trailing newline is not a digest."""
    from karchive.core.digest import is_sha256_hex
    from karchive.errors import CaptureError
    from karchive.producer.capture.triton_cache import cache_dir_name
    from karchive.runtime.select import cubin_runs_on

    h = "ab" * 32
    assert not is_sha256_hex(h + "\n")
    with pytest.raises(CaptureError):
        cache_dir_name(h + "\n")
    assert cubin_runs_on("sm_90", (9, 0)) and not cubin_runs_on("sm_90\n", (9, 0))


def test_trailing_newline_no_grammar_uses_match_with_dollar():
    """The rule itself: no compiled grammar in karchive/ is checked with ``.match`` and an anchored ``$``
    (every one goes through karchive.core.grammar); a regression here reopens the hole."""
    import re

    offenders = []
    for path in (ROOT / "karchive").rglob("*.py"):
        text = path.read_text()
        for m in re.finditer(r"re\.compile\(\s*r?b?(\"\"\"|\"|')(.*?)\1", text, re.S):
            if m.group(2).rstrip().endswith("$") and "re.M" not in text[m.end() : m.end() + 40]:
                offenders.append(f"{path.relative_to(ROOT)}: {m.group(2)[:40]!r}")
    assert not offenders, offenders


# --------------------------------------------------------------------------------------------------
# 5. An empty KARCHIVE_TRUST_POLICY= switched enforcement off
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["", " ", "\n"])
def test_empty_trust_policy_variable_is_an_error(tmp_path, monkeypatch, value):
    """``KARCHIVE_TRUST_POLICY=`` once meant "no policy" and an unsigned archive loaded."""
    from registry_support import small_archive

    import karchive
    from karchive.errors import TrustPolicyError
    from karchive.trust.enforce import resolve_policy

    monkeypatch.setenv("KARCHIVE_TRUST_POLICY", value)
    with pytest.raises(TrustPolicyError, match="KARCHIVE_TRUST_POLICY"):
        resolve_policy(None)
    assert resolve_policy(False) is None  # an explicit "no policy" still means none
    unsigned = tmp_path / "u.karc"
    unsigned.write_bytes(small_archive("examples", "0.1.0").read_bytes())
    with pytest.raises(TrustPolicyError, match="KARCHIVE_TRUST_POLICY"):
        karchive.open(unsigned)
    r = _cli("verify", unsigned, env={"KARCHIVE_TRUST_POLICY": value})
    assert r.returncode != 0 and "KARCHIVE_TRUST_POLICY" in r.stdout + r.stderr
    monkeypatch.delenv("KARCHIVE_TRUST_POLICY")
    karchive.open(unsigned).close()  # unset: no policy, as documented


# --------------------------------------------------------------------------------------------------
# 7. Raw RecursionError from deep nesting
# --------------------------------------------------------------------------------------------------


def test_deeply_nested_policy_file_is_a_policy_error(tmp_path, keys):
    from karchive.errors import TrustPolicyError
    from karchive.trust.policy import TrustPolicy

    for depth in (5000, 65):
        deep = "x = " + "[" * depth + "]" * depth + "\n"
        path = tmp_path / f"deep{depth}.toml"
        path.write_bytes(_policy(keys, key_name='"ci"', extra=deep))
        with pytest.raises(TrustPolicyError, match="nested deeper than 64 levels"):
            TrustPolicy.load(path)
    tables = "".join(f"[{'.'.join(['t'] * d)}]\n" for d in range(1, 70))
    with pytest.raises(TrustPolicyError, match="nested"):
        TrustPolicy.from_bytes(_policy(keys, key_name='"ci"') + tables.encode())


def test_deeply_nested_storage_options_variable_is_a_registry_error(monkeypatch):
    from karchive.errors import RegistryError
    from karchive.registry.config import storage_options_from_env

    monkeypatch.setenv("KARCHIVE_STORAGE_OPTIONS", '{"a": ' + "[" * 5000 + "]" * 5000 + "}")
    with pytest.raises(RegistryError, match="KARCHIVE_STORAGE_OPTIONS is nested deeper"):
        storage_options_from_env()
    monkeypatch.setenv("KARCHIVE_STORAGE_OPTIONS", '{"endpoint_url": "http://127.0.0.1:1", "x": [[1]]}')
    assert storage_options_from_env()["x"] == [[1]]
    r = _cli("ls", env={"KARCHIVE_STORAGE_OPTIONS": "[" * 5000 + "]" * 5000, "KARCHIVE_REGISTRY": "s3://b/p"})
    assert r.returncode != 0 and "Traceback" not in r.stderr and "nested" in r.stderr, r.stderr


def test_deeply_nested_json_is_refused_before_parsing():
    """parse_json, the one parser for untrusted JSON, bounds depth for every caller (strict or not)."""
    from karchive.core.jsonio import parse_json
    from karchive.errors import FormatError

    for strict in (True, False):
        with pytest.raises(FormatError, match="nested deeper than 64 levels"):
            parse_json(b"[" * 100_000 + b"]" * 100_000, "doc", error=FormatError, strict=strict)
        deep_ok = b'{"a":' * 64 + b'"[[[[\\"{{"' + b"}" * 64
        assert parse_json(deep_ok, "doc", error=FormatError, strict=strict)


# --------------------------------------------------------------------------------------------------
# 9. A FIFO named ARCHIVE.sig.json hung karchive.open(path, trust=...)
# --------------------------------------------------------------------------------------------------


def _in_subprocess(code: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")])),
    )


def test_fifo_sidecar_does_not_hang_a_trusted_open(tmp_path, keys):
    """A FIFO where the sidecar should be: the open fails at once with a karchive error (run in a child
    with a timeout, so a regression fails instead of hanging the suite)."""
    from registry_support import small_archive
    from trust_support import write_policy

    arc = tmp_path / "examples-0.1.0.karc"
    arc.write_bytes(small_archive("examples", "0.1.0").read_bytes())
    os.mkfifo(str(arc) + ".sig.json")
    policy = write_policy(tmp_path / "p.toml", keys)
    fifo_policy = tmp_path / "fifo.toml"
    os.mkfifo(fifo_policy)
    code = f"""
import karchive, json
from karchive.errors import KarchiveError
out = []
for trust in ({str(policy)!r}, {str(fifo_policy)!r}):
    try:
        karchive.open({str(arc)!r}, trust=trust)
        out.append("opened")
    except KarchiveError as exc:
        out.append(type(exc).__name__ + ": " + str(exc))
print(json.dumps(out))
"""
    try:
        done = _in_subprocess(code, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("karchive.open hung on a FIFO")
    assert done.returncode == 0, done.stderr
    import json

    sidecar, pol = json.loads(done.stdout)
    assert sidecar.startswith("EnvelopeError") and "not a regular file" in sidecar
    assert pol.startswith("TrustPolicyError") and "not a regular file" in pol


def test_fifo_key_file_is_refused(tmp_path):
    """Key files are read the same way (``karchive sign --key FIFO`` must not hang either)."""
    pytest.importorskip("cryptography")
    fifo = tmp_path / "k.key"
    os.mkfifo(fifo)
    code = f"""
from karchive.errors import KeyFileError
from karchive.trust.keys import load_private_key
try:
    load_private_key({str(fifo)!r})
except KeyFileError as exc:
    print(exc)
"""
    try:
        done = _in_subprocess(code, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("reading a FIFO key file hung")
    assert "not a regular file" in done.stdout, done.stdout + done.stderr


# --------------------------------------------------------------------------------------------------
# 10. The policy loader accepted odd values
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["true", "1.0", '"1"', "[1]"])
def test_policy_odd_version_values_are_refused(keys, version):
    """``version = true`` and ``version = 1.0`` both compare equal to 1 in Python."""
    from karchive.errors import TrustPolicyError
    from karchive.trust.policy import TrustPolicy

    with pytest.raises(TrustPolicyError, match="version"):
        TrustPolicy.from_bytes(_policy(keys, key_name='"ci"', version=version))


@pytest.mark.parametrize(
    "extra, fragment",
    [
        ("revoked = {}", "'revoked' must be a list"),
        ('revoked = ""', "'revoked' must be a list"),
        ("revoked = false", "'revoked' must be a list"),
        ("keys = {}", "'keys' must be an array"),
        ("rules = false", "'rules' must be an array"),
    ],
)
def test_policy_odd_table_values_are_refused(keys, extra, fragment):
    """``revoked = {}`` is falsy and was read as "no revocations"."""
    from karchive.errors import TrustPolicyError
    from karchive.trust.policy import TrustPolicy

    if extra.startswith("revoked"):
        body = _policy(keys, key_name='"ci"', extra=extra).decode()
    elif extra.startswith("keys"):
        body = f'version = 1\n{extra}\n[[rules]]\nnames = ["*"]\nkeys = []\nthreshold = 0\n'
    else:
        body = f"version = 1\n{extra}\n"
    with pytest.raises(TrustPolicyError, match=fragment):
        TrustPolicy.from_bytes(body.encode())


def test_policy_odd_threshold_and_id_values_are_refused(keys):
    from karchive.errors import TrustPolicyError
    from karchive.trust.policy import TrustPolicy

    base = _policy(keys, key_name='"ci"').decode()
    for bad in (
        base.replace("threshold = 1", "threshold = true"),
        base.replace("threshold = 1", "threshold = 1.0"),
        base.replace('name = "ci"', f'name = "ci"\nid = {len(keys)}'),
    ):
        with pytest.raises(TrustPolicyError):
            TrustPolicy.from_bytes(bad.encode())


# --------------------------------------------------------------------------------------------------
# 8. One stray file under a registry's versions/ broke `ls`
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["local", "s3"])
def test_stray_entries_in_registry_versions_are_skipped_and_reported(tmp_path, monkeypatch, kind, caplog):
    from trust_support import make_store

    from karchive.registry.store_layout import versions_dir

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    store = make_store(kind, tmp_path)
    reg = store.registry(tmp_path / "cache")
    arc = tmp_path / "k.karc"
    arc.write_bytes(_archive_naming("k", (2, 0), version="1.0"))
    reg.publish(arc)
    strays = ["bad name.json", "notes.txt", "latest.json", "a..b.json"] + (["x\n.json"] if kind == "local" else [])
    for stray in strays:
        reg.store.replace(f"{versions_dir('hostile')}/{stray}", b"{}")
    if kind == "local":  # a file name that is not UTF-8 (only a local file system can hold one)
        os.close(
            os.open(
                os.path.join(os.fsencode(store.url), b"names/hostile/versions/\xff\xfe.json"), os.O_CREAT | os.O_WRONLY
            )
        )
        os.close(os.open(os.path.join(os.fsencode(store.url), b"names/\xff bad"), os.O_CREAT | os.O_WRONLY))
    fresh = store.registry(tmp_path / "cache2")
    with caplog.at_level("WARNING", logger="karchive.registry.registry"):
        records = fresh.list()
    assert [(r.name, r.version) for r in records] == [("hostile", "1.0")]
    assert fresh.resolve("hostile").version == "1.0"
    skipped = fresh.stray
    assert len(skipped) == len(strays) + (2 if kind == "local" else 0), skipped
    assert any("bad name.json" in s for s in skipped) and all("\n" not in s for s in skipped)
    assert "skipped" in caplog.text
    if kind == "local":
        r = _cli("ls", "--registry", store.url, "--json")
        assert r.returncode == 0, r.stderr
        import json

        out = json.loads(r.stdout)
        assert [a["version"] for a in out["archives"]] == ["1.0"] and len(out["skipped"]) == len(skipped)
        r = _cli("ls", "--registry", store.url)
        assert r.returncode == 0 and "hostile" in r.stdout and "skipped" in r.stderr, r.stderr


# --------------------------------------------------------------------------------------------------
# 6. The rollback ratchet depended on how the registry path was spelt
# --------------------------------------------------------------------------------------------------


def test_rollback_ratchet_through_a_symlink_or_dotdot_path_still_refuses(keys, tmp_path, monkeypatch):
    """Load 2.0.0 under a policy through one spelling of the registry, hide 2.0.0 (the rollback), then
    ask for ``NAME@latest`` through a symlink and through a ``..`` path: both are refused."""
    from registry_support import small_archive
    from trust_support import hide_version, write_policy

    import karchive
    from karchive.errors import DowngradeError
    from karchive.registry import Registry

    for var in ("KARCHIVE_REGISTRY", "KARCHIVE_CACHE_DIR", "KARCHIVE_TRUST_POLICY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    real = tmp_path / "registry"
    writer = Registry(real, cache=tmp_path / "w")
    for v in ("1.0.0", "2.0.0"):
        writer.publish(small_archive("examples", v), sign=[keys["ci"]])
    policy = write_policy(tmp_path / "p.toml", keys)
    cache = tmp_path / "cache"
    assert karchive.open("examples", registry=Registry(real, cache=cache), trust=policy).version == "2.0.0"
    hide_version(writer, "examples", "2.0.0")

    (tmp_path / "link").symlink_to(real)
    (tmp_path / "sub").mkdir()
    spellings = [tmp_path / "link", tmp_path / "sub" / ".." / "registry", str(real) + "/", f"file://{real}"]
    for spelling in spellings:
        reg = Registry(str(spelling), cache=cache)
        with pytest.raises(DowngradeError) as err:
            karchive.open("examples", registry=reg, trust=policy)
        assert (err.value.newest_seen, err.value.resolved) == ("2.0.0", "1.0.0"), spelling
    r = _cli(
        "pull",
        "examples",
        "--registry",
        tmp_path / "link",
        "--cache-dir",
        cache,
        "--trust",
        policy,
        env={"XDG_CACHE_HOME": str(tmp_path / "xdg-cache")},
    )
    assert r.returncode != 0 and "already loaded and verified examples@2.0.0" in r.stderr, r.stderr


def test_rollback_ratchet_registry_identity_is_canonical_but_never_merges_registries():
    from karchive.registry.cache import registry_key
    from karchive.registry.config import canonical_registry

    same = [
        "https://Reg.example.com/a/b",
        "https://user:pw@reg.example.com:443/a/./x/../b/?token=1",
        "HTTPS://reg.example.com/a/b/",
    ]
    assert len({registry_key(u) for u in same}) == 1
    assert canonical_registry("s3://bucket/prefix/") == canonical_registry("s3://bucket/prefix")
    # In an object store "a/../b" is a key prefix of its own: another registry, never merged with "b".
    assert registry_key("s3://bucket/a/../b") != registry_key("s3://bucket/b")
    assert registry_key("s3://bucket/b") != registry_key("gs://bucket/b")
    assert registry_key("http://h:8080/r") != registry_key("http://h/r")


# --------------------------------------------------------------------------------------------------
# 3. cache prune beside running loads raised false tamper alarms
# --------------------------------------------------------------------------------------------------

_LOADER = r"""
import collections, json, sys, time
from karchive.registry import Registry
registry, cache, refs, seconds = sys.argv[1], sys.argv[2], sys.argv[3].split(","), float(sys.argv[4])
reg = Registry(registry, cache=cache)
errors, opens, pulls, downloads = collections.Counter(), 0, 0, 0
end = time.monotonic() + seconds
i = 0
while time.monotonic() < end:
    ref = refs[i % len(refs)]
    i += 1
    try:
        reader = reg.open(ref)
        try:
            for name in sorted(reader.members)[:3]:
                reader.read(name)
        finally:
            reader.source.close()
        opens += 1
        result = reg.pull(ref)
        pulls += 1
        downloads += result.downloaded
        if not result.path.exists():
            errors["pulled path vanished"] += 1
        with open(result.path, "rb") as fh:  # still there, whole, while the result is held
            fh.read()
        result.release()
    except Exception as exc:
        errors[f"{type(exc).__name__}: {str(exc)[:120]}"] += 1
print(json.dumps({"errors": errors, "opens": opens, "pulls": pulls, "downloads": downloads}))
"""

_PRUNER = r"""
import json, sys, time
from karchive.registry import Cache
cache, seconds = Cache(sys.argv[1]), float(sys.argv[2])
removed = busy = rounds = 0
end = time.monotonic() + seconds
while time.monotonic() < end:
    report = cache.prune(max_size=0)
    removed += len(report.removed)
    busy += report.busy
    rounds += 1
print(json.dumps({"removed": removed, "busy": busy, "rounds": rounds}))
"""


def test_cache_prune_beside_running_loads_raises_no_false_tamper_alarm(tmp_path, monkeypatch):
    """Two loader processes open, read, and pull archives while a third prunes the cache to nothing in a
    loop. Every load succeeds (a pruned entry is fetched again), no open reports "changed after it was
    verified" or a missing archive, and no path pull() returned vanishes while its result is held."""
    import json

    from karchive.registry import Registry

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    registry, cache = tmp_path / "registry", tmp_path / "cache"
    writer = Registry(registry, cache=tmp_path / "w")
    refs = []
    for i in range(3):
        arc = tmp_path / f"a{i}.karc"
        arc.write_bytes(_archive_naming("k", (2, 0), name=f"prune{i}", version="1.0"))
        writer.publish(arc)
        refs.append(f"prune{i}@1.0")
    env = dict(os.environ, PYTHONPATH=str(ROOT), KARCHIVE_RETRY_DELAY="0.01")
    env.pop("KARCHIVE_TRUST_POLICY", None)
    seconds = "4"
    loaders = [
        subprocess.Popen(
            [sys.executable, "-c", _LOADER, str(registry), str(cache), ",".join(refs), seconds],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(2)
    ]
    pruner = subprocess.Popen(
        [sys.executable, "-c", _PRUNER, str(cache), seconds],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    results = []
    for proc in [*loaders, pruner]:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        results.append(json.loads(out))
    *loaded, pruned = results
    for one in loaded:
        assert one["errors"] == {}, one["errors"]
        assert one["opens"] > 5 and one["pulls"] > 5
    # The race was really run: prune removed entries the loaders then fetched again, and it found some busy.
    assert pruned["removed"] > 0, pruned
    assert sum(one["downloads"] for one in loaded) > 0, results


# --------------------------------------------------------------------------------------------------
# 4. No overall deadline: a registry endpoint that accepts connections and never answers
# --------------------------------------------------------------------------------------------------


class SilentListener:
    """A TCP server on 127.0.0.1 that accepts every connection, reads what it is sent, and never answers."""

    def __init__(self) -> None:
        import socket
        import threading

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self.held: list = []
        self._stop = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        self.sock.settimeout(0.2)
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted += 1
            self.held.append(conn)  # never answered, never closed until the test ends

    def close(self) -> None:
        self._stop = True
        self.thread.join(timeout=5)
        for conn in self.held:
            conn.close()
        self.sock.close()


@pytest.fixture
def silent():
    listener = SilentListener()
    yield listener
    listener.close()


@pytest.mark.parametrize("kind", ["s3", "http"])
def test_silent_registry_endpoint_hits_the_overall_deadline(silent, kind, tmp_path, monkeypatch):
    """``ls`` against an endpoint that accepts and never answers once waited past 25 minutes. With a
    2 s deadline it fails in seconds, with a TransferError naming the registry and the endpoint."""
    import time

    from karchive.errors import TransferError
    from karchive.registry import Registry

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    endpoint = f"http://127.0.0.1:{silent.port}"
    if kind == "s3":
        pytest.importorskip("s3fs")
        reg = Registry(
            "s3://bucket/reg", {"endpoint_url": endpoint, "key": "k", "secret": "s"}, cache=tmp_path / "c", timeout=2
        )
    else:
        pytest.importorskip("aiohttp")
        reg = Registry(f"{endpoint}/reg", cache=tmp_path / "c", timeout=2)
    start = time.monotonic()
    with pytest.raises(TransferError) as err:
        reg.list()
    took = time.monotonic() - start
    assert took < 15, took
    assert f"127.0.0.1:{silent.port}" in str(err.value) and "KARCHIVE_REGISTRY_TIMEOUT" in str(err.value)
    assert err.value.registry == reg.url and err.value.attempts >= 1
    assert silent.accepted >= 1  # the server really was reached, and said nothing
    start = time.monotonic()
    with pytest.raises(TransferError):
        reg.resolve("examples@1.0")  # every operation gets its own deadline
    assert time.monotonic() - start < 15


@pytest.mark.parametrize("kind", ["s3", "http"])
def test_silent_registry_endpoint_cli_ls_gives_up_within_the_configured_deadline(silent, tmp_path, kind):
    import json
    import time

    pytest.importorskip("s3fs" if kind == "s3" else "aiohttp")
    env = {"KARCHIVE_REGISTRY_TIMEOUT": "2", "XDG_CACHE_HOME": str(tmp_path / "xdg-cache")}
    if kind == "s3":
        registry = "s3://bucket/reg"
        env["KARCHIVE_STORAGE_OPTIONS"] = json.dumps(
            {"endpoint_url": f"http://127.0.0.1:{silent.port}", "key": "k", "secret": "s"}
        )
    else:
        registry = f"http://127.0.0.1:{silent.port}/reg"
    start = time.monotonic()
    r = _cli("ls", "--registry", registry, env=env, timeout=60)
    assert time.monotonic() - start < 30
    assert r.returncode != 0 and "no answer within 2 s" in r.stderr and f"127.0.0.1:{silent.port}" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    bad = _cli("ls", "--registry", f"http://127.0.0.1:{silent.port}/reg", env={"KARCHIVE_REGISTRY_TIMEOUT": "soon"})
    assert bad.returncode != 0 and "KARCHIVE_REGISTRY_TIMEOUT" in bad.stderr


def test_registry_deadline_counts_waiting_not_local_work_and_progress_restarts_it():
    """The budget is time spent waiting on the registry: local work between requests is free, and a
    chunk received restarts it (a large download is bounded by a stall, not by its size)."""
    import time

    from karchive.errors import TransferError
    from karchive.registry.deadline import DEFAULT_TIMEOUT, operation, progress
    from karchive.registry.retry import RetryPolicy

    assert DEFAULT_TIMEOUT <= 60
    policy = RetryPolicy(attempts=100, base_delay=0.01, timeout=1.0)
    with operation(policy.timeout) as deadline:
        for _ in range(4):  # 1.2 s of waiting in all, with progress between the waits: within the budget
            policy.call(lambda: time.sleep(0.3), "chunk")
            progress()
        time.sleep(1.1)  # local work: not counted
        assert deadline.remaining() > 0
    calls = []

    def silent() -> None:
        calls.append(1)
        time.sleep(0.1)
        raise TimeoutError("no answer")

    start = time.monotonic()
    with pytest.raises(TransferError, match="no answer within 1 s"):
        policy.call(silent, "read x from s3://b/r (endpoint http://127.0.0.1:1)")
    assert time.monotonic() - start < 5 and 2 <= len(calls) < 100


def test_fifo_planted_as_a_registry_record_does_not_hang_ls(tmp_path):
    """The same rule in a local registry: a FIFO where a version record should be is a damaged
    registry (a RegistryError naming it), not a hang."""
    from karchive.registry import Registry
    from karchive.registry.store_layout import version_record_path

    registry = tmp_path / "registry"
    arc = tmp_path / "k.karc"
    arc.write_bytes(_archive_naming("k", (2, 0), version="1.0"))
    Registry(registry, cache=tmp_path / "c").publish(arc)
    os.mkfifo(registry / version_record_path("hostile", "2.0"))
    code = f"""
from karchive.errors import RegistryError
from karchive.registry import Registry
try:
    Registry({str(registry)!r}, cache={str(tmp_path / "c2")!r}).resolve("hostile@2.0")
except RegistryError as exc:
    print(exc)
"""
    try:
        done = _in_subprocess(code, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("reading a FIFO planted in a registry hung")
    assert "not a regular file" in done.stdout and "damaged registry" in done.stdout, done.stdout + done.stderr


def test_deeply_nested_build_spec_is_a_spec_error(tmp_path):
    from karchive.errors import SpecFileError
    from karchive.producer.build.spec_file import load_spec

    for depth in (5000, 65):
        spec = tmp_path / f"deep{depth}.toml"
        spec.write_text("x = " + "[" * depth + "]" * depth + "\n")
        with pytest.raises(SpecFileError, match="nested deeper than 64 levels"):
            load_spec(spec)
