"""JAX bridge, CPU side: the kernel description built from a real archive, its serialisation, and the
lowering of ``triton_call`` inside ``jax.jit`` for a CUDA target (cross-platform lowering, no GPU)."""

from __future__ import annotations

import dataclasses
import re
import struct
import zlib

import pytest

np = pytest.importorskip("numpy")  # before anything runs: a consumer-only install has neither (skip, not error)
jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from interop_support import fake_triton_descriptor  # noqa: E402

import karchive  # noqa: E402
from karchive.errors import ArgumentError  # noqa: E402
from karchive.interop import InteropError  # noqa: E402
from karchive.interop import _proto as P  # noqa: E402
from karchive.interop import jax as kj  # noqa: E402
from karchive.interop._jaxdesc import ArrayParam, Buffer, ScalarParam, describe_variant  # noqa: E402

SD = jax.ShapeDtypeStruct
N = 4096
ADD_GRID = lambda m: ((m["n_elements"] + m["BLOCK"] - 1) // m["BLOCK"],)  # noqa: E731


@pytest.fixture(scope="module")
def arc(examples_archive):
    return karchive.open(examples_archive)


def pure_support(descriptor: bool = False) -> kj.JaxlibSupport:
    """jaxlib as on a GPU host without its CUDA plugin: karchive's own encoder, optional descriptor."""
    s = kj.JaxlibSupport((0, 11, 2), (0, 11, 2), None, "triton_kernel_call_ffi", 4)
    if descriptor:
        s.messages = P.parse_file_descriptor(fake_triton_descriptor())
    return s


def fields(buf: bytes) -> dict[int, list]:
    out: dict[int, list] = {}
    for f in P.iter_fields(buf):
        out.setdefault(f.number, []).append(f.value)
    return out


def test_add_description_matches_the_archive(arc):
    k = arc.kernel("add_kernel")
    x = SD((N,), jnp.float32)
    d = kj.describe(k, x, x, N, out_shape=x, grid=ADD_GRID, BLOCK=1024, compute_capability=90, support=pure_support())
    v = next(v for v in k.variants if v.key == d.variant_key)
    assert (v.target.arch, v.constexprs) == ("90", {"BLOCK": 1024})
    assert d.kernel_name == v.abi.entry == "add_kernel"
    assert (d.num_warps, d.num_ctas, d.shared_mem_bytes, d.compute_capability) == (4, 1, v.abi.shared, 90)
    assert d.grid == (4, 1, 1)
    assert d.params == (
        ArrayParam("x_ptr", 0, 16, 0),
        ArrayParam("y_ptr", 1, 16, 0),
        ArrayParam("out_ptr", 2, 16, 0),
        ScalarParam("n_elements", "i32", N),
    )
    assert d.path == "ptx" and d.ptx == arc.reader.read(v.ir["ptx"].path).decode()
    assert d.global_scratch is None and d.cubin is None


def test_sm80_picks_the_sm80_variant_and_block_256(arc):
    k = arc.kernel("add_kernel")
    x = SD((N,), jnp.float32)
    d = kj.describe(k, x, x, N, out_shape=x, grid=ADD_GRID, BLOCK=256, compute_capability=80, support=pure_support())
    v = next(v for v in k.variants if v.key == d.variant_key)
    assert v.abi.binary_arch == "sm_80" and d.grid == (16, 1, 1)


def test_equal_to_1_parameter_is_not_passed_and_fp32_scalar_is(arc):
    k = arc.kernel("scale_kernel")
    x = SD((N,), jnp.float32)
    one = kj.describe(
        k, x, N, 1, 2.5, out_shape=x, grid=(4,), BLOCK=1024, compute_capability=90, support=pure_support()
    )
    assert [p.name for p in one.params] == ["x_ptr", "out_ptr", "n_elements", "alpha"]
    assert one.params[-1] == ScalarParam("alpha", "fp32", 2.5)
    two = kj.describe(
        k,
        x,
        N // 2,
        2,
        -0.75,
        out_shape=SD((N // 2,), jnp.float32),
        grid=(2,),
        BLOCK=1024,
        compute_capability=90,
        support=pure_support(),
    )
    assert [p.name for p in two.params] == ["x_ptr", "out_ptr", "n_elements", "stride", "alpha"]
    assert two.params[3] == ScalarParam("stride", "i32", 2) and two.variant_key != one.variant_key


def test_output_first_kernel_becomes_an_aliased_zero_operand(arc):
    k = arc.kernel("softmax_kernel")
    x = SD((8, 1000), jnp.float32)
    plan = kj.plan_call(
        k,
        (x, 1000, 1000, 1000),
        {},
        out_shape=x,
        out_names=["out_ptr"],
        grid=(8,),
        compute_capability=90,
        support=pure_support(),
    )
    assert plan.materialized == [0] and plan.aliases == {0: 0}
    assert [p.buffer for p in plan.desc.params if isinstance(p, ArrayParam)] == [0, 1]
    assert plan.operands[0] is x and plan.operands[1] is x  # stand-in for the zero fill, then the input


def test_matmul_default_output_is_the_last_pointer(arc):
    k = arc.kernel("matmul_kernel")
    a = SD((256, 256), jnp.float16)
    plan = kj.plan_call(
        k,
        (a, a, 256, 256, 256, 256, 1, 256, 1, 256, 1),
        {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 32},
        out_shape=SD((256, 256), jnp.float16),
        grid=(8,),
        compute_capability=90,
        support=pure_support(),
    )
    names = [p.name for p in plan.desc.params]
    assert names[:3] == ["a_ptr", "b_ptr", "c_ptr"] and "stride_ak" not in names  # == 1 specialised
    assert plan.aliases == {} and plan.out_avals == [((256, 256), np.dtype("float16"))]


def test_aliases_and_zeroed_outputs(arc):
    k = arc.kernel("add_kernel")
    x = SD((N,), jnp.float32)
    plan = kj.plan_call(
        k,
        (x, x, x, N),
        {"BLOCK": 1024},
        out_shape=x,
        input_output_aliases={2: 0},
        zeroed_outputs=(0,),
        grid=(4,),
        compute_capability=90,
        support=pure_support(),
    )
    assert plan.aliases == {2: 0} and len(plan.operands) == 3
    assert plan.desc.params[2] == ArrayParam("out_ptr", 2, 16, N * 4)
    plan = kj.plan_call(
        k,
        (x, x, N),
        {"BLOCK": 1024},
        out_shape=x,
        zeroed_outputs=lambda m: [0],
        grid=(4,),
        compute_capability=90,
        support=pure_support(),
    )
    assert plan.desc.params[2].bytes_to_zero == N * 4 and plan.aliases == {}


def test_bad_calls_raise_karchive_errors(arc):
    k = arc.kernel("add_kernel")
    x = SD((N,), jnp.float32)
    kw = dict(out_shape=x, grid=(4,), compute_capability=90, support=pure_support())
    with pytest.raises(ArgumentError, match="pointer parameter"):
        kj.plan_call(k, (x, 3, N), {"BLOCK": 1024}, **kw)
    with pytest.raises(ArgumentError, match="unknown argument"):
        kj.plan_call(k, (x, x, N), {"BLOCKS": 1024}, **kw)
    with pytest.raises(ArgumentError, match="missing"):
        kj.plan_call(k, (x, x), {"BLOCK": 1024}, **kw)
    with pytest.raises(karchive.errors.NoMatchingVariantError, match="expects an integer"):
        kj.plan_call(k, (x, x, object()), {"BLOCK": 1024}, **kw)
    assert kj.plan_call(k, (x, x, np.int32(N)), {"BLOCK": 1024}, **kw).desc.params[3].value == N

    def traced(a, n):
        return kj.triton_call(k, a, a, n, out_shape=x, grid=(4,), BLOCK=1024, compute_capability=90)

    with pytest.raises(ArgumentError, match="static Python number"):
        jax.eval_shape(traced, x, SD((), jnp.int32))
    with pytest.raises(InteropError, match="cubin"):
        kj.plan_call(k, (x, x, N), {"BLOCK": 1024}, mode="cubin", **kw)
    with pytest.raises(karchive.errors.NoMatchingVariantError):
        kj.plan_call(k, (x, x, N), {"BLOCK": 512}, **kw)


def test_abi_features_jaxlib_cannot_express_are_refused(arc):
    v = next(v for v in arc.variants("add_kernel") if v.target.arch == "90")
    values = [Buffer(0), Buffer(1), Buffer(2), N, None]
    ok = describe_variant(v, values, (4,), compute_capability=90, path="ptx", ptx="x", cubin=None)
    assert ok.n_buffers == 3
    narrow = dataclasses.replace(
        v,
        abi=dataclasses.replace(
            v.abi,
            params=tuple(dataclasses.replace(p, type="i16", size=2) if p.kind == "scalar" else p for p in v.abi.params),
        ),
    )
    with pytest.raises(InteropError, match="i16"):
        describe_variant(narrow, values, (4,), compute_capability=90, path="ptx", ptx="x", cubin=None)
    prof = dataclasses.replace(v, abi=dataclasses.replace(v.abi, profile_scratch_size=64))
    with pytest.raises(InteropError, match="profile"):
        describe_variant(prof, values, (4,), compute_capability=90, path="ptx", ptx="x", cubin=None)
    pdl = dataclasses.replace(v, abi=dataclasses.replace(v.abi, pdl=True))
    with pytest.raises(InteropError, match="PDL"):
        describe_variant(pdl, values, (4,), compute_capability=90, path="ptx", ptx="x", cubin=None)
    with pytest.raises(InteropError, match="internal ordering"):
        describe_variant(
            v, [Buffer(1), Buffer(0), Buffer(2), N, None], (4,), compute_capability=90, path="ptx", ptx="x", cubin=None
        )
    scratch = dataclasses.replace(v, abi=dataclasses.replace(v.abi, global_scratch_size=128, global_scratch_align=64))
    d = describe_variant(scratch, values, (4,), compute_capability=90, path="ptx", ptx="x", cubin=None)
    assert d.global_scratch == (128, 64)
    with pytest.raises(InteropError, match="global_scratch_size"):
        kj.encode_pure(d, "n", b"", pure_support(descriptor=False))
    enc = kj.encode_pure(d, "n", b"", pure_support(descriptor=True))
    kernel = fields(fields(fields(enc)[1][0])[1][0])
    assert kernel[12] == [128] and kernel[13] == [64]


def test_encoding_follows_jaxlib_proto(arc):
    k = arc.kernel("scale_kernel")
    x = SD((N,), jnp.float32)
    d = kj.describe(
        k, x, N // 2, 2, -0.75, out_shape=x, grid=(2,), BLOCK=1024, compute_capability=90, support=pure_support()
    )
    raw = zlib.decompress(kj.encode(d, "scale", b"meta", pure_support()))
    top = fields(raw)
    assert top[3] == [b"meta"] and top[4] == [b"scale"]
    call = fields(top[1][0])
    assert (call[2], call[3], call[4]) == ([2], [1], [1])  # grid (2, 1, 1)
    kernel = fields(call[1][0])
    assert kernel[1] == [b"scale_kernel"] and kernel[2] == [4] and kernel[6] == [90] and kernel[10] == [1]
    assert kernel[4][0].decode() == d.ptx
    params = [fields(p) for p in call[5]]
    assert fields(params[0][1][0]) == {2: [16]}  # array, divisibility 16, nothing to zero
    assert params[2] == {3: [N // 2]} and params[3] == {3: [2]}
    assert struct.unpack("<f", params[4][7][0].to_bytes(4, "little"))[0] == -0.75


def test_cubin_path_splices_the_module_image(arc):
    k = arc.kernel("add_kernel")
    x = SD((N,), jnp.float32)
    s = pure_support(descriptor=True)
    assert s.accepts_cubin
    strict = kj.describe(k, x, x, N, out_shape=x, grid=(4,), BLOCK=1024, compute_capability=90, mode="cubin", support=s)
    v = next(v for v in k.variants if v.key == strict.variant_key)
    assert strict.path == "cubin" and strict.cubin == arc.reader.read(v.binary.path)
    assert strict.ptx.startswith("// karchive") and v.key in strict.ptx
    auto = kj.describe(k, x, x, N, out_shape=x, grid=(4,), BLOCK=1024, compute_capability=90, support=s)
    assert auto.path == "cubin" and auto.ptx == arc.reader.read(v.ir["ptx"].path).decode()
    kernel = fields(fields(fields(zlib.decompress(kj.encode(strict, "add", b"", s)))[1][0])[1][0])
    image = fields(kernel[11][0])
    assert image == {1: [b"add_kernel"], 2: [strict.cubin]}  # shared_mem_bytes 0: proto3 leaves it out


def _lower(fn, *avals) -> str:
    text = jax.jit(fn).trace(*avals).lower(lowering_platforms=("cuda",)).as_text()
    return re.sub(r'opaque = "[^"]*"', "opaque = <...>", text)


def test_triton_call_lowers_to_the_ffi_custom_call_inside_jit(arc):
    k = arc.kernel("add_kernel")

    def f(x, y):
        z = kj.triton_call(
            k, x, y, x.size, out_shape=SD(x.shape, x.dtype), grid=ADD_GRID, BLOCK=1024, compute_capability=90
        )
        return z * 2

    text = _lower(f, SD((N,), jnp.float32), SD((N,), jnp.float32))
    calls = [ln for ln in text.splitlines() if "custom_call" in ln]
    assert len(calls) == 1 and "@" + kj.jaxlib_support().target in calls[0] and "opaque = <...>" in calls[0]
    assert "output_operand_aliases" not in calls[0]


def test_softmax_and_aliases_lower_with_output_operand_aliases(arc):
    sm, add = arc.kernel("softmax_kernel"), arc.kernel("add_kernel")

    def g(x):
        return kj.triton_call(
            sm,
            x,
            1000,
            1000,
            1000,
            out_shape=SD(x.shape, x.dtype),
            out_names=["out_ptr"],
            grid=(x.shape[0],),
            BLOCK=1024,
            compute_capability=90,
        )

    text = _lower(g, SD((8, 1000), jnp.float32))
    call = next(ln for ln in text.splitlines() if "custom_call" in ln)
    assert "operand_index = 0" in call and "broadcast_in_dim" in text  # zero-filled operand aliased to the result

    def h(x, y, o):
        return kj.triton_call(
            add,
            x,
            y,
            o,
            x.size,
            out_shape=SD(o.shape, o.dtype),
            input_output_aliases={2: 0},
            grid=ADD_GRID,
            BLOCK=1024,
            compute_capability=90,
        )

    text = _lower(h, *(SD((N,), jnp.float32),) * 3)
    call = next(ln for ln in text.splitlines() if "custom_call" in ln)
    assert "operand_index = 2" in call


def test_several_outputs_come_back_in_user_order(arc):
    add = arc.kernel("add_kernel")

    def f(x, y):
        return kj.triton_call(
            add, x, y, x.size, out_shape=[SD(x.shape, x.dtype)], grid=ADD_GRID, BLOCK=1024, compute_capability=90
        )

    out = jax.eval_shape(f, SD((N,), jnp.float32), SD((N,), jnp.float32))
    assert isinstance(out, list) and out[0].shape == (N,)


def test_without_a_gpu_the_compute_capability_must_be_given(arc):
    """plan_call asks JAX for the GPU; on a CPU host it says how to lower for one instead."""
    if any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("JAX sees a GPU here")
    k = arc.kernel("add_kernel")
    x = SD((N,), jnp.float32)
    with pytest.raises(InteropError, match="pass compute_capability="):
        kj.plan_call(k, (x, x, N), {"BLOCK": 1024}, out_shape=x, grid=(4,), support=pure_support())
    plan = kj.plan_call(
        k, (x, x, N), {"BLOCK": 1024}, out_shape=x, grid=(4,), support=pure_support(), compute_capability=80
    )
    assert plan.desc.compute_capability == 80 and plan.variant.abi.binary_arch == "sm_80"
