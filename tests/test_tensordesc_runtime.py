"""Tensor descriptors at launch, without a GPU (issue 21): what karchive would pass, and what it refuses.

The ``cuTensorMapEncodeTiled`` call itself needs a driver (tests/gpu/test_tensordesc_gpu.py makes it);
here its *arguments* are compared with what the installed Triton's own launcher computes for the same
descriptor (``make_tensordesc_arg`` with a recording ``fill_tma_descriptor_tiled``), the trailing
shape/stride values and the decomposed expansion with Triton's, and the checks, the cache, the parameter
buffer layout, selection (block shapes, dtypes, fp8) and the Blackwell exact-model rules run for real.
"""

from __future__ import annotations

import contextlib
import ctypes
import pathlib
import struct
import sys

import pytest

from karchive.errors import ArgumentError, NoMatchingVariantError
from karchive.format.manifest import Abi, AbiParam
from karchive.format.tensordesc import TensorDescAbi
from karchive.runtime import descriptors as td
from karchive.runtime.device import DeviceInfo
from karchive.runtime.launch._argpack import ParamLayout
from karchive.runtime.select import cubin_runs_on, device_fit

DATA = pathlib.Path(__file__).resolve().parent / "data"


class FakeDtype:
    """A framework dtype as karchive reads it (its name) with the attributes Triton's descriptor reads."""

    def __init__(self, name: str, itemsize: int, floating: bool = True) -> None:
        self.name, self.itemsize, self.is_floating_point = name, itemsize, floating

    def __str__(self) -> str:
        return f"torch.{self.name}"


class FakeTensor:
    """data_ptr / dtype / shape / stride(), as a torch tensor offers them (device 0)."""

    def __init__(self, ptr: int, shape, dtype: FakeDtype, strides=None) -> None:
        self.ptr, self.shape, self.dtype = ptr, tuple(shape), dtype
        self._strides = tuple(strides) if strides is not None else tuple(td._contiguous(shape))

    def data_ptr(self) -> int:
        return self.ptr

    def stride(self):
        return self._strides

    def get_device(self) -> int:
        return 0


FP16 = FakeDtype("float16", 2)
BF16 = FakeDtype("bfloat16", 2)
FP32 = FakeDtype("float32", 4)
FP8 = FakeDtype("float8_e4m3fn", 1)


def tma(convention="triton-3.8", dtype="fp16", block=(64, 64), elem_size=2, elem_type=6, swizzle=3, fp4=False):
    return TensorDescAbi(
        convention,
        "tma",
        dtype,
        len(block),
        tuple(block),
        swizzle=swizzle,
        elem_size=elem_size,
        elem_type=elem_type,
        fp4_padded=fp4,
    )


@pytest.fixture
def no_driver(monkeypatch):
    """encode_tiled recorded instead of called (no driver here); a driver version of 13.2 by default."""
    calls: list[td.EncodeParams] = []

    def fake_encode(p: td.EncodeParams) -> bytes:
        calls.append(p)
        return bytes([len(calls)]) * 128

    monkeypatch.setattr(td, "encode_tiled", fake_encode)
    monkeypatch.setattr(td, "_driver", lambda: 13020)
    td.clear_cache()
    yield calls
    td.clear_cache()


def test_encode_params_follow_tritons_tiled_encoding():
    d = tma()
    p = td.encode_params(d, 0x10000, [256, 128], [128, 1], "zero", False, 13020)
    assert (p.data_type, p.rank, p.address) == (6, 2, 0x10000)
    assert p.global_dim == (128, 256) and p.global_strides == (256,) and p.box_dim == (64, 64)
    assert p.element_strides == (1, 1) and p.swizzle == 3 and p.oob_fill == td.OOB_FILL_NONE
    assert p.l2_promotion == 2 and not p.clear_small_tensor_bit
    # bf16 is 10 on the device side and 9 (CU_TENSOR_MAP_DATA_TYPE_BFLOAT16) on the host side
    assert td.encode_params(tma(elem_type=10), 0, [64, 64], [64, 1], "nan", False, 13020).data_type == 9
    assert td.encode_params(tma(), 0, [64, 64], [64, 1], "nan", False, 13020).oob_fill == td.OOB_FILL_NAN
    # fp4_padded: the map's innermost dimension is doubled
    assert td.encode_params(
        tma(fp4=True, dtype="u8", elem_size=1, elem_type=0), 0, [64, 32], [32, 1], "zero", False, 13020
    ).global_dim == (64, 64)
    # TF32: only under the 3.8 convention
    assert (
        td.encode_params(
            tma(dtype="fp32", elem_size=4, elem_type=7), 0, [64, 64], [64, 1], "zero", True, 13020
        ).data_type
        == 11
    )
    with pytest.raises(ArgumentError, match="round_f32_to_tf32"):
        td.encode_params(
            tma("triton-3.5", dtype="fp32", elem_size=4, elem_type=7), 0, [64, 64], [64, 1], "zero", True, 13020
        )


def test_small_tensor_bit_patch_only_under_3_8_on_old_drivers():
    small = ([128, 64], [64, 1])  # 16 KiB of fp16
    large = ([1024, 1024], [1024, 1])  # 2 MiB
    assert td.encode_params(tma(), 0, *small, "zero", False, 13010).clear_small_tensor_bit
    assert not td.encode_params(tma(), 0, *small, "zero", False, 13020).clear_small_tensor_bit
    assert not td.encode_params(tma(), 0, *large, "zero", False, 13010).clear_small_tensor_bit
    assert not td.encode_params(tma("triton-3.5"), 0, *small, "zero", False, 12080).clear_small_tensor_bit


@pytest.mark.parametrize(
    "shape,strides,block,padding",
    [
        ([256, 128], [128, 1], [64, 64], "zero"),
        ([8, 96, 64], [96 * 64, 64, 1], [2, 32, 64], "nan"),
    ],
)
def test_expansion_matches_the_installed_tritons_launcher(shape, strides, block, padding, no_driver, fake_gpu_driver):
    """Triton's make_tensordesc_arg, with fill_tma_descriptor_tiled recording its arguments, against karchive's
    encode parameters and expansion for the convention of the installed release."""
    triton = pytest.importorskip("triton")
    from triton.backends.nvidia import driver as nvdriver
    from triton.tools.tensor_descriptor import TensorDescriptor as TritonDesc

    from karchive.format.tensordesc import convention_for_triton

    convention = convention_for_triton(triton.__version__)
    if convention is None:
        pytest.skip(f"Triton {triton.__version__} has no recorded convention")
    recorded = []

    def fill(*args):
        recorded.append(args)
        return "MAP"

    fake_gpu_driver.utils.fill_tma_descriptor_tiled = fill  # 3.8+
    fake_gpu_driver.utils.fill_tma_descriptor = fill  # 3.5/3.6
    base = FakeTensor(0x7F0000010000, shape, FP16, strides)
    tdesc = TritonDesc(base, shape, strides, block, padding=padding)
    meta = {"swizzle": 3, "elem_size": 2, "elem_type": 6, "block_size": block, "fp4_padded": False, "is_im2col": False}
    import inspect

    extra = [None] * (len(inspect.signature(nvdriver.make_tensordesc_arg).parameters) - 2)  # 3.8+ take a third
    theirs = nvdriver.make_tensordesc_arg(tdesc, meta, *extra)
    (ptr, swizzle, elem_size, host_type, box, dims, their_strides, their_padding) = recorded[0]
    d = tma(convention, block=tuple(block))
    ours = td.expand("a", d, tdesc)
    (p,) = no_driver
    assert p.address == ptr and p.swizzle == swizzle and p.data_type == host_type
    assert p.box_dim == tuple(reversed(box)) and p.global_dim == tuple(reversed(dims))
    assert p.global_strides == tuple(reversed([s * elem_size for s in their_strides[:-1]]))
    assert p.oob_fill == their_padding
    assert theirs[0] == "MAP" and ours[1:] == list(theirs[1:])  # shape and strides passed after the map
    # the decomposed expansion (no TMA metadata) against Triton's, value for value
    dec = TensorDescAbi(convention, "decomposed", "fp16", len(shape), tuple(block))
    their_dec = nvdriver.make_tensordesc_arg(tdesc, None, *extra)
    ours_dec = td.expand("a", dec, tdesc)
    assert their_dec[0] is base and ours_dec[0] == base.ptr
    assert ours_dec[1:] == [int(x) for x in their_dec[1:]] and len(ours_dec) == len(dec.slots)


