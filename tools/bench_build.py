"""Build throughput side by side: `-j 1`, `-j 2`, and Ray with 1 and 2 worker nodes, on the same spec.

    python tools/bench_build.py [--spec examples/build.toml] [--repeat 3] [--json]

Each configuration runs in a fresh driver process with a fresh karchive cache (so every variant is
really compiled), twice:

  cold  the first run: every variant compiled by Triton, workers start and import Triton;
  warm  the same requests again in the same driver: every compile is a build-cache hit, so what is
        left is the cost of dispatching a task and returning its variant.

Ray runs on a real local cluster started for it (tests/ray_cluster.py): "ray x1" is a head node
with 1 CPU, "ray x2" a head and a worker node with 1 CPU each, all `ray start` process trees on
this machine. Reported per run: wall seconds of the compile phase (shipping sources, submitting,
collecting; not packing), variants per second, the sum of the seconds measured inside the tasks,
and the overhead per task, (wall x workers - task seconds) / variants: what a worker slot spends on
a variant beyond compiling it (dispatch, transfer, waiting, starting workers). The configurations
run in rounds (`--repeat`, order rotated each round) and the table shows medians, so load from
other processes on a shared machine hits all of them alike; `--json` has every run.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

#: Runs in a fresh interpreter: one executor, the spec's requests twice (cold, then warm), JSON out.
DRIVER = r"""
import json, os, sys, time
from karchive.producer.compile.buildenv import strip_shell
strip_shell()
from karchive.producer.build.spec_file import load_spec, validate_requests
from karchive.producer.build.pipeline import make_executor
spec_path, executor, jobs = sys.argv[1], sys.argv[2], int(sys.argv[3])
spec = load_spec(spec_path)
validate_requests(spec.requests)
ex = make_executor(executor, jobs, verbose=False)
t = time.perf_counter()
ex.start()
connect = time.perf_counter() - t
runs = []
for name in ("cold", "warm"):
    seconds, failed = [], []
    t = time.perf_counter()
    ex.run(spec.requests, lambda o: (seconds.append(o.seconds), o.error and failed.append(o.error)))
    wall = time.perf_counter() - t
    runs.append({"run": name, "wall_s": wall, "task_s": sum(seconds), "variants": len(seconds), "failed": len(failed)})
