"""The compiled launch path and the pure-Python one do the same thing, call by call.

Each script of calls runs twice against a CudaBackend over FakeCuda (tests/runtime_support.py, a
TEST DOUBLE for the driver: this machine has no GPU): once with kernels on the Python path, once on the
compiled path, whose launches reach the stand-in through the driver address it hands out, so the
parameter bytes read there are the bytes ``_fastlaunch.c`` packed. Every launch (grid, block, shared
memory, stream, the bytes behind each parameter pointer) and every error (type and message) must be
the same. Argument stand-ins: raw int addresses, ``__cuda_array_interface__`` objects, NumPy arrays
(host memory) and FakeTensor, a stand-in for torch.Tensor (torch is not installed here).
"""

from __future__ import annotations

import gc
import json
import os
import pathlib
import struct
import subprocess
import sys
import threading
import traceback
import weakref
from collections.abc import Callable
from typing import Any

import pytest
from runtime_support import PATHS, ROOT, Cai, fake_cuda, q, register_sizes

import karchive
from karchive.errors import ArgumentError, KarchiveError, NoMatchingVariantError, RuntimeLoadError
from karchive.runtime import DeviceInfo, args, launch_path
from karchive.runtime.launch._argpack import bf16_bits
from karchive.runtime.select import MISSING

X, Y, OUT = 0x7F00_0000_1000, 0x7F00_0000_2000, 0x7F00_0000_3000


class DType:
    """Stands for a torch.dtype: a singleton per type whose str() is torch's."""

    def __init__(self, name: str) -> None:
        self.name_ = name

    def __str__(self) -> str:
        return self.name_

    __repr__ = __str__


F32, F16, BF16 = DType("torch.float32"), DType("torch.float16"), DType("torch.bfloat16")


class FakeTensor:
    """Stand-in for torch.Tensor (data_ptr(), a dtype descriptor, get_device()); registered as the directly
    read tensor type for these tests, as torch.Tensor is once torch is in use."""

    def __init__(self, ptr: int, dtype: DType = F32, device: int = 0) -> None:
        self._ptr, self._dtype, self._device = ptr, dtype, device

    def data_ptr(self) -> int:
        return self._ptr

    @property
    def dtype(self) -> DType:
        return self._dtype

    def get_device(self) -> int:
        return self._device


class TorchLikeStream:
    cuda_stream = 0xABC


class ProtocolStream:
    def __cuda_stream__(self):
        return (0, 0xDEF)


@pytest.fixture(autouse=True)
def tensor_type():
    args.set_tensor_type(FakeTensor)
    yield
    args.set_tensor_type(None)


def T(ptr: int, dtype: DType = F32, device: int = 0) -> FakeTensor:
    return FakeTensor(ptr, dtype, device)


def cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


Step = Callable[[Any], Any]


def play(monkeypatch, archive, path: str, script: list[Step]) -> list[tuple]:
    """Run each step on a fresh archive with kernels on ``path``: (outcome, launches the driver saw) per step."""
    if path == launch_path.EXTENSION and launch_path.extension() is None:
        pytest.skip(f"the compiled launcher is not built here: {launch_path.status().detail}")
    with fake_cuda(monkeypatch, path) as (rec, backend):
        arc = karchive.open(str(archive))
        register_sizes(rec, arc)
        out = []
        for step in script:
            before = len(rec.attempts)
            try:
                step(arc)
                outcome: tuple = ("ok",)
            except Exception as exc:  # the error's fields too: both paths must fill them alike (issue 24)
                fields = json.dumps(exc.fields, default=str, sort_keys=True) if isinstance(exc, KarchiveError) else ""
                outcome = (type(exc).__name__, fields, str(exc))
            seen = [
                (a.kernel, a.grid, a.block, a.shared, a.stream, a.params, a.extra, a.result)
                for a in rec.attempts[before:]
            ]
            out.append((outcome, seen))
        for name in arc.kernels():
            k = arc.kernel(name)
            assert k.launch_path == path
        return out


def both(monkeypatch, archive, script: list[Step]) -> list[tuple]:
    py = play(monkeypatch, archive, launch_path.PYTHON, script)
    ext = play(monkeypatch, archive, launch_path.EXTENSION, script)
    for i, (a, b) in enumerate(zip(py, ext)):
        assert a == b, f"step {i}: the Python path and the compiled path differ:\n  python:    {a}\n  extension: {b}"
    return py


