"""The steps that plan a JAX ``triton_call`` (karchive/interop/_jaxplan.py), one by one, without JAX.

Outputs, argument binding and buffer layout run on hand-made parameter roles; variant selection,
launch meta, zeroing and machine code on the real example archive (compiled here by Triton).
Arrays are numpy arrays and output structs a (shape, dtype) pair: planning only reads those.
"""

from __future__ import annotations

import itertools
from collections import namedtuple
from types import SimpleNamespace

import pytest

np = pytest.importorskip("numpy")

import karchive  # noqa: E402
from karchive.errors import ArgumentError, NoMatchingVariantError  # noqa: E402
from karchive.interop import InteropError  # noqa: E402
from karchive.interop import _jaxplan as jp  # noqa: E402
from karchive.interop._jaxdesc import ArrayParam, Buffer, ScalarParam  # noqa: E402
from karchive.interop._roles import Role, kernel_roles  # noqa: E402

SD = namedtuple("SD", "shape dtype")  # what jax.ShapeDtypeStruct offers planning
N = 4096
F32 = np.dtype("float32")


def roles(*spec: str) -> list[Role]:
    """``roles("x:pointer", "n:int", "BLOCK:constexpr")``."""
    out = []
    for i, s in enumerate(spec):
        name, kind = s.split(":")
        out.append(Role(name, i, kind, frozenset()))
    return out


def fake_kernel(rs: list[Role], name: str = "k") -> SimpleNamespace:
    return SimpleNamespace(name=name, param_names=[r.name for r in rs])


ADD = roles("x_ptr:pointer", "y_ptr:pointer", "out_ptr:pointer", "n_elements:int", "BLOCK:constexpr")
SOFTMAX = roles("out_ptr:pointer", "in_ptr:pointer", "in_stride:int", "out_stride:int", "n_cols:int", "BLOCK:constexpr")


# -- 1. outputs ----------------------------------------------------------------------------------------
def test_outputs_take_the_last_pointer_parameters_by_default():
    out = jp.resolve_outputs("add", ADD, SD((N,), F32), None, None)
    assert out.param_of == {"out_ptr": 0} and out.single and out.aliases == {}
    two = jp.resolve_outputs("add", ADD, [SD((N,), F32), SD((N,), F32)], None, None)
    assert two.param_of == {"y_ptr": 0, "out_ptr": 1} and not two.single


def test_out_names_and_aliases_choose_the_output_parameters():
    out = jp.resolve_outputs("softmax", SOFTMAX, SD((8, 100), F32), None, ["out_ptr"])
    assert out.param_of == {"out_ptr": 0}
    aliased = jp.resolve_outputs("add", ADD, (SD((N,), F32),), {"2": "0"}, None)
    assert aliased.param_of == {} and aliased.aliases == {2: 0}  # keys and values coerced to int


@pytest.mark.parametrize(
    "shapes, aliases, names, match",
    [
        ([SD((1,), F32)] * 4, None, None, "4 outputs but only 3 pointer parameters"),
        ([SD((1,), F32)], {0: 1}, None, "distinct outputs 0..0"),
        ([SD((1,), F32)] * 2, {0: 0, 1: 0}, None, "distinct outputs"),
        ([SD((1,), F32)], None, ["n_elements"], "must name 1 pointer parameter"),
        ([SD((1,), F32)], None, ["x_ptr", "y_ptr"], "must name 1 pointer parameter"),
    ],
)
def test_bad_output_specs_are_refused(shapes, aliases, names, match):
    with pytest.raises(ArgumentError, match=match):
        jp.resolve_outputs("add", ADD, shapes, aliases, names)


def test_out_shape_must_be_structs():
    with pytest.raises(ArgumentError, match="out_shape must be"):
        jp.resolve_outputs("add", ADD, (4,), None, None)


