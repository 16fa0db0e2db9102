"""Issue 19 on a real GPU: two kernels that share ``__name__`` launch their own binaries, and a call that
omits a constexpr the archive holds two values of is refused before anything launches, while a
signature default is honoured (the masked path runs, elements past ``n`` stay untouched).

Fixtures (tests/gpu/build_fixtures.py): identity.karc (alpha:add_kernel = x + y, beta:add_kernel = x - y,
built from .gpu/alpha.py and .gpu/beta.py) and omit.karc (tests/runtime_kernels.py: even_kernel,
even_default_kernel). Both launch paths run every test.
"""

from __future__ import annotations

import pytest

import karchive
from karchive.errors import KernelNameError, NoMatchingVariantError
from karchive.runtime import launch_path

torch = pytest.importorskip("torch")
DEV = "cuda"
N = 1000  # not a multiple of BLOCK=256: the unmasked (EVEN=True) path would write past it


@pytest.fixture(autouse=True, params=[launch_path.EXTENSION, launch_path.PYTHON])
def path(request):
    if request.param == launch_path.EXTENSION and launch_path.extension() is None:
        pytest.skip(f"the compiled launcher is not built: {launch_path.status().detail}")
    with launch_path.forced(request.param):
        yield request.param


def test_same_named_kernels_launch_their_own_binaries(fixtures, path):
    arc = karchive.open(str(fixtures / "identity.karc"))
    assert arc.kernels() == ["alpha:add_kernel", "beta:add_kernel"]
    with pytest.raises(KernelNameError, match="alpha:add_kernel, beta:add_kernel"):
        arc.kernel("add_kernel")
    x, y = torch.randn(4096, device=DEV), torch.randn(4096, device=DEV)
    outs = {}
    for name in ("alpha:add_kernel", "beta:add_kernel"):
        k = arc.kernel(name)
        assert k.launch_path == path
        out = torch.full_like(x, float("nan"))
        k[(4,)](x, y, out, 4096, BLOCK=1024)
        outs[name] = out
    torch.cuda.synchronize()
    assert torch.equal(outs["alpha:add_kernel"], x + y)
    assert torch.equal(outs["beta:add_kernel"], x - y)


def test_omitted_constexpr_is_refused_and_a_default_is_honoured(fixtures, path):
    arc = karchive.open(str(fixtures / "omit.karc"))
    x = torch.randn(1024, device=DEV)
    grid = ((N + 255) // 256,)

    even = arc.kernel("even_kernel")
    out = torch.full_like(x, float("nan"))
    with pytest.raises(NoMatchingVariantError, match=r"omits constexpr 'EVEN'.*EVEN = False, True") as e:
        even[grid](x, out, N, BLOCK=256)
    assert e.value.param == "EVEN"
    with pytest.raises(NoMatchingVariantError, match="omits constexpr 'EVEN'"):
        even.select(x, out, N, BLOCK=256, device="cuda:90")
    torch.cuda.synchronize()
    assert torch.isnan(out).all()  # refused: nothing launched
    even[grid](x, out, N, BLOCK=256, EVEN=False)
    torch.cuda.synchronize()
    assert torch.equal(out[:N], x[:N] * 2) and torch.isnan(out[N:]).all()

    dflt = arc.kernel("even_default_kernel")
    out = torch.full_like(x, float("nan"))
    # EVEN defaults to False; its variants are num_warps 2 and 8, Triton's default 4 is not built: refused
    with pytest.raises(NoMatchingVariantError, match=r"num_warps = 2, 8 \(Triton's default: 4\)"):
        dflt[grid](x, out, N, BLOCK=256)
    dflt[grid](x, out, N, BLOCK=256, num_warps=8)
    torch.cuda.synchronize()
    # the default EVEN=False (masked) variant ran: nothing written past n
    assert torch.equal(out[:N], x[:N] * 2) and torch.isnan(out[N:]).all()
    assert dflt.select(x, out, N, BLOCK=256, num_warps=2).constexprs["EVEN"] is False