def test_karchive_descriptors_from_arrays_and_raw_addresses(no_driver):
    class CAI:
        __cuda_array_interface__ = {
            "data": (0x20000, False),
            "shape": (64, 32),
            "strides": (128, 4),
            "typestr": "<f4",
            "version": 3,
        }

    d = td.TensorDescriptor(CAI(), block_shape=[16, 32])
    assert d.shape == (64, 32) and d.strides == (32, 1) and d.ptr == 0x20000
    raw = td.TensorDescriptor(0x40000, [64, 64], shape=[128, 64], strides=[64, 1], dtype="float16")
    out = td.expand("a", tma(), raw)
    assert out[1:] == [128, 64, 64, 1] and len(out[0]) == 128
    with pytest.raises(ArgumentError, match="raw address needs"):
        td.TensorDescriptor(0x40000, [64, 64])
    t = td.TensorDescriptor(FakeTensor(0x50000, [128, 64], FP16), block_shape=None)
    assert t.block_shape is None and td.expand("a", tma(), t)[1:] == [128, 64, 64, 1]


def test_checks_before_launch(no_driver):
    d = tma()
    good = FakeTensor(0x10000, [128, 64], FP16)
    with pytest.raises(ArgumentError, match="not 16-byte aligned") as err:
        td.expand("a_desc", d, td.TensorDescriptor(FakeTensor(0x10008, [128, 64], FP16), [64, 64]))
    assert err.value.param == "a_desc"
    with pytest.raises(ArgumentError, match="not multiples of 16 bytes"):
        td.expand("a", d, td.TensorDescriptor(FakeTensor(0x10000, [128, 60], FP16, [60, 1]), [64, 64]))
    with pytest.raises(ArgumentError, match="last dimension must be contiguous"):
        td.expand("a", d, td.TensorDescriptor(FakeTensor(0x10000, [128, 64], FP16, [1, 128]), [64, 64]))
    with pytest.raises(ArgumentError, match="dtype bf16, the variant takes fp16"):
        td.expand("a", d, td.TensorDescriptor(FakeTensor(0x10000, [128, 64], BF16), [64, 64]))
    with pytest.raises(ArgumentError, match=r"block_shape is \[32, 64\], the variant was compiled for \[64, 64\]"):
        td.expand("a", d, td.TensorDescriptor(good, [32, 64]))
    # an autotuned kernel's dispatcher takes the variant's block instead
    assert len(td.expand("a", d, td.TensorDescriptor(good, [32, 64]), block_from_variant=True)) == 5
    with pytest.raises(ArgumentError, match="rank 3"):
        td.expand("a", d, td.TensorDescriptor(FakeTensor(0x10000, [2, 128, 64], FP16), [1, 64, 64]))
    host = FakeTensor(0x10000, [128, 64], FP16)
    host.get_device = lambda: -1  # type: ignore[method-assign]
    with pytest.raises(ArgumentError, match="host memory"):
        td.expand("a", d, td.TensorDescriptor(host, [64, 64]))
    with pytest.raises(ArgumentError, match="expected a tensor descriptor"):
        td.expand("a", d, good)
    im2col = TensorDescAbi("triton-3.8", "tma", "fp16", 4, (32, 64), swizzle=3, elem_size=2, elem_type=6, im2col=True)
    with pytest.raises(ArgumentError, match="im2col"):
        td.expand("a", im2col, td.TensorDescriptor(FakeTensor(0x10000, [1, 8, 8, 64], FP16), None))
    # TF32 rounding under triton-3.5 (no flag to pass, no TF32 map): refused in both modes, not silently dropped
    f32 = td.TensorDescriptor(FakeTensor(0x10000, [128, 64], FP32), [64, 64], round_f32_to_tf32=True)
    for old in (
        tma("triton-3.5", dtype="fp32", elem_size=4, elem_type=7),
        TensorDescAbi("triton-3.5", "decomposed", "fp32", 2, (64, 64)),
    ):
        with pytest.raises(ArgumentError, match="round_f32_to_tf32") as err:
            td.expand("f", old, f32)
        assert err.value.param == "f"
    assert td.expand("f", TensorDescAbi("triton-3.8", "decomposed", "fp32", 2, (64, 64)), f32)[6] == 1


def test_encoded_maps_are_cached_and_a_moved_tensor_is_reencoded(no_driver):
    d = tma()
    t = FakeTensor(0x10000, [128, 64], FP16)
    desc = td.TensorDescriptor(t, [64, 64])
    first = td.expand("a", d, desc)
    for _ in range(5):
        assert td.expand("a", d, desc) is first
    assert len(no_driver) == 1
    # the same tensor seen through another descriptor object: still no re-encoding
    td.expand("a", d, td.TensorDescriptor(t, [64, 64]))
    assert len(no_driver) == 1
    t.ptr = 0x20000  # the storage moved: the address is read at each launch, so the map follows it
    moved = td.expand("a", d, desc)
    assert len(no_driver) == 2 and no_driver[-1].address == 0x20000 and moved[0] != first[0]


def _desc_abi(descs: list[TensorDescAbi], scalars=("i32",)) -> Abi:
    params = [
        AbiParam(f"d{i}", "tensordesc", f"tensordesc<fp16[{d.block_shape[0]}, {d.block_shape[1]}]>", i, d.size, d)
        for i, d in enumerate(descs)
    ]
    params += [AbiParam(f"s{j}", "scalar", t, len(descs) + j, 4) for j, t in enumerate(scalars)]
    params += [AbiParam("global_scratch", "global_scratch", None, None, 8)]
    return Abi(
        version=2,
        entry="k",
        binary_format="cubin",
        binary_arch="sm_90a",
        params=tuple(params),
        shared=0,
        num_warps=4,
        warp_size=32,
        num_ctas=1,
        cluster_dims=(1, 1, 1),
        cooperative_grid=False,
        pdl=False,
        global_scratch_size=0,
        global_scratch_align=1,
        profile_scratch_size=0,
        profile_scratch_align=1,
    )


def test_parameter_buffer_places_maps_64_byte_aligned(no_driver):
    """Two descriptors and an int: 2 x (map + 2 x i32 + 2 x i64) + i32 + scratch, each binary parameter at
    its C offset, the maps 64-byte aligned in memory, one kernelParams pointer per binary parameter."""
    d = tma()
    layout = ParamLayout(_desc_abi([d, d]))
    assert layout.n_values == 11 and layout.offsets[:3] == (0, 192, 344)
    assert ctypes.addressof(layout.buffer) % 64 == 0
    t = td.TensorDescriptor(FakeTensor(0x10000, [128, 64], FP16), [64, 64])
    u = td.TensorDescriptor(FakeTensor(0x20000, [256, 64], FP16), [64, 64])
    values = td.expand("d0", d, t) + td.expand("d1", d, u) + [7]
    layout.pack(values)
    raw = bytes((ctypes.c_char * layout.size).from_address(ctypes.addressof(layout.buffer)))
    assert raw[0:128] == values[0] and raw[192:320] == values[5]
    assert struct.unpack_from("<iiqq", raw, 128) == (128, 64, 64, 1)
    assert struct.unpack_from("<iiqq", raw, 320) == (256, 64, 64, 1) and struct.unpack_from("<i", raw, 344) == (7,)
    ptrs = [layout.pointers[i] for i in range(12)]
    base = ctypes.addressof(layout.buffer)
    assert [p - base for p in ptrs] == [0, 128, 132, 136, 144, 192, 320, 324, 328, 336, 344, 352]


