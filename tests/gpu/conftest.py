"""GPU tests: every test under tests/gpu/ is marked ``gpu`` and runs only where torch sees an sm_90 GPU
(H100/H200: the fixtures are built for cuda:90) and the archives of build_fixtures.py exist; elsewhere
each test is skipped with the reason. The whole flow (build here, carry, run there) is in README.md.

Fixtures: ``fixtures`` (the directory), ``arc`` (examples_gpu.karc), ``examples_archive`` (the path of
examples.karc, prebuilt instead of compiled at test time as tests/conftest.py does), ``earc`` (it,
opened), ``tk`` / ``xk`` (the example and extra kernels through this machine's Triton), and for the
framework interop tests ``problem`` (inputs), ``triton_ref`` / ``runtime_ref`` (outputs of Triton's
own launch and of karchive's runtime on them) and ``interop_report`` (lines for the end-of-run summary).
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import pytest

# JAX would otherwise take 75% of GPU memory at its first use, starving the torch and CuPy tests after it.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURES = pathlib.Path(os.environ.get("KARCHIVE_GPU_FIXTURES", ROOT / ".gpu"))
_HERE = pathlib.Path(__file__).resolve().parent


def _load(path: pathlib.Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _device_reason() -> str | None:
    """Why no GPU test can run here (no torch, no CUDA GPU, not sm_90), or None."""
    try:
        import torch
    except ImportError:
        return "GPU tests need torch with CUDA (not installed)"
    if not torch.cuda.is_available():
        return "no CUDA GPU visible to torch"
    cc = torch.cuda.get_device_capability(0)
    if cc != (9, 0):
        return (
            f"the GPU test archives hold sm_90a cubins (H100/H200); {torch.cuda.get_device_name(0)} is "
            f"sm_{cc[0]}{cc[1]}"
        )
    return None


def _fixtures_reason() -> str | None:
    """Why the tests that use build_fixtures.py's archives cannot run here, or None."""
    gone = _load(_HERE / "build_fixtures.py", "karchive_gpu_build_fixtures").missing(FIXTURES)
    if gone:
        return f"{FIXTURES} lacks {', '.join(gone)}: run python tests/gpu/build_fixtures.py (tests/gpu/README.md)"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test here ``gpu``; skip it with the reason where it cannot run. A module that brings its own
    archives (``USES_BUILD_FIXTURES = False``, e.g. test_triton_releases_gpu.py) needs only the GPU."""
    reasons: dict[str, str | None] = {}
    for item in items:
        if "tests/gpu/" not in str(item.fspath).replace(os.sep, "/"):
            continue
        item.add_marker(pytest.mark.gpu)
        if "device" not in reasons:
            reasons["device"] = _device_reason()
        reason = reasons["device"]
        if reason is None and getattr(getattr(item, "module", None), "USES_BUILD_FIXTURES", True):
            if "fixtures" not in reasons:
                reasons["fixtures"] = _fixtures_reason()
            reason = reasons["fixtures"]
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def fixtures() -> pathlib.Path:
    return FIXTURES


@pytest.fixture(scope="session")
def arc() -> Any:
    import karchive

    return karchive.open(str(FIXTURES / "examples_gpu.karc"))


@pytest.fixture(scope="session")
def tk() -> ModuleType:
    """examples/kernels.py through the GPU machine's own Triton (the reference launches)."""
    return _load(ROOT / "examples" / "kernels.py", "karchive_examples_kernels")


@pytest.fixture(scope="session")
def xk() -> ModuleType:
    return _load(ROOT / "tests" / "gpu" / "extra_kernels.py", "karchive_extra_kernels")


@pytest.fixture(scope="session")
def examples_archive() -> pathlib.Path:
    """examples/build.toml built into one archive by build_fixtures.py (on the CPU machine, not here)."""
    return FIXTURES / "examples.karc"


@pytest.fixture(scope="session")
def earc(examples_archive: pathlib.Path) -> Any:
    import karchive

    return karchive.open(str(examples_archive))


