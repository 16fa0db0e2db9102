"""Shared fixtures: real archives compiled by Triton on this (GPU-less) machine, built once per session."""

from __future__ import annotations

import os
import pathlib

import pytest
import runtime_support
from support import EXAMPLES
from support import have_triton as _have_triton

os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")


@pytest.fixture(scope="session")
def examples_archive(tmp_path_factory) -> pathlib.Path:
    """examples/build.toml built into one archive: every example kernel for cuda:80, cuda:90, hip:gfx942."""
    if not _have_triton():
        pytest.skip("needs triton")
    from karchive.producer.build.pipeline import build_archive
    from karchive.producer.build.spec_file import load_spec

    out = tmp_path_factory.mktemp("examples") / "examples.karc"
    build_archive(load_spec(EXAMPLES / "build.toml"), out, jobs=2, progress=False)
    return out


@pytest.fixture(scope="session")
def add_variants():
    """Two compiled add_kernel variants (cuda:90 BLOCK=1024, hip:gfx942 BLOCK=256)."""
    if not _have_triton():
        pytest.skip("needs triton")
    from karchive.producer.compile.aot import VariantRequest, compile_variant

    ref = str(EXAMPLES / "kernels.py") + ":add_kernel"
    sig = "*fp32:16, *fp32:16, *fp32:16, i32"
    return [
        compile_variant(VariantRequest(ref, sig, "cuda:90", {"BLOCK": 1024}, {"num_warps": 4})),
        compile_variant(VariantRequest(ref, sig, "hip:gfx942", {"BLOCK": 256}, {"num_warps": 4})),
    ]


# ---- capture fixtures (JIT capture tests: tests/test_capture*.py) ---------------------------------
@pytest.fixture
def triton_cache_dir(tmp_path, monkeypatch) -> pathlib.Path:
    """A fresh, empty Triton cache directory (TRITON_CACHE_DIR) for this test."""
    d = tmp_path / "triton-cache"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(d))
    return d


@pytest.fixture
def fake_gpu_driver():
    """Triton's active driver replaced by the GPU-less double of tests/capture_fakes.py (autotune timings 3, 1, 2)."""
    if not _have_triton():
        pytest.skip("needs triton")
    from capture_fakes import fake_gpu

    with fake_gpu(timings=[3.0, 1.0, 2.0]) as fake:
        yield fake


# ---- end of capture fixtures ------------------------------------------------------------------------


# ---- runtime fixtures (tests/test_runtime_*.py; the pieces they use are in runtime_support.py) ------
@pytest.fixture(scope="session")
def cuda_archive(tmp_path_factory) -> pathlib.Path:
    if not _have_triton():
        pytest.skip("building test archives needs triton")
    return runtime_support.write_archive(
        tmp_path_factory.mktemp("rt") / "cuda.karc", runtime_support.compile_many(runtime_support.CUDA_REQS)
    )


@pytest.fixture(scope="session")
def hip_archive(tmp_path_factory) -> pathlib.Path:
    if not _have_triton():
        pytest.skip("building test archives needs triton")
    return runtime_support.write_archive(
        tmp_path_factory.mktemp("rt") / "hip.karc", runtime_support.compile_many(runtime_support.HIP_REQS)
    )


@pytest.fixture(scope="session")
def omit_archive(tmp_path_factory) -> pathlib.Path:
    if not _have_triton():
        pytest.skip("building test archives needs triton")
    return runtime_support.write_archive(
        tmp_path_factory.mktemp("rt") / "omit.karc",
        runtime_support.compile_many(runtime_support.OMIT_REQS),
        name="omit",
    )


@pytest.fixture(scope="session")
def launch_archive(tmp_path_factory) -> pathlib.Path:
    if not _have_triton():
        pytest.skip("building test archives needs triton")
    return runtime_support.write_archive(
        tmp_path_factory.mktemp("rt") / "launch.karc",
        runtime_support.compile_many(runtime_support.LAUNCH_REQS),
        name="launch",
    )


# -- recording --------------------------------------------------------------------------------------------
# ---- end of runtime fixtures ---------------------------------------------------------------------------