# -- 2. arguments --------------------------------------------------------------------------------------
def test_arguments_bind_by_position_and_keyword_constexprs_apart():
    x = np.zeros(N, F32)
    out = jp.resolve_outputs("add", ADD, SD((N,), F32), None, None)
    b = jp.bind_arguments(
        fake_kernel(ADD, "add"), ADD, out, (x,), {"y_ptr": x, "n_elements": np.array(N), "BLOCK": 1024}
    )
    assert [r.name for r in b.inputs] == ["x_ptr", "y_ptr", "n_elements"]
    assert b.values["x_ptr"] is x and b.constexprs == {"BLOCK": 1024}
    assert b.values["n_elements"] == N and type(b.values["n_elements"]) is int  # a 0-d array becomes its number


class Traced:
    """A 0-d array whose value is unknown at trace time (like a jax tracer inside jit)."""

    shape, dtype = (), F32

    def item(self):
        raise RuntimeError("ConcretizationTypeError")


@pytest.mark.parametrize(
    "args, kwargs, match",
    [
        ((1, 2, 3, 4), {}, "takes 3 inputs"),
        ((np.zeros(4, F32),), {"x_ptr": 1}, "two values for 'x_ptr'"),
        ((np.zeros(4, F32), np.zeros(4, F32), 4), {"BLOCKS": 1}, "unknown argument 'BLOCKS'"),
        ((np.zeros(4, F32), np.zeros(4, F32)), {}, r"missing argument\(s\) n_elements"),
        ((np.zeros(4, F32), 3, 4), {}, "y_ptr is a pointer parameter; pass an array, got int"),
        (
            (np.zeros(4, F32), np.zeros(4, F32), np.zeros(2, np.int32)),
            {},
            "n_elements is a scalar parameter; got an array",
        ),
        ((np.zeros(4, F32), np.zeros(4, F32), Traced()), {}, "must be a static Python number"),
    ],
)
def test_bad_arguments_are_refused(args, kwargs, match):
    out = jp.resolve_outputs("add", ADD, SD((4,), F32), None, None)
    with pytest.raises(ArgumentError, match=match):
        jp.bind_arguments(fake_kernel(ADD, "add"), ADD, out, args, kwargs)


def test_aliased_inputs_must_be_arrays_of_the_output_shape():
    k = fake_kernel(ADD, "add")
    x = np.zeros(N, F32)
    ok = jp.resolve_outputs("add", ADD, SD((N,), F32), {2: 0}, None)
    assert jp.bind_arguments(k, ADD, ok, (x, x, x, N), {}).values["out_ptr"] is x
    with pytest.raises(ArgumentError, match="has shape/dtype"):
        jp.bind_arguments(k, ADD, ok, (x, x, np.zeros(N, np.float16), N), {})
    scalar = jp.resolve_outputs("add", ADD, SD((N,), F32), {3: 0}, None)
    with pytest.raises(ArgumentError, match="key 3 must index an array input"):
        jp.bind_arguments(k, ADD, scalar, (x, x, x, N), {})


# -- 3. buffers ----------------------------------------------------------------------------------------
def test_trailing_output_is_a_result_and_leading_output_a_zero_filled_aliased_operand():
    add = jp.layout_buffers(
        ["x_ptr", "y_ptr", "out_ptr"],
        jp.Outputs((SD((N,), F32),), True, {"out_ptr": 0}, {}),
        ["x_ptr", "y_ptr", "n_elements"],
    )
    assert add.operand_params == ("x_ptr", "y_ptr") and add.result_params == ("out_ptr",)
    assert add.materialized == () and add.operand_aliases == {} and add.result_order == (0,)
    sm = jp.layout_buffers(
        ["out_ptr", "in_ptr"], jp.Outputs((SD((8, 9), F32),), True, {"out_ptr": 0}, {}), ["in_ptr", "in_stride"]
    )
    assert sm.operand_params == ("out_ptr", "in_ptr") and sm.result_params == ()
    assert sm.materialized == ("out_ptr",) and sm.operand_aliases == {0: 0}


def test_two_outputs_one_materialized_come_back_in_user_order():
    # k(a_out, x, b_out): b_out trails (result 0), a_out has an input after it (materialized, result 1)
    outs = jp.Outputs((SD((1,), F32), SD((2,), F32)), False, {"a_out": 0, "b_out": 1}, {})
    lay = jp.layout_buffers(["a_out", "x", "b_out"], outs, ["x"])
    assert lay.result_order == (1, 0) and lay.operand_aliases == {0: 1}
    assert lay.buffer_of == {"a_out": 0, "x": 1, "b_out": 2}


