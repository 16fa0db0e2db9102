#!/usr/bin/env python3
"""Archive size against raw bytes and against one solid `zstd -19` of the same members, side by side.

Builds (1) the example archive from examples/build.toml, (2) a larger generated one with hundreds of
real compiles and, with ``--scale N``, (3) N variants generated as tools/bench_scale.py does (real
seeds re-keyed, with per-variant noise), then for each reports: raw member bytes; karchive format 2.0
as built (per-kernel frames, a small trained dictionary when it pays) and without a dictionary;
format 1.0 (one frame per variant, a large dictionary; skipped for --scale, whose COVER training on
all the content would take an hour); and a solid zstd -19 of a tar of the same members (no random
access), with the members in name order (as before) and in the archive's order.

Usage: python tools/bench_archive.py [--large N] [--scale N] [--json OUT]
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
from karchive.producer.build.pack import ArchiveBuilder  # noqa: E402
from karchive.producer.build.pipeline import compile_all  # noqa: E402
from karchive.producer.build.spec_file import load_spec  # noqa: E402
from karchive.producer.compile.aot import VariantRequest, toolchain_versions  # noqa: E402

KERNELS = os.path.join(ROOT, "examples", "kernels.py")


def large_requests(n: int) -> list[VariantRequest]:
    """Hundreds of realistic variants: block sizes x warps x targets over the example kernels."""
    reqs: list[VariantRequest] = []
    targets = ["cuda:80", "cuda:90", "hip:gfx942"]
    for t in targets:
        for block in (64, 128, 256, 512, 1024, 2048, 4096):
            for warps in (1, 2, 4, 8):
                reqs.append(
                    VariantRequest(
                        f"{KERNELS}:add_kernel",
                        "*fp32:16, *fp32:16, *fp32:16, i32",
                        t,
                        {"BLOCK": block},
                        {"num_warps": warps},
                    )
                )
                reqs.append(
                    VariantRequest(
                        f"{KERNELS}:scale_kernel",
                        "*fp16:16, *fp16:16, i32, i32, fp32",
                        t,
                        {"BLOCK": block},
                        {"num_warps": warps},
                    )
                )
        for block in (128, 256, 512, 1024, 2048, 4096):
            for warps in (2, 4, 8, 16):
                reqs.append(
                    VariantRequest(
                        f"{KERNELS}:softmax_kernel",
                        "*fp32:16, *fp32:16, i32, i32, i32",
                        t,
                        {"BLOCK": block},
                        {"num_warps": warps},
                    )
                )
        for bm, bn, bk in ((32, 64, 32), (64, 64, 32), (64, 128, 32), (128, 64, 32), (128, 128, 32)):
            for warps in (4, 8):
                reqs.append(
                    VariantRequest(
                        f"{KERNELS}:matmul_kernel",
                        "*fp16:16, *fp16:16, *fp16:16, i32, i32, i32, i32:16, i32:1, i32:16, i32:1, i32:16, i32:1",
                        t,
                        {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk},
                        {"num_warps": warps, "num_stages": 3},
                    )
                )
    return reqs[:n]


def solid_zstd(reader: ArchiveReader, level: int = 19, archive_order: bool = True) -> tuple[int, int | None]:
    """One tar of every member (manifest, shards and dictionary excluded), compressed as a single
    zstd -19 frame: (members in name order, members in the archive's order or None if not asked for)."""
    members = [(n, d) for n, d in reader.iter_members() if not n.startswith("karchive/")]
    out: list[int | None] = []
    for order in (sorted(members), members) if archive_order else (sorted(members),):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
            for name, data in order:
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        # Single-threaded like `zstd -19`: multi-threaded compression splits the input and compresses worse.
        out.append(len(zstandard.ZstdCompressor(level=level).compress(buf.getvalue())))
    return out[0] or 0, out[1] if archive_order else None


def solid_per_kernel(reader: ArchiveReader, level: int = 19) -> int:
    """Sum over kernels of one solid zstd -19 frame over a tar of that kernel's variant members (name order)."""
    total = 0
    for kernel in reader.model.kernels():
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
            for name in sorted(ref.path for v in reader.model.variants_of(kernel) for ref in v.members()):
                data = reader.read(name)
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        total += len(zstandard.ZstdCompressor(level=level).compress(buf.getvalue()))
    return total


def measure(label: str, variants, name: str, v1: bool = True, nodict: bool = True) -> dict:
    out: dict = {"archive": label, "variants": len(variants)}
    modes = (
        [("v2", (2, 0), "auto")]
        + ([("v2_nodict", (2, 0), "none")] if nodict else [])
        + ([("v1", (1, 0), "auto")] if v1 else [])
    )
    for key, version, dictionary in modes:
        builder = ArchiveBuilder(name, "bench", produced_by=toolchain_versions(), dictionary=dictionary)
        builder.extend(variants)
        start = time.perf_counter()
        if version == (1, 0):  # karchive writes format 2 only; the old 1.0 writer lives on in tests/
            sys.path.insert(0, os.path.join(ROOT, "tests"))
            from format1_writer import build_format1

            data, stats = build_format1(builder)
        else:
            data, stats = builder.to_bytes()
        out[key] = len(data)
        out[f"pack_s_{key}"] = round(time.perf_counter() - start, 1)
        reader = ArchiveReader.from_bytes(data)
        # Random access cost: the largest frame a loader decodes for one variant's binary.
        frames = [reader.frames[reader.members[v.binary.path].frame] for v in reader.model.variants]
        out[f"largest_launch_frame_{key}"] = max(f.length for f in frames)
        out[f"largest_launch_frame_decoded_{key}"] = max(f.size for f in frames)
        if key == "v2":
            out["raw"] = stats.raw_bytes
            out["dictionary_bytes"] = stats.dictionary_bytes
            out["solid_zstd19"], out["solid_zstd19_archive_order"] = solid_zstd(reader)
        del data, reader
    for key, _, _ in modes:
        out[f"ratio_{key}"] = round(out[key] / out["solid_zstd19"], 3)
        out[f"ratio_{key}_vs_archive_order"] = round(out[key] / out["solid_zstd19_archive_order"], 3)
    out["compression_vs_raw"] = round(out["raw"] / out["v2"], 1)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--large", type=int, default=300, help="variants in the generated archive of real compiles")
    ap.add_argument("--scale", type=int, default=0, help="also N variants generated from re-keyed seeds (10000)")
    ap.add_argument("--kernels", type=int, default=40, help="kernels of the --scale archive")
    ap.add_argument("-j", "--jobs", type=int, default=0)
    ap.add_argument(
        "--measure",
        nargs="+",
        metavar="ARCHIVE",
        help="only compare these existing archives (e.g. tools/bench_scale.py --keep's 10,000-variant "
        "one) with a solid zstd -19 of their members in name order",
    )
    ap.add_argument(
        "--per-kernel",
        action="store_true",
        help="with --measure: also the sum of one solid zstd -19 per kernel (each kernel's variant "
        "members alone): what compression within kernels can reach, without cross-kernel matches",
    )
    ap.add_argument("--json", help="write results as JSON here")
    args = ap.parse_args()
    rows = []
    if args.measure:
        for path in args.measure:
            reader = ArchiveReader.from_path(path)
            raw = sum(m.size for n, m in reader.members.items() if not n.startswith("karchive/"))
            t0 = time.perf_counter()
            solid, _ = solid_zstd(reader, archive_order=False)
            size = os.path.getsize(path)
            rows.append(
                {
                    "archive": os.path.basename(path),
                    "variants": len(reader.model),
                    "raw": raw,
                    "format": reader.model.format_version,
                    "bytes": size,
                    "solid_zstd19": solid,
                    "ratio": round(size / solid, 3),
                    "solid_s": round(time.perf_counter() - t0, 1),
                }
            )
            if args.per_kernel:
                rows[-1]["solid_zstd19_per_kernel_sum"] = per_kernel = solid_per_kernel(reader)
                rows[-1]["ratio_per_kernel"] = round(size / per_kernel, 3)
            print(rows[-1], flush=True)
        if args.json:
            with open(args.json, "w") as fh:
                json.dump(rows, fh, indent=2)
        return 0
    spec = load_spec(os.path.join(ROOT, "examples", "build.toml"))
    built, failed = compile_all(spec.requests, jobs=args.jobs, progress=False)
    assert not failed, failed
    rows.append(measure("examples (examples/build.toml)", built, "examples"))
    reqs = large_requests(args.large)
    t0 = time.perf_counter()
    built, failed = compile_all(reqs, jobs=args.jobs, progress=True)
    print(
        f"compiled {len(built)} large-archive variants in {time.perf_counter() - t0:.1f}s ({len(failed)} failed)",
        file=sys.stderr,
    )
    rows.append(measure(f"generated ({len(built)} variants)", built, "large"))
    if args.scale:
        sys.path.insert(0, os.path.join(ROOT, "tools"))
        import bench_scale

        seed_vs = bench_scale.seeds(bench_scale.TARGETS, None, args.jobs)
        variants = bench_scale.generate(seed_vs, args.scale, args.kernels, bench_scale.TARGETS)
        del built, seed_vs
        rows.append(
            measure(
                f"scale ({args.scale} variants, {args.kernels} kernels x 5 targets, re-keyed seeds)",
                variants,
                "scale",
                v1=False,
                nodict=False,
            )
        )
    cols = [
        "archive",
        "variants",
        "raw",
        "solid_zstd19",
        "solid_zstd19_archive_order",
        "v2",
        "v2_nodict",
        "v1",
        "dictionary_bytes",
        "ratio_v2",
        "ratio_v2_vs_archive_order",
        "ratio_v1",
        "compression_vs_raw",
        "largest_launch_frame_v2",
        "largest_launch_frame_v1",
    ]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(str(r.get(c, "-")) for c in cols) + " |")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
