"""Incremental builds (`karchive build --reuse`): only changed variants compile, and the bytes never change.

Every test compares the incremental archive with a build from scratch of the same checkout, byte for
byte, and checks the reused/compiled counts the build reports. Real Triton compiles throughout.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest
from build_support import SPEC, SPEC_VARIANTS, build, karchive, make_checkout
from support import ROOT, needs_triton

pytestmark = needs_triton


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict[str, str]:
    """One karchive cache for the module (a warm build cache gives the same bytes: test_repro.py)."""
    return {"KARCHIVE_CACHE_DIR": str(tmp_path_factory.mktemp("cache"))}


@pytest.fixture(scope="module")
def first(tmp_path_factory, env) -> tuple:
    """(checkout spec, archive) of a first full build."""
    spec = make_checkout(tmp_path_factory.mktemp("checkout") / "proj")
    out = spec.parent.parent / "first.karc"
    summary = build(spec, out, "-j", "2", env=env)
    assert summary["built"] == SPEC_VARIANTS and summary["compiled"] == SPEC_VARIANTS and summary["reused"] == 0
    assert "reuse" not in summary
    return spec, out


def copy_checkout(spec, tmp_path):
    dst = tmp_path / "proj"
    shutil.copytree(spec.parent, dst)
    return dst / "build.toml"


def test_unchanged_checkout_reuses_everything_and_bytes_are_equal(first, env, tmp_path):
    spec, prev = first
    out = tmp_path / "again.karc"
    summary = build(spec, out, "--reuse", str(prev), env=env)
    assert summary["reused"] == SPEC_VARIANTS and summary["compiled"] == 0
    assert summary["reuse"]["same_toolchain"] is True and summary["reuse"]["compiled_because"] == {}
    assert out.read_bytes() == prev.read_bytes()
    # Onto itself: the previous archive is read completely before the new one replaces it.
    same = tmp_path / "same.karc"
    shutil.copy(prev, same)
    build(spec, same, "--reuse", str(same), env=env)
    assert same.read_bytes() == prev.read_bytes()


def test_human_output_says_what_was_reused(first, env, tmp_path):
    spec, prev = first
    r = karchive("build", str(spec), "-o", str(tmp_path / "h.karc"), "--reuse", str(prev), env=env)
    assert r.returncode == 0, r.stderr
    assert f"reusing {SPEC_VARIANTS} of {SPEC_VARIANTS} variant(s) from {prev}; nothing to compile" in r.stderr
    assert f"reused {SPEC_VARIANTS} from {prev}, compiled 0" in r.stdout


def test_one_changed_kernel_recompiles_only_its_variants(first, env, tmp_path):
    """softmax_kernel changes (same line count): its 2 variants compile; add_kernel, in the same file, is
    reused with the new file's digest; the archive equals a build from scratch."""
    spec, prev = first
    spec = copy_checkout(spec, tmp_path)
    kernels = spec.parent / "kernels.py"
    text = kernels.read_text()
    assert text.count("num = tl.exp(x)") == 1
    kernels.write_text(text.replace("num = tl.exp(x)", "num = tl.exp2(x)"))
    incremental = build(spec, tmp_path / "inc.karc", "--reuse", str(prev), env=env)
    assert incremental["compiled"] == 2 and incremental["reused"] == SPEC_VARIANTS - 2
    assert incremental["reuse"]["compiled_because"] == {"source changed": 2}
    scratch = build(spec, tmp_path / "scratch.karc", env=env)
    assert scratch["compiled"] == SPEC_VARIANTS
    assert (tmp_path / "inc.karc").read_bytes() == (tmp_path / "scratch.karc").read_bytes()
    assert (tmp_path / "inc.karc").read_bytes() != prev.read_bytes()  # the new kernels.py is in it


def test_changed_helper_recompiles_its_users_and_a_new_option_only_the_new_variants(first, env, tmp_path):
    spec, prev = first
    spec = copy_checkout(spec, tmp_path)
    (spec.parent / "helpers.py").write_text((spec.parent / "helpers.py").read_text().replace("x * 2", "x + x"))
    spec.write_text(SPEC.replace("num_warps = [4]", "num_warps = [4, 8]"))
    incremental = build(spec, tmp_path / "inc.karc", "--reuse", str(prev), env=env)
    # scaled_add: 2 variants with num_warps=4 whose helper changed, 2 new ones with num_warps=8.
    assert incremental["reuse"]["compiled_because"] == {"new": 2, "source changed": 2}
    assert incremental["compiled"] == 4 and incremental["reused"] == SPEC_VARIANTS - 2
    build(spec, tmp_path / "scratch.karc", env=env)
    assert (tmp_path / "inc.karc").read_bytes() == (tmp_path / "scratch.karc").read_bytes()


def test_shifted_lines_recompile_what_they_move(first, env, tmp_path):
    """A line added at the top moves every kernel of the file: their debug line tables change, and so
    does Triton's cache key (it includes the first line): all of kernels.py compiles, mykern.py is reused."""
    spec, prev = first
    spec = copy_checkout(spec, tmp_path)
    kernels = spec.parent / "kernels.py"
    kernels.write_text("# a new first line\n" + kernels.read_text())
    incremental = build(spec, tmp_path / "inc.karc", "--reuse", str(prev), env=env)
    assert incremental["compiled"] == 6 and incremental["reused"] == 2
    build(spec, tmp_path / "scratch.karc", env=env)
    assert (tmp_path / "inc.karc").read_bytes() == (tmp_path / "scratch.karc").read_bytes()


