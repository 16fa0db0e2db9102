"""Signature parsing: Triton's compile.py syntax, the spec-file form, and errors that point at the token."""

import pytest

from karchive.errors import SignatureError, TargetError
from karchive.producer.compile.signature import resolve
from karchive.format.target import Target

PARAMS = ["x_ptr", "y_ptr", "out_ptr", "n", "BLOCK"]
CONSTEXPR = ["BLOCK"]


def test_compile_py_syntax_covers_every_param():
    spec = resolve(PARAMS, CONSTEXPR, "*fp32:16, *fp32:16, *fp32, i32:1, 1024")
    assert spec.types == {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "constexpr", "BLOCK": "constexpr"}
    assert spec.divisibility == {"x_ptr": 16, "y_ptr": 16}
    assert spec.equal_to_1 == {"n": "i32"}
    assert spec.constexprs == {"n": 1, "BLOCK": 1024}


def test_spec_form_lists_runtime_params_and_names_constexprs():
    spec = resolve(PARAMS, CONSTEXPR, "*fp16, *fp16, *fp16, i64:16", {"BLOCK": 256})
    assert spec.types["n"] == "i64" and spec.divisibility == {"n": 16}
    assert spec.constexprs == {"BLOCK": 256}


def test_structured_mapping_form():
    spec = resolve(PARAMS, CONSTEXPR, {"x_ptr": "*bf16", "y_ptr": "*bf16", "out_ptr": "*bf16", "n": "i32", "BLOCK": "64"})
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


@pytest.mark.parametrize("text, backend, arch, warp, binary", [
    ("cuda:80", "cuda", "80", 32, "sm_80"),
    ("cuda:sm_90", "cuda", "90", 32, "sm_90a"),
    ("cuda:86:32", "cuda", "86", 32, "sm_86"),
    ("hip:gfx942", "hip", "gfx942", 64, "gfx942"),
    ("hip:gfx1100", "hip", "gfx1100", 32, "gfx1100"),
])
def test_targets(text, backend, arch, warp, binary):
    t = Target.parse(text)
    assert (t.backend, t.arch, t.warp_size) == (backend, arch, warp)
    assert t.binary_arch == binary


@pytest.mark.parametrize("text", ["cuda", "metal:1", "cuda:abc", "hip:sm90", "cuda:90:48", "", "rocm:gfx942", "amd:gfx942"])
def test_bad_targets(text):
    with pytest.raises(TargetError) as info:
        Target.parse(text)
    assert info.value.target == text