info = ex.describe()
ex.close()
print(json.dumps({"connect_s": connect, "runs": runs, "executor": info}))
"""


def run_config(spec: str, executor: str, jobs: int, workers: int, env: dict[str, str]) -> dict:
    r = subprocess.run(
        [sys.executable, "-c", DRIVER, spec, executor, str(jobs)],
        capture_output=True,
        text=True,
        env={**os.environ, **env, "PYTHONPATH": str(ROOT)},
        timeout=3600,
    )
    if r.returncode != 0:
        raise SystemExit(f"{executor} -j {jobs} failed:\n{r.stderr[-3000:]}")
    out = json.loads(r.stdout.strip().splitlines()[-1])
    for run in out["runs"]:
        n = max(1, run["variants"])
        run["variants_per_s"] = run["variants"] / run["wall_s"]
        run["overhead_per_task_ms"] = 1e3 * (run["wall_s"] * workers - run["task_s"]) / n
    out["workers"] = workers
    return out


def machine() -> dict:
    import triton

    try:
        import ray

        ray_version = ray.__version__
    except ImportError:
        ray_version = None
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), cpu)
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "triton": triton.__version__,
        "ray": ray_version,
        "platform": platform.platform(),
    }


CONFIGS = [  # label, executor (None: a Ray cluster started for it), -j, worker slots, extra worker nodes
    ("-j 1", "local", 1, 1, 0),
    ("-j 2", "local", 2, 2, 0),
    ("ray x1", None, 0, 1, 0),
    ("ray x2", None, 0, 2, 1),
]


def one(spec: str, config: tuple, work: str) -> dict:
    label, executor, jobs, workers, worker_nodes = config
    cache = tempfile.mkdtemp(prefix=label.replace(" ", "_"), dir=work)
    env = {"KARCHIVE_CACHE_DIR": cache}
    try:
        if executor is not None:
            out = run_config(spec, executor, jobs, workers, env)
            out["cluster_start_s"] = None
        else:
            from ray_cluster import LocalRayCluster

            t = time.perf_counter()
            cluster = LocalRayCluster(workers=worker_nodes, cpus=1, env=env).start()
            started = time.perf_counter() - t
            try:
                out = run_config(spec, cluster.address, 0, workers, {**env, **cluster.auth})
            finally:
                cluster.stop()
            out["cluster_start_s"] = started
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    out["config"] = label
    out["load_avg"] = os.getloadavg()[0]
    return out


def summarize(runs: list[dict]) -> dict:
    """Median per configuration and run kind over the rounds."""
    out: dict = {}
    for r in runs:
        for run in r["runs"]:
            out.setdefault((r["config"], run["run"]), []).append(
                (
                    run["wall_s"],
                    run["variants_per_s"],
                    run["task_s"],
                    run["overhead_per_task_ms"],
                    r["cluster_start_s"],
                    r["connect_s"],
                )
            )
    table = []
    for (config, kind), rows in out.items():
        med = [statistics.median(col) if all(v is not None for v in col) else None for col in zip(*rows)]
        table.append(
            {
                "config": config,
                "run": kind,
                "wall_s": med[0],
                "variants_per_s": med[1],
                "task_s": med[2],
                "overhead_per_task_ms": med[3],
                "cluster_start_s": med[4],
                "connect_s": med[5],
                "rounds": len(rows),
            }
        )
    return {"medians": table}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--spec", default=str(ROOT / "examples" / "build.toml"))
    ap.add_argument("--repeat", type=int, default=3, help="rounds over all configurations (medians are shown)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--only", choices=["local", "ray"], help="run only one kind")
    args = ap.parse_args()
    from karchive.producer.build.spec_file import load_spec

    n_variants = len(load_spec(args.spec).requests)
    configs = [c for c in CONFIGS if args.only is None or (c[1] is None) == (args.only == "ray")]
    runs = []
    work = tempfile.mkdtemp(prefix="karchive-bench-build-")
    try:
        for rnd in range(args.repeat):
            shift = rnd % len(configs)
            for config in configs[shift:] + configs[:shift]:
                runs.append(one(args.spec, config, work))
                runs[-1]["round"] = rnd
                if not args.json:
                    print(
                        f"round {rnd + 1}/{args.repeat}: {config[0]} done (load {runs[-1]['load_avg']:.1f})",
                        file=sys.stderr,
                        flush=True,
                    )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    spec_name = os.path.relpath(args.spec, ROOT) if os.path.abspath(args.spec).startswith(str(ROOT)) else args.spec
    report = {
        "spec": spec_name,
        "variants": n_variants,
        "repeat": args.repeat,
        "machine": machine(),
        **summarize(runs),
        "runs": runs,
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    m = report["machine"]
    print(
        f"{report['spec']}: {n_variants} variants; {m['cores']} cores ({m['cpu']}), Python {m['python']}, "
        f"Triton {m['triton']}, Ray {m['ray']}; medians of {args.repeat} rounds"
    )
    print(
        f"{'config':<8} {'run':<5} {'wall s':>8} {'var/s':>7} {'task s':>8} {'overhead/task':>14} "
        f"{'cluster start s':>16} {'connect s':>10}"
    )
    for r in report["medians"]:
        start = f"{r['cluster_start_s']:16.1f}" if r["cluster_start_s"] is not None and r["run"] == "cold" else " " * 16
        connect = f"{r['connect_s']:10.2f}" if r["run"] == "cold" else ""
        print(
            f"{r['config']:<8} {r['run']:<5} {r['wall_s']:8.2f} {r['variants_per_s']:7.2f} {r['task_s']:8.2f} "
            f"{r['overhead_per_task_ms']:11.0f} ms {start} {connect}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
