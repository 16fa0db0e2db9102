"""The compiled launcher's torch reader (karchive/runtime/_torch_abi.py, c-ext/tensor.c) against real torch.

CPU tensors here (torch's C ABI answers for them exactly as for device ones; the H100 run of
tests/gpu/test_torch_abi_gpu.py checks CUDA tensors and real launches). Skips where torch or the compiled
launcher is missing.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from runtime_support import fake_cuda, register_sizes  # noqa: E402

import karchive  # noqa: E402
from karchive.errors import ArgumentError  # noqa: E402
from karchive.runtime import _torch_abi, args, launch_path  # noqa: E402
from karchive.runtime.launch.kernel import Kernel  # noqa: E402


@pytest.fixture
def ext():
    module = launch_path.extension()
    if module is None:
        pytest.skip(f"the compiled launcher is not built here: {launch_path.status().detail}")
    args.set_tensor_type(None)
    yield module
    args.set_tensor_type(None)


def tensors() -> list:
    """Every dtype torch allocates plainly, and the shapes of address a launch meets: offsets, strides,
    transposes, channels-last, empty tensors, a Parameter."""
    out = []
    for dtype in {v for v in vars(torch).values() if isinstance(v, torch.dtype)}:
        try:
            out.append(torch.zeros(5, dtype=dtype)[1:])
        except (RuntimeError, TypeError):  # quantized dtypes
            continue
    base = torch.arange(4 * 6 * 8, dtype=torch.float32)
    out += [
        base[7:],
        base[3::5],
        base.view(4, 6, 8).permute(2, 0, 1)[1],
        base.view(torch.uint8)[13:],
        torch.empty(0),
        torch.empty(2, 3, 4, 5).to(memory_format=torch.channels_last),
        torch.nn.Parameter(torch.ones(3, dtype=torch.bfloat16)),
        torch.ones(4, dtype=torch.float16).t(),
    ]
    return out


def accessors(t) -> tuple:
    return (t.data_ptr(), t.dtype, t.get_device())


def test_the_reader_is_on_and_reads_what_the_accessors_say(ext):
    args.set_tensor_type(torch.Tensor)
    assert _torch_abi.status(ext).startswith("on: torch "), _torch_abi.status(ext)
    assert launch_path.status().torch_reader == _torch_abi.status(ext)
    checked = 0
    for t in tensors():
        got = ext.tensor_abi_read(t)
        assert got is not None, (t.dtype, t.shape)
        assert got[0] == t.data_ptr() and got[1] is t.dtype and got[2] == t.get_device(), (got, accessors(t))
        checked += 1
    assert checked > 40


def test_meta_tensors_are_left_to_the_accessors(ext):
    """A device type the reader was not told about: it declines, and a launch asks the accessors."""
    args.set_tensor_type(torch.Tensor)
    assert ext.tensor_abi_read(torch.empty(4, device="meta")) is None


def test_the_setting_turns_it_off(ext, monkeypatch):
    monkeypatch.setenv("KARCHIVE_TORCH_ABI", "0")
    args.set_tensor_type(torch.Tensor)
    assert _torch_abi.status(ext) == "off: KARCHIVE_TORCH_ABI='0'"
    assert ext.tensor_abi_read(torch.ones(2)) is None
    monkeypatch.delenv("KARCHIVE_TORCH_ABI")
    args.set_tensor_type(torch.Tensor)  # a new tensor type (or the same again) installs it afresh
    assert _torch_abi.status(ext).startswith("on")


def test_only_plain_subclasses_are_read_as_tensors(ext):
    """Parameter (torch disables its __torch_function__) is read directly; a subclass that overrides
    __torch_function__ may answer data_ptr() its own way, so it never is."""

    class Traced(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, a=(), kw=None):
            return super().__torch_function__(func, types, a, kw or {})

    args.set_tensor_type(torch.Tensor)
    p = torch.nn.Parameter(torch.ones(3))
    assert ext.tensor_abi_read(p) == accessors(p)
    with pytest.raises(TypeError, match="not an instance of the tensor type"):
        ext.tensor_abi_read(torch.ones(3).as_subclass(Traced))


def test_a_type_that_is_not_torch_tensor_gets_no_reader(ext):
    class Other:
        def data_ptr(self):
            return 0

        def get_device(self):
            return 0

    args.set_tensor_type(Other)
    assert _torch_abi.status(ext) == "off: the tensor type is not torch.Tensor"


@pytest.mark.parametrize("reader", ["1", "0"])
def test_launches_pack_what_data_ptr_says_and_refuse_as_before(ext, cuda_archive, monkeypatch, reader):
    """Through the compiled path with the reader on and off: the same refusals (host memory, a dtype no
    variant has) and, with CPU tensors standing for device ones, the addresses data_ptr() gives."""
    monkeypatch.setenv("KARCHIVE_TORCH_ABI", reader)
    args.set_tensor_type(torch.Tensor)
    assert _torch_abi.status(ext).startswith("on" if reader == "1" else "off")
    base = torch.zeros(4096 + 64, dtype=torch.float32)
    x, y, out = base[4:1028], base[1028:2052], torch.nn.Parameter(base[2052:3076])
    with fake_cuda(monkeypatch, launch_path.EXTENSION) as (rec, _):
        arc = karchive.open(str(cuda_archive))
        register_sizes(rec, arc)
        k = arc.kernel("add_kernel")
        with pytest.raises(ArgumentError, match="'x_ptr' is in host \\(CPU\\) memory"):
            k[(4,)](x, y, out, 1024)
        # CPU tensors standing for device ones: the host refusal is what the line above showed.
        monkeypatch.setattr(Kernel, "_argument_device", lambda self, infos: None)
        for _ in range(3):  # the miss, then the remembered key (stream 0: no torch.cuda on this machine)
            k[(4,)](x, y, out, 1024, stream=0)
        with pytest.raises(karchive.errors.NoMatchingVariantError):
            k[(4,)](x.to(torch.float64), y, out, 1024, stream=0)
    sent = [[int.from_bytes(b, "little") for b in a.params[:3]] for a in rec.attempts[-3:]]
    assert sent == [[x.data_ptr(), y.data_ptr(), out.data_ptr()]] * 3


@pytest.mark.parametrize("abi", ["agrees", "differs", "fails"])
def test_the_current_stream_comes_from_the_c_abi_once_it_agrees_with_torch(ext, cuda_archive, monkeypatch, abi):
    """The kernel's default stream is torch._C._cuda_getCurrentRawStream(device); the reader answers it with
    aoti_torch_get_current_cuda_stream, compared with the getter at the first launch. No CUDA here: both
    stand-ins (a Python getter, a C-callable ctypes function) answer for it."""
    import ctypes

    asked: list[int] = []

    def getter(device: int) -> int:
        asked.append(device)
        return 0x5EED

    @ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p))
    def current_stream(device, out):
        out[0] = 0x5EED if abi == "agrees" else 0xBAD
        return 1 if abi == "fails" else 0  # (an error code: torch threw inside)

    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", getter, raising=False)  # absent from CPU builds
    args.set_tensor_type(torch.Tensor)
    ext.set_tensor_stream(getter, ctypes.cast(current_stream, ctypes.c_void_p).value)
    assert ext.tensor_stream_state() == 0
    base = torch.zeros(4096, dtype=torch.float32)
    x, y, out = base[:1024], base[1024:2048], base[2048:3072]
    try:
        with fake_cuda(monkeypatch, launch_path.EXTENSION) as (rec, _):
            arc = karchive.open(str(cuda_archive))
            register_sizes(rec, arc)
            monkeypatch.setattr(Kernel, "_argument_device", lambda self, infos: None)  # CPU stands for device
            k = arc.kernel("add_kernel")
            for _ in range(5):  # the miss, then the remembered key: all five launched by the compiled path
                k[(4,)](x, y, out, 1024)
        assert [a.stream for a in rec.attempts[-5:]] == [0x5EED] * 5
        assert ext.tensor_stream_state() == (1 if abi == "agrees" else -1)
        # agreeing: the getter is asked once (the comparison), then never; differing: that, then at every
        # launch; failing: at every launch (never asked again after one error: an error is a C++ exception)
        assert len(asked) == {"agrees": 1, "differs": 6, "fails": 5}[abi]
        assert _torch_abi.status(ext).endswith("torch's C ABI" if abi == "agrees" else "the C ABI answered otherwise)")
    finally:
        ext.set_tensor_stream(None)


def test_launches_use_the_reader_only_once_it_is_checked_and_activated(ext, cuda_archive, monkeypatch):
    """set_tensor_abi installs the reader on trial: launches keep the accessors until _torch_abi.py has checked
    it and activates it (a launch on another thread meanwhile must not trust it). Shown with a reader whose
    data_ptr function lies (a ctypes C function): before activation launches pack data_ptr()'s address,
    after it the lie, which is also what proves that launches read through the reader."""
    import ctypes

    args.set_tensor_type(torch.Tensor)
    lib = _torch_abi._library(torch)
    real = [int(ctypes.cast(getattr(lib, n), ctypes.c_void_p).value) for n in _torch_abi.FUNCTIONS]

    @ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p))
    def lying_data_ptr(handle, out):
        out[0] = 0x1000
        return 0

    x, y, out = (torch.zeros(1024) for _ in range(3))
    code = ext.tensor_abi_codes(x, tuple(real))[1]
    host = ext.tensor_abi_codes(x, tuple(real))[2]
    fns = (int(ctypes.cast(lying_data_ptr, ctypes.c_void_p).value), *real[1:])
    try:
        ext.set_tensor_abi(fns, host, host + 1, {code: torch.float32}, 0)
        assert ext.tensor_abi_read(x)[0] == 0x1000  # the check sees the reader...
        with fake_cuda(monkeypatch, launch_path.EXTENSION) as (rec, _):
            arc = karchive.open(str(cuda_archive))
            register_sizes(rec, arc)
            monkeypatch.setattr(Kernel, "_argument_device", lambda self, infos: None)  # CPU stands for device
            k = arc.kernel("add_kernel")
            k[(4,)](x, y, out, 1024, stream=0)
            k[(4,)](x, y, out, 1024, stream=0)  # ...launches do not, until it is activated
            ext.tensor_abi_activate()
            k[(4,)](x, y, out, 1024, stream=0)
        sent = [int.from_bytes(a.params[0], "little") for a in rec.attempts[-3:]]
        assert sent == [x.data_ptr(), x.data_ptr(), 0x1000]
    finally:
        args.set_tensor_type(None)