def launched(outcomes: list[tuple]) -> list[tuple]:
    return [seen[-1] for outcome, seen in outcomes if outcome == ("ok",) and seen]


# -- same launches -----------------------------------------------------------------------------------------
def test_same_launches_on_both_paths(monkeypatch, cuda_archive):
    script: list[Step] = [
        lambda a: a.kernel("add_kernel")[(4,)](X, Y, OUT, 1000),
        lambda a: a.kernel("add_kernel")[(4,)](X, Y, OUT, 1000, BLOCK=1024),
        lambda a: a.kernel("add_kernel")[4](X, Y, OUT, 1001, BLOCK=1024),
        lambda a: a.kernel("add_kernel")[lambda m: (cdiv(m["n_elements"], m["BLOCK"]), 2)](X, Y, OUT, 5000),
        lambda a: a.kernel("add_kernel")[(2, 3, 4)](x_ptr=X, y_ptr=Y, out_ptr=OUT, n_elements=9),
        lambda a: a.kernel("add_kernel")[(1,)](X, Y, out_ptr=OUT, n_elements=9, BLOCK=1024, num_warps=4),
        lambda a: a.kernel("add_kernel")[(1,)](T(X), T(Y), T(OUT), 7),
        lambda a: a.kernel("add_kernel")[(1,)](T(X, device=1), T(Y, device=1), T(OUT, device=1), 7),
        lambda a: a.kernel("add_kernel")[(1,)](X + 4, Y, OUT, 8),  # misaligned: the num_warps=8 variant
        lambda a: a.kernel("add_kernel")[(1,)](Cai(X), Cai(Y), OUT, 8),
        lambda a: a.kernel("add_kernel")[(1,)](X, Y, OUT, 5, MISSING),  # MISSING as "not given", as interop passes
        lambda a: a.kernel("add_kernel")[(1,)](X, 0, OUT, 5),  # an explicit null address (None is refused: below)
        lambda a: a.kernel("add_kernel")[(1,)](X, Y, OUT, 6, stream=0x123),
        lambda a: a.kernel("add_kernel")[(1,)](X, Y, OUT, 6, stream=TorchLikeStream()),
        lambda a: a.kernel("add_kernel")[(1,)](X, Y, OUT, 6, stream=ProtocolStream()),
        lambda a: a.kernel("add_kernel")[(0,)](X, Y, OUT, 6),  # empty grid: nothing launches
        lambda a: a.kernel("add_kernel")[(3, 0)](X, Y, OUT, 6),
        lambda a: a.kernel("add_kernel").run(X, Y, OUT, 11, grid=(2,), stream=5),
        # fp32 pointers: raw addresses carry no dtype, and the archive holds fp32 and bf16 scale_kernels
        lambda a: a.kernel("scale_kernel")[(2,)](T(X), T(OUT), 100, 1, 0.5),  # == 1 variant: stride not passed
        lambda a: a.kernel("scale_kernel")[(2,)](T(X), T(OUT), 100, 3, 0.5),
        lambda a: a.kernel("scale_kernel")[(2,)](T(X, BF16), T(OUT, BF16), 100, 1, 0.3333),  # bf16 scalar
        lambda a: a.kernel("scale_kernel")[(2,)](T(X, BF16), T(OUT, BF16), 100, stride=1, alpha=-2.5),
        lambda a: a.kernel("matmul_kernel")[(8,)](X, Y, OUT, 64, 64, 64, 64, 1, 64, 1, 64, 1),
    ]
    outcomes = both(monkeypatch, cuda_archive, script)
    assert all(o == ("ok",) for o, _ in outcomes), [o for o, _ in outcomes if o != ("ok",)]
    runs = launched(outcomes)
    add4, add8 = runs[0], runs[8]
    assert add4[1:4] == ((4, 1, 1), (128, 1, 1), 0) and add4[5] == (
        q(X),
        q(Y),
        q(OUT),
        struct.pack("<i", 1000),
        q(0),
        q(0),
    )
    assert add8[2] == (256, 1, 1) and add8[5][0] == q(X + 4)
    assert runs[3][1] == (5, 2, 1) and runs[4][1] == (2, 3, 4)
    assert [r[4] for r in runs[12:15]] == [0x123, 0xABC, 0xDEF]
    assert [len(seen) for _, seen in outcomes[15:17]] == [0, 0]
    eq1, general, bf = runs[16], runs[17], runs[18]
    assert eq1[5][:4] == (q(X), q(OUT), struct.pack("<i", 100), struct.pack("<f", 0.5))  # stride compiled in
    assert general[5][3:5] == (struct.pack("<i", 3), struct.pack("<f", 0.5))
    assert bf[5][3] == struct.pack("<H", bf16_bits(0.3333)) == struct.pack("<H", 0x3EAA)  # Triton's rounding
    assert runs[19][5][3] == struct.pack("<H", bf16_bits(-2.5))


