"""Issue 30's multi-GPU proof: a ``torchrun`` job of 2 ranks, each serving its own device, started through
``python -m karchive.serve`` with ``KARCHIVE_SERVE`` (the runner's sitecustomize activates serving in every rank).

    python tests/gpu/serve_multigpu.py job PHASE --work DIR     # starts the torchrun job, writes mg-PHASE.json
    (torchrun runs: python tests/gpu/serve_multigpu.py rank PHASE --work DIR)

Each rank, on ``cuda:LOCAL_RANK``: karchive's own example kernels (examples/kernels.py: ``add_kernel``,
``softmax_kernel``) on the default stream, on a side stream and replayed from a CUDA graph captured on a side stream
(a launch that ignored the current stream would break the capture), and cut-cross-entropy's ``linear_cross_entropy``
forward and backward (a public library, atomics). Phases:

  reference   plain Triton, each rank under ``karchive.capture``: mg-rank{R}.karc and mg-reference-rank{R}.pt
  serve       ``KARCHIVE_SERVE=mg-rank0.karc,mg-rank1.karc KARCHIVE_SERVE_MODE=strict python -m karchive.serve --
              -m torch.distributed.run --nproc_per_node 2 ...``, an empty Triton cache, ptxas nowhere: every rank
              writes mg-serve-rank{R}.pt and its serve report; a compile could only fail (no assembler) or leave
              kernel files in the cache (none may be there)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
NPROC = 2
KERNEL_SUFFIXES = (".cubin", ".ptx", ".ttir", ".ttgir", ".llir")


def _workload(device: int) -> tuple[dict[str, Any], list[str]]:
    """The rank's outputs by name, and what ran."""
    import torch

    sys.path.insert(0, str(ROOT / "examples"))
    import kernels  # karchive's example kernels, module name "kernels" as their archives file them
    import triton
    from cut_cross_entropy import linear_cross_entropy

    out: dict[str, Any] = {}
    ran: list[str] = []
    g = torch.Generator(device=f"cuda:{device}").manual_seed(100 + device)
    n = 1 << 16
    x = torch.randn(n, generator=g, device="cuda")
    y = torch.randn(n, generator=g, device="cuda")

    def add(a: Any, b: Any) -> Any:
        o = torch.empty_like(a)
        kernels.add_kernel[(triton.cdiv(n, 1024),)](a, b, o, n, BLOCK=1024)
        return o

    def softmax(a: Any) -> Any:
        o = torch.empty_like(a)
        kernels.softmax_kernel[(a.shape[0],)](
            o, a, a.stride(0), o.stride(0), a.shape[1], BLOCK=triton.next_power_of_2(a.shape[1])
        )
        return o

    for i in range(3):
        out[f"add{i}"] = add(x, y * i)
    ran.append("add x3 (default stream)")
    m = torch.randn(256, 1000, generator=g, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for i in range(3):
            out[f"softmax{i}"] = softmax(m + i)
    torch.cuda.current_stream().wait_stream(side)
    ran.append("softmax x3 (side stream)")
    # a CUDA graph captured on a side stream (torch.cuda.graph's own): the launches must go to the capturing stream
    static_x, static_y = x.clone(), y.clone()
    add(static_x, static_y)  # loaded before the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = add(static_x, static_y)
    for i in range(3):
        static_y.copy_(y + i)
        graph.replay()
        out[f"graph{i}"] = static_out.clone()
    ran.append("add in a CUDA graph, replayed x3")
    B, D, V = 256, 128, 4096
    e0 = torch.randn(B, D, generator=g, device="cuda", dtype=torch.bfloat16)
    c0 = 0.05 * torch.randn(V, D, generator=g, device="cuda", dtype=torch.bfloat16)
    targets = torch.randint(0, V, (B,), generator=g, device="cuda")
    for i in range(3):
        e, c = (t.detach().clone().requires_grad_(True) for t in (e0, c0))
        loss = linear_cross_entropy(e, c, targets)
        loss.backward()
        out[f"cce{i}.loss"], out[f"cce{i}.grad_e"], out[f"cce{i}.grad_c"] = loss.detach(), e.grad, c.grad
    ran.append("cut-cross-entropy fwd+bwd x3")
    torch.cuda.synchronize()
    assert all(t.device.index == device for t in out.values()), "an output left the rank's device"
    return {k: v.detach().cpu() for k, v in out.items()}, ran


def rank_main(phase: str, work: Path) -> int:
    import torch

    rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(rank)
    result: dict[str, Any] = {"rank": rank, "device": None, "ok": False}
    try:
        import triton

        listened = {"n": 0}
        if phase == "serve":
            before = triton.knobs.compilation.listener  # chained, not replaced

            def listener(*a: Any, **k: Any) -> Any:
                listened["n"] += 1
                return before(*a, **k) if before is not None else None

            triton.knobs.compilation.listener = listener
            outs, ran = _workload(rank)
            import karchive.serve

            report = karchive.serve.serve_report()
            result.update(
                report=report.to_json() if report is not None else None,
                report_text=str(report) if report is not None else None,
                compile_listener_calls=listened["n"],
            )
        else:
            import karchive

            with karchive.capture(f"mg-rank{rank}", version="1.0", scope="process") as cap:
                outs, ran = _workload(rank)
            cap.save(work / f"mg-rank{rank}.karc")
        torch.save(outs, work / f"mg-{phase}-rank{rank}.pt")
        result.update(
            ok=True,
            ran=ran,
            device=torch.cuda.current_device(),
            device_name=torch.cuda.get_device_name(rank),
            tensors=len(outs),
        )
    except BaseException as exc:
        traceback.print_exc()
        result["error"] = f"{type(exc).__name__}: {exc}"[:3000]
    (work / f"mg-{phase}-rank{rank}.json").write_text(json.dumps(result, indent=1, default=str))
    return 0 if result["ok"] else 1


def job_main(phase: str, work: Path, timeout: int) -> dict:
    """The torchrun job of ``phase``; the ranks' results."""
    import torch

    if torch.cuda.device_count() < NPROC:
        return {"skip": f"{torch.cuda.device_count()} GPU(s) visible; the multi-GPU proof needs {NPROC}"}
    work.mkdir(parents=True, exist_ok=True)
    for rank in range(NPROC):  # no stale result may stand in for a rank that wrote none
        (work / f"mg-{phase}-rank{rank}.json").unlink(missing_ok=True)
    cache = work / f"tc-mg-{phase}"
    shutil.rmtree(cache, ignore_errors=True)
    cache.mkdir(parents=True)
    env = dict(os.environ)
    env.update(
        TRITON_CACHE_DIR=str(cache),
        CCE_AUTOTUNE="0",
        TRITON_DEFAULT_FP_FUSION="1",
        PYTHONPATH=os.pathsep.join([str(ROOT), str(HERE), os.environ.get("PYTHONPATH", "")]),
    )
    run = [
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        str(NPROC),
        str(Path(__file__).resolve()),
        "rank",
        phase,
        "--work",
        str(work),
    ]
    if phase == "serve":
        env.update(
            KARCHIVE_SERVE=",".join(str(work / f"mg-rank{r}.karc") for r in range(NPROC)),
            KARCHIVE_SERVE_MODE="strict",
            TRITON_PTXAS_PATH="/nonexistent/ptxas",
        )
        cmd = [sys.executable, "-m", "karchive.serve", "--", *run]
    else:
        for var in ("KARCHIVE_SERVE", "KARCHIVE_SERVE_MODE"):
            env.pop(var, None)
        cmd = [sys.executable, *run]
    t0 = time.perf_counter()
    try:
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        rc, log = r.returncode, f"--- stdout\n{r.stdout}\n--- stderr\n{r.stderr}"
    except subprocess.TimeoutExpired as exc:
        rc, log = 124, f"timed out after {timeout}s: {exc.stdout!r} {exc.stderr!r}"
    (work / "logs").mkdir(exist_ok=True)
    (work / "logs" / f"mg-{phase}.log").write_text(f"$ {' '.join(cmd)}\nrc={rc}\n{log}")
    ranks = []
    for rank in range(NPROC):
        f = work / f"mg-{phase}-rank{rank}.json"
        ranks.append(
            json.loads(f.read_text())
            if f.exists()
            else {"rank": rank, "ok": False, "error": "no result: " + log[-3000:]}
        )
    kernel_files = sorted(p.name for p in cache.rglob("*") if p.is_file() and p.name.endswith(KERNEL_SUFFIXES))
    return {
        "rc": rc,
        "ranks": ranks,
        "wall_s": round(time.perf_counter() - t0, 2),
        "command": cmd,
        "triton_cache_kernel_files": kernel_files,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("job", "rank"))
    ap.add_argument("phase", choices=("reference", "serve"))
    ap.add_argument("--work", required=True)
    ap.add_argument("--timeout", type=int, default=300)
    args = ap.parse_args()
    work = Path(args.work)
    if args.what == "rank":
        return rank_main(args.phase, work)
    result = job_main(args.phase, work, args.timeout)
    (work / f"mg-{args.phase}.json").write_text(json.dumps(result, indent=1, default=str))
    print(json.dumps(result, indent=1, default=str)[-4000:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
