"""Host time per launch, same process: karchive dispatcher, karchive bound path, Triton, raw cuLaunchKernel.

    python tools/bench_launch.py [--archive .gpu/bench.karc] [--rounds 41] [--launches 200] [--json out.json]

Each method launches the same tiny problem ``launches`` times in a loop timed with perf_counter; the
GPU is synchronised between rounds (outside the timed loop); the result is the median over
``rounds`` of (loop time / launches). Methods are interleaved round by round so drift hits all alike.
The raw baseline calls ``cuda.bindings.driver.cuLaunchKernel`` on the very CUfunction karchive loaded
(same cubin) with a pre-packed ``void**`` and a pre-made CUstream. Triton launches its own JIT
compile of the same source (the GPU machine's Triton). Needs torch, triton and cuda-python.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import json
import pathlib
import platform
import statistics
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _load(path: pathlib.Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def timeit_rounds(fns: dict, rounds: int, launches: int, sync) -> dict[str, float]:
    samples: dict[str, list[float]] = {k: [] for k in fns}
    rng = range(launches)
    for _ in range(rounds):
        for name, fn in fns.items():
            sync()
            t0 = time.perf_counter()
            for _ in rng:
                fn()
            t1 = time.perf_counter()
            samples[name].append((t1 - t0) / launches * 1e6)
    sync()
    return {k: statistics.median(v) for k, v in samples.items()} | {
        k + "__spread": (max(v) - min(v)) / 2 for k, v in samples.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--archive", default=str(ROOT / ".gpu" / "bench.karc"))
    ap.add_argument("--rounds", type=int, default=61)
    ap.add_argument("--launches", type=int, default=400)
    ap.add_argument("--json")
    args = ap.parse_args()

    import torch
    import triton
    from cuda.bindings import driver as d

    import karchive

    tk = _load(ROOT / "examples" / "kernels.py", "bench_examples_kernels")
    xk = _load(ROOT / "tests" / "gpu" / "extra_kernels.py", "bench_extra_kernels")
    arc = karchive.open(args.archive)
    n = 4096
    BLOCK = 1024
    grid = ((n + BLOCK - 1) // BLOCK,)
    x, y, out = (torch.randn(n, device="cuda") for _ in range(3))
    ins16 = [torch.randn(n, device="cuda") for _ in range(14)]
    sync = torch.cuda.synchronize
    results: dict[str, dict] = {}

    for label, kname, kargs, tfn in [
        ("4 args", "add_kernel", (x, y, out, n), tk.add_kernel),
        ("16 args", "add16_kernel", (out, *ins16, n), xk.add16_kernel),
    ]:
        k = arc.kernel(kname)
        run = k[grid]
        run(*kargs, BLOCK=BLOCK)  # select + load
        bound = k.bind(grid, *kargs, BLOCK=BLOCK)
        ent = bound.entry
        # Raw: same CUfunction, own pre-packed buffer, pre-made CUstream.
        from karchive.runtime.pack import ParamLayout

        layout = ParamLayout(ent.variant.abi)
        layout.pack(ent.convert([a.data_ptr() if hasattr(a, "data_ptr") else a for a in kargs]))
        func, params = ent.loaded.function, layout.kernel_params
        stream = d.CUstream(torch.cuda.current_stream().cuda_stream)
        launch = d.cuLaunchKernel
        bx, shared = ent.block[0], ent.shared
        gx = grid[0]

        def raw():
            launch(func, gx, 1, 1, bx, 1, 1, shared, stream, params, 0)

        def dispatcher():
            run(*kargs, BLOCK=BLOCK)

        def dispatcher_subscript():
            k[grid](*kargs, BLOCK=BLOCK)

        def bound_same():
            bound()

        def bound_repack():
            bound(*kargs)

        def triton_launch():
            tfn[grid](*kargs, BLOCK=BLOCK)

        triton_launch()
        fns = {"raw cuLaunchKernel": raw, "karchive bound()": bound_same, "karchive bound(*args)": bound_repack,
               "karchive run = k[grid]; run(...)": dispatcher, "karchive k[grid](...)": dispatcher_subscript,
               "triton k[grid](...)": triton_launch}
        for fn in fns.values():  # warm
            for _ in range(50):
                fn()
        sync()
        # correctness of what we time
        out.zero_()
        raw()
        sync()
        assert torch.equal(out, kargs[1] + kargs[2]) if kname == "add16_kernel" else torch.equal(out, x + y)
        results[label] = timeit_rounds(fns, args.rounds, args.launches, sync)
        # The same measurement again: the difference between the passes is the noise floor.
        results[label + " (pass 2)"] = timeit_rounds(fns, args.rounds, args.launches, sync)

    # stream getters
    get_raw = torch._C._cuda_getCurrentRawStream
    micro = timeit_rounds({"torch._C._cuda_getCurrentRawStream(0)": lambda: get_raw(0),
                           "torch.cuda.current_stream()": torch.cuda.current_stream,
                           "tensor.data_ptr()": x.data_ptr, "tensor.dtype": lambda: x.dtype,
                           "tensor.get_device()": x.get_device, "tensor.is_cuda": lambda: x.is_cuda,
                           "empty lambda": lambda: None}, 21, 2000, lambda: None)

    from cuda import bindings

    info = {
        "gpu": torch.cuda.get_device_name(0), "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "python": platform.python_version(), "torch": torch.__version__, "triton": triton.__version__,
        "cuda_python": getattr(bindings, "__version__", "?"), "driver": d.cuDriverGetVersion()[1],
        "archive_triton": arc.manifest.produced_by.get("triton"), "rounds": args.rounds, "launches": args.launches,
    }
    report = {"info": info, "results": results, "micro": micro}
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(report, indent=2))
    print(json.dumps(info))
    for label, r in results.items():
        raw_us = r["raw cuLaunchKernel"]
        print(f"\n{label}: host us per launch (median of {args.rounds} rounds x {args.launches}), ratio to raw")
        for name in [k for k in r if not k.endswith("__spread")]:
            print(f"  {name:36s} {r[name]:7.2f} us  +-{r[name + '__spread']:.2f}  {r[name] / raw_us:5.2f}x")
    for suffix in ("", " (pass 2)"):
        a4, a16 = results["4 args" + suffix], results["16 args" + suffix]
        for name in [k for k in a4 if not k.endswith("__spread")]:
            print(f"  per extra arg{suffix}, {name:36s} {(a16[name] - a4[name]) / 12:6.3f} us")
    for name, v in micro.items():
        if not name.endswith("__spread"):
            print(f"  {name:40s} {v:6.3f} us")


if __name__ == "__main__":
    main()
