"""Tuned kernels, heuristics kernels and callable grids on the compiled launch path (issue 33).

The compiled dispatcher of a kernel with a resolver keys what the resolver reads and runs it only on a miss;
the pure-Python path runs the resolver on every call. Random call sequences run on both paths (a recording
stand-in for the driver, runtime_support.FakeCuda: TEST DOUBLE, no GPU here) and must launch the same variant
with the same grid and parameter bytes, and raise the same errors. Callable grids are remembered by what they
read: a change of any of it evaluates the grid again. ``Kernel.set_result`` is what a launch returns.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

import pytest
from runtime_support import fake_cuda, launched_variant, register_sizes
from support import needs_triton

import karchive
from karchive.errors import KarchiveError
from karchive.runtime import args, launch_path

pytestmark = needs_triton
ROOT = Path(__file__).resolve().parent.parent
X, Y, OUT = 0x7F00_0000_1000, 0x7F00_0000_2000, 0x7F00_0000_3000


class DType:
    def __init__(self, name: str) -> None:
        self.name_ = name

    def __str__(self) -> str:
        return self.name_

    __repr__ = __str__


F32, F16 = DType("torch.float32"), DType("torch.float16")


class FakeTensor:
    """Stand-in for torch.Tensor: data_ptr(), dtype, get_device(), shape (registered as the tensor type)."""

    def __init__(self, ptr: int, dtype: DType = F32, n: int = 4096) -> None:
        self._ptr, self._dtype, self.shape = ptr, dtype, [n]

    def data_ptr(self) -> int:
        return self._ptr

    @property
    def dtype(self) -> DType:
        return self._dtype

    def get_device(self) -> int:
        return 0


@pytest.fixture(autouse=True)
def tensor_type():
    args.set_tensor_type(FakeTensor)
    yield
    args.set_tensor_type(None)


@pytest.fixture(scope="module")
def tuned_archive(tmp_path_factory) -> Path:
    sys.path.insert(0, str(ROOT / "tools"))
    from tuned_bench import build

    return build(tmp_path_factory.mktemp("tuned") / "tuned.karc")


@pytest.fixture(scope="module")
def shape_archive(tmp_path_factory) -> Path:
    """``add_heur`` whose heuristic reads a tensor's shape: not a key the C code holds (Python every launch)."""
    from karchive.producer.build.pack import ArchiveBuilder
    from karchive.producer.compile.aot import VariantRequest, compile_variant

    src = ROOT / "tests" / "gpu" / "extra_kernels.py"
    vs = [
        compile_variant(
            VariantRequest(
                f"{src}:add_heur", "*fp32:16, *fp32:16, *fp32:16, i32", "cuda:90", {"BLOCK": b}, {"num_warps": 4}
            )
        )
        for b in (512, 1024)
    ]
    expr = [
        "if",
        [">", ["index", ["probe", ["arg", "x_ptr"], "shape"], ["const", 0]], ["const", 2048]],
        ["const", 1024],
        ["const", 512],
    ]
    b = ArchiveBuilder(
        "shape",
        "1",
        heuristics=[
            {"kernel": "extra_kernels:add_heur", "names": ["BLOCK"], "cases": {"BLOCK": []}, "exprs": {"BLOCK": expr}}
        ],
    )
    b.extend(vs)
    out = tmp_path_factory.mktemp("shape") / "shape.karc"
    b.write(out)
    return out


