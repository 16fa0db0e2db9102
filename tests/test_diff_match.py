"""The matching rules of `karchive diff` as pure data: manifests of real compiled add_kernel variants
(Triton, cuda:90, no GPU), edited the way a next release would change them."""

from __future__ import annotations

import copy
import hashlib
from typing import Any

import pytest
from registry_support import compiled
from support import needs_triton

from karchive.audit.diff import compare_variants, diff_manifests
from karchive.audit.match import pair_variants, specialisation_text
from karchive.errors import KarchiveError, SchemaError

pytestmark = needs_triton


def manifest(*variants: Any, **top: Any) -> dict:
    from karchive.producer.build.pack import ArchiveBuilder

    builder = ArchiveBuilder("kernels", "1.0.0", level=1)
    for v in variants:
        builder.add(v)
    m, _ = builder.manifest_and_writer()
    m.update(top)
    return m


@pytest.fixture(scope="module")
def base() -> dict:
    """add_kernel at BLOCK 1024 with num_warps 4 and 8 (one slot, two variants), and BLOCK 256."""
    return manifest(compiled("cuda:90", 1024, 4), compiled("cuda:90", 1024, 8), compiled("cuda:90", 256, 4))


def rekey(v: dict, tag: str) -> dict:
    """The variant as a later build would have it: a new key (e.g. an edited source)."""
    out = copy.deepcopy(v)
    out["key"] = hashlib.sha256((v["key"] + tag).encode()).hexdigest()
    out["provenance"]["source_key"] = hashlib.sha256(tag.encode()).hexdigest()
    return out


def variants(m: dict, block: int) -> list[dict]:
    return sorted(
        (v for v in m["variants"] if v["params"][-1]["value"] == block), key=lambda v: v["options"]["num_warps"]
    )


def with_warps(v: dict, warps: int, tag: str) -> dict:
    out = rekey(v, tag)
    out["options"]["num_warps"] = warps
    out["abi"]["num_warps"] = warps
    return out


def statuses(result: Any) -> list[tuple[str, str, Any, Any]]:
    return [
        (r.status, r.matched_by, r.a and r.a["options"]["num_warps"], r.b and r.b["options"]["num_warps"])
        for r in result.variants
    ]


def test_the_same_manifest_is_identical_and_pairs_by_key(base: dict) -> None:
    result = diff_manifests(base, copy.deepcopy(base))
    assert result.identical and result.summary() == "identical: 3 variants in both"
    assert {r.matched_by for r in result.variants} == {"key"}


def test_identity_fields_are_shown_not_counted(base: dict) -> None:
    other = copy.deepcopy(base)
    other.update(name="renamed", version="9.9.9", created="2030-01-01T00:00:00Z")
    result = diff_manifests(base, other)
    assert result.identical and result.b["version"] == "9.9.9" and result.b["created"] == "2030-01-01T00:00:00Z"


def test_toolchain_and_format_versions_are_differences(base: dict) -> None:
    other = copy.deepcopy(base)
    other["produced_by"] = {**other["produced_by"], "triton": "9.0.0", "llvm": "20.1"}
    result = diff_manifests(base, other)
    assert not result.identical
    assert [(c.field, c.b) for c in result.archive_changes] == [
        ("produced_by.llvm", "20.1"),
        ("produced_by.triton", "9.0.0"),
    ]
    assert "archive: produced_by.llvm, produced_by.triton differ" in result.summary()


def test_one_variant_left_on_each_side_pairs_as_changed(base: dict) -> None:
    """num_warps {4, 8} -> {4, 16}: 4 is unchanged (same key), 8 -> 16 is one changed variant."""
    w4, w8 = variants(base, 1024)
    b = copy.deepcopy(base)
    b["variants"] = [copy.deepcopy(w4), with_warps(w8, 16, "w16"), *variants(base, 256)]
    result = diff_manifests(base, b, kernels=["add_kernel"])
    assert statuses(result)[:2] == [("unchanged", "key", 4, 4), ("changed", "slot", 8, 16)]
    fields = [c.field for c in result.variants[1].changes]
    assert fields[:2] == ["key", "num_warps"]
    assert "abi.num_warps" not in fields  # the same difference, reported once under the option's name


