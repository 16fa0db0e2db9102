"""On a GPU: archived kernels inside ``jax.jit`` through jaxlib's Triton custom call (karchive.interop.jax).

Every output is compared with karchive's runtime launching the same archive on the same inputs
(``runtime_ref``); the bridge's own encoder must write the very bytes jaxlib's ``to_proto`` writes.
Paths: cubin (the archive's binary in ``module_image``, nothing compiled at run time), PTX (jaxlib runs
its ptxas: examples.karc's PTX is as new as the producer's Triton, jaxptx.karc's is ISA 8.4), auto.
"""

from __future__ import annotations

import zlib
from typing import Any

import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from gpu_compare import same  # noqa: E402

import karchive  # noqa: E402

SD = jax.ShapeDtypeStruct


@pytest.fixture(scope="module")
def kj() -> Any:
    if not any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("JAX sees no CUDA GPU (pip install 'jax[cuda13]')")
    from karchive.interop import jax as kj

    return kj


@pytest.fixture(scope="module")
def support(kj: Any, interop_report: list) -> Any:
    sup = kj.jaxlib_support()
    interop_report.append(("jax", "jaxlib support", str(sup.summary())))
    return sup


@pytest.fixture(scope="module")
def xj(problem: Any) -> Any:
    return jnp.asarray(problem.xs)


@pytest.fixture(scope="module")
def yj(problem: Any) -> Any:
    return jnp.asarray(problem.ys)


def test_jaxlib_has_the_triton_call_and_its_descriptor(support):
    assert support.lib is not None, support.notes  # jax sees a GPU: the CUDA plugin's gpu_triton is there
    assert support.target == "triton_kernel_call_ffi" or support.jax_version < (0, 10, 1)
    assert support.messages is not None and "TritonKernel" in support.messages, support.notes


def test_runtime_reference_is_sane(problem, runtime_ref):
    same(runtime_ref["add"], problem.xs + problem.ys)


