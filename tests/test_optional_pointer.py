"""A parameter that is a pointer in some variants and None in others (an optional input, e.g. fla's `g`):
both launch paths launch the variant the call fits. The compiled path once refused such a kernel with a bare
`ValueError: Entry does not fit this kernel's call values` (serving fla's chunk_delta_rule on the H100,
2026-11-24): its dispatcher checked a pointer slot against the kernel-wide role even for an entry that
converts its own values in Python."""

from __future__ import annotations

import pytest
from support import needs_triton

pytestmark = needs_triton

SRC = """import triton
import triton.language as tl


@triton.jit
def scale(x_ptr, g_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    if g_ptr is not None:
        x = x * tl.load(g_ptr + offs, mask=offs < n)
    tl.store(x_ptr + offs, x, mask=offs < n)
"""


class _F32:
    def __str__(self) -> str:
        return "torch.float32"


class Tensor:
    """A torch.Tensor stand-in (address, dtype, device)."""

    def __init__(self, ptr: int) -> None:
        self._ptr = ptr

    def data_ptr(self) -> int:
        return self._ptr

    @property
    def dtype(self) -> _F32:
        return _F32()

    def get_device(self) -> int:
        return 0


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    from karchive.producer.build.pack import ArchiveBuilder
    from karchive.producer.compile.aot import VariantRequest, compile_variant

    d = tmp_path_factory.mktemp("optional")
    src = d / "optional_kernels.py"
    src.write_text(SRC)
    builder = ArchiveBuilder("optional", "1")
    builder.extend(
        [
            compile_variant(VariantRequest(f"{src}:scale", sig, "cuda:90", {"BLOCK": 64}, {"num_warps": 4}))
            for sig in ("*fp32:16, None, i32", "*fp32:16, *fp32:16, i32")
        ]
    )
    out = d / "optional.karc"
    manifest, writer = builder.manifest_and_writer()
    writer.write(out, manifest)
    return out


@pytest.mark.parametrize("path", ["python", "extension"])
def test_none_and_a_tensor_each_launch_their_own_variant(archive, monkeypatch, path):
    from runtime_support import fake_cuda, launched_variant, register_sizes

    import karchive
    from karchive.runtime import args, launch_path

    args.set_tensor_type(Tensor)
    try:
        with fake_cuda(monkeypatch, launch_path.PYTHON if path == "python" else launch_path.EXTENSION) as (rec, _b):
            arc = karchive.open(str(archive))
            register_sizes(rec, arc)
            k = arc.kernel("scale")
            calls = [None, Tensor(0x7F10_0000_0000), None, Tensor(0x7F10_0000_0000)]
            for g in calls:
                k[(16,)](Tensor(0x7F00_0000_0000), g, 1000, BLOCK=64)
            launched = rec.launches()
            assert len(launched) == 4
            took = [launched_variant(rec, arc, la).params[1] for la in launched]
            assert [p.is_constexpr for p in took] == [True, False, True, False]
            assert launched[1].params[1] == (0x7F10_0000_0000).to_bytes(8, "little")  # g's address reached the binary
    finally:
        args.set_tensor_type(None)


@pytest.mark.parametrize("path", ["python", "extension"])
def test_none_is_never_a_null_pointer(cuda_archive, monkeypatch, path):
    """Where every variant takes a pointer, a None argument is refused on both paths (Triton would compile the
    constexpr None: a binary the archive does not hold); an explicit address 0 is a null pointer."""
    from runtime_support import fake_cuda

    import karchive
    from karchive.errors import NoMatchingVariantError
    from karchive.runtime import launch_path

    with fake_cuda(monkeypatch, launch_path.PYTHON if path == "python" else launch_path.EXTENSION) as (rec, _b):
        arc = karchive.open(str(cuda_archive))
        with pytest.raises(NoMatchingVariantError, match="y_ptr is None, which Triton compiles as the constexpr None"):
            arc.kernel("add_kernel")[(1,)](0x7F00_0000_0000, None, 0x7F20_0000_0000, 5)
        assert rec.launches() == []
