"""The HIP backend up to the driver calls, through a recording stand-in for hip-python, on both launch paths.

TEST DOUBLE FOR MISSING HARDWARE: there is no AMD GPU in this project, so FakeHip (tests/runtime_support.py)
records hipModuleLoadData / hipModuleGetFunction / hipModuleLaunchKernel and the bytes each kernel
parameter pointer points at. On the compiled path the launch arrives through the driver address
FakeHip hands out from ``hipGetProcAddress``. This exercises the dispatcher, selection cache, both
launch paths, bound launchers and per-thread buffers that CUDA shares; it proves nothing about AMD
hardware itself.
"""

from __future__ import annotations

import inspect
import struct
import threading

import pytest
from runtime_support import PATHS, Cai, fake_hip, path_param, q, register_sizes

import karchive
from karchive.errors import ArgumentError, LaunchError, NoMatchingVariantError
from karchive.runtime import launch_path

X, Y, OUT = 0x7F00_0000_1000, 0x7F00_0000_2000, 0x7F00_0000_3000


@pytest.fixture(params=PATHS)
def path(request):
    return path_param(request)


@pytest.fixture
def env(monkeypatch, hip_archive, path):
    with fake_hip(monkeypatch, path) as (hip, backend):
        arc = karchive.open(str(hip_archive))
        register_sizes(hip.rec, arc)
        yield hip, arc


def test_add_launch_reaches_hip_with_exact_arguments(env, hip_archive):
    hip, arc = env
    add = arc.kernel("add_kernel")
    add[(7, 2)](X, Y, OUT, 1000, BLOCK=256)
    loads = [c for c in hip.calls if c[0] == "hipModuleLoadData"]
    v = arc.variants("add_kernel")[0]
    assert len(loads) == 1 and loads[0][1] == arc.reader.read(v.binary.path)  # the verified hsaco bytes
    assert [c[2] for c in hip.calls if c[0] == "hipModuleGetFunction"] == [b"add_kernel"]
    (launch,) = hip.launches()
    assert launch.kernel == "add_kernel"
    assert launch.grid == (7, 2, 1) and launch.block == (64 * 4, 1, 1)  # warp size 64 x num_warps 4
    assert launch.shared == v.abi.shared and launch.stream == 0 and launch.extra == 0
    assert launch.params == (q(X), q(Y), q(OUT), struct.pack("<i", 1000), q(0), q(0))


def test_second_call_hits_the_cache_and_repacks(env):
    hip, arc = env
    add = arc.kernel("add_kernel")
    add[(1,)](X, Y, OUT, 5)
    n_loads = sum(c[0] == "hipModuleLoadData" for c in hip.calls)
    add[(3,)](OUT, X, Y, 6, BLOCK=256)
    assert sum(c[0] == "hipModuleLoadData" for c in hip.calls) == n_loads  # loaded once
    add[(3,)](OUT, X, Y, 7, BLOCK=256)
    assert add.cached_calls == 2  # BLOCK omitted / given are two keys for one loaded entry
    assert len(add._entries) == 1
    assert hip.launches()[-1].params[:4] == (q(OUT), q(X), q(Y), struct.pack("<i", 7))


def test_equal_to_1_param_is_not_passed_and_fp16_is_two_bytes(env):
    hip, arc = env
    scale = arc.kernel("scale_kernel")
    half = Cai(X, "<f2"), Cai(OUT, "<f2")
    scale[(1,)](*half, 100, 1, 0.1, BLOCK=256)
    # x, out, n, alpha(fp16), scratch, scratch: stride == 1 was compiled in
    assert hip.launches()[-1].params == (q(X), q(OUT), struct.pack("<i", 100), struct.pack("<e", 0.1), q(0), q(0))
    with pytest.raises(NoMatchingVariantError, match=r"x_ptr is a raw address.*\*fp16, \*fp32") as err:
        scale[(1,)](X, OUT, 100, 1, 0.1, BLOCK=256)  # raw addresses say no dtype: fp16 or fp32 is not a guess
    assert err.value.param == "x_ptr"
    scale[(1,)](X, OUT, 100, 3, 0.1, BLOCK=256)  # only the general fp32 variant takes stride 3
    assert hip.launches()[-1].params == (
        q(X),
        q(OUT),
        struct.pack("<i", 100),
        struct.pack("<i", 3),
        struct.pack("<f", 0.1),
        q(0),
        q(0),
    )


