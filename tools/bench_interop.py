"""Framework bridges side by side: host cost per call through torch, JAX and CuPy, and JAX's first call.

    python tools/bench_interop.py [--archive .gpu/examples.karc] [--rounds 31] [--calls 200] [--json out.json]

Per-call sections launch ``add_kernel`` on 4096 float32 elements (host-bound: the GPU work is a few µs
at most) ``calls`` times in a loop timed with perf_counter, synchronised before and after, outside
the timed region; the result is the median over ``rounds`` of (loop time / calls), methods interleaved
round by round. Each section has its framework's own elementwise add as the yardstick.

- torch: the ``karchive.interop.torch`` custom op (eager and inside ``torch.compile(fullgraph=True)``),
  the runtime's ``k[grid](...)`` and ``bound()``, Triton's own launch, ``x + y``; and the two ways of
  reading torch's current stream (``current_stream().cuda_stream`` vs ``_cuda_getCurrentRawStream``).
- jax: ``jax.jit`` of ``triton_call`` (cubin path) vs ``jax.jit`` of ``x + y``, steady state.
- jax first call: a fresh process per sample (the median of ``--first-repeat``): JAX initialised by one
  trivial jitted function, then the first call of another trivial jitted function (the yardstick) and
  the first call of a jitted ``triton_call`` per path (trace, lower, ptxas or module load, run).
- cupy: the runtime on CuPy arrays (CuPy's current stream), on raw pointers with an explicit stream,
  ``bound()``, and ``cupy.add``.

Sections whose framework is missing are reported as skipped. Needs a CUDA GPU and the fixtures of
tests/gpu/build_fixtures.py (examples.karc, jaxptx.karc); tools/gpu_suite.sh runs it.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # share the GPU with torch and CuPy
ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
N = 4096
BLOCK = 1024


def grid(meta: dict) -> tuple[int]:
    return ((meta["n_elements"] + meta["BLOCK"] - 1) // meta["BLOCK"],)


def timeit_rounds(fns: dict[str, Callable[[], Any]], sync: Callable[[], Any], rounds: int, calls: int) -> dict:
    """Median and half-spread of µs per call over ``rounds``, methods interleaved round by round."""
    for fn in fns.values():  # warm: module loads, compiles, caches
        for _ in range(20):
            fn()
    sync()
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            sync()
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            t1 = time.perf_counter()
            samples[name].append((t1 - t0) / calls * 1e6)
    sync()
    return {
        k: {"us": round(statistics.median(v), 3), "spread": round((max(v) - min(v)) / 2, 3)} for k, v in samples.items()
    }


def _load(path: pathlib.Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# -- sections ---------------------------------------------------------------------------------------------
def bench_torch(arc: Any, rounds: int, calls: int) -> dict:
    try:
        import torch
    except ImportError as exc:
        return {"skipped": f"torch not installed ({exc})"}
    if not torch.cuda.is_available():
        return {"skipped": "torch sees no CUDA GPU"}
    from karchive.interop import torch as kt

    k = arc.kernel("add_kernel")
    op = kt.custom_op("karchive_bench::add", k, out="out_ptr", grid=grid, constexprs={"BLOCK": BLOCK})
    x, y = torch.randn(N, device="cuda"), torch.randn(N, device="cuda")
    out = torch.empty_like(x)
    bound = k.bind(grid, x, y, out, N, BLOCK=BLOCK)
    compiled = torch.compile(lambda a, b: op(a, b, a.numel()), fullgraph=True)
    fns: dict[str, Callable[[], Any]] = {
        "custom op, eager": lambda: op(x, y, N),
        "custom op, torch.compile(fullgraph=True)": lambda: compiled(x, y),
        "runtime k[grid](...)": lambda: k[grid](x, y, out, N, BLOCK=BLOCK),
        "runtime bound()": bound,
        "torch x + y (yardstick)": lambda: torch.add(x, y, out=out),
    }
    try:
        tk = _load(ROOT / "examples" / "kernels.py", "bench_interop_kernels")
        g = grid({"n_elements": N, "BLOCK": BLOCK})
        fns["triton k[grid](...)"] = lambda: tk.add_kernel[g](x, y, out, N, BLOCK=BLOCK)
    except Exception as exc:
        print(f"  (no Triton launch: {type(exc).__name__}: {exc})")
    per_call = timeit_rounds(fns, torch.cuda.synchronize, rounds, calls)
    streams = timeit_rounds(
        {
            "torch.cuda.current_stream().cuda_stream": lambda: torch.cuda.current_stream().cuda_stream,
            "torch._C._cuda_getCurrentRawStream(0)": lambda: torch._C._cuda_getCurrentRawStream(0),
        },
        lambda: None,
        rounds,
        calls * 10,
    )
    return {"per_call": per_call, "stream_read": streams, "torch": torch.__version__}


def bench_jax_steady(arc: Any, rounds: int, calls: int) -> dict:
    try:
        import jax
        import jax.numpy as jnp
    except ImportError as exc:
        return {"skipped": f"jax not installed ({exc})"}
    if not any(d.platform == "gpu" for d in jax.devices()):
        return {"skipped": "JAX sees no CUDA GPU"}
    from karchive.interop import jax as kj

    k = arc.kernel("add_kernel")
    x = jnp.arange(N, dtype=jnp.float32)
    y = jnp.ones_like(x)
    sd = jax.ShapeDtypeStruct((N,), jnp.float32)
    f_triton = jax.jit(lambda a, b: kj.triton_call(k, a, b, N, out_shape=sd, grid=grid, BLOCK=BLOCK))
    f_plain = jax.jit(lambda a, b: a + b)
    last: dict[str, Any] = {}

    def run(f: Callable) -> Callable[[], None]:
        def call() -> None:
            last["out"] = f(x, y)

        return call

    per_call = timeit_rounds(
        {"jit(triton_call) add": run(f_triton), "jit(x + y) (yardstick)": run(f_plain)},
        lambda: last["out"].block_until_ready() if last else None,
        rounds,
        calls,
    )
    return {"per_call": per_call, "jax": jax.__version__, "jaxlib_support": kj.jaxlib_support().summary()}


FIRST_CALL_CHILD = r"""
import json, os, sys, time
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
sys.path.insert(0, sys.argv[1])
archive, mode = sys.argv[2], sys.argv[3]
t = {}
t0 = time.perf_counter()
import jax, jax.numpy as jnp
import karchive
from karchive.interop import jax as kj
x = jnp.ones(4096, jnp.float32)
jax.jit(lambda a: a * 3.0)(x).block_until_ready()
t["jax_init_ms"] = (time.perf_counter() - t0) * 1e3
t0 = time.perf_counter()
jax.jit(lambda a, b: a * b + 1.0)(x, x).block_until_ready()
t["trivial_jit_first_ms"] = (time.perf_counter() - t0) * 1e3
k = karchive.open(archive).kernel("add_kernel")
sd = jax.ShapeDtypeStruct((4096,), jnp.float32)
grid = lambda m: ((m["n_elements"] + m["BLOCK"] - 1) // m["BLOCK"],)
f = jax.jit(lambda a, b: kj.triton_call(k, a, b, 4096, out_shape=sd, grid=grid, BLOCK=1024, mode=mode))
t0 = time.perf_counter()
try:
    out = f(x, x).block_until_ready()
    t["triton_call_first_ms"] = (time.perf_counter() - t0) * 1e3
    t["correct"] = bool((out == 2.0).all())
except Exception as exc:
    t["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
print("RESULT " + json.dumps(t))
"""


def bench_jax_first_call(archives: dict[str, pathlib.Path], repeat: int) -> dict:
    try:
        import jax
    except ImportError as exc:
        return {"skipped": f"jax not installed ({exc})"}
    if not any(d.platform == "gpu" for d in jax.devices()):
        return {"skipped": "JAX sees no CUDA GPU"}
    out: dict[str, Any] = {}
    for label, (mode, archive) in {
        "cubin": ("cubin", archives["examples"]),
        "auto": ("auto", archives["examples"]),
        "ptx (examples.karc)": ("ptx", archives["examples"]),
        "ptx (jaxptx.karc, ISA 8.4)": ("ptx", archives["jaxptx"]),
    }.items():
        runs = []
        for _ in range(repeat):
            r = subprocess.run(
                [sys.executable, "-c", FIRST_CALL_CHILD, str(ROOT), str(archive), mode],
                capture_output=True,
                text=True,
                timeout=180,
            )
            line = next((ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")), None)
            if line is None:
                runs.append({"error": (r.stderr or r.stdout).strip().splitlines()[-1:] or ["no output"]})
                break
            runs.append(json.loads(line[len("RESULT ") :]))
            if "error" in runs[-1]:
                break
        ok = [x for x in runs if "triton_call_first_ms" in x]
        entry: dict[str, Any] = {"runs": runs}
        if ok:
            for key in ("jax_init_ms", "trivial_jit_first_ms", "triton_call_first_ms"):
                entry[key] = round(statistics.median(x[key] for x in ok), 1)
            entry["correct"] = all(x.get("correct") for x in ok)
        else:
            entry["error"] = runs[-1].get("error") if runs else "no run"
        out[label] = entry
        print(f"  jax first call, {label}: " + (f"{entry['triton_call_first_ms']} ms" if ok else str(entry["error"])))
    return out


def bench_cupy(arc: Any, rounds: int, calls: int) -> dict:
    try:
        import cupy as cp
    except ImportError as exc:
        return {"skipped": f"cupy not installed ({exc})"}
    k = arc.kernel("add_kernel")
    x = cp.random.standard_normal(N, dtype=cp.float32)
    y = cp.random.standard_normal(N, dtype=cp.float32)
    out = cp.empty_like(x)
    s = cp.cuda.Stream(non_blocking=True)
    px, py, po, sp = x.data.ptr, y.data.ptr, out.data.ptr, s.ptr
    bound = k.bind(grid, x, y, out, N, BLOCK=BLOCK)

    def sync() -> None:
        cp.cuda.Device().synchronize()

    per_call = timeit_rounds(
        {
            "runtime k[grid](cupy arrays)": lambda: k[grid](x, y, out, N, BLOCK=BLOCK),
            "runtime k[grid](int pointers, stream=int)": lambda: k[grid](px, py, po, N, BLOCK=BLOCK, stream=sp),
            "runtime bound()": bound,
            "cupy.add(x, y, out=out) (yardstick)": lambda: cp.add(x, y, out=out),
        },
        sync,
        rounds,
        calls,
    )
    return {"per_call": per_call, "cupy": cp.__version__}


# -- report -----------------------------------------------------------------------------------------------
def print_table(title: str, section: dict) -> None:
    print(f"\n{title}")
    if "skipped" in section:
        print(f"  skipped: {section['skipped']}")
        return
    for key in ("per_call", "stream_read"):
        rows = section.get(key)
        if not rows:
            continue
        width = max(len(name) for name in rows)
        for name, v in rows.items():
            print(f"  {name:<{width}}  {v['us']:>9.2f} µs  ± {v['spread']:.2f}")


def print_first_call(section: dict) -> None:
    print("\nJAX first call, fresh process each (median ms)")
    if "skipped" in section:
        print(f"  skipped: {section['skipped']}")
        return
    print(f"  {'path':<28} {'JAX init':>9} {'trivial jit':>12} {'triton_call':>12}")
    for label, e in section.items():
        if "error" in e:
            print(f"  {label:<28} error: {str(e['error'])[:120]}")
            continue
        print(
            f"  {label:<28} {e['jax_init_ms']:>9.1f} {e['trivial_jit_first_ms']:>12.1f} "
            f"{e['triton_call_first_ms']:>12.1f}{'' if e['correct'] else '  WRONG RESULT'}"
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--archive", default=str(ROOT / ".gpu" / "examples.karc"))
    ap.add_argument("--jaxptx", default=str(ROOT / ".gpu" / "jaxptx.karc"))
    ap.add_argument("--rounds", type=int, default=31)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--first-repeat", type=int, default=3)
    ap.add_argument("--json", help="write every number to this file")
    args = ap.parse_args()

    import karchive

    arc = karchive.open(args.archive)
    results: dict[str, Any] = {
        "archive": args.archive,
        "python": platform.python_version(),
        "n": N,
        "rounds": args.rounds,
        "calls": args.calls,
    }
    # torch first (before JAX takes its share of the GPU), then JAX, then CuPy.
    for name, fn in (
        ("torch", lambda: bench_torch(arc, args.rounds, args.calls)),
        ("jax", lambda: bench_jax_steady(arc, args.rounds, args.calls)),
        (
            "jax_first_call",
            lambda: bench_jax_first_call(
                {"examples": pathlib.Path(args.archive), "jaxptx": pathlib.Path(args.jaxptx)}, args.first_repeat
            ),
        ),
        ("cupy", lambda: bench_cupy(arc, args.rounds, args.calls)),
    ):
        print(f"== {name}", flush=True)
        try:
            results[name] = fn()
        except Exception as exc:
            results[name] = {"error": f"{type(exc).__name__}: {exc}"}
            print(f"  FAILED: {results[name]['error']}")
    print(f"\nhost µs per call, {N} float32 elements, median of {args.rounds} rounds x {args.calls} calls")
    for name, title in (("torch", "torch"), ("jax", "JAX (steady state)"), ("cupy", "CuPy")):
        if "error" not in results[name]:
            print_table(title, results[name])
    if "error" not in results["jax_first_call"]:
        print_first_call(results["jax_first_call"])
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=2, default=str) + "\n")
    failed = [k for k in ("torch", "jax", "jax_first_call", "cupy") if "error" in results[k]]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
