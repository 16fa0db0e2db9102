"""Cold start: a fresh process to the first completed launch of 1 and of N kernels (karchive vs Triton).

    python tools/bench_coldstart.py [--n 100] [--repeat 3] [--json out.json]

karchive child, once per launch path (``KARCHIVE_LAUNCH_PATH=extension``, then ``python``): no torch, no triton; ``import karchive``, open ``.gpu/cold100.karc`` (100 distinct
kernels), initialise the driver and allocate buffers with cuda-python, launch k000 and synchronise
(first launch), then launch k001..k0NN once each and synchronise. The per-kernel cost is
(all - first) / (N - 1): read + verify + decompress + module load + first dispatch + launch.

Triton child: ``import torch, triton``, the same 100 kernels from ``.gpu/cold_kernels.py``, first with
an empty cache directory (cold: compiles), then again with that directory (warm: cache hits).
Timestamps are wall-clock (``time.time``) from just before the parent spawns the child.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]


def child_karchive(n: int) -> dict:
    t = {"start": time.time()}
    sys.path.insert(0, str(ROOT))
    import ctypes

    import karchive

    t["imported"] = time.time()
    arc = karchive.open(str(ROOT / ".gpu" / "cold100.karc"))
    kernels = [arc.kernel(f"k{i:03d}") for i in range(n)]
    t["opened"] = time.time()
    from cuda.bindings import driver as d

    assert d.cuInit(0)[0] == 0
    dev = d.cuDeviceGet(0)[1]
    ctx = d.cuDevicePrimaryCtxRetain(dev)[1]
    d.cuCtxSetCurrent(ctx)
    size = 1 << 12
    bufs = [int(d.cuMemAlloc(4 * size)[1]) for _ in range(3)]
    host = (ctypes.c_float * size)(*([1.0] * size))
    d.cuMemcpyHtoD(bufs[0], host, 4 * size)
    d.cuMemcpyHtoD(bufs[1], host, 4 * size)
    t["driver_ready"] = time.time()
    grid = (size // 1024,)
    kernels[0][grid](bufs[0], bufs[1], bufs[2], size, BLOCK=1024)
    assert d.cuCtxSynchronize()[0] == 0
    t["first_done"] = time.time()
    for k in kernels[1:]:
        k[grid](bufs[0], bufs[1], bufs[2], size, BLOCK=1024)
    assert d.cuCtxSynchronize()[0] == 0
    t["all_done"] = time.time()
    t["launch_path"] = kernels[0].launch_path
    res = (ctypes.c_float * size)()
    d.cuMemcpyDtoH(res, bufs[2], 4 * size)
    assert res[0] == float(n) + 1.0, res[0]  # k{n-1}: x * n + y
    assert "torch" not in sys.modules and "triton" not in sys.modules
    # Breakdown over all N kernels in a fresh Archive: read (+ sha256 verify + zstd decompress) vs module load.
    from karchive.runtime.backend import get_backend

    backend = get_backend("cuda")
    again = karchive.open(str(ROOT / ".gpu" / "cold100.karc"))
    variants = [again.variants(f"k{i:03d}")[0] for i in range(n)]
    r0 = time.perf_counter()
    images = [again.reader.read(v.binary.path) for v in variants]
    r1 = time.perf_counter()
    for v, img in zip(variants, images):
        backend.load(0, img, v.abi.entry, v.abi.shared, v.abi.num_ctas)
    r2 = time.perf_counter()
    t["read_verify_decompress_ms_per_kernel"] = (r1 - r0) * 1e3 / n
    t["module_load_ms_per_kernel"] = (r2 - r1) * 1e3 / n
    return t


def child_triton(n: int) -> dict:
    t = {"start": time.time()}
    import torch

    t["torch_imported"] = time.time()
    import triton  # noqa: F401

    t["imported"] = time.time()
    sys.path.insert(0, str(ROOT / ".gpu"))
    import cold_kernels as ck

    kernels = [getattr(ck, f"k{i:03d}") for i in range(n)]
    t["opened"] = time.time()
    size = 1 << 12
    x = torch.ones(size, device="cuda")
    y = torch.ones(size, device="cuda")
    out = torch.empty(size, device="cuda")
    torch.cuda.synchronize()
    t["driver_ready"] = time.time()
    grid = (size // 1024,)
    kernels[0][grid](x, y, out, size, BLOCK=1024)
    torch.cuda.synchronize()
    t["first_done"] = time.time()
    for k in kernels[1:]:
        k[grid](x, y, out, size, BLOCK=1024)
    torch.cuda.synchronize()
    t["all_done"] = time.time()
    assert out[0].item() == float(n) + 1.0
    return t


def spawn(kind: str, n: int, env: dict | None = None) -> dict:
    t0 = time.time()
    r = subprocess.run(
        [sys.executable, __file__, "--child", kind, "--n", str(n)],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=900,
    )
    if r.returncode != 0:
        raise RuntimeError(f"{kind} child failed:\n{r.stdout}\n{r.stderr}")
    t = json.loads(r.stdout.strip().splitlines()[-1])
    out = {
        k: (v - t0) * 1e3 if not k.endswith("_per_kernel") and k != "launch_path" else v for k, v in t.items()
    }  # ms since spawn
    out["exit"] = (time.time() - t0) * 1e3
    out["first_launch_ms"] = out["first_done"]
    out["n_launch_ms"] = out["all_done"]
    out["per_kernel_ms"] = (out["all_done"] - out["first_done"]) / max(n - 1, 1)
    out["first_kernel_after_ready_ms"] = out["first_done"] - out["driver_ready"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--child")
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-triton", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.child:
        fn = child_karchive if args.child == "karchive" else child_triton
        print(json.dumps(fn(args.n)))
        return
    report: dict = {"n": args.n}
    sys.path.insert(0, str(ROOT))
    from karchive.runtime import launch_path

    paths = ["extension", "python"] if launch_path.extension() is not None else ["python"]
    for path in paths:
        runs = [spawn("karchive", args.n, {"KARCHIVE_LAUNCH_PATH": path}) for _ in range(args.repeat)]
        assert all(r["launch_path"] == path for r in runs), runs
        name = "karchive" if path == "extension" else f"karchive_{path}"
        report[name] = {k: statistics.median(r[k] for r in runs) for k in runs[0] if k != "launch_path"}
        report[name + "_runs"] = runs
    if not args.skip_triton:
        with tempfile.TemporaryDirectory() as cache:
            env = {"TRITON_CACHE_DIR": cache}
            report["triton_cold"] = spawn("triton", args.n, env)
            report["triton_warm"] = spawn("triton", args.n, env)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(report, indent=2))
    keys = [
        "imported",
        "opened",
        "driver_ready",
        "first_done",
        "all_done",
        "per_kernel_ms",
        "first_kernel_after_ready_ms",
        "torch_imported",
        "read_verify_decompress_ms_per_kernel",
        "module_load_ms_per_kernel",
    ]
    print(f"cold start, ms since spawn (N={args.n} kernels):")
    for name in ("karchive", "karchive_python", "triton_cold", "triton_warm"):
        r = report.get(name)
        if r:
            print(f"  {name:16s} " + "  ".join(f"{k}={r[k]:.1f}" for k in keys if k in r))
    per = report.get("karchive", report.get("karchive_python", {})).get("per_kernel_ms")
    if per is not None:
        print(f"per further kernel: {per:.3f} ms (target <= 1 ms): {'met' if per <= 1.0 else 'MISSED'}")


if __name__ == "__main__":
    main()
