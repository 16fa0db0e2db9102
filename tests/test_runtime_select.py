"""Variant selection on archives compiled here: device rules, call rules, ranking, the rejection list."""

from __future__ import annotations

import pytest
from runtime_support import Cai

import karchive
from karchive.errors import NoMatchingVariantError
from karchive.runtime import DeviceInfo
from karchive.runtime.device import driver_ptx_isa, ptx_header
from karchive.runtime.select import cubin_runs_on, ptx_runs_on

H100 = DeviceInfo.describe_target("cuda:90", shared_optin=227 * 1024, driver_version=13000, name="H100")
A100 = DeviceInfo.describe_target("cuda:80", shared_optin=163 * 1024, driver_version=12040)
RTX3090 = DeviceInfo.describe_target("cuda:86", shared_optin=99 * 1024, driver_version=12040)
ALIGNED, OFF = 0x7F00_0000_0000, 0x7F00_0000_0004


@pytest.mark.parametrize(
    ("arch", "cc", "ok"),
    [
        ("sm_80", (8, 0), True),
        ("sm_80", (8, 6), True),
        ("sm_80", (8, 9), True),
        ("sm_86", (8, 0), False),
        ("sm_80", (9, 0), False),
        ("sm_90a", (9, 0), True),
        ("sm_90a", (10, 0), False),
        ("sm_90", (9, 0), True),
        ("sm_100a", (10, 0), True),
        ("sm_100f", (10, 3), True),
        ("sm_100f", (12, 0), False),
        ("bogus", (9, 0), False),
    ],
)
def test_cubin_compatibility(arch, cc, ok):
    assert cubin_runs_on(arch, cc) is ok


@pytest.mark.parametrize(
    ("target", "cc", "ok"),
    [
        ("sm_80", (9, 0), True),
        ("sm_80", (12, 0), True),
        ("sm_90", (8, 9), False),
        ("sm_90a", (9, 0), True),
        ("sm_90a", (10, 0), False),
    ],
)
def test_ptx_compatibility(target, cc, ok):
    assert ptx_runs_on(target, cc) is ok


def test_driver_ptx_isa_table():
    assert driver_ptx_isa(13000) == (9, 0)
    assert driver_ptx_isa(12040) == (8, 4)
    assert driver_ptx_isa(12060) == (8, 5)
    assert driver_ptx_isa(11080) == (7, 8)
    assert driver_ptx_isa(10020) is None
    assert driver_ptx_isa(13050) >= (9, 2)
    assert ptx_header(b"//\n.version 8.4\n.target sm_80\n") == ((8, 4), "sm_80")


def test_device_rules(cuda_archive):
    arc = karchive.open(str(cuda_archive))
    add = arc.kernel("add_kernel")
    v = add.select(ALIGNED, ALIGNED, ALIGNED, 10, device=H100)
    assert v.abi.binary_arch == "sm_90a" and v.abi.num_warps == 4
    # the sm_80 cubin (BLOCK=512) runs on 8.0 and 8.6, never on 9.0
    assert add.select(ALIGNED, ALIGNED, ALIGNED, 10, device=A100).abi.binary_arch == "sm_80"
    assert add.select(ALIGNED, ALIGNED, ALIGNED, 10, device=RTX3090).constexprs == {"BLOCK": 512}
    with pytest.raises(NoMatchingVariantError) as e:
        add.select(ALIGNED, ALIGNED, ALIGNED, 10, BLOCK=512, device=H100)
    msg = str(e.value)
    assert (
        "cubin is sm_80, the device is sm_90" in msg
        and "BLOCK=512, but this variant was compiled with BLOCK=1024" in msg
    )
    assert msg.count("\n  - ") == 3  # every variant listed with its reason


def test_shared_memory_limit_rejects(cuda_archive):
    arc = karchive.open(str(cuda_archive))
    mm = arc.kernel("matmul_kernel")
    args = (ALIGNED, ALIGNED, ALIGNED, 64, 64, 64, 64, 1, 64, 1, 64, 1)
    need = mm.select(*args, device=H100).abi.shared
    assert need > 0
    tiny = DeviceInfo.describe_target("cuda:90", shared_optin=need - 1)
    with pytest.raises(
        NoMatchingVariantError, match=f"needs {need} bytes of shared memory per block, the device allows"
    ):
        mm.select(*args, device=tiny)


