#!/usr/bin/env python3
"""Archive size against raw bytes and against one solid `zstd -19` of the same members, side by side.

Builds (1) the example archive from examples/build.toml and (2) a larger generated one with hundreds
of variants, then for each reports: raw member bytes, karchive as built (per-variant frames with a
trained dictionary when it pays), karchive without a dictionary, and a solid zstd -19 of a tar of the
same members (no random access). Usage: python tools/bench_archive.py [--large N] [--json OUT]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tarfile
import time

import zstandard

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")

from karchive.format.reader import ArchiveReader  # noqa: E402
from karchive.producer.aot import VariantRequest, toolchain_versions  # noqa: E402
from karchive.producer.build import compile_all  # noqa: E402
from karchive.producer.pack import ArchiveBuilder  # noqa: E402
from karchive.producer.spec_file import load_spec  # noqa: E402

KERNELS = os.path.join(ROOT, "examples", "kernels.py")


def large_requests(n: int) -> list[VariantRequest]:
    """Hundreds of realistic variants: block sizes x warps x targets over the example kernels."""
    reqs: list[VariantRequest] = []
    targets = ["cuda:80", "cuda:90", "hip:gfx942"]
    for t in targets:
        for block in (64, 128, 256, 512, 1024, 2048, 4096):
            for warps in (1, 2, 4, 8):
                reqs.append(VariantRequest(f"{KERNELS}:add_kernel", "*fp32:16, *fp32:16, *fp32:16, i32", t,
                                           {"BLOCK": block}, {"num_warps": warps}))
                reqs.append(VariantRequest(f"{KERNELS}:scale_kernel", "*fp16:16, *fp16:16, i32, i32, fp32", t,
                                           {"BLOCK": block}, {"num_warps": warps}))
        for block in (128, 256, 512, 1024, 2048, 4096):
            for warps in (2, 4, 8, 16):
                reqs.append(VariantRequest(f"{KERNELS}:softmax_kernel", "*fp32:16, *fp32:16, i32, i32, i32", t,
                                           {"BLOCK": block}, {"num_warps": warps}))
        for bm, bn, bk in ((32, 64, 32), (64, 64, 32), (64, 128, 32), (128, 64, 32), (128, 128, 32)):
            for warps in (4, 8):
                reqs.append(VariantRequest(
                    f"{KERNELS}:matmul_kernel",
                    "*fp16:16, *fp16:16, *fp16:16, i32, i32, i32, i32:16, i32:1, i32:16, i32:1, i32:16, i32:1", t,
                    {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk}, {"num_warps": warps, "num_stages": 3}))
    return reqs[:n]


def solid_zstd(reader: ArchiveReader, level: int = 19) -> int:
    """One tar of every member (dictionary excluded), compressed as a single zstd -19 frame."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name in sorted(reader.members):
            if name.endswith(".zdict"):
                continue
            data = reader._member_unchecked(reader.members[name])
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    # Single-threaded like `zstd -19`: multi-threaded compression splits the input and compresses worse.
    return len(zstandard.ZstdCompressor(level=level).compress(buf.getvalue()))


def measure(label: str, variants, name: str) -> dict:
    out: dict = {"archive": label, "variants": len(variants)}
    for mode in ("auto", "none"):
        builder = ArchiveBuilder(name, "bench", produced_by=toolchain_versions(), dictionary=mode)
        builder.extend(variants)
        start = time.perf_counter()
        data, stats = builder.to_bytes()
        out[f"karchive_{mode}"] = len(data)
        out[f"pack_seconds_{mode}"] = round(time.perf_counter() - start, 2)
        if mode == "auto":
            out["raw"] = stats.raw_bytes
            out["dictionary_bytes"] = stats.dictionary_bytes
            reader = ArchiveReader.from_bytes(data)
            out["solid_zstd19"] = solid_zstd(reader)
            # Random access cost: bytes read to open + load the largest variant's binary frame.
            frames = [reader.frames[reader.members[v["files"]["binary"]["path"]].frame].length
                      for v in reader.manifest["variants"]]
            out["largest_launch_frame"] = max(frames)
    out["ratio_vs_solid"] = round(out["karchive_auto"] / out["solid_zstd19"], 3)
    out["ratio_nodict_vs_solid"] = round(out["karchive_none"] / out["solid_zstd19"], 3)
    out["compression_vs_raw"] = round(out["raw"] / out["karchive_auto"], 1)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--large", type=int, default=300, help="variants in the generated archive")
    ap.add_argument("-j", "--jobs", type=int, default=0)
    ap.add_argument("--json", help="write results as JSON here")
    args = ap.parse_args()
    rows = []
    spec = load_spec(os.path.join(ROOT, "examples", "build.toml"))
    built, failed = compile_all(spec.requests, jobs=args.jobs, progress=False)
    assert not failed, failed
    rows.append(measure("examples (examples/build.toml)", built, "examples"))
    reqs = large_requests(args.large)
    t0 = time.perf_counter()
    built, failed = compile_all(reqs, jobs=args.jobs, progress=True)
    print(f"compiled {len(built)} large-archive variants in {time.perf_counter() - t0:.1f}s "
          f"({len(failed)} failed)", file=sys.stderr)
    rows.append(measure(f"generated ({len(built)} variants)", built, "large"))
    cols = ["archive", "variants", "raw", "solid_zstd19", "karchive_auto", "karchive_none", "dictionary_bytes",
            "ratio_vs_solid", "ratio_nodict_vs_solid", "compression_vs_raw", "largest_launch_frame"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(str(r[c]) for c in cols) + " |")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
