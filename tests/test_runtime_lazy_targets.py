"""``arc.kernel(name)`` on a format-2.1 archive reads a kernel's variants per target (issue 24), and says and
selects exactly what a kernel over every variant says and selects.

The archives are real Triton compiles (tests/conftest.py); launches go to a CudaBackend over FakeCuda
(tests/runtime_support.py, a TEST DOUBLE for the driver: this machine has no GPU). Each lazy answer is
compared with the eager kernel's (``Kernel(arc, name, arc.variants(name))``, what ``arc.kernel`` built
before), on the same calls: the variant chosen, or the error's type, words and fields.
"""

from __future__ import annotations

import pytest
from runtime_support import PATHS, fake_cuda, launched_variant, register_sizes

import karchive
from karchive.errors import ArgumentError, KarchiveError, NoMatchingVariantError
from karchive.format.manifest import Variant
from karchive.runtime import DeviceInfo, launch_path
from karchive.runtime.launch._lazy import TargetSource
from karchive.runtime.launch.kernel import Kernel
from karchive.runtime.select import may_run_on, target_agrees

X, Y, OUT = 0x7F00_0000_1000, 0x7F00_0000_2000, 0x7F00_0000_3001  # OUT: not 16-byte aligned
A16 = 0x7F00_0000_4000
DEVICES = ("cuda:80", "cuda:86", "cuda:89", "cuda:90", "cuda:100", "cuda:120", "hip:gfx942", "hip:gfx90a")


def _eager(path, name: str, **kw) -> Kernel:
    arc = karchive.open(str(path), **kw)
    return Kernel(arc, arc.kernel_name(name), arc.variants(name))


def _outcome(kernel, args, kwargs, device) -> tuple:
    """What ``kernel.select`` gives: ("ok", variant key) or (error type, message, its fields)."""
    try:
        v = kernel.select(*args, device=device, **kwargs)
    except KarchiveError as exc:
        return (type(exc).__name__, str(exc), exc.fields)
    assert isinstance(v, Variant)
    return ("ok", v.key)


#: Calls of add_kernel(x, y, out, n, BLOCK) and scale_kernel: fitting ones, and ones nothing fits.
CALLS = {
    "add_kernel": [
        ((A16, A16, A16, 4096), {}),
        ((A16, A16, OUT, 4096), {}),
        ((A16, A16, A16, 4096), {"BLOCK": 512}),
        ((A16, A16, A16, 4096), {"BLOCK": 64}),
        ((A16, A16, A16, 4096), {"num_warps": 8}),
        ((A16, A16, A16, 2.5), {}),
        ((A16, A16), {}),
        ((A16, A16, A16, 7), {"nope": 1}),
    ],
    "scale_kernel": [((A16, A16, 64, 1, 2.0), {}), ((A16, A16, 64, 3, 2.0), {}), ((A16, A16, 64, 1, "x"), {})],
}


@pytest.mark.parametrize("allow_ptx", [False, True])
def test_select_for_any_device_is_the_eager_kernels_answer(cuda_archive, examples_archive, hip_archive, allow_ptx):
    for path in (cuda_archive, examples_archive, hip_archive):
        for name, calls in CALLS.items():
            arc = karchive.open(str(path), allow_ptx=allow_ptx)
            if not arc.variants(name):
                continue
            lazy, eager = arc.kernel(name), _eager(path, name, allow_ptx=allow_ptx)
            several = len({str(v.target) for v in eager.variants}) > 1
            assert type(lazy) is Kernel and isinstance(lazy._source, TargetSource) == several, (path, name)
            for device in DEVICES:
                for args, kwargs in calls:
                    got = _outcome(lazy, args, kwargs, device)
                    want = _outcome(eager, args, kwargs, device)
                    assert got == want, (path.name, name, device, args, kwargs)


def test_a_named_device_reads_only_the_targets_it_may_run(cuda_archive):
    arc = karchive.open(str(cuda_archive))
    name = arc.kernel_name("add_kernel")
    k = arc.kernel("add_kernel")
    assert type(k) is Kernel and k._source is not None
    assert k.select(A16, A16, A16, 4096, device="cuda:90").abi.binary_arch == "sm_90a"
    m = arc.manifest
    assert set(m._by_target) == {(name, "cuda:90")} and name not in m._parsed, "cuda:80's shard stays unread"
    assert k.select(A16, A16, A16, 4096, device="cuda:86").abi.binary_arch == "sm_80"
    assert set(m._by_target) == {(name, "cuda:90"), (name, "cuda:80")} and name not in m._parsed
    # kernel.variants is still every variant, and repr() says what the eager kernel's does
    assert repr(k) == repr(_eager(cuda_archive, "add_kernel"))
    assert sorted(v.key for v in k.variants) == sorted(v.key for v in arc.variants("add_kernel"))


