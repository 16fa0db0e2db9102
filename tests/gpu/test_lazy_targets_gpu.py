"""``arc.kernel(name)`` reads a kernel's variants per target on a real GPU (issue 24): on this machine it is
set up over the targets its GPUs may run, launches the variant a kernel over every variant launches, and
refuses as that kernel does. Skipped cleanly where there is no GPU (see conftest.py).

Needs the fixtures of tests/gpu/build_fixtures.py (examples/build.toml: cuda:80, cuda:90, hip:gfx942),
built by this checkout's writer (format 2.1).
"""

from __future__ import annotations

import pytest

import karchive
from karchive.errors import NoMatchingVariantError
from karchive.runtime import launch_path
from karchive.runtime.launch.kernel import Kernel

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("path", [launch_path.EXTENSION, launch_path.PYTHON])
def test_plain_kernel_reads_this_gpus_targets_and_launches_the_eager_choice(examples_archive, path):
    if path == launch_path.EXTENSION and launch_path.extension() is None:
        pytest.skip("the compiled launcher is not built (python tools/build_extension.py)")
    with launch_path.forced(path):
        arc = karchive.open(str(examples_archive))
        if arc.reader.format_version < (2, 1):
            pytest.skip("fixtures written before format 2.1: rebuild them (tests/gpu/build_fixtures.py)")
        k = arc.kernel("add_kernel")
        eager = Kernel(arc, arc.kernel_name("add_kernel"), arc.variants("add_kernel"))
        assert k._source is not None, "a kernel of several targets in a 2.1 archive reads them per target"
        n = 98_432
        x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
        out, ref = torch.full_like(x, float("nan")), torch.full_like(x, float("nan"))
        grid = lambda meta: ((n + meta["BLOCK"] - 1) // meta["BLOCK"],)  # noqa: E731
        k[grid](x, y, out, n, BLOCK=1024)
        eager[grid](x, y, ref, n, BLOCK=1024)
        torch.cuda.synchronize()
        assert torch.equal(out, x + y) and torch.equal(out, ref)
        cc = torch.cuda.get_device_capability()
        same_major = {t for t in k._source.targets if t.startswith("cuda:") and int(t[5:]) // 10 == cc[0]}
        assert {str(v.target) for v in k._candidates} <= same_major
        assert k._source.partial, "cuda:80/hip variants are not read on an sm_90 machine"
        assert k.select(x, y, out, n, BLOCK=1024) == eager.select(x, y, out, n, BLOCK=1024)
        with pytest.raises(NoMatchingVariantError) as got:
            k[grid](x, y, out, n, BLOCK=64)
        with pytest.raises(NoMatchingVariantError) as want:
            eager[grid](x, y, out, n, BLOCK=64)
        assert str(got.value) == str(want.value) and "hip" in str(got.value)  # every target's variants listed