def test_every_scalar_type_packs_the_same(monkeypatch, launch_archive):
    vals = dict(flag=True, i8v=-5, i16v=-300, u32v=4_000_000_000, i64v=-(1 << 40), h=0.1, b=0.3333, f=1.5, d=0.1, n=7)
    script: list[Step] = [
        lambda a: a.kernel("scalars_kernel")[(1,)](X, **vals),
        lambda a: a.kernel("scalars_kernel")[(1,)](
            X, False, 127, 32767, 0, (1 << 63) - 1, -65504.0, 1e38, -0.0, 1e300, -(1 << 31)
        ),
        lambda a: a.kernel("scalars_kernel")[(1,)](
            X, 1, -128, -32768, 4294967295, -(1 << 63), float("inf"), float("-inf"), float("nan"), 2, 0
        ),
    ]
    outcomes = both(monkeypatch, launch_archive, script)
    assert all(o == ("ok",) for o, _ in outcomes), outcomes
    first = launched(outcomes)[0][5]
    assert first[:11] == (
        q(X),
        b"\x01",
        struct.pack("<b", -5),
        struct.pack("<h", -300),
        struct.pack("<I", 4_000_000_000),
        struct.pack("<q", -(1 << 40)),
        struct.pack("<e", 0.1),
        struct.pack("<H", bf16_bits(0.3333)),
        struct.pack("<f", 1.5),
        struct.pack("<d", 0.1),
        struct.pack("<i", 7),
    )
    third = launched(outcomes)[2][5]
    assert third[6] == struct.pack("<e", float("inf")) and third[7] == struct.pack("<H", 0xFF80)


