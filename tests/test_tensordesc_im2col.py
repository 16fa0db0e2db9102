"""im2col tensor descriptors (Gluon's ``tensordesc_im2col``, Triton 3.8+) without a GPU (issue 21).

A real Triton compile of tests/data/im2col_kernels.py records the parameter; the arguments karchive passes
to ``cuTensorMapEncodeIm2col`` are compared with what the installed Triton's own launcher computes for the
same descriptor (``make_tensordesc_arg`` with a recording ``fill_tma_descriptor_im2col``, then the
arithmetic of its C ``fillTMADescriptorIm2col``); the cuda-python call is checked against a recording stand-in
of the binding; the checks, the cache and both launch paths (recording driver) run for real. The map
itself and the kernel's result are tests/gpu/test_tensordesc_gpu.py's.
"""

from __future__ import annotations

import pathlib
import struct
import sys

import pytest
from test_tensordesc_runtime import FP16, FP32, FakeTensor

from karchive.errors import ArgumentError, SchemaError
from karchive.format.tensordesc import TensorDescAbi
from karchive.runtime import descriptors as td

DATA = pathlib.Path(__file__).resolve().parent / "data"


def im2col_abi(block=(64, 64), rank=4, dtype="fp16", elem_size=2, elem_type=6, swizzle=3) -> TensorDescAbi:
    return TensorDescAbi(
        "triton-3.8",
        "tma",
        dtype,
        rank,
        tuple(block),
        swizzle=swizzle,
        elem_size=elem_size,
        elem_type=elem_type,
        im2col=True,
    )


def nhwc(ptr=0x7F0000010000, shape=(2, 8, 8, 64), dtype=FP16, strides=None) -> FakeTensor:
    return FakeTensor(ptr, list(shape), dtype, strides)


@pytest.fixture
def no_driver(monkeypatch):
    """Both encoders recorded instead of called (no driver here)."""
    calls: list = []

    def fake(p) -> bytes:
        calls.append(p)
        return bytes([len(calls)]) * 128

    monkeypatch.setattr(td, "encode_tiled", fake)
    monkeypatch.setattr(td, "encode_im2col", fake)
    monkeypatch.setattr(td, "_driver", lambda: 13000)  # old enough that a tiled map would be patched
    td.clear_cache()
    yield calls
    td.clear_cache()


def _gluon_im2col():
    try:
        from triton.experimental.gluon.language.nvidia.hopper import tma
        from triton.experimental.gluon.nvidia.hopper import TensorDescriptorIm2Col
    except ImportError:
        pytest.skip("the installed Triton has no Gluon im2col descriptors (Triton 3.8+)")
    if not hasattr(tma, "async_load_im2col"):
        pytest.skip("the installed Triton's Gluon has no async_load_im2col")
    return TensorDescriptorIm2Col


def _layout(block=(64, 64)) -> str:
    from triton.experimental.gluon import language as gl

    return repr(gl.NVMMASharedLayout.get_default_for(list(block), gl.float16))


def im2col_signature() -> str:
    lay = _layout()
    return (
        f"tensordesc_im2col<fp16[64, 64],input_rank=4,{lay}>, tensordesc<fp16[64, 64],{lay}>, i32, i32, i32, i32, i32"
    )


