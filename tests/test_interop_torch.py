"""torch bridge, CPU side: schema, fake implementation, eager and torch.compile(fullgraph=True) tracing.

The launch itself needs a GPU (tests/gpu/test_interop_torch_gpu.py); here the archived kernel's metadata is
real and a stand-in performs the launch with torch CPU ops, so registration, schema inference,
functionalization of mutated arguments and graph capture by Dynamo are exercised for real.
"""

from __future__ import annotations

import itertools

import pytest

torch = pytest.importorskip("torch")

import karchive  # noqa: E402
from karchive.errors import ArgumentError  # noqa: E402
from karchive.interop import torch as kt  # noqa: E402

_ids = itertools.count()
ADD_GRID = lambda m: ((m["n_elements"] + m["BLOCK"] - 1) // m["BLOCK"],)  # noqa: E731


def opname(what: str) -> str:
    return f"karchive_test{next(_ids)}::{what}"


class CpuKernel:
    """The real kernel's variants and parameters; launches computed by ``fn`` on CPU tensors."""

    def __init__(self, real, fn):
        self.name, self.variants, self.param_names = real.name, real.variants, real.param_names
        self.fn = fn
        self.launches: list[tuple] = []

    def __getitem__(self, grid):
        def run(*values, stream=None):
            named = dict(zip(self.param_names, values))
            meta = {**named, **{k: v for k, v in named.items() if not isinstance(v, torch.Tensor)}}
            self.launches.append((grid(meta) if callable(grid) else grid, stream))
            self.fn(named)

        return run


@pytest.fixture(scope="module")
def arc(examples_archive):
    return karchive.open(examples_archive)


def add_fn(a):
    a["out_ptr"].copy_(a["x_ptr"] + a["y_ptr"])


def test_schema_outputs_and_mutations(arc):
    k = arc.kernel("add_kernel")
    add = kt.custom_op(
        opname("add"),
        CpuKernel(k, add_fn),
        out="out_ptr",
        grid=ADD_GRID,
        constexprs={"BLOCK": 1024},
        device_types="cpu",
    )
    assert str(add._opoverload._schema).endswith("(Tensor x_ptr, Tensor y_ptr, SymInt n_elements) -> Tensor")
    into = kt.custom_op(
        opname("add_into"),
        CpuKernel(k, add_fn),
        mutates_args=("out_ptr",),
        grid=ADD_GRID,
        constexprs={"BLOCK": 1024},
        device_types="cpu",
    )
    assert str(into._opoverload._schema).endswith(
        "(Tensor x_ptr, Tensor y_ptr, Tensor(a2!) out_ptr, SymInt n_elements) -> ()"
    )
    sc = kt.custom_op(
        opname("scale"), CpuKernel(arc.kernel("scale_kernel"), add_fn), out="out_ptr", grid=(1,), device_types="cpu"
    )
    assert str(sc._opoverload._schema).endswith(
        "(Tensor x_ptr, SymInt n_elements, SymInt stride, float alpha) -> Tensor"
    )


def test_eager_launch_passes_every_parameter_in_order(arc):
    ck = CpuKernel(arc.kernel("add_kernel"), add_fn)
    add = kt.custom_op(opname("add"), ck, out="out_ptr", grid=ADD_GRID, constexprs={"BLOCK": 1024}, device_types="cpu")
    x, y = torch.randn(3000), torch.randn(3000)
    assert torch.equal(add(x, y, 3000), x + y)
    ((grid, stream),) = ck.launches
    assert grid == (3,) and stream is None  # CPU tensors: no CUDA stream


def test_fake_impl_gives_shapes_on_meta_and_fake_tensors(arc):
    mm = kt.custom_op(
        opname("matmul"),
        CpuKernel(arc.kernel("matmul_kernel"), lambda a: None),
        grid=(1,),
        out={"c_ptr": lambda a: ((a["M"], a["N"]), a["a_ptr"].dtype)},
        constexprs={"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 32},
        device_types="cpu",
    )
    a = torch.empty(32, 48, device="meta", dtype=torch.float16)
    b = torch.empty(48, 80, device="meta", dtype=torch.float16)
    c = mm(a, b, 32, 80, 48, 48, 1, 80, 1, 80, 1)
    assert (c.shape, c.dtype, c.device.type) == ((32, 80), torch.float16, "meta")
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        s = kt.custom_op(
            opname("softmax"),
            CpuKernel(arc.kernel("softmax_kernel"), lambda a: None),
            out={"out_ptr": "in_ptr"},
            grid=(1,),
            device_types="cpu",
        )
        r = s(torch.empty(7, 100), 100, 100, 100)
        assert r.shape == (7, 100) and type(r).__name__ == "FakeTensor"


def test_torch_compile_fullgraph_with_outputs_and_mutation(arc):
    ck = CpuKernel(arc.kernel("add_kernel"), add_fn)
    add = kt.custom_op(opname("add"), ck, out="out_ptr", grid=ADD_GRID, constexprs={"BLOCK": 1024}, device_types="cpu")
    into = kt.custom_op(
        opname("add_into"), ck, mutates_args=("out_ptr",), grid=ADD_GRID, constexprs={"BLOCK": 1024}, device_types="cpu"
    )

    def f(x, y, acc):
        z = add(x, y, x.numel()) * 2
        into(z, y, acc, x.numel())  # acc = z + y, in place
        return z, acc + 1

    torch._dynamo.reset()
    cf = torch.compile(f, fullgraph=True, backend="aot_eager")  # fullgraph: a graph break would raise
    x, y, acc = torch.randn(2048), torch.randn(2048), torch.zeros(2048)
    z, out = cf(x, y, acc)
    assert torch.allclose(z, (x + y) * 2) and torch.allclose(acc, z + y) and torch.allclose(out, acc + 1)
    explain = torch._dynamo.explain(f)(x, y, torch.zeros(2048))
    assert explain.graph_break_count == 0 and explain.graph_count == 1


def test_bad_registrations_raise(arc):
    ck = CpuKernel(arc.kernel("add_kernel"), add_fn)
    with pytest.raises(ArgumentError, match="not a pointer"):
        kt.custom_op(opname("bad"), ck, out="n_elements", grid=(1,))
    with pytest.raises(ArgumentError, match="mutates_args"):
        kt.custom_op(opname("bad"), ck, out="out_ptr", mutates_args=("out_ptr",), grid=(1,))
    with pytest.raises(ArgumentError, match="runtime parameter"):
        kt.custom_op(opname("bad"), ck, out="out_ptr", constexprs={"n_elements": 3}, grid=(1,))
    with pytest.raises(ArgumentError, match="spec"):
        kt.custom_op(opname("bad"), ck, out={"out_ptr": "nope"}, grid=(1,))
    with pytest.raises(ArgumentError, match="karchive kernel"):
        kt.custom_op(opname("bad"), object(), grid=(1,))


def test_current_raw_stream_is_none_for_cpu_tensors():
    assert kt.current_raw_stream(torch.empty(1)) is None


class RenamedKernel(CpuKernel):
    """The real kernel with its parameters renamed (what a hostile archive once delivered past the model)."""

    def __init__(self, real, fn, renames):
        import dataclasses

        super().__init__(real, fn)
        self.param_names = tuple(renames.get(n, n) for n in real.param_names)
        self.variants = [
            dataclasses.replace(
                v, params=tuple(dataclasses.replace(p, name=renames.get(p.name, p.name)) for p in v.params)
            )
            for v in real.variants
        ]


#: Valid Python both as the parameter list and as the tuple the old source text put each name in: the
#: default opens a string that the name's second appearance closes, and the payload is a keyword default.
QUOTED_PAYLOAD = "x_ptr=''', *, p=__import__('os').system('touch PWNED_OP')):\n    pass\ndef g():\n    x = (a"


@pytest.mark.parametrize(
    "name", [QUOTED_PAYLOAD, "x_ptr=__import__('os').system('touch PWNED_OP')", "class", "a b", "1x"]
)
def test_custom_op_never_runs_parameter_names_as_code(arc, tmp_path, monkeypatch, name):
    """Issue 34: the op's function was built as source text from the parameter names and ``exec``-ed, so a
    name carrying a payload ran it. The signature is now an ``inspect.Signature``; a name that cannot be a
    Python parameter is refused (ArgumentError), and nothing runs."""
    monkeypatch.chdir(tmp_path)
    ck = RenamedKernel(arc.kernel("add_kernel"), add_fn, {"x_ptr": name})
    with pytest.raises(ArgumentError, match="parameter name"):
        kt.custom_op(
            opname("hostile"), ck, out="out_ptr", grid=ADD_GRID, constexprs={"BLOCK": 1024}, device_types="cpu"
        )
    assert not list(tmp_path.iterdir())


def test_custom_op_function_is_not_made_from_text(arc):
    """The op's function has the kernel's signature (names, annotations) without being compiled from text:
    its code is karchive's own, and calls by keyword bind like calls by position."""
    import inspect

    ck = CpuKernel(arc.kernel("add_kernel"), add_fn)
    add = kt.custom_op(opname("add"), ck, out="out_ptr", grid=ADD_GRID, constexprs={"BLOCK": 1024}, device_types="cpu")
    fn = add._init_fn
    assert fn.__code__.co_filename == kt.__file__
    sig = inspect.signature(fn)
    assert list(sig.parameters) == ["x_ptr", "y_ptr", "n_elements"]
    assert [p.annotation for p in sig.parameters.values()] == [torch.Tensor, torch.Tensor, int]
    assert sig.return_annotation is torch.Tensor
    x, y = torch.randn(100), torch.randn(100)
    assert torch.equal(fn(x, y_ptr=y, n_elements=100), x + y)
    with pytest.raises(TypeError):
        fn(x, y)