def test_ambiguous_option_changes_are_removed_plus_added(base: dict) -> None:
    """num_warps {4, 8} -> {2, 16}: no rule says which became which, so nothing is paired."""
    w4, w8 = variants(base, 1024)
    b = copy.deepcopy(base)
    b["variants"] = [with_warps(w4, 2, "w2"), with_warps(w8, 16, "w16"), *variants(base, 256)]
    result = diff_manifests(base, b)
    rows = [s for s in statuses(result) if s[0] != "unchanged"]
    assert sorted(rows, key=str) == sorted(
        [("removed", None, 4, None), ("removed", None, 8, None), ("added", None, None, 2), ("added", None, None, 16)],
        key=str,
    )
    assert result.count("unchanged") == 1  # BLOCK=256


def test_rounds_pair_by_options_then_by_tuning(base: dict) -> None:
    w4, w8 = variants(base, 1024)
    # both variants rebuilt from an edited source: new keys, same options -> paired by options
    b = manifest()
    b["variants"] = [rekey(w4, "edit"), rekey(w8, "edit")]
    result = diff_manifests(base, b, kernels=["add_kernel"], targets=["cuda:90"])
    pairs = [
        (r.matched_by, r.a["options"]["num_warps"], r.b["options"]["num_warps"]) for r in result.variants if r.a and r.b
    ]
    assert pairs == [("options", 4, 4), ("options", 8, 8)]
    # fp fusion switched off for both: options differ, tuning does not -> paired by tuning
    off = [rekey(w4, "nofma"), rekey(w8, "nofma")]
    for v in off:
        v["options"]["enable_fp_fusion"] = False
    b["variants"] = off
    result = diff_manifests(base, b, kernels=["add_kernel"])
    changed = [r for r in result.variants if r.status == "changed"]
    assert [r.matched_by for r in changed] == ["tuning", "tuning"]
    assert all(
        any(c.field == "options.enable_fp_fusion" and (c.a, c.b) == (True, False) for c in r.changes) for r in changed
    )


def test_different_slots_never_pair(base: dict) -> None:
    [w256] = variants(base, 256)
    [w1024, _] = variants(base, 1024)
    a, b = manifest(), manifest()
    a["variants"], b["variants"] = [w1024], [w256]  # one each side, but another constexpr value
    assert [r.status for r in diff_manifests(a, b).variants] == ["removed", "added"]
    no_hint = rekey(w1024, "nohint")
    del no_hint["params"][0]["hints"]  # x_ptr no longer known divisible by 16: another specialisation
    b["variants"] = [no_hint]
    result = diff_manifests(a, b)
    assert [r.status for r in result.variants] == ["removed", "added"]
    # the short form would show both as BLOCK=1024: the full signature tells them apart
    assert {r.specialisation for r in result.variants} == {
        "x_ptr:*fp32:16 y_ptr:*fp32:16 out_ptr:*fp32:16 n_elements:i32 BLOCK=1024",
        "x_ptr:*fp32 y_ptr:*fp32:16 out_ptr:*fp32:16 n_elements:i32 BLOCK=1024",
    }


def test_compare_names_every_aspect_most_telling_first(base: dict) -> None:
    w4, _ = variants(base, 1024)
    b = rekey(w4, "x")
    b["abi"]["shared"] = 4096
    b["files"]["binary"] = {**b["files"]["binary"], "sha256": "0" * 64, "size": 1}
    b["provenance"]["triton_version"] = "9.0.0"
    b["provenance"]["triton_cache"]["backend_hash"] = "ptxas other"
    b["abi"]["num_warps"] = 8  # the ABI disagrees with the options: shown under the ABI's name
    changes = compare_variants(w4, b, {}, {}, {"registers": 10}, {"registers": 12})
    assert [c.field for c in changes] == [
        "key",
        "shared",
        "registers",
        "binary",
        "source_key",
        "triton",
        "backend",
        "abi.num_warps",
    ]
    assert compare_variants(w4, copy.deepcopy(w4), {}, {}) == []