def _grid(meta: dict) -> tuple[int]:
    return ((meta["n_elements"] + meta["BLOCK"] - 1) // meta["BLOCK"],)


def play(monkeypatch, archive: Path, path: str, calls: list[tuple[str, Any, tuple, dict]]) -> list[tuple]:
    """Each call on a fresh archive with kernels on ``path``: (outcome, (variant, grid, params) launched)."""
    if path == launch_path.EXTENSION and launch_path.extension() is None:
        pytest.skip(f"the compiled launcher is not built here: {launch_path.status().detail}")
    with fake_cuda(monkeypatch, path) as (rec, _backend):
        arc = karchive.open(str(archive))
        register_sizes(rec, arc)
        out = []
        for name, grid, a, kw in calls:
            before = len(rec.attempts)
            try:
                arc.kernel(name)[grid](*a, **kw)
                outcome: tuple = ("ok",)
            except Exception as exc:  # compared between the paths
                fields = json.dumps(exc.fields, default=str, sort_keys=True) if isinstance(exc, KarchiveError) else ""
                outcome = (type(exc).__name__, fields, str(exc))
            seen = [(launched_variant(rec, arc, x).key, x.grid, x.block, x.params) for x in rec.attempts[before:]]
            out.append((outcome, seen))
        ks = {n: arc.kernel(n) for n in arc.kernels()}
        assert all(k.launch_path == path for k in ks.values())
        return out


def both(monkeypatch, archive: Path, calls: list) -> list[tuple]:
    py = play(monkeypatch, archive, launch_path.PYTHON, calls)
    ext = play(monkeypatch, archive, launch_path.EXTENSION, calls)
    for i, (a, b) in enumerate(zip(py, ext)):
        assert a == b, f"call {i} {calls[i]}: the paths differ:\n  python:    {a}\n  extension: {b}"
    return py


def _random_calls(rnd: random.Random, count: int) -> list[tuple[str, Any, tuple, dict]]:
    calls = []
    for _ in range(count):
        name = rnd.choice(["add_tuned", "add_heur", "add_stacked"])
        n = rnd.choice([4096, 4096, 3000, 1024, 1, 100, 8192, 2048])
        x: Any = rnd.choice([X, FakeTensor(X), FakeTensor(X, F16), FakeTensor(X + 8)])
        kw: dict[str, Any] = {}
        if rnd.random() < 0.15:
            kw["BLOCK"] = rnd.choice([512, 1024])
        if name == "add_stacked" and rnd.random() < 0.15:
            kw["EVEN"] = rnd.choice([True, False])
        if rnd.random() < 0.05:
            kw["BLOK"] = 1  # an unknown keyword
        grid = rnd.choice([(4,), (2, 2), _grid, lambda m, k=n: (k % 7 + 1,)])
        calls.append((name, grid, (x, Y, OUT, n), kw))
    return calls


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_tuned_and_heuristic_launches_match_the_python_resolver(monkeypatch, tuned_archive, seed):
    """The compiled path's remembered resolutions launch what the Python path's per-call resolution launches,
    and raise what it raises (unrecorded keys, partial meta-parameters, values that do not pack)."""
    outcomes = both(monkeypatch, tuned_archive, _random_calls(random.Random(seed), 60))
    kinds = {o[0][0] for o in outcomes}
    assert "ok" in kinds and len(kinds) > 1  # launches and refusals both exercised
    assert any(seen for _o, seen in outcomes)


def test_the_resolver_runs_only_on_a_miss(monkeypatch, tuned_archive, shape_archive):
    with fake_cuda(monkeypatch, launch_path.EXTENSION) as (rec, _b):
        if launch_path.extension() is None:
            pytest.skip("the compiled launcher is not built here")
        arc = karchive.open(str(tuned_archive))
        register_sizes(rec, arc)
        for name in ("add_tuned", "add_heur", "add_stacked"):
            k = arc.kernel(name)
            seen: list[Any] = []
            resolve = k.resolver.resolve
            monkeypatch.setattr(
                k.resolver, "resolve", lambda *a, _r=resolve, _s=seen, **kw: _s.append(a) or _r(*a, **kw)
            )
            for x in (X, X, X + 0x100, X + 0x100, X):  # addresses the resolver does not read
                k[(4,)](x, Y, OUT, 4096)
            assert len(seen) == 1 and type(k._run).__name__ == "Dispatcher", name
            k[(4,)](X, Y, OUT, 2048)  # a value it reads
            assert len(seen) == 2, name
        # a heuristic reading a shape: the key cannot hold it, so the resolver runs on every launch
        sarc = karchive.open(str(shape_archive))
        register_sizes(rec, sarc)
        k = sarc.kernel("add_heur")
        assert type(k._run).__name__ == "function"
        before = len(rec.launches())
        for n, want in ((4096, 1024), (1000, 512), (4096, 1024)):
            k[(1,)](FakeTensor(X, n=n), Y, OUT, 16)
            assert launched_variant(rec, sarc, rec.launches()[-1]).constexprs["BLOCK"] == want
        assert len(rec.launches()) == before + 3


def test_a_numpy_scalar_goes_to_python_where_the_autotune_key_reads_dtypes(monkeypatch, tuned_archive):
    np = pytest.importorskip("numpy")
    outcomes = both(
        monkeypatch,
        tuned_archive,
        [("add_tuned", (4,), (X, Y, OUT, np.int32(4096)), {}), ("add_tuned", (4,), (X, Y, OUT, 4096), {})],
    )
    assert outcomes[1][0] == ("ok",)


# -- callable grids ---------------------------------------------------------------------------------------
G = 2


def _global_grid(meta: dict) -> tuple[int]:
    return (G,)


def _closure_grid(k: int) -> Any:
    return lambda meta: (k * meta["BLOCK"] // 1024,)


def _module_closure_grid() -> Any:
    import math as local_math  # a module in the closure (``import triton`` inside a function): compared by identity

    return lambda meta: (local_math.ceil(meta["n_elements"] / meta["BLOCK"]),)


def test_a_remembered_grid_is_evaluated_again_when_what_it_read_changes(monkeypatch, tuned_archive):
    global G
    from karchive.runtime.launch import _native

    if launch_path.extension() is None:
        pytest.skip("the compiled launcher is not built here")
    evaluated: list[Any] = []
    real = _native.evaluate_reading
    monkeypatch.setattr(_native, "evaluate_reading", lambda *a: evaluated.append(a[0]) or real(*a))
    with fake_cuda(monkeypatch, launch_path.EXTENSION) as (rec, _b):
        arc = karchive.open(str(tuned_archive))
        register_sizes(rec, arc)
        k = arc.kernel("add_tuned")

        def grids(*calls: tuple[Any, int]) -> list[tuple[int, int, int]]:
            start = len(rec.launches())
            for grid, n in calls:
                k[grid](X, Y, OUT, n)
            return [a.grid for a in rec.launches()[start:]]

        assert grids((_grid, 4096), (_grid, 4096), (_grid, 4096)) == [(4, 1, 1)] * 3
        assert len(evaluated) == 1  # remembered: what it read (n_elements, BLOCK) did not change
        assert grids((_grid, 4097)) == [(5, 1, 1)] and len(evaluated) == 2  # a parameter it read changed
        assert grids((_grid, 4097), (_grid, 4097)) == [(5, 1, 1)] * 2 and len(evaluated) == 2
        assert grids((_closure_grid(2), 4096), (_closure_grid(2), 4096), (_closure_grid(3), 4096)) == [
            (2, 1, 1),
            (2, 1, 1),
            (3, 1, 1),
        ]  # new function objects, one code: the closure's value decides
        assert len(evaluated) == 4
        assert grids((_module_closure_grid(), 4096), (_module_closure_grid(), 4096)) == [(4, 1, 1)] * 2
        assert len(evaluated) == 5
        G = 2
        assert grids((_global_grid, 4096), (_global_grid, 4096)) == [(2, 1, 1)] * 2 and len(evaluated) == 6
        G = 7  # a global it names was rebound
        assert grids((_global_grid, 4096), (_global_grid, 4096)) == [(7, 1, 1)] * 2 and len(evaluated) == 7
        G = 2
        # not remembered: a tensor read, the mapping unpacked, a default value, a callable object
        t = FakeTensor(X)
        never = [
            lambda m: (len(t.shape),),
            lambda m: (len({**m}) // 100 + 1,),
            lambda m, d=3: (d,),
            lambda m: (m.setdefault("n_elements", 1) // 1024,),
            type("G", (), {"__call__": lambda self, m: (3,)})(),
        ]
        for g in never:
            before = len(evaluated)
            grids((g, 4096), (g, 4096))
            assert len(evaluated) == before + 2, g
        assert k.cached_calls == 2  # n_elements 4096 and 4097: the autotune key reads it


def test_a_remembered_grid_is_per_entry_meta(monkeypatch, tuned_archive):
    """Two keys leading to two variants (BLOCK 1024 and 512): each key remembers its own answer."""
    if launch_path.extension() is None:
        pytest.skip("the compiled launcher is not built here")
    with fake_cuda(monkeypatch, launch_path.EXTENSION) as (rec, _b):
        arc = karchive.open(str(tuned_archive))
        register_sizes(rec, arc)
        k = arc.kernel("add_tuned")
        for block in (1024, 512, 1024, 512):
            k[_grid](X, Y, OUT, 4096, BLOCK=block)
        assert [a.grid[0] for a in rec.launches()] == [4, 8, 4, 8]


# -- what a launch returns ------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", [launch_path.PYTHON, launch_path.EXTENSION])
def test_a_launch_returns_the_result_set_for_its_variant(monkeypatch, tuned_archive, path):
    if path == launch_path.EXTENSION and launch_path.extension() is None:
        pytest.skip("the compiled launcher is not built here")
    with fake_cuda(monkeypatch, path) as (rec, _b):
        arc = karchive.open(str(tuned_archive))
        register_sizes(rec, arc)
        k = arc.kernel("add_tuned")
        assert k[(4,)](X, Y, OUT, 4096) is None  # nothing set
        by_block = {v.constexprs["BLOCK"]: v for v in arc.variants("add_tuned")}
        r1024, r512 = object(), object()
        k.set_result(by_block[1024], r1024)  # after the entry was loaded: the loaded entries follow
        k.set_result(by_block[512].key, r512)  # before: set when it loads
        for _ in range(2):
            assert k[(4,)](X, Y, OUT, 4096) is r1024  # the resolver's choice for 4096
            assert k[(4,)](X, Y, OUT, 4096, BLOCK=512) is r512
            assert k[(0,)](X, Y, OUT, 4096) is r1024  # an empty grid launches nothing, returns the same
            assert k[_grid](X, Y, OUT, 4096) is r1024
            assert k.run(X, Y, OUT, 4096, grid=(4,)) is r1024
            assert k[(4,)](X + 0x100, Y, OUT, 4096, stream=0) is r1024  # a stream given
        plain = arc.kernel("add_heur")
        v = plain.select(X, Y, OUT, 4096)
        plain.set_result(v, "compiled")
        assert plain[(4,)](X, Y, OUT, 4096) == "compiled" and plain[(4,)](X, Y, OUT, 4096) == "compiled"
        plain.set_result(v, None)
        assert plain[(4,)](X, Y, OUT, 4096) is None


@pytest.mark.parametrize("path", [launch_path.PYTHON, launch_path.EXTENSION])
def test_a_launch_sets_the_effect_set_for_its_variant_before_its_grid(monkeypatch, tuned_archive, path):
    """``set_result(variant, result, (obj, name, value))``: every launch of the variant first sets the attribute
    (before a callable grid runs: one that raises leaves it set), the other variant's launches set theirs, an empty
    grid sets it too; ``None`` again stops it; the C entry refuses an effect of another shape."""
    if path == launch_path.EXTENSION and launch_path.extension() is None:
        pytest.skip("the compiled launcher is not built here")

    class Tuner:
        best_config: Any = None

    tuner = Tuner()
    seen: list[Any] = []

    def grid(meta: dict) -> tuple[int]:
        seen.append(tuner.best_config)
        return (4,)

    def bad_grid(meta: dict) -> tuple[int]:
        raise ZeroDivisionError("grid")

    with fake_cuda(monkeypatch, path) as (rec, _b):
        arc = karchive.open(str(tuned_archive))
        register_sizes(rec, arc)
        k = arc.kernel("add_tuned")
        by_block = {v.constexprs["BLOCK"]: v for v in arc.variants("add_tuned")}
        k[(4,)](X, Y, OUT, 4096)  # loaded before: the loaded entries follow
        for block in (1024, 512):
            k.set_result(by_block[block], f"ck{block}", (tuner, "best_config", f"config{block}"))
        assert k[grid](X, Y, OUT, 4096) == "ck1024" and seen == ["config1024"]
        tuner.best_config = None
        assert k[(4,)](X, Y, OUT, 4096, BLOCK=512) == "ck512" and tuner.best_config == "config512"
        tuner.best_config = None
        assert k[(0,)](X, Y, OUT, 4096) == "ck1024" and tuner.best_config == "config1024"
        tuner.best_config = None
        with pytest.raises(ZeroDivisionError):
            k[bad_grid](X, Y, OUT, 4096, BLOCK=512)
        assert tuner.best_config == "config512"
        k.set_result(by_block[1024], None)
        tuner.best_config = None
        assert k[(4,)](X, Y, OUT, 4096) is None and tuner.best_config is None
        if path == launch_path.EXTENSION:
            from karchive.runtime import _fastlaunch

            native = next(n for k_ in k._family for e in k_._entries.values() for n in e.natives)
            assert isinstance(native, _fastlaunch.Entry)
            with pytest.raises(TypeError, match="None or"):
                native.effect = (tuner, 3, "x")
    assert len(rec.launches()) == 4  # (the empty grid and the raising grid launch nothing)


# -- launch attributes ----------------------------------------------------------------------------------------
FEATURES = {"pdl": {"launch_pdl": True}, "coop": {"launch_cooperative_grid": True}, "cluster": {"num_ctas": 2}}


@pytest.fixture(scope="module")
def feature_archives(tmp_path_factory) -> dict[str, Path]:
    from karchive.producer.build.pack import ArchiveBuilder
    from karchive.producer.compile.aot import VariantRequest, compile_variant

    out = {}
    for name, options in FEATURES.items():
        v = compile_variant(
            VariantRequest(
                f"{ROOT / 'examples' / 'kernels.py'}:add_kernel",
                "*fp32:16, *fp32:16, *fp32:16, i32",
                "cuda:90",
                {"BLOCK": 1024},
                {"num_warps": 4, **options},
            )
        )
        b = ArchiveBuilder(name, "1")
        b.extend([v])
        out[name] = tmp_path_factory.mktemp(name) / f"{name}.karc"
        b.write(out[name])
    return out


@pytest.mark.parametrize("feature", sorted(FEATURES))
def test_launch_attributes_are_packed_in_c_byte_for_byte_as_the_python_launch(monkeypatch, feature_archives, feature):
    """A cluster / cooperative / PDL launch: the compiled path builds the CUlaunchConfig in C and calls
    cuLaunchKernelEx itself; the driver stand-in sees the same grid, block, attributes (each value's 64 bytes)
    and parameter bytes as from the Python path's cuda-python config."""
    calls = [("add_kernel", (4,), (X, Y, OUT, 4096), {}), ("add_kernel", (3, 2), (X, Y, OUT, 100), {})]
    seen = {}
    for path in (launch_path.PYTHON, launch_path.EXTENSION):
        if path == launch_path.EXTENSION and launch_path.extension() is None:
            pytest.skip("the compiled launcher is not built here")
        with fake_cuda(monkeypatch, path) as (rec, backend):
            through_binding: list[int] = []
            monkeypatch.setattr(
                backend.d,
                "cuLaunchKernelEx",
                lambda *a, _s=through_binding, _r=backend.d.cuLaunchKernelEx: _s.append(1) or _r(*a),
            )
            arc = karchive.open(str(feature_archives[feature]))
            register_sizes(rec, arc)
            k = arc.kernel("add_kernel")
            for _name, grid, a, _kw in calls + calls:
                k[grid](*a)
            seen[path] = [(x.grid, x.block, x.shared, x.params, x.attrs) for x in rec.launches()]
            refused = sum(1 for x in rec.attempts if x.result)  # the first, in no context: retried in Python
            assert refused == 1 and len(rec.attempts) == 5
            # the compiled path calls the binding only for that retry: no Python per launch
            assert len(through_binding) == (5 if path == launch_path.PYTHON else refused)
    assert seen[launch_path.PYTHON] == seen[launch_path.EXTENSION]
    attrs = seen[launch_path.EXTENSION][0][4]
    want = {"pdl": [6], "coop": [2], "cluster": [4, 5]}[feature]
    assert [i for i, _v in attrs] == want and all(len(v) == 64 for _i, v in attrs)
    if feature == "cluster":
        assert seen[launch_path.EXTENSION][0][0][0] == 4 * int.from_bytes(attrs[0][1][:4], "little")


@pytest.fixture(scope="module")
def scratch_archive(tmp_path_factory) -> Path:
    """tma_scale_kernel: Triton gives it global scratch (device-side tensor descriptors)."""
    from karchive.producer.build.pack import ArchiveBuilder
    from karchive.producer.compile.aot import VariantRequest, compile_variant

    v = compile_variant(
        VariantRequest(
            f"{ROOT / 'tests' / 'gpu' / 'extra_kernels.py'}:tma_scale_kernel",
            "*fp32:16, *fp32:16, i32, i32:16",
            "cuda:90",
            {"BM": 64, "BN": 64},
            {"num_warps": 4},
        )
    )
    assert v.variant.abi.global_scratch_size > 0
    b = ArchiveBuilder("scratch", "1")
    b.extend([v])
    out = tmp_path_factory.mktemp("scratch") / "scratch.karc"
    b.write(out)
    return out


def test_scratch_pointers_are_packed_in_c_from_the_pool(monkeypatch, scratch_archive):
    """The scratch pointer is the pool's buffer for the launch's stream, sized for its grid, on both paths (the
    same bytes); the compiled path asks the pool only when the stream changes or the grid outgrows the buffer."""
    calls = [((2, 2), 0), ((2, 2), 0), ((2, 2), 0x55), ((8, 8), 0), ((2, 2), 0), ((64, 64), 0x55), ((1,), 0x55)]
    seen, asked = {}, {}
    for path in (launch_path.PYTHON, launch_path.EXTENSION):
        if path == launch_path.EXTENSION and launch_path.extension() is None:
            pytest.skip("the compiled launcher is not built here")
        from karchive.runtime.scratch import ScratchPool

        count: list[int] = []
        real = ScratchPool.reserve
        monkeypatch.setattr(ScratchPool, "reserve", lambda self, *a, _r=real, _c=count: _c.append(1) or _r(self, *a))
        with fake_cuda(monkeypatch, path) as (rec, _backend):
            arc = karchive.open(str(scratch_archive))
            register_sizes(rec, arc)
            k = arc.kernel("tma_scale_kernel")
            for grid, stream in calls:
                k[grid](X, Y, 64, 64, stream=stream)
            seen[path] = [(x.grid, x.stream, x.params) for x in rec.launches()]
            asked[path] = len(count)
    assert seen[launch_path.PYTHON] == seen[launch_path.EXTENSION]
    scratch_of = [p[-2] for _g, _s, p in seen[launch_path.EXTENSION]]  # global scratch, then profile scratch
    assert scratch_of[0] != bytes(8) and scratch_of[0] == scratch_of[1] and scratch_of[2] != scratch_of[0]
    assert asked[launch_path.PYTHON] >= len(calls) and asked[launch_path.EXTENSION] < asked[launch_path.PYTHON]
