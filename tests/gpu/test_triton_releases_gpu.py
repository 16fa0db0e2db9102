"""Each supported Triton release's archive launches on the GPU with Triton unimportable (issue 19).

The archives are built on the CPU machine, one per Triton release, by ``python tests/gpu/build_triton_probes.py``
(after ``bash tools/tritons.sh all``) into ``.gpu/tritons/``. Here a fresh interpreter blocks every ``triton``
import, opens each archive with karchive, launches the cuda:90 variant of every probe kernel
(tests/data/probes/probe_kernels.py) through torch tensors, on both launch paths, and compares with torch:

- pointer arithmetic, masked loads, the device-side tensor descriptor (global scratch): bit-identical;
- ``tl.atomic_add``: the int32 histogram exactly; the float total within the worst-case error bound of fp32
  summation in that order, ``(log2(BLOCK) + blocks) * 2**-24 * sum(|x|)`` of the float64 sum;
- ``tl.dot`` (fp16 in, fp32 accumulate) and libdevice math: within the stated rtol/atol of a float64 reference.

This module needs only the GPU, not the archives of build_fixtures.py (``USES_BUILD_FIXTURES``).
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

from karchive.runtime import launch_path

ROOT = pathlib.Path(__file__).resolve().parents[2]
TRITONS = pathlib.Path(os.environ.get("KARCHIVE_GPU_FIXTURES", ROOT / ".gpu")) / "tritons"
USES_BUILD_FIXTURES = False


def _index() -> dict[str, dict]:
    try:
        return json.loads((TRITONS / "index.json").read_text())["archives"]
    except (OSError, ValueError, KeyError):
        return {}


_ARCHIVES = _index()
_MISSING = (
    f"{TRITONS}/index.json missing: on the CPU machine run `bash tools/tritons.sh all` and "
    "`python tests/gpu/build_triton_probes.py`, then carry .gpu/tritons"
)
_RELEASES = [pytest.param(v, id=f"triton-{v}") for v in sorted(_ARCHIVES)] or [
    pytest.param(None, id="no-archives", marks=pytest.mark.skip(reason=_MISSING))
]

CHILD = textwrap.dedent(r"""
    import json, math, os, sys


    # The producer's compiler must not be needed to launch its archive: `import triton` raises ImportError and
    # importlib.util.find_spec("triton") answers None, as where Triton is not installed (torch asks at CUDA init).
    for _name in [m for m in sys.modules if m.split(".")[0] == "triton"] + ["triton"]:
        sys.modules[_name] = None
    import torch

    import karchive

    arc = karchive.open(sys.argv[1])
    dev = "cuda"
    gen = torch.Generator().manual_seed(19)
    cdiv = lambda a, b: -(-a // b)
    results = {}


    def launch(name, grid, *args, **kw):
        k = arc.kernel(name)
        assert k.launch_path == os.environ["KARCHIVE_LAUNCH_PATH"], k.launch_path
        target = str(k.select(*args, **kw).target)
        k[grid](*args, **kw)
        torch.cuda.synchronize()
        return target


    def record(name, target, got, ref, *, atol=0.0, rtol=0.0, **extra):
        got, ref = got.detach().cpu().double(), ref.detach().cpu().double()
        diff = float((got - ref).abs().max()) if got.numel() else 0.0
        ok = bool(got.shape == ref.shape and torch.all((got - ref).abs() <= atol + rtol * ref.abs()))
        results[name] = {"target": target, "max_abs_diff": diff, "atol": atol, "rtol": rtol, "ok": ok, **extra}


    # pointer arithmetic: a (rows, cols) window of a (rows, stride) matrix
    rows, cols, stride = 100, 50, 64
    x = torch.randn(rows, stride, generator=gen).to(dev)
    out = torch.full((rows * cols,), float("nan"), device=dev)
    t = launch("strided_kernel", (cdiv(rows, 16),), x, out, rows, cols, stride, BLOCK_R=16, BLOCK_C=64)
    record("strided_kernel", t, out, x[:, :cols].reshape(-1))

    # masked loads: out[i] = x[i] + x[i + 1], x[n] read as fill
    n, fill = 1000, 2.5
    x = torch.randn(n, generator=gen).to(dev)
    out = torch.full((n,), float("nan"), device=dev)
    t = launch("masked_kernel", (cdiv(n, 256),), x, out, n, fill, BLOCK=256)
    record("masked_kernel", t, out, x + torch.cat([x[1:], torch.tensor([fill], device=dev)]))

    # tl.atomic_add: float total (order-dependent, bounded error) and int32 histogram (exact)
    n, bins, block = 100_000, 64, 256
    x = torch.randn(n, generator=gen).to(dev)
    idx = torch.randint(0, bins, (n,), generator=gen, dtype=torch.int32).to(dev)
    total = torch.zeros(1, device=dev)
    hist = torch.zeros(bins, dtype=torch.int32, device=dev)
    t = launch("atomic_kernel", (cdiv(n, block),), x, idx, total, hist, n, BLOCK=block)
    bound = (math.log2(block) + cdiv(n, block)) * 2.0 ** -24 * float(x.double().abs().sum())
    record("atomic_kernel", t, total, x.double().sum().reshape(1), atol=bound)
    hist_ok = bool(torch.equal(hist.cpu(), torch.bincount(idx.cpu().long(), minlength=bins).int()))
    results["atomic_kernel"]["histogram_exact"] = hist_ok
    results["atomic_kernel"]["ok"] = results["atomic_kernel"]["ok"] and hist_ok

    # tl.dot: C = A @ B, fp16 inputs, fp32 accumulation, ragged edges masked
    M, N, K = 200, 136, 96
    a = (torch.randn(M, K, generator=gen) * 0.1).half().to(dev)
    b = (torch.randn(K, N, generator=gen) * 0.1).half().to(dev)
    c = torch.full((M, N), float("nan"), device=dev)
    t = launch("dot_kernel", (cdiv(M, 64), cdiv(N, 64)), a, b, c, M, N, K, BM=64, BN=64, BK=32)
    record("dot_kernel", t, c, a.cpu().double() @ b.cpu().double(), atol=1e-4, rtol=1e-4)

    # libdevice: erf(x) + pow(|x|, 1.5) * exp2(-x*x)
    n = 5000
    x = torch.randn(n, generator=gen).to(dev)
    out = torch.full((n,), float("nan"), device=dev)
    t = launch("libdevice_kernel", (cdiv(n, 256),), x, out, n, BLOCK=256)
    xd = x.cpu().double()
    record("libdevice_kernel", t, out, torch.erf(xd) + xd.abs() ** 1.5 * torch.exp2(-xd * xd), atol=1e-6, rtol=1e-5)

    # device-side tensor descriptors (global scratch): out = 3 * in, partial tiles at the edges (N is
    # specialised divisible by 16 in the spec: 144 = 2 * 64 + 16)
    M, N = 200, 144
    x = torch.randn(M, N, generator=gen).to(dev)
    out = torch.full((M, N), float("nan"), device=dev)
    t = launch("descriptor_kernel", (cdiv(M, 64), cdiv(N, 64)), x, out, M, N, BM=64, BN=64)
    record("descriptor_kernel", t, out, x * 3.0)

    results["_triton_modules"] = sorted(m for m, mod in sys.modules.items() if m.split(".")[0] == "triton" and mod is not None)
    print(json.dumps(results))
""")


@pytest.fixture(params=[launch_path.EXTENSION, launch_path.PYTHON])
def path(request) -> str:
    if request.param == launch_path.EXTENSION and launch_path.extension() is None:
        pytest.skip(
            f"the compiled launcher is not built: {launch_path.status().detail} (python tools/build_extension.py)"
        )
    return request.param


@pytest.mark.parametrize("release", _RELEASES)
def test_every_probe_of_each_release_launches_without_triton(release, path, tmp_path, interop_report):
    from triton_releases import KERNELS

    entry = _ARCHIVES[release]
    archive = TRITONS / entry["file"]
    assert hashlib.sha256(archive.read_bytes()).hexdigest() == entry["sha256"], f"{archive} changed since it was built"
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = {
        **os.environ,
        launch_path.ENV: path,
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p),
    }
    r = subprocess.run(
        [sys.executable, str(script), str(archive)], capture_output=True, text=True, env=env, timeout=300
    )
    assert r.returncode == 0, r.stdout + r.stderr
    results = json.loads(r.stdout.strip().splitlines()[-1])
    assert results.pop("_triton_modules") == []
    assert sorted(results) == sorted(KERNELS)
    for name, res in sorted(results.items()):
        interop_report.append(
            (
                "triton",
                f"{release} {path} {name}",
                f"{res['target']} max|diff|={res['max_abs_diff']:.3g} (atol {res['atol']:.3g}, "
                f"rtol {res['rtol']:.3g}){'' if res['ok'] else ' FAILED'}",
            )
        )
    bad = {name: res for name, res in results.items() if not res["ok"] or res["target"] != "cuda:90"}
    assert not bad, bad


def test_the_archives_cover_the_supported_range():
    """At least the oldest supported release, 3.6 (the GPU machine's own) and the newest built."""
    if not _ARCHIVES:
        pytest.skip(_MISSING)
    from triton_releases import floor

    minors = {".".join(v.split(".")[:2]) for v in _ARCHIVES}
    assert {floor(), "3.6"} <= minors, sorted(minors)
