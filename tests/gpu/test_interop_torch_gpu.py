"""On a GPU: archived kernels as torch custom ops (karchive.interop.torch) give what Triton's own launch gives,
eager, under torch.compile(fullgraph=True) and mode="reduce-overhead", on a side stream, in a CUDA graph.

The archive is examples.karc (examples/build.toml, built on a CPU machine); the reference is this
machine's Triton launching examples/kernels.py on the same inputs (``triton_ref``). add and scale must
be bit-identical, softmax within 1e-5, the fp16 matmul within 2e-2.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from gpu_compare import same  # noqa: E402

DEV = "cuda"


@pytest.fixture(scope="module")
def ops(earc: Any, problem: Any) -> dict[str, Any]:
    """The example kernels registered once per process as karchive_gpu::* ops."""
    from karchive.interop import torch as kt

    k_add, k_sm, k_mm, k_sc = (
        earc.kernel(n) for n in ("add_kernel", "softmax_kernel", "matmul_kernel", "scale_kernel")
    )
    return {
        "add": kt.custom_op(
            "karchive_gpu::add", k_add, out="out_ptr", grid=problem.add_grid, constexprs={"BLOCK": 1024}
        ),
        "add_into": kt.custom_op(
            "karchive_gpu::add_into",
            k_add,
            mutates_args=("out_ptr",),
            grid=problem.add_grid,
            constexprs={"BLOCK": 1024},
        ),
        "softmax": kt.custom_op(
            "karchive_gpu::softmax",
            k_sm,
            out={"out_ptr": "in_ptr"},
            grid=lambda m: (m["in_ptr"].shape[0],),
            constexprs={"BLOCK": 1024},
        ),
        "matmul": kt.custom_op(
            "karchive_gpu::matmul",
            k_mm,
            grid=problem.mm_grid,
            constexprs=dict(problem.MM),
            out={"c_ptr": lambda a: ((a["M"], a["N"]), a["a_ptr"].dtype)},
        ),
        "scale": kt.custom_op(
            "karchive_gpu::scale", k_sc, out="out_ptr", grid=problem.add_grid, constexprs={"BLOCK": 1024}
        ),
    }


@pytest.fixture(scope="module")
def t(problem: Any) -> SimpleNamespace:
    """``problem``'s inputs as CUDA tensors."""
    return SimpleNamespace(
        **{
            name: torch.from_numpy(getattr(problem, src)).to(DEV)
            for name, src in (("x", "xs"), ("y", "ys"), ("s_in", "sm_in"), ("a", "am"), ("b", "bm"))
        }
    )


def run_all(ops: dict[str, Any], t: Any, p: Any) -> dict[str, Any]:
    return {
        "add": ops["add"](t.x, t.y, p.N),
        "softmax": ops["softmax"](t.s_in, p.COLS, p.COLS, p.COLS),
        "matmul": ops["matmul"](t.a, t.b, p.M, p.NN, p.K, p.K, 1, p.NN, 1, p.NN, 1),
        "scale1": ops["scale"](t.x, p.N, 1, 2.5),
    }


def compare(outs: dict[str, Any], ref: dict[str, Any]) -> str:
    torch.cuda.synchronize()
    parts = []
    for key, tensor in outs.items():
        exact = key in ("add", "scale1")
        parts.append(
            f"{key} " + same(tensor.float().cpu().numpy(), ref[key], exact=exact, tol=2e-2 if key == "matmul" else 1e-5)
        )
    return ", ".join(parts)


def test_triton_reference_is_sane(problem, triton_ref):
    same(triton_ref["add"], problem.xs + problem.ys)