@pytest.mark.parametrize(
    "shape,block,lower,upper,estrides,padding",
    [
        ((2, 8, 8, 64), (64, 64), (-1, -1), (-1, -1), None, "zero"),  # 3x3 conv, pad 1, stride 1
        ((1, 9, 9, 128), (32, 64), (-1, -2), (-3, -4), (1, 2, 2, 1), "nan"),  # stride 2, asymmetric box
        ((4, 16, 32), (128, 32), (-2,), (0,), (1, 3, 1), "zero"),  # NWC (rank 3)
        ((1, 4, 4, 4, 32), (16, 32), (-1, -1, -1), (-1, -1, -1), None, "zero"),  # NDHWC (rank 5)
    ],
)
def test_im2col_arguments_are_tritons(shape, block, lower, upper, estrides, padding, no_driver, fake_gpu_driver):
    """Triton's make_tensordesc_arg with a Gluon TensorDescriptorIm2Col and fill_tma_descriptor_im2col
    recording its arguments; the C function's arithmetic (driver.c fillTMADescriptorIm2col: every list
    reversed, byte strides of all but the last dimension, channelsPerPixel = block[1], pixelsPerColumn =
    block[0], element strides 1 when none given) applied to them gives karchive's Im2colParams, and the
    shape and strides after the map are Triton's."""
    TensorDescriptorIm2Col = _gluon_im2col()
    from triton.backends.nvidia import driver as nvdriver
    from triton.experimental.gluon import language as gl

    recorded = []

    def fill(*args):
        recorded.append(args)
        return "MAP"

    fake_gpu_driver.utils.fill_tma_descriptor_im2col = fill
    base = nhwc(shape=shape)
    layout = gl.NVMMASharedLayout.get_default_for(list(block), gl.float16)
    theirs_desc = TensorDescriptorIm2Col.from_tensor(
        base,
        list(block),
        layout,
        padding=padding,
        element_strides=None if estrides is None else list(estrides),
        pixel_box_lower_corner=list(lower),
        pixel_box_upper_corner=list(upper),
    )
    meta = {
        "swizzle": 3,
        "elem_size": 2,
        "elem_type": 6,
        "block_size": list(block),
        "fp4_padded": False,
        "is_im2col": True,
    }
    theirs = nvdriver.make_tensordesc_arg(theirs_desc, meta, None)
    (ptr, swizzle, elem_size, host_type, box, dims, strides, pad, lo, hi, es) = recorded[0]
    rank = len(dims)
    want = td.Im2colParams(
        host_type,
        rank,
        ptr,
        tuple(reversed(dims)),
        tuple(reversed([s * elem_size for s in strides[:-1]])),
        tuple(reversed(lo)),
        tuple(reversed(hi)),
        channels_per_pixel=box[1],
        pixels_per_column=box[0],
        element_strides=tuple(reversed(es)),
        swizzle=swizzle,
        oob_fill=pad,
    )
    d = im2col_abi(block, rank=rank)
    for desc in (
        theirs_desc,  # Gluon's own descriptor, duck-typed
        td.TensorDescriptor(
            base,
            list(block),
            padding=padding,
            pixel_box_lower_corner=lower,
            pixel_box_upper_corner=upper,
            element_strides=estrides,
        ),
    ):
        td.clear_cache()
        no_driver.clear()
        ours = td.expand("in_desc", d, desc)
        assert no_driver == [want]
        assert theirs[0] == "MAP" and ours[1:] == list(theirs[1:]) and len(ours) == len(d.slots)
    # the map's own parameters, independently of Triton: NHWC innermost first
    p = no_driver[0]
    assert p.global_dim == tuple(reversed(shape)) and p.oob_fill == (1 if padding == "nan" else 0)
    assert p.pixel_box_lower_corner == tuple(reversed(lower)) and p.data_type == 6


def test_the_encode_call_passes_the_bindings_types_in_order(monkeypatch):
    """cuTensorMapEncodeIm2col through cuda-python: the call karchive makes, recorded by a stand-in of the
    binding (the real one needs a driver): the enum types, the cuuint64_t/cuuint32_t lists, plain int corners,
    and the 128 bytes behind the returned map, unpatched (Triton's im2col fill patches nothing)."""
    cu = pytest.importorskip("cuda.bindings.driver")
    import ctypes

    seen = []
    raw = (ctypes.c_ubyte * 128)(*range(128))

    class Map:
        def getPtr(self) -> int:
            return ctypes.addressof(raw)

    def fake(*args):
        seen.append(args)
        return cu.CUresult(0), Map()

    monkeypatch.setattr(cu, "cuTensorMapEncodeIm2col", fake)
    p = td.im2col_params(
        im2col_abi((32, 64)),
        0x7F0000010000,
        (2, 8, 8, 64),
        (4096, 512, 64, 1),
        "nan",
        False,
        ((-1, -2), (-3, -4), (1, 2, 2, 1)),
    )
    assert td.encode_im2col(p) == bytes(range(128))
    (args,) = seen
    assert len(args) == 14
    assert args[0] == cu.CUtensorMapDataType(6) and args[1] == 4 and args[2] == 0x7F0000010000
    assert [int(v) for v in args[3]] == [64, 8, 8, 2] and all(isinstance(v, cu.cuuint64_t) for v in args[3])
    assert [int(v) for v in args[4]] == [128, 1024, 8192] and all(isinstance(v, cu.cuuint64_t) for v in args[4])
    assert args[5] == [-2, -1] and args[6] == [-4, -3] and (args[7], args[8]) == (64, 32)
    assert [int(v) for v in args[9]] == [1, 2, 2, 1] and all(isinstance(v, cu.cuuint32_t) for v in args[9])
    assert args[10] == cu.CUtensorMapInterleave(0) and args[11] == cu.CUtensorMapSwizzle(3)
    assert args[12] == cu.CUtensorMapL2promotion(2) and args[13] == cu.CUtensorMapFloatOOBfill(1)

    def failing(*args):
        return cu.CUresult(1), None

    monkeypatch.setattr(cu, "cuTensorMapEncodeIm2col", failing)
    monkeypatch.setattr(cu, "cuGetErrorString", lambda err: (cu.CUresult(0), b"invalid argument"))
    from karchive.errors import DriverError

    with pytest.raises(DriverError, match="cuTensorMapEncodeIm2col failed: invalid argument") as err:
        td.encode_im2col(p)
    assert err.value.call == "cuTensorMapEncodeIm2col" and err.value.code == 1