@pytest.mark.parametrize("case", ["scale_stride2_fp32", "add_zeroed", "softmax_materialized", "matmul_fp16", "scratch"])
def test_own_encoder_writes_jaxlibs_bytes(kj, support, earc, fixtures, problem, case, interop_report):
    """``encode_pure`` (used where jaxlib has no CUDA plugin, e.g. to lower on a CPU host) == ``to_proto``."""
    p, f32 = problem, jnp.float32
    if case == "scale_stride2_fp32":
        desc = kj.describe(
            earc.kernel("scale_kernel"),
            SD((p.N,), f32),
            p.N // 2,
            2,
            -0.75,
            out_shape=SD((p.N // 2,), f32),
            grid=p.add_grid,
            BLOCK=1024,
            mode="ptx",
        )
    elif case == "add_zeroed":
        x = SD((p.N,), f32)
        desc = kj.describe(
            earc.kernel("add_kernel"),
            x,
            x,
            p.N,
            out_shape=x,
            zeroed_outputs=(0,),
            grid=p.add_grid,
            BLOCK=1024,
            mode="ptx",
        )
        assert desc.params[2].bytes_to_zero == p.N * 4
    elif case == "softmax_materialized":
        s = SD((p.ROWS, p.COLS), f32)
        desc = kj.describe(
            earc.kernel("softmax_kernel"),
            s,
            p.COLS,
            p.COLS,
            p.COLS,
            out_shape=s,
            out_names=["out_ptr"],
            grid=(p.ROWS,),
            BLOCK=1024,
            mode="ptx",
        )
    elif case == "matmul_fp16":
        a = SD((p.M, p.K), jnp.float16)
        desc = kj.describe(
            earc.kernel("matmul_kernel"),
            a,
            a,
            p.M,
            p.NN,
            p.K,
            p.K,
            1,
            p.NN,
            1,
            p.NN,
            1,
            out_shape=SD((p.M, p.NN), jnp.float16),
            grid=p.mm_grid,
            mode="ptx",
            **dict(p.MM),
        )
    else:
        if support.kernel_field("global_scratch_size") is None:
            pytest.skip(f"jaxlib {support.summary()['jaxlib']} has no global_scratch_size field")
        k = karchive.open(str(fixtures / "scratch.karc")).kernel("tma_scale_kernel")
        m = SD((128, 128), f32)
        desc = kj.describe(k, m, 128, 128, out_shape=m, grid=(2, 2), BM=64, BN=64, mode="ptx")
        assert desc.global_scratch is not None
    ours = kj.encode_pure(desc, "k", b"meta", support)
    theirs = zlib.decompress(kj.encode(desc, "k", b"meta", support))
    assert ours == theirs, f"encodings differ: ours {ours[:80]!r}... jaxlib's {theirs[:80]!r}..."
    interop_report.append(("jax", f"encoder == to_proto ({case})", f"{len(ours)} bytes identical"))


def _jit_add(kj: Any, kernel: Any, problem: Any, mode: str, block: int) -> Any:
    return jax.jit(
        lambda a, b: kj.triton_call(
            kernel, a, b, a.size, out_shape=SD(a.shape, a.dtype), grid=problem.add_grid, BLOCK=block, mode=mode
        )
    )


@pytest.mark.parametrize("mode", ["cubin", "auto"])
def test_jit_add_cubin_and_auto_paths(kj, support, earc, problem, xj, yj, runtime_ref, mode, interop_report):
    if not support.accepts_cubin:
        pytest.skip(f"jaxlib {support.summary()['jaxlib']} takes no module image: {'; '.join(support.notes)}")
    k = earc.kernel("add_kernel")
    desc = kj.describe(
        k, xj, yj, problem.N, out_shape=SD(xj.shape, xj.dtype), grid=problem.add_grid, BLOCK=1024, mode=mode
    )
    assert desc.path == "cubin" and desc.ptx.startswith("// karchive") == (mode == "cubin")
    out = _jit_add(kj, k, problem, mode, 1024)(xj, yj).block_until_ready()
    detail = same(np.asarray(out), runtime_ref["add"])
    interop_report.append(("jax", f"jit add mode={mode}", f"path={desc.path} cubin={len(desc.cubin)} B {detail}"))


def test_jit_add_ptx_path_on_the_example_archive(kj, earc, problem, xj, yj, runtime_ref, interop_report):
    """The producer's PTX: jaxlib's ptxas may be older than the producer's (then this is an expected failure)."""
    try:
        out = _jit_add(kj, earc.kernel("add_kernel"), problem, "ptx", 256)(xj, yj).block_until_ready()
    except Exception as exc:
        if "Unsupported .version" in str(exc):
            line = next(ln for ln in str(exc).splitlines() if "Unsupported .version" in ln)
            interop_report.append(("jax", "jit add mode=ptx (examples.karc)", f"XFAIL {line.strip()[:160]}"))
            pytest.xfail(f"jaxlib's ptxas is older than the producer's PTX (docs/interop.md): {line.strip()[:200]}")
        raise
    interop_report.append(("jax", "jit add mode=ptx (examples.karc)", same(np.asarray(out), runtime_ref["add"])))


def test_jit_add_ptx_path_with_an_older_ptx_isa(kj, fixtures, problem, xj, yj, interop_report):
    """jaxptx.karc's PTX is ISA 8.4 (built with ptx_version=84): jaxlib assembles it and runs it."""
    k = karchive.open(str(fixtures / "jaxptx.karc")).kernel("add_kernel")
    desc = kj.describe(
        k, xj, yj, problem.N, out_shape=SD(xj.shape, xj.dtype), grid=problem.add_grid, BLOCK=1024, mode="ptx"
    )
    assert desc.path == "ptx" and desc.cubin is None and ".version 8.4" in desc.ptx
    out = _jit_add(kj, k, problem, "ptx", 1024)(xj, yj).block_until_ready()
    interop_report.append(("jax", "jit add mode=ptx (ISA 8.4)", same(np.asarray(out), problem.xs + problem.ys)))


def test_eager_call_outside_jit(kj, earc, problem, xj, yj, runtime_ref):
    out = kj.triton_call(
        earc.kernel("add_kernel"),
        xj,
        yj,
        problem.N,
        out_shape=SD((problem.N,), jnp.float32),
        grid=problem.add_grid,
        BLOCK=1024,
    )
    same(np.asarray(out), runtime_ref["add"])


def test_output_first_kernel_gets_a_zero_filled_aliased_operand(kj, earc, problem, runtime_ref, interop_report):
    p = problem
    f = jax.jit(
        lambda s: kj.triton_call(
            earc.kernel("softmax_kernel"),
            s,
            p.COLS,
            p.COLS,
            p.COLS,
            out_shape=SD(s.shape, s.dtype),
            out_names=["out_ptr"],
            grid=(p.ROWS,),
            BLOCK=1024,
        )
    )
    detail = same(np.asarray(f(jnp.asarray(p.sm_in))), runtime_ref["softmax"], exact=False)
    interop_report.append(("jax", "jit softmax (out_ptr first)", detail))


def test_jit_matmul_fp16(kj, earc, problem, runtime_ref, interop_report):
    p = problem
    f = jax.jit(
        lambda a, b: kj.triton_call(
            earc.kernel("matmul_kernel"),
            a,
            b,
            p.M,
            p.NN,
            p.K,
            p.K,
            1,
            p.NN,
            1,
            p.NN,
            1,
            out_shape=SD((p.M, p.NN), jnp.float16),
            grid=p.mm_grid,
            **dict(p.MM),
        )
    )
    detail = same(np.asarray(f(jnp.asarray(p.am), jnp.asarray(p.bm))), runtime_ref["matmul"], exact=False, tol=2e-2)
    interop_report.append(("jax", "jit matmul fp16", detail))


def test_jit_scale_picks_the_stride_1_and_the_general_variant(kj, earc, problem, xj, runtime_ref):
    p, k = problem, earc.kernel("scale_kernel")
    f1 = jax.jit(
        lambda a: kj.triton_call(k, a, p.N, 1, 2.5, out_shape=SD(a.shape, a.dtype), grid=p.add_grid, BLOCK=1024)
    )
    f2 = jax.jit(
        lambda a: kj.triton_call(
            k, a, p.N // 2, 2, -0.75, out_shape=SD((p.N // 2,), a.dtype), grid=p.add_grid, BLOCK=1024
        )
    )
    d1 = kj.describe(k, xj, p.N, 1, 2.5, out_shape=SD(xj.shape, xj.dtype), grid=p.add_grid, BLOCK=1024)
    d2 = kj.describe(k, xj, p.N // 2, 2, -0.75, out_shape=SD((p.N // 2,), xj.dtype), grid=p.add_grid, BLOCK=1024)
    assert d1.variant_key != d2.variant_key
    same(np.asarray(f1(xj)), runtime_ref["scale1"])
    same(np.asarray(f2(xj)), runtime_ref["scale2"])


def test_input_output_aliases_update_in_place(kj, earc, problem, xj, yj, runtime_ref):
    p = problem
    f = jax.jit(
        lambda a, b, o: kj.triton_call(
            earc.kernel("add_kernel"),
            a,
            b,
            o,
            p.N,
            out_shape=SD(o.shape, o.dtype),
            input_output_aliases={2: 0},
            grid=p.add_grid,
            BLOCK=1024,
        ),
        donate_argnums=2,
    )
    same(np.asarray(f(xj, yj, jnp.zeros_like(xj))), runtime_ref["add"])


def test_zeroed_outputs_are_zero_where_the_kernel_does_not_write(kj, earc, problem, xj, yj):
    """add over the first n elements of an N-element output: the tail must be zero, not XLA's garbage."""
    p, n = problem, problem.N - 1000
    f = jax.jit(
        lambda a, b: kj.triton_call(
            earc.kernel("add_kernel"),
            a,
            b,
            n,
            out_shape=SD(a.shape, a.dtype),
            zeroed_outputs=(0,),
            grid=p.add_grid,
            BLOCK=1024,
        )
    )
    g = jax.jit(lambda a, b: jnp.full_like(a, jnp.nan))  # leave NaNs in XLA's allocator for the next output
    g(xj, yj).block_until_ready()
    out = np.asarray(f(xj, yj))
    same(out[:n], p.xs[:n] + p.ys[:n])
    same(out[n:], np.zeros(p.N - n, np.float32))


def test_global_scratch_kernel_inside_jit(kj, support, fixtures, interop_report):
    """A kernel with device-side tensor descriptors: jaxlib allocates its global scratch (jaxlib > 0.11.0)."""
    if support.kernel_field("global_scratch_size") is None:
        pytest.skip(f"jaxlib {support.summary()['jaxlib']} cannot pass a global scratch size")
    k = karchive.open(str(fixtures / "scratch.karc")).kernel("tma_scale_kernel")
    m, n = 256, 192
    x = jnp.asarray(np.random.default_rng(1).standard_normal((m, n), dtype=np.float32))
    f = jax.jit(
        lambda a: kj.triton_call(k, a, m, n, out_shape=SD(a.shape, a.dtype), grid=(m // 64, n // 64), BM=64, BN=64)
    )
    interop_report.append(("jax", "jit TMA kernel (global scratch)", same(np.asarray(f(x)), np.asarray(x) * 2)))


def test_runtime_launch_on_jax_arrays_outside_jit(earc, problem, xj, yj, runtime_ref, kj):
    import torch

    out = jnp.zeros_like(xj)
    out.block_until_ready()
    earc.kernel("add_kernel")[problem.add_grid](xj, yj, out, problem.N, BLOCK=1024, stream=0)
    torch.cuda.synchronize()  # the whole device: the launch went to the legacy stream of the primary context
    same(np.asarray(out), runtime_ref["add"])
