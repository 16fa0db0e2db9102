"""Capture on a training step: kernels compiled vs captured, capture overhead, fresh-process step times.

    python tools/bench_capture.py [--steps 50] [--skip-compile] [--work DIR] [--json OUT.json]
    python tools/bench_capture.py --hooks-only [--launches 5000] [--json OUT.json]     # no GPU needed

Needs torch with CUDA and Triton. Every row is its own fresh process (tests/gpu/capture_phases.py), side by side
in one run, with its own Triton cache directory:

  training step (tests/gpu/capture_kernels.py: custom autograd.Function, 2 autotuned forward kernels, 3 autotuned
  backward kernels run on PyTorch's autograd engine thread; 10 binaries):
    uncaptured, empty cache        the cold step (compiles + autotuning), then --steps warm steps
    captured, empty cache          the same under karchive.capture; warm steps with the capture's hooks active
    fresh process, empty cache     plain Triton, nothing cached (what a new worker pays)
    fresh process, exported cache  plain Triton, the capture exported by `karchive export-triton-cache`
    karchive launch (no Triton)    every kernel through karchive.open(...) from the autotune/heuristics records
  torch.compile'd training step (forward + backward graphs, Inductor compile workers), unless --skip-compile:
    captured / fresh process empty caches / fresh process exported Triton cache

"first step" is measured in the process from just before the step to the synchronised end; "since spawn" from
just before the parent starts the process (interpreter start, imports, CUDA init included).

``--hooks-only`` measures what an active capture adds to each launch of a kernel already in Triton's memory
(Triton's Python dispatch with karchive's wrappers around it), on any machine: the launch itself is replaced by
the GPU-less driver double of tests/capture_fakes.py, so the numbers are the Python cost alone.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "gpu"))

from capture_phases import run_phase  # noqa: E402 - the phases live with the GPU tests: one source of the workload


def _export(archive: pathlib.Path, dest: pathlib.Path) -> dict:
    from capture_gpu import export

    return export(archive, dest)


def _row(label: str, r: dict, **extra) -> dict:
    return {
        "row": label,
        "ok": bool(r.get("ok")),
        "error": r.get("error"),
        "first_step_s": r.get("first_step_s"),
        "since_spawn_s": r.get("since_spawn_s"),
        "wall_s": r.get("wall_s"),
        "compiles": r.get("compiles"),
        "new_cache_entries": r.get("new_cache_entries"),
        "steady_step_s": r.get("steady_step_s"),
        **extra,
    }


def bench_training(work: pathlib.Path, steps: int) -> tuple[list[dict], dict]:
    caches = work / "caches"
    plain = run_phase("train_capture", work, caches / "plain", opts={"capture": "0", "steps": steps, "tag": "plain"})
    cap = run_phase(
        "train_capture", work, caches / "captured", opts={"scope": "process", "steps": steps, "tag": "bench-train"}
    )
    rows = [
        _row("training: uncaptured, empty cache", plain),
        _row("training: captured, empty cache", cap, steady_captured_step_s=cap.get("steady_step_captured_s")),
    ]
    facts: dict = {}
    if cap.get("ok"):
        s = cap["summary"]
        facts = {
            "kernels_compiled_during_capture": s["window"]["compiled"] + s["window"]["other_processes"],
            "variants_captured": s["variants"],
            "recorded_by": s["events"],
            "left_out": s["left_out_counts"],
            "threads": s["threads"],
            "archive_bytes": cap.get("archive_bytes"),
        }
        if plain.get("ok"):
            facts["capture_overhead_first_step_s"] = round(cap["first_step_s"] - plain["first_step_s"], 4)
            if cap.get("steady_step_captured_s") and plain.get("steady_step_s"):
                facts["capture_overhead_per_warm_step_us"] = round(
                    (cap["steady_step_captured_s"] - cap["steady_step_s"]) * 1e6, 1
                )
        dest = work / "exported-train"
        facts["export"] = _export(work / "bench-train.karc", dest)["counts"]
        rows.append(
            _row(
                "training: fresh process, empty cache",
                run_phase("train_rerun", work, caches / "fresh-empty", opts={"tag": "bench-train"}),
            )
        )
        rows.append(
            _row(
                "training: fresh process, exported cache",
                run_phase("train_rerun", work, dest, opts={"tag": "bench-train"}),
            )
        )
        rows.append(
            _row(
                "training: karchive launch (no Triton)",
                run_phase("train_karchive", work, None, opts={"tag": "bench-train", "steps": steps}),
            )
        )
    return rows, facts


def bench_compile(work: pathlib.Path) -> tuple[list[dict], dict]:
    def env(tag: str) -> dict:
        return {
            "TORCHINDUCTOR_COMPILE_THREADS": "4",
            "TORCHINDUCTOR_FX_GRAPH_CACHE": "0",
            "TORCHINDUCTOR_AUTOGRAD_CACHE": "0",
            "TORCHINDUCTOR_CACHE_DIR": str(work / f"inductor-{tag}"),
        }

    caches = work / "caches"
    cap = run_phase(
        "compile_capture", work, caches / "compile", env("capture"), opts={"tag": "bench-compile"}, timeout=300
    )
    rows = [_row("torch.compile: captured, empty caches", cap)]
    facts: dict = {}
    if cap.get("ok"):
        s = cap["summary"]
        facts = {
            "kernels_compiled_during_capture": s["window"]["compiled"] + s["window"]["other_processes"],
            "window": s["window"],
            "variants_captured": s["variants"],
            "recorded_by": s["events"],
            "left_out": s["left_out_counts"],
        }
        dest = work / "exported-compile"
        facts["export"] = _export(work / "bench-compile.karc", dest)["counts"]
        rows.append(
            _row(
                "torch.compile: fresh process, empty caches",
                run_phase(
                    "compile_rerun",
                    work,
                    caches / "compile-fresh",
                    env("fresh"),
                    opts={"tag": "bench-compile"},
                    timeout=300,
                ),
            )
        )
        rows.append(
            _row(
                "torch.compile: fresh process, exported cache",
                run_phase("compile_rerun", work, dest, env("exported"), opts={"tag": "bench-compile"}, timeout=300),
            )
        )
    return rows, facts


def bench_hooks(launches: int) -> tuple[list[dict], dict]:
    """µs per launch of in-memory kernels with and without an active capture (fake driver: no GPU work)."""
    import time

    sys.path.insert(0, str(ROOT / "tests"))
    from capture_fakes import fake_gpu, heur_copy, ptr, scale_rows, tuned_copy

    import karchive

    x, y = ptr(), ptr()
    calls = {
        "@triton.jit": lambda: scale_rows[(1,)](x, y, 4096, 2.0, BLOCK=256),
        "@triton.autotune (tuned key)": lambda: tuned_copy[(1,)](x, y, 4096),
        "@triton.heuristics": lambda: heur_copy[(1,)](x, y, 4096, BLOCK=256),
    }

    def per_launch(fn) -> float:
        for _ in range(50):
            fn()
        t = time.perf_counter()
        for _ in range(launches):
            fn()
        return (time.perf_counter() - t) / launches * 1e6

    rows = []
    with tempfile.TemporaryDirectory() as cache:
        os.environ["TRITON_CACHE_DIR"] = cache
        with fake_gpu(timings=[3.0, 1.0, 2.0]):
            for fn in calls.values():
                fn()  # compile (and tune) outside any capture
            for label, fn in calls.items():
                plain = per_launch(fn)
                with karchive.capture("bench", version="1"):
                    captured = per_launch(fn)
                rows.append(
                    {
                        "row": f"hooks: {label}",
                        "ok": True,
                        "plain_us": round(plain, 2),
                        "captured_us": round(captured, 2),
                        "overhead_us": round(captured - plain, 2),
                    }
                )
    return rows, {"launches per measurement": launches}


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v * 1000:.1f}"
    return str(v)


def print_table(rows: list[dict], facts: dict) -> None:
    cols = [
        ("row", "row"),
        ("first step ms", "first_step_s"),
        ("since spawn ms", "since_spawn_s"),
        ("warm step ms", "steady_step_s"),
        ("compiles", "compiles"),
        ("new entries", "new_cache_entries"),
    ]
    try:
        from rich.console import Console
        from rich.table import Table

        table = Table(title="karchive capture on a training step")
        for head, _ in cols:
            table.add_column(head, justify="left" if head == "row" else "right")
        for r in rows:
            table.add_row(*[r["row"] + ("" if r["ok"] else "  FAILED")] + [_fmt(r.get(k)) for _, k in cols[1:]])
        Console().print(table)
    except ImportError:
        print(" | ".join(h for h, _ in cols))
        for r in rows:
            print(" | ".join([r["row"] + ("" if r["ok"] else "  FAILED")] + [_fmt(r.get(k)) for _, k in cols[1:]]))
    for r in rows:
        if not r["ok"]:
            print(f"\n{r['row']} failed:\n{r['error']}")
    for section, f in facts.items():
        print(f"\n{section}:")
        for k, v in f.items():
            print(f"  {k}: {v}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=50, help="warm steps timed after the first (default 50)")
    ap.add_argument("--skip-compile", action="store_true", help="leave out the torch.compile'd step")
    ap.add_argument("--work", help="where archives, caches and per-phase logs go (default: a temporary directory)")
    ap.add_argument("--json", help="also write the results as JSON to this file")
    ap.add_argument("--hooks-only", action="store_true", help="only the per-launch hook cost (no GPU needed)")
    ap.add_argument("--launches", type=int, default=5000, help="launches per --hooks-only measurement")
    args = ap.parse_args()
    if args.hooks_only:
        rows, facts = bench_hooks(args.launches)
        print(f"{'':34s} {'plain µs':>10s} {'captured µs':>12s} {'overhead µs':>12s}")
        for r in rows:
            print(f"{r['row']:34s} {r['plain_us']:10.2f} {r['captured_us']:12.2f} {r['overhead_us']:12.2f}")
        if args.json:
            pathlib.Path(args.json).write_text(json.dumps({"rows": rows, "facts": facts}, indent=2))
        return 0
    work = pathlib.Path(args.work) if args.work else pathlib.Path(tempfile.mkdtemp(prefix="bench_capture_"))
    work.mkdir(parents=True, exist_ok=True)
    rows, facts = bench_training(work / "training", args.steps)
    all_facts = {"training step": facts}
    if not args.skip_compile:
        crows, cfacts = bench_compile(work / "compile")
        rows += crows
        all_facts["torch.compile step"] = cfacts
    print_table(rows, all_facts)
    print(f"\nper-phase logs under {work}")
    if args.json:
        pathlib.Path(args.json).write_text(
            json.dumps({"rows": rows, "facts": all_facts, "work": str(work)}, indent=2, default=str)
        )
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