def test_the_real_binding_takes_the_arguments():
    """The installed cuda-python's cuTensorMapEncodeIm2col with karchive's arguments: without a driver the call
    gets as far as loading it (no TypeError from the argument conversion); with one it returns 128 bytes."""
    pytest.importorskip("cuda.bindings.driver")
    p = td.im2col_params(
        im2col_abi(), 0x7F0000010000, (2, 8, 8, 64), (4096, 512, 64, 1), "zero", False, ((-1, -1), (-1, -1), None)
    )
    try:
        out = td.encode_im2col(p)
    except (TypeError, ValueError, AttributeError):
        raise
    except Exception as exc:  # no driver library on this machine
        assert "cuda" in str(exc).lower() or isinstance(exc, td.DriverError), exc
    else:
        assert len(out) == 128


def test_im2col_descriptors_are_checked_before_the_driver(no_driver):
    d = im2col_abi()
    x = nhwc()
    box = {"pixel_box_lower_corner": [-1, -1], "pixel_box_upper_corner": [-1, -1]}
    with pytest.raises(ArgumentError, match="takes an im2col descriptor: give the pixel box") as err:
        td.expand("in_desc", d, td.TensorDescriptor(nhwc(shape=(2, 8, 8, 64)), None))
    assert err.value.param == "in_desc"
    with pytest.raises(ArgumentError, match="an im2col descriptor .* for a tiled descriptor parameter"):
        td.expand(
            "a",
            TensorDescAbi("triton-3.8", "tma", "fp16", 4, (1, 1, 64, 64), swizzle=3, elem_size=2, elem_type=6),
            td.TensorDescriptor(x, [64, 64], **box),
        )
    with pytest.raises(ArgumentError, match=r"block_shape is \[32, 64\], the variant was compiled for \[64, 64\]"):
        td.expand("a", d, td.TensorDescriptor(x, [32, 64], **box))
    assert len(td.expand("a", d, td.TensorDescriptor(x, [32, 64], **box), block_from_variant=True)) == 9
    with pytest.raises(ArgumentError, match="dtype fp32, the variant takes fp16"):
        td.expand("a", d, td.TensorDescriptor(nhwc(dtype=FP32), [64, 64], **box))
    with pytest.raises(ArgumentError, match="not 16-byte aligned"):
        td.expand("a", d, td.TensorDescriptor(nhwc(ptr=0x10008), [64, 64], **box))
    assert no_driver == [no_driver[0]]  # only the block_from_variant call reached the encoder
    # construction-time checks, with what Gluon's TensorDescriptorIm2Col asserts
    for kw, msg in [
        ({"pixel_box_lower_corner": [-1], "pixel_box_upper_corner": [-1]}, "one entry per spatial dimension"),
        ({"pixel_box_lower_corner": [-1, -1]}, "one entry per spatial dimension"),
        ({"pixel_box_lower_corner": [-129, 0], "pixel_box_upper_corner": [0, 0]}, r"in \[-128, 127\]"),
        ({**box, "element_strides": [1, 9, 1, 1]}, "element_strides"),
        ({**box, "element_strides": [1, 2, 2, 2]}, "the last 1"),
        ({"element_strides": [1, 1, 1, 1]}, "give pixel_box_lower_corner"),
    ]:
        with pytest.raises(ArgumentError, match=msg):
            td.TensorDescriptor(x, [64, 64], **kw)
    with pytest.raises(ArgumentError, match="rank 3, 4 or 5"):
        td.TensorDescriptor(
            FakeTensor(0x10000, [64, 64], FP16), [64, 64], pixel_box_lower_corner=[], pixel_box_upper_corner=[]
        )
    with pytest.raises(ArgumentError, match=r"\[pixels per column, channels per pixel\]"):
        td.TensorDescriptor(x, [1, 64, 64], **box)
    with pytest.raises(ArgumentError, match="an im2col descriptor also needs pixel_box_lower_corner"):
        td.TensorDescriptor(x, [64, 64])  # a 2-entry block over an NHWC tensor without a box
    # an archive record of an im2col map that cuTensorMapEncodeIm2col could not take is a schema error
    with pytest.raises(SchemaError, match="im2col map needs rank 3 to 5"):
        TensorDescAbi.from_json({**im2col_abi().to_json(), "block_shape": [1, 64, 64]}, "p")
    assert TensorDescAbi.from_json(im2col_abi().to_json(), "p") == im2col_abi()


