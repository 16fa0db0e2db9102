"""The manifest model and the JSON Schema describe the same shapes, and the model round-trips what it writes."""

from __future__ import annotations

import pytest

from karchive.errors import SchemaError, UnsupportedVersionError
from karchive.format.manifest import Abi, AbiParam, FileRef, Manifest, Param, Provenance, Target, Variant
from karchive.format.schema import load_schema
from karchive.format.tensordesc import TensorDescAbi

jsonschema = pytest.importorskip("jsonschema")

DIGEST = "ab" * 32


def _abi(**kw) -> Abi:
    base = dict(
        version=1,
        entry="k",
        binary_format="cubin",
        binary_arch="sm_90a",
        params=(
            AbiParam("x", "pointer", "*fp32", 0, 8),
            AbiParam("n", "scalar", "i32", 1, 4),
            AbiParam("global_scratch", "global_scratch", None, None, 8),
        ),
        shared=1024,
        num_warps=4,
        warp_size=32,
        num_ctas=1,
        cluster_dims=(1, 1, 1),
        cooperative_grid=False,
        pdl=False,
        global_scratch_size=0,
        global_scratch_align=1,
        profile_scratch_size=0,
        profile_scratch_align=1,
        tmem_size=0,
    )
    base.update(kw)
    return Abi(**base)


def _desc_param(convention: str = "triton-3.8", mode: str = "tma") -> AbiParam:
    desc = (
        TensorDescAbi(convention, mode, "fp16", 2, (64, 32), swizzle=3, elem_size=2, elem_type=6)
        if mode == "tma"
        else TensorDescAbi(convention, mode, "fp16", 2, (64, 32))
    )
    return AbiParam("a", "tensordesc", "tensordesc<fp16[64, 32]>", 0, desc.size, desc)


def _variant(*, full: bool) -> Variant:
    ref = FileRef(f"variants/{DIGEST}/kernel.cubin", 10, DIGEST)
    return Variant(
        kernel="k",
        key=DIGEST,
        target=Target("cuda", "90", 32),
        params=(
            Param("x", "*fp32", divisibility=16),
            Param("n", "i32"),
            Param("s", "i32", constexpr=1, is_constexpr=True, equal_to_1=True, has_default=False),
            Param("BLOCK", "constexpr", constexpr=128, is_constexpr=True, has_default=True, default=64),
        ),
        options={"num_warps": 4, "num_stages": 3},
        abi=_abi(),
        binary=ref,
        metadata=FileRef(f"variants/{DIGEST}/kernel.json", 5, DIGEST),
        ir={"ptx": FileRef(f"variants/{DIGEST}/kernel.ptx", 7, DIGEST)} if full else {},
        source=f"sources/{DIGEST}.py" if full else None,
        provenance=Provenance(
            "aot",
            "3.9.0",
            "f" * 64,
            "s" * 64,
            ({"kind": "pass_plugin", "name": "p.so", "sha256": DIGEST},),
            {"triton_key_sha256": DIGEST, "backend_hash": "x", "env_vars": {}} if full else None,
            True if full else None,
            {
                "scheme": 1,
                "module": "kernels",
                "attr": "k",
                "target": "cuda:90",
                "signature": "i32",
                "constexprs": {},
                "options": {},
                "env": {},
                "sources": [],
            }
            if full
            else None,
            {"source_digest": DIGEST, "function": "k", "scheme": "inductor-source-v1", "heuristic": "pointwise"}
            if full
            else None,
        ),
    )


def _manifest(*, full: bool) -> Manifest:
    return Manifest.build(
        "archive",
        "1.0",
        [_variant(full=full)],
        produced_by={"karchive": "0.1.0", "triton": "3.9.0"},
        created="2026-01-01T00:00:00Z" if full else None,
        sources=[FileRef(f"sources/{DIGEST}.py", 3, DIGEST)],
        autotune=[{"kernel": "k", "key_names": ["n"], "configs": [], "entries": []}] if full else None,
        heuristics=[{"kernel": "k", "names": ["EVEN"], "cases": {"EVEN": []}}] if full else None,
        extra={"inductor": {"version": 1, "kernels": [], "templates": []}} if full else None,
    )


def _defs() -> dict:
    return load_schema()["$defs"]


@pytest.mark.parametrize("full", [True, False])
def test_written_manifests_validate_against_the_schema_and_round_trip(full):
    m = _manifest(full=full).to_json()
    jsonschema.Draft202012Validator(load_schema()).validate(m)
    again = Manifest.from_json(m)
    assert again.to_json() == m
    assert again.variants == _manifest(full=full).variants