def test_selection_checks_descriptors_and_autotuned_dispatchers_take_the_variant_block(no_driver):
    from karchive.format.manifest import Param
    from karchive.runtime.select import param_reason

    p = Param("a_desc", "tensordesc<fp16[64, 64]>")
    ok = td.TensorDescriptor(FakeTensor(0x10000, [128, 64], FP16), [64, 64])
    assert param_reason(p, ok, None) is None
    wrong_block = td.TensorDescriptor(FakeTensor(0x10000, [128, 64], FP16), [128, 64])
    assert "compiled for [64, 64]" in param_reason(p, wrong_block, None)
    assert param_reason(p, wrong_block, None, block_from_variant=True) is None
    assert "dtype fp8e4nv" in param_reason(p, td.TensorDescriptor(FakeTensor(0x10000, [128, 64], FP8), [64, 64]), None)
    assert "expects a tensor descriptor" in param_reason(p, 0x10000, None)
    # fp8 pointers: the signature's element type is checked against the framework's dtype
    f8 = Param("x", "*fp8e4nv")
    assert param_reason(f8, object(), (0x10000, FP8, 0)) is None
    assert "has dtype fp16, this variant takes *fp8e4nv" in param_reason(f8, object(), (0x10000, FP16, 0))
    assert param_reason(Param("y", "*fp8e5"), object(), (0x10000, FakeDtype("float8_e5m2", 1), 0)) is None
    assert param_reason(Param("y", "*fp8e4b15"), object(), (0, "float8_e4m3b11fnuz", 0)) is None
    assert param_reason(Param("y", "*fp4"), object(), (0, FakeDtype("float4_e2m1fn_x2", 1), 0)) is None


@pytest.mark.parametrize(
    "binary_arch,cc,ok",
    [
        ("sm_100a", (10, 0), True),
        ("sm_100a", (10, 3), False),
        ("sm_103a", (10, 3), True),
        ("sm_103a", (10, 0), False),
        ("sm_120a", (12, 0), True),
        ("sm_120a", (12, 1), False),
        ("sm_100a", (12, 0), False),
        ("sm_90a", (10, 0), False),
        ("sm_100f", (10, 3), True),
        ("sm_103f", (10, 0), False),
        ("sm_100", (10, 3), True),
        ("sm_100", (12, 0), False),
        ("sm_120", (12, 1), True),
    ],
)
def test_blackwell_cubins_load_only_where_built_for(binary_arch, cc, ok):
    assert cubin_runs_on(binary_arch, cc) is ok


def test_rejection_list_explains_the_exact_model_rule():
    from karchive.format.manifest import FileRef, Target, Variant

    ref = FileRef("x", 1, "0" * 64)
    abi = _desc_abi([tma()])
    import dataclasses

    v = Variant(
        kernel="k",
        key="a" * 64,
        target=Target("cuda", "100", 32),
        params=(),
        options={},
        abi=dataclasses.replace(abi, binary_arch="sm_100a"),
        binary=ref,
        metadata=ref,
    )
    why = device_fit(v, DeviceInfo("cuda", 0, "103", 32, cc=(10, 3)), allow_ptx=False)
    assert isinstance(why, str) and "cubin is sm_100a, the device is sm_103" in why
    assert "runs only on exactly sm_100" in why and "not even sm_10x siblings" in why
    fit = device_fit(v, DeviceInfo("cuda", 0, "100", 32, cc=(10, 0)), allow_ptx=False)
    assert not isinstance(fit, str) and fit.mode == "binary"


def test_a_kernel_of_descriptors_selects_and_refuses_through_the_archive(tmp_path, no_driver):
    """A real archive (cuda:90 and cuda:100 builds of the copy kernel) opened with no GPU: selection per
    device model and the call's descriptors, with every rejection explained."""
    pytest.importorskip("triton")
    sys.path.insert(0, str(DATA))
    import karchive
    from karchive.cli.main import main

    out = tmp_path / "tma.karc"
    code = main(
        [
            "compile",
            str(DATA / "tma_kernels.py"),
            "-n",
            "desc_copy",
            "-s",
            "tensordesc<fp16[64, 64]>, tensordesc<fp16[64, 64]>, 64, 64",
            "-t",
            "cuda:90",
            "-t",
            "cuda:100",
            "-o",
            str(out),
        ]
    )
    assert code == 0
    k = karchive.open(str(out)).kernel("desc_copy")
    a = td.TensorDescriptor(FakeTensor(0x10000, [128, 64], FP16), [64, 64])
    b = td.TensorDescriptor(FakeTensor(0x20000, [128, 64], FP16), [64, 64])
    h100 = DeviceInfo("cuda", 0, "90", 32, cc=(9, 0))
    b200 = DeviceInfo("cuda", 0, "100", 32, cc=(10, 0))
    b300 = DeviceInfo("cuda", 0, "103", 32, cc=(10, 3))
    assert k.select(a, b, BLOCK_M=64, BLOCK_N=64, device=h100).abi.binary_arch == "sm_90a"
    assert k.select(a, b, BLOCK_M=64, BLOCK_N=64, device=b200).abi.binary_arch == "sm_100a"
    with pytest.raises(NoMatchingVariantError) as err:
        k.select(a, b, BLOCK_M=64, BLOCK_N=64, device=b300)
    assert "runs only on exactly sm_100" in str(err.value) and "sm_90a" in str(err.value)
    small = td.TensorDescriptor(FakeTensor(0x20000, [128, 64], FP16), [32, 64])
    with pytest.raises(NoMatchingVariantError, match=r"out_desc has block_shape \[32, 64\]"):
        k.select(a, small, BLOCK_M=64, BLOCK_N=64, device=h100)


@contextlib.contextmanager
def desc_copy_kernel(monkeypatch, tmp_path, path: str):
    """``desc_copy`` (two fp16 [64, 64] descriptors) built for cuda:90 and opened on ``path`` over the recording
    driver stand-in (runtime_support.FakeCuda): (kernel, recorder)."""
    pytest.importorskip("triton")
    from runtime_support import fake_cuda

    import karchive
    from karchive.cli.main import main
    from karchive.producer.compile.tensordesc_abi import binary_param_sizes
    from karchive.runtime import launch_path

    if path == "extension" and launch_path.extension() is None:
        pytest.skip(f"the compiled launcher is not built here: {launch_path.status().detail}")
    out = tmp_path / "tma.karc"
    assert (
        main(
            [
                "compile",
                str(DATA / "tma_kernels.py"),
                "-n",
                "desc_copy",
                "-s",
                "tensordesc<fp16[64, 64]>, tensordesc<fp16[64, 64]>, 64, 64",
                "-t",
                "cuda:90",
                "-o",
                str(out),
            ]
        )
        == 0
    )
    with fake_cuda(monkeypatch, path) as (rec, _backend):
        arc = karchive.open(str(out))
        (v,) = arc.variants("desc_copy")
        user = [p for p in v.abi.params if p.kind == "tensordesc"]
        rec.sizes[arc.reader.read(v.binary.path)] = binary_param_sizes(user) + [8] * (len(v.abi.params) - len(user))
        k = arc.kernel("desc_copy")
        assert k.launch_path == path
        yield k, rec