def test_a_refusal_names_the_variants_of_every_target(cuda_archive):
    """The rejection list is the eager kernel's: it names the cuda:80 variant (built for a GPU the call
    does not run on), although the call read only cuda:90's."""
    k = karchive.open(str(cuda_archive)).kernel("add_kernel")
    with pytest.raises(NoMatchingVariantError) as info:
        k.select(A16, A16, A16, 4096, BLOCK=64, device="cuda:90")
    with pytest.raises(NoMatchingVariantError) as want:
        _eager(cuda_archive, "add_kernel").select(A16, A16, A16, 4096, BLOCK=64, device="cuda:90")
    assert str(info.value) == str(want.value) and info.value.rejections == want.value.rejections
    assert "3 variant(s) rejected" in str(info.value)
    assert any(
        "sm_80" in label and "a cubin runs on its own major version only" in why for label, why in info.value.rejections
    )
    assert info.value.__cause__ is None and info.value.__suppress_context__


@pytest.mark.parametrize("path", PATHS)
def test_launches_set_up_over_this_machines_targets_and_refuse_as_before(monkeypatch, cuda_archive, path):
    """On an sm_90 machine (two devices) the launch path is made from cuda:90's variants only; what it
    launches and what it refuses (type, words, fields) are the eager kernel's."""
    with fake_cuda(monkeypatch, path) as (rec, _):
        arc = karchive.open(str(cuda_archive))
        register_sizes(rec, arc)
        name = arc.kernel_name("add_kernel")
        k = arc.kernel("add_kernel")
        eager = Kernel(arc, name, arc.variants("add_kernel"))
        assert type(k) is Kernel and k._source is not None and k.launch_path == path
        k[(1,)](A16, A16, A16, 4096)
        assert {str(v.target) for v in k._candidates} == {"cuda:90"} and k._source.partial
        assert k.plan == make_plan_of(k._candidates) and k.cached_calls == 1
        eager[(1,)](A16, A16, A16, 4096)
        lazy_launch, eager_launch = rec.launches()[-2:]
        assert (lazy_launch.grid, lazy_launch.block, lazy_launch.shared, lazy_launch.params) == (
            eager_launch.grid,
            eager_launch.block,
            eager_launch.shared,
            eager_launch.params,
        )
        assert launched_variant(rec, arc, lazy_launch) == launched_variant(rec, arc, eager_launch)
        for args, kwargs in [
            ((A16, A16, A16, 4096), {"BLOCK": 64}),
            ((A16, A16), {}),
            ((A16, A16, A16, 4096), {"nope": 1}),
            ((A16, A16, A16, 2.5), {}),
        ]:
            with pytest.raises((ArgumentError, NoMatchingVariantError)) as got:
                k[(1,)](*args, **kwargs)
            with pytest.raises((ArgumentError, NoMatchingVariantError)) as want:
                eager[(1,)](*args, **kwargs)
            assert (type(got.value), str(got.value)) == (type(want.value), str(want.value))
            assert got.value.fields == want.value.fields
        with pytest.raises(NoMatchingVariantError) as bound:
            k.bind((1,), A16, A16, A16, 4096, BLOCK=64)
        assert "sm_80" in str(bound.value)
        assert k.preload(0) == eager.preload(0) == 2


def make_plan_of(variants):
    from karchive.runtime.launch._plan import make_plan

    return make_plan(variants[0].kernel, variants)


def test_without_a_device_count_or_driver_the_kernel_holds_every_variant(monkeypatch, cuda_archive):
    """No driver here: a launch path made now holds every variant (and the call raises NoDeviceError as
    before); the archive's ``backend()`` is what says so."""
    arc = karchive.open(str(cuda_archive))
    k = arc.kernel("add_kernel")
    monkeypatch.setattr(
        type(arc),
        "backend",
        lambda self: (_ for _ in ()).throw(karchive.errors.NoDeviceError("no driver here", backend="cuda")),
    )
    assert len(k._candidates) == 3 and not k._source.partial
    with pytest.raises(karchive.errors.NoDeviceError):
        k[(1,)](A16, A16, A16, 4096)