def _keys_match(written: dict, schema_obj: dict, *, required_only: bool = False) -> None:
    props, required = set(schema_obj.get("properties", {})), set(schema_obj.get("required", []))
    if required_only:
        assert required <= set(written) <= props, (sorted(written), sorted(required), sorted(props))
    else:
        assert set(written) == props, (sorted(written), sorted(props))


def test_every_schema_object_has_exactly_the_model_fields():
    d = _defs()
    full, minimal = _variant(full=True), _variant(full=False)
    _keys_match(full.binary.to_json(), d["file"])
    _keys_match(full.target.to_json(), d["target"])
    # value and hints; "required" (no default in the signature) and "default" exclude each other
    _keys_match({**full.params[2].to_json(), **full.params[3].to_json()}, d["param"])
    both = {**full.params[2].to_json(), "default": 1}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(both, {**d["param"], "$defs": d})
    with pytest.raises(SchemaError, match="not both"):
        Param.from_json(both, "p")
    _keys_match(Param("n", "i32").to_json(), d["param"], required_only=True)
    _keys_match(full.abi.params[0].to_json(), d["abi_param"], required_only=True)  # type and arg
    _keys_match(_desc_param().to_json(), d["abi_param"])  # a tensordesc: every field
    _keys_match(_desc_param().desc.to_json(), d["abi_tensordesc"])  # type: ignore[union-attr]
    _keys_match(full.abi.params[2].to_json(), d["abi_param"], required_only=True)  # scratch: neither
    _keys_match(full.abi.to_json(), d["abi"])
    _keys_match(full.to_json(), d["variant"])
    assert set(d["variant"]["required"]) == set(full.to_json())
    _keys_match(full.to_json()["files"], d["variant"]["properties"]["files"])
    _keys_match(minimal.to_json()["files"], d["variant"]["properties"]["files"], required_only=True)
    _keys_match(full.to_json()["provenance"], d["variant"]["properties"]["provenance"])
    _keys_match(minimal.to_json()["provenance"], d["variant"]["properties"]["provenance"], required_only=True)
    _keys_match(_manifest(full=True).to_json(), load_schema())
    _keys_match(_manifest(full=False).to_json(), load_schema(), required_only=True)


def test_every_leaf_round_trips():
    v = _variant(full=True)
    assert Param.from_json(v.params[2].to_json(), "p") == v.params[2]
    assert AbiParam.from_json(v.abi.params[2].to_json(), 4, "a") == v.abi.params[2]
    assert Abi.from_json(v.abi.to_json(), 4, "abi") == v.abi
    assert Provenance.from_json(v.provenance.to_json(), "prov") == v.provenance
    assert Variant.from_json(v.to_json(), "v") == v


def test_unknown_provenance_and_top_level_fields_survive_a_round_trip():
    m = _manifest(full=True).to_json()
    m["variants"][0]["provenance"]["build_host_kind"] = "ci"
    m["future_field"] = {"x": 1}
    assert Manifest.from_json(m).to_json() == m


def test_a_real_archive_round_trips_and_validates(examples_archive):
    from karchive.format.open import open_location

    raw = open_location(examples_archive).manifest
    jsonschema.Draft202012Validator(load_schema()).validate(raw)
    assert Manifest.from_json(raw).to_json() == raw
    lazy = Manifest.from_json(raw, lazy=True)
    assert lazy.kernels() == sorted({v["kernel"] for v in raw["variants"]})
    assert [v.to_json() for v in lazy.variants] == raw["variants"]


