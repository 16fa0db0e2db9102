#!/usr/bin/env python3
"""GPU check of karchive's framework bridges (issue 6): torch custom ops, JAX, CuPy / raw pointers.

    python3 tools/gpu_interop.py examples.karc        # archive built from examples/build.toml (needs cuda:90)

Compares, on one GPU:
  torch  eager / torch.compile(fullgraph=True) / torch.compile(mode="reduce-overhead") / torch.cuda.graph
         outputs of the karchive custom ops with Triton's own launch of the same kernels (examples/kernels.py);
  jax    karchive.interop.jax.triton_call inside jax.jit (cubin, ptx and auto paths, first-call cost)
         with the same kernel launched through karchive's runtime;
  cupy   runtime launches on CuPy arrays and streams, raw int pointers, __cuda_array_interface__ objects
         (Numba's protocol; numba itself if installed).
Each check is independent (one failure does not hide the others). Prints a table; with $OUT set, writes
$OUT/interop.json with details and timings. Exit status 1 if any check failed.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from typing import Any, Callable

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # share the GPU with torch and CuPy
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "examples"))

import numpy as np  # noqa: E402

RESULTS: list[dict] = []
INFO: dict[str, Any] = {}


def check(section: str, name: str) -> Callable:
    """Run ``fn`` now; record pass / fail / skip (a returned string is the detail, "SKIP: ..." skips)."""
    def run(fn: Callable[[], Any]) -> None:
        t0 = time.perf_counter()
        try:
            detail = fn()
            status = "skip" if isinstance(detail, str) and detail.startswith("SKIP") else "pass"
        except Exception as exc:  # noqa: BLE001 - report and go on
            status, detail = "FAIL", f"{type(exc).__name__}: {exc}"
            RESULTS.append({"section": section, "check": name, "status": status, "detail": str(detail)[:2000],
                            "traceback": traceback.format_exc()[-4000:], "seconds": time.perf_counter() - t0})
            return
        RESULTS.append({"section": section, "check": name, "status": status, "detail": "" if detail is None
                        else str(detail), "seconds": round(time.perf_counter() - t0, 3)})
    return run


def cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


def same(a: Any, b: Any, *, exact: bool = True, tol: float = 1e-5) -> str:
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise AssertionError(f"shape {a.shape} != {b.shape}")
    diff = float(np.max(np.abs(a - b))) if a.size else 0.0
    if exact and diff != 0.0:
        raise AssertionError(f"max |diff| = {diff} (expected bit-identical)")
    if not exact and not np.allclose(a, b, rtol=tol, atol=tol):
        raise AssertionError(f"max |diff| = {diff} > tol {tol}")
    return f"max|diff|={diff:.3g}"


def per_call_us(fn: Callable[[], Any], sync: Callable[[], Any], n: int = 2000) -> float:
    for _ in range(20):
        fn()
    sync()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    sync()
    return (time.perf_counter() - t0) / n * 1e6


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    path = sys.argv[1]
    import karchive

    arc = karchive.open(path)
    INFO["archive"] = {"path": path, "name": arc.name, "version": arc.version, "kernels": arc.kernels()}
    N = 1 << 20
    rng = np.random.default_rng(0)
    xs = rng.standard_normal(N, dtype=np.float32)
    ys = rng.standard_normal(N, dtype=np.float32)
    ROWS, COLS = 64, 1000
    sm_in = rng.standard_normal((ROWS, COLS), dtype=np.float32)
    M = NN = K = 256
    am = (rng.standard_normal((M, K)) * 0.1).astype(np.float16)
    bm = (rng.standard_normal((K, NN)) * 0.1).astype(np.float16)
    add_grid = lambda m: (cdiv(m["n_elements"], m["BLOCK"]),)  # noqa: E731
    mm_grid = lambda m: (cdiv(m["M"], m["BLOCK_M"]) * cdiv(m["N"], m["BLOCK_N"]),)  # noqa: E731
    MM = dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=32)

    torch = triton = kernels = None
    try:
        import torch

        INFO["torch"] = torch.__version__
        INFO["device"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except Exception as exc:  # noqa: BLE001
        INFO["torch"] = f"unavailable: {exc}"
    try:
        import triton

        import kernels

        INFO["triton"] = triton.__version__
    except Exception as exc:  # noqa: BLE001
        INFO["triton"] = f"unavailable: {exc}"
    ref: dict[str, np.ndarray] = {}

    # ---------------------------------------------------------------- Triton's own launch (reference)
    if torch is not None and kernels is not None:
        dev = "cuda"

        @check("triton", "reference launches")
        def _() -> str:
            x, y = torch.from_numpy(xs).to(dev), torch.from_numpy(ys).to(dev)
            out = torch.empty_like(x)
            kernels.add_kernel[(cdiv(N, 1024),)](x, y, out, N, BLOCK=1024)
            ref["add"] = out.cpu().numpy()
            s_in = torch.from_numpy(sm_in).to(dev)
            s_out = torch.empty_like(s_in)
            kernels.softmax_kernel[(ROWS,)](s_out, s_in, s_in.stride(0), s_out.stride(0), COLS, BLOCK=1024)
            ref["softmax"] = s_out.cpu().numpy()
            a, b = torch.from_numpy(am).to(dev), torch.from_numpy(bm).to(dev)
            c = torch.empty((M, NN), dtype=torch.float16, device=dev)
            kernels.matmul_kernel[(cdiv(M, 64) * cdiv(NN, 128),)](
                a, b, c, M, NN, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                num_warps=4, num_stages=4, **MM)
            ref["matmul"] = c.cpu().numpy()
            o2 = torch.empty_like(x)
            kernels.scale_kernel[(cdiv(N, 1024),)](x, o2, N, 1, 2.5, BLOCK=1024)
            ref["scale1"] = o2.cpu().numpy()
            o3 = torch.empty(N // 2, device=dev)
            kernels.scale_kernel[(cdiv(N // 2, 1024),)](x, o3, N // 2, 2, -0.75, BLOCK=1024)
            ref["scale2"] = o3.cpu().numpy()
            torch.cuda.synchronize()
            same(ref["add"], xs + ys)
            return "add, softmax, matmul, scale x2"

    # ---------------------------------------------------------------- torch custom ops
    if torch is not None and torch.cuda.is_available():
        from karchive.interop import torch as kt

        k_add, k_sm, k_mm, k_sc = (arc.kernel(n) for n in ("add_kernel", "softmax_kernel", "matmul_kernel",
                                                            "scale_kernel"))
        ops: dict[str, Any] = {}

        @check("torch", "register ops")
        def _() -> str:
            ops["add"] = kt.custom_op("karchive_gpu::add", k_add, out="out_ptr", grid=add_grid,
                                      constexprs={"BLOCK": 1024})
            ops["add_into"] = kt.custom_op("karchive_gpu::add_into", k_add, mutates_args=("out_ptr",),
                                           grid=add_grid, constexprs={"BLOCK": 1024})
            ops["softmax"] = kt.custom_op("karchive_gpu::softmax", k_sm, out={"out_ptr": "in_ptr"},
                                          grid=lambda m: (m["in_ptr"].shape[0],), constexprs={"BLOCK": 1024})
            ops["matmul"] = kt.custom_op(
                "karchive_gpu::matmul", k_mm, grid=mm_grid, constexprs=MM,
                out={"c_ptr": lambda a: ((a["M"], a["N"]), a["a_ptr"].dtype)})
            ops["scale"] = kt.custom_op("karchive_gpu::scale", k_sc, out="out_ptr",
                                        grid=add_grid, constexprs={"BLOCK": 1024})
            return "; ".join(str(op._opoverload._schema) for op in ops.values())

        dev = "cuda"
        x, y = torch.from_numpy(xs).to(dev), torch.from_numpy(ys).to(dev)
        s_in = torch.from_numpy(sm_in).to(dev)
        a, b = torch.from_numpy(am).to(dev), torch.from_numpy(bm).to(dev)

        def run_all() -> dict[str, Any]:
            return {
                "add": ops["add"](x, y, N),
                "softmax": ops["softmax"](s_in, COLS, COLS, COLS),
                "matmul": ops["matmul"](a, b, M, NN, K, K, 1, NN, 1, NN, 1),
                "scale1": ops["scale"](x, N, 1, 2.5),
            }

        def compare(outs: dict[str, Any]) -> str:
            torch.cuda.synchronize()
            parts = []
            for key, t in outs.items():
                exact = key in ("add", "scale1")
                parts.append(f"{key} " + same(t.float().cpu().numpy(), ref[key], exact=exact,
                                               tol=2e-2 if key == "matmul" else 1e-5))
            return ", ".join(parts)

        @check("torch", "eager == triton")
        def _() -> str:
            if "add" not in ref:
                return "SKIP: no Triton reference"
            return compare(run_all())

        @check("torch", "mutates_args (add_into) == triton")
        def _() -> str:
            out = torch.full_like(x, 7.0)
            r = ops["add_into"](x, y, out, N)
            assert r is None
            return same(out.cpu().numpy(), ref["add"])

        @check("torch", "non-default stream")
        def _() -> str:
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                xx = x * 1.0  # work on s before the op, ordered by the stream
                out = ops["add"](xx, y, N)
            s.synchronize()
            return same(out.cpu().numpy(), ref["add"])

        @check("torch", "torch.compile(fullgraph=True) == triton")
        def _() -> str:
            torch._dynamo.reset()

            def f(x, y, s_in, a, b):
                z = ops["add"](x, y, x.numel())
                w = ops["softmax"](s_in, s_in.stride(0), s_in.stride(0), s_in.shape[1])
                c = ops["matmul"](a, b, a.shape[0], b.shape[1], a.shape[1], a.stride(0), 1, b.stride(0), 1,
                                  b.shape[1], 1)
                return z, w, c, ops["scale"](x, x.numel(), 1, 2.5)

            cf = torch.compile(f, fullgraph=True)
            z, w, c, sc = cf(x, y, s_in, a, b)
            out = compare({"add": z, "softmax": w, "matmul": c, "scale1": sc})
            z2, *_ = cf(x, y, s_in, a, b)  # second call: compiled path only
            same(z2.cpu().numpy(), ref["add"])
            return out

        @check("torch", "torch.compile(mode='reduce-overhead') == triton")
        def _() -> str:
            torch._dynamo.reset()

            def f(x, y):
                return ops["add"](x, y, x.numel()) * 2.0

            cf = torch.compile(f, fullgraph=True, mode="reduce-overhead")
            for _ in range(3):
                r = cf(x, y)
            torch.cuda.synchronize()
            return same(r.cpu().numpy(), ref["add"] * 2.0)

        @check("torch", "torch.cuda.graph capture/replay == triton")
        def _() -> str:
            sx, sy = x.clone(), torch.zeros_like(y)
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):  # warm up: module load and allocator outside the capture
                    ops["add"](sx, sy, N)
                    ops["softmax"](s_in, COLS, COLS, COLS)
            torch.cuda.current_stream().wait_stream(side)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                out = ops["add"](sx, sy, N)
                w = ops["softmax"](s_in, COLS, COLS, COLS)
            sy.copy_(y)  # new data, same buffers
            g.replay()
            torch.cuda.synchronize()
            r1 = same(out.cpu().numpy(), ref["add"])
            r2 = same(w.cpu().numpy(), ref["softmax"], exact=False)
            return f"add {r1}, softmax {r2}"

        @check("torch", "timings (us per call, no sync)")
        def _() -> str:
            sync = torch.cuda.synchronize
            out = torch.empty_like(x)
            t = {
                "op_eager": per_call_us(lambda: ops["add"](x, y, N), sync),
                "runtime_direct": per_call_us(lambda: k_add[add_grid](x, y, out, N, 1024), sync),
                "runtime_bound": per_call_us(k_add.bind(add_grid, x, y, out, N, BLOCK=1024), sync),
                "current_stream().cuda_stream": per_call_us(lambda: torch.cuda.current_stream().cuda_stream,
                                                            lambda: None, 20000),
                "_cuda_getCurrentRawStream": per_call_us(lambda: torch._C._cuda_getCurrentRawStream(0),
                                                         lambda: None, 20000),
            }
            if kernels is not None:
                g = (cdiv(N, 1024),)
                t["triton_launch"] = per_call_us(lambda: kernels.add_kernel[g](x, y, out, N, BLOCK=1024), sync)
            INFO["torch_timings_us"] = {k: round(v, 2) for k, v in t.items()}
            return ", ".join(f"{k}={v:.2f}" for k, v in t.items())

    # ---------------------------------------------------------------- JAX
    try:
        import jax
        import jax.numpy as jnp

        INFO["jax"] = jax.__version__
    except Exception as exc:  # noqa: BLE001
        jax = None
        INFO["jax"] = f"unavailable: {exc}"
    if jax is not None:
        from karchive.interop import jax as kj

        k_add, k_sm, k_mm, k_sc = (arc.kernel(n) for n in ("add_kernel", "softmax_kernel", "matmul_kernel",
                                                            "scale_kernel"))
        sup_box: dict[str, Any] = {}
        sd = jax.ShapeDtypeStruct

        @check("jax", "jaxlib support probe")
        def _() -> str:
            sup = kj.jaxlib_support()
            sup_box["s"] = sup
            INFO["jaxlib_support"] = sup.summary()
            INFO["jax_devices"] = [str(d) for d in jax.devices()]
            return json.dumps(sup.summary())

        @check("jax", "karchive's own encoder == jaxlib's to_proto (same bytes)")
        def _() -> str:
            import zlib

            sup = sup_box.get("s") or kj.jaxlib_support()
            if sup.lib is None:
                return "SKIP: no gpu_triton"
            desc = kj.describe(k_sc, sd((N,), jnp.float32), N, 2, -0.75, out_shape=sd((N,), jnp.float32),
                               grid=add_grid, BLOCK=1024, mode="ptx")
            ours = kj.encode_pure(desc, "scale", b"meta", sup)
            theirs = zlib.decompress(kj.encode(desc, "scale", b"meta", sup))
            if sup.messages:
                INFO["jaxlib_TritonKernel_fields"] = {k: v[0] for k, v in sup.messages["TritonKernel"].fields.items()}
            if ours != theirs:
                raise AssertionError(f"encodings differ: ours {ours[:80]!r}... theirs {theirs[:80]!r}...")
            return f"{len(ours)} bytes identical"

        # Runtime results on the same data (the JAX reference): launched through karchive on CuPy or torch.
        rt: dict[str, np.ndarray] = {}

        @check("jax", "runtime reference launches")
        def _() -> str:
            if torch is None or not torch.cuda.is_available():
                return "SKIP: torch CUDA not available for the runtime reference"
            d = "cuda"
            x, y = torch.from_numpy(xs).to(d), torch.from_numpy(ys).to(d)
            o = torch.empty_like(x)
            k_add[add_grid](x, y, o, N, BLOCK=1024)
            rt["add"] = o.cpu().numpy()
            s_in = torch.from_numpy(sm_in).to(d)
            so = torch.empty_like(s_in)
            k_sm[(ROWS,)](so, s_in, COLS, COLS, COLS, BLOCK=1024)
            rt["softmax"] = so.cpu().numpy()
            a, b = torch.from_numpy(am).to(d), torch.from_numpy(bm).to(d)
            c = torch.empty((M, NN), dtype=torch.float16, device=d)
            k_mm[mm_grid](a, b, c, M, NN, K, K, 1, NN, 1, NN, 1, **MM)
            rt["matmul"] = c.cpu().numpy()
            o1 = torch.empty_like(x)
            k_sc[add_grid](x, o1, N, 1, 2.5, BLOCK=1024)
            rt["scale1"] = o1.cpu().numpy()
            o2 = torch.empty(N // 2, device=d)
            k_sc[add_grid](x, o2, N // 2, 2, -0.75, BLOCK=1024)
            rt["scale2"] = o2.cpu().numpy()
            torch.cuda.synchronize()
            return same(rt["add"], xs + ys)

        xj, yj = jnp.asarray(xs), jnp.asarray(ys)
        sd = jax.ShapeDtypeStruct

        def jit_add(mode: str, block: int) -> Callable:
            return jax.jit(lambda a, b: kj.triton_call(k_add, a, b, a.size, out_shape=sd(a.shape, a.dtype),
                                                       grid=add_grid, BLOCK=block, mode=mode))

        @check("jax", "baseline first call of a trivial jnp function (ms)")
        def _() -> str:
            t0 = time.perf_counter()
            jax.jit(lambda a, b: a * b + 1.0)(xj, yj).block_until_ready()
            ms = (time.perf_counter() - t0) * 1e3
            INFO["jax_baseline_first_call_ms"] = round(ms, 2)
            return f"{ms:.1f} ms"

        def first_call(label: str, mode: str, block: int) -> str:
            sup = sup_box.get("s") or kj.jaxlib_support()
            if mode == "cubin" and not sup.accepts_cubin:
                return f"SKIP: jaxlib does not accept cubins ({'; '.join(sup.notes)})"
            desc = kj.describe(k_add, sd((N,), jnp.float32), sd((N,), jnp.float32), N,
                               out_shape=sd((N,), jnp.float32), grid=add_grid, BLOCK=block, mode=mode)
            f = jit_add(mode, block)
            t0 = time.perf_counter()
            try:
                out = f(xj, yj).block_until_ready()
            except Exception as exc:  # noqa: BLE001
                # Measured on the H100 (2026-11-22): PTX from a newer Triton than jaxlib's ptxas cannot be
                # assembled there. A known limit of the PTX path (docs/interop.md), not a karchive fault.
                if mode == "ptx" and "Unsupported .version" in str(exc):
                    return f"SKIP: jaxlib's ptxas cannot read this PTX: {str(exc).splitlines()[0][:160]}"
                raise
            first_ms = (time.perf_counter() - t0) * 1e3
            steady = per_call_us(lambda: f(xj, yj), lambda: f(xj, yj).block_until_ready(), 500)
            INFO.setdefault("jax_first_call", {})[label] = {
                "mode": mode, "path": desc.path, "ptx_is_marker": desc.ptx.startswith("// karchive"),
                "first_call_ms": round(first_ms, 2), "steady_us": round(steady, 2), "BLOCK": block,
                "cubin_bytes": len(desc.cubin or b""), "ptx_chars": len(desc.ptx)}
            want = rt.get("add", xs + ys)
            return f"path={desc.path} first={first_ms:.1f}ms steady={steady:.1f}us " + same(np.asarray(out), want)

        check("jax", "jit add, cubin only (no PTX in the call)")(lambda: first_call("cubin", "cubin", 1024))
        check("jax", "jit add, ptx (jaxlib runs ptxas)")(lambda: first_call("ptx", "ptx", 256))
        check("jax", "jit add, auto")(lambda: first_call("auto", "auto", 1024))

        @check("jax", "eager (no jit) add")
        def _() -> str:
            out = kj.triton_call(k_add, xj, yj, N, out_shape=sd((N,), jnp.float32), grid=add_grid, BLOCK=1024)
            return same(np.asarray(out), rt.get("add", xs + ys))

        @check("jax", "jit softmax (output-first kernel: zero-filled aliased operand)")
        def _() -> str:
            f = jax.jit(lambda s: kj.triton_call(k_sm, s, COLS, COLS, COLS, out_shape=sd(s.shape, s.dtype),
                                                 out_names=["out_ptr"], grid=(ROWS,), BLOCK=1024))
            out = np.asarray(f(jnp.asarray(sm_in)))
            return same(out, rt["softmax"], exact=False) if "softmax" in rt else "no runtime ref"

        @check("jax", "jit matmul fp16 (2-D problem, ==1 strides)")
        def _() -> str:
            f = jax.jit(lambda a, b: kj.triton_call(k_mm, a, b, M, NN, K, K, 1, NN, 1, NN, 1,
                                                    out_shape=sd((M, NN), jnp.float16), grid=mm_grid, **MM))
            out = np.asarray(f(jnp.asarray(am), jnp.asarray(bm)))
            return same(out, rt["matmul"], exact=False, tol=2e-2) if "matmul" in rt else "no runtime ref"

        @check("jax", "jit scale: stride==1 variant and general variant, fp32 scalar")
        def _() -> str:
            f1 = jax.jit(lambda a: kj.triton_call(k_sc, a, N, 1, 2.5, out_shape=sd(a.shape, a.dtype),
                                                  grid=add_grid, BLOCK=1024))
            f2 = jax.jit(lambda a: kj.triton_call(k_sc, a, N // 2, 2, -0.75, out_shape=sd((N // 2,), a.dtype),
                                                  grid=add_grid, BLOCK=1024))
            r1 = same(np.asarray(f1(xj)), rt["scale1"])
            r2 = same(np.asarray(f2(xj)), rt["scale2"])
            return f"stride=1 {r1}; stride=2 {r2}"

        @check("jax", "input_output_aliases (out_ptr updated in place)")
        def _() -> str:
            f = jax.jit(lambda a, b, o: kj.triton_call(k_add, a, b, o, N, out_shape=sd(o.shape, o.dtype),
                                                       input_output_aliases={2: 0}, grid=add_grid, BLOCK=1024),
                        donate_argnums=2)
            out = f(xj, yj, jnp.zeros_like(xj))
            return same(np.asarray(out), rt.get("add", xs + ys))

        @check("jax", "zeroed_outputs")
        def _() -> str:
            f = jax.jit(lambda a, b: kj.triton_call(k_add, a, b, N, out_shape=sd(a.shape, a.dtype),
                                                    zeroed_outputs=(0,), grid=add_grid, BLOCK=1024))
            return same(np.asarray(f(xj, yj)), rt.get("add", xs + ys))

        @check("jax", "runtime launch on JAX arrays (unsafe_buffer_pointer, outside jit)")
        def _() -> str:
            out = jnp.zeros_like(xj)
            out.block_until_ready()
            k_add[add_grid](xj, yj, out, N, BLOCK=1024, stream=0)
            arc.backend().synchronize(arc.backend().stream(0))  # the launch went to the legacy stream
            return same(np.asarray(out), rt.get("add", xs + ys))

    # ---------------------------------------------------------------- CuPy / raw pointers / CAI
    try:
        import cupy as cp

        INFO["cupy"] = cp.__version__
    except Exception as exc:  # noqa: BLE001
        cp = None
        INFO["cupy"] = f"unavailable: {exc}"
    if cp is not None:
        k_add, k_sc = arc.kernel("add_kernel"), arc.kernel("scale_kernel")
        want = ref.get("add", xs + ys)
        xc, yc = cp.asarray(xs), cp.asarray(ys)

        @check("cupy", "CuPy arrays, current (default) stream")
        def _() -> str:
            out = cp.empty_like(xc)
            k_add[add_grid](xc, yc, out, N, BLOCK=1024)
            cp.cuda.get_current_stream().synchronize()
            return same(cp.asnumpy(out), want)

        @check("cupy", "CuPy arrays inside `with cupy.cuda.Stream()`")
        def _() -> str:
            s = cp.cuda.Stream(non_blocking=True)
            with s:
                xx = xc * 1.0
                out = cp.empty_like(xc)
                k_add[add_grid](xx, yc, out, N, BLOCK=1024)  # launches on s (CuPy's current stream)
            s.synchronize()
            return same(cp.asnumpy(out), want)

        @check("cupy", "raw int pointers + explicit stream")
        def _() -> str:
            s = cp.cuda.Stream(non_blocking=True)
            out = cp.empty_like(xc)
            k_add[add_grid](xc.data.ptr, yc.data.ptr, out.data.ptr, N, BLOCK=1024, stream=s.ptr)
            s.synchronize()
            return same(cp.asnumpy(out), want)

        @check("cupy", "__cuda_array_interface__ objects (Numba protocol)")
        def _() -> str:
            class CAI:
                def __init__(self, a: Any) -> None:
                    self.__cuda_array_interface__ = a.__cuda_array_interface__

            out = cp.empty_like(xc)
            k_sc[add_grid](CAI(xc), CAI(out), N, 1, 2.5, BLOCK=1024)
            cp.cuda.Device().synchronize()
            return same(cp.asnumpy(out), ref.get("scale1", xs * np.float32(2.5)))

        @check("cupy", "bound launcher on a CuPy stream")
        def _() -> str:
            s = cp.cuda.Stream(non_blocking=True)
            out = cp.empty_like(xc)
            bound = k_add.bind(add_grid, xc, yc, out, N, BLOCK=1024, stream=s)
            bound()
            s.synchronize()
            return same(cp.asnumpy(out), want)

        @check("cupy", "numba.cuda device arrays")
        def _() -> str:
            try:
                from numba import cuda as ncuda
            except Exception as exc:  # noqa: BLE001
                return f"SKIP: numba not installed ({type(exc).__name__})"
            xn, yn = ncuda.to_device(xs), ncuda.to_device(ys)
            out = ncuda.device_array_like(xn)
            k_add[add_grid](xn, yn, out, N, BLOCK=1024, stream=0)
            ncuda.synchronize()
            return same(out.copy_to_host(), want)

    # ---------------------------------------------------------------- report
    width = max(len(r["check"]) for r in RESULTS) if RESULTS else 10
    print(f"\nkarchive interop on {INFO.get('device')}  (torch {INFO.get('torch')}, jax {INFO.get('jax')}, "
          f"cupy {INFO.get('cupy')}, triton {INFO.get('triton')})")
    for r in RESULTS:
        print(f"{r['section']:<6} {r['check']:<{width}}  {r['status']:<4}  {r['detail'][:160]}")
    failed = [r for r in RESULTS if r["status"] == "FAIL"]
    print(f"\n{sum(r['status'] == 'pass' for r in RESULTS)} passed, {len(failed)} failed, "
          f"{sum(r['status'] == 'skip' for r in RESULTS)} skipped")
    for r in failed:
        print(f"\n--- {r['section']} / {r['check']}\n{r['traceback']}")
    for key in ("jaxlib_support", "jax_first_call", "jax_baseline_first_call_ms", "torch_timings_us"):
        if key in INFO:
            print(f"{key}: {json.dumps(INFO[key])}")
    out_dir = os.environ.get("OUT")
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, "interop.json"), "w") as fh:
            json.dump({"info": INFO, "results": RESULTS}, fh, indent=2, default=str)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
