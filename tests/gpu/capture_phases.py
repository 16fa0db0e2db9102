"""The capture GPU proof's phases, each run in a fresh Python process (so "fresh process" claims hold).

    python tests/gpu/capture_phases.py PHASE --work DIR --result FILE [--opt key=value ...]

Used by tests/gpu/test_capture_*.py and tools/bench_capture.py through :func:`run_phase`, which spawns the
child with its own ``TRITON_CACHE_DIR`` and collects the JSON it writes. Needs torch with CUDA and Triton
(except ``train_karchive``, which blocks Triton on purpose).

Phases:
  workload_capture   plain @triton.jit kernels (add, softmax, scale with stride 1 and 2) and an autotuned matmul
                     (two shapes) under karchive.capture; saves the archive, inputs, outputs and a call log
  workload_relaunch  replays every logged call through karchive.open(...).kernel(name): bit-equal outputs, every
                     variant launched (other benchmarked matmul configs checked against torch), no Triton import
  workload_jitrun    the same workload on plain Triton against $TRITON_CACHE_DIR: compiles, hits, timings
  train_capture      the training step of capture_kernels.py (custom autograd.Function, autotuned forward and
                     backward) under capture (opt scope=process|thread, capture=0 for none, steps=N steady state)
  train_rerun        the training step on plain Triton against $TRITON_CACHE_DIR: compiles counted by Triton's
                     listener and by new cache entries, outputs and grads compared bit for bit with the capture
  train_karchive     Triton unimportable: the step's 5 kernels launched through karchive.open(...) from the
                     autotune and heuristics records; outputs and grads compared bit for bit
  compile_capture    a torch.compile'd training step (forward and backward graphs) under capture
                     (opt threads=N: Inductor compile workers; 1 compiles in-process)
  compile_rerun      the compiled step in a fresh process against $TRITON_CACHE_DIR: compiles and bit-equality
  compile_relaunch   the captured pointwise Inductor kernels relaunched through karchive (opt prefix=...)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
MM_CONFIGS = [  # distinct kwargs per config, so each benchmarked binary can be addressed by its constexprs
    ({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}, 4, 3),
    ({"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 32}, 4, 3),
    ({"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64}, 8, 3),
    ({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32}, 8, 4),
]
MM_SHAPES = [(256, 256, 256), (384, 512, 128)]


def _paths() -> None:
    for p in (str(ROOT), str(ROOT / "examples"), str(HERE)):
        if p not in sys.path:
            sys.path.insert(0, p)


def cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


def _sync() -> None:
    import torch

    torch.cuda.synchronize()


def _since_spawn() -> float | None:
    t0 = os.environ.get("KARCHIVE_PHASE_T0")
    return round(time.time() - float(t0), 4) if t0 else None


class CompileCounter:
    """Triton's own account of compiles in this process (``knobs.compilation.listener``) plus the kernel entries
    that $TRITON_CACHE_DIR gains (compiles in any process, e.g. Inductor's workers)."""

    def __init__(self) -> None:
        from triton import knobs

        self.events: list[tuple[str, bool]] = []
        self.cache_dir = os.environ.get("TRITON_CACHE_DIR", "")
        self.before = kernel_hashes(self.cache_dir)
        knobs.compilation.listener = lambda **kw: self.events.append(
            (str(getattr(kw.get("src"), "name", "?")), bool(kw.get("cache_hit")))
        )

    def result(self) -> dict:
        new = kernel_hashes(self.cache_dir) - self.before
        return {
            "compiles": sum(1 for _, hit in self.events if not hit),
            "cache_hits": sum(1 for _, hit in self.events if hit),
            "compiled_kernels": sorted({k for k, hit in self.events if not hit}),
            "new_cache_entries": len(new),
        }


def kernel_hashes(cache_dir: str) -> set[str]:
    """Triton hashes of the kernel entries (not launcher stubs) in a cache directory."""
    from karchive.producer.capture.triton_cache import iter_cache

    if not cache_dir or not os.path.isdir(cache_dir):
        return set()
    return {e.triton_hash for e in iter_cache(cache_dir) if e.triton_hash}


def _equal(got: dict, ref: dict, names: list[str]) -> dict[str, str]:
    """Names whose tensors are not bit-equal, with the largest difference."""
    import torch

    bad = {}
    for k in names:
        a, b = got[k].detach().cpu(), ref[k].detach().cpu()
        if a.shape != b.shape or a.dtype != b.dtype or not torch.equal(a, b):
            diff = (a.float() - b.float()).abs().max().item() if a.shape == b.shape else "shape"
            bad[k] = f"differs (max abs diff {diff})"
    return bad


# --- the plain JIT workload (ported from tools/gpu_capture.py) ------------------------------------------------
def tuned_matmul():
    import kernels
    import triton

    configs = [triton.Config(kw, num_warps=w, num_stages=s) for kw, w, s in MM_CONFIGS]
    return triton.autotune(configs=configs, key=["M", "N", "K"])(kernels.matmul_kernel)


def make_workload_inputs(seed: int = 0) -> dict:
    import torch

    g = torch.Generator(device="cpu").manual_seed(seed)
    t = {
        "x": torch.randn(98_431, generator=g),
        "y": torch.randn(98_431, generator=g),
        "sm_in": torch.randn(333, 781, generator=g),
        "x2": torch.randn(2 * 50_000, generator=g),
    }
    for i, (m, n, k) in enumerate(MM_SHAPES):
        t[f"a{i}"] = torch.randn(m, k, generator=g).half()
        t[f"b{i}"] = torch.randn(k, n, generator=g).half()
    return t


def run_workload(inp: dict, tuned: Any = None, timer: Callable[[str], None] | None = None) -> tuple[dict, list]:
    """Run every JIT call; returns (outputs, call log). Inputs must be on the GPU."""
    import kernels
    import torch

    tuned = tuned or tuned_matmul()
    out: dict = {}
    log: list = []

    def call(kernel: str, grid: Any, named: dict, out_names: list, autotune: bool = False, cx: dict | None = None):
        log.append(
            {
                "kernel": kernel,
                "grid": list(grid) if isinstance(grid, tuple) else None,
                "autotune": autotune,
                "args": {k: ({"tensor": v} if isinstance(v, str) else {"value": v}) for k, v in named.items()},
                "constexprs": cx or {},
                "outputs": out_names,
            }
        )

    n = inp["x"].numel()
    out["add"] = torch.full_like(inp["x"], float("nan"))
    kernels.add_kernel[(cdiv(n, 1024),)](inp["x"], inp["y"], out["add"], n, BLOCK=1024)
    _sync()
    if timer:
        timer("first_call")
    call(
        "add_kernel",
        (cdiv(n, 1024),),
        {"x_ptr": "x", "y_ptr": "y", "out_ptr": "add", "n_elements": n},
        ["add"],
        cx={"BLOCK": 1024},
    )

    rows, cols = inp["sm_in"].shape
    out["softmax"] = torch.full_like(inp["sm_in"], float("nan"))
    kernels.softmax_kernel[(rows,)](
        out["softmax"], inp["sm_in"], inp["sm_in"].stride(0), out["softmax"].stride(0), cols, BLOCK=1024
    )
    call(
        "softmax_kernel",
        (rows,),
        {"out_ptr": "softmax", "in_ptr": "sm_in", "in_row_stride": cols, "out_row_stride": cols, "n_cols": cols},
        ["softmax"],
        cx={"BLOCK": 1024},
    )

    for stride, src, name in ((1, "x", "scale1"), (2, "x2", "scale2")):
        m = 50_000
        out[name] = torch.full((m,), float("nan"), device=inp["x"].device)
        kernels.scale_kernel[(cdiv(m, 1024),)](inp[src], out[name], m, stride, 2.5, BLOCK=1024)
        call(
            "scale_kernel",
            (cdiv(m, 1024),),
            {"x_ptr": src, "out_ptr": name, "n_elements": m, "stride": stride, "alpha": 2.5},
            [name],
            cx={"BLOCK": 1024},
        )

    for i, (M, N, K) in enumerate(MM_SHAPES):
        a, b = inp[f"a{i}"], inp[f"b{i}"]
        c = out[f"c{i}"] = torch.full((M, N), float("nan"), device=a.device, dtype=torch.float16)
        grid = lambda meta, M=M, N=N: (cdiv(M, meta["BLOCK_M"]) * cdiv(N, meta["BLOCK_N"]),)  # noqa: E731
        tuned[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
        call(
            "matmul_kernel",
            None,
            {
                "a_ptr": f"a{i}",
                "b_ptr": f"b{i}",
                "c_ptr": f"c{i}",
                "M": M,
                "N": N,
                "K": K,
                "stride_am": a.stride(0),
                "stride_ak": a.stride(1),
                "stride_bk": b.stride(0),
                "stride_bn": b.stride(1),
                "stride_cm": c.stride(0),
                "stride_cn": c.stride(1),
            },
            [f"c{i}"],
            autotune=True,
        )
    _sync()
    return out, log


def phase_workload_capture(work: Path, opts: dict) -> dict:
    import torch
    import triton

    import karchive

    inp = {k: v.cuda() for k, v in make_workload_inputs().items()}
    with karchive.capture("gpu-capture", version="1.0", strict=True) as cap:
        out, log = run_workload(inp)
    stats = cap.save(work / "workload.karc")
    torch.save({k: v.cpu() for k, v in {**inp, **out}.items()}, work / "workload.pt")
    (work / "workload-calls.json").write_text(json.dumps(log, indent=1))
    s = cap.summary()
    from karchive.format.names import short_name

    n_mm = sum(1 for v in cap.variants.values() if short_name(v.kernel) == "matmul_kernel")  # module:qualname
    return {"summary": s, "matmul_variants": n_mm, "archive_bytes": stats.archive_bytes, "triton": triton.__version__}


def phase_workload_relaunch(work: Path, opts: dict) -> dict:
    import torch

    import karchive

    saved = torch.load(work / "workload.pt")
    t = {k: v.cuda() for k, v in saved.items()}
    calls = json.loads((work / "workload-calls.json").read_text())
    arc = karchive.open(work / "workload.karc")
    launched: set[str] = set()
    problems: list[str] = []
    checks = 0
    for c in calls:
        fresh = {o: torch.full_like(t[o], float("nan")) for o in c["outputs"]}
        named = {
            k: (fresh.get(v["tensor"], t[v["tensor"]]) if "tensor" in v else v["value"]) for k, v in c["args"].items()
        }
        k = arc.kernel(c["kernel"])
        cx = dict(c["constexprs"])
        if c["autotune"]:  # the runtime reads the records itself: no meta-parameters passed
            variant = k.select(**named)
            grid = lambda m: (cdiv(m["M"], m["BLOCK_M"]) * cdiv(m["N"], m["BLOCK_N"]),)  # noqa: E731
        else:
            variant = k.select(**named, **cx)
            grid = tuple(c["grid"])
        k[grid](**named, **cx)
        _sync()
        launched.add(variant.key)
        for o, got in fresh.items():
            checks += 1
            if not torch.equal(got, t[o]):
                problems.append(
                    f"{c['kernel']} -> {o}: differs from the JIT output "
                    f"(max abs diff {(got.float() - t[o].float()).abs().max().item()})"
                )
    a, b = t["a0"], t["b0"]
    ref = a.float() @ b.float()
    mm = arc.kernel("matmul_kernel")
    for v in arc.variants("matmul_kernel"):  # every other benchmarked config, on the first shape, against torch
        if v.key in launched:
            continue
        cx = v.constexprs
        M, N, K = MM_SHAPES[0]
        c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float16)
        args = dict(
            a_ptr=a,
            b_ptr=b,
            c_ptr=c,
            M=M,
            N=N,
            K=K,
            stride_am=a.stride(0),
            stride_ak=a.stride(1),
            stride_bk=b.stride(0),
            stride_bn=b.stride(1),
            stride_cm=c.stride(0),
            stride_cn=c.stride(1),
        )
        if mm.select(**args, **cx).key != v.key:
            problems.append(f"matmul variant {v.key[:12]} ({cx}) not selectable with shape 0")
            continue
        mm[(cdiv(M, cx["BLOCK_M"]) * cdiv(N, cx["BLOCK_N"]),)](**args, **cx)
        _sync()
        launched.add(v.key)
        checks += 1
        if not torch.allclose(c.float(), ref, atol=5e-2, rtol=1e-2):
            problems.append(f"matmul config {cx}: max abs err {(c.float() - ref).abs().max().item()} vs torch")
    missing = [f"{v.kernel}:{v.key[:12]}" for v in arc.manifest.variants if v.key not in launched]
    if missing:
        problems.append(f"variants never launched: {missing}")
    return {
        "launched": len(launched),
        "variants": len(arc.manifest.variants),
        "checks": checks,
        "triton_imported": "triton" in sys.modules,
        "problems": problems,
    }


def phase_workload_jitrun(work: Path, opts: dict) -> dict:
    import torch

    counter = CompileCounter()
    inp = {k: v.cuda() for k, v in make_workload_inputs().items()}
    _sync()
    marks: dict = {}
    t0 = time.perf_counter()
    out, _ = run_workload(inp, timer=lambda name: marks.setdefault(name, time.perf_counter() - t0))
    total = time.perf_counter() - t0
    ref = torch.load(work / "workload.pt")
    # Same binaries, same inputs: bit-equal; the matmul may be re-tuned to another config: a tolerance.
    same = not _equal(out, ref, ["add", "softmax", "scale1", "scale2"]) and all(
        torch.allclose(out[k].cpu().float(), ref[k].float(), atol=5e-2, rtol=1e-2) for k in ("c0", "c1")
    )
    return {
        **counter.result(),
        "first_call_s": round(marks.get("first_call", float("nan")), 4),
        "workload_s": round(total, 3),
        "outputs_equal_capture": same,
    }


# --- the training step (custom autograd.Function, tests/gpu/capture_kernels.py) --------------------------------
def _train_inputs() -> dict:
    import capture_kernels as ck

    return ck.make_inputs("cuda")


def phase_train_capture(work: Path, opts: dict) -> dict:
    import capture_kernels as ck
    import torch

    import karchive

    scope = opts.get("scope", "process")
    use_capture = opts.get("capture", "1") == "1"
    steps = int(opts.get("steps", "0"))
    tag = opts.get("tag", f"train-{scope}")
    inp = _train_inputs()
    _sync()
    t0 = time.perf_counter()
    if use_capture:
        cap = karchive.capture(tag, version="1.0", scope=scope)
        with cap:
            out = ck.step(inp)
            _sync()
    else:
        cap = None
        out = ck.step(inp)
        _sync()
    first = time.perf_counter() - t0
    result: dict[str, Any] = {
        "first_step_s": round(first, 4),
        "since_spawn_s": _since_spawn(),
        "main_thread": threading.current_thread().name,
        "backward_thread": ck.SAVED.get("backward_thread"),
    }
    if steps:  # steady state: per-step time with the capture's hooks active and without

        def timed(active: bool) -> float:
            for _ in range(3):
                ck.step(inp)
            _sync()
            t = time.perf_counter()
            for _ in range(steps):
                ck.step(inp)
            _sync()
            return (time.perf_counter() - t) / steps

        result["steady_step_s"] = round(timed(False), 6)
        if cap is not None:
            with cap:
                result["steady_step_captured_s"] = round(timed(True), 6)
    if cap is not None:
        from karchive.format.names import short_name

        s = cap.summary()
        stats = cap.save(work / f"{tag}.karc")
        result.update(
            summary=s,
            archive_bytes=stats.archive_bytes,
            events=[{"kernel": e.kernel, "how": e.how, "thread": e.thread, "note": e.note} for e in cap.events],
            autotune_kernels=sorted(short_name(r["kernel"]) for r in cap.autotune.to_json()),
            heuristics_kernels=sorted(short_name(r["kernel"]) for r in cap.heuristics.to_json()),
        )
        torch.save(
            {
                **{k: v.cpu() for k, v in inp.items()},
                **{k: v.cpu() for k, v in out.items()},
                "h": ck.SAVED["h"].cpu(),
                "dh": ck.SAVED["dh"].cpu(),
            },
            work / f"{tag}.pt",
        )
    return result


def phase_train_rerun(work: Path, opts: dict) -> dict:
    import capture_kernels as ck
    import torch

    tag = opts.get("tag", "train-process")
    counter = CompileCounter()
    inp = _train_inputs()
    _sync()
    t0 = time.perf_counter()
    out = ck.step(inp)
    _sync()
    first = time.perf_counter() - t0
    ref = torch.load(work / f"{tag}.pt")
    return {
        **counter.result(),
        "first_step_s": round(first, 4),
        "since_spawn_s": _since_spawn(),
        "not_bit_equal": _equal(out, ref, ["y", "dx", "dw"]),
    }


def karchive_step(arc: Any, t: dict) -> dict:
    """The training step with every Triton kernel launched by karchive (tuned configs and heuristics values from
    the archive's records; the callable grids receive each variant's constexprs)."""
    import torch

    x, w, gy = t["x"], t["w"], t["gy"]
    nrows, ncols = x.shape
    n = x.numel()
    k = {name: arc.kernel(name) for name in ("fwd_mul", "fwd_silu", "bwd_silu", "bwd_dx", "bwd_dw")}
    elem = lambda meta: (cdiv(n, meta["BLOCK"]),)  # noqa: E731
    col = lambda meta: (cdiv(ncols, meta["BLOCK_N"]),)  # noqa: E731
    h, y = torch.empty_like(x), torch.empty_like(x)
    k["fwd_mul"][elem](x, w, h, n, ncols)
    k["fwd_silu"][elem](h, y, n)
    dh, dx, dw = torch.empty_like(x), torch.empty_like(x), torch.empty_like(w)
    k["bwd_silu"][elem](h, gy, dh, n)
    k["bwd_dx"][elem](dh, w, dx, n, ncols)
    k["bwd_dw"][col](dh, x, dw, nrows, ncols)
    return {"y": y, "h": h, "dh": dh, "dx": dx, "dw": dw}


def phase_train_karchive(work: Path, opts: dict) -> dict:
    import torch

    import karchive

    tag = opts.get("tag", "train-process")
    ref = torch.load(work / f"{tag}.pt")
    t = {k: ref[k].cuda() for k in ("x", "w", "gy")}
    arc = karchive.open(work / f"{tag}.karc")
    _sync()
    t0 = time.perf_counter()
    out = karchive_step(arc, t)
    _sync()
    first = time.perf_counter() - t0
    steps = int(opts.get("steps", "0"))
    steady = None
    if steps:
        for _ in range(3):
            karchive_step(arc, t)
        _sync()
        s0 = time.perf_counter()
        for _ in range(steps):
            karchive_step(arc, t)
        _sync()
        steady = round((time.perf_counter() - s0) / steps, 6)
    kinds = {
        name: type(arc.kernel(name).resolver or arc.kernel(name)).__name__
        for name in ("fwd_mul", "fwd_silu", "bwd_silu", "bwd_dx", "bwd_dw")
    }
    return {
        "first_step_s": round(first, 4),
        "since_spawn_s": _since_spawn(),
        "steady_step_s": steady,
        "not_bit_equal": _equal(out, ref, ["y", "h", "dh", "dx", "dw"]),
        "dispatchers": kinds,
        "triton_importable": _triton_importable(),
    }


def _triton_importable() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


# --- torch.compile'd training step -----------------------------------------------------------------------------
def _compiled_step():
    import torch

    # Inductor's deterministic mode: reductions take a heuristic config instead of the fastest benchmarked one,
    # so a fresh process that tunes again sums in the same order (bit-equal gradients).
    torch.use_deterministic_algorithms(True)

    def step(x, w):
        y = torch.sin(x) * w + x * x
        return (y.sum(dim=1) * torch.cos(w).sum()).mean()

    return torch.compile(step)


def _compile_inputs() -> tuple:
    import torch

    g = torch.Generator(device="cpu").manual_seed(3)
    return torch.randn(512, 384, generator=g).cuda(), torch.randn(384, generator=g).cuda()


def _compiled_run(fn: Any, x0: Any, w0: Any) -> dict:
    x = x0.detach().clone().requires_grad_(True)
    w = w0.detach().clone().requires_grad_(True)
    loss = fn(x, w)
    loss.backward()
    _sync()
    return {"loss": loss.detach(), "dx": x.grad, "dw": w.grad}


def phase_compile_capture(work: Path, opts: dict) -> dict:
    import torch

    import karchive

    tag = opts.get("tag", "compile")
    fn = _compiled_step()
    x, w = _compile_inputs()
    # with compile workers (TORCHINDUCTOR_COMPILE_THREADS > 1) the test proves the harvest of their cache entries:
    # the capture must not keep Inductor's compiles in this process, as it does by default
    workers = int(os.environ.get("TORCHINDUCTOR_COMPILE_THREADS", "1")) > 1
    cap = karchive.capture(tag, version="1.0", inductor_in_process=not workers)
    t0 = time.perf_counter()
    with cap:
        xg = x.detach().clone().requires_grad_(True)
        wg = w.detach().clone().requires_grad_(True)
        loss = fn(xg, wg)
        _sync()
    forward_events = len(cap.events)
    with cap:  # a second window on the same capture: what the backward graph compiled
        loss.backward()
        _sync()
    first = time.perf_counter() - t0
    out = {"loss": loss.detach(), "dx": xg.grad, "dw": wg.grad}
    s = cap.summary()
    stats = cap.save(work / f"{tag}.karc")
    torch.save({"x": x.cpu(), "w": w.cpu(), **{k: v.cpu() for k, v in out.items()}}, work / f"{tag}.pt")
    return {
        "summary": s,
        "archive_bytes": stats.archive_bytes,
        "first_step_s": round(first, 4),
        "forward_events": forward_events,
        "backward_events": len(cap.events) - forward_events,
        "events": [{"kernel": e.kernel, "how": e.how, "thread": e.thread, "note": e.note} for e in cap.events],
        "main_thread": threading.current_thread().name,
    }


def phase_compile_rerun(work: Path, opts: dict) -> dict:
    import torch

    tag = opts.get("tag", "compile")
    counter = CompileCounter()
    fn = _compiled_step()
    x, w = _compile_inputs()
    t0 = time.perf_counter()
    out = _compiled_run(fn, x, w)
    first = time.perf_counter() - t0
    ref = torch.load(work / f"{tag}.pt")
    return {
        **counter.result(),
        "first_step_s": round(first, 4),
        "since_spawn_s": _since_spawn(),
        "not_bit_equal": _equal(out, ref, ["loss", "dx", "dw"]),
    }


_POINTWISE = {"inproc": 1.0, "workers": 2.0}  # a different constant: a different kernel per run


def phase_pointwise_capture(work: Path, opts: dict) -> dict:
    """(from tools/gpu_capture.py) torch.compile'd relu(x * y + c) under capture; relaunched by pointwise_relaunch."""
    import torch

    import karchive

    which = opts.get("which", "inproc")
    c = _POINTWISE[which]

    def f(x, y):
        return torch.relu(x * y + c)

    g = torch.Generator(device="cpu").manual_seed(1)
    x, y = torch.randn(1 << 20, generator=g).cuda(), torch.randn(1 << 20, generator=g).cuda()
    fc = torch.compile(f)
    with karchive.capture(f"pointwise-{which}", version="1", inductor_in_process=which != "workers") as cap:
        out = fc(x, y)
        _sync()
    s = cap.summary()
    cap.save(work / f"pointwise-{which}.karc")
    torch.save({"x": x.cpu(), "y": y.cpu(), "out": out.cpu()}, work / f"pointwise-{which}.pt")
    return {"summary": s}


def _block_of(arc: Any, v: Any) -> int | None:
    import re

    for name in ("XBLOCK", "BLOCK"):
        if name in v.constexprs:
            return int(v.constexprs[name])
    if "ttir" in v.ir:  # a harvested variant: the block size is baked in; read it from the IR
        ends = [
            int(m)
            for m in re.findall(
                r"tt\.make_range \{end = (\d+) : i32, start = 0", arc.reader.read(v.ir["ttir"].path).decode()
            )
        ]
        return max(ends) if ends else None
    return None


def phase_pointwise_relaunch(work: Path, opts: dict) -> dict:
    import torch

    import karchive

    which = opts.get("which", "inproc")
    saved = torch.load(work / f"pointwise-{which}.pt")
    x, y, ref = saved["x"].cuda(), saved["y"].cuda(), saved["out"].cuda()
    arc = karchive.open(work / f"pointwise-{which}.karc")
    problems, done = [], []
    for v in arc.manifest.variants:
        names = [p.name for p in v.params]
        unknown = [n for n in names if not (n.startswith(("in_ptr", "out_ptr")) or n in ("xnumel", "XBLOCK"))]
        if unknown:
            problems.append(f"{v.kernel}: parameters {unknown} are outside this pointwise replay")
            continue
        outs = {}
        named: dict = {}
        for p in v.params:
            if p.is_constexpr and not p.equal_to_1:
                named[p.name] = p.constexpr
            elif p.name.startswith("in_ptr"):
                named[p.name] = (x, y)[int(p.name[6:]) % 2]  # x * y + c is symmetric in x and y
            elif p.name.startswith("out_ptr"):
                named[p.name] = outs[p.name] = torch.full_like(x, float("nan"))
            elif p.name == "xnumel":
                named[p.name] = x.numel()
        block = _block_of(arc, v)
        if block is None:
            problems.append(f"{v.kernel}: cannot tell its block size")
            continue
        arc.kernel(v.kernel)[(cdiv(x.numel(), block),)](**named)
        _sync()
        for o in outs.values():
            if not torch.equal(o, ref):
                problems.append(
                    f"{v.kernel}: output differs from torch.compile's (max abs diff {(o - ref).abs().max().item()})"
                )
        done.append(f"{v.kernel}[{v.provenance.origin}{', harvested' if v.provenance.harvested else ''}]")
    return {"relaunched": done, "problems": problems}


PHASES: dict[str, Callable[[Path, dict], dict]] = {
    "workload_capture": phase_workload_capture,
    "workload_relaunch": phase_workload_relaunch,
    "workload_jitrun": phase_workload_jitrun,
    "train_capture": phase_train_capture,
    "train_rerun": phase_train_rerun,
    "train_karchive": phase_train_karchive,
    "compile_capture": phase_compile_capture,
    "compile_rerun": phase_compile_rerun,
    "pointwise_capture": phase_pointwise_capture,
    "pointwise_relaunch": phase_pointwise_relaunch,
}
#: Phases that must run with Triton unimportable (blocked before anything is imported).
NO_TRITON = {"train_karchive"}


# --- running a phase in a fresh process -------------------------------------------------------------------------
def phase_env(cache: Path | str | None, extra: dict | None = None) -> dict:
    env = dict(os.environ)
    if cache is not None:
        env["TRITON_CACHE_DIR"] = str(cache)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), str(ROOT / "examples"), str(HERE), os.environ.get("PYTHONPATH", "")]
    )
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # the same cache-invalidating environment in every phase
    env.update(extra or {})
    return env


