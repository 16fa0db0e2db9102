"""Parameter packing: exact bytes per Triton scalar type, 16-bit floats, ranges, the void** array."""

from __future__ import annotations

import ctypes
import struct

import pytest

from karchive.errors import ArgumentError
from karchive.format.manifest import Abi, AbiParam
from karchive.runtime.launch._argpack import ParamLayout, bf16_bits, bf16_bits_rne


def _abi(params: list[tuple[str, str, str]], scratch: int = 2) -> Abi:
    from karchive.format.dtypes import SCALAR_SIZES

    ps = [AbiParam(n, k, t, i, 8 if k == "pointer" else SCALAR_SIZES[t]) for i, (n, k, t) in enumerate(params)]
    ps += [AbiParam(k, k, None, None, 8) for k in ("global_scratch", "profile_scratch")[:scratch]]
    return Abi(1, "k", "cubin", "sm_90a", tuple(ps), 0, 4, 32, 1, (1, 1, 1), False, False, 0, 1, 0, 1)


ALL = [
    ("p", "pointer", "*fp32"),
    ("b", "scalar", "i1"),
    ("c", "scalar", "i8"),
    ("h", "scalar", "i16"),
    ("i", "scalar", "i32"),
    ("l", "scalar", "i64"),
    ("ub", "scalar", "u8"),
    ("uh", "scalar", "u16"),
    ("ui", "scalar", "u32"),
    ("ul", "scalar", "u64"),
    ("e", "scalar", "fp16"),
    ("bf", "scalar", "bf16"),
    ("f", "scalar", "fp32"),
    ("d", "scalar", "fp64"),
]


def _slots(layout: ParamLayout) -> list[bytes]:
    """What the driver reads: follow each void* of kernelParams for the parameter's size."""
    ptrs = (ctypes.c_void_p * len(layout.abi.params)).from_address(layout.kernel_params)
    return [ctypes.string_at(ptrs[i], p.size) for i, p in enumerate(layout.abi.params)]


def test_every_scalar_type_is_packed_with_its_exact_width_and_bits():
    layout = ParamLayout(_abi(ALL))
    values = [
        0xDEADBEEF0,
        1,
        -5,
        -300,
        -70000,
        -(1 << 40),
        200,
        60000,
        4_000_000_000,
        (1 << 64) - 1,
        0.1,
        bf16_bits(0.1),
        0.1,
        0.1,
    ]
    layout.pack(values)
    got = _slots(layout)
    want = [
        struct.pack("<Q", 0xDEADBEEF0),
        b"\x01",
        struct.pack("<b", -5),
        struct.pack("<h", -300),
        struct.pack("<i", -70000),
        struct.pack("<q", -(1 << 40)),
        bytes([200]),
        struct.pack("<H", 60000),
        struct.pack("<I", 4_000_000_000),
        b"\xff" * 8,
        struct.pack("<e", 0.1),
        struct.pack("<H", 0x3DCC),
        struct.pack("<f", 0.1),
        struct.pack("<d", 0.1),
        b"\0" * 8,
        b"\0" * 8,
    ]
    assert got == want
    assert [p.size for p in layout.abi.params] == [8, 1, 1, 2, 4, 8, 1, 2, 4, 8, 2, 2, 4, 8, 8, 8]
    # each slot is naturally aligned inside one buffer
    assert all(o % p.size == 0 for o, p in zip(layout.offsets, layout.abi.params))


def test_bf16_follows_tritons_launcher_not_round_to_nearest():
    # 0.3333 as fp32 is 0x3EAAA64C: Triton keeps the high half (0x3EAA); RNE would give 0x3EAB.
    assert bf16_bits(0.3333) == 0x3EAA
    assert bf16_bits_rne(0.3333) == 0x3EAB
    assert bf16_bits(1.0) == 0x3F80 and bf16_bits(-2.0) == 0xC000
    assert bf16_bits(float("inf")) == 0x7F80
    assert bf16_bits(float("nan")) & 0x7F80 == 0x7F80


@pytest.mark.parametrize(
    ("typ", "bad"),
    [
        ("i32", 1 << 31),
        ("i32", -(1 << 31) - 1),
        ("u32", -1),
        ("i8", 128),
        ("u64", 1 << 64),
        ("i64", 1 << 63),
        ("fp16", 1e6),
        ("i32", 2.5),
        ("fp32", "x"),
    ],
)
def test_out_of_range_or_wrong_type_names_the_parameter(typ, bad):
    layout = ParamLayout(_abi([("p", "pointer", "*fp32"), ("n_elements", "scalar", typ)]))
    with pytest.raises(ArgumentError, match=r"'n_elements' \(" + typ):
        layout.pack([16, bad])


def test_bad_pointer_value_is_an_argument_error():
    layout = ParamLayout(_abi([("x", "pointer", "*fp32")]))
    with pytest.raises(ArgumentError, match="'x'.*device address"):
        layout.pack([-1])


def test_set_one_and_scratch_slots():
    layout = ParamLayout(_abi([("x", "pointer", "*fp32"), ("n", "scalar", "i32"), ("a", "scalar", "bf16")]))
    layout.pack([32, 7, bf16_bits(1.5)])
    layout.set_one(1, 9)
    layout.set_one(2, 2.0)
    layout.set_scratch("global_scratch", 0x1000)
    got = _slots(layout)
    assert got[:3] == [struct.pack("<Q", 32), struct.pack("<i", 9), struct.pack("<H", 0x4000)]
    assert got[3] == struct.pack("<Q", 0x1000) and got[4] == b"\0" * 8
    with pytest.raises(ArgumentError, match="'n'"):
        layout.set_one(1, 1 << 40)


def test_kernel_without_parameters():
    layout = ParamLayout(_abi([], scratch=0))
    layout.pack([])
    assert layout.kernel_params == 0