def _layouts():
    """Every kernel of up to 4 pointer parameters x every choice of output pointers and aliased inputs."""
    for n in range(1, 5):
        ptrs = [f"p{i}" for i in range(n)]
        for k in range(n + 1):
            for out_params in itertools.permutations(ptrs, k):
                inputs = [p for p in ptrs if p not in out_params]
                for n_alias in range(len(inputs) + 1):
                    for aliased in itertools.combinations(range(len(inputs)), n_alias):
                        n_out = k + n_alias
                        aliases = {i: k + j for j, i in enumerate(aliased)}
                        outs = jp.Outputs(
                            tuple(SD((1,), F32) for _ in range(n_out)),
                            False,
                            {p: i for i, p in enumerate(out_params)},
                            aliases,
                        )
                        yield ptrs, inputs, outs


def test_every_layout_feeds_pointers_in_declaration_order_and_returns_each_output_once():
    """jaxlib gives buffer k to the k-th pointer parameter; each output must be exactly one result."""
    count = 0
    for ptrs, inputs, outs in _layouts():
        lay = jp.layout_buffers(ptrs, outs, inputs)
        assert [lay.buffer_of[p] for p in ptrs] == list(range(len(ptrs)))
        assert sorted(lay.result_order) == list(range(len(outs.shapes)))
        n_ops = len(lay.operand_params)
        assert all(0 <= op < n_ops for op in lay.operand_aliases)
        assert sorted(lay.operand_aliases.values()) == sorted(set(lay.operand_aliases.values()))
        # results = trailing outputs + one per aliased operand
        assert len(lay.result_params) + len(lay.operand_aliases) == len(outs.shapes)
        for name in lay.materialized:
            assert lay.result_order[lay.operand_aliases[lay.buffer_of[name]]] == outs.param_of[name]
        count += 1
    assert count > 200


# -- 4-6. with a real archive ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def arc(examples_archive):
    return karchive.open(examples_archive)


def caps(cubin: bool) -> SimpleNamespace:
    return SimpleNamespace(
        accepts_cubin=cubin, notes=[] if cubin else ["no module_image field"], jaxlib_version=(0, 4, 36)
    )


def _steps(kernel, args, kwargs, out_shape, **opts):
    rs = kernel_roles(kernel)
    outs = jp.resolve_outputs(kernel.name, rs, out_shape, opts.get("aliases"), opts.get("out_names"))
    b = jp.bind_arguments(kernel, rs, outs, args, kwargs)
    lay = jp.layout_buffers([r.name for r in rs if r.kind == "pointer"], outs, [r.name for r in b.inputs])
    return outs, b, lay


