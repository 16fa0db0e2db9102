"""Launch archived kernels (built on a CPU-only machine with another Triton) on a real GPU.

Every check compares with the GPU machine's own Triton launching the same source on the same fresh
random inputs, and/or with torch. Outputs are poisoned (NaN) before each launch so unwritten elements
fail. Every test runs twice: on the compiled launch path (``_fastlaunch``; build it first with
``python tools/build_extension.py``, else those runs skip) and on the pure-Python path. Skipped
cleanly where there is no GPU (see conftest.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading

import pytest

import karchive
from karchive.errors import ArgumentError, KarchiveError, NoMatchingVariantError
from karchive.runtime import launch_path

torch = pytest.importorskip("torch")
DEV = "cuda"


@pytest.fixture(autouse=True, params=[launch_path.EXTENSION, launch_path.PYTHON])
def path(request):
    """Kernels made during the test use this launch path."""
    if request.param == launch_path.EXTENSION and launch_path.extension() is None:
        pytest.skip(
            f"the compiled launcher is not built: {launch_path.status().detail} (python tools/build_extension.py)"
        )
    with launch_path.forced(request.param):
        yield request.param


@pytest.fixture
def arc(fixtures, path):
    """The example archive opened for this test (its kernels on this test's launch path)."""
    a = karchive.open(str(fixtures / "examples_gpu.karc"))
    for name in a.kernels():
        assert a.kernel(name).launch_path == path
    return a


def rnd(*shape, dtype=None):
    return torch.randn(*shape, device=DEV, dtype=dtype or torch.float32)


def poison(t):
    return torch.full_like(t, float("nan"))


def cdiv(a, b):
    return (a + b - 1) // b


# -- every example kernel vs Triton's own launch -----------------------------------------------------------
def test_add_matches_triton(arc, tk):
    n = 98_431
    x, y = rnd(n), rnd(n)
    out, ref = poison(x), poison(x)
    add = arc.kernel("add_kernel")
    add[(cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
    tk.add_kernel[(cdiv(n, 1024),)](x, y, ref, n, BLOCK=1024)
    torch.cuda.synchronize()
    assert torch.equal(out, ref)
    assert torch.equal(out, x + y)
    v = add.select(x, y, out, n, BLOCK=1024)
    assert v.abi.num_warps == 4 and v.abi.binary_arch == "sm_90a"


def test_grid_callable_sees_meta(arc):
    n = 5000
    x, y = rnd(n), rnd(n)
    out = poison(x)
    seen = {}

    def grid(meta):
        seen.update(meta)
        return (cdiv(meta["n_elements"], meta["BLOCK"]),)

    arc.kernel("add_kernel")[grid](x, y, out, n)
    torch.cuda.synchronize()
    assert torch.equal(out, x + y)
    assert seen["BLOCK"] == 1024 and seen["num_warps"] == 4 and seen["n_elements"] == n


def test_num_warps8_variant_for_misaligned_views(arc, tk):
    n = 70_001
    xb, yb, ob = rnd(n + 1), rnd(n + 1), rnd(n + 1)
    x, y, out = xb[1:], yb[1:], ob[1:]  # 4-byte offset: not 16-byte aligned
    out.fill_(float("nan"))
    add = arc.kernel("add_kernel")
    v = add.select(x, y, out, n)
    assert v.abi.num_warps == 8 and not any(p.divisibility for p in v.params)
    add[(cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
    ref = torch.full_like(out, float("nan"))
    tk.add_kernel[(cdiv(n, 1024),)](x, y, ref, n, BLOCK=1024)
    torch.cuda.synchronize()
    assert torch.equal(out, ref) and torch.equal(out, x + y)


def test_softmax_matches_triton(arc, tk):
    rows, cols = 333, 781
    x = rnd(rows, cols) * 3
    out, ref = poison(x), poison(x)
    arc.kernel("softmax_kernel")[(rows,)](out, x, x.stride(0), out.stride(0), cols, BLOCK=1024)
    tk.softmax_kernel[(rows,)](ref, x, x.stride(0), ref.stride(0), cols, BLOCK=1024)
    torch.cuda.synchronize()
    torch.testing.assert_close(out, ref, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(out, torch.softmax(x, dim=1), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("blocks", [(64, 64, 32), (128, 128, 128)])
def test_matmul_matches_triton(arc, tk, blocks):
    bm, bn, bk = blocks
    M, N, K = 511, 385, 1000
    a = rnd(M, K, dtype=torch.float16)
    b = rnd(K, N, dtype=torch.float16)
    c, ref = poison(torch.empty(M, N, device=DEV, dtype=torch.float16)), None
    mm = arc.kernel("matmul_kernel")
    args = (a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    v = mm.select(*args, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk)
    if bm == 128:
        assert v.abi.shared > 48 * 1024, v.abi.shared  # the > 48 KB dynamic shared memory case
        assert v.abi.num_warps == 8
    grid = (cdiv(M, bm) * cdiv(N, bn),)
    mm[grid](*args, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk)
    ref = poison(c)
    tk.matmul_kernel[grid](
        a,
        b,
        ref,
        M,
        N,
        K,
        a.stride(0),
        a.stride(1),
        b.stride(0),
        b.stride(1),
        ref.stride(0),
        ref.stride(1),
        BLOCK_M=bm,
        BLOCK_N=bn,
        BLOCK_K=bk,
        num_warps=v.abi.num_warps,
    )
    torch.cuda.synchronize()
    exact = a.double() @ b.double()
    err = ((c.double() - exact).norm() / exact.norm()).item()
    assert not torch.isnan(c).any()
    assert err < 2e-3, err
    torch.testing.assert_close(c, ref, rtol=2e-3, atol=2e-2)


def test_equal_to_1_specialisation(arc, tk):
    scale = arc.kernel("scale_kernel")
    n = 10_000
    x = rnd(2 * n)
    out, ref = poison(x[:n]), poison(x[:n])
    v1 = scale.select(x, out, n, 1, 0.5, BLOCK=256)
    v2 = scale.select(x, out, n, 2, 0.5, BLOCK=256)
    assert any(p.equal_to_1 for p in v1.params) and not any(p.equal_to_1 for p in v2.params)
    for stride in (1, 2):
        out.fill_(float("nan"))
        ref.fill_(float("nan"))
        scale[(cdiv(n, 256),)](x, out, n, stride, 0.5, BLOCK=256)
        tk.scale_kernel[(cdiv(n, 256),)](x, ref, n, stride, 0.5, BLOCK=256)
        torch.cuda.synchronize()
        assert torch.equal(out, ref)
        assert torch.equal(out, x[: n * stride : stride] * 0.5)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_fp16_bf16_scalars_are_16_bit(arc, dtype):
    """alpha is an fp16/bf16 *scalar* parameter: packed as 2 bytes (4 would give garbage bits).

    A product of two 16-bit floats is exact in fp32, so any correct kernel rounds it once and the
    result equals torch's; bf16 alpha is made as Triton's launcher makes it (fp32, keep the high half),
    and 0.3333 is a value where that differs from round-to-nearest-even.
    """
    from karchive.runtime.launch._argpack import bf16_bits, bf16_bits_rne

    dt = getattr(torch, dtype)
    n = 4096
    x = rnd(n, dtype=dt)
    out = poison(x)
    alpha = 0.3333
    scale = arc.kernel("scale_kernel")
    v = scale.select(x, out, n, 1, alpha, BLOCK=256)
    assert v.params[4].type == {"float16": "fp16", "bfloat16": "bf16"}[dtype]
    scale[(cdiv(n, 256),)](x, out, n, 1, alpha, BLOCK=256)
    torch.cuda.synchronize()
    if dtype == "float16":
        a16 = torch.tensor(alpha, dtype=dt, device=DEV)
    else:
        assert bf16_bits(alpha) != bf16_bits_rne(alpha)
        a16 = torch.tensor([bf16_bits(alpha)], dtype=torch.int16, device=DEV).view(torch.bfloat16)[0]
    assert torch.equal(out, x * a16), (out[:4], (x * a16)[:4])


# -- launch features -----------------------------------------------------------------------------------------
def test_cuda_graph_capture(arc):
    n = 1 << 16
    x, y = rnd(n), rnd(n)
    out = poison(x)
    add = arc.kernel("add_kernel")
    add[(cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)  # warm: select + load outside the capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        add[(cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
    for _ in range(2):
        x.copy_(rnd(n))
        y.copy_(rnd(n))
        out.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, x + y)


def test_bound_launcher_and_scratch_kernel_in_a_captured_graph(arc, fixtures):
    n = 1 << 15
    x, y = rnd(n), rnd(n)
    out = poison(x)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):  # bind on the stream the graph will be captured on
        b = arc.kernel("add_kernel").bind((cdiv(n, 1024),), x, y, out, n, BLOCK=1024)
        k = karchive.open(str(fixtures / "scratch.karc")).kernel("tma_scale_kernel")
        M, N = 128, 192
        a = rnd(M, N)
        a2 = poison(a)
        k[(M // 64, N // 64)](a, a2, M, N)  # warm: loads and allocates scratch outside the capture
    s.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        b()
        k[(M // 64, N // 64)](a, a2, M, N)
    x.copy_(rnd(n))
    a.copy_(rnd(M, N))
    out.fill_(float("nan"))
    a2.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, x + y)
    assert torch.equal(a2, a * 2)


def test_bound_launcher(arc):
    n = 50_000
    x, y = rnd(n), rnd(n)
    out = poison(x)
    add = arc.kernel("add_kernel")
    b = add.bind((cdiv(n, 1024),), x, y, out, n, BLOCK=1024)
    assert b.param_names == ("x_ptr", "y_ptr", "out_ptr", "n_elements")
    b()
    torch.cuda.synchronize()
    assert torch.equal(out, x + y)
    x2, y2, out2 = rnd(n), rnd(n), poison(x)
    b(x2, y2, out2, n)
    torch.cuda.synchronize()
    assert torch.equal(out2, x2 + y2)
    out3 = poison(x)
    b.set("out_ptr", out3.data_ptr())
    b()
    torch.cuda.synchronize()
    assert torch.equal(out3, x2 + y2)
    with pytest.raises(ArgumentError, match="16-byte"):
        b(x2, y2, torch.empty(n + 1, device=DEV)[1:], n)


def test_explicit_streams(arc):
    n = 1 << 15
    x, y = rnd(n), rnd(n)
    add = arc.kernel("add_kernel")
    s = torch.cuda.Stream()
    for stream in (s, s.cuda_stream):
        out = poison(x)
        torch.cuda.synchronize()
        add[(cdiv(n, 1024),)](x, y, out, n, BLOCK=1024, stream=stream)
        s.synchronize()
        assert torch.equal(out, x + y)
    out = poison(x)
    with torch.cuda.stream(s):  # the current torch stream is picked up without stream=
        add[(cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
    s.synchronize()
    assert torch.equal(out, x + y)


def test_threads_launch_concurrently(arc):
    add = arc.kernel("add_kernel")
    n = 1 << 14
    errors = []

    def work(seed):
        try:
            for _ in range(50):
                x, y = rnd(n), rnd(n)
                out = poison(x)
                add[(cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
                torch.cuda.current_stream().synchronize()
                assert torch.equal(out, x + y)
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_eight_threads_launch_on_their_own_streams(arc):
    """8 threads, each on a stream of its own (given as stream= and as torch's current stream), 50 launches
    each with its own inputs and sizes, all at once: every output is right."""
    add = arc.kernel("add_kernel")
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def work(t: int) -> None:
        try:
            s = torch.cuda.Stream()
            n = 4096 + 1024 * t
            with torch.cuda.stream(s):
                xs = [rnd(n) for _ in range(50)]
                ys = [rnd(n) for _ in range(50)]
                outs = [poison(x) for x in xs]
            s.synchronize()
            start.wait()
            for i in range(50):
                if i % 2:
                    add[(cdiv(n, 1024),)](xs[i], ys[i], outs[i], n, BLOCK=1024, stream=s)
                else:
                    with torch.cuda.stream(s):
                        add[(cdiv(n, 1024),)](xs[i], ys[i], outs[i], n, BLOCK=1024)
            s.synchronize()
            for i in range(50):
                assert torch.equal(outs[i], xs[i] + ys[i]), (t, i)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors[0]


def test_launch_options_select_variants_on_the_gpu(arc, tk):
    """num_warps= picks the variant built with it (as Triton does), and it computes the same result."""
    n = 50_000
    x, y = rnd(n), rnd(n)
    add = arc.kernel("add_kernel")
    assert add.select(x, y, x, n, BLOCK=1024).abi.num_warps == 4
    assert add.select(x, y, x, n, BLOCK=1024, num_warps=8).abi.num_warps == 8
    out = poison(x)
    add[(cdiv(n, 1024),)](x, y, out, n, BLOCK=1024, num_warps=8)
    torch.cuda.synchronize()
    assert torch.equal(out, x + y)
    with pytest.raises(NoMatchingVariantError, match="num_warps=2, but this variant was compiled with num_warps=4"):
        add[(cdiv(n, 1024),)](x, y, out, n, BLOCK=1024, num_warps=2)


def test_empty_grid_is_a_no_op(arc):
    """A grid with a zero dimension launches nothing, as in Triton: no error, and not one element written."""
    x, y = rnd(16), rnd(16)
    out = poison(x)
    add = arc.kernel("add_kernel")
    for grid in [(0,), (0, 4), (4, 0, 1), (1, 1, 0)]:
        add[grid](x, y, out, 16, BLOCK=1024)
    torch.cuda.synchronize()
    assert torch.isnan(out).all(), "an empty grid wrote to the output"
    add[(1,)](x, y, out, 16, BLOCK=1024)  # the same call with one program does write: the check above can fail
    torch.cuda.synchronize()
    assert torch.equal(out, x + y)


@pytest.mark.parametrize("name", ["cluster", "pdl", "coop"])
def test_launch_ex_features(fixtures, name):
    a = karchive.open(str(fixtures / f"{name}.karc"))
    add = a.kernel("add_kernel")
    n = 100_003
    x, y = rnd(n), rnd(n)
    out = poison(x)
    v = add.select(x, y, out, n)
    assert (v.abi.num_ctas, v.abi.pdl, v.abi.cooperative_grid) == {
        "cluster": (2, False, False),
        "pdl": (1, True, False),
        "coop": (1, False, True),
    }[name]
    add[(cdiv(n, 1024),)](x, y, out, n)
    torch.cuda.synchronize()
    assert torch.equal(out, x + y)


def test_global_scratch_kernel(fixtures):
    a = karchive.open(str(fixtures / "scratch.karc"))
    k = a.kernel("tma_scale_kernel")
    M, N = 256, 320
    x = rnd(M, N)
    out = poison(x)
    v = k.select(x, out, M, N)
    assert v.abi.global_scratch_size > 0
    k[(M // 64, N // 64)](x, out, M, N)
    torch.cuda.synchronize()
    assert torch.equal(out, x * 2)


def test_ptx_jit_fallback_is_opt_in(fixtures, caplog):
    n = 3000
    x, y = rnd(n), rnd(n)
    out = poison(x)
    plain = karchive.open(str(fixtures / "ptx.karc"))
    with pytest.raises(NoMatchingVariantError, match="PTX JIT fallback is off"):
        plain.kernel("add_kernel")[(3,)](x, y, out, n)
    jit = karchive.open(str(fixtures / "ptx.karc"), allow_ptx=True)
    with caplog.at_level("WARNING", logger="karchive.runtime"):
        jit.kernel("add_kernel")[(3,)](x, y, out, n)
    torch.cuda.synchronize()
    assert torch.equal(out, x + y)
    assert any("JIT-compiling PTX" in r.message for r in caplog.records)


# -- other frameworks --------------------------------------------------------------------------------------
def test_cupy_arrays(arc):
    cp = pytest.importorskip("cupy")
    n = 12_345
    x = cp.random.standard_normal(n, dtype=cp.float32)
    y = cp.random.standard_normal(n, dtype=cp.float32)
    out = cp.full(n, cp.nan, dtype=cp.float32)
    arc.kernel("add_kernel")[(cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
    cp.cuda.get_current_stream().synchronize()
    assert bool((out == x + y).all())


def test_dlpack_and_cuda_array_interface(arc):
    n = 4096
    x, y = rnd(n), rnd(n)
    out = poison(x)

    class Dl:  # only DLPack
        def __init__(self, t):
            self.t = t

        def __dlpack__(self, stream=None):
            return self.t.__dlpack__()

        def __dlpack_device__(self):
            return self.t.__dlpack_device__()

    class Cai:  # only __cuda_array_interface__
        def __init__(self, t):
            self.__cuda_array_interface__ = t.__cuda_array_interface__

    arc.kernel("add_kernel")[(4,)](Dl(x), Cai(y), out.data_ptr(), n, BLOCK=1024)
    torch.cuda.synchronize()
    assert torch.equal(out, x + y)


def test_jax_arrays(arc):
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    if not any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("jax sees no GPU")
    n = 2048
    x = jnp.arange(n, dtype=jnp.float32)
    y = jnp.ones(n, dtype=jnp.float32)
    out = jnp.zeros(n, dtype=jnp.float32)
    for a in (x, y, out):
        a.block_until_ready()
    arc.kernel("add_kernel")[(2,)](x, y, out, n, BLOCK=1024)
    torch.cuda.synchronize()
    import numpy as np

    assert np.array_equal(np.asarray(out), np.arange(n, dtype=np.float32) + 1)


# -- errors ------------------------------------------------------------------------------------------------
def test_errors_name_the_parameter(arc):
    n = 2048
    x, y, out = rnd(n), rnd(n), rnd(n)
    add = arc.kernel("add_kernel")
    with pytest.raises(ArgumentError, match="y_ptr.*host"):
        add[(2,)](x, y.cpu(), out, n, BLOCK=1024)
    with pytest.raises(NoMatchingVariantError, match="x_ptr has dtype fp16"):
        add[(2,)](x.half(), y, out, n, BLOCK=1024)
    with pytest.raises(ArgumentError, match="n_elements"):
        add[(2,)](x, y, out, BLOCK=1024)
    with pytest.raises(KarchiveError, match="n_elements.*(out of range|does not fit)"):
        add[(2,)](x, y, out, 1 << 40, BLOCK=1024)
    sm = arc.kernel("softmax_kernel")
    base = rnd(8 * 1024 + 4)
    bad = base[1 : 1 + 8 * 1000].view(8, 1000)
    with pytest.raises(NoMatchingVariantError, match="in_ptr address 0x[0-9a-f]+ is not 16-byte aligned"):
        sm[(8,)](poison(bad), bad, 1000, 1000, 1000, BLOCK=1024)
    torch.cuda.synchronize()


def test_multi_gpu_each_device_loads_its_module(arc):
    if torch.cuda.device_count() < 2:
        pytest.skip("one GPU")
    n = 4096
    count = torch.cuda.device_count()
    add = arc.kernel("add_kernel")
    # Interleave devices (0, 1, ..., then back): each launch must use the module of its tensors' device.
    for d in list(range(count)) + list(reversed(range(count))):
        x = torch.randn(n, device=f"cuda:{d}")
        y = torch.randn(n, device=f"cuda:{d}")
        out = torch.full_like(x, float("nan"))
        add[(4,)](x, y, out, n, BLOCK=1024)
        torch.cuda.synchronize(d)
        assert torch.equal(out, x + y)
    # Tensors on two different GPUs in one call are refused before any launch.
    a, b = torch.randn(n, device="cuda:0"), torch.randn(n, device="cuda:1")
    with pytest.raises(KarchiveError):
        add[(4,)](a, b, torch.empty_like(a), n, BLOCK=1024)


# -- the launch path imports neither triton nor torch ------------------------------------------------------
CHILD = textwrap.dedent(r"""
    import sys
    class Block:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("triton", "torch"):
                raise ImportError(f"{name} is blocked in this test")
    sys.meta_path.insert(0, Block())
    import ctypes, struct
    import karchive
    from cuda.bindings import driver as d
    arc = karchive.open(sys.argv[1])
    add = arc.kernel("add_kernel")
    d.cuInit(0)
    err, dev = d.cuDeviceGet(0)
    err, ctx = d.cuDevicePrimaryCtxRetain(dev)
    d.cuCtxSetCurrent(ctx)
    n = 1000
    host = (ctypes.c_float * n)(*[float(i) for i in range(n)])
    bufs = [int(d.cuMemAlloc(4 * n)[1]) for _ in range(3)]
    for b in bufs[:2]:
        assert d.cuMemcpyHtoD(b, host, 4 * n)[0] == 0
    add[(1,)](bufs[0], bufs[1], bufs[2], n, BLOCK=1024)
    assert d.cuCtxSynchronize()[0] == 0
    res = (ctypes.c_float * n)()
    d.cuMemcpyDtoH(res, bufs[2], 4 * n)
    assert list(res) == [2.0 * i for i in range(n)], list(res)[:5]
    bad = sorted(m for m in sys.modules if m.split(".")[0] in ("triton", "torch"))
    assert not bad, bad
    import os
    assert add.launch_path == os.environ["KARCHIVE_LAUNCH_PATH"], add.launch_path
    print("OK no triton, no torch")
""")


def test_launch_path_imports_neither_triton_nor_torch(fixtures, tmp_path, path):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = {**os.environ, launch_path.ENV: path}
    r = subprocess.run(
        [sys.executable, str(script), str(fixtures / "examples_gpu.karc")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "OK no triton, no torch" in r.stdout


def test_registry_ref_without_registry_is_a_clear_error():
    with pytest.raises(KarchiveError):
        karchive.open("definitely-not-a-file-xyz@1.0")