# -- same errors, nothing launched -------------------------------------------------------------------------
def test_same_errors_and_nothing_launched(monkeypatch, cuda_archive):
    np = pytest.importorskip("numpy")
    host = np.zeros(16, dtype=np.float32)
    add = "add_kernel"
    script: list[Step] = [
        lambda a: a.kernel(add)[(1,)](X, Y, OUT, 5),  # a good call first: later ones hit its selection key
        lambda a: a.kernel(add)[(1,)](X, Y, OUT),
        lambda a: a.kernel(add)[(1,)](X, Y, OUT, 5, 1024, 3),
        lambda a: a.kernel(add)[(1,)](X, Y, OUT, 5, BLOK=1),
        lambda a: a.kernel(add)[(1,)](X, Y, OUT, 5, n_elements=3),  # Python's own TypeError, on both paths
        lambda a: a.kernel(add)[(1,)](X, Y, OUT, 1 << 40),  # the key matches the good call's: packing refuses
        lambda a: a.kernel(add)[(1,)](X, Y, OUT, -(1 << 31) - 1),
        lambda a: a.kernel(add)[(1,)](X, Y, OUT, 2.5),
        lambda a: a.kernel(add)[(1,)](X, Y, OUT, True),
        lambda a: a.kernel(add)[(1,)](X, Y, OUT, "5"),
        lambda a: a.kernel(add)[(1,)](T(X, F16), T(Y), T(OUT), 5),
        lambda a: a.kernel(add)[(1,)](Cai(X, "<f2"), Y, OUT, 5),
        lambda a: a.kernel(add)[(1,)](host, Y, OUT, 5),
        lambda a: a.kernel(add)[(1,)](T(X, device=-1), T(Y), T(OUT), 5),
        lambda a: a.kernel(add)[(1,)](T(X, device=0), T(Y, device=1), T(OUT), 5),
        lambda a: a.kernel(add)[(1,)](1.5, Y, OUT, 5),
        lambda a: a.kernel(add)[(1,)](True, Y, OUT, 5),
        lambda a: a.kernel(add)[(1,)](-16, Y, OUT, 5),
        lambda a: a.kernel(add)[(1,)](object(), Y, OUT, 5),
        lambda a: a.kernel(add)[(1, 2, 3, 4)](X, Y, OUT, 5),
        lambda a: a.kernel(add)[()](X, Y, OUT, 5),
        lambda a: a.kernel(add)[(-1,)](X, Y, OUT, 5),
        lambda a: a.kernel(add)[(1.5,)](X, Y, OUT, 5),
        lambda a: a.kernel(add)[(1 << 32,)](X, Y, OUT, 5),
        lambda a: a.kernel(add)["x"](X, Y, OUT, 5),
        lambda a: a.kernel(add)[lambda m: (m["BLOCK"], "y")](X, Y, OUT, 5),
        lambda a: a.kernel(add)[(1,)](X, Y, OUT, 5, stream="fast"),
        lambda a: a.kernel(add)[(1,)](X, Y, OUT, 5, stream=-1),
        lambda a: a.kernel(add)[(1,)](X, Y, OUT, 5, num_warps=3),
        lambda a: a.kernel(add)[(1,)](X, Y, OUT, 5, BLOCK=512),  # only as an sm_80 cubin: not on this sm_90 device
        lambda a: a.kernel(add)[(1,)](X, Y, OUT, 5, BLOCK=True),
        lambda a: a.kernel("scale_kernel")[(1,)](T(X), T(OUT), 100, 1, "x"),
        lambda a: a.kernel("scale_kernel")[(1,)](T(X), T(OUT), 100, 1, 0.5),
        lambda a: a.kernel("scale_kernel")[(1,)](T(X), T(OUT), 100, 1, 1e39),  # fp32 overflow while packing
        lambda a: a.kernel("scale_kernel")[(1,)](T(X, BF16), T(OUT, BF16), 100, 1, 1e39),  # bf16: through fp32
        lambda a: a.kernel("scale_kernel")[(1,)](T(X), T(OUT), 100, 2.0, 0.5),
    ]
    outcomes = both(monkeypatch, cuda_archive, script)
    assert outcomes[0][0] == ("ok",) and outcomes[32][0] == ("ok",)
    for i, (outcome, seen) in enumerate(outcomes):
        if i in (0, 32):
            continue
        expected = ("TypeError",) if i == 4 else ("ArgumentError", "NoMatchingVariantError")
        assert outcome[0] in expected, (i, outcome)
        assert not seen, f"step {i} launched: {outcome}"
    msgs = [o[-1] for o, _ in outcomes]
    assert "missing argument 'n_elements'" in msgs[1]
    assert "takes 5 arguments" in msgs[2] and "unknown keyword argument 'BLOK'" in msgs[3]
    assert "launch options: num_warps, num_stages, num_ctas, maxnreg, stream" in msgs[3]
    assert msgs[4] == "add_kernel_launch() got multiple values for argument 'n_elements'"
    assert "'n_elements' (i32): 1099511627776 is out of range" in msgs[5]
    assert "x_ptr has dtype fp16" in msgs[10] and "x_ptr has dtype fp16" in msgs[11]
    assert "host (CPU) memory" in msgs[12] and "host (CPU) memory" in msgs[13]
    assert "on device 1 but 'x_ptr' is on device 0" in msgs[14]
    assert "must be a pointer" in msgs[15] and "must be a pointer" in msgs[16]
    assert "not a device address" in msgs[17]
    assert "grid must have 1 to 3 dimensions" in msgs[19] and "grid must have 1 to 3 dimensions" in msgs[20]
    assert all("grid" in m for m in msgs[21:26])
    assert "stream='fast'" in msgs[26] and "not a stream handle" in msgs[27]
    fields = [json.loads(o[1]) if len(o) == 3 and o[1] else None for o, _ in outcomes]
    name = "kernels:add_kernel"  # the archive's name of the kernel (module:qualname), on both paths
    assert fields[1] == {"kernel": name, "param": "n_elements"} and fields[2] == {"kernel": name, "param": None}
    assert fields[3] == {"kernel": name, "param": "BLOK"} and fields[5] == {"kernel": name, "param": "n_elements"}
    assert fields[12]["param"] == "x_ptr" and fields[14]["param"] == "y_ptr"
    assert all(fields[i] == {"kernel": name, "param": "grid"} for i in range(19, 26)), fields[19:26]
    assert fields[26] == fields[27] == {"kernel": None, "param": "stream"}  # one check for every kernel
    assert "num_warps=3, but this variant was compiled with num_warps=4" in msgs[28]
    assert "num_warps=8" in msgs[28] and msgs[28].count("\n  - ") == 3  # every variant, with what it has
    assert "cubin is sm_80, the device is sm_90" in msgs[29]
    assert "BLOCK=True, but this variant was compiled with BLOCK=1024" in msgs[30]
    assert "alpha expects a number" in msgs[31]
    assert "'alpha' (fp32)" in msgs[33] and "'alpha' (bf16)" in msgs[34]