def test_variant_selection_and_meta_follow_the_compute_capability(arc):
    k = arc.kernel("add_kernel")
    x = np.zeros(N, F32)
    outs, b, _ = _steps(k, (x, x, N), {"BLOCK": 256}, SD((N,), F32))
    for cc, arch in ((90, "sm_90a"), (80, "sm_80")):
        v = jp.select_variant(k, outs, b, cc)
        assert v.abi.binary_arch == arch and v.constexprs == {"BLOCK": 256}
    meta = jp.launch_meta(k, b, v)
    assert meta["BLOCK"] == 256 and meta["n_elements"] == N and meta["num_warps"] == v.abi.num_warps
    assert jp.normalize_grid(lambda m: ((m["n_elements"] + m["BLOCK"] - 1) // m["BLOCK"],), meta) == (16,)
    assert jp.normalize_grid(7, meta) == (7,) and jp.normalize_grid([2, 3], meta) == (2, 3)
    with pytest.raises(NoMatchingVariantError):
        jp.select_variant(k, outs, jp.Binding(b.inputs, b.values, {"BLOCK": 512}), 90)
    h16 = np.zeros(N, np.float16)
    outs16, b16, _ = _steps(k, (h16, h16, N), {"BLOCK": 256}, SD((N,), np.float16))
    with pytest.raises(NoMatchingVariantError):  # the archive has fp32 add only
        jp.select_variant(k, outs16, b16, 90)


def test_zero_bytes_skip_materialized_outputs_and_count_aliased_ones(arc):
    sm = arc.kernel("softmax_kernel")
    x = np.zeros((8, 1000), F32)
    outs, b, lay = _steps(sm, (x, 1000, 1000, 1000), {}, SD((8, 1000), F32), out_names=["out_ptr"])
    assert jp.zero_bytes((0,), {}, outs, b, lay) == {}  # already a zero-filled operand
    add = arc.kernel("add_kernel")
    y = np.zeros(N, F32)
    outs, b, lay = _steps(add, (y, y, y, N), {}, SD((N,), F32), aliases={2: 0})
    assert jp.zero_bytes(lambda meta: [0], {}, outs, b, lay) == {2: N * 4}
    with pytest.raises(ArgumentError, match="no output 1"):
        jp.zero_bytes((1,), {}, outs, b, lay)


def test_machine_code_paths(arc):
    k = arc.kernel("add_kernel")
    x = np.zeros(N, F32)
    outs, b, _ = _steps(k, (x, x, N), {"BLOCK": 1024}, SD((N,), F32))
    v = jp.select_variant(k, outs, b, 90)
    ptx = arc.reader.read(v.ir["ptx"].path).decode()
    cubin = arc.reader.read(v.binary.path)
    assert jp.machine_code(k, v, "auto", caps(False)) == ("ptx", ptx, None)
    assert jp.machine_code(k, v, "auto", caps(True)) == ("cubin", ptx, cubin)  # PTX rides along
    assert jp.machine_code(k, v, "cubin", caps(True)) == ("cubin", None, cubin)  # strict: nothing to compile
    assert jp.machine_code(k, v, "ptx", caps(True)) == ("ptx", ptx, None)
    with pytest.raises(InteropError, match=r"this jaxlib \(0.4.36\) does not accept .*no module_image field"):
        jp.machine_code(k, v, "cubin", caps(False))


def test_call_values_put_buffers_where_the_variant_has_pointers(arc):
    k = arc.kernel("scale_kernel")
    x = np.zeros(N, F32)
    outs, b, lay = _steps(k, (x, N, 1, 2.5), {}, SD((N,), F32))
    v = jp.select_variant(k, outs, b, 90)
    vals = jp.call_values(v, lay, b)
    assert vals[:4] == [Buffer(0), Buffer(1), N, 1] and vals[4] == 2.5


def test_whole_plan_without_jax(arc):
    """The steps together: what triton_call hands to jaxlib, computed with numpy stand-ins only."""
    k = arc.kernel("softmax_kernel")
    x = np.zeros((8, 1000), F32)
    zeros_made = []

    def zeros(shape, dtype):
        zeros_made.append((shape, np.dtype(dtype)))
        return np.zeros(shape, dtype)

    p = jp.plan(
        k,
        (x, 1000, 1000, 1000),
        {},
        out_shape=SD((8, 1000), F32),
        out_names=["out_ptr"],
        grid=(8,),
        compute_capability=90,
        support=caps(False),
        zeros=zeros,
    )
    assert zeros_made == [((8, 1000), F32)] and p.operands[1] is x
    assert p.aliases == {0: 0} and p.user_order == [0] and p.materialized == [0]
    assert p.out_avals == [((8, 1000), F32)]
    assert p.desc.path == "ptx" and p.desc.grid == (8, 1, 1)
    assert p.desc.params[:2] == (ArrayParam("out_ptr", 0, 16, 0), ArrayParam("in_ptr", 1, 16, 0))
    assert p.desc.params[2] == ScalarParam("in_row_stride", "i32", 1000)
    with pytest.raises(ArgumentError, match="mode must be"):
        jp.plan(
            k,
            (x, 1000, 1000, 1000),
            {},
            out_shape=SD((8, 1000), F32),
            grid=(8,),
            mode="sass",
            compute_capability=90,
            support=caps(False),
        )