def test_im2col_maps_are_cached_by_their_box(no_driver):
    d = im2col_abi()
    x = nhwc()
    a = td.TensorDescriptor(x, [64, 64], pixel_box_lower_corner=[-1, -1], pixel_box_upper_corner=[-1, -1])
    first = td.expand("a", d, a)
    assert td.expand("a", d, a) is first and len(no_driver) == 1
    same = td.TensorDescriptor(x, [64, 64], pixel_box_lower_corner=[-1, -1], pixel_box_upper_corner=[-1, -1])
    assert td.expand("a", d, same) is first and len(no_driver) == 1
    strided = td.TensorDescriptor(
        x, [64, 64], pixel_box_lower_corner=[-1, -1], pixel_box_upper_corner=[-1, -1], element_strides=[1, 2, 2, 1]
    )
    other_box = td.TensorDescriptor(x, [64, 64], pixel_box_lower_corner=[0, 0], pixel_box_upper_corner=[-2, -2])
    td.expand("a", d, strided)
    td.expand("a", d, other_box)
    assert len(no_driver) == 3 and no_driver[1].element_strides == (1, 2, 2, 1)
    assert no_driver[2].pixel_box_upper_corner == (-2, -2)
    x.ptr += 0x10000  # moved storage: re-encoded at the new address
    td.expand("a", d, a)
    assert len(no_driver) == 4 and no_driver[-1].address == x.ptr


def test_selection_tells_im2col_and_tiled_parameters_apart():
    x = nhwc()
    typ = "tensordesc_im2col<fp16[64, 64],input_rank=4,NVMMASharedLayout(swizzle_byte_width=128)>"
    box = td.TensorDescriptor(x, [64, 64], pixel_box_lower_corner=[-1, -1], pixel_box_upper_corner=[-1, -1])
    assert td.descriptor_reason("in_desc", typ, box) is None
    tiled = td.TensorDescriptor(x, [1, 1, 64, 64])
    assert "is a tiled descriptor, this variant takes an im2col one" in td.descriptor_reason("in_desc", typ, tiled)
    assert "is an im2col descriptor, this variant takes a tiled one" in td.descriptor_reason(
        "in_desc", "tensordesc<fp16[1, 1, 64, 64]>", box
    )
    small = td.TensorDescriptor(x, [32, 64], pixel_box_lower_corner=[-1, -1], pixel_box_upper_corner=[-1, -1])
    assert "block_shape [32, 64]" in td.descriptor_reason("in_desc", typ, small)


def _im2col_archive(tmp_path) -> pathlib.Path:
    _gluon_im2col()
    from karchive.cli.main import main

    out = tmp_path / "im2col.karc"
    assert (
        main(
            [
                "compile",
                str(DATA / "im2col_kernels.py"),
                "-n",
                "im2col_gather",
                "-s",
                f"{im2col_signature()}, 3, 64, 64",
                "-t",
                "cuda:90",
                "-o",
                str(out),
            ]
        )
        == 0
    )
    return out