def test_a_sharded_manifest_is_the_same_model_and_reads_one_shard_per_kernel():
    """Format 2 stores the variants in one shard per kernel; Manifest.sharded hides it: counts come from
    the header, a kernel's variants from one loader call, and to_json() is the whole manifest."""
    from karchive.errors import SchemaError
    from karchive.format.manifest import KernelSummary

    whole = _manifest(full=True)
    m = whole.to_json()
    header = {k: v for k, v in m.items() if k != "variants"}
    calls: list[str] = []

    def loader(kernel):
        calls.append(kernel)
        return [v for v in whole.variants if v.kernel == kernel]

    sharded = Manifest.sharded(header, [KernelSummary.of("k", ["cuda:90"])], loader)
    assert sharded.is_sharded and len(sharded) == 1 and sharded.kernels() == ["k"] and calls == []
    assert sharded.targets() == ["cuda:90"] and sharded.backends() == {"cuda"} and calls == []
    assert sharded.variants_of("k") == list(whole.variants) and calls == ["k"]
    assert sharded.variants_of("k") and calls == ["k"], "parsed once"
    assert sharded.variants_of("other") == [] and calls == ["k"]
    assert sharded.to_json() == m
    jsonschema.Draft202012Validator(load_schema()).validate(sharded.to_json())

    wrong = Manifest.sharded(header, [KernelSummary.of("k", ["cuda:80"])], loader)
    with pytest.raises(SchemaError, match="do not match the counts"):
        wrong.variants_of("k")
    with pytest.raises(SchemaError, match="keeps its variants in shards"):
        Manifest.sharded(m, [], loader)
    with pytest.raises(SchemaError, match="two shards"):
        Manifest.sharded(header, [KernelSummary.of("k", ["cuda:90"])] * 2, loader)


def test_a_real_format_2_archive_reads_one_shard_for_one_kernel(examples_archive):
    from karchive.format.open import open_location

    reader = open_location(examples_archive)
    assert reader.sharded and reader.model.is_sharded
    model = reader.model
    assert len(model) == 42 and len(model.kernels()) == 4 and reader._registered == set()
    targets = [t for s in model.summary() if s.kernel == "kernels:matmul_kernel" for t, _ in s.targets]
    # Format 2.1: one target's variants read that target's shard alone; the kernel's, its targets' shards.
    one = model.variants_of("kernels:matmul_kernel", targets[0])
    assert {str(v.target) for v in one} == {targets[0]} and len(reader._registered) == 1
    matmul = model.variants_of("kernels:matmul_kernel")
    assert {v.kernel for v in matmul} == {"kernels:matmul_kernel"} and len(reader._registered) == len(targets)
    assert [v.key for v in matmul] == sorted(v.key for v in matmul) and all(any(v is w for w in matmul) for v in one)
    assert model.variants_of("kernels:matmul_kernel", "cuda:1") == []
    # The same variants as the whole manifest parsed by from_json, which the schema validates.
    raw = reader.manifest
    jsonschema.Draft202012Validator(load_schema()).validate(raw)
    assert [v for v in Manifest.from_json(raw).variants if v.kernel == "kernels:matmul_kernel"] == matmul


@pytest.mark.parametrize("convention", ["triton-3.5", "triton-3.8"])
@pytest.mark.parametrize("mode", ["tma", "decomposed"])
def test_tensordesc_params_round_trip_validate_and_need_abi_v2(convention, mode):
    p = _desc_param(convention, mode)
    assert p.desc is not None
    # what the binary takes: the 3.5 convention has one i1 flag where 3.8 has two (padding, tf32)
    flags = p.desc.slots.count("i1")
    assert flags == (0 if mode == "tma" else 1 if convention == "triton-3.5" else 2)
    assert p.size == sum(128 if s == "tensormap" else 1 if s == "i1" else 4 if s == "i32" else 8 for s in p.desc.slots)
    v = _variant(full=False)
    abi = _abi(version=2, params=(p,) + v.abi.params[1:])
    m = Manifest.build("a", "1.0", [Variant(**{**v.__dict__, "abi": abi})], produced_by={"karchive": "0.1.0"})
    raw = m.to_json()
    jsonschema.Draft202012Validator(load_schema()).validate(raw)
    again = Manifest.from_json(raw)
    assert again.variants[0].abi.params[0] == p and again.abi_version == 2
    # a version-1 ABI cannot hold one; unknown conventions and disagreeing slots are refused, not guessed
    raw1 = Manifest.from_json(raw).to_json()
    raw1["variants"][0]["abi"]["version"] = 1
    with pytest.raises(SchemaError, match="need launch ABI version 2"):
        Manifest.from_json(raw1)
    bad = m.to_json()
    bad["variants"][0]["abi"]["params"][0]["tensordesc"]["convention"] = "triton-9.9"
    with pytest.raises(UnsupportedVersionError, match="convention 'triton-9.9' is unknown") as err:
        Manifest.from_json(bad)
    assert err.value.found == "triton-9.9"
    bad = m.to_json()
    bad["variants"][0]["abi"]["params"][0]["tensordesc"]["slots"] = ["tensormap"]
    with pytest.raises(SchemaError, match="disagrees with convention"):
        Manifest.from_json(bad)
