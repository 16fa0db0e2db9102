"""An ahead-of-time build of an autotuned kernel whose string/bool constexprs are not in its autotune key.

The corpus's tutorial matmul (``ACTIVATION`` in {"", "leaky_relu"}, key ``[M, N, K]``) showed a wrong output
on the H100 for the second call of a key already tuned by a call with the other ``ACTIVATION``. These tests
pin down the runtime's side of it with a real Triton compile for cuda:90 and the recording driver: every
launch runs the binary compiled for the call's own constexprs (told from the launched function's image, not
from ``select()``), tuning happens once per key whatever the constexprs, and a callable grid sees the
config that runs (the corpus replay passed Triton's evaluated grid instead: tests/gpu/corpus_phases.py).
"""

from __future__ import annotations

import pathlib

import pytest
from support import needs_triton

pytestmark = needs_triton
ROOT = pathlib.Path(__file__).resolve().parent.parent
KERNELS = ROOT / "tests" / "aot_act_kernels.py"
X, Y = 0x7F00_0000_1000, 0x7F00_0000_2000
RUNS_PER_CONFIG = 1 + 10  # one warm-up and benchmark_reps timed runs


class _DType:
    def __str__(self) -> str:
        return "torch.float32"


class Tensor:
    """A stand-in tensor (the test double's memory is never touched: the driver is the recording one)."""

    dtype = _DType()

    def __init__(self, ptr: int) -> None:
        self._ptr = ptr

    def data_ptr(self) -> int:
        return self._ptr

    def get_device(self) -> int:
        return 0


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> pathlib.Path:
    from karchive.producer.build.pipeline import build_archive
    from karchive.producer.build.spec_file import load_spec

    tmp = tmp_path_factory.mktemp("act")
    spec = tmp / "spec.toml"
    spec.write_text(
        f'[archive]\nname = "act"\nversion = "1"\ntargets = ["cuda:90"]\n[[kernel]]\n'
        f'source = "{KERNELS}:at_act"\nsignature = "*fp32:16, *fp32:16, i32"\n'
        'constexprs = { ACT = ["", "leaky_relu"], NEG = [false, true] }\n'
    )
    build_archive(load_spec(spec), tmp / "act.karc", progress=False)
    return tmp / "act.karc"


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@pytest.mark.parametrize("benchmark", [False, True], ids=["default", "benchmark"])
@pytest.mark.parametrize("path", ["python", "extension"])
def test_each_launch_runs_the_binary_of_its_own_constexprs(archive, monkeypatch, tmp_path, path, benchmark):
    from runtime_support import fake_cuda, launched_variant, register_sizes

    import karchive
    from karchive.runtime import args, launch_path
    from karchive.runtime.autotuned import AutotuneResolver

    if path == launch_path.EXTENSION and launch_path.extension() is None:
        pytest.skip("the compiled launch path is not built here")
    monkeypatch.setenv("KARCHIVE_CACHE_DIR", str(tmp_path / "kcache"))  # a fresh tuning cache: every key tunes
    args.set_tensor_type(Tensor)
    try:
        with fake_cuda(monkeypatch, path) as (rec, _backend):
            arc = karchive.open(str(archive))
            register_sizes(rec, arc)
            assert len(arc.variants("at_act")) == 8 and not any(r["entries"] for r in arc.manifest.autotune)
            # as tests/gpu/corpus_phases.replay(benchmark=True) asks for it, or plainly
            k = arc.kernel("at_act", benchmark=True) if benchmark else arc.kernel("at_act")
            assert isinstance(k.resolver, AutotuneResolver) and k.resolver.tune_on_device
            x, out = Tensor(X), Tensor(Y)
            grid = lambda meta: (_cdiv(meta["n"], meta["BLOCK"]),)  # noqa: E731 - the tutorial's grid shape
            block_of: dict[int, int] = {}
            calls = [
                (4096, "", False),
                (4096, "leaky_relu", False),
                (4096, "leaky_relu", True),
                (4096, "", True),
                (4096, "", False),
                (1000, "leaky_relu", True),
                (1000, "", False),
                (1000, "leaky_relu", False),
            ]
            for n, act, neg in calls:
                before = len(rec.launches())
                k[grid](x, out, n, ACT=act, NEG=neg)
                ran = rec.launches()[before:]
                tuned_now = n not in block_of
                # a key tunes once (every config's variant for THIS call's constexprs), then launches once
                assert len(ran) == (2 * RUNS_PER_CONFIG + 1 if tuned_now else 1), (n, act, neg, len(ran))
                for launch in ran:
                    v = launched_variant(rec, arc, launch)
                    assert v.constexprs["ACT"] == act and v.constexprs["NEG"] is neg, (n, act, neg, v.constexprs)
                    assert launch.grid == (_cdiv(n, v.constexprs["BLOCK"]), 1, 1)  # the grid of the config run
                if tuned_now:
                    assert sorted({launched_variant(rec, arc, a).constexprs["BLOCK"] for a in ran}) == [64, 128]
                v = launched_variant(rec, arc, ran[-1])
                block_of.setdefault(n, v.constexprs["BLOCK"])
                assert v.constexprs["BLOCK"] == block_of[n]  # the key's tuned config, whatever the constexprs
                assert k.select(x, out, n, ACT=act, NEG=neg).key == v.key  # select() answers what ran
            # bind() takes the same choice
            before = len(rec.launches())
            k.bind(grid, x, out, 4096, ACT="leaky_relu", NEG=True)()
            v = launched_variant(rec, arc, rec.launches()[before])
            assert (v.constexprs["ACT"], v.constexprs["NEG"], v.constexprs["BLOCK"]) == (
                "leaky_relu",
                True,
                block_of[4096],
            )
    finally:
        args.set_tensor_type(None)
