"""The minimal protobuf layer behind the JAX bridge: encoding, splicing, reading an embedded descriptor."""

from __future__ import annotations

import struct

import pytest
from interop_support import fake_triton_descriptor

from karchive.interop import _proto as P


def test_varint_round_trip_including_negative_int32():
    for n in (0, 1, 127, 128, 300, 1 << 35, (1 << 64) - 1):
        assert P.read_varint(P.varint(n), 0) == (n, len(P.varint(n)))
    enc = P.varint(-2)  # protobuf writes negative int32/int64 as 10-byte two's complement
    assert len(enc) == 10 and P.read_varint(enc, 0)[0] == (1 << 64) - 2


def test_fields_decode_what_was_encoded():
    msg = P.f_varint(2, 7) + P.f_bytes(1, b"abc") + P.f_float(7, 1.5) + P.f_double(8, -2.25)
    fields = list(P.iter_fields(msg))
    assert [(f.number, f.wire) for f in fields] == [(2, P.VARINT), (1, P.LEN), (7, P.I32), (8, P.I64)]
    assert fields[0].value == 7 and fields[1].value == b"abc"
    assert struct.unpack("<f", fields[2].value.to_bytes(4, "little"))[0] == 1.5
    assert struct.unpack("<d", fields[3].value.to_bytes(8, "little"))[0] == -2.25
    assert P.f_varint(3, 0) == b"" and P.f_varint(3, 0, keep_zero=True) == b"\x18\x00"


def test_truncated_input_is_refused():
    with pytest.raises(P.ProtoError):
        list(P.iter_fields(P.f_bytes(1, b"abcdef")[:-2]))


def test_replace_in_appends_to_nested_message_and_fixes_lengths():
    inner = P.f_bytes(1, b"kernel") + P.f_varint(2, 4)
    call = P.f_bytes(1, inner) + P.f_varint(2, 9)
    top = P.f_bytes(1, call) + P.f_bytes(4, b"name")
    out = P.replace_in(top, (1, 1), P.f_bytes(13, b"\x7fELF..."))
    f_call = next(f for f in P.iter_fields(out) if f.number == 1)
    f_kernel = next(f for f in P.iter_fields(f_call.value) if f.number == 1)
    kernel_fields = {f.number: f.value for f in P.iter_fields(f_kernel.value)}
    assert kernel_fields == {1: b"kernel", 2: 4, 13: b"\x7fELF..."}
    assert [f.number for f in P.iter_fields(out)] == [1, 4]  # siblings kept, in order
    with pytest.raises(P.ProtoError):
        P.replace_in(top, (3,), b"")


def test_descriptor_is_found_inside_a_binary_and_parsed():
    blob = b"\x00\x7fELF" + b"\x00" * 100 + fake_triton_descriptor() + b"\xff\xff\xff\x0f garbage follows"
    msgs = P.find_file_descriptor(blob, "jaxlib/gpu/triton.proto")
    assert msgs is not None
    assert msgs["TritonKernel"].fields["module_image"] == (11, P.TYPE_MESSAGE, "ModuleImageProto")
    assert msgs["TritonKernel"].fields["num_ctas"][0] == 10
    assert msgs["ModuleImageProto"].fields["object_file"][0] == 2
    assert "TritonKernelCall.Parameter" in msgs and "Parameter" in msgs
    assert P.find_file_descriptor(b"no descriptor here", "jaxlib/gpu/triton.proto") is None
