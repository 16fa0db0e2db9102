"""Signature parsing: Triton's compile.py syntax, the spec-file form, and errors that point at the token."""

import pytest

from karchive.errors import SignatureError, TargetError
from karchive.format.target import Target
from karchive.producer.compile.signature import resolve

PARAMS = ["x_ptr", "y_ptr", "out_ptr", "n", "BLOCK"]
CONSTEXPR = ["BLOCK"]


def test_compile_py_syntax_covers_every_param():
    spec = resolve(PARAMS, CONSTEXPR, "*fp32:16, *fp32:16, *fp32, i32:1, 1024")
    assert spec.types == {
        "x_ptr": "*fp32",
        "y_ptr": "*fp32",
        "out_ptr": "*fp32",
        "n": "constexpr",
        "BLOCK": "constexpr",
    }
    assert spec.divisibility == {"x_ptr": 16, "y_ptr": 16}
    assert spec.equal_to_1 == {"n": "i32"}
    assert spec.constexprs == {"n": 1, "BLOCK": 1024}


def test_spec_form_lists_runtime_params_and_names_constexprs():
    spec = resolve(PARAMS, CONSTEXPR, "*fp16, *fp16, *fp16, i64:16", {"BLOCK": 256})
    assert spec.types["n"] == "i64" and spec.divisibility == {"n": 16}
    assert spec.constexprs == {"BLOCK": 256}


def test_structured_mapping_form():
    spec = resolve(
        PARAMS, CONSTEXPR, {"x_ptr": "*bf16", "y_ptr": "*bf16", "out_ptr": "*bf16", "n": "i32", "BLOCK": "64"}
    )
    assert spec.types["x_ptr"] == "*bf16" and spec.constexprs == {"BLOCK": 64}


@pytest.mark.parametrize(
    "sig, fragment",
    [
        ("*fp32, *fp32, i32", "3 entries"),
        ("*fp32, *fp33, *fp32, i32", "parameter 1 (y_ptr): unknown type '*fp33'"),
        ("*fp32, *fp32, *fp32:1, i32", "':1' applies to integers"),
        ("*fp32, *fp32, *fp32, i32:8", "hint '8'"),
        ("*fp32, *fp32, *fp32, fp32:16", "hints apply to pointers and integers"),
        ("*fp32, *fp32, *fp32, i32, *fp32", "is tl.constexpr, so it needs a value"),
        ("*fp32, *fp32, *fp32, @@", "cannot parse '@@'"),
    ],
)
def test_bad_signatures_name_the_token(sig, fragment):
    with pytest.raises(SignatureError, match=None) as info:
        resolve(PARAMS, CONSTEXPR, sig, {"BLOCK": 1} if sig.count(",") == 3 else None)
    assert fragment in str(info.value)


def test_constexpr_given_twice_or_unknown():
    with pytest.raises(SignatureError, match="both"):
        resolve(PARAMS, CONSTEXPR, "*fp32, *fp32, *fp32, i32, 64", {"BLOCK": 64})
    with pytest.raises(SignatureError, match="unknown"):
        resolve(PARAMS, CONSTEXPR, "*fp32, *fp32, *fp32, i32", {"BLOCK": 64, "NOPE": 1})


@pytest.mark.parametrize(
    "text, backend, arch, warp, binary",
    [
        ("cuda:80", "cuda", "80", 32, "sm_80"),
        ("cuda:sm_90", "cuda", "90", 32, "sm_90a"),
        ("cuda:86:32", "cuda", "86", 32, "sm_86"),
        ("hip:gfx942", "hip", "gfx942", 64, "gfx942"),
        ("hip:gfx1100", "hip", "gfx1100", 32, "gfx1100"),
    ],
)
def test_targets(text, backend, arch, warp, binary):
    t = Target.parse(text)
    assert (t.backend, t.arch, t.warp_size) == (backend, arch, warp)
    assert t.binary_arch == binary


@pytest.mark.parametrize(
    "text", ["cuda", "metal:1", "cuda:abc", "hip:sm90", "cuda:90:48", "", "rocm:gfx942", "amd:gfx942"]
)
def test_bad_targets(text):
    with pytest.raises(TargetError) as info:
        Target.parse(text)
    assert info.value.target == text


def test_none_is_the_constexpr_a_none_argument_becomes():
    """A spec spells an argument passed as None (an optional pointer) `None`: Triton specialises it to the
    constexpr None, so the spec form and the compile.py form both give that, and `None` takes no hint."""
    names = ["x_ptr", "g_ptr", "n", "BLOCK"]
    spec = resolve(names, ["BLOCK"], {"x_ptr": "*fp32:16", "g_ptr": "None", "n": "i32"}, {"BLOCK": 64})
    assert spec.types["g_ptr"] == "constexpr" and spec.constexprs["g_ptr"] is None
    spec = resolve(names, ["BLOCK"], "*fp32:16, None, i32, 64")
    assert spec.constexprs == {"g_ptr": None, "BLOCK": 64}
    with pytest.raises(SignatureError, match="cannot carry a hint"):
        resolve(names, ["BLOCK"], "*fp32:16, None:16, i32, 64")


def test_a_none_argument_builds_and_the_runtime_matches_it(tmp_path):
    """Compiled for real (cuda:90, no GPU): the variant records g_ptr as the constexpr None; a call passing None
    selects it, a call passing a tensor there is refused (Triton would compile another specialisation)."""
    pytest.importorskip("triton")
    import karchive
    from karchive.errors import NoMatchingVariantError
    from karchive.producer.build.pack import ArchiveBuilder
    from karchive.producer.compile.aot import VariantRequest, compile_variant

    src = tmp_path / "optional_kernels.py"
    src.write_text(
        "import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
        "def scale(x_ptr, g_ptr, n, BLOCK: tl.constexpr):\n"
        "    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
        "    x = tl.load(x_ptr + offs, mask=offs < n)\n"
        "    if g_ptr is not None:\n"
        "        x = x * tl.load(g_ptr + offs, mask=offs < n)\n"
        "    tl.store(x_ptr + offs, x, mask=offs < n)\n"
    )
    cv = compile_variant(
        VariantRequest(f"{src}:scale", "*fp32:16, None, i32", "cuda:90", {"BLOCK": 64}, {"num_warps": 4})
    )
    (g,) = [p for p in cv.variant.params if p.name == "g_ptr"]
    assert g.is_constexpr and g.constexpr is None
    builder = ArchiveBuilder("opt", "1")
    builder.extend([cv])
    out = tmp_path / "opt.karc"
    manifest, writer = builder.manifest_and_writer()
    writer.write(out, manifest)
    k = karchive.open(str(out)).kernel("scale")
    assert k.select(0x7F0000000000, None, 1000, BLOCK=64, device="cuda:90").constexprs["g_ptr"] is None
    with pytest.raises(NoMatchingVariantError, match="g_ptr"):
        k.select(0x7F0000000000, 0x7F1000000000, 1000, BLOCK=64, device="cuda:90")
