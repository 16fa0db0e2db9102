"""The runtime computes the autotune key exactly as Triton's own ``Autotuner.run`` does (issue 23, item 3).

Triton's real Autotuner/Heuristics objects run on the CPU here: the benchmark is replaced by fixed timings
and the innermost JIT launch by a no-op, so ``tuner.cache`` holds the keys Triton computed. karchive's
runtime gets the records an ahead-of-time build stores (and, for the older-archive path, records without
``outer_heuristics``) and must compute the same keys, for every decorator order and key type.
"""

from __future__ import annotations

import math
import pathlib
import types

import pytest
from support import needs_triton

pytestmark = needs_triton
KERNELS = pathlib.Path(__file__).resolve().parent / "wrapped_kernels.py"


class DType:
    def __init__(self, name: str) -> None:
        self.name_ = name

    def __str__(self) -> str:
        return self.name_


class Tensor:
    def __init__(self, dtype: str = "torch.float32") -> None:
        self.dtype = DType(dtype)

    def data_ptr(self) -> int:
        return 0x7F00_0000_0000

    def zero_(self):
        return self

    def clone(self):
        return self

    def copy_(self, other):
        return self


def _triton_key(obj, monkeypatch, args, kwargs):
    """The key Triton's autotuner inside ``obj`` computes for ``obj[grid](*args, **kwargs)``."""
    from karchive.producer.compile.kernel_ref import unwrap
    from karchive.producer.compile.wrapped import stack_of

    stack = stack_of(obj)
    tuner = stack.tuner
    monkeypatch.setattr(unwrap(obj), "run", lambda *a, **k: None)
    monkeypatch.setattr(tuner, "_bench", lambda *a, config, **k: [float(config.num_warps)] * 3)
    tuner.cache.clear()
    obj[(1,)](*args, **kwargs)
    (key,) = list(tuner.cache)
    return key


def _runtime(obj, *, legacy_entries=None):
    """An AutotuneResolver over the records an AOT build stores for ``obj`` (no variants: keys only)."""
    from karchive.format.autotune import AutotuneRecord
    from karchive.format.heuristics import parse_record
    from karchive.producer.compile.kernel_ref import unwrap
    from karchive.producer.compile.wrapped import _records, stack_of
    from karchive.runtime.autotuned import AutotuneResolver

    at, he = _records(stack_of(obj), [], "test")
    if legacy_entries is not None:  # an archive written before outer_heuristics existed, by a capture
        at = {k: v for k, v in at.items() if k != "outer_heuristics"}
        at["entries"] = legacy_entries
    base = types.SimpleNamespace(archive=None, name=at["kernel"], param_names=list(unwrap(obj).arg_names), variants=[])
    heur = [parse_record(he, "h")] if he else []
    return AutotuneResolver(base, [AutotuneRecord.from_json(at)], heuristics=heur)


T16, T32 = "torch.float16", "torch.float32"
CALLS = [
    ((Tensor(), None, Tensor(), 1000, 1e-5, True, "fp16", None), {}),
    ((Tensor(T16), Tensor(T16), Tensor(), 1024, 0.5, False, "fp32", 3), {}),
    ((Tensor(), None, Tensor(), 7), {"eps": math.inf, "flag": False, "mode": None, "opt": 2.5}),
    (
        (Tensor(),),
        {"opt": None, "mode": "x", "flag": True, "eps": 1.0, "D": 4096, "out_ptr": Tensor(T16), "b_ptr": Tensor(T16)},
    ),  # keywords in another order: Triton's dtype order follows them
]


@pytest.mark.parametrize("args,kwargs", CALLS)
def test_heuristics_above_and_below_an_autotuner(monkeypatch, args, kwargs):
    import wrapped_kernels as wk

    from karchive.format.autotune import normalize_key

    want = normalize_key(_triton_key(wk.keyed, monkeypatch, args, kwargs))
    assert _runtime(wk.keyed).tuning_key(*args, **kwargs) == want
    assert len(want) == 7 + sum(1 for v in (*args, *kwargs.values()) if isinstance(v, Tensor))


