"""On a GPU: tools/gpu_interop.py end to end (torch ops vs Triton, JAX vs runtime, CuPy) and the examples."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

pytestmark = pytest.mark.gpu
ROOT = pathlib.Path(__file__).resolve().parents[2]


def _have_cuda_gpu() -> bool:
    try:
        from karchive.runtime.backend import get_backend

        get_backend("cuda")
        return True
    except Exception:  # noqa: BLE001 - no driver, no bindings, no device
        return False


@pytest.fixture(scope="module")
def gpu_archive(examples_archive):
    if not _have_cuda_gpu():
        pytest.skip("needs an NVIDIA GPU with a CUDA driver and cuda-python")
    return examples_archive


def test_gpu_interop_tool(gpu_archive, tmp_path):
    env = {**os.environ, "OUT": str(tmp_path)}
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "gpu_interop.py"), str(gpu_archive)],
                       capture_output=True, text=True, env=env, timeout=900)
    print(r.stdout[-8000:], r.stderr[-4000:])
    assert r.returncode == 0, r.stdout[-4000:]
    assert (tmp_path / "interop.json").exists()


@pytest.mark.parametrize("script", ["torch_example.py", "jax_example.py", "cupy_example.py"])
def test_examples_run_or_skip_cleanly(gpu_archive, script):
    r = subprocess.run([sys.executable, str(ROOT / "examples" / script), str(gpu_archive)],
                       capture_output=True, text=True, timeout=600)
    out = r.stdout + r.stderr
    if "skipped:" in out:
        pytest.skip(out.strip().splitlines()[-1])
    assert r.returncode == 0, out[-4000:]
    assert "OK" in r.stdout
