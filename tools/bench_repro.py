"""What reproducible builds cost: canonical names and the compile environment per compile, side by side.

    python tools/bench_repro.py [--repeat 5]

For a few example variants, in one process with a fresh Triton cache for each compile:
  raw      triton.compile as Triton's JIT would call it (absolute paths, the shell's environment)
  karchive compile_variant: canonical names + explicit environment + empty cwd + the machine-path scan
and the time spent in karchive's own steps alone (entering/leaving canonical_locations and
compile_environment, scanning). Then the example spec built cold and again with the build cache warm.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import statistics
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

VARIANTS = [
    ("add_kernel", "*fp32:16, *fp32:16, *fp32:16, i32", {"BLOCK": 1024}, "cuda:90"),
    ("softmax_kernel", "*fp32:16, *fp32:16, i32, i32, i32", {"BLOCK": 1024}, "cuda:80"),
    ("softmax_kernel", "*fp32:16, *fp32:16, i32, i32, i32", {"BLOCK": 1024}, "hip:gfx942"),
]


def raw_compile(name: str, sig: str, cx: dict, target: str, cache: str) -> float:
    import triton
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from karchive.format.target import Target
    from karchive.producer.compile.aot import specialize
    from karchive.producer.compile.kernel_ref import load_kernel

    fn, _ = load_kernel(f"{ROOT / 'examples' / 'kernels.py'}:{name}")
    spec = specialize(fn, sig, cx)
    attrs = {
        (i,): ([["tt.divisibility", spec.divisibility[n]]] if n in spec.divisibility else [])
        for i, n in enumerate(spec.names)
        if spec.types[n] != "constexpr"
    }
    t = Target.parse(target)
    knobs.cache.dir = cache
    start = time.perf_counter()
    triton.compile(
        ASTSource(fn, dict(spec.types), dict(spec.constexprs), attrs),
        target=GPUTarget(t.backend, int(t.arch) if t.backend == "cuda" else t.arch, t.warp_size),
        options={"enable_fp_fusion": True},
    )
    return time.perf_counter() - start


def karchive_compile(name: str, sig: str, cx: dict, target: str, cache: str) -> float:
    from karchive.producer.compile.aot import VariantRequest, compile_variant

    start = time.perf_counter()
    compile_variant(VariantRequest(f"{ROOT / 'examples' / 'kernels.py'}:{name}", sig, target, cx), cache_dir=cache)
    return time.perf_counter() - start


def own_steps(name: str) -> float:
    """Entering and leaving karchive's wrappers around a compile, without compiling."""
    from karchive.producer.compile.buildenv import compile_environment
    from karchive.producer.compile.canonical import canonical_locations, find_machine_paths, machine_roots
    from karchive.producer.compile.kernel_ref import load_kernel

    fn, _ = load_kernel(f"{ROOT / 'examples' / 'kernels.py'}:{name}")
    blob = os.urandom(200_000)
    cache = tempfile.mkdtemp()
    start = time.perf_counter()
    with canonical_locations(fn):
        with compile_environment({}, cache):
            pass
    find_machine_paths({"binary": blob, "ptx": blob}, machine_roots())
    took = time.perf_counter() - start
    shutil.rmtree(cache)
    return took


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    work = tempfile.mkdtemp(prefix="bench-repro-")
    os.environ["KARCHIVE_CACHE_DIR"] = os.path.join(work, "kc")
    try:
        raw_compile(*VARIANTS[0], os.path.join(work, "warmup"))  # imports and backend discovery
        print(f"{'variant':<34} {'raw s':>8} {'karchive s':>11} {'own steps ms':>13}")
        for v in VARIANTS:
            raw, kar, own = [], [], []
            for i in range(args.repeat):
                raw.append(raw_compile(*v, os.path.join(work, f"raw-{v[0]}-{v[3]}-{i}")))
                kar.append(karchive_compile(*v, os.path.join(work, f"kar-{v[0]}-{v[3]}-{i}")))
                own.append(own_steps(v[0]))
            label = f"{v[0]}[{v[3]}]"
            print(
                f"{label:<34} {statistics.median(raw):>8.3f} {statistics.median(kar):>11.3f} "
                f"{statistics.median(own) * 1000:>13.1f}"
            )
        from karchive.producer.build.pipeline import build_archive
        from karchive.producer.build.spec_file import load_spec

        spec = load_spec(ROOT / "examples" / "build.toml")
        jobs = min(2, os.cpu_count() or 1)
        times = []
        for run in ("cold", "warm"):
            start = time.perf_counter()
            build_archive(spec, os.path.join(work, f"{run}.karc"), jobs=jobs, progress=False)
            times.append(time.perf_counter() - start)
        same = pathlib.Path(work, "cold.karc").read_bytes() == pathlib.Path(work, "warm.karc").read_bytes()
        print(
            f"examples/build.toml ({len(spec.requests)} variants, -j {jobs}): cold build cache {times[0]:.1f} s, "
            f"warm {times[1]:.1f} s, identical bytes: {same}"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
