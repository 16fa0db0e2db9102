"""Host tensor-descriptor kernels through the torch and JAX bridges, on CPU (issue 21).

Real archives (Triton compiles of tests/data/tma_kernels.py:desc_copy for cuda:80 and cuda:90): the bridges'
roles name descriptor parameters ``tensordesc``; the torch bridge declares them ``Tensor`` and wraps the
tensor in a ``karchive.TensorDescriptor`` (the variant's block, or the options given) at launch, checked by
a CPU stand-in of the kernel (needs torch; the GPU launch is tests/gpu/test_interop_descriptors_gpu.py's);
the JAX bridge passes a decomposed descriptor (sm_80) as its buffer and scalars and refuses a TMA one
(sm_90) with an InteropError that says why (jaxlib cannot encode a map at XLA run time).
"""

from __future__ import annotations

import itertools
import pathlib
from types import SimpleNamespace

import pytest

from karchive.errors import ArgumentError, InteropError
from karchive.format.manifest import Param
from karchive.interop._roles import descriptor_options, kernel_roles

DATA = pathlib.Path(__file__).resolve().parent / "data"
DESC = "tensordesc<fp16[64, 64]>"
_ids = itertools.count()


@pytest.fixture(scope="module")
def desc_archive(tmp_path_factory) -> pathlib.Path:
    pytest.importorskip("triton")
    from karchive.cli.main import main

    out = tmp_path_factory.mktemp("desc") / "tma.karc"
    assert (
        main(
            [
                "compile",
                str(DATA / "tma_kernels.py"),
                "-n",
                "desc_copy",
                "-s",
                f"{DESC}, {DESC}, 64, 64",
                "-t",
                "cuda:90",
                "-o",
                str(out),
            ]
        )
        == 0
    )
    return out


def test_descriptor_parameters_are_their_own_role(desc_archive):
    import karchive

    k = karchive.open(str(desc_archive)).kernel("desc_copy")
    roles = kernel_roles(k)
    assert [(r.name, r.kind) for r in roles] == [
        ("in_desc", "tensordesc"),
        ("out_desc", "tensordesc"),
        ("BLOCK_M", "constexpr"),
        ("BLOCK_N", "constexpr"),
    ]
    assert roles[0].types == frozenset({DESC})


def test_a_parameter_that_is_a_descriptor_in_one_variant_only_is_refused():
    k = SimpleNamespace(
        name="k",
        param_names=["x"],
        variants=[
            SimpleNamespace(params=[Param("x", DESC)]),
            SimpleNamespace(params=[Param("x", "*fp16", divisibility=16)]),
        ],
    )
    with pytest.raises(ArgumentError, match="host tensor descriptor in some variants and not in others") as err:
        kernel_roles(k)
    assert err.value.param == "x" and err.value.kernel == "k"


def test_descriptor_options_are_checked_when_the_op_is_made():
    names = ["a_desc", "b_desc"]
    assert descriptor_options("k", names, None) == {"a_desc": {}, "b_desc": {}}
    got = descriptor_options(
        "k", names, {"a_desc": [128, 64], "b_desc": {"padding": "nan", "pixel_box_lower_corner": [-1, -1]}}
    )
    assert got == {
        "a_desc": {"block_shape": [128, 64]},
        "b_desc": {"padding": "nan", "pixel_box_lower_corner": [-1, -1]},
    }
    for bad, match in [
        ({"c": [64, 64]}, "'c', which is not a tensor-descriptor parameter"),
        ({"a_desc": {"swizzle": 3}}, r"unknown option\(s\) \['swizzle'\]"),
        ({"a_desc": "64x64"}, "must be a block shape"),
        ({"a_desc": [64, True]}, "must be a block shape"),
        ([("a_desc", [64, 64])], "must map descriptor parameter names"),
    ]:
        with pytest.raises(ArgumentError, match=match):
            descriptor_options("k", names, bad)


@pytest.fixture(scope="module")
def desc_archive_80_90(tmp_path_factory) -> pathlib.Path:
    pytest.importorskip("triton")
    from karchive.cli.main import main

    out = tmp_path_factory.mktemp("desc") / "tma8090.karc"
    assert (
        main(
            [
                "compile",
                str(DATA / "tma_kernels.py"),
                "-n",
                "desc_copy",
                "-s",
                f"{DESC}, {DESC}, 64, 64",
                "-t",
                "cuda:80",
                "-t",
                "cuda:90",
                "-o",
                str(out),
            ]
        )
        == 0
    )
    return out


def _jax_plan(kernel, cc: int, x):
    from karchive.interop import _jaxplan

    support = SimpleNamespace(jaxlib_version=(0, 10, 2), notes=[], accepts_cubin=True)
    return _jaxplan.plan(
        kernel,
        (x,),
        {"BLOCK_M": 64, "BLOCK_N": 64},
        out_shape=SimpleNamespace(shape=x.shape, dtype=x.dtype),
        grid=(4, 2),
        compute_capability=cc,
        support=support,
    )


def test_the_jax_bridge_refuses_tma_descriptors_saying_why(desc_archive_80_90):
    """On sm_90 the variant takes TMA maps: refused, the parameter and the variant named, with the reason (jaxlib
    cannot encode a CUtensorMap at XLA run time) and what works instead."""
    import numpy as np

    import karchive

    k = karchive.open(str(desc_archive_80_90)).kernel("desc_copy")
    with pytest.raises(InteropError, match=r"parameter 'in_desc' is a host tensor descriptor \(tensordesc<fp16") as e:
        _jax_plan(k, 90, np.zeros((256, 128), np.float16))
    assert (
        "sm_90a" in str(e.value) and "TMA map" in str(e.value) and "karchive.TensorDescriptor(jax_array" in str(e.value)
    )