@pytest.mark.parametrize("path", ["python", "extension"])
def test_descriptor_launch_packs_the_recorded_expansion_on_both_paths(path, monkeypatch, tmp_path, no_driver):
    """kernel[grid](desc, desc) through the recording driver stand-in (runtime_support.FakeCuda): the bytes
    behind each kernelParams pointer are the maps, then shape (i32) and strides (i64), then the scratch
    pointers; a second launch re-encodes nothing; a misaligned descriptor launches nothing."""
    with desc_copy_kernel(monkeypatch, tmp_path, path) as (k, rec):
        a = td.TensorDescriptor(FakeTensor(0x10000, [128, 64], FP16), [64, 64])
        b = td.TensorDescriptor(FakeTensor(0x30000, [256, 64], FP16), [64, 64])
        k[(2, 1)](a, b, BLOCK_M=64, BLOCK_N=64)
        k[(2, 1)](a, b, BLOCK_M=64, BLOCK_N=64)
        assert len(no_driver) == 2  # two maps encoded once each, reused by the second launch
        (first, second) = rec.launches()
        assert first.params == second.params and first.grid == (2, 1, 1) and first.block == (128, 1, 1)
        p = first.params
        assert p[0] == bytes([1]) * 128 and p[5] == bytes([2]) * 128
        assert [struct.unpack("<i", x)[0] for x in (p[1], p[2], p[6], p[7])] == [128, 64, 256, 64]
        assert [struct.unpack("<q", x)[0] for x in (p[3], p[4], p[8], p[9])] == [64, 1, 64, 1]
        assert no_driver[0].address == 0x10000 and no_driver[1].address == 0x30000
        bad = td.TensorDescriptor(FakeTensor(0x30008, [256, 64], FP16), [64, 64])
        with pytest.raises(ArgumentError, match="desc_copy: parameter 'out_desc'.*not 16-byte aligned") as err:
            k[(2, 1)](a, bad, BLOCK_M=64, BLOCK_N=64)
        assert err.value.param == "out_desc" and len(rec.launches()) == 2


@pytest.mark.parametrize("path", ["python", "extension"])
def test_autotuned_descriptor_kernel_takes_the_block_of_the_chosen_config(
    path, monkeypatch, tmp_path, no_driver, triton_cache_dir, fake_gpu_driver
):
    """An autotuned matmul whose configs set descriptor block shapes in a pre_hook (Triton's pattern) is
    captured; the archive's dispatcher launches the recorded winner with call-site descriptors whose block
    shape is a placeholder, encoding each map with the winner's block (no hook run, none needed)."""
    pytest.importorskip("triton")
    import triton.language as tl
    from capture_fakes import MockPtr, fresh
    from runtime_support import fake_cuda
    from triton.tools.tensor_descriptor import TensorDescriptor as TritonDesc

    import karchive
    from karchive.producer.compile.tensordesc_abi import binary_param_sizes
    from karchive.runtime import launch_path

    if path == "extension" and launch_path.extension() is None:
        pytest.skip(f"the compiled launcher is not built here: {launch_path.status().detail}")
    sys.path.insert(0, str(DATA))
    import tma_kernels

    fresh(tma_kernels.desc_matmul_tuned)
    fake_gpu_driver._timings = iter([2.0, 1.0])  # the second config (BLOCK_M=128) wins
    with karchive.capture("tuned", version="1.0") as cap:
        descs = [TritonDesc(MockPtr(tl.float16), [256, 128], [128, 1], [1, 1]) for _ in range(2)]
        c = TritonDesc(MockPtr(tl.float16), [256, 256], [256, 1], [1, 1])
        tma_kernels.desc_matmul_tuned[lambda m: (4,)](descs[0], descs[1], c, 256, 256, 128)
    assert any("take each variant's compiled block shape" in w for w in cap.warnings)
    out = tmp_path / "tuned.karc"
    cap.save(out)
    with fake_cuda(monkeypatch, path) as (rec, _backend):
        arc = karchive.open(str(out))
        for v in arc.variants("desc_matmul_tuned"):
            user = [p for p in v.abi.params if p.kind != "global_scratch" and p.kind != "profile_scratch"]
            rec.sizes[arc.reader.read(v.binary.path)] = binary_param_sizes(user) + [8] * (len(v.abi.params) - len(user))
        k = arc.kernel("desc_matmul_tuned")
        a = td.TensorDescriptor(FakeTensor(0x10000, [256, 128], FP16), [1, 1])  # placeholder blocks
        b = td.TensorDescriptor(FakeTensor(0x20000, [256, 128], FP16), None)
        cc = td.TensorDescriptor(FakeTensor(0x40000, [256, 256], FP16), [1, 1])
        chosen = k.select(a, b, cc, 256, 256, 128)
        assert chosen.constexprs["BLOCK_M"] == 128
        k[lambda meta: (4,)](a, b, cc, 256, 256, 128)
        (launch,) = rec.launches()
        assert launch.block == (256, 1, 1)  # num_warps=8 of the winning config
        boxes = {p.address: p.box_dim for p in no_driver}
        assert boxes == {0x10000: (64, 128), 0x20000: (64, 64), 0x40000: (64, 128)}


