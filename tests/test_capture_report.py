"""The end-of-capture report: every kernel a capture window saw (in-process compiles on any thread, new
entries in Triton's cache) that the archive does not hold, with the reason; a warning; CaptureError under
strict=True. Real compiles for a forced cuda:90 target (fake driver, tests/capture_fakes.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import pytest
from support import ROOT, needs_triton

pytestmark = needs_triton

_WORKER = r"""
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
import triton
from capture_fakes import scale_rows
src = ASTSource(fn=scale_rows, signature={"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "alpha": "fp32",
                "BLOCK": "constexpr"}, constexprs={"BLOCK": BLOCK_VALUE}, attrs={(0,): [["tt.divisibility", 16]]})
triton.compile(src, target=GPUTarget("cuda", 90, 32))
"""


def _compile_in_subprocess(block: int) -> None:
    """A compile in another process (what torch.compile's workers do), into $TRITON_CACHE_DIR."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]))
    subprocess.run(
        [sys.executable, "-c", _WORKER.replace("BLOCK_VALUE", str(block))], env=env, check=True, capture_output=True
    )


def test_unsupported_kernels_are_reported_warned_and_fatal_under_strict(triton_cache_dir, fake_gpu_driver):
    from capture_fakes import fresh, pair_sum, ptr, scale_rows

    import karchive
    from karchive.errors import CaptureError
    from karchive.producer.capture.jit_capture import CaptureIncompleteWarning

    fresh(pair_sum, scale_rows)
    with pytest.warns(CaptureIncompleteWarning, match=r"(?s)1 kernel\(s\).*\[unsupported\] pair_sum .*tuples"):
        with karchive.capture("t", version="1") as cap:
            pair_sum[(1,)]((ptr(), ptr()), ptr(), 100, BLOCK=64)  # a tuple argument: not describable
            scale_rows[(1,)](ptr(), ptr(), 1000, 2.0, BLOCK=64)
    assert cap.kernels() == ["capture_fakes:scale_rows"]
    (item,) = cap.left_out
    assert item.category == "unsupported" and item.kernel == "pair_sum" and "tuples are not supported" in item.reason
    s = cap.summary()
    assert s["lost"] == 1 and s["left_out"][0]["triton_hash"] == item.triton_hash and s["window"]["compiled"] == 2

    fresh(pair_sum)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(CaptureError, match=r"pair_sum .*tuples are not supported"):
            with karchive.capture("t", version="1", strict=True, path=triton_cache_dir / "never.karc"):
                pair_sum[(1,)]((ptr(), ptr()), ptr(), 100, BLOCK=64)
    assert not (triton_cache_dir / "never.karc").exists()  # strict refused before saving


def test_a_cache_dir_set_during_the_capture_is_watched_too(tmp_path, monkeypatch, fake_gpu_driver):
    """torch.compile points TRITON_CACHE_DIR at its own directory when it first compiles: entries written there
    (by this process or by workers) still count, found by modification time."""
    from capture_fakes import fresh, ptr, scale_rows

    import karchive

    first, second = tmp_path / "before", tmp_path / "inductor-triton"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(first))
    fresh(scale_rows)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with karchive.capture("switch", version="1", strict=True) as cap:
            scale_rows[(1,)](ptr(), ptr(), 1000, 2.0, BLOCK=32)
            monkeypatch.setenv("TRITON_CACHE_DIR", str(second))
            scale_rows[(1,)](ptr(), ptr(), 1000, 2.0, BLOCK=64)
            _compile_in_subprocess(128)
    assert sorted(e.how for e in cap.events) == ["compiled", "compiled", "harvested"]
    harvested = next(v for v in cap.variants.values() if v.variant.to_json()["provenance"].get("harvested"))
    assert harvested.kernel == "scale_rows" and cap.left_out == []
    assert cap.summary()["window"] == {"windows": 1, "compiled": 2, "loaded_from_cache": 0, "other_processes": 1}


def test_entries_from_before_the_capture_are_not_reported(triton_cache_dir, fake_gpu_driver):
    from capture_fakes import fresh, ptr, scale_rows

    import karchive

    _compile_in_subprocess(16)  # already in the cache when the capture starts
    fresh(scale_rows)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with karchive.capture("quiet", version="1", harvest=False, strict=True) as cap:
            scale_rows[(1,)](ptr(), ptr(), 1000, 2.0, BLOCK=32)
    assert cap.left_out == [] and len(cap.variants) == 1


def test_each_window_of_a_decorated_function_is_reported_once(triton_cache_dir, fake_gpu_driver):
    from capture_fakes import fresh, pair_sum, ptr

    import karchive
    from karchive.producer.capture.jit_capture import CaptureIncompleteWarning

    fresh(pair_sum)

    @karchive.capture("dec", version="1")
    def step(n: int) -> None:
        pair_sum[(1,)]((ptr(), ptr()), ptr(), n, BLOCK=64)

    with pytest.warns(CaptureIncompleteWarning):
        step(100)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        step(100)  # the same kernel from memory: nothing new to report
    assert len(step.capture.left_out) == 1