# -- launch options select variants -------------------------------------------------------------------------
def test_launch_options_select_the_variant_built_with_them(monkeypatch, launch_archive):
    script: list[Step] = [
        lambda a: a.kernel("add_kernel")[(1,)](X, Y, OUT, 5),
        lambda a: a.kernel("add_kernel")[(1,)](X, Y, OUT, 5, num_warps=8),
        lambda a: a.kernel("add_kernel")[(1,)](X, Y, OUT, 5, num_warps=4, num_stages=2),
        lambda a: a.kernel("add_kernel")[(1,)](X, Y, OUT, 5, BLOCK=1024, num_warps=8, num_stages=3, num_ctas=1),
        lambda a: a.kernel("add_kernel")[(1,)](X, Y, OUT, 5, num_warps=8, num_stages=2),
        lambda a: a.kernel("add_kernel")[(1,)](X, Y, OUT, 5, maxnreg=128),
        lambda a: a.kernel("add_kernel").bind((1,), X, Y, OUT, 5, num_warps=8)(),
    ]
    outcomes = both(monkeypatch, launch_archive, script)
    blocks = [seen[-1][2][0] if seen else None for _, seen in outcomes]
    assert blocks[:4] == [128, 256, 128, 256] and blocks[6] == 256
    assert outcomes[4][0][0] == "NoMatchingVariantError"
    msg = outcomes[4][0][-1]
    assert "num_warps=8, num_stages=2" in msg  # the call, then what exists
    assert "num_stages=2, but this variant was compiled with num_stages=3" in msg
    assert "num_warps=8, but this variant was compiled with num_warps=4" in msg
    assert "maxnreg=128, but this variant was compiled with maxnreg=None" in outcomes[5][0][-1]


def test_select_for_a_named_target_on_a_cpu_machine(launch_archive, cuda_archive):
    k = karchive.open(str(launch_archive)).kernel("add_kernel")
    assert k.select(X, Y, OUT, 5, num_warps=8, device="cuda:90").abi.num_warps == 8
    assert k.select(X, Y, OUT, 5, num_stages=2, device="cuda:90").options["num_stages"] == 2
    with pytest.raises(NoMatchingVariantError, match="BLOCK=64, but this variant was compiled with BLOCK=1024"):
        k.select(X, Y, OUT, 5, BLOCK=64, device="cuda:90")  # a wrong BLOCK, not "no GPU"
    with pytest.raises(NoMatchingVariantError, match="built for cuda, the device is hip"):
        k.select(X, Y, OUT, 5, device="hip:gfx942")
    add = karchive.open(str(cuda_archive)).kernel("add_kernel")
    assert add.select(X, Y, OUT, 5, device="cuda:80").abi.binary_arch == "sm_80"
    assert add.select(X, Y, OUT, 5, device=DeviceInfo.describe_target("cuda:90")).abi.binary_arch == "sm_90a"


