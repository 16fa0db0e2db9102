"""GPU tests: run only where torch sees a CUDA GPU and the archives from build_fixtures.py exist; else skip."""

from __future__ import annotations

import importlib.util
import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURES = pathlib.Path(os.environ.get("KARCHIVE_GPU_FIXTURES", ROOT / ".gpu"))


def _gpu_reason() -> str | None:
    try:
        import torch
    except ImportError:
        return "GPU tests need torch with CUDA (not installed)"
    if not torch.cuda.is_available():
        return "no CUDA GPU visible"
    if not (FIXTURES / "examples_gpu.karc").exists():
        return f"no test archives in {FIXTURES}: run python tests/gpu/build_fixtures.py"
    return None


def pytest_collection_modifyitems(config, items):
    reason = None
    checked = False
    for item in items:
        if "tests/gpu/" not in str(item.fspath).replace(os.sep, "/"):
            continue
        item.add_marker(pytest.mark.gpu)
        if not checked:
            reason, checked = _gpu_reason(), True
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))


def _load(path: pathlib.Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="session")
def fixtures() -> pathlib.Path:
    return FIXTURES


@pytest.fixture(scope="session")
def arc():
    import karchive

    return karchive.open(str(FIXTURES / "examples_gpu.karc"))


@pytest.fixture(scope="session")
def tk():
    """examples/kernels.py through the GPU machine's own Triton (the reference launches)."""
    return _load(ROOT / "examples" / "kernels.py", "karchive_examples_kernels")


@pytest.fixture(scope="session")
def xk():
    return _load(ROOT / "tests" / "gpu" / "extra_kernels.py", "karchive_extra_kernels")