def test_numpy_scalars_and_dtype_values_in_keys(monkeypatch):
    np = pytest.importorskip("numpy")
    import triton.language as tl
    import wrapped_kernels as wk

    from karchive.format.autotune import normalize_key

    args = (Tensor(), None, Tensor(), np.int64(256), np.float32(0.25), np.bool_(True), tl.float16, None)
    want = normalize_key(_triton_key(wk.keyed, monkeypatch, args, {}))
    got = _runtime(wk.keyed).tuning_key(*args)
    assert got == want
    assert "int64" in want and "float32" in want  # numpy scalars have a dtype: Triton appends it too
    assert got[:3] == [256, 0.25, True] and got[3] == "fp16"


@pytest.mark.parametrize(
    "name,args",
    [
        ("h_over_at", (Tensor(), Tensor(), None, 4096, 1.5)),
        ("h_over_at", (Tensor(), Tensor(), Tensor(T16), 4096, 1.5)),
        ("at_over_h", (Tensor(), Tensor(), 1000)),
        ("at_copy", (Tensor(), Tensor(), 64)),
    ],
)
def test_each_stacking_order(monkeypatch, name, args):
    import wrapped_kernels as wk

    from karchive.format.autotune import normalize_key

    obj = getattr(wk, name)
    want = normalize_key(_triton_key(obj, monkeypatch, args, {}))
    assert _runtime(obj).tuning_key(*args) == want


def test_an_older_record_learns_that_heuristics_sit_above(monkeypatch):
    """The flash-linear-attention failure: recorded keys hold the heuristics value, the runtime left it out."""
    import wrapped_kernels as wk

    from karchive.format.autotune import normalize_key

    args = (Tensor(), Tensor(), None, 4096, 1.5)
    want = normalize_key(_triton_key(wk.h_over_at, monkeypatch, args, {}))
    assert want == [4096, False, T32, T32]
    k = _runtime(wk.h_over_at, legacy_entries=[{"key": want, "config": 1, "variant": None}])
    assert k.outer is None
    assert k.tuning_key(*args) == want and k.outer == frozenset({"IS_VARLEN"})


class _Dtype:
    """numpy's name for the runtime's pointer check, Triton's MockTensor spelling for str() (what capture saw)."""

    def __init__(self, name: str, text: str) -> None:
        self.name, self._text = name, text

    def __str__(self) -> str:
        return self._text


class _DevBuf:
    def __init__(self, addr: int) -> None:
        self.addr, self.dtype = addr, _Dtype("float32", "fp32")

    def data_ptr(self) -> int:
        return self.addr

    def get_device(self) -> int:
        return 0


def test_a_captured_stack_relaunches_with_the_heuristics_in_its_key(triton_cache_dir, tmp_path):
    """Capture of heuristics over autotune (flash-linear-attention's pattern) on the fake GPU, relaunch keys."""
    import wrapped_kernels as wk
    from capture_fakes import fake_gpu, fresh, ptr

    import karchive
    from karchive.runtime.device import DeviceInfo

    fresh(wk.h_over_at)
    with fake_gpu(timings=[3.0, 1.0]), karchive.capture("fla-like", version="1") as cap:
        wk.h_over_at[(1,)](ptr(), ptr(), None, 4096, 1.5)
        wk.h_over_at[(1,)](ptr(), ptr(), ptr(), 4096, 1.5)
    (record,) = cap.autotune.to_json()
    assert record["outer_heuristics"] == ["IS_VARLEN"]
    assert sorted(e["key"] for e in record["entries"]) == [
        [4096, False, "fp32", "fp32"],
        [4096, True, "fp32", "fp32", "fp32"],
    ]
    cap.save(tmp_path / "fla.karc")
    k = karchive.open(str(tmp_path / "fla.karc")).kernel("h_over_at")
    h100 = DeviceInfo.describe_target("cuda:90", shared_optin=227 * 1024)
    A = 0x7F00_0000_0000
    by_key = {tuple(e["key"]): e["variant"] for e in record["entries"]}
    plain = k.select(_DevBuf(A), _DevBuf(A + 4096), None, 4096, 1.5, device=h100)
    assert plain.key == by_key[(4096, False, "fp32", "fp32")] and plain.constexprs["IS_VARLEN"] is False
    varlen = k.select(_DevBuf(A), _DevBuf(A + 4096), _DevBuf(A + 8192), 4096, 1.5, device=h100)
    assert varlen.key == by_key[(4096, True, "fp32", "fp32", "fp32")] and varlen.constexprs["IS_VARLEN"] is True
