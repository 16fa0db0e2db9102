"""Autotune records at load time: the recorded config per key, the fallback rule, explicit overrides."""

import pytest
from support import EXAMPLES, needs_triton

import karchive
from karchive.errors import ArgumentError, NoMatchingVariantError
from karchive.format.autotune import AutotuneRecord
from karchive.runtime.autotuned import AutotuneResolver
from karchive.runtime.device import DeviceInfo

pytestmark = needs_triton
SIG = "*fp16:16, *fp16:16, *fp16:16, i32, i32, i32, i32:16, i32:1, i32:16, i32:1, i32:16, i32:1"
CONFIGS = [({"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 32}, 4), ({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32}, 8)]
H100 = DeviceInfo.describe_target("cuda:90", shared_optin=227 * 1024)
A = 0x7F0000000000  # 16-byte aligned device addresses (selection only: nothing is launched)


@pytest.fixture(scope="module")
def tuned_archive(tmp_path_factory):
    from karchive.producer.build.pack import ArchiveBuilder
    from karchive.producer.compile.aot import VariantRequest, compile_variant

    variants = [
        compile_variant(
            VariantRequest(
                f"{EXAMPLES / 'kernels.py'}:matmul_kernel", SIG, "cuda:90", cx, {"num_warps": w, "num_stages": 3}
            )
        )
        for cx, w in CONFIGS
    ]
    record = {
        "kernel": "kernels:matmul_kernel",
        "key_names": ["M", "N", "K"],
        "dtype_args": [],
        "fallback": "nearest-log2",
        "configs": [{"kwargs": cx, "num_warps": w, "num_stages": 3} for cx, w in CONFIGS],
        "entries": [
            {"key": [128, 128, 128], "config": 0, "variant": variants[0].variant.to_json()["key"]},
            {"key": [4096, 4096, 4096], "config": 1, "variant": variants[1].variant.to_json()["key"]},
        ],
    }
    builder = ArchiveBuilder("tuned", "1", autotune=[record])
    builder.extend(variants)
    path = tmp_path_factory.mktemp("tuned") / "tuned.karc"
    builder.write(path)
    return path, [v.variant.to_json()["key"] for v in variants]


def call(n):
    return (A, A + 4096, A + 8192, n, n, n, n, 1, n, 1, n, 1)


def test_recorded_key_picks_its_variant_and_unseen_keys_fall_back(tuned_archive):
    path, keys = tuned_archive
    k = karchive.open(path).kernel("matmul_kernel")
    assert isinstance(k.resolver, AutotuneResolver) and k.resolver.tuned_names == {"BLOCK_M", "BLOCK_N", "BLOCK_K"}
    assert k.select(*call(128), device=H100).key == keys[0]
    assert k.select(*call(4096), device=H100).key == keys[1]
    # Not tuned: nearest-log2 -> 2048 is nearer 4096 than 128; 96 is nearer 128.
    assert k.select(*call(2048), device=H100).key == keys[1]
    assert k.select(*call(96), device=H100).key == keys[0]


def test_explicit_meta_parameters_bypass_the_records(tuned_archive):
    path, keys = tuned_archive
    k = karchive.open(path).kernel("matmul_kernel")
    assert k.select(*call(4096), BLOCK_M=64, BLOCK_N=128, BLOCK_K=32, device=H100).key == keys[0]
    with pytest.raises(ArgumentError, match="all tuned meta-parameters"):
        k.select(*call(4096), BLOCK_M=64, device=H100)


def test_keys_that_compare_with_nothing_are_refused_clearly(tuned_archive):
    path, _ = tuned_archive
    k = karchive.open(path).kernel("matmul_kernel")
    k.resolver.records = [
        AutotuneRecord.from_json({**k.resolver.records[0].to_json(), "dtype_args": ["a_ptr"]})
    ]  # recorded keys have no dtype part

    class Half:
        dtype = "torch.float16"

    with pytest.raises(NoMatchingVariantError, match="matches no recorded config"):
        k.resolver.choose({"M": 128, "N": 128, "K": 128, "a_ptr": Half()})


def test_plain_kernels_stay_plain(examples_archive):  # one Kernel type, with no resolver
    from karchive.runtime.launch.kernel import Kernel

    assert type(karchive.open(examples_archive).kernel("add_kernel")) is Kernel


@pytest.mark.parametrize("path", ["python", "extension"])
def test_tuned_kernels_are_kernels_and_launch_on_the_chosen_variants_own_path(monkeypatch, tuned_archive, path):
    """One Kernel type: the resolver picks the config, the subset's variant launches. On the Python path the
    resolver runs on every call and the subset's own launch path keys the call; on the compiled path the
    kernel's one dispatcher keys what the resolver reads, so a repeated call runs no resolver (issue 33)."""
    from runtime_support import fake_cuda, register_sizes

    from karchive.runtime import launch_path
    from karchive.runtime.launch.kernel import Kernel

    if path == launch_path.EXTENSION and launch_path.extension() is None:
        pytest.skip("the compiled launcher is not built here")
    p, keys = tuned_archive
    with fake_cuda(monkeypatch, path) as (rec, _backend):
        arc = karchive.open(p)
        register_sizes(rec, arc)
        k = arc.kernel("matmul_kernel")
        assert type(k) is Kernel and "AutotuneResolver: 2 tuned keys" in repr(k)
        resolved = []
        resolve = k.resolver.resolve
        monkeypatch.setattr(k.resolver, "resolve", lambda *a, **kw: resolved.append(a) or resolve(*a, **kw))
        k[(2,)](*call(4096))
        k[(2,)](*call(4096))
        ((cfg, cx, chosen),) = k.resolver._choices.values()
        assert cx == CONFIGS[1][0] and [v.key for v in chosen.variants] == [keys[1]]
        if path == launch_path.EXTENSION:
            assert type(k._run).__name__ == "Dispatcher" and k.cached_calls == 1 and len(resolved) == 1
        else:
            assert chosen.cached_calls == 1 and len(resolved) == 2  # the chosen variants' key cache
            assert type(chosen._run).__name__ == "function"
        launches = rec.launches()
        assert len(launches) == 2 and all(a.grid == (2, 1, 1) and a.block == (8 * 32, 1, 1) for a in launches)
        assert k.select(*call(4096), device=H100).key == keys[1]