# -- framework interop: one problem, two references --------------------------------------------------------
@dataclass(frozen=True)
class Problem:
    """Inputs for the interop tests (numpy, fixed seed); every framework gets copies of these."""

    xs: Any  # (N,) float32
    ys: Any  # (N,) float32
    sm_in: Any  # (ROWS, COLS) float32, softmax input
    am: Any  # (M, K) float16
    bm: Any  # (K, NN) float16
    N: int = 1 << 20
    ROWS: int = 64
    COLS: int = 1000
    M: int = 256
    NN: int = 256
    K: int = 256
    #: matmul meta-parameters: a variant in examples/build.toml (and Triton's own launch uses them too)
    MM: tuple = (("BLOCK_M", 64), ("BLOCK_N", 128), ("BLOCK_K", 32))

    @staticmethod
    def add_grid(m: dict) -> tuple[int]:
        return ((m["n_elements"] + m["BLOCK"] - 1) // m["BLOCK"],)

    @staticmethod
    def mm_grid(m: dict) -> tuple[int]:
        return (-(-m["M"] // m["BLOCK_M"]) * -(-m["N"] // m["BLOCK_N"]),)


@pytest.fixture(scope="session")
def problem() -> Problem:
    np = pytest.importorskip("numpy")
    rng = np.random.default_rng(0)
    n, rows, cols, m, nn, k = 1 << 20, 64, 1000, 256, 256, 256
    return Problem(
        xs=rng.standard_normal(n, dtype=np.float32),
        ys=rng.standard_normal(n, dtype=np.float32),
        sm_in=rng.standard_normal((rows, cols), dtype=np.float32),
        am=(rng.standard_normal((m, k)) * 0.1).astype(np.float16),
        bm=(rng.standard_normal((k, nn)) * 0.1).astype(np.float16),
    )


@pytest.fixture(scope="session")
def triton_ref(problem: Problem, tk: ModuleType) -> dict[str, Any]:
    """Triton's own launch of examples/kernels.py on ``problem`` (add, softmax, matmul, scale x2)."""
    torch = pytest.importorskip("torch")

    p, dev = problem, "cuda"
    x, y = torch.from_numpy(p.xs).to(dev), torch.from_numpy(p.ys).to(dev)
    blocks = (p.N + 1023) // 1024
    out = torch.empty_like(x)
    tk.add_kernel[(blocks,)](x, y, out, p.N, BLOCK=1024)
    s_in = torch.from_numpy(p.sm_in).to(dev)
    s_out = torch.empty_like(s_in)
    tk.softmax_kernel[(p.ROWS,)](s_out, s_in, s_in.stride(0), s_out.stride(0), p.COLS, BLOCK=1024)
    a, b = torch.from_numpy(p.am).to(dev), torch.from_numpy(p.bm).to(dev)
    c = torch.empty((p.M, p.NN), dtype=torch.float16, device=dev)
    mm = dict(p.MM)
    tk.matmul_kernel[(-(-p.M // mm["BLOCK_M"]) * -(-p.NN // mm["BLOCK_N"]),)](
        a,
        b,
        c,
        p.M,
        p.NN,
        p.K,
        a.stride(0),
        a.stride(1),
        b.stride(0),
        b.stride(1),
        c.stride(0),
        c.stride(1),
        num_warps=4,
        num_stages=4,
        **mm,
    )
    o1 = torch.empty_like(x)
    tk.scale_kernel[(blocks,)](x, o1, p.N, 1, 2.5, BLOCK=1024)
    o2 = torch.empty(p.N // 2, device=dev)
    tk.scale_kernel[((p.N // 2 + 1023) // 1024,)](x, o2, p.N // 2, 2, -0.75, BLOCK=1024)
    torch.cuda.synchronize()
    return {
        "add": out.cpu().numpy(),
        "softmax": s_out.cpu().numpy(),
        "matmul": c.cpu().numpy(),
        "scale1": o1.cpu().numpy(),
        "scale2": o2.cpu().numpy(),
    }


@pytest.fixture(scope="session")
def runtime_ref(problem: Problem, earc: Any) -> dict[str, Any]:
    """karchive's runtime launching examples.karc on ``problem`` through torch tensors (JAX's reference)."""
    torch = pytest.importorskip("torch")

    p, dev = problem, "cuda"
    k_add, k_sm, k_mm, k_sc = (
        earc.kernel(n) for n in ("add_kernel", "softmax_kernel", "matmul_kernel", "scale_kernel")
    )
    x, y = torch.from_numpy(p.xs).to(dev), torch.from_numpy(p.ys).to(dev)
    o = torch.empty_like(x)
    k_add[p.add_grid](x, y, o, p.N, BLOCK=1024)
    s_in = torch.from_numpy(p.sm_in).to(dev)
    so = torch.empty_like(s_in)
    k_sm[(p.ROWS,)](so, s_in, p.COLS, p.COLS, p.COLS, BLOCK=1024)
    a, b = torch.from_numpy(p.am).to(dev), torch.from_numpy(p.bm).to(dev)
    c = torch.empty((p.M, p.NN), dtype=torch.float16, device=dev)
    k_mm[p.mm_grid](a, b, c, p.M, p.NN, p.K, p.K, 1, p.NN, 1, p.NN, 1, **dict(p.MM))
    o1 = torch.empty_like(x)
    k_sc[p.add_grid](x, o1, p.N, 1, 2.5, BLOCK=1024)
    o2 = torch.empty(p.N // 2, device=dev)
    k_sc[p.add_grid](x, o2, p.N // 2, 2, -0.75, BLOCK=1024)
    torch.cuda.synchronize()
    return {
        "add": o.cpu().numpy(),
        "softmax": so.cpu().numpy(),
        "matmul": c.cpu().numpy(),
        "scale1": o1.cpu().numpy(),
        "scale2": o2.cpu().numpy(),
    }


# -- what the interop tests found, printed at the end of the run (no timings: tools/bench_interop.py) -----
_REPORT: list[tuple[str, str, str]] = []


@pytest.fixture(scope="session")
def interop_report() -> list[tuple[str, str, str]]:
    """Append ``(section, check, detail)``; the lines are printed after the test summary."""
    return _REPORT


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if not _REPORT:
        return
    terminalreporter.section("karchive GPU interop details")
    width = max(len(check) for _, check, _ in _REPORT)
    for section, check, detail in _REPORT:
        terminalreporter.write_line(f"{section:<6} {check:<{width}}  {detail}")