def test_the_build_records_an_im2col_parameter(tmp_path):
    """A real Gluon compile (cuda:90, sm_90a cubin): the im2col parameter is recorded as a TMA map of the
    NHWC tensor's rank (the signature's input_rank) with the [pixels, channels] box, next to a tiled one; the
    manifest reads back the same records."""
    out = _im2col_archive(tmp_path)
    from karchive.format.manifest import Manifest
    from karchive.format.open import open_location

    m = Manifest.from_json(open_location(out).manifest)
    (v,) = m.variants
    a, b = (p.desc for p in v.abi.params[:2])
    assert v.abi.binary_arch == "sm_90a" and v.abi.version == 2
    assert a is not None and (a.im2col, a.mode, a.rank, a.block_shape, a.convention) == (
        True,
        "tma",
        4,
        (64, 64),
        "triton-3.8",
    )
    assert a.slots == ("tensormap",) + ("i32",) * 4 + ("i64",) * 4
    assert b is not None and (b.im2col, b.rank, b.block_shape) == (False, 2, (64, 64))
    assert v.params[0].type.startswith("tensordesc_im2col<fp16[64, 64],input_rank=4,")


@pytest.mark.parametrize("path", ["python", "extension"])
def test_im2col_launch_packs_the_map_then_shape_and_strides_on_both_paths(path, monkeypatch, tmp_path, no_driver):
    """k[grid](im2col desc, tiled desc, ...) through the recording driver stand-in: the binary's parameters are
    the im2col map, the NHWC shape (i32 x 4) and strides (i64 x 4), then the tiled map and its shape and
    strides, then the ints; the second launch re-encodes nothing; an im2col parameter given a tiled
    descriptor launches nothing."""
    out = _im2col_archive(tmp_path)
    from runtime_support import fake_cuda

    import karchive
    from karchive.producer.compile.tensordesc_abi import binary_param_sizes
    from karchive.runtime import launch_path

    if path == "extension" and launch_path.extension() is None:
        pytest.skip(f"the compiled launcher is not built here: {launch_path.status().detail}")
    with fake_cuda(monkeypatch, path) as (rec, _backend):
        arc = karchive.open(str(out))
        (v,) = arc.variants("im2col_gather")
        user = [p for p in v.abi.params if p.kind in ("tensordesc", "scalar")]
        rec.sizes[arc.reader.read(v.binary.path)] = binary_param_sizes(user) + [8] * (len(v.abi.params) - len(user))
        k = arc.kernel("im2col_gather")
        assert k.launch_path == path
        x = nhwc(shape=(2, 8, 8, 64))
        a = td.TensorDescriptor(x, [64, 64], pixel_box_lower_corner=[-1, -1], pixel_box_upper_corner=[-1, -1])
        b = td.TensorDescriptor(FakeTensor(0x7F0000100000, [128, 576], FP16), [64, 64])
        k[(2, 9, 1)](a, b, 8, 8, 64, 1, 1, S=3, BLOCK_PIX=64, BLOCK_C=64)
        k[(2, 9, 1)](a, b, 8, 8, 64, 1, 1, S=3, BLOCK_PIX=64, BLOCK_C=64)
        assert len(no_driver) == 2
        im2col, tiled = no_driver
        assert isinstance(im2col, td.Im2colParams) and isinstance(tiled, td.EncodeParams)
        assert im2col.global_dim == (64, 8, 8, 2) and (im2col.channels_per_pixel, im2col.pixels_per_column) == (64, 64)
        (first, second) = rec.launches()
        assert first.params == second.params
        p = first.params
        assert p[0] == bytes([1]) * 128 and p[9] == bytes([2]) * 128
        assert [struct.unpack("<i", x)[0] for x in p[1:5]] == [2, 8, 8, 64]
        assert [struct.unpack("<q", x)[0] for x in p[5:9]] == [4096, 512, 64, 1]
        assert [struct.unpack("<i", x)[0] for x in p[10:12]] == [128, 576]
        assert [struct.unpack("<i", x)[0] for x in p[14:19]] == [8, 8, 64, 1, 1]
        with pytest.raises(ArgumentError, match="im2col_gather: parameter 'in_desc'.*takes an im2col descriptor"):
            k[(2, 9, 1)](td.TensorDescriptor(x, [1, 1, 8, 64]), b, 8, 8, 64, 1, 1, S=3, BLOCK_PIX=64, BLOCK_C=64)
        assert len(rec.launches()) == 2