def test_omitted_constexprs_and_options_resolve_the_same_on_both_paths(monkeypatch, omit_archive):
    """Issue 19: what a call leaves out never picks a variant by order. EVEN with no default and two
    archived values is refused (naming EVEN and its values); EVEN with a default takes it; num_warps
    left out where the candidates are 2 and 8 (Triton's 4 not built) is refused, listing both. The
    same on both paths, and a refusal is not cached as a launch (the next, complete call launches)."""
    ev, evd = (lambda a: a.kernel("even_kernel")), (lambda a: a.kernel("even_default_kernel"))
    script: list[Step] = [
        lambda a: ev(a)[(4,)](X, OUT, 1000, BLOCK=256),
        lambda a: ev(a)[(4,)](X, OUT, 1000, BLOCK=256),  # the same key again: refused again, not cached
        lambda a: ev(a)[(4,)](X, OUT, 1000, BLOCK=256, EVEN=False),
        lambda a: ev(a)[(4,)](X, OUT, 1024, BLOCK=256, EVEN=True),
        lambda a: evd(a)[(4,)](X, OUT, 1000, BLOCK=256),  # EVEN=False by default: num_warps 2 or 8
        lambda a: evd(a)[(4,)](X, OUT, 1000, BLOCK=256, num_warps=8),
        lambda a: evd(a)[(4,)](X, OUT, 1024, BLOCK=256, EVEN=True),  # only num_warps=4 has EVEN=True
        lambda a: evd(a).bind((4,), X, OUT, 1000, BLOCK=256, num_warps=2)(),
    ]
    outcomes = both(monkeypatch, omit_archive, script)
    kinds = [o[0][0] for o in outcomes]
    assert kinds == [
        "NoMatchingVariantError",
        "NoMatchingVariantError",
        "ok",
        "ok",
        "NoMatchingVariantError",
        "ok",
        "ok",
        "ok",
    ], outcomes
    assert "omits constexpr 'EVEN', which has no default in the kernel's signature" in outcomes[0][0][-1]
    assert "EVEN = False, True" in outcomes[0][0][-1]
    assert "num_warps = 2, 8 (Triton's default: 4)" in outcomes[4][0][-1]
    assert all(not seen for (kind, *_), seen in outcomes if kind != "ok")  # nothing launched when refused
    blocks = [seen[-1][2][0] if seen else None for _, seen in outcomes]
    assert blocks[5] == 256 and blocks[6] == 128 and blocks[7] == 64  # 8, 4 and 2 warps of 32 threads


def test_the_build_records_signature_defaults(omit_archive):
    """The producer records, per parameter, whether the kernel's signature gives it a default (and which)."""
    arc = karchive.open(str(omit_archive))
    even = arc.variants("even_kernel")[0].params
    with_default = arc.variants("even_default_kernel")[0].params
    assert [(p.name, p.has_default) for p in even] == [
        ("x_ptr", False),
        ("out_ptr", False),
        ("n", False),
        ("BLOCK", False),
        ("EVEN", False),
    ]
    assert (with_default[4].has_default, with_default[4].default) == (True, False)
    assert with_default[4].to_json()["default"] is False and even[4].to_json()["required"] is True


def test_select_refuses_host_memory_for_a_named_target(omit_archive):
    """select(..., device="cuda:90") applies the launch's argument checks: a host array is refused."""
    np = pytest.importorskip("numpy")
    k = karchive.open(str(omit_archive)).kernel("even_kernel")
    x, out = np.zeros(1024, np.float32), np.zeros(1024, np.float32)
    with pytest.raises(ArgumentError, match="host .*memory"):
        k.select(x, out, 1024, BLOCK=256, EVEN=True, device="cuda:90")
    with pytest.raises(ArgumentError, match="host .*memory"):
        k.select(x, out, 1024, BLOCK=256, EVEN=True, device=DeviceInfo.describe_target("cuda:90"))
    with pytest.raises(ArgumentError, match="host .*memory"):  # a device index: refused before any driver
        k.select(x, out, 1024, BLOCK=256, EVEN=True, device=0)
    with pytest.raises(ArgumentError, match="on device 1"):
        k.select(T(X, device=0), T(OUT, device=1), 1024, BLOCK=256, EVEN=True, device="cuda:90")
    assert k.select(T(X), T(OUT), 1024, BLOCK=256, EVEN=True, device="cuda:90").constexprs["EVEN"] is True