def test_archive_tools_and_bridges_handle_descriptor_kernels(tmp_path, capsys):
    """inspect / verify / export-triton-cache / rebuild --check work on a descriptor archive; the bridges see
    descriptor parameters as such (the torch bridge takes their tensors; the JAX bridge refuses them with a
    karchive error, tests/test_interop_descriptors.py) instead of passing them as ints."""
    pytest.importorskip("triton")
    import karchive
    from karchive.cli.main import main
    from karchive.errors import InteropError
    from karchive.interop._roles import kernel_roles

    out = tmp_path / "tma.karc"
    assert (
        main(
            [
                "compile",
                str(DATA / "tma_kernels.py"),
                "-n",
                "desc_copy",
                "-s",
                "tensordesc<fp16[64, 64]>, tensordesc<fp16[64, 64]>, 64, 64",
                "-t",
                "cuda:90",
                "-o",
                str(out),
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert main(["inspect", str(out)]) == 0
    assert "desc_copy" in capsys.readouterr().out
    assert main(["verify", str(out)]) == 0
    assert main(["export-triton-cache", str(out), "--cache-dir", str(tmp_path / "cache")]) == 0
    assert main(["rebuild", str(out), "--check"]) == 0, capsys.readouterr()
    assert {r.kind for r in kernel_roles(karchive.open(str(out)).kernel("desc_copy"))} == {"tensordesc", "constexpr"}
    from karchive.interop._jaxplan import refuse_tma_descriptors

    with pytest.raises(InteropError, match="host tensor descriptor"):  # a TMA variant (cuda:90)
        refuse_tma_descriptors("desc_copy", karchive.open(str(out)).variants("desc_copy")[0])


def test_a_descriptor_over_another_gpus_memory_is_refused(no_driver):
    t = FakeTensor(0x10000, [128, 64], FP16)
    t.get_device = lambda: 1  # type: ignore[method-assign]
    desc = td.TensorDescriptor(t, [64, 64])
    assert len(td.expand("a", tma(), desc, device=1)) == 5
    with pytest.raises(ArgumentError, match="on device 1, the launch on device 0"):
        td.expand("a", tma(), desc, device=0)


def test_bound_launchers_repack_descriptors_and_check_the_pointers_after_them(monkeypatch, tmp_path, no_driver):
    """bind() / bound() / bound(*values) with a descriptor before a ``:16`` pointer and an int: the pointer's
    alignment is checked at its own position after the descriptor's five values."""
    pytest.importorskip("triton")
    from runtime_support import fake_cuda

    import karchive
    from karchive.cli.main import main
    from karchive.producer.compile.tensordesc_abi import binary_param_sizes

    out = tmp_path / "tp.karc"
    assert (
        main(
            [
                "compile",
                str(DATA / "tma_kernels.py"),
                "-n",
                "desc_to_ptr",
                "-s",
                "tensordesc<fp16[64, 64]>, *fp16:16, i32, 64, 64",
                "-t",
                "cuda:90",
                "-o",
                str(out),
            ]
        )
        == 0
    )
    with fake_cuda(monkeypatch, "python") as (rec, _backend):
        arc = karchive.open(str(out))
        (v,) = arc.variants("desc_to_ptr")
        user = [p for p in v.abi.params if p.kind in ("tensordesc", "pointer", "scalar")]
        rec.sizes[arc.reader.read(v.binary.path)] = binary_param_sizes(user) + [8] * (len(v.abi.params) - len(user))
        k = arc.kernel("desc_to_ptr")
        a = td.TensorDescriptor(FakeTensor(0x10000, [128, 64], FP16), [64, 64])
        bound = k.bind((2,), a, FakeTensor(0x80000, [128, 64], FP16), 64, BLOCK_M=64, BLOCK_N=64)
        bound()
        b = td.TensorDescriptor(FakeTensor(0x20000, [128, 64], FP16), [64, 64])
        bound(b, 0x90000, 64)
        first, second = rec.launches()
        assert struct.unpack("<Q", first.params[5])[0] == 0x80000 and struct.unpack("<i", first.params[6])[0] == 64
        assert struct.unpack("<Q", second.params[5])[0] == 0x90000 and no_driver[-1].address == 0x20000
        with pytest.raises(ArgumentError, match="out_ptr address 0x90008 is not 16-byte aligned"):
            bound(b, 0x90008, 64)
        with pytest.raises(ArgumentError, match="is a tensor descriptor"):
            bound.set("in_desc", b)
        assert len(rec.launches()) == 2


def test_one_descriptor_alternating_between_two_variants_gets_each_variants_map(no_driver):
    """The per-descriptor memo of the last expansion is keyed by the variant's record: an autotuned call site
    whose descriptor feeds two configs in turn gets each config's map, never the other's."""
    small, large = tma(block=(64, 64)), tma(block=(128, 64))
    desc = td.TensorDescriptor(FakeTensor(0x10000, [256, 64], FP16), None)
    outs = [td.expand("a", rec, desc) for rec in (small, large, small, large)]
    assert outs[0] is outs[2] and outs[1] is outs[3] and outs[0][0] != outs[1][0]
    assert [p.box_dim for p in no_driver] == [(64, 64), (64, 128)]


def test_the_encode_call_converts_its_arguments_for_the_installed_cuda_python():
    """cuTensorMapEncodeTiled through the real binding: here there is no driver, so the call must get as far
    as loading it (its arguments converted: the binding takes cuuint64_t/cuuint32_t lists, not ints), and
    where a driver exists (the GPU machine) it returns a 128-byte map."""
    pytest.importorskip("cuda.bindings.driver")
    p = td.encode_params(tma(), 0x7F0000010000, [256, 128], [128, 1], "zero", False, 13020)
    try:
        out = td.encode_tiled(p)
    except (TypeError, ValueError, AttributeError):
        raise
    except Exception as exc:  # no driver library or no context on this machine
        assert "cuda" in str(exc).lower() or "CUDA" in type(exc).__name__ or isinstance(exc, td.LaunchError), exc
    else:
        assert len(out) == 128


# ---- every Triton release venv (tools/tritons.sh) against the convention karchive assigns to it ----------
#: The convention each release minor must record (what its launcher was read to do; spec/FORMAT.md §6.2.1).
RELEASE_CONVENTIONS = {
    "3.5": "triton-3.5",
    "3.6": "triton-3.5",
    "3.7": "triton-3.8",
    "3.8": "triton-3.8",
    "3.9": "triton-3.8",
}


def _release_venv(minor: str):
    from triton_releases import venvs

    found = {v.minor: v for v in venvs()}
    if minor not in found:
        pytest.skip(f"no Triton {minor} venv: bash tools/tritons.sh {minor} (or KARCHIVE_TRITON_VENVS)")
    return found[minor]


def test_release_conventions_table_is_the_one_karchive_uses():
    from karchive.format.tensordesc import CONVENTIONS, convention_for_triton

    assert {m: convention_for_triton(f"{m}.1") for m in RELEASE_CONVENTIONS} == RELEASE_CONVENTIONS
    assert sorted(m for ms in CONVENTIONS.values() for m in ms) == sorted(RELEASE_CONVENTIONS)
    assert convention_for_triton("3.10.0") is None and convention_for_triton("3.4.0") is None


@pytest.mark.parametrize("minor", sorted(RELEASE_CONVENTIONS))
def test_each_release_launcher_expands_descriptors_as_karchive_does(minor):
    """The release's own ``make_tensordesc_arg`` (its interpreter, this checkout's karchive) against karchive's
    ``expand`` under the convention karchive gives that release: the ``cuTensorMapEncodeTiled`` arguments its C
    encoder would pass (fp16, bf16 host type 9, NaN padding, fp4_padded doubling, TF32 type 11), the values
    after the map (3.5/3.6 pass the fp4-doubled shape on, 3.7+ the shape as given), the decomposed expansion
    value for value (one i1 flag, or nan + round_f32_to_tf32), and the release's ``expand_signature`` slots
    where it is reachable (3.7+). TF32 descriptors under ``triton-3.5`` are refused, TMA and decomposed."""
    venv = _release_venv(minor)
    import json
    import os
    import subprocess

    root = DATA.parent.parent
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRITON_", "PYTHON"))}
    env["PYTHONPATH"] = str(root)  # this checkout's karchive, ahead of the venv's own install
    proc = subprocess.run(
        [str(venv.python), str(DATA / "tensordesc_launcher_probe.py")],
        capture_output=True,
        text=True,
        env=env,
        cwd=root,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["karchive"].startswith(str(root / "karchive")), out["karchive"]
    assert out["triton"] == venv.version and out["convention"] == RELEASE_CONVENTIONS[minor]
    cases = out["cases"]
    assert len(cases) == 7
    new = out["convention"] != "triton-3.5"
    for name, case in cases.items():
        if case["their_slots"] is not None:
            assert case["their_slots"] == case["slots"], name
        else:
            assert not new, f"{name}: Triton {minor} should expose expand_signature"
        if "ours_refused" in case:
            assert not new and "tf32" in name and case["ours_refused"], name
            continue
        theirs, ours = case["theirs"], case["ours"]
        if case["mode"] == "decomposed":
            assert ours == theirs and len(ours) == len(case["slots"]), name
            assert case["slots"].count("i1") == (2 if new else 1), name
            continue
        assert ours["encode"] == theirs["encode"], name
        assert ours["after_map"] == theirs["after_map"] and theirs["map"] == ours["map"] == "MAP", name
        rank = ours["encode"]["rank"]
        assert ours["fixed"] == [0, 2, [1] * rank], name  # INTERLEAVE_NONE, L2_128B, element strides 1 (the C's)
    fp4 = cases["fp4-padded"]
    assert fp4["theirs"]["encode"]["global_dim"] == [64, 64]  # the map: innermost dimension doubled, every release
    assert fp4["theirs"]["after_map"][:2] == ([64, 32] if new else [64, 64])
    if new:
        assert cases["fp32-tf32"]["theirs"]["encode"]["data_type"] == td.TMA_TF32
        assert cases["fp32-tf32-decomposed"]["theirs"][-5] == 1  # the round_f32_to_tf32 flag


_PATCH_RE = (
    r"if \(driver_version <= (\d+)\) \{.*?if \(max_byte_index \+ 1 < (\d+) \* 1024\) \{.*?"
    r"desc_u64\[1\] &= ~\(1llu << (\d+)\);"
)


@pytest.mark.parametrize("minor", sorted(RELEASE_CONVENTIONS))
def test_small_tensor_patch_is_in_the_release_encoder_exactly_where_the_convention_has_it(minor):
    """The bit-21 patch lives in the release's C encoder (``driver.c``), which cannot run here: its source must
    carry it (with karchive's driver bound, size limit and bit) for ``triton-3.8`` releases and not for
    ``triton-3.5`` ones, and the tiled encoder must pass the fixed arguments karchive passes."""
    import re

    venv = _release_venv(minor)
    (src,) = venv.python.parent.parent.glob("lib/python*/site-packages/triton/backends/nvidia/driver.c")
    text = src.read_text()
    m = re.search(_PATCH_RE, text, re.S)
    if RELEASE_CONVENTIONS[minor] == "triton-3.5":
        assert m is None and "max_byte_index" not in text
        return
    assert m is not None, f"Triton {minor}'s driver.c has no small-tensor patch"
    assert int(m.group(1)) == td._DRIVER_PATCHED
    assert int(m.group(2)) * 1024 == td._SMALL_TENSOR_BYTES and 1 << int(m.group(3)) == td._SMALL_TENSOR_BIT
    tiled = text[text.index("fillTMADescriptorTiled(PyObject") : m.end()]
    assert "bytes_stride = i == 0 ? elemSize : stridesLL[i - 1]" in tiled  # innermost stride = element size
    assert "CU_TENSOR_MAP_INTERLEAVE_NONE" in tiled and "CU_TENSOR_MAP_L2_PROMOTION_L2_128B" in tiled
    assert "elementStrides[5] = {1, 1, 1, 1, 1}" in tiled


def test_the_call_block_is_the_signatures_and_the_map_box_the_abis(no_driver):
    """A 128-column fp16 store is two 64-column TMA boxes under the 128-byte swizzle: Triton's metadata (the
    ABI) records the box [128, 64] while the signature, and so the caller's descriptor, says [128, 128]. The
    launch checks the call against the signature's block and encodes the map with the ABI's box (H100 run of
    tests/gpu/test_tensordesc_gpu.py, persistent matmul's C descriptor)."""
    box = tma(block=(128, 64))
    c = td.TensorDescriptor(FakeTensor(0x20000, [256, 256], FP16), [128, 128])
    out = td.expand("c_desc", box, c, block=(128, 128))
    assert isinstance(out[0], (bytes, bytearray)) and out[1:] == [256, 256, 256, 1]
    with pytest.raises(ArgumentError, match=r"block_shape is \[128, 128\], the variant was compiled for \[128, 64\]"):
        td.expand("c_desc", box, td.TensorDescriptor(FakeTensor(0x20000, [256, 256], FP16), [128, 128]))
    with pytest.raises(ArgumentError, match=r"block_shape is \[128, 64\], the variant was compiled for \[128, 128\]"):
        td.expand(
            "c_desc", box, td.TensorDescriptor(FakeTensor(0x20000, [256, 256], FP16), [128, 64]), block=(128, 128)
        )


@pytest.mark.parametrize("path", ["python", "extension"])
def test_steady_state_descriptor_launches_reuse_the_map_reencode_moved_storage_and_refuse_wrong_blocks(
    path, monkeypatch, tmp_path, no_driver
):
    """Issue 21: the compiled path launches descriptor kernels from C (the expansion's packed bytes copied into
    its buffer, no Python pack or binding launch); both paths reuse the map while the descriptor and its
    address stay, re-encode when the tensor's storage moved, and refuse a wrong block or dtype before launch
    with the same error."""
    pytest.importorskip("triton")
    from runtime_support import fake_cuda

    import karchive
    from karchive.cli.main import main
    from karchive.producer.compile.tensordesc_abi import binary_param_sizes
    from karchive.runtime import launch_path

    if path == "extension" and launch_path.extension() is None:
        pytest.skip(f"the compiled launcher is not built here: {launch_path.status().detail}")
    out = tmp_path / "tma.karc"
    assert (
        main(
            [
                "compile",
                str(DATA / "tma_kernels.py"),
                "-n",
                "desc_copy",
                "-s",
                "tensordesc<fp16[64, 64]>, tensordesc<fp16[64, 64]>, 64, 64",
                "-t",
                "cuda:90",
                "-o",
                str(out),
            ]
        )
        == 0
    )
    with fake_cuda(monkeypatch, path) as (rec, backend):
        through_binding: list[tuple] = []
        binding_launch = type(backend).launch

        def spy(self, *args):
            through_binding.append(args)
            return binding_launch(self, *args)

        monkeypatch.setattr(type(backend), "launch", spy)
        backend.make_current(0)  # (no first-launch retry in the device's context, which goes through the binding)
        arc = karchive.open(str(out))
        (v,) = arc.variants("desc_copy")
        user = [p for p in v.abi.params if p.kind == "tensordesc"]
        rec.sizes[arc.reader.read(v.binary.path)] = binary_param_sizes(user) + [8] * (len(v.abi.params) - len(user))
        k = arc.kernel("desc_copy")
        src = FakeTensor(0x10000, [128, 64], FP16)
        a = td.TensorDescriptor(src, [64, 64])
        b = td.TensorDescriptor(FakeTensor(0x30000, [256, 64], FP16), [64, 64])
        from karchive.runtime.launch import _record

        expansions: list[object] = []
        expand = _record.expand

        def counted(name, d, value, *rest):
            expansions.append(value)
            return expand(name, d, value, *rest)

        monkeypatch.setattr(_record, "expand", counted)
        k[(2, 1)](a, b, BLOCK_M=64, BLOCK_N=64)
        assert expansions == [a, b]
        for _ in range(2):
            k[(2, 1)](a, b, BLOCK_M=64, BLOCK_N=64)
        assert len(no_driver) == 2  # identity hit: encoded once each
        # the compiled path's memo (same object, same address) does not even ask Python; the Python path's is
        # descriptors.expand's own
        assert len(expansions) == (2 if path == "extension" else 6)
        first, *rest = rec.launches()
        assert all(r.params == first.params for r in rest) and first.params[0] == bytes([1]) * 128
        src.ptr = 0x50000  # the storage moved under the same descriptor object: a new map, this launch
        k[(2, 1)](a, b, BLOCK_M=64, BLOCK_N=64)
        assert len(no_driver) == 3 and no_driver[2].address == 0x50000
        # only the moved one misses the compiled path's memo
        assert expansions == [a, b, a] if path == "extension" else expansions[-2:] == [a, b]
        moved = rec.launches()[-1].params
        assert moved[0] == bytes([3]) * 128 and moved[5] == first.params[5] and moved[1:5] == first.params[1:5]
        src.ptr = 0x10000  # back again: the first map (cached by address), nothing encoded
        k[(2, 1)](a, b, BLOCK_M=64, BLOCK_N=64)
        assert len(no_driver) == 3 and rec.launches()[-1].params == first.params
        n = len(rec.launches())
        wide = td.TensorDescriptor(FakeTensor(0x30000, [256, 64], FP16), [32, 64])
        with pytest.raises(
            ArgumentError,
            match=r"^tma_kernels:desc_copy: parameter 'out_desc' \(tensordesc<fp16\[64, 64\]>\): "
            r"the descriptor's block_shape is \[32, 64\], the variant was "
            r"compiled for \[64, 64\]$",
        ) as err:
            k[(2, 1)](a, wide, BLOCK_M=64, BLOCK_N=64)
        assert err.value.param == "out_desc" and err.value.kernel == "tma_kernels:desc_copy"
        fp32 = td.TensorDescriptor(FakeTensor(0x30000, [256, 64], FP32), [64, 64])
        with pytest.raises(
            ArgumentError,
            match=r"^tma_kernels:desc_copy: parameter 'in_desc'.*dtype fp32, the variant takes "
            r"fp16$",
        ):
            k[(2, 1)](fp32, b, BLOCK_M=64, BLOCK_N=64)
        assert len(rec.launches()) == n  # refused before anything reached the driver
        # the memo holds no descriptor alive, and a new descriptor where a dead one was is checked afresh
        import gc
        import weakref

        gone = td.TensorDescriptor(FakeTensor(0x70000, [256, 64], FP16), [64, 64])
        k[(2, 1)](a, gone, BLOCK_M=64, BLOCK_N=64)
        ref = weakref.ref(gone)
        del gone
        expansions.clear()  # (the spy's references)
        gc.collect()
        assert ref() is None
        n = len(rec.launches())
        with pytest.raises(ArgumentError, match=r"block_shape is \[32, 64\]"):
            k[(2, 1)](a, td.TensorDescriptor(FakeTensor(0x70000, [256, 64], FP16), [32, 64]), BLOCK_M=64, BLOCK_N=64)
        assert len(rec.launches()) == n
        huge = td.TensorDescriptor(FakeTensor(0x80000, [1 << 31, 64], FP16), [64, 64])  # fits TMA, not the i32 slot
        with pytest.raises(ArgumentError) as err:
            k[(2, 1)](huge, b, BLOCK_M=64, BLOCK_N=64)
        # both paths: refused before encoding, saying why (issue 34: it once failed after encoding, in struct's words)
        assert str(err.value) == (
            "tma_kernels:desc_copy: parameter 'in_desc' (tensordesc<fp16[64, 64]>): shape "
            "[2147483648, 64] has a dimension of 2**31 or more; the kernel takes each dimension "
            "as an i32"
        )
        assert len(rec.launches()) == n and len(no_driver) == 4
        # the compiled path launched every one of them from C; the Python path through the binding
        assert len(through_binding) == (n if path == "python" else 0) and n > 5


# -- issue 34: descriptor fields validated, not coerced; driver limits refused before the driver -----------------
class TritonLikeDesc:
    """Triton's ``TensorDescriptor`` duck-typed (base, shape, strides, block_shape, padding, round_f32_to_tf32),
    with whatever field values a test gives: karchive reads it without Triton's own asserts."""

    def __init__(self, base, shape, strides, block_shape, padding="zero", round_f32_to_tf32=False):
        self.base, self.shape, self.strides, self.block_shape = base, shape, strides, block_shape
        self.padding, self.round_f32_to_tf32 = padding, round_f32_to_tf32


RAW = 0x40000
GOOD = dict(shape=[128, 64], strides=[64, 1], dtype="fp16")


@pytest.mark.parametrize(
    "field,value",
    [
        ("shape", [128.0, 64]),
        ("shape", [128.7, 64]),
        ("shape", "12"),
        ("shape", [None, 64]),
        ("shape", 128),
        ("shape", [True, 64]),
        ("shape", [b"1", 64]),
        ("shape", [0, 64]),
        ("shape", [-128, 64]),
        ("strides", [64.0, 1]),
        ("strides", "641"),
        ("strides", [None, 1]),
        ("strides", [64, "1"]),
        ("block_shape", [64.0, 64]),
        ("block_shape", "64"),
        ("block_shape", [0, 64]),
        ("block_shape", [-64, 64]),
        ("block_shape", [None, 64]),
        ("padding", "nan "),
        ("padding", "NaN"),
        ("padding", None),
        ("padding", 0),
        ("round_f32_to_tf32", "False"),
        ("round_f32_to_tf32", 1),
        ("round_f32_to_tf32", None),
        ("dtype", "float17"),
        ("dtype", "fp16 "),
        ("dtype", 3),
        ("dtype", object()),
        ("x", -16),
        ("x", 1 << 64),
        ("x", 1.5),
        ("x", "0x40000"),
        ("x", True),
        ("pixel_box_lower_corner", [1.5, 0]),
        ("pixel_box_lower_corner", "00"),
        ("element_strides", [1.0, 1, 1, 1]),
    ],
)
def test_descriptor_fields_are_validated_not_coerced(field, value):
    """Issue 34, item 12: float shapes were truncated, ``shape="12"`` became (1, 2), ``padding="nan "``
    meant zero, None in a shape raised a builtin error. Every field of karchive.TensorDescriptor is checked
    at construction and refused with ArgumentError naming it."""
    kw = dict(GOOD, block_shape=[64, 64])
    x = RAW
    if field == "x":
        x = value
    else:
        kw[field] = value
    block = kw.pop("block_shape")
    with pytest.raises(ArgumentError) as err:
        td.TensorDescriptor(x, block, **kw)
    assert err.value.param == field and (field == "x" or field.split("_")[0] in str(err.value)), str(err.value)


@pytest.mark.parametrize(
    "field,value",
    [
        ("shape", [128.0, 64]),
        ("shape", "12"),
        ("shape", [None, 64]),
        ("strides", [64.5, 1]),
        ("strides", None),
        ("block_shape", [64.0, 64]),
        ("block_shape", "64"),
        ("padding", "nan "),
        ("padding", None),
        ("round_f32_to_tf32", "yes"),
        ("shape", [0, 64]),
    ],
)
def test_tritons_descriptor_fields_are_validated_too(field, value, no_driver):
    """The same checks on Triton's own descriptor (duck-typed: karchive reads it without Triton's asserts)."""
    kw = dict(base=FakeTensor(0x10000, [128, 64], FP16), shape=[128, 64], strides=[64, 1], block_shape=[64, 64])
    kw[field] = value
    with pytest.raises(ArgumentError) as err:
        td.expand("a", tma(), TritonLikeDesc(**kw))
    assert err.value.param == "a" and field.split("_")[0] in str(err.value), str(err.value)
    assert not no_driver
    assert td.descriptor_reason("a", "tensordesc<fp16[64, 64]>", TritonLikeDesc(**kw)) is not None


def test_descriptor_fields_take_integer_types_and_keep_their_values(no_driver):
    """What is valid still works: NumPy integers where ints go, tuples and lists, a shape from torch.Size-like tuples."""
    np = pytest.importorskip("numpy")
    d = td.TensorDescriptor(
        np.uint64(RAW),
        (np.int64(64), 64),
        shape=(np.int32(128), 64),
        strides=[np.int64(64), 1],
        dtype="fp16",
        padding="nan",
        round_f32_to_tf32=False,
    )
    assert d.shape == (128, 64) and d.strides == (64, 1) and d.block_shape == (64, 64) and d.ptr == RAW
    assert all(type(v) is int for v in (*d.shape, *d.strides, *d.block_shape, d.ptr))
    assert td.expand("a", tma(), d)[1:] == [128, 64, 64, 1]


def test_the_docstring_raw_address_form_launches(no_driver):
    """Issue 34, item 13: ``TensorDescriptor(address, block_shape, shape=..., strides=..., dtype="fp16")``, the
    form TensorDescriptor's own docstring shows, was refused as "dtype fp16, the variant takes fp16". Triton's
    element type names work as dtypes (``i8`` is int8 there, not a typestr's int64), as do framework names."""
    doc = td.TensorDescriptor.__doc__ or ""
    assert 'TensorDescriptor(address, block_shape, shape=...,\n    strides=..., dtype="fp16")' in doc
    raw = td.TensorDescriptor(RAW, [64, 64], shape=[128, 64], strides=[64, 1], dtype="fp16")
    assert td.descriptor_reason("a", "tensordesc<fp16[64, 64]>", raw) is None
    assert td.expand("a", tma(), raw)[1:] == [128, 64, 64, 1] and no_driver[-1].address == RAW
    assert "dtype=fp16" in repr(raw)
    for dtype, name in (
        ("bf16", "bf16"),
        ("fp8e4nv", "fp8e4nv"),
        ("i8", "i8"),
        ("u8", "u8"),
        ("float16", "fp16"),
        ("torch.bfloat16", "bf16"),
        ("<f2", "fp16"),
        (FP16, "fp16"),
    ):
        d = td.TensorDescriptor(RAW, [64, 64], shape=[128, 64], strides=[64, 1], dtype=dtype)
        assert td.triton_dtype(d.elem_dtype) == name, (dtype, d.elem_dtype)
    with pytest.raises(ArgumentError, match="dtype fp32, the variant takes fp16"):
        td.expand("a", tma(), td.TensorDescriptor(RAW, [64, 64], shape=[128, 64], strides=[64, 1], dtype="fp32"))


def test_tf32_rounding_needs_an_fp32_tensor(no_driver):
    """Issue 34, item 5: ``round_f32_to_tf32=True`` on an fp16 descriptor was encoded as a TF32 map over 2-byte
    elements and launched. Triton asserts "round_f32_to_tf32 is only supported for float32 tensors" (3.7+;
    3.5/3.6 have no such option): karchive refuses it too, at construction where the dtype is known and at
    launch for any descriptor, in both modes, before anything is encoded."""
    with pytest.raises(ArgumentError, match="round_f32_to_tf32.*float32") as err:
        td.TensorDescriptor(FakeTensor(0x10000, [128, 64], FP16), [64, 64], round_f32_to_tf32=True)
    assert err.value.param == "round_f32_to_tf32"
    with pytest.raises(ArgumentError, match="round_f32_to_tf32.*float32"):
        td.TensorDescriptor(RAW, [64, 64], shape=[128, 64], strides=[64, 1], dtype="bf16", round_f32_to_tf32=True)
    triton_fp16 = TritonLikeDesc(
        FakeTensor(0x10000, [128, 64], FP16), [128, 64], [64, 1], [64, 64], round_f32_to_tf32=True
    )
    for d in (tma(), TensorDescAbi("triton-3.8", "decomposed", "fp16", 2, (64, 64))):
        with pytest.raises(ArgumentError, match="round_f32_to_tf32.*float32") as err:
            td.expand("a", d, triton_fp16)
        assert err.value.param == "a"
    assert not no_driver
    f32 = td.TensorDescriptor(FakeTensor(0x10000, [128, 64], FP32), [64, 64], round_f32_to_tf32=True)
    td.expand("f", tma(dtype="fp32", elem_size=4, elem_type=7), f32)
    assert no_driver[-1].data_type == td.TMA_TF32


#: (shape, strides) of fp16 descriptors the driver cannot take (cuTensorMapEncodeTiled: every globalDim in
#: [1, 2**32], every globalStride a multiple of 16 below 2**40 bytes) or the kernel's i32 shape slot cannot hold.
DRIVER_LIMITS = [
    ([128, 64], [-64, 1], "stride"),
    ([128, 64], [0, 1], "stride"),
    ([128, 64], [1 << 39, 1], "2\\*\\*40"),
    ([2, 128, 64], [1 << 39, 64, 1], "2\\*\\*40"),
    ([1 << 31, 64], [64, 1], "2\\*\\*31"),
    ([64, 1 << 31], [1 << 31, 1], "2\\*\\*31"),
    ([128, 64], [1 << 63, 1], "stride"),
]


@pytest.mark.parametrize("shape,strides,why", DRIVER_LIMITS)
def test_driver_limits_are_refused_before_the_driver(shape, strides, why, no_driver):
    """Issue 34, item 6: negative and zero strides, strides of 2**40 bytes or more and 2**31 rows reached
    cuTensorMapEncodeTiled or failed after encoding with an unrelated packing message."""
    desc = td.TensorDescriptor(FakeTensor(0x10000, shape, FP16, strides), [64] * (len(shape) - 1) + [64])
    block = tuple(desc.block_shape)
    for d in (tma(block=block), TensorDescAbi("triton-3.8", "decomposed", "fp16", len(block), block)):
        if d.mode == "decomposed" and why != "2\\*\\*31" and strides[0] < 1 << 63:
            td.expand("a", d, desc)  # a decomposed descriptor is plain pointer arithmetic: any i64 stride, as in Triton
            continue
        with pytest.raises(ArgumentError, match=why) as err:
            td.expand("a", d, desc)
        assert err.value.param == "a"
    assert not no_driver
    # the largest values that fit are taken
    td.expand(
        "a",
        tma(),
        td.TensorDescriptor(FakeTensor(0x10000, [(1 << 31) - 1, 64], FP16, [((1 << 40) - 16) // 2, 1]), [64, 64]),
    )
    assert len(no_driver) == 1


@pytest.mark.parametrize("path", ["python", "extension"])
def test_bad_descriptors_are_refused_before_the_driver_on_both_paths(path, monkeypatch, tmp_path, no_driver):
    """Items 5, 6, 9, 12 through a real archive on both launch paths: karchive's ArgumentError naming the
    parameter, nothing encoded, nothing launched."""

    class StrPtr(FakeTensor):
        def data_ptr(self):
            return hex(self.ptr)

    with desc_copy_kernel(monkeypatch, tmp_path, path) as (k, rec):
        a = td.TensorDescriptor(FakeTensor(0x10000, [128, 64], FP16), [64, 64])
        k[(2, 1)](a, a, BLOCK_M=64, BLOCK_N=64)
        n, encoded = len(rec.launches()), len(no_driver)
        moving = FakeTensor(0x30000, [128, 64], FP16)
        later = td.TensorDescriptor(moving, [64, 64])
        k[(2, 1)](a, later, BLOCK_M=64, BLOCK_N=64)
        moving.ptr = "0x30000"  # a data_ptr() that turns into a string after the descriptor was made
        bad = [
            (td.TensorDescriptor(FakeTensor(0x30000, [1 << 31, 64], FP16), [64, 64]), "2\\*\\*31"),
            (td.TensorDescriptor(FakeTensor(0x30000, [128, 64], FP16, [-64, 1]), [64, 64]), "stride"),
            (td.TensorDescriptor(FakeTensor(0x30000, [128, 64], FP16, [1 << 39, 1]), [64, 64]), "2\\*\\*40"),
            (
                TritonLikeDesc(
                    FakeTensor(0x30000, [128, 64], FP16), [128, 64], [64, 1], [64, 64], round_f32_to_tf32=True
                ),
                "float32",
            ),
            (TritonLikeDesc(FakeTensor(0x30000, [128, 64], FP16), [128.0, 64], [64, 1], [64, 64]), "shape"),
            (
                TritonLikeDesc(FakeTensor(0x30000, [128, 64], FP16), [128, 64], [64, 1], [64, 64], padding="nan "),
                "padding",
            ),
            (TritonLikeDesc(StrPtr(0x30000, [128, 64], FP16), [128, 64], [64, 1], [64, 64]), "str"),
            (later, "str"),
        ]
        n, encoded = len(rec.launches()), len(no_driver)
        for desc, why in bad:
            with pytest.raises(ArgumentError, match=why) as err:
                k[(2, 1)](a, desc, BLOCK_M=64, BLOCK_N=64)
            assert err.value.param == "out_desc" and err.value.kernel == "tma_kernels:desc_copy", str(err.value)
        with pytest.raises(ArgumentError, match="str"):
            td.TensorDescriptor(StrPtr(0x30000, [128, 64], FP16), [64, 64])
        assert len(rec.launches()) == n and len(no_driver) == encoded