def test_grid_callable_and_empty_grid(env):
    hip, arc = env
    add = arc.kernel("add_kernel")
    add[lambda meta: ((meta["n_elements"] + meta["BLOCK"] - 1) // meta["BLOCK"],)](X, Y, OUT, 1000)
    assert hip.launches()[-1].grid == (4, 1, 1)
    hip.launch_result = 1  # the runtime reports an invalid value for an empty grid
    add[(0,)](X, Y, OUT, 1000)  # Triton launches nothing for an empty grid: no error
    with pytest.raises(LaunchError, match=r"hipErrorFake1.*grid=\(2, 1, 1\)"):
        add[(2,)](X, Y, OUT, 1000)


def test_argument_errors_never_launch(env):
    hip, arc = env
    add = arc.kernel("add_kernel")
    add[(1,)](X, Y, OUT, 5)
    before = len(hip.launches())
    with pytest.raises(NoMatchingVariantError, match="y_ptr address 0x7f0000002004 is not 16-byte aligned"):
        add[(1,)](X, Y + 4, OUT, 5)
    with pytest.raises(ArgumentError, match="missing argument 'n_elements'"):
        add[(1,)](X, Y, OUT)
    with pytest.raises(ArgumentError, match="'n_elements'.*out of range|n_elements=.*does not fit"):
        add[(1,)](X, Y, OUT, 1 << 33)
    with pytest.raises(ArgumentError, match="must be a pointer"):
        add[(1,)](1.5, Y, OUT, 5)
    with pytest.raises(ArgumentError, match="unknown keyword argument 'BLOK'"):
        add[(1,)](X, Y, OUT, 5, BLOK=256)
    with pytest.raises(ArgumentError, match="takes 5 arguments"):
        add[(1,)](X, Y, OUT, 5, 256, 7)
    assert len(hip.launches()) == before


def test_streams_ints_and_objects(env):
    hip, arc = env
    add = arc.kernel("add_kernel")

    class TorchLikeStream:
        cuda_stream = 0xABC

    class ProtocolStream:
        def __cuda_stream__(self):
            return (0, 0xDEF)

    add[(1,)](X, Y, OUT, 5, stream=0x123)
    add[(1,)](X, Y, OUT, 5, stream=TorchLikeStream())
    add[(1,)](X, Y, OUT, 5, stream=ProtocolStream())
    assert [c.stream for c in hip.launches()[-3:]] == [0x123, 0xABC, 0xDEF]
    with pytest.raises(ArgumentError, match="stream="):
        add[(1,)](X, Y, OUT, 5, stream="fast")


def test_bound_launcher(env):
    hip, arc = env
    b = arc.kernel("add_kernel").bind((5,), X, Y, OUT, 10, stream=7)
    assert b.param_names == ("x_ptr", "y_ptr", "out_ptr", "n_elements")
    b()
    assert hip.launches()[-1].grid == (5, 1, 1) and hip.launches()[-1].stream == 7
    b(Y, X, OUT, 11)
    assert hip.launches()[-1].params[:4] == (q(Y), q(X), q(OUT), struct.pack("<i", 11))
    b.set("n_elements", 12)
    b.set_grid((2, 3))
    b.launch()
    assert hip.launches()[-1].params[3] == struct.pack("<i", 12) and hip.launches()[-1].grid == (2, 3, 1)
    b.set_stream(9)
    b()
    assert hip.launches()[-1].stream == 9
    n = len(hip.launches())
    with pytest.raises(ArgumentError, match="out_ptr address .* not 16-byte aligned"):
        b(X, Y, OUT + 8, 10)
    with pytest.raises(ArgumentError, match="takes 4 values"):
        b(X, Y, OUT)
    with pytest.raises(ArgumentError, match="'n_elements'"):
        b(X, Y, OUT, 1 << 40)
    assert len(hip.launches()) == n


def test_threads_get_their_own_parameter_buffers(env):
    hip, arc = env
    add = arc.kernel("add_kernel")
    add[(1,)](X, Y, OUT, 1)

    def work(i):
        add[(1,)](X + 16 * i, Y, OUT, i)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(1, 5)]
    for t in threads:
        t.start()
        t.join()
    assert [c.params[0] for c in hip.launches()[1:]] == [q(X + 16 * i) for i in range(1, 5)]
    owner = hip.launches()[0].kernel_params
    if add.launch_path == launch_path.PYTHON:  # (the compiled path packs on each call's own C stack)
        assert all(c.kernel_params != owner for c in hip.launches()[1:])  # never the owner thread's buffer


def test_hip_device_info(env):
    hip, arc = env
    b = arc.backend()
    info = b.device_info(0)
    assert (info.backend, info.arch, info.warp_size, info.name) == ("hip", "gfx942", 64, "Fake MI300X")


def test_keyword_arguments_bind_like_positional_ones(env):
    hip, arc = env
    add = arc.kernel("add_kernel")
    add[(1,)](x_ptr=X, y_ptr=Y, out_ptr=OUT, n_elements=3, BLOCK=256)
    add[(1,)](X, Y, OUT, 3, BLOCK=256)
    add[(1,)](X, Y, out_ptr=OUT, n_elements=3, BLOCK=256)
    assert add.cached_calls == 1  # one key: keywords bound like positional arguments, not a second miss
    assert [c.params[:3] for c in hip.launches()] == [(q(X), q(Y), q(OUT))] * 3
    if add.launch_path == launch_path.PYTHON:  # the generated function takes the kernel's own names
        assert list(inspect.signature(add._run).parameters)[1:6] == ["x_ptr", "y_ptr", "out_ptr", "n_elements", "BLOCK"]
