"""The compiled launcher's torch reader on CUDA tensors (karchive/runtime/_torch_abi.py, c-ext/tensor.c).

The reader asks torch's stable C ABI for a tensor's address, dtype and device instead of calling
data_ptr(), .dtype and get_device(): here it must answer what they answer for device tensors of every
dtype and view shape, on every visible GPU, and launches through it must give torch's results bit for
bit, views at odd offsets and Parameters included, with it on and off. The CPU side is
tests/test_torch_abi.py; the cost is tools/bench_launch.py's 16-argument row.
"""

from __future__ import annotations

import pytest

import karchive
from karchive.errors import ArgumentError, NoMatchingVariantError
from karchive.runtime import _torch_abi, args, launch_path

torch = pytest.importorskip("torch")


@pytest.fixture
def ext():
    module = launch_path.extension()
    if module is None:
        pytest.skip(f"the compiled launcher is not built: {launch_path.status().detail}")
    args.set_tensor_type(torch.Tensor)
    yield module


def device_tensors(device: str) -> list:
    out = []
    for dtype in {v for v in vars(torch).values() if isinstance(v, torch.dtype)}:
        try:
            out.append(torch.zeros(9, dtype=dtype, device=device)[3:])
        except (RuntimeError, TypeError):  # dtypes torch cannot allocate plainly on the GPU
            continue
    base = torch.arange(512, dtype=torch.float32, device=device)
    out += [
        base[5:],
        base[1::3],
        base.view(8, 64).t()[7],
        base.view(torch.int8)[11:],
        torch.empty(0, device=device),
        torch.nn.Parameter(torch.ones(7, device=device, dtype=torch.bfloat16)),
    ]
    return out


def test_the_reader_reads_device_tensors_as_the_accessors_do(ext):
    assert _torch_abi.status(ext).startswith("on: torch "), _torch_abi.status(ext)
    checked = 0
    for index in range(torch.cuda.device_count()):
        for t in device_tensors(f"cuda:{index}"):
            got = ext.tensor_abi_read(t)
            assert got is not None, (t.device, t.dtype)
            assert got[0] == t.data_ptr() and got[1] is t.dtype and got[2] == t.get_device() == index
            checked += 1
    assert checked > 20  # (27 dtypes allocate on an H100 with torch 2.11, times the GPUs)


@pytest.mark.parametrize("reader", ["1", "0"])
def test_launches_through_the_reader_equal_torch(ext, fixtures, monkeypatch, reader):
    monkeypatch.setenv("KARCHIVE_TORCH_ABI", reader)
    args.set_tensor_type(torch.Tensor)
    assert _torch_abi.status(ext).startswith("on" if reader == "1" else "off"), _torch_abi.status(ext)
    with launch_path.forced(launch_path.EXTENSION):
        arc = karchive.open(str(fixtures / "examples_gpu.karc"))
        add = arc.kernel("add_kernel")
    n = 4096
    for offset in (0, 4, 12, 36):  # element offsets: 16-byte aligned views and not (other variants)
        base = torch.randn(3 * n + 64, device="cuda")
        x, y = base[offset : offset + n], torch.nn.Parameter(base[n + 64 : 2 * n + 64].clone())
        out = torch.full((n + 8,), float("nan"), device="cuda")[offset % 8 : offset % 8 + n]
        for _ in range(3):  # the miss, then the remembered key
            add[(n // 1024,)](x, y, out, n, BLOCK=1024)
        torch.cuda.synchronize()
        assert torch.equal(out, x + y), offset
    with pytest.raises(ArgumentError, match="host \\(CPU\\) memory"):
        add[(4,)](x.cpu(), y, out, n, BLOCK=1024)
    with pytest.raises(NoMatchingVariantError):
        add[(4,)](x.double(), y, out, n, BLOCK=1024)


def test_launches_go_to_torchs_current_stream_through_the_abi(ext, fixtures):
    """The current stream from aoti_torch_get_current_cuda_stream once it agreed with torch's getter: a launch
    inside CUDA-graph capture (any other stream would break the capture) and on a side stream."""
    with launch_path.forced(launch_path.EXTENSION):
        add = karchive.open(str(fixtures / "examples_gpu.karc")).kernel("add_kernel")
    n = 4096
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    out = [torch.full_like(x, float("nan")) for _ in range(3)]
    add[(n // 1024,)](x, y, out[0], n, BLOCK=1024)
    torch.cuda.synchronize()
    assert ext.tensor_stream_state() == 1, _torch_abi.status(ext)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        add[(n // 1024,)](x, y, out[1], n, BLOCK=1024)
    graph.replay()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        add[(n // 1024,)](x, y, out[2], n, BLOCK=1024)
    torch.cuda.synchronize()
    for o in out:
        assert torch.equal(o, x + y)
    assert _torch_abi.status(ext).endswith("current stream: torch's C ABI")
