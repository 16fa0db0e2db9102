"""Helpers shared by the interop tests (a plain module: test modules do not import each other)."""

from __future__ import annotations

from karchive.interop import _proto as P


def _field(name: str, number: int, typ: int, type_name: str = "") -> bytes:
    return (
        P.f_bytes(1, name.encode())
        + P.f_varint(3, number)
        + P.f_varint(4, 1)
        + P.f_varint(5, typ)
        + P.f_bytes(6, type_name.encode())
    )


def fake_triton_descriptor(module_image: int | None = 11, scratch: bool = True) -> bytes:
    """A FileDescriptorProto shaped like jaxlib/gpu/triton.proto with the newer fields."""
    k = [
        ("kernel_name", 1, P.TYPE_STRING),
        ("num_warps", 2, P.TYPE_UINT32),
        ("shared_mem_bytes", 3, P.TYPE_UINT32),
        ("ptx", 4, P.TYPE_STRING),
        ("ttir", 5, P.TYPE_STRING),
        ("compute_capability", 6, P.TYPE_UINT32),
        ("num_ctas", 10, P.TYPE_UINT32),
    ]
    fields = b"".join(P.f_bytes(2, _field(n, i, t)) for n, i, t in k)
    if scratch:
        fields += P.f_bytes(2, _field("global_scratch_size", 12, P.TYPE_UINT32))
        fields += P.f_bytes(2, _field("global_scratch_align", 13, P.TYPE_UINT32))
    if module_image:
        fields += P.f_bytes(2, _field("module_image", module_image, P.TYPE_MESSAGE, ".jax_triton.ModuleImageProto"))
    kernel = P.f_bytes(1, b"TritonKernel") + fields
    image = P.f_bytes(1, b"ModuleImageProto") + b"".join(
        P.f_bytes(2, _field(n, i, t))
        for n, i, t in (
            ("kernel_name", 1, P.TYPE_STRING),
            ("object_file", 2, P.TYPE_BYTES),
            ("shared_mem_bytes", 3, P.TYPE_UINT32),
        )
    )
    param = P.f_bytes(1, b"TritonKernelCall") + P.f_bytes(3, P.f_bytes(1, b"Parameter"))
    return (
        P.f_bytes(1, b"jaxlib/gpu/triton.proto")
        + P.f_bytes(2, b"jax_triton")
        + P.f_bytes(4, kernel)
        + P.f_bytes(4, param)
        + P.f_bytes(4, image)
        + P.f_bytes(12, b"proto3")
    )