def test_autotune_records_are_compared_per_kernel(base: dict) -> None:
    record = {
        "kernel": "kernels:add_kernel",
        "key_names": ["n"],
        "dtype_args": [],
        "configs": [{"kwargs": {}}],
        "entries": [],
        "fallback": "nearest-log2",
    }
    b = copy.deepcopy(base)
    b["autotune"] = [record]
    result = diff_manifests(base, b)
    assert not result.identical and result.kernels()["changed"] == ["kernels:add_kernel"]
    assert result.autotune == [
        {"kernel": "kernels:add_kernel", "status": "added", "configs": [None, 1], "entries": [None, 0]}
    ]
    c = copy.deepcopy(b)
    c["autotune"][0]["entries"] = [{"key": [1], "config": 0, "variant": base["variants"][0]["key"]}]
    assert diff_manifests(b, c).autotune[0]["status"] == "changed"


def test_hostile_manifests_give_karchive_errors(base: dict) -> None:
    broken = copy.deepcopy(base)
    broken["variants"][0]["abi"] = "nope"
    with pytest.raises(SchemaError, match="B: variants"):
        diff_manifests(base, broken)
    with pytest.raises(SchemaError):
        diff_manifests(base, {"variants": "x"})
    odd = copy.deepcopy(base)
    odd["variants"][0]["options"]["num_warps"] = "four"  # not a number: still sorts, still compares
    result = diff_manifests(base, odd)
    assert result.count("changed") == 1
    with pytest.raises(KarchiveError, match="no variant in either archive"):
        diff_manifests(base, base, targets=["hip:gfx942"])


def test_pairing_is_order_independent(base: dict) -> None:
    w4, w8 = variants(base, 1024)
    a = [w8, w4]
    b = [with_warps(w8, 16, "w16"), copy.deepcopy(w4)]
    forward = [(p.matched_by, p.a and p.a["key"], p.b and p.b["key"]) for p in pair_variants(a, b)]
    backward = [(p.matched_by, p.a and p.a["key"], p.b and p.b["key"]) for p in pair_variants(a[::-1], b[::-1])]
    assert forward == backward and [m for m, _, _ in forward] == ["key", "slot"]
    assert specialisation_text(w4) == "BLOCK=1024"


def bare(v: dict, tag: str) -> dict:
    """The variant as an archive from before qualified kernel names holds it: ``add_kernel``, its own key."""
    out = rekey(v, tag)
    out["kernel"] = out["kernel"].rpartition(":")[2]
    return out


def test_a_bare_named_old_version_pairs_with_its_qualified_new_version(base: dict) -> None:
    """Issue 19: kernels are now filed as module:qualname. diff of an old archive (bare names) and its
    new build pairs each variant with its counterpart (a "kernel" change on top), where the new side
    has exactly one kernel of that short name; a filter by either name selects both sides."""
    assert all(v["kernel"] == "kernels:add_kernel" for v in base["variants"])
    old = {**base, "variants": [bare(v, "old") for v in base["variants"]]}
    result = diff_manifests(old, base)
    assert [r.status for r in result.variants] == ["changed"] * 3
    assert all(r.kernel == "kernels:add_kernel" and r.changes[0].field == "kernel" for r in result.variants)
    assert result.kernels()["changed"] == ["kernels:add_kernel"] and not result.kernels()["added"]
    for k in ("add_kernel", "kernels:add_kernel"):
        assert len(diff_manifests(old, base, kernels=[k]).variants) == 3
    # Two qualified kernels of that short name on the new side: nothing is guessed.
    other = copy.deepcopy(base["variants"][0])
    other["kernel"], other["key"] = "extra:add_kernel", hashlib.sha256(b"other").hexdigest()
    two = {**base, "variants": [*copy.deepcopy(base["variants"]), other]}
    statuses_two = sorted(r.status for r in diff_manifests(old, two).variants)
    assert statuses_two == ["added"] * 4 + ["removed"] * 3
