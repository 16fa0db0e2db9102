"""The fast paths on the way to a kernel's first selection answer exactly what the checks they stand for
answer (issue 24: open + select + load of a 100,000-variant archive in a fresh process).

Each fast path is compared with the definition it replaces, on random and hostile-looking inputs: the
JSON value and nesting bounds, the frame table and index members, a parameter's checks, a shard's
columns (the bulk path against the row-by-row one), the per-call memo of the selection and the cubin
rule's cache. No Triton needed.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
from hostile_factory import honest_v2, v2_variant

from karchive.core import jsonio
from karchive.errors import FormatError, KarchiveError, NoMatchingVariantError, SchemaError
from karchive.format import shard as shard_mod
from karchive.format.manifest import Param, Variant
from karchive.format.reader import ArchiveReader
from karchive.format.shard import encode_shard, shard_variants
from karchive.runtime import select as select_mod
from karchive.runtime.device import DeviceInfo

ROOT = Path(__file__).resolve().parent.parent


# -- JSON bounds ------------------------------------------------------------------------------------
def _count_by_definition(raw: bytes) -> int:
    return raw.count(b",") + raw.count(b":") + raw.count(b"[") + raw.count(b"{") + 1


def _deeper_by_definition(raw: bytes, limit: int) -> bool:
    """deeper_than as first written: the escape passes over the whole document."""
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return False
    s = raw.replace(b"\\\\", b"").replace(b'\\"', b"").translate(None, jsonio._KEEP_QUOTES_AND_BRACKETS)
    s = s.replace(b'""', b"")
    if b'"' in s:
        s = jsonio._STRING.sub(b"", s)
    s = s.translate(jsonio._OBJECTS_AS_ARRAYS)
    for _ in range(limit):
        if not s:
            return False
        shorter = s.replace(b"[]", b"")
        if len(shorter) == len(s):
            return False
        s = shorter
    return bool(s)


@pytest.mark.parametrize("alphabet", [b'[]{}",:\\ab1', b'[[[[]]]]\\\\\\""', b'[]\\"n', b'[{"\\'])
def test_json_bounds_agree_with_their_definitions(alphabet):
    rnd = random.Random(alphabet)
    for _ in range(6000):
        raw = bytes(rnd.choice(alphabet) for _ in range(rnd.randint(0, 48)))
        assert jsonio.count_values_bound(raw) == _count_by_definition(raw), raw
        for limit in (0, 1, 2, 3, 5):
            assert jsonio.deeper_than(raw, limit) == _deeper_by_definition(raw, limit), (raw, limit)


def test_depth_is_judged_across_escapes_far_apart():
    """Escapes near the start and the end of a document, brackets inside and outside strings."""
    inner = json.dumps({"a": 'x\\"[[[[', "b": [[[["y"]]]], "c": "\\\\]]"})
    raw = ("[" * 30 + json.dumps(['"[', {"k": inner}]) + "]" * 30).encode()
    for limit in (30, 33, 34, 40):
        assert jsonio.deeper_than(raw, limit) == _deeper_by_definition(raw, limit)
    assert jsonio.parse_json(raw, "x", error=FormatError, max_depth=40)  # and the parser agrees it is JSON


# -- the index --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def reader():
    return ArchiveReader.from_bytes(honest_v2()[0])


def _frame_tables(rnd: random.Random):
    """Valid frame tables and one-field mutations of them (types, signs, gaps, flags, lengths)."""
    odd = [None, True, False, -1, 0, 1.0, "1", [], 2**70]
    for _ in range(400):
        n = rnd.randint(1, 6)
        sizes = [rnd.randint(0, 5000) for _ in range(n)]
        lens = [rnd.randint(1, s + (s >> 8) + 1100) for s in sizes]
        offs = [sum(lens[:i]) for i in range(n)]
        table = [[o, ln, s, rnd.randint(0, 1)] for o, ln, s in zip(offs, lens, sizes)]
        end = sum(lens)
        if rnd.random() < 0.7:
            i, j = rnd.randrange(n), rnd.randrange(4)
            table[i][j] = rnd.choice(odd + [table[i][j] + rnd.choice((-1, 1, 300, 70000))])
        if rnd.random() < 0.1:
            table[rnd.randrange(n)].append(0)
        if rnd.random() < 0.5 and all(len(e) == 4 and type(e[1]) is int for e in table):
            # keep it contiguous around a changed length: the length rules alone decide
            table[0][0], end = 0, 0
            for e in table:
                e[0], end = end, end + e[1]
        yield table, end


def test_frame_table_fast_path_accepts_exactly_what_the_checks_accept(reader):
    rnd = random.Random(7)
    taken = 0
    for table, end in _frame_tables(rnd):
        fast = reader._frames_fast(table, end)
        try:
            checked = reader._frames_checked(table, end)
        except KarchiveError:
            assert fast is None, table
            continue
        if fast is not None:
            taken += 1
            assert list(fast) == checked, table
    assert taken > 100


def test_index_members_fast_path_keeps_the_errors():
    data, _, _ = honest_v2()
    r = ArchiveReader.from_bytes(data)
    placed = [(m.name, m.frame, m.offset, m.size) for m in r._members.values()]
    assert placed  # the index lists the manifest and the shards
    for bad, message in (
        ([["x", 0, -512, 1]], "member field"),
        ([["x", 0, True, 1]], "member field"),
        ([["x", 0, 512]], "bad member entry"),
        (["x"], "bad member entry"),
    ):
        index = {"frames": [], "members": bad, "manifest": "karchive/manifest.json"}
        raw = json.dumps(index).encode()
        with pytest.raises(FormatError, match=message):
            r._parse_index(raw, 0)


# -- a parameter's checks ---------------------------------------------------------------------------
def test_param_fast_path_agrees_with_the_full_checks(monkeypatch):
    values = [
        None,
        True,
        False,
        0,
        16,
        -1,
        1.5,
        "x",
        [],
        {},
        {"divisibility": 16},
        {"equal_to_1": True},
        {"divisibility": True},
        {"equal_to_1": 1},
        {"divisibility": None, "equal_to_1": None},
    ]
    rnd = random.Random(11)
    objs = []
    for _ in range(20000):
        obj = {
            k: rnd.choice(values)
            for k in ("name", "type", "hints", "required", "default", "value", "extra")
            if rnd.random() < 0.6
        }
        if rnd.random() < 0.7:
            obj["name"] = "n"
        if rnd.random() < 0.7:
            obj["type"] = "i32"
        objs.append(obj)
    fast = [Param._valid(o) for o in objs]
    monkeypatch.setattr(Param, "_valid", classmethod(lambda cls, obj: None))
    accepted = 0
    for obj, got in zip(objs, fast):
        try:
            want = Param.from_json(obj, "p")
        except SchemaError:
            assert got is None, obj
            continue
        if got is not None:
            accepted += 1
            assert got == want and vars(got) == vars(want), obj
        else:  # only what the full checks find unusual goes past the fast path
            pytest.fail(f"the fast path declined a valid parameter {obj!r}")
    assert accepted > 1000


# -- a shard: the bulk path against the row-by-row one --------------------------------------------------
def _shard(entries: list[dict]) -> dict:
    places = {}
    for e in entries:
        for i, ref in enumerate([e["files"]["binary"], e["files"]["metadata"], *e["files"].get("ir", {}).values()]):
            places[ref["path"]] = (len(places) // 8, 512 * (1 + i))
    return json.loads(json.dumps(encode_shard("alpha", entries, places.__getitem__)))


def _entries(shape: str) -> list[dict]:
    out = [v2_variant("alpha", i, target=("cuda:80", "cuda:90", "hip:gfx942")[i % 3])[0] for i in range(9)]
    if shape == "some-without-ir":
        del out[2]["files"]["ir"]
        out[6]["files"]["ir"] = {}
    if shape == "mixed-ir":  # a variant with its stages in another order, one with one more
        ptx = out[4]["files"]["ir"]["ptx"]
        out[4]["files"]["ir"] = {"ttir": {**ptx, "path": ptx["path"] + ".ttir"}, "ptx": ptx}
        out[5]["files"]["ir"]["llir"] = {**ptx, "path": ptx["path"] + ".ll"}
    if shape == "no-ir":
        for e in out:
            e["files"].pop("ir")
    if shape == "unknown-field":  # a field of a later minor version: a column of its own, which the model ignores
        out[1]["later_field"] = {"x": 1}
    return out


@pytest.mark.parametrize("shape", ["uniform", "mixed-ir", "some-without-ir", "no-ir", "unknown-field"])
def test_bulk_shard_path_builds_what_the_row_by_row_path_builds(monkeypatch, shape):
    doc = _shard(_entries(shape))
    assert shard_mod._bulk(shard_mod._Shard(doc, "alpha"), "alpha") is not None  # the bulk path takes it
    fast, fast_places = shard_variants(doc, "alpha")
    monkeypatch.setattr(shard_mod, "_bulk", lambda shard, kernel: None)
    slow, slow_places = shard_variants(doc, "alpha")
    assert fast == slow and sorted(fast_places) == sorted(slow_places)
    assert [list(v.ir) for v in fast] == [list(v.ir) for v in slow]  # stage order kept
    assert [v.to_json() for v in fast] == [Variant.from_json(v.to_json(), "v").to_json() for v in slow]


def test_bulk_shard_path_leaves_errors_to_the_full_checks():
    doc = _shard(_entries("uniform"))
    doc["parts"]["abi"][1] = [0, 10_000]  # one record's index out of range
    with pytest.raises(FormatError, match=r"parts.abi\[1\].*indexes into parts.field"):
        shard_variants(doc, "alpha")
    doc = _shard(_entries("uniform"))
    doc["variants"]["files.ir"][3]["ptx"][2] = "Z" * 64  # not a sha256
    with pytest.raises(SchemaError, match=r"variants\[3\]\.files\.ir\.ptx\.sha256"):
        shard_variants(doc, "alpha")


# -- selection ---------------------------------------------------------------------------------------
H100 = DeviceInfo.describe_target("cuda:90", shared_optin=227 * 1024)
ALIGNED, OFF = 0x7F00_0000_0000, 0x7F00_0000_0004


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    path = tmp_path_factory.mktemp("fast") / "a.karc"
    path.write_bytes(honest_v2({"alpha": 9})[0])
    return path


def _answers(path: Path) -> list[str]:
    import karchive

    out = []
    for args, kw in (
        ((ALIGNED, 10), {"BLOCK": 128}),
        ((ALIGNED, 10), {"BLOCK": 256}),
        ((OFF, 10), {"BLOCK": 128}),
        ((ALIGNED, 2**40), {"BLOCK": 128}),
        ((ALIGNED, "x"), {"BLOCK": 64}),
    ):
        k = karchive.open(str(path)).kernel("alpha")
        try:
            out.append(k.select(*args, device=H100, **kw).key)
        except NoMatchingVariantError as exc:
            out.append(f"{exc}\n{exc.rejections!r}")
    return out


def test_selection_memo_changes_no_answer_and_no_rejection(archive, monkeypatch):
    with_memo = _answers(archive)
    assert any("variant(s) rejected" in a for a in with_memo) and any(len(a) == 64 for a in with_memo)
    plain = select_mod.call_reason
    monkeypatch.setattr(
        select_mod,
        "call_reason",
        lambda v, values, infos, options=None, block=False, memo=None: plain(v, values, infos, options, block),
    )
    assert _answers(archive) == with_memo


@pytest.mark.parametrize("arch", ["sm_80", "sm_86", "sm_90", "sm_90a", "sm_100a", "sm_100f", "sm_120", "bogus"])
def test_cubin_fit_cache_agrees_with_the_rule(arch):
    for cc in [(8, 0), (8, 6), (8, 9), (9, 0), (10, 0), (10, 3), (12, 0)]:
        fit = select_mod._cubin_fit(arch, cc)
        assert (fit is not None) == select_mod.cubin_runs_on(arch, cc)
        if fit is not None:
            m = select_mod.whole(select_mod._SM, arch)
            built = divmod(int(m.group(1)), 10)
            assert fit == select_mod.DeviceFit("binary", (cc[0] - built[0]) * 10 + cc[1] - built[1])


# -- opening without a trust policy --------------------------------------------------------------------
def test_plain_open_does_not_import_the_trust_enforcement(archive):
    """No policy given or configured: nothing to enforce, and the module is not even imported (a
    configured one is enforced: tests/test_hostile_round3.py, tests/test_trust_load.py)."""
    code = (
        "import os, sys; os.environ.pop('KARCHIVE_TRUST_POLICY', None); import karchive; "
        f"arc = karchive.open({str(archive)!r}); arc.kernel('alpha'); "
        "print('karchive.trust.enforce' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "False"
