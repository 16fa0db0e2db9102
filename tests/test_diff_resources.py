"""Registers, stack and spills read from real binaries, checked against independent readers of the same
facts: NVIDIA's cuobjdump (shipped with Triton) for cubins, the AMDGPU assembly's own metadata block for
hsaco. And the readers never fail on hostile bytes."""

from __future__ import annotations

import random
import re
import subprocess
from pathlib import Path

import pytest
from registry_support import compiled
from support import EXAMPLES, needs_triton

from karchive.audit.resources import cubin_resources, hsaco_resources, recorded_resources

pytestmark = needs_triton

MATMUL_SIG = "*fp16:16, *fp16:16, *fp16:16, i32, i32, i32, i32:16, i32:1, i32:16, i32:1, i32:16, i32:1"


def _cuobjdump() -> Path:
    import triton

    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    if not tool.is_file():
        pytest.skip("this Triton install ships no cuobjdump")
    return tool


def _matmul(target: str, options: dict):
    from karchive.producer.compile.aot import VariantRequest, compile_variant

    return compile_variant(
        VariantRequest(
            str(EXAMPLES / "kernels.py") + ":matmul_kernel",
            MATMUL_SIG,
            target,
            {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64},
            options,
        )
    )


def _resource_usage(tool: Path, cubin: bytes, tmp_path: Path) -> dict[str, int]:
    path = tmp_path / "k.cubin"
    path.write_bytes(cubin)
    out = subprocess.run([str(tool), "--dump-resource-usage", str(path)], capture_output=True, text=True, check=True)
    m = re.search(r"REG:(\d+) STACK:(\d+)", out.stdout)
    assert m, out.stdout
    return {"registers": int(m.group(1)), "stack": int(m.group(2))}


def test_cubin_registers_and_stack_match_cuobjdump(tmp_path: Path) -> None:
    tool = _cuobjdump()
    add = compiled("cuda:90", 1024, 4)
    # a register-starved matmul: ptxas spills to the stack frame
    starved = _matmul("cuda:80", {"num_warps": 4, "num_stages": 3, "maxnreg": 64})
    seen = []
    for v in (add, starved):
        found = recorded_resources(v.variant.to_json(), v.files["binary"])
        assert found == _resource_usage(tool, v.files["binary"], tmp_path)
        seen.append(found)
    assert seen[1]["registers"] <= 64 and seen[1]["stack"] > seen[0]["stack"]


def test_hsaco_registers_and_spills_match_the_assembly_metadata() -> None:
    v = compiled("hip:gfx942", 256, 4)
    found = recorded_resources(v.variant.to_json(), v.files["binary"])
    asm = v.files["amdgcn"].decode()

    def field(name: str) -> int:
        m = re.search(rf"^\s*\.{name}:\s+(\d+)\s*$", asm, re.MULTILINE)
        assert m, name
        return int(m.group(1))

    assert found["registers.vgpr"] == field("vgpr_count") > 0
    assert found["registers.sgpr"] == field("sgpr_count") > 0
    assert found["spills.vgpr"] == field("vgpr_spill_count")
    assert found["spills.sgpr"] == field("sgpr_spill_count")
    assert found["stack"] == field("private_segment_fixed_size")


def test_the_entry_name_selects_the_function() -> None:
    v = compiled("cuda:90", 1024, 4)
    assert cubin_resources(v.files["binary"], "no_such_kernel") == {}
    h = compiled("hip:gfx942", 256, 4)
    assert hsaco_resources(h.files["binary"], "no_such_kernel") == {}
    # each reader refuses the other format quietly
    assert cubin_resources(h.files["binary"], "add_kernel") == {}
    assert hsaco_resources(v.files["binary"], "add_kernel") == {}
    assert recorded_resources({"abi": {"entry": "add_kernel", "binary_format": "elf"}}, v.files["binary"]) == {}


@pytest.mark.parametrize("target", ["cuda:90", "hip:gfx942"])
def test_hostile_binaries_never_raise(target: str) -> None:
    v = compiled(target, 256, 4)
    binary, entry = v.files["binary"], v.variant.to_json()
    rng = random.Random(15)
    for cut in list(range(0, 200, 7)) + [len(binary) // 2, len(binary) - 1]:
        assert isinstance(recorded_resources(entry, binary[:cut]), dict)
    for _ in range(300):
        data = bytearray(binary)
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        assert isinstance(recorded_resources(entry, bytes(data)), dict)
    for junk in (b"", b"\x7fELF", b"\x7fELF" + b"\xff" * 200, bytes(4096)):
        assert recorded_resources(entry, junk) == {}


def test_hostile_elf_headers_and_metadata_notes_yield_nothing() -> None:
    import struct

    v = compiled("cuda:90", 256, 4)
    binary, entry = v.files["binary"], v.variant.to_json()
    shoff = struct.unpack_from("<Q", binary, 0x28)[0]
    rng = random.Random(16)
    for _ in range(300):  # flips inside the ELF header and the section header table
        data = bytearray(binary)
        for _ in range(rng.randint(1, 4)):
            pos = rng.choice([rng.randrange(64), shoff + rng.randrange(len(binary) - shoff)])
            data[pos] = rng.randrange(256)
        assert isinstance(recorded_resources(entry, bytes(data)), dict)
    huge = bytearray(binary)
    struct.pack_into("<H", huge, 0x3C, 0xFFFF)  # e_shnum
    assert cubin_resources(bytes(huge), "add_kernel") == {}

    h = compiled("hip:gfx942", 256, 4)
    start = h.files["binary"].index(b"AMDGPU\x00\x00") + 8  # the note's descriptor: MessagePack
    size = struct.unpack_from("<I", h.files["binary"], start - 8 - 12 + 4)[0]
    assert size > 100 and hsaco_resources(h.files["binary"], "add_kernel")["registers.vgpr"] > 0
    for payload in (
        b"\x91" * size,  # arrays nested past any sane depth
        b"\xdf\xff\xff\xff\xff" + bytes(size - 5),  # a map claiming 4 billion entries
        b"\xc7" + bytes(size - 1),
    ):  # an extension type
        data = bytearray(h.files["binary"])
        data[start : start + size] = payload
        assert hsaco_resources(bytes(data), "add_kernel") == {}