@pytest.mark.parametrize("minor", ["3.8", "3.9"])
def test_each_release_with_im2col_encodes_as_karchive_does(minor):
    """Triton 3.8 and 3.9 (release venvs, tools/tritons.sh) have im2col maps; each one's own
    ``make_tensordesc_arg`` with a recording ``fill_tma_descriptor_im2col`` (tests/data/im2col_launcher_probe.py,
    run by that release's interpreter on this checkout's karchive) gives, after its C arithmetic, karchive's
    ``cuTensorMapEncodeIm2col`` arguments, the same values after the map, and ``expand_signature`` slots equal
    to the convention's; for NWC, NHWC and NDHWC tensors, fp16 and fp32, element strides and NaN padding."""
    import json
    import os
    import subprocess

    from test_tensordesc_runtime import _release_venv

    venv = _release_venv(minor)
    root = DATA.parent.parent
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRITON_", "PYTHON"))}
    env["PYTHONPATH"] = str(root)  # this checkout's karchive, ahead of the venv's own install
    proc = subprocess.run(
        [str(venv.python), str(DATA / "im2col_launcher_probe.py")],
        capture_output=True,
        text=True,
        env=env,
        cwd=root,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["karchive"].startswith(str(root / "karchive")) and out["triton"] == venv.version
    assert out["convention"] == "triton-3.8" and len(out["cases"]) == 4
    for name, case in out["cases"].items():
        assert case["their_slots"] == case["slots"], name
        assert case["ours"]["encode"] == case["theirs"]["encode"], name
        assert case["ours"]["after_map"] == case["theirs"]["after_map"], name
        assert case["theirs"]["map"] == case["ours"]["map"] == "MAP", name
        assert case["ours"]["fixed"] == [0, 2], name  # INTERLEAVE_NONE, L2_128B: fixed in the C
    assert out["cases"]["nhwc-stride2-nan"]["ours"]["encode"]["element_strides"] == [1, 2, 2, 1]
    assert out["cases"]["nhwc-stride2-nan"]["ours"]["encode"]["oob_fill"] == 1


if str(DATA) not in sys.path:
    sys.path.insert(0, str(DATA))


def test_a_jit_call_of_the_gluon_kernel_is_captured_as_the_build_records_it(triton_cache_dir, fake_gpu_driver):
    """The Gluon JIT compiling im2col_gather for a call with a TensorDescriptorIm2Col (fake GPU driver, real
    compile) is captured with the key and the ABI of the ahead-of-time build: one variant, either way."""
    TensorDescriptorIm2Col = _gluon_im2col()
    import im2col_kernels
    import triton.language as tl
    from capture_fakes import MockPtr, fresh
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor as GluonDesc

    import karchive
    from karchive.producer.compile.aot import VariantRequest, compile_variant

    class Nhwc(MockPtr):  # Triton's MockTensor, with the shape and strides a descriptor reads
        def __init__(self, shape):
            super().__init__(tl.float16, list(shape))

        def stride(self):
            return tuple(td._contiguous(self.shape))

    layout = gl.NVMMASharedLayout.get_default_for([64, 64], gl.float16)
    x = Nhwc((2, 8, 8, 64))
    a = TensorDescriptorIm2Col.from_tensor(
        x, [64, 64], layout, pixel_box_lower_corner=[-1, -1], pixel_box_upper_corner=[-1, -1]
    )
    b = GluonDesc.from_tensor(Nhwc((128, 576)), [64, 64], layout)
    fresh(im2col_kernels.im2col_gather)
    with karchive.capture("im2col", version="1.0") as cap:
        im2col_kernels.im2col_gather[(2, 9, 1)](a, b, 8, 8, 64, 1, 1, S=3, BLOCK_PIX=64, BLOCK_C=64)
    (captured,) = cap.variants.values()
    aot = compile_variant(
        VariantRequest(
            f"{DATA / 'im2col_kernels.py'}:im2col_gather",
            "tensordesc_im2col<fp16[64, 64],input_rank=4," + _layout() + ">, "
            "tensordesc<fp16[64, 64]," + _layout() + ">, i32, i32, i32:16, i32:1, i32:1",
            "cuda:90",
            {"S": 3, "BLOCK_PIX": 64, "BLOCK_C": 64},
            {"num_warps": 4},
        )
    )
    assert captured.variant.abi.params[0].desc == aot.variant.abi.params[0].desc
    assert captured.variant.abi.params[0].desc.im2col
    for field in ("key", "params", "abi", "target"):
        assert captured.variant.to_json()[field] == aot.variant.to_json()[field], field