def test_kernels_stored_whole_and_kernels_of_one_target_stay_eager(monkeypatch, cuda_archive):
    from karchive.format.reader import ArchiveReader

    assert karchive.open(str(cuda_archive)).kernel("scale_kernel")._source is None  # cuda:90 only
    assert karchive.open(str(cuda_archive)).kernel("add_kernel")._source is not None
    monkeypatch.setattr(ArchiveReader, "_split_of", lambda self, split, whole, paths, where: [whole])
    assert karchive.open(str(cuda_archive)).kernel("add_kernel")._source is None  # read as a 2.0 reader does


def test_the_target_rule_covers_every_variant_device_fit_accepts(cuda_archive, examples_archive, hip_archive):
    """may_run_on over-approximates device_fit for variants whose target names their arch: a variant any
    device accepts is built for a target that device may run."""
    from karchive.runtime.select import device_fit

    for path in (cuda_archive, examples_archive, hip_archive):
        arc = karchive.open(str(path), allow_ptx=True)
        for name in arc.kernels():
            for v in arc.variants(name):
                assert target_agrees(str(v.target), v.abi.binary_arch)
                for device in DEVICES:
                    for ptx in (False, True):
                        dev = DeviceInfo.describe_target(device, driver_version=13000)
                        if not isinstance(device_fit(v, dev, ptx, arc.ptx_header), str):
                            assert may_run_on(str(v.target), dev, ptx), (v.target, device, ptx)
    dev90 = DeviceInfo.describe_target("cuda:90")
    assert may_run_on("cuda:90", dev90, False) and not may_run_on("cuda:80", dev90, False)
    assert may_run_on("cuda:80", dev90, True) and not may_run_on("cuda:100", dev90, True)
    assert not may_run_on("hip:gfx942", dev90, True) and may_run_on("cuda:weird", dev90, False)
    assert not target_agrees("cuda:80", "sm_90a") and target_agrees("hip:gfx942", "gfx942:sramecc+")


def test_a_variant_whose_target_does_not_name_its_arch_makes_the_kernel_read_every_target(monkeypatch, cuda_archive):
    """The per-target rule holds only where targets name their binaries' arch: a cuda:90 part holding an
    sm_80 cubin sets the kernel up over every variant (and selection is the eager kernel's)."""
    from karchive.runtime.launch import _lazy

    monkeypatch.setattr(_lazy, "target_agrees", lambda target, arch: target != "cuda:90")
    k = karchive.open(str(cuda_archive)).kernel("add_kernel")
    eager = _eager(cuda_archive, "add_kernel")
    dev = DeviceInfo.describe_target("cuda:90")
    assert k._source.view(k, dev) is k._source.every(k)
    assert k.select(A16, A16, A16, 4096, device=dev) == eager.select(A16, A16, A16, 4096, device=dev)


def test_launch_path_of_a_lazy_kernel_is_fixed_when_it_is_made(cuda_archive):
    with launch_path.forced(launch_path.PYTHON):
        k = karchive.open(str(cuda_archive)).kernel("add_kernel")
    assert k.launch_path == launch_path.PYTHON and k._source.every(k).launch_path == launch_path.PYTHON


def test_a_machine_with_two_kinds_of_gpu_has_one_dispatcher_over_both_targets(monkeypatch, examples_archive):
    """Device 0 an sm_90, device 1 an sm_86: the kernel is set up once over cuda:90 and cuda:80 (what
    either GPU may run; not hip:gfx942), and each device gets the eager kernel's choice."""
    from dataclasses import replace

    from karchive.runtime.drivers.cuda import CudaBackend

    real = CudaBackend.device_info

    def device_info(self, index):
        info = real(self, index)
        return replace(info, arch="86", cc=(8, 6)) if index == 1 else info

    monkeypatch.setattr(CudaBackend, "device_info", device_info)
    with fake_cuda(monkeypatch, launch_path.PYTHON):
        arc = karchive.open(str(examples_archive))
        k = arc.kernel("add_kernel")
        eager = Kernel(arc, arc.kernel_name("add_kernel"), arc.variants("add_kernel"))
        for device in (0, 1):
            for block in (256, 1024):
                assert k.select(A16, A16, A16, 4096, BLOCK=block, device=device) == eager.select(
                    A16, A16, A16, 4096, BLOCK=block, device=device
                )
        assert k.select(A16, A16, A16, 4096, BLOCK=256, device=1).abi.binary_arch == "sm_80"
        assert {str(v.target) for v in k._candidates} == {"cuda:80", "cuda:90"} and k._source.partial
