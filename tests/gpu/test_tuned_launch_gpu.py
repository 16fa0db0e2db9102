"""Tuned kinds on the compiled path, on the GPU (issue 33): autotuned, heuristics and stacked kernels and a
callable grid launched by ``k[grid](...)`` compute what Triton's launch of the same source computes, from the
first launch (a miss: the resolver) through the remembered ones (no Python step), and return the result set
for their variant. tools/tuned_bench.py builds the archive here (Triton compiles for cuda:90)."""

from __future__ import annotations

import pathlib
import sys

import pytest

import karchive

ROOT = pathlib.Path(__file__).resolve().parents[2]

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    sys.path.insert(0, str(ROOT / "tools"))
    from tuned_bench import build

    return karchive.open(str(build(tmp_path_factory.mktemp("tuned") / "tuned.karc")))


@pytest.mark.parametrize("name", ["add_tuned", "add_heur", "add_stacked"])
def test_tuned_kinds_compute_what_triton_computes(tuned, xk, name):
    import triton

    n = 4096
    x, y = (torch.randn(n, device="cuda") for _ in range(2))
    k = tuned.kernel(name)
    assert type(k._run).__name__ == "Dispatcher"
    grid = lambda meta: (triton.cdiv(meta["n_elements"], meta["BLOCK"]),)  # noqa: E731
    for g in ((4,), grid, (4,), grid):
        out = torch.full_like(x, float("nan"))
        k[g](x, y, out, n)
        torch.cuda.synchronize()
        assert torch.equal(out, x + y)
    ref = torch.full_like(x, float("nan"))
    getattr(xk, name)[grid](x, y, ref, n)
    torch.cuda.synchronize()
    assert torch.equal(ref, out)
    marker = object()
    k.set_result(k.select(x, y, out, n), marker)
    assert k[(4,)](x, y, out, n) is marker
    assert k.cached_calls == 1  # one key: the resolver ran once