# -- bound launchers, retries, threads ----------------------------------------------------------------------
def test_bound_launchers_behave_the_same(monkeypatch, cuda_archive):
    held: dict[str, Any] = {}

    def bind(a):
        held["b"] = a.kernel("add_kernel").bind((5,), X, Y, OUT, 10, stream=7)
        held["s"] = a.kernel("scale_kernel").bind((2,), T(X, BF16), T(OUT, BF16), 100, 1, 0.5)

    script: list[Step] = [
        bind,
        lambda a: held["b"](),
        lambda a: held["b"](Y, X, OUT, 11),
        lambda a: held["b"](T(Y), T(X), T(OUT), 12),
        lambda a: held["b"].set("n_elements", 13),
        lambda a: held["b"].launch(),
        lambda a: held["b"].set_grid((2, 3)),
        lambda a: held["b"].set_stream(TorchLikeStream()),
        lambda a: held["b"](),
        lambda a: held["b"](X, Y, OUT + 8, 10),  # misaligned for the :16 variant it is bound to
        lambda a: held["b"](X, Y, OUT),
        lambda a: held["b"](X, Y, OUT, 1 << 40),
        lambda a: held["b"](X, Y, "out", 1),
        lambda a: held["b"].set("out_ptr", OUT + 4),
        lambda a: held["b"].set("nope", 1),
        lambda a: held["b"](),  # the failed calls changed nothing
        lambda a: held["s"](),
        lambda a: held["s"](T(X, BF16), T(OUT, BF16), 100, 0.3333),
        lambda a: held["b"].set_grid((0,)),
        lambda a: held["b"](),
    ]
    outcomes = both(monkeypatch, cuda_archive, script)
    runs = [seen[-1] for o, seen in outcomes if seen]
    assert runs[0][1] == (5, 1, 1) and runs[0][4] == 7
    assert runs[1][5][:4] == (q(Y), q(X), q(OUT), struct.pack("<i", 11))
    assert runs[2][5][:4] == (q(Y), q(X), q(OUT), struct.pack("<i", 12))
    assert runs[3][5][3] == struct.pack("<i", 13)
    assert runs[4][1] == (2, 3, 1) and runs[4][4] == 0xABC
    errors = [o for o, _ in outcomes[9:15]]
    assert all(e[0] == "ArgumentError" for e in errors), errors
    assert "not 16-byte aligned" in errors[0][-1] and "takes 4 values" in errors[1][-1]
    assert "not 16-byte aligned" in errors[4][-1] and "no parameter 'nope'" in errors[5][-1]
    assert (
        json.loads(errors[1][1])["param"] is None and json.loads(errors[5][1])["param"] == "nope"
    )  # the bound launcher's
    assert runs[5] == runs[4]  # nothing changed by the refused calls
    assert runs[7][5][3] == struct.pack("<H", bf16_bits(0.3333))  # (stride == 1 is compiled in)
    assert outcomes[-1] == (("ok",), [])  # empty grid: nothing launched


def test_driver_errors_retry_in_context_then_raise(monkeypatch, cuda_archive):
    """A thread without a current context is refused once, then launches in the device's primary context
    (both paths); any other driver error is a LaunchError naming the driver's error."""
    for path in PATHS:
        if path == launch_path.EXTENSION and launch_path.extension() is None:
            continue
        with fake_cuda(monkeypatch, path) as (rec, backend):
            arc = karchive.open(str(cuda_archive))
            register_sizes(rec, arc)
            add = arc.kernel("add_kernel")
            add[(1,)](X, Y, OUT, 5)
            assert [a.result for a in rec.attempts] == [201, 0]  # refused without a context, then launched
            rec.results[:] = [701]
            with pytest.raises(KarchiveError, match=r"CUDA_ERROR_FAKE_701.*grid=\(3, 1, 1\)"):
                add[(3,)](X, Y, OUT, 5)
            b = add.bind((2,), X, Y, OUT, 5)
            rec.results[:] = [701]
            with pytest.raises(KarchiveError, match="CUDA_ERROR_FAKE_701"):
                b()
            b()
            assert [a.result for a in rec.attempts[-3:]] == [701, 701, 0]


@pytest.mark.parametrize("path", PATHS)
def test_eight_threads_on_their_own_streams(monkeypatch, cuda_archive, path):
    if path == launch_path.EXTENSION and launch_path.extension() is None:
        pytest.skip("the compiled launcher is not built here")
    with fake_cuda(monkeypatch, path) as (rec, backend):
        arc = karchive.open(str(cuda_archive))
        register_sizes(rec, arc)
        add = arc.kernel("add_kernel")
        add[(1,)](X, Y, OUT, 1)
        errors: list[BaseException] = []
        start = threading.Barrier(8)

        def work(t: int) -> None:
            try:
                start.wait()
                for i in range(50):
                    add[(t + 1,)](T(X + 16 * t), T(Y), T(OUT + 16 * i), t * 1000 + i, stream=0x1000 + t)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert not errors, errors
        done = [a for a in rec.launches() if a.stream >= 0x1000]
        assert len(done) == 8 * 50
        for a in done:  # every launch carries its own thread's values, never another's
            t = a.stream - 0x1000
            n = struct.unpack("<i", a.params[3])[0]
            assert a.grid == (t + 1, 1, 1) and n // 1000 == t
            assert a.params[0] == q(X + 16 * t) and a.params[2] == q(OUT + 16 * (n % 1000))