def run_phase(
    phase: str,
    work: Path,
    cache: Path | str | None,
    extra_env: dict | None = None,
    opts: dict | None = None,
    timeout: int = 240,
) -> dict:
    """Run one phase in a fresh interpreter; returns its JSON result (``ok`` False and the log tail on failure).

    Every run appends its command, return code, stdout and stderr to ``work/logs/<phase>.log``.
    """
    from phase_runner import run_child

    args = [phase] + [a for k, v in (opts or {}).items() for a in ("--opt", f"{k}={v}")]
    env = phase_env(cache, {**(extra_env or {}), "KARCHIVE_PHASE_T0": repr(time.time())})
    return run_child(Path(__file__).resolve(), args, work, phase, f"{phase}.log", env, timeout, f"phase {phase}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("phase", choices=sorted(PHASES))
    ap.add_argument("--work", required=True)
    ap.add_argument("--result", required=True)
    ap.add_argument("--opt", action="append", default=[])
    args = ap.parse_args()
    if args.phase in NO_TRITON:
        sys.modules["triton"] = None  # type: ignore[assignment]  # `import triton` now raises ImportError
    _paths()
    opts = dict(o.split("=", 1) for o in args.opt)
    try:
        result = {"ok": True, **PHASES[args.phase](Path(args.work), opts)}
    except BaseException as exc:
        traceback.print_exc()
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:2000]}
    Path(args.result).write_text(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
