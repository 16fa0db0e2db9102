"""On a GPU: tensor-descriptor kernels as torch custom ops (karchive.interop.torch), issue 21.

Archives from ``python tests/gpu/build_tensordesc.py`` on the CPU machine (``.gpu/tensordesc/``):
tensordesc.karc (Triton 3.9 there: desc_copy and the persistent matmul, TMA variants for sm_90a) and
im2col.karc (the Gluon im2col gather). The op takes plain tensors for descriptor parameters and launches
``karchive.TensorDescriptor`` objects (the variant's block; the im2col box from ``descriptors=``).
Checks: the copy is bit-exact eager, under ``torch.compile(fullgraph=True)`` and replayed from a CUDA graph
with new input data; the matmul is within fp16 tolerance of torch's; the im2col gather equals torch's unfold.
"""

from __future__ import annotations

import os
import pathlib

import pytest

torch = pytest.importorskip("torch")

USES_BUILD_FIXTURES = False  # its own archives (build_tensordesc.py)
ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = pathlib.Path(os.environ.get("KARCHIVE_GPU_FIXTURES", ROOT / ".gpu")) / "tensordesc"
DEV = "cuda"


def _archive(name: str):
    import karchive

    path = OUT / name
    if not path.exists():
        pytest.skip(
            f"{path} missing: on the CPU machine run `python tests/gpu/build_tensordesc.py` (Triton 3.8+ for "
            "im2col.karc), then carry .gpu/tensordesc"
        )
    return karchive.open(str(path))


@pytest.fixture(scope="module")
def ops():
    from karchive.interop import torch as kt

    arc = _archive("tensordesc.karc")
    copy = kt.custom_op(
        "karchive_desc_gpu::copy",
        arc.kernel("desc_copy"),
        out="out_desc",
        grid=lambda m: (m["in_desc"].shape[0] // 64, m["in_desc"].shape[1] // 64),
        constexprs={"BLOCK_M": 64, "BLOCK_N": 64},
    )
    mm = kt.custom_op(
        "karchive_desc_gpu::matmul",
        arc.kernel("desc_matmul_persistent"),
        out={"c_desc": lambda a: ((a["M"], a["N"]), a["a_desc"].dtype)},
        grid=(132,),
        constexprs={"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "NUM_PROGRAMS": 132},
    )
    return {"copy": copy, "matmul": mm}


def test_descriptor_op_schema_takes_tensors(ops):
    assert str(ops["copy"]._opoverload._schema).endswith("(Tensor in_desc) -> Tensor")
    assert str(ops["matmul"]._opoverload._schema).endswith(
        "(Tensor a_desc, Tensor b_desc, SymInt M, SymInt N, SymInt K) -> Tensor"
    )


def test_descriptor_copy_eager_compiled_and_graph_replayed(ops):
    torch.manual_seed(0)
    x = torch.randn(256, 128, device=DEV, dtype=torch.float16)
    assert torch.equal(ops["copy"](x), x)
    compiled = torch.compile(lambda t: ops["copy"](t) * 2, fullgraph=True)
    assert torch.equal(compiled(x), x * 2)
    static = x.clone()
    ops["copy"](static)  # the first launch loads the module, outside the capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = ops["copy"](static)
    new = torch.randn_like(x)
    static.copy_(new)
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, new)  # the map captured in the graph points at static's storage


def test_descriptor_matmul_op_matches_torch(ops):
    torch.manual_seed(1)
    M, N, K = 512, 384, 256
    a = torch.randn(M, K, device=DEV, dtype=torch.float16)
    b = torch.randn(N, K, device=DEV, dtype=torch.float16)
    c = ops["matmul"](a, b, M, N, K)
    ref = a.float() @ b.float().T
    assert c.shape == (M, N) and not torch.isnan(c).any()
    torch.testing.assert_close(c.float(), ref, atol=0.25, rtol=1e-2)  # fp16 output of |values| up to ~80


def test_im2col_op_matches_torch_unfold():
    from karchive.interop import torch as kt

    arc = _archive("im2col.karc")
    N, H, W, C, R, S = 2, 16, 16, 64, 3, 3
    M = N * H * W
    op = kt.custom_op(
        "karchive_desc_gpu::im2col",
        arc.kernel("im2col_gather"),
        out={"out_desc": lambda a: ((M, R * S * C), a["in_desc"].dtype)},
        grid=(M // 64, R * S, C // 64),
        constexprs={"S": S, "BLOCK_PIX": 64, "BLOCK_C": 64},
        descriptors={"in_desc": {"pixel_box_lower_corner": [-1, -1], "pixel_box_upper_corner": [-1, -1]}},
    )
    torch.manual_seed(2)
    x = torch.randn(N, H, W, C, device=DEV, dtype=torch.float16)
    got = op(x, H, W, C, 1, 1)
    cols = torch.nn.functional.unfold(x.permute(0, 3, 1, 2).float(), (R, S), padding=1)
    want = cols.view(N, C, R * S, H * W).permute(0, 3, 2, 1).reshape(M, R * S * C).to(x.dtype)
    assert torch.equal(got, want)


def test_jax_refuses_descriptor_kernels_in_triton_call_and_the_runtime_launches_them_on_jax_arrays():
    """jaxlib cannot encode a CUtensorMap at XLA run time, so ``triton_call`` refuses a descriptor kernel (with
    the parameter named); outside ``jit`` the runtime launches it on JAX arrays, as the refusal says."""
    jax = pytest.importorskip("jax")
    if not any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("JAX sees no CUDA GPU (pip install 'jax[cuda13]')")
    import jax.numpy as jnp
    import numpy as np
    from cuda.bindings import driver as cu

    import karchive
    from karchive.errors import InteropError
    from karchive.interop import jax as kj

    k = _archive("tensordesc.karc").kernel("desc_copy")
    x = jnp.asarray(np.random.default_rng(0).standard_normal((256, 128)).astype(np.float16))
    with pytest.raises(InteropError, match="parameter 'in_desc' is a host tensor descriptor"):
        jax.jit(
            lambda a: kj.triton_call(
                k, a, out_shape=jax.ShapeDtypeStruct(a.shape, a.dtype), grid=(4, 2), BLOCK_M=64, BLOCK_N=64
            )
        )(x)
    y = jnp.zeros_like(x)
    x.block_until_ready()
    y.block_until_ready()
    k[(4, 2)](karchive.TensorDescriptor(x, [64, 64]), karchive.TensorDescriptor(y, [64, 64]), BLOCK_M=64, BLOCK_N=64)
    (err,) = cu.cuCtxSynchronize()  # the launch went to stream 0, not one JAX orders its reads after
    assert int(err) == 0
    assert np.array_equal(np.asarray(y), np.asarray(x))
