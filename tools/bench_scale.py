#!/usr/bin/env python3
"""Archives of 10,000+ variants: open + select + load latency, S3 requests, inspect, verify memory.

Side by side in one run, on the same generated variants: format 2 (per-kernel manifest shards, the
default) and format 1 (one manifest, every member in the index), for

* **local**: ``karchive.open(path)``, ``arc.kernel(name).select(...)`` for an sm_90 device (no GPU
  needed), then reading the chosen variant's binary (read + sha256 + decompress; the GPU module load
  is not part of it), through the plain ``arc.kernel(name)`` and through ``arc.kernel(name,
  targets=["cuda:90"])``. Median of ``--repeat`` runs of each in this process (interleaved, each on a
  fresh open after an untimed garbage collection), and one run in a fresh process (imports excluded:
  they are the same for any archive).
* **S3**: the same through a registry on a real S3 protocol server (moto, loopback); requests and
  bytes counted at the server (as tests/test_registry_remote.py does).
* **OCI**: the same through an ``oci://`` registry (Debian's docker-registry on loopback); requests and bytes
  counted at a proxy in front of it.
* **inspect**: ``karchive inspect --summary`` and the full ``karchive inspect`` as CLI processes (wall time).
* **verify**: ``karchive verify`` as a CLI process, peak RSS, for archives of growing size.

Variants are generated the way tests/registry_support.big_archive does: real Triton compiles (seeds:
the example kernels x ``--targets`` x 3 configs) re-keyed, each with its own constexpr value, options,
shared-memory size, 1 KiB of incompressible noise in the binary and a random line in each IR stage, so
that sizes and parsing costs are those of distinct variants. The shape is ``--kernels`` kernels x
targets x configs. Format 1 is built at zstd level 3 without a dictionary (its COVER training on
500 MB would take an hour; the latency it shows is parsing, not decompression).

    python tools/bench_scale.py [--variants 10000] [--kernels 40] [--json OUT] [--seeds CACHE.karc]

Needs Triton (seeds), and moto[server] + s3fs for the S3 part (--no-s3 skips it), docker-registry + oras for
the OCI part (--no-oci skips it).
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")

KERNELS = str(ROOT / "examples" / "kernels.py")
TARGETS = ("cuda:80", "cuda:90", "cuda:100", "hip:gfx942", "hip:gfx950")
#: (kernel, signature, constexpr name, configs as (constexprs, options)).
SEED_KERNELS = (
    (
        "add_kernel",
        "*fp32:16, *fp32:16, *fp32:16, i32",
        "BLOCK",
        [({"BLOCK": b}, {"num_warps": w}) for b, w in ((256, 2), (1024, 4), (4096, 8))],
    ),
    (
        "scale_kernel",
        "*fp16:16, *fp16:16, i32, i32, fp32",
        "BLOCK",
        [({"BLOCK": b}, {"num_warps": w}) for b, w in ((256, 2), (1024, 4), (4096, 8))],
    ),
    (
        "softmax_kernel",
        "*fp32:16, *fp32:16, i32, i32, i32",
        "BLOCK",
        [({"BLOCK": b}, {"num_warps": w}) for b, w in ((256, 4), (1024, 4), (4096, 8))],
    ),
    (
        "matmul_kernel",
        "*fp16:16, *fp16:16, *fp16:16, i32, i32, i32, i32:16, i32:1, i32:16, i32:1, i32:16, i32:1",
        "BLOCK_M",
        [
            ({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": 32}, {"num_warps": w, "num_stages": 3})
            for m, n, w in ((64, 64, 4), (128, 64, 4), (128, 128, 8))
        ],
    ),
)


# -- variants ---------------------------------------------------------------------------------------
def seeds(targets: tuple[str, ...], cache: str | None, jobs: int) -> list:
    """Real compiles (kept in ``cache``, an archive, when given: later runs skip compiling)."""
    from karchive.producer.compile.describe import CompiledVariant

    if cache and os.path.exists(cache):
        from karchive.format.reader import ArchiveReader

        r = ArchiveReader.from_path(cache)
        out = []
        for v in r.model.variants:
            files = {"binary": r.read(v.binary.path), "metadata": r.read(v.metadata.path)}
            files.update({stage: r.read(ref.path) for stage, ref in v.ir.items()})
            out.append(CompiledVariant(v, files, r.read(v.source).decode() if v.source else None))
        if {str(v.variant.target) for v in out} >= set(targets):
            return out
    from karchive.producer.build.pipeline import compile_all
    from karchive.producer.compile.aot import VariantRequest

    reqs = [
        VariantRequest(f"{KERNELS}:{k}", sig, t, cx, opts)
        for k, sig, _, configs in SEED_KERNELS
        for t in targets
        for cx, opts in configs
    ]
    t0 = time.perf_counter()
    built, failed = compile_all(reqs, jobs=jobs, progress=False)
    if failed:
        raise SystemExit(f"seed compiles failed: {failed[:3]}")
    print(f"compiled {len(built)} seeds in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    if cache:
        from karchive.producer.build.pack import ArchiveBuilder

        b = ArchiveBuilder("seeds", "1", level=3)
        b.extend(built)
        b.write(cache)
    return built


def _noise(key: str, n: int) -> bytes:
    return b"".join(hashlib.sha256(f"{key}-{j}".encode()).digest() for j in range((n + 31) // 32))[:n]


def generate(seed_variants: list, n: int, kernels: int, targets: tuple[str, ...], ir_bytes: int | None = None) -> list:
    """``n`` distinct variants: ``kernels`` kernels (the seed kernels renamed) x targets x configs.

    ``ir_bytes`` keeps only the first bytes of each IR stage (plus the variant's own line): the manifest
    and shards are those of full IR (every stage is a member with its digest), but 100,000 variants fit
    in memory and compress in minutes. IR is never on the load path."""
    from karchive.format.manifest import Param
    from karchive.format.names import short_name

    by = {}
    for s in seed_variants:  # seeds are filed as kernels:add_kernel (module:qualname); SEED_KERNELS names them short
        by.setdefault((short_name(s.kernel), str(s.variant.target)), []).append(s)
    for group in by.values():
        group.sort(key=lambda s: s.key)
    configs = -(-n // (kernels * len(targets)))
    out = []
    for j in range(kernels):
        base, _, cx_name, _ = SEED_KERNELS[j % len(SEED_KERNELS)]
        name = f"{base.removesuffix('_kernel')}_{j:03d}"
        for t in targets:
            for c in range(configs):
                if len(out) == n:
                    return out
                seed = by[(base, t)][c % len(by[(base, t)])]
                key = hashlib.sha256(f"scale-{name}-{t}-{c}".encode()).hexdigest()
                v = seed.variant
                params = tuple(replace(p, constexpr=64 * (c + 1)) if p.name == cx_name else p for p in v.params)
                assert any(isinstance(p, Param) and p.name == cx_name for p in params)
                variant = replace(
                    v,
                    kernel=name,
                    params=params,
                    options={**v.options, "num_stages": 1 + c % 4},
                    abi=replace(v.abi, shared=v.abi.shared + 256 * c),
                )
                files = dict(seed.files)
                files["binary"] = seed.files["binary"] + _noise(key, 1024)  # incompressible, as big_archive
                meta = json.loads(seed.files["metadata"])
                meta["bench_variant"] = key
                files["metadata"] = json.dumps(meta, sort_keys=True).encode()
                for stage in v.ir:
                    body = seed.files[stage] if ir_bytes is None else seed.files[stage][:ir_bytes]
                    files[stage] = body + f"\n// {_noise(key + stage, 32).hex()}\n".encode()
                cv = type(seed)(variant, seed.files, seed.source_text)
                out.append(cv.rekeyed(key, files))
    return out


def build(variants: list, path: Path, version: tuple[int, int], level: int, dictionary: str) -> dict:
    """Build (or, with --keep, reuse an archive an earlier run left there: the same inputs give the same bytes)."""
    from karchive.producer.build.pack import ArchiveBuilder

    if path.exists():
        from karchive.format.reader import ArchiveReader

        r = ArchiveReader.from_path(path, limits=WIDE)
        return {
            "path": str(path),
            "format": "{}.{}".format(*r.format_version),
            "variants": len(variants),
            "bytes": path.stat().st_size,
            "reused": True,
        }
    b = ArchiveBuilder("scale", "1.0", level=level, dictionary=dictionary)
    b.extend(variants)
    t0 = time.perf_counter()
    if version == (1, 0):  # karchive writes format 2 only; the old 1.0 writer lives on in tests/
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
        from format1_writer import build_format1

        data, stats = build_format1(b)
        path.write_bytes(data)
    else:
        stats = b.write(path)
    from karchive.format.constants import FORMAT_VERSION

    written = version if version == (1, 0) else FORMAT_VERSION  # karchive writes its own 2.x minor
    return {
        "path": str(path),
        "format": f"{written[0]}.{written[1]}",
        "variants": len(variants),
        "bytes": path.stat().st_size,
        "raw": stats.raw_bytes,
        "frames": stats.frames,
        "dictionary": stats.dictionary_bytes,
        "level": level,
        "pack_s": round(time.perf_counter() - t0, 1),
    }


# -- measurements -----------------------------------------------------------------------------------
def _wide() -> object:
    from karchive.format.reader import Limits

    # A format-1 manifest of 10,000 variants holds ~3.4 million JSON values: over the default limit of
    # 2 million (refused as it stands), so the format-1 comparison raises it.
    return Limits(max_json_values=20_000_000)


WIDE = _wide()


def pick(variants: list) -> tuple[str, int]:
    """An add-based kernel from the middle of the archive (select() then takes plain ints) and the
    BLOCK of its middle sm_90 config."""
    adds = sorted({v.kernel for v in variants if v.kernel.startswith("add_")})
    kernel = adds[len(adds) // 2]
    mine = [v for v in variants if v.kernel == kernel and str(v.variant.target) == "cuda:90"]
    v = mine[len(mine) // 2]
    return kernel, next(p.constexpr for p in v.variant.params if p.name == "BLOCK")


OPEN_SELECT_LOAD = """
import sys, time
import karchive
import karchive.runtime.archive, karchive.runtime.launch.kernel, zstandard  # imports are not opening: done first
from karchive.runtime.device import DeviceInfo
dev = DeviceInfo.describe_target("cuda:90", shared_optin=227 * 1024)
A = 0x7F0000000000
def once(ref, kernel, block, targets=None, **kw):
    # targets=["cuda:90"]: a dispatcher for the device's target only (format 2.1 reads that target's shard)
    c0 = time.process_time()
    t0 = time.perf_counter()
    arc = karchive.open(ref, **kw)
    t1 = time.perf_counter()
    v = arc.kernel(kernel, targets=targets).select(A, A, A, 4096, BLOCK=block, device=dev)
    t2 = time.perf_counter()
    binary = arc.reader.read(v.binary.path)
    t3 = time.perf_counter()
    c1 = time.process_time()
    assert len(binary) == v.binary.size and str(v.target) == "cuda:90"
    return t1 - t0, t2 - t1, t3 - t2, t3 - t0, c1 - c0

def once_model(ref, kernel, block, **kw):
    # The same through the format layer alone: the manifest model picks by target and constexpr.
    from karchive.resolve import open as open_ref
    c0 = time.process_time()
    t0 = time.perf_counter()
    reader = open_ref(ref, **kw)
    v = next(v for v in reader.model.variants_of(kernel, "cuda:90") if v.constexprs["BLOCK"] == block)
    binary = reader.read(v.binary.path)
    assert len(binary) == v.binary.size
    return time.perf_counter() - t0, time.process_time() - c0
"""


def local_latency(path: str, kernel: str, block: int, repeat: int) -> dict:
    ns: dict = {}
    exec(compile(OPEN_SELECT_LOAD, "bench", "exec"), ns)  # noqa: S102 - the same code runs in the child below
    # One unmeasured run of each, then the two interleaved, each after a full garbage collection (not
    # timed): an opened archive is freed by the cycle collector, and a run that pays for collecting
    # the previous ones' (or the generated variants') measured up to 25 ms more at 100,000 variants.
    # A cold start in a fresh process has no such garbage (fresh_process_total_ms).
    ns["once"](path, kernel, block, limits=WIDE)
    ns["once"](path, kernel, block, ["cuda:90"], limits=WIDE)
    runs, only = [], []
    for _ in range(repeat):
        gc.collect()
        runs.append(ns["once"](path, kernel, block, limits=WIDE))
        gc.collect()
        only.append(ns["once"](path, kernel, block, ["cuda:90"], limits=WIDE))
    med = [statistics.median(r[i] for r in runs) * 1e3 for i in range(5)]
    med_only = [statistics.median(r[i] for r in only) * 1e3 for i in range(5)]
    model = [ns["once_model"](path, kernel, block, limits=WIDE) for _ in range(repeat)]
    child = (
        OPEN_SELECT_LOAD + "\nfrom karchive.format.reader import Limits\n"
        f"r = once({path!r}, {kernel!r}, {block}, limits=Limits(max_json_values=20_000_000))\n"
        "print(' '.join(str(x * 1e3) for x in r))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", child],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    ).stdout.split()
    fresh = [float(x) for x in out]
    return {
        "open_ms": round(med[0], 2),
        "select_ms": round(med[1], 2),
        "load_ms": round(med[2], 2),
        "total_ms": round(med[3], 2),
        "total_min_ms": round(min(r[3] for r in runs) * 1e3, 2),
        "total_cpu_ms": round(med[4], 2),
        "fresh_process_total_ms": round(fresh[3], 2),
        "targets_select_ms": round(med_only[1], 2),
        "targets_total_ms": round(med_only[3], 2),
        "targets_total_min_ms": round(min(r[3] for r in only) * 1e3, 2),
        "fresh_process_open_ms": round(fresh[0], 2),
        "load_average": os.getloadavg()[0],
        "model_path_ms": round(statistics.median(r[0] for r in model) * 1e3, 2),
        "model_path_cpu_ms": round(statistics.median(r[1] for r in model) * 1e3, 2),
    }


def s3_costs(paths: dict[str, str], kernel: str, block: int) -> dict:
    from registry_servers import s3_server

    import karchive
    from karchive.errors import KarchiveError
    from karchive.registry import Registry
    from karchive.registry.store_layout import blob_path

    ns: dict = {}
    exec(compile(OPEN_SELECT_LOAD, "bench", "exec"), ns)  # noqa: S102
    s3 = s3_server()
    out = {}
    work = Path(tempfile.mkdtemp(prefix="karchive-bench-scale-"))
    for label, path in paths.items():
        bucket = s3.new_bucket()
        url = f"s3://{bucket}/reg"
        note = "through the registry (lazy fetch)"
        try:
            record = Registry(url, s3.storage_options(), cache=work / f"pub-{label}").publish(path).record
            key, ref, kw = (
                blob_path(record.sha256),
                "scale@1.0",
                {"registry": url, "cache_dir": work / f"lazy-{label}", "fetch": "lazy"},
            )
        except KarchiveError as exc:  # format 1 at 10,000 variants: over the default JSON limits
            note = f"publish refused ({type(exc).__name__}: {str(exc)[:120]}); read as a plain s3:// object"
            import s3fs

            fs = s3fs.S3FileSystem(**s3.storage_options())
            fs.put(path, f"{bucket}/plain.karc")
            key, ref, kw = "plain.karc", f"s3://{bucket}/plain.karc", {}
        mark = s3.mark()
        t0 = time.perf_counter()
        ns["once"](ref, kernel, block, storage_options=s3.storage_options(), limits=WIDE, **kw)
        wall = time.perf_counter() - t0
        blob = [r for r in s3.requests_for(key, mark) if r["method"] == "GET"]
        every = s3.requests_for("/", mark)
        out[label] = {
            "blob_requests": len(blob),
            "blob_bytes": sum(r["bytes"] for r in blob),
            "ranges": [r["range"] for r in blob],
            "all_requests": len(every),
            "archive_bytes": Path(path).stat().st_size,
            "wall_ms": round(wall * 1e3, 1),
            "how": note,
        }
    del karchive
    return out


def oci_costs(paths: dict[str, str], kernel: str, block: int) -> dict:
    """As :func:`s3_costs`, through an OCI registry (Debian's docker-registry with htpasswd, on loopback,
    tools/oci_registry.sh), requests and bytes counted at a proxy in front of it (tests/oci_servers.py)."""
    from oci_servers import FaultProxy, OciRegistry

    from karchive.errors import KarchiveError
    from karchive.registry import Registry

    ns: dict = {}
    exec(compile(OPEN_SELECT_LOAD, "bench", "exec"), ns)  # noqa: S102
    upstream = OciRegistry()
    proxy = FaultProxy(upstream)
    out: dict = {}
    work = Path(tempfile.mkdtemp(prefix="karchive-bench-oci-"))
    try:
        for label, path in paths.items():
            space = f"bench{len(out)}"
            try:
                record = (
                    Registry(upstream.url(space), upstream.options(), cache=work / f"pub-{label}").publish(path).record
                )
            except KarchiveError as exc:  # format 1 at 10,000 variants: over the default JSON limits
                out[label] = {"how": f"publish refused ({type(exc).__name__}: {str(exc)[:120]})"}
                continue
            mark = proxy.mark()
            t0 = time.perf_counter()
            ns["once"](
                "scale@1.0",
                kernel,
                block,
                storage_options=upstream.options(),
                limits=WIDE,
                registry=proxy.url(space),
                cache_dir=work / f"lazy-{label}",
                fetch="lazy",
            )
            wall = time.perf_counter() - t0
            every = proxy.log[mark:]
            blob = [r for r in every if f"/blobs/sha256:{record.sha256}" in r[1] and r[0] == "GET"]
            out[label] = {
                "blob_requests": len(blob),
                "blob_bytes": sum(r[4] for r in blob),
                "ranges": [r[3] for r in blob],
                "all_requests": len(every),
                "archive_bytes": Path(path).stat().st_size,
                "wall_ms": round(wall * 1e3, 1),
                "how": "through an oci:// registry (lazy fetch, blob range requests)",
            }
    finally:
        proxy.close()
        upstream.close()
    return out


VERIFY = """
import re, sys, time
from karchive.format.reader import ArchiveReader, Limits
t = time.perf_counter()
problems = ArchiveReader.from_path(sys.argv[1], limits=Limits(max_json_values=20_000_000)).verify()
assert problems == [], problems[:3]
# VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the (large) parent process across fork and exec.
hwm = int(re.search(r"VmHWM:\\s+(\\d+) kB", open("/proc/self/status").read()).group(1))
print(hwm, time.perf_counter() - t)
"""


def verify_rss(path: Path, code: Path = ROOT) -> tuple[float, float]:
    """Peak RSS (MiB) and seconds of ``ArchiveReader(path).verify()`` alone, in a fresh process running the
    karchive found in ``code`` (format 1 with its manifest's JSON limit raised: at 10,000 variants it is
    over the default)."""
    out = subprocess.run(
        [sys.executable, "-c", VERIFY, str(path)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(code)},
    ).stdout.split()
    return round(int(out[0]) / 1024, 1), round(float(out[1]), 1)


def cli(*argv: str) -> tuple[float, int, str]:
    """Wall seconds, peak RSS (KiB) and stdout of ``karchive ARGV`` in a fresh process (-1 seconds: it failed)."""
    code = (
        "import resource, subprocess, sys, time\n"
        "t = time.perf_counter()\n"
        f"p = subprocess.run([sys.executable, '-m', 'karchive.cli.main', *{list(argv)!r}], capture_output=True, text=True)\n"
        "w = time.perf_counter() - t\n"
        "print(w, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, p.returncode)\n"
        "sys.stderr.write(p.stdout[-2000:] + p.stderr[-2000:])\n"
    )
    p = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    wall, rss, rc = p.stdout.split()
    if rc not in ("0",):
        print(f"karchive {' '.join(argv)} exited {rc}: {p.stderr.strip()[-300:]}", file=sys.stderr)
        return -1.0, int(rss), p.stderr
    return float(wall), int(rss), p.stderr


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", type=int, default=10_000)
    ap.add_argument("--kernels", type=int, default=40)
    ap.add_argument("--targets", default=",".join(TARGETS))
    ap.add_argument("--verify-sizes", default="1000,3000,10000", help="variant counts for the verify-RSS series")
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument(
        "--ir-bytes",
        type=int,
        help="keep only this many bytes of each IR stage (for 100,000 variants: "
        "same manifest, members that fit in memory)",
    )
    ap.add_argument("--level", type=int, default=19, help="zstd level of the format 2 archive (19, as karchive builds)")
    ap.add_argument("--dictionary", default="auto", help="dictionary mode of the format 2 archive")
    ap.add_argument("--seeds", help="cache the compiled seeds in this archive (reused when present)")
    ap.add_argument("-j", "--jobs", type=int, default=0)
    ap.add_argument("--no-s3", action="store_true")
    ap.add_argument("--no-oci", action="store_true", help="skip the OCI registry part (needs docker-registry, oras)")
    ap.add_argument("--latency-only", action="store_true", help="stop after the local open/select/load timings")
    ap.add_argument("--verify-only", action="store_true", help="local timings and the verify series only")
    ap.add_argument("--no-v1", action="store_true", help="skip the format 1 comparison")
    ap.add_argument(
        "--keep",
        help="write the archives into this directory (default: a temporary one), and reuse "
        "archives an earlier run left there",
    )
    ap.add_argument(
        "--before",
        help="a directory holding an older karchive package: its reader.verify() on the "
        "format 1 archives is measured too",
    )
    ap.add_argument("--json", help="write all results here")
    args = ap.parse_args()
    targets = tuple(args.targets.split(","))
    work = Path(args.keep or tempfile.mkdtemp(prefix="karchive-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    results: dict = {"variants": args.variants, "kernels": args.kernels, "targets": list(targets)}

    seed_vs = seeds(targets, args.seeds, args.jobs)
    t0 = time.perf_counter()
    variants = generate(seed_vs, args.variants, args.kernels, targets, args.ir_bytes)
    print(
        f"generated {len(variants)} variants from {len(seed_vs)} seeds in {time.perf_counter() - t0:.0f} s",
        file=sys.stderr,
    )
    kernel, block = pick(variants)
    results["selected"] = {"kernel": kernel, "BLOCK": block, "device": "cuda:90"}

    paths = {"format 2": work / f"scale-{args.variants}-v2.karc"}
    results["archives"] = {"format 2": build(variants, paths["format 2"], (2, 0), args.level, args.dictionary)}
    print(f"built {results['archives']['format 2']}", file=sys.stderr)
    if not args.no_v1:
        paths["format 1"] = work / f"scale-{args.variants}-v1.karc"
        results["archives"]["format 1"] = build(variants, paths["format 1"], (1, 0), 3, "none")
        print(f"built {results['archives']['format 1']}", file=sys.stderr)

    series: dict[tuple[str, int], Path] = {}
    for n in sorted({int(x) for x in args.verify_sizes.split(",") if x} | {args.variants}):
        part = variants[:n] if n <= len(variants) else generate(seed_vs, n, args.kernels, targets, args.ir_bytes)
        for fmt, version, level, dictionary in (
            ("2.x", (2, 0), args.level, args.dictionary),
            ("1.0", (1, 0), 3, "none"),
        ):
            if fmt == "1.0" and args.no_v1:
                continue
            p = work / f"scale-{n}-v{version[0]}.karc"
            build(part, p, version, level, dictionary)
            series[(fmt, n)] = p
    del variants, seed_vs  # measure with this process's heap back to its usual size
    gc.collect()

    results["local"] = {label: local_latency(str(p), kernel, block, args.repeat) for label, p in paths.items()}
    print(f"local: {results['local']}", file=sys.stderr)
    if args.latency_only:
        print(json.dumps(results["local"], indent=1))
        return 0
    if args.verify_only:
        args.no_s3 = True
    if not args.no_s3:
        results["s3"] = s3_costs({k: str(v) for k, v in paths.items()}, kernel, block)
        print(f"s3: {results['s3']}", file=sys.stderr)
    if not args.no_oci and not args.verify_only:
        import importlib.util
        import shutil

        if shutil.which("docker-registry") and importlib.util.find_spec("oras"):
            results["oci"] = oci_costs({k: str(v) for k, v in paths.items()}, kernel, block)
            print(f"oci: {results['oci']}", file=sys.stderr)
        else:
            print(
                "oci: skipped (needs docker-registry, tools/oci_registry.sh, and oras: pip install 'karchive[oci]')",
                file=sys.stderr,
            )

    results["inspect"] = {}
    for label, p in paths.items() if not args.verify_only else ():
        summary_s, _, _ = cli("inspect", str(p), "--summary")
        full_s, _, _ = cli("inspect", str(p), "--json")
        results["inspect"][label] = {"summary_s": round(summary_s, 2), "full_json_s": round(full_s, 2)}
    print(f"inspect: {results['inspect']}", file=sys.stderr)

    results["verify"] = []
    for (fmt, n), p in series.items():
        rss_lib, wall_lib = verify_rss(p)
        row = {
            "format": fmt,
            "variants": n,
            "bytes": p.stat().st_size,
            "reader_verify_peak_rss_mib": rss_lib,
            "reader_verify_s": wall_lib,
        }
        if fmt == "2.x":
            wall, rss, _ = cli("verify", str(p))
            row.update(cli_verify_peak_rss_mib=round(rss / 1024, 1), cli_verify_s=round(wall, 1))
        elif args.before:  # the reader before format 2 (e.g. `git archive 84e2c78 karchive | tar -x -C DIR`)
            row["before_reader_verify_peak_rss_mib"], row["before_reader_verify_s"] = verify_rss(p, Path(args.before))
        results["verify"].append(row)
    print(f"verify: {results['verify']}", file=sys.stderr)

    print(
        f"\n{args.variants} variants ({args.kernels} kernels x {len(targets)} targets), select {kernel} "
        f"BLOCK={block} on cuda:90\n"
    )
    print("| | " + " | ".join(paths) + " |")
    print("|---|" + "---:|" * len(paths))
    rows = [
        ("archive bytes", lambda lab: results["archives"][lab]["bytes"]),
        ("open ms (median)", lambda lab: results["local"][lab]["open_ms"]),
        ("select ms", lambda lab: results["local"][lab]["select_ms"]),
        ("load ms (read+sha256+decompress)", lambda lab: results["local"][lab]["load_ms"]),
        ("open+select+load ms", lambda lab: results["local"][lab]["total_ms"]),
        ("  fastest of the runs ms", lambda lab: results["local"][lab]["total_min_ms"]),
        ("  CPU time ms (median)", lambda lab: results["local"][lab]["total_cpu_ms"]),
        ("same, fresh process ms", lambda lab: results["local"][lab]["fresh_process_total_ms"]),
        ("select ms, arc.kernel(k, targets=['cuda:90'])", lambda lab: results["local"][lab]["targets_select_ms"]),
        ("open+select+load ms, targets=['cuda:90']", lambda lab: results["local"][lab]["targets_total_ms"]),
        ("  fastest of the runs ms", lambda lab: results["local"][lab]["targets_total_min_ms"]),
        (
            "format layer only (resolve.open, model.variants_of(k, 'cuda:90') pick, read) ms",
            lambda lab: results["local"][lab]["model_path_ms"],
        ),
        ("  its CPU time ms", lambda lab: results["local"][lab]["model_path_cpu_ms"]),
        ("load average (1 min) during the timings", lambda lab: round(results["local"][lab]["load_average"], 1)),
    ]
    if "s3" in results:
        rows += [
            ("S3 ranged requests", lambda lab: results["s3"][lab]["blob_requests"]),
            ("S3 bytes", lambda lab: results["s3"][lab]["blob_bytes"]),
        ]
    if "oci" in results:
        rows += [
            ("OCI ranged requests", lambda lab: results["oci"][lab].get("blob_requests", "-")),
            ("OCI bytes", lambda lab: results["oci"][lab].get("blob_bytes", "-")),
            ("OCI requests in all (tag, manifest, ranges)", lambda lab: results["oci"][lab].get("all_requests", "-")),
        ]
    if results["inspect"]:
        rows += [
            ("inspect --summary s", lambda lab: results["inspect"][lab]["summary_s"]),
            ("inspect --json (all variants) s", lambda lab: results["inspect"][lab]["full_json_s"]),
        ]
    for label, fn in rows:
        print(f"| {label} | " + " | ".join(str(fn(lab)) for lab in paths) + " |")
    print(
        "\n| verify | variants | archive bytes | reader.verify() peak RSS MiB | s | `karchive verify` peak RSS MiB | s |"
        "\n|---|---:|---:|---:|---:|---:|---:|"
    )
    for r in results["verify"]:
        print(
            f"| format {r['format']} | {r['variants']} | {r['bytes']} | {r['reader_verify_peak_rss_mib']} | "
            f"{r['reader_verify_s']} | {r.get('cli_verify_peak_rss_mib', '-')} | {r.get('cli_verify_s', '-')} |"
        )
        if "before_reader_verify_peak_rss_mib" in r:
            print(
                f"| format 1.0, reader before format 2 | {r['variants']} | {r['bytes']} | "
                f"{r['before_reader_verify_peak_rss_mib']} | {r['before_reader_verify_s']} | - | - |"
            )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