def test_ops_register_with_the_kernel_signature_as_schema(ops, interop_report):
    schemas = {k: str(op._opoverload._schema) for k, op in ops.items()}
    assert schemas["add"] == "karchive_gpu::add(Tensor x_ptr, Tensor y_ptr, SymInt n_elements) -> Tensor"
    assert schemas["softmax"] == (
        "karchive_gpu::softmax(Tensor in_ptr, SymInt in_row_stride, SymInt out_row_stride, SymInt n_cols) -> Tensor"
    )
    assert schemas["scale"] == (
        "karchive_gpu::scale(Tensor x_ptr, SymInt n_elements, SymInt stride, float alpha) -> Tensor"
    )
    assert schemas["matmul"].startswith(
        "karchive_gpu::matmul(Tensor a_ptr, Tensor b_ptr, SymInt M, SymInt N, SymInt K,"
    )
    assert "!) out_ptr" in schemas["add_into"] and schemas["add_into"].endswith("-> ()")  # written in place
    interop_report.append(("torch", "schemas", "; ".join(schemas.values())))


def test_eager_matches_triton(ops, t, problem, triton_ref, interop_report):
    interop_report.append(("torch", "eager == triton", compare(run_all(ops, t, problem), triton_ref)))


def test_mutates_args_writes_the_callers_tensor(ops, t, problem, triton_ref):
    out = torch.full_like(t.x, 7.0)
    assert ops["add_into"](t.x, t.y, out, problem.N) is None
    same(out.cpu().numpy(), triton_ref["add"])


def test_launches_on_the_current_side_stream(ops, t, problem, triton_ref):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        xx = t.x * 1.0  # work on s before the op: the op must be ordered after it on s
        out = ops["add"](xx, t.y, problem.N)
    s.synchronize()
    same(out.cpu().numpy(), triton_ref["add"])


def test_torch_compile_fullgraph_matches_triton(ops, t, triton_ref, interop_report):
    torch._dynamo.reset()

    def f(x, y, s_in, a, b):
        z = ops["add"](x, y, x.numel())
        w = ops["softmax"](s_in, s_in.stride(0), s_in.stride(0), s_in.shape[1])
        c = ops["matmul"](a, b, a.shape[0], b.shape[1], a.shape[1], a.stride(0), 1, b.stride(0), 1, b.shape[1], 1)
        return z, w, c, ops["scale"](x, x.numel(), 1, 2.5)

    cf = torch.compile(f, fullgraph=True)
    z, w, c, sc = cf(t.x, t.y, t.s_in, t.a, t.b)
    detail = compare({"add": z, "softmax": w, "matmul": c, "scale1": sc}, triton_ref)
    z2, *_ = cf(t.x, t.y, t.s_in, t.a, t.b)  # second call: the compiled path only
    same(z2.cpu().numpy(), triton_ref["add"])
    interop_report.append(("torch", "compile(fullgraph) == triton", detail))


def test_torch_compile_reduce_overhead_matches_triton(ops, t, triton_ref):
    torch._dynamo.reset()

    def f(x, y):
        return ops["add"](x, y, x.numel()) * 2.0

    cf = torch.compile(f, fullgraph=True, mode="reduce-overhead")
    for _ in range(3):  # the third call replays Inductor's CUDA graph
        r = cf(t.x, t.y)
    torch.cuda.synchronize()
    same(r.cpu().numpy(), triton_ref["add"] * 2.0)


def test_cuda_graph_capture_and_replay(ops, t, problem, triton_ref, interop_report):
    sx, sy = t.x.clone(), torch.zeros_like(t.y)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):  # warm up: module load and allocator outside the capture
            ops["add"](sx, sy, problem.N)
            ops["softmax"](t.s_in, problem.COLS, problem.COLS, problem.COLS)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = ops["add"](sx, sy, problem.N)
        w = ops["softmax"](t.s_in, problem.COLS, problem.COLS, problem.COLS)
    sy.copy_(t.y)  # new data, same buffers: the replay must read it
    g.replay()
    torch.cuda.synchronize()
    r1 = same(out.cpu().numpy(), triton_ref["add"])
    r2 = same(w.cpu().numpy(), triton_ref["softmax"], exact=False)
    interop_report.append(("torch", "CUDA graph replay == triton", f"add {r1}, softmax {r2}"))
