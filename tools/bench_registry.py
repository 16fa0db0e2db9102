"""Measure the registry against a real S3 server (moto, on loopback): what one variant costs remotely,
what a full pull and a cache hit cost. Counts are taken at the server, not in the client.

    python tools/bench_registry.py [--variants 400]

Needs the test extras (moto[server], s3fs) and Triton (to compile the seed variants).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", type=int, default=400)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()

    from registry_servers import s3_server
    from registry_support import big_archive

    from karchive.registry import Registry
    from karchive.registry.store_layout import blob_path

    archive = big_archive("bench", "1.0.0", args.variants)
    s3 = s3_server()
    url = f"s3://{s3.new_bucket()}/reg"
    work = Path(tempfile.mkdtemp(prefix="karchive-bench-"))

    t = time.perf_counter()
    record = Registry(url, s3.storage_options(), cache=work / "w").publish(archive).record
    publish_s = time.perf_counter() - t
    print(f"archive: {record.size} bytes, {record.variants} variants; publish to S3: {publish_s * 1e3:.0f} ms")

    mark = s3.mark()
    t = time.perf_counter()
    reg = Registry(url, s3.storage_options(), cache=work / "lazy")
    reader = reg.open("bench@1.0.0", fetch="lazy")
    variants = reader.model.variants_of(reader.model.kernels()[0])  # format 2: that kernel's shard only
    variant = variants[len(variants) // 2]
    reader.read(variant.binary.path)
    lazy_s = time.perf_counter() - t
    blob = s3.requests_for(blob_path(record.sha256), mark)
    total = s3.requests_for("/", mark)
    frame = reader.frames[reader.members[variant.binary.path].frame]
    print(
        f"lazy load of one variant: {len(total)} requests ({len(blob)} ranged GETs on the archive: "
        f"{', '.join(r['range'] for r in blob)}), {sum(r['bytes'] for r in blob)} archive bytes "
        f"(variant frame {frame.length} B), {lazy_s * 1e3:.0f} ms"
    )

    t = time.perf_counter()
    pulled = Registry(url, s3.storage_options(), cache=work / "full").pull("bench@1.0.0")
    print(f"full pull + verify into the cache: {(time.perf_counter() - t) * 1e3:.0f} ms -> {pulled.path}")

    reg = Registry(url, s3.storage_options(), cache=work / "full")
    mark = s3.mark()
    lookups, opens = [], []
    for _ in range(args.repeat):
        t = time.perf_counter()
        rec = reg.record_for("bench@1.0.0")
        reg.cache.lookup(rec.sha256, rec.size)
        lookups.append(time.perf_counter() - t)
        t = time.perf_counter()
        reg.open("bench@1.0.0")
        opens.append(time.perf_counter() - t)
    print(
        f"cache hit: resolve + receipt check {statistics.median(lookups) * 1e3:.3f} ms (no hashing), "
        f"open incl. ArchiveReader parse {statistics.median(opens) * 1e3:.1f} ms; "
        f"{len(s3.requests_for('/', mark))} requests to the server"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