def test_the_jax_bridge_passes_decomposed_descriptors_as_a_buffer_and_scalars(desc_archive_80_90):
    """On sm_80 Triton decomposes descriptors (base pointer, shape and strides): jaxlib can pass that. The input
    descriptor takes XLA buffer 0 and the output (a result) buffer 1, each followed by the convention's scalars
    for a dense row-major array (i64 shape and strides, the NaN and TF32 flags off, i32 shape, i64 strides),
    as karchive's own runtime expands them."""
    import numpy as np

    import karchive
    from karchive.interop._jaxdesc import ArrayParam, ScalarParam
    from karchive.runtime import descriptors as td

    k = karchive.open(str(desc_archive_80_90)).kernel("desc_copy")
    x = np.zeros((256, 128), np.float16)
    plan = _jax_plan(k, 80, x)
    assert plan.variant.abi.binary_arch == "sm_80" and plan.desc.n_buffers == 2
    (d,) = {p.desc for p in plan.variant.abi.params if p.desc is not None}
    assert d.mode == "decomposed"
    params = plan.desc.params
    per = 1 + len(d.slots) - 1
    assert len(params) == 2 * per
    for j, name in enumerate(("in_desc", "out_desc")):
        first, scalars = params[j * per], params[j * per + 1 : (j + 1) * per]
        assert first == ArrayParam(name, j, 16, 0)
        assert all(isinstance(s, ScalarParam) for s in scalars)
        assert [s.dtype for s in scalars] == list(d.slots[1:])
        ref = td.expand(
            name, d, td.TensorDescriptor(0x10000, None, shape=[256, 128], strides=[128, 1], dtype="float16")
        )
        assert [int(s.value) for s in scalars] == [int(v) for v in ref[1:]]
    assert plan.operands == [x] and plan.out_avals == [((256, 128), np.dtype(np.float16))]


# ---- the torch op (needs torch) ----------------------------------------------------------------------------
class CpuKernel:
    """The real kernel's variants and parameters; records what each launch was given (no GPU)."""

    def __init__(self, real, fn=None):
        self.name, self.variants, self.param_names = real.name, real.variants, real.param_names
        self.fn = fn
        self.launches: list[dict] = []

    def __getitem__(self, grid):
        def run(*values, stream=None):
            named = dict(zip(self.param_names, values))
            self.launches.append({"grid": grid(named) if callable(grid) else grid, "stream": stream, **named})
            if self.fn is not None:
                self.fn(named)

        return run


def test_the_torch_op_takes_tensors_and_launches_descriptors(desc_archive):
    torch = pytest.importorskip("torch")
    import karchive
    from karchive.interop import torch as kt

    k = karchive.open(str(desc_archive)).kernel("desc_copy")

    def copy(named):  # what the kernel does, on the descriptors' tensors
        named["out_desc"].source.copy_(named["in_desc"].source)

    cpu = CpuKernel(k, copy)
    op = kt.custom_op(
        f"karchive_desc{next(_ids)}::copy",
        cpu,
        out="out_desc",
        device_types="cpu",
        grid=lambda m: (m["in_desc"].shape[0] // 64, m["in_desc"].shape[1] // 64),
        constexprs={"BLOCK_M": 64, "BLOCK_N": 64},
        descriptors={"in_desc": {"padding": "nan"}},
    )
    assert str(op._opoverload._schema).endswith("(Tensor in_desc) -> Tensor")
    x = torch.arange(128 * 64, dtype=torch.float16).reshape(128, 64)
    y = op(x)
    assert torch.equal(y, x) and y.shape == (128, 64) and y.dtype == torch.float16
    (launch,) = cpu.launches
    a, b = launch["in_desc"], launch["out_desc"]
    assert isinstance(a, karchive.TensorDescriptor) and isinstance(b, karchive.TensorDescriptor)
    assert a.source is x and a.padding == "nan" and a.block_shape is None  # the variant's block at launch
    assert b.source is y and b.padding == "zero" and b.shape == (128, 64) and b.strides == (64, 1)
    assert launch["grid"] == (2, 1) and launch["BLOCK_M"] == 64
    # mutated descriptor arguments, and a block shape given as a list
    into = kt.custom_op(
        f"karchive_desc{next(_ids)}::copy_into",
        CpuKernel(k, copy),
        mutates_args=("out_desc",),
        device_types="cpu",
        grid=(1,),
        constexprs={"BLOCK_M": 64, "BLOCK_N": 64},
        descriptors={"out_desc": [64, 64]},
    )
    assert str(into._opoverload._schema).endswith("(Tensor in_desc, Tensor(a1!) out_desc) -> ()")
    z = torch.zeros_like(x)
    into(x, z)
    assert torch.equal(z, x)
    with pytest.raises(ArgumentError, match="which is not a tensor-descriptor parameter"):
        kt.custom_op(
            f"karchive_desc{next(_ids)}::bad",
            CpuKernel(k),
            out="out_desc",
            grid=(1,),
            constexprs={"BLOCK_M": 64, "BLOCK_N": 64},
            descriptors={"BLOCK_M": [64, 64]},
        )