def test_ptx_fallback_needs_opt_in_and_a_new_enough_driver(cuda_archive):
    plain = karchive.open(str(cuda_archive)).kernel("add_kernel")
    with pytest.raises(NoMatchingVariantError, match="PTX JIT fallback is off"):
        plain.select(ALIGNED, ALIGNED, ALIGNED, 10, BLOCK=512, device=H100)
    arc = karchive.open(str(cuda_archive), allow_ptx=True)
    add = arc.kernel("add_kernel")
    v80 = [v for v in arc.variants("add_kernel") if v.abi.binary_arch == "sm_80"][0]
    version, target = arc.ptx_header(v80)
    assert target == "sm_80"
    new = DeviceInfo.describe_target("cuda:90", driver_version=99000)
    assert add.select(ALIGNED, ALIGNED, ALIGNED, 10, BLOCK=512, device=new).key == v80.key
    old = DeviceInfo.describe_target("cuda:90", driver_version=11000)
    with pytest.raises(NoMatchingVariantError, match=r"its PTX is ISA \d+\.\d+, the driver .* reads up to 7\.0"):
        add.select(ALIGNED, ALIGNED, ALIGNED, 10, BLOCK=512, device=old)
    # a cubin that fits still wins over PTX
    assert add.select(ALIGNED, ALIGNED, ALIGNED, 10, BLOCK=1024, device=new).abi.binary_arch == "sm_90a"
    # but BLOCK is no tie-break: omitted, with 1024 (cubin) and 512 (PTX) both able to run, it is refused
    with pytest.raises(NoMatchingVariantError, match=r"omits constexpr 'BLOCK'.*BLOCK = 512, 1024") as e:
        add.select(ALIGNED, ALIGNED, ALIGNED, 10, device=new)
    assert e.value.param == "BLOCK" and e.value.values == ("512", "1024")


def test_call_rules_alignment_dtype_equal_to_1(cuda_archive):
    arc = karchive.open(str(cuda_archive))
    add = arc.kernel("add_kernel")
    assert add.select(ALIGNED, OFF, ALIGNED, 10, device=H100).abi.num_warps == 8  # the unspecialised variant
    scale = arc.kernel("scale_kernel")
    f32 = Cai(ALIGNED, "<f4")
    eq1 = scale.select(f32, f32, 10, 1, 2.0, device=H100)
    gen = scale.select(f32, f32, 10, 3, 2.0, device=H100)
    assert [p.name for p in eq1.params if p.equal_to_1] == ["stride"]
    assert not any(p.equal_to_1 for p in gen.params)
    # Raw addresses say no dtype: stride == 1 fits the *bf16 variant and the general *fp32 one alike.
    with pytest.raises(NoMatchingVariantError, match=r"x_ptr is a raw address.*take \*bf16, \*fp32") as e:
        scale.select(ALIGNED, ALIGNED, 10, 1, 2.0, device=H100)
    assert (e.value.param, e.value.values) == ("x_ptr", ("*bf16", "*fp32"))
    assert scale.select(ALIGNED, ALIGNED, 10, 3, 2.0, device=H100).key == gen.key  # only *fp32 takes stride 3
    with pytest.raises(NoMatchingVariantError) as e:
        scale.select(ALIGNED, OFF, 10, 2, 2.0, device=H100)
    assert "out_ptr address 0x7f0000000004 is not 16-byte aligned" in str(e.value)
    assert "stride=2, but this variant was specialised for stride == 1" in str(e.value)
    with pytest.raises(NoMatchingVariantError, match="stride expects an integer"):
        scale.select(ALIGNED, ALIGNED, 10, 2.5, 2.0, device=H100)


def test_pointer_dtype_checked_against_signature(cuda_archive):
    np = pytest.importorskip("numpy")

    class Fp16Cai:  # a device array that says its dtype (class-level interface, like Numba's)
        @property
        def __cuda_array_interface__(self):
            return {"data": (ALIGNED, False), "typestr": "<f2", "shape": (4,), "version": 3}

    scale = karchive.open(str(cuda_archive)).kernel("scale_kernel")
    with pytest.raises(NoMatchingVariantError, match="x_ptr has dtype fp16, this variant takes \\*fp32"):
        scale.select(Fp16Cai(), ALIGNED, 10, 1, 2.0, device=H100)
    del np


def test_hip_needs_exact_gfx_and_warp_size(hip_archive):
    add = karchive.open(str(hip_archive)).kernel("add_kernel")
    mi300 = DeviceInfo.describe_target("hip:gfx942", shared_optin=65536)
    assert add.select(ALIGNED, ALIGNED, ALIGNED, 10, device=mi300).abi.warp_size == 64
    with pytest.raises(NoMatchingVariantError, match="built for gfx942, the device is gfx90a"):
        add.select(ALIGNED, ALIGNED, ALIGNED, 10, device=DeviceInfo.describe_target("hip:gfx90a"))
    with pytest.raises(NoMatchingVariantError, match="warp size 64, the device's is 32"):
        add.select(ALIGNED, ALIGNED, ALIGNED, 10, device=DeviceInfo("hip", 0, "gfx942", 32))
    with pytest.raises(NoMatchingVariantError, match="built for hip, the device is cuda"):
        add.select(ALIGNED, ALIGNED, ALIGNED, 10, device=H100)
