"""The Python launch path as a plain function (``runtime/launch/_pypath.py``), driven without a GPU or an archive.

The kernel here is a stand-in with a plan and recording callbacks, so what is checked is the function's own
binding and key: which calls hit the cache, which go to the miss or the slow path, what reaches the launch.
(tests/test_runtime_fastpath.py compares the whole path with the compiled one, call by call.)
"""

from __future__ import annotations

import types
from typing import Any

import pytest

from karchive.runtime.launch._plan import INT, PTR, VALUE, KernelPlan, ParamPlan
from karchive.runtime.launch._pypath import build
from karchive.runtime.select import MISSING


class Recorder:
    def __init__(self, plan: KernelPlan) -> None:
        self.launches: list[tuple[Any, Any, list[Any]]] = []
        self.misses: list[tuple[tuple, dict]] = []
        self.slow: list[tuple[Any, tuple, dict]] = []
        self.result = object()  # what a launch returns (Kernel.set_result's object)
        entry = types.SimpleNamespace(
            meta={"BLOCK": 64},
            device=0,
            result=self.result,
            effect=None,
            launch=lambda grid, stream, values: self.launches.append((grid, stream, values)),
        )
        self.kernel = types.SimpleNamespace(
            name="pkg.ops:k",
            plan=plan,
            _py_cache={},
            takes_stream=True,
            _miss=lambda values, options: (
                self.misses.append((values, options)) or types.SimpleNamespace(entry=entry, stream_fn=None)
            ),
            _slow=lambda grid, values, kwargs: self.slow.append((grid, values, kwargs)),
            _grid_of=lambda grid, meta, values: grid({**dict(zip(plan.names, values)), **meta}),
        )


PLAN = KernelPlan(
    "pkg.ops:k",
    (ParamPlan("x", PTR, 1, True), ParamPlan("grid", INT, 2, True), ParamPlan("BLOCK", VALUE, 0, False)),
    ("num_warps",),
    (0, 1),
)


def test_binding_key_and_call_values():
    rec = Recorder(PLAN)
    run = build(rec.kernel)  # type: ignore[arg-type]
    assert run.__name__ == "k_launch"
    assert run((1,), 0x1000, 7, BLOCK=64) is rec.result  # the entry's result, on a miss and on a hit
    assert run((1,), 0x1000, 7, BLOCK=64) is rec.result
    run((1,), 0x2000, grid=9, BLOCK=64)  # a parameter named like run's own first one binds by keyword
    run((2,), 0x1000, 1, BLOCK=64)  # == 1 is part of the key: a second miss
    run(lambda m: (m["grid"] * m["BLOCK"],), x=0x1008, grid=3, BLOCK=64, stream=5)  # misaligned: a third
    assert [v for v, _ in rec.misses] == [(0x1000, 7, 64), (0x1000, 1, 64), (0x1008, 3, 64)]
    assert rec.launches == [
        ((1,), 0, [0x1000, 7]),
        ((1,), 0, [0x1000, 7]),
        ((1,), 0, [0x2000, 9]),
        ((2,), 0, [0x1000, 1]),
        ((192,), 5, [0x1008, 3]),
    ]
    assert len(rec.kernel._py_cache) == 3 and not rec.slow


def test_options_unknown_keywords_and_values_given_twice():
    rec = Recorder(PLAN)
    run = build(rec.kernel)  # type: ignore[arg-type]
    run((1,), 0x1000, 7, BLOCK=64)
    run((1,), 0x1000, 7, BLOCK=64, num_warps=4)  # a launch option given: its value joins the key
    assert rec.misses[1] == ((0x1000, 7, 64), {"num_warps": 4})
    run((1,), 0x1000, 7, BLOCK=64, num_warps=MISSING)  # MISSING is "not given": the first key again
    assert len(rec.misses) == 2 and len(rec.launches) == 3
    run((1,), 0x1000, 7, BLOCK=64, BLOK=1)
    run((1,), 0x1000, 7, 64, 5)
    run((1,), 0x1000, 7, 64, 5, stream=3)
    # the slow path gets stream only where the call gave one (a served kernel hands the call on as given)
    assert [s[2] for s in rec.slow] == [{"BLOCK": 64, "BLOK": 1}, {}, {"stream": 3}]
    with pytest.raises(TypeError, match=r"^k_launch\(\) got multiple values for argument 'grid'$"):
        run((1,), 0x1000, 7, grid=7)
    run((1,), object(), 7, BLOCK=64)  # no pointer to read: the slow path says why
    assert rec.slow[-1][1] == (rec.slow[-1][1][0], 7, 64) and len(rec.launches) == 3