def test_no_ir_and_env_changes_are_not_reused(first, env, tmp_path):
    spec, prev = first
    no_ir = build(spec, tmp_path / "noir.karc", "--no-ir", "--reuse", str(prev), env=env)
    assert no_ir["reused"] == 0 and no_ir["reuse"]["compiled_because"] == {"IR setting changed": SPEC_VARIANTS}
    spec = copy_checkout(spec, tmp_path)
    spec.write_text(SPEC.replace("level = 3", 'level = 3\nenv = { TRITON_DISABLE_LINE_INFO = "1" }'))
    with_env = build(spec, tmp_path / "env.karc", "--reuse", str(prev), env=env)
    assert with_env["reused"] == 0 and with_env["reuse"]["compiled_because"] == {"new": SPEC_VARIANTS}


#: Re-packs the first archive's variants with another toolchain recorded (a whole-archive difference)
#: or one variant's Triton fingerprint changed (what a different ptxas for one target looks like).
REPACK = textwrap.dedent("""
    import dataclasses, sys
    from karchive.format.reader import ArchiveReader
    from karchive.producer.compile.aot import toolchain_versions
    from karchive.producer.build.pack import ArchiveBuilder
    from karchive.producer.build.reuse import plan_reuse
    from karchive.producer.build.spec_file import load_spec
    spec, prev, out, mode = sys.argv[1:5]
    s = load_spec(spec)
    plan = plan_reuse(s.requests, ArchiveReader.from_path(prev))
    assert len(plan.reused) == len(s.requests)
    produced_by = toolchain_versions()
    variants = plan.reused
    if mode == "triton":
        produced_by["triton"] = "3.8.0"
    else:
        v = variants[0]
        prov = dataclasses.replace(v.variant.provenance, triton_cache={**v.variant.provenance.triton_cache,
                                                                       "backend_hash": "another-ptxas"})
        variants[0] = v.replaced(dataclasses.replace(v.variant, provenance=prov))
    b = ArchiveBuilder(s.name, s.version, produced_by=produced_by, level=s.level, dictionary=s.dictionary)
    b.extend(variants)
    b.write(out)
""")


@pytest.mark.parametrize("mode", ["triton", "one-variant"])
def test_another_toolchain_is_never_reused(first, env, tmp_path, mode):
    spec, prev = first
    other = tmp_path / "other.karc"
    karchive_python(REPACK, str(spec), str(prev), str(other), mode, env=env)
    summary = build(spec, tmp_path / "inc.karc", "--reuse", str(other), env=env)
    if mode == "triton":
        assert summary["reused"] == 0 and summary["reuse"]["same_toolchain"] is False
        assert summary["reuse"]["toolchain_differs"] == [f"triton 3.8.0 -> {triton_version()}"]
        assert summary["reuse"]["compiled_because"] == {"toolchain changed": SPEC_VARIANTS}
    else:
        assert summary["reused"] == SPEC_VARIANTS - 1 and summary["reuse"]["same_toolchain"] is True
        assert summary["reuse"]["compiled_because"] == {"toolchain changed": 1}
    assert (tmp_path / "inc.karc").read_bytes() == prev.read_bytes()


def test_reuse_by_registry_name(first, env, tmp_path):
    spec, prev = first
    reg = {**env, "KARCHIVE_REGISTRY": str(tmp_path / "registry")}
    r = karchive("publish", str(prev), "--create-registry", env=reg)
    assert r.returncode == 0, r.stderr
    summary = build(spec, tmp_path / "inc.karc", "--reuse", "scale@1.0", env=reg)
    assert summary["reused"] == SPEC_VARIANTS and summary["reuse"]["previous"] == "scale@1.0"
    assert (tmp_path / "inc.karc").read_bytes() == prev.read_bytes()
    r = karchive("build", str(spec), "-o", str(tmp_path / "x.karc"), "--reuse", "scale@9.9", env=reg)
    assert r.returncode == 2 and "scale@9.9" in r.stderr and not (tmp_path / "x.karc").exists()


def test_recorded_refuses_what_carries_no_build_record():
    """Captured variants and Triton-cache imports say nothing about their request: never reused."""
    from karchive.producer.build.reuse import recorded

    build_rec = {
        "scheme": 1,
        "module": "k",
        "attr": "f",
        "target": "cuda:90",
        "signature": "i32",
        "constexprs": {},
        "options": {},
        "env": {},
        "sources": [{"module": "k", "name": "k.py", "sha256": "0" * 64}],
    }
    aot = {"provenance": {"origin": "aot", "source_key": "s", "build": build_rec, "triton_cache": {}}, "files": {}}
    assert recorded(aot) is not None
    assert recorded({**aot, "provenance": {**aot["provenance"], "origin": "capture"}}) is None
    assert recorded({**aot, "provenance": {"origin": "triton-cache", "source_key": "triton-cache:ab"}}) is None
    assert recorded({**aot, "provenance": {**aot["provenance"], "build": {**build_rec, "scheme": 99}}}) is None
    assert recorded({**aot, "provenance": {**aot["provenance"], "build": {**build_rec, "sources": "x"}}}) is None


def karchive_python(code: str, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    r = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env, "PYTHONPATH": str(ROOT)},
        timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    return r


def triton_version() -> str:
    import triton

    return triton.__version__


def test_json_summary_fields_are_stable(first, env, tmp_path):
    spec, prev = first
    summary = build(spec, tmp_path / "j.karc", "--reuse", str(prev), env=env)
    assert set(summary["reuse"]) == {
        "previous",
        "requested",
        "reused",
        "compiled",
        "same_toolchain",
        "toolchain_differs",
        "compiled_because",
    }
    assert json.loads(json.dumps(summary)) == summary