# -- the path itself ----------------------------------------------------------------------------------------
def test_the_python_path_is_a_plain_function_that_shows_in_tracebacks(monkeypatch, cuda_archive):
    """No generated source: the Python path is ``_pypath.build``'s function, named like the launch function."""
    with fake_cuda(monkeypatch, launch_path.PYTHON) as (rec, backend):
        add = karchive.open(str(cuda_archive)).kernel("add_kernel")
        assert add._run.__name__ == "add_kernel_launch" and add._run.__module__ == "karchive.runtime.launch._pypath"
        with pytest.raises(ArgumentError) as info:
            add[(1,)](X, Y, OUT)
        frames = [(pathlib.Path(f.filename).name, f.name) for f in traceback.extract_tb(info.value.__traceback__)]
        assert ("_pypath.py", "launch") in frames and ("kernel.py", "_miss") in frames  # a real file, then the miss


def test_kernels_and_their_compiled_dispatchers_are_collected(monkeypatch, cuda_archive):
    if launch_path.extension() is None:
        pytest.skip("the compiled launcher is not built here")
    with fake_cuda(monkeypatch, launch_path.EXTENSION) as (rec, backend):
        register_sizes(rec, karchive.open(str(cuda_archive)))
        arc = karchive.open(str(cuda_archive))
        add = arc.kernel("add_kernel")
        add[(1,)](X, Y, OUT, 5)
        assert type(add._run).__name__ == "Dispatcher" and add.cached_calls == 1
        ref = weakref.ref(add)
        del add, arc
        gc.collect()
        assert ref() is None  # kernel -> dispatcher -> kernel._miss cycles are visible to the collector


def test_forcing_the_python_path_and_requiring_the_extension(monkeypatch, cuda_archive):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KARCHIVE_LAUNCH_PATH": "python"}
    code = (
        "import karchive, json; from karchive.runtime import launch_path as p; "
        "k = karchive.open(%r).kernel('add_kernel'); print(json.dumps([p.status().active, k.launch_path]))"
        % str(cuda_archive)
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ['["python",', '"python"]']
    monkeypatch.setattr(launch_path, "_loaded", (None, "not built (a test says so)"))
    with launch_path.forced(launch_path.AUTO):
        assert karchive.open(str(cuda_archive)).kernel("add_kernel").launch_path == launch_path.PYTHON
    with launch_path.forced(launch_path.EXTENSION):
        k = karchive.open(str(cuda_archive)).kernel("add_kernel")
        with pytest.raises(
            RuntimeLoadError,
            match="KARCHIVE_LAUNCH_PATH=extension asks for karchive's compiled launcher, which is not built",
        ):
            k[(1,)](X, Y, OUT, 5)


@pytest.mark.skipif(
    os.environ.get("KARCHIVE_REQUIRE_EXTENSION") != "1",
    reason="set KARCHIVE_REQUIRE_EXTENSION=1 where the compiled launcher must be built (CI)",
)
def test_the_compiled_launcher_is_built_where_required():
    status = launch_path.status()
    assert status.built, status.detail


def test_without_the_extension_everything_takes_the_python_path():
    """Where the extension was not built (no compiler), nothing imports it and every kernel is on the Python path."""
    code = (
        "import sys, json\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'karchive.runtime._fastlaunch':\n"
        "            raise ImportError('not built (this test)')\n"
        "sys.meta_path.insert(0, Block())\n"
        "from karchive.runtime import launch_path\n"
        "from karchive.runtime.launch import kernel as dispatch\n"
        "s = launch_path.status()\n"
        "print(json.dumps([s.built, s.active, launch_path.choose(), dispatch.Kernel.__getitem__.__module__]))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop(launch_path.ENV, None)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == '[false, "python", "python", "karchive.runtime.launch.kernel"]'
