"""On a GPU: the runtime takes CuPy arrays (on CuPy's current stream), raw int pointers with an explicit
stream, ``__cuda_array_interface__`` objects and Numba device arrays, with no bridge module.

Outputs are compared bit for bit with Triton's own launch of the same kernel (``triton_ref``).
"""

from __future__ import annotations

from typing import Any

import pytest

cp = pytest.importorskip("cupy")

from gpu_compare import same  # noqa: E402


@pytest.fixture(scope="module")
def c(problem: Any) -> Any:
    return cp.asarray(problem.xs), cp.asarray(problem.ys)


def test_cupy_arrays_on_the_current_stream(earc, problem, c, triton_ref):
    xc, yc = c
    out = cp.empty_like(xc)
    earc.kernel("add_kernel")[problem.add_grid](xc, yc, out, problem.N, BLOCK=1024)
    cp.cuda.get_current_stream().synchronize()
    same(cp.asnumpy(out), triton_ref["add"])


def test_cupy_arrays_inside_a_cupy_stream(earc, problem, c, triton_ref):
    xc, yc = c
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        xx = xc * 1.0  # queued on s: the launch must come after it on s
        out = cp.empty_like(xc)
        earc.kernel("add_kernel")[problem.add_grid](xx, yc, out, problem.N, BLOCK=1024)
    s.synchronize()
    same(cp.asnumpy(out), triton_ref["add"])


def test_raw_int_pointers_and_an_explicit_stream(earc, problem, c, triton_ref):
    xc, yc = c
    s = cp.cuda.Stream(non_blocking=True)
    out = cp.empty_like(xc)
    earc.kernel("add_kernel")[problem.add_grid](
        xc.data.ptr, yc.data.ptr, out.data.ptr, problem.N, BLOCK=1024, stream=s.ptr
    )
    s.synchronize()
    same(cp.asnumpy(out), triton_ref["add"])


def test_cuda_array_interface_objects(earc, problem, c, triton_ref):
    """Any object with ``__cuda_array_interface__`` (Numba's protocol), here one that is nothing else."""

    class CAI:
        def __init__(self, a: Any) -> None:
            self.__cuda_array_interface__ = a.__cuda_array_interface__

    xc, _ = c
    out = cp.empty_like(xc)
    earc.kernel("scale_kernel")[problem.add_grid](CAI(xc), CAI(out), problem.N, 1, 2.5, BLOCK=1024)
    cp.cuda.Device().synchronize()
    same(cp.asnumpy(out), triton_ref["scale1"])


def test_bound_launcher_on_a_cupy_stream(earc, problem, c, triton_ref):
    xc, yc = c
    s = cp.cuda.Stream(non_blocking=True)
    out = cp.empty_like(xc)
    bound = earc.kernel("add_kernel").bind(problem.add_grid, xc, yc, out, problem.N, BLOCK=1024, stream=s)
    bound()
    s.synchronize()
    same(cp.asnumpy(out), triton_ref["add"])


def test_numba_device_arrays(earc, problem, triton_ref):
    numba_cuda = pytest.importorskip("numba.cuda")
    if not numba_cuda.is_available():
        pytest.skip("numba is installed but sees no CUDA GPU")
    xn, yn = numba_cuda.to_device(problem.xs), numba_cuda.to_device(problem.ys)
    out = numba_cuda.device_array_like(xn)
    earc.kernel("add_kernel")[problem.add_grid](xn, yn, out, problem.N, BLOCK=1024, stream=0)
    numba_cuda.synchronize()
    same(out.copy_to_host(), triton_ref["add"])
