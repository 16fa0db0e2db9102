"""Where a variant's files live inside an archive (spec/FORMAT.md §4, "Member layout").

Member names derive from content (the variant key, the source's digest), so the same inputs give
the same names; readers never rely on them (they follow the index and the manifest's file objects).
"""

from __future__ import annotations

__all__ = ["BINARY_EXT", "IR_STAGES", "METADATA_EXT", "inductor_cache_member", "source_member", "variant_member"]

#: Binary file extension per backend.
BINARY_EXT: dict[str, str] = {"cuda": "cubin", "hip": "hsaco"}
#: IR stages stored per backend (optional members: slim archives leave them out).
IR_STAGES: dict[str, tuple[str, ...]] = {
    "cuda": ("ttir", "ttgir", "llir", "ptx"),
    "hip": ("ttir", "ttgir", "llir", "amdgcn"),
}
METADATA_EXT = "json"


def variant_member(key: str, ext: str) -> str:
    """``variants/<key>/kernel.<ext>``: the binary, its metadata JSON, or one IR stage."""
    return f"variants/{key}/kernel.{ext}"


def source_member(digest: str) -> str:
    """``sources/<sha256>.py``: a module source, stored once however many variants share it."""
    return f"sources/{digest}.py"


def inductor_cache_member(digest: str) -> str:
    """``inductor/cache-artifacts-<sha256>.bin``: torch's own cache artifacts (Mega-Cache bytes) a capture of a
    ``torch.compile``d model stored (spec/FORMAT.md §6.7)."""
    return f"inductor/cache-artifacts-{digest}.bin"
