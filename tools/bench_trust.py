"""What a trust policy costs at load, side by side with the same load without one: a local file, a
cached registry archive (verdict from the receipt, and verified afresh), and a lazy (ranged) open
from a real S3 server (moto, on loopback), with the requests counted at the server.

    python tools/bench_trust.py [--variants 400] [--repeat 30]

Needs the test extras (moto[server], s3fs, cryptography) and Triton (to compile the seed variants).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]


def _timed(fn: Callable[[], Any]) -> float:
    t = time.perf_counter()
    out = fn()
    elapsed = time.perf_counter() - t
    close = getattr(getattr(out, "source", None), "close", None)
    if callable(close):
        close()
    return elapsed


def pair(plain: Callable[[], Any], trusted: Callable[[], Any], repeat: int) -> tuple[float, float]:
    """Median ms of each, measured alternately so that load on a shared machine hits both alike."""
    a, b = [], []
    for _ in range(repeat):
        a.append(_timed(plain))
        b.append(_timed(trusted))
    return statistics.median(a) * 1e3, statistics.median(b) * 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", type=int, default=400)
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()

    from registry_servers import s3_server
    from registry_support import big_archive

    from karchive.format.open import open_location
    from karchive.registry import OpenOptions, Registry
    from karchive.resolve import open as open_ref
    from karchive.trust.keys import SigningKey
    from karchive.trust.policy import TrustPolicy
    from karchive.trust.sign import sign_archive

    work = Path(tempfile.mkdtemp(prefix="karchive-bench-trust-"))
    archive = work / "bench.karc"
    archive.write_bytes(big_archive("bench", "1.0.0", args.variants).read_bytes())
    key = SigningKey.generate()
    sign_archive(archive, key)
    policy = TrustPolicy.from_bytes(
        f'version = 1\n[[keys]]\nname = "ci"\npublic_key = "{key.public.inline()}"\n'
        '[[rules]]\nnames = ["*"]\nkeys = ["ci"]\n'.encode(),
        "bench-policy.toml",
    )
    size = archive.stat().st_size
    print(f"archive: {size} bytes, {args.variants} variants, 1 signature; median of {args.repeat} opens each\n")

    rows: list[tuple[Any, ...]] = []
    rows.append(
        (
            "local file (policy: hash file + verify sidecar)",
            *pair(lambda: open_location(archive), lambda: open_ref(str(archive), trust=policy), args.repeat),
        )
    )

    reg = Registry(work / "registry", cache=work / "cache")
    reg.publish(archive)  # stores the sidecar's signature beside the blob
    reg.pull("bench@1.0.0", options=OpenOptions(trust=policy))
    rows.append(
        (
            "registry, cached (policy: verdict from the receipt)",
            *pair(
                lambda: reg.open("bench@1.0.0", trust=False), lambda: reg.open("bench@1.0.0", trust=policy), args.repeat
            ),
        )
    )
    rows.append(
        (
            "registry, cached (policy: verified afresh)",
            *pair(
                lambda: reg.open("bench@1.0.0", trust=False),
                lambda: reg.open("bench@1.0.0", trust=policy, reuse_verdict=False),
                args.repeat,
            ),
        )
    )

    s3 = s3_server()
    url = f"s3://{s3.new_bucket()}/reg"
    Registry(url, s3.storage_options(), cache=work / "w").publish(archive)
    requests = {}
    for label, trust in (("none", False), ("policy", policy)):
        lazy = Registry(url, s3.storage_options(), cache=work / f"lazy-{label}")
        lazy.open("bench@1.0.0", fetch="lazy", trust=trust)  # warm: the version record is cached after this
        mark = s3.mark()
        lazy.open("bench@1.0.0", fetch="lazy", trust=trust)
        requests[label] = len(s3.requests_for("/", mark))
    lazy = Registry(url, s3.storage_options(), cache=work / "lazy-t")
    rows.append(
        (
            "S3 lazy open (policy: list + fetch signatures)",
            *pair(
                lambda: lazy.open("bench@1.0.0", fetch="lazy", trust=False),
                lambda: lazy.open("bench@1.0.0", fetch="lazy", trust=policy),
                args.repeat,
            ),
        )
    )

    width = max(len(r[0]) for r in rows)
    print(f"{'open':<{width}}  {'no policy':>10}  {'policy':>10}  {'extra':>9}")
    for label, plain, trusted in rows:
        print(f"{label:<{width}}  {plain:>8.2f}ms  {trusted:>8.2f}ms  {trusted - plain:>+7.2f}ms")
    print(
        f"\nS3 requests per lazy open (version record cached): {requests['none']} without a policy, "
        f"{requests['policy']} with one"
    )

    code = "import time; t = time.perf_counter(); import karchive.trust.keys; print(time.perf_counter() - t)"
    imports = sorted(
        float(
            subprocess.run(
                [sys.executable, "-c", code], capture_output=True, text=True, check=True, env={"PYTHONPATH": str(ROOT)}
            ).stdout
        )
        for _ in range(5)
    )
    print(
        f"importing cryptography (first policy load in a process): median {imports[2] * 1e3:.0f} ms "
        f"(range {imports[0] * 1e3:.0f}-{imports[-1] * 1e3:.0f})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
