#!/usr/bin/env python3
"""GPU proof for JIT capture and Triton-cache interop (issue 5). Needs torch + CUDA + Triton >= 3.4.

    python tools/gpu_capture.py [--sections capture,relaunch,export,cold,torch_inproc,torch_workers]

Every section runs in its own fresh Python process (so "fresh process" claims hold), with its own
Triton cache dir; the parent prints one table at the end and writes everything to $OUT/gpu_capture/
(logs per section, summary.json, the archives) when OUT is set, else to a temp dir.

Sections:
  capture        plain @triton.jit calls (add, softmax, scale with stride == 1 and != 1) and an
                 @triton.autotune'd matmul (two shapes) under karchive.capture; save the archive,
                 the inputs and the JIT outputs
  relaunch       fresh process: replay every logged call through karchive.open(...).kernel(name)[grid];
                 outputs must equal the JIT's bit for bit; autotuned calls use the archive's recorded
                 config (karchive.format.autotune.choose_config, no benchmarking); every other benchmarked
                 matmul config is launched too (checked against torch); every variant must be launched
  export         karchive export-triton-cache into an empty dir
  cold           fresh Triton process, same workload, three cache dirs: empty (cold), the exported one,
                 the exported one again (warm); Triton compiles counted with knobs.compilation.listener
  torch_inproc   torch.compile'd function, compile_threads=1 (compiles in this process) under capture;
                 then a fresh process relaunches the captured Inductor kernels through the runtime
  torch_workers  the same with Inductor's compile worker processes (kernels harvested from the cache)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
SECTIONS = ["capture", "relaunch", "export", "cold", "torch_inproc", "torch_workers"]
MM_CONFIGS = [  # distinct kwargs per config, so each benchmarked binary can be addressed by its constexprs
    ({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}, 4, 3),
    ({"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 32}, 4, 3),
    ({"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64}, 8, 3),
    ({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32}, 8, 4),
]
MM_SHAPES = [(256, 256, 256), (384, 512, 128)]


def _paths() -> None:
    for p in (str(ROOT), str(ROOT / "examples")):
        if p not in sys.path:
            sys.path.insert(0, p)


def cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


# --- the workload (same code in the capturing process and the fresh Triton processes) ------------------
def tuned_matmul():
    import kernels
    import triton

    configs = [triton.Config(kw, num_warps=w, num_stages=s) for kw, w, s in MM_CONFIGS]
    return triton.autotune(configs=configs, key=["M", "N", "K"])(kernels.matmul_kernel)


def make_inputs(seed: int = 0) -> dict:
    import torch

    g = torch.Generator(device="cpu").manual_seed(seed)
    t = {"x": torch.randn(98_431, generator=g), "y": torch.randn(98_431, generator=g),
         "sm_in": torch.randn(333, 781, generator=g), "x2": torch.randn(2 * 50_000, generator=g)}
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
        log.append({"kernel": kernel, "grid": list(grid) if isinstance(grid, tuple) else None, "autotune": autotune,
                    "args": {k: ({"tensor": v} if isinstance(v, str) else {"value": v}) for k, v in named.items()},
                    "constexprs": cx or {}, "outputs": out_names})

    n = inp["x"].numel()
    out["add"] = torch.full_like(inp["x"], float("nan"))
    kernels.add_kernel[(cdiv(n, 1024),)](inp["x"], inp["y"], out["add"], n, BLOCK=1024)
    torch.cuda.synchronize()
    if timer:
        timer("first_call")
    call("add_kernel", (cdiv(n, 1024),), {"x_ptr": "x", "y_ptr": "y", "out_ptr": "add", "n_elements": n},
         ["add"], cx={"BLOCK": 1024})

    rows, cols = inp["sm_in"].shape
    out["softmax"] = torch.full_like(inp["sm_in"], float("nan"))
    kernels.softmax_kernel[(rows,)](out["softmax"], inp["sm_in"], inp["sm_in"].stride(0), out["softmax"].stride(0),
                                    cols, BLOCK=1024)
    call("softmax_kernel", (rows,), {"out_ptr": "softmax", "in_ptr": "sm_in", "in_row_stride": cols,
                                     "out_row_stride": cols, "n_cols": cols}, ["softmax"], cx={"BLOCK": 1024})

    for stride, src, name in ((1, "x", "scale1"), (2, "x2", "scale2")):
        m = 50_000
        out[name] = torch.full((m,), float("nan"), device=inp["x"].device)
        kernels.scale_kernel[(cdiv(m, 1024),)](inp[src], out[name], m, stride, 2.5, BLOCK=1024)
        call("scale_kernel", (cdiv(m, 1024),), {"x_ptr": src, "out_ptr": name, "n_elements": m, "stride": stride,
                                               "alpha": 2.5}, [name], cx={"BLOCK": 1024})

    for i, (M, N, K) in enumerate(MM_SHAPES):
        a, b = inp[f"a{i}"], inp[f"b{i}"]
        c = out[f"c{i}"] = torch.full((M, N), float("nan"), device=a.device, dtype=torch.float16)
        grid = lambda meta, M=M, N=N: (cdiv(M, meta["BLOCK_M"]) * cdiv(N, meta["BLOCK_N"]),)  # noqa: E731
        tuned[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
        call("matmul_kernel", None, {"a_ptr": f"a{i}", "b_ptr": f"b{i}", "c_ptr": f"c{i}", "M": M, "N": N, "K": K,
                                     "stride_am": a.stride(0), "stride_ak": a.stride(1), "stride_bk": b.stride(0),
                                     "stride_bn": b.stride(1), "stride_cm": c.stride(0), "stride_cn": c.stride(1)},
             [f"c{i}"], autotune=True)
    torch.cuda.synchronize()
    return out, log


# --- sections (each runs in its own process) -------------------------------------------------------------
def sec_capture(work: Path) -> dict:
    import karchive
    import torch
    import triton

    inp = {k: v.cuda() for k, v in make_inputs().items()}
    with karchive.capture("gpu-capture", version="1.0") as cap:
        out, log = run_workload(inp)
    stats = cap.save(work / "capture.karc")
    torch.save({k: v.cpu() for k, v in {**inp, **out}.items()}, work / "tensors.pt")
    (work / "calls.json").write_text(json.dumps(log, indent=1))
    summary = cap.summary()
    ok = not summary["errors"] and set(summary["kernels"]) == {"add_kernel", "softmax_kernel", "scale_kernel",
                                                             "matmul_kernel"}
    n_mm = sum(1 for v in cap.variants.values() if v.variant.to_json()["kernel"] == "matmul_kernel")
    return {"ok": ok and n_mm >= len(MM_CONFIGS) and summary["autotune_records"] == 1,
            "summary": f"{summary['variants']} variants ({n_mm} matmul configs), events {summary['events']}, "
                       f"{stats.archive_bytes} B archive, triton {triton.__version__}",
            "capture": summary}


def sec_relaunch(work: Path) -> dict:
    import karchive
    import torch
    from karchive.format.autotune import choose_config, key_for_call

    saved = torch.load(work / "tensors.pt")
    t = {k: v.cuda() for k, v in saved.items()}
    calls = json.loads((work / "calls.json").read_text())
    arc = karchive.open(work / "capture.karc")
    records = arc.manifest.raw.get("autotune", [])
    launched: set[str] = set()
    problems: list[str] = []
    checks = 0
    for c in calls:
        fresh = {o: torch.full_like(t[o], float("nan")) for o in c["outputs"]}
        named = {k: (fresh.get(v["tensor"], t[v["tensor"]]) if "tensor" in v else v["value"])
                 for k, v in c["args"].items()}
        k = arc.kernel(c["kernel"])
        cx = dict(c["constexprs"])
        if c["autotune"]:
            record = next(r for r in records if r["kernel"] == c["kernel"])
            key = key_for_call(record, named)
            entry = choose_config(records, key, kernel=c["kernel"])
            if entry is None or entry["key"] != key:
                problems.append(f"{c['kernel']}: no recorded autotune entry for key {key}")
                continue
            # The runtime reads the records itself: no meta-parameters are passed for an autotuned call.
            variant = k.select(**named)
            if variant.key != entry["variant"]:
                problems.append(f"matmul: runtime selected {variant.key[:12]}, record says {entry['variant'][:12]}")
            grid = lambda m: (cdiv(m["M"], m["BLOCK_M"]) * cdiv(m["N"], m["BLOCK_N"]),)  # noqa: E731
        else:
            variant = k.select(**named, **cx)
            grid = tuple(c["grid"]) if c["grid"] else (
                lambda m: (cdiv(m["M"], m["BLOCK_M"]) * cdiv(m["N"], m["BLOCK_N"]),))
        k[grid](**named, **cx)
        torch.cuda.synchronize()
        launched.add(variant.key)
        for o, got in fresh.items():
            checks += 1
            if not torch.equal(got, t[o]):
                problems.append(f"{c['kernel']} -> {o}: differs from the JIT output "
                                f"(max abs diff {(got.float() - t[o].float()).abs().max().item()})")
    # Every other benchmarked config of the autotuned matmul, on the first shape, against torch.
    a, b = t["a0"], t["b0"]
    ref = (a.float() @ b.float())
    mm = arc.kernel("matmul_kernel")
    for v in arc.variants("matmul_kernel"):
        if v.key in launched:
            continue
        cx = v.constexprs
        M, N, K = MM_SHAPES[0]
        c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float16)
        args = dict(a_ptr=a, b_ptr=b, c_ptr=c, M=M, N=N, K=K, stride_am=a.stride(0), stride_ak=a.stride(1),
                    stride_bk=b.stride(0), stride_bn=b.stride(1), stride_cm=c.stride(0), stride_cn=c.stride(1))
        if mm.select(**args, **cx).key != v.key:
            problems.append(f"matmul variant {v.key[:12]} ({cx}) not selectable with shape 0")
            continue
        mm[(cdiv(M, cx["BLOCK_M"]) * cdiv(N, cx["BLOCK_N"]),)](**args, **cx)
        torch.cuda.synchronize()
        launched.add(v.key)
        checks += 1
        if not torch.allclose(c.float(), ref, atol=5e-2, rtol=1e-2):
            problems.append(f"matmul config {cx}: max abs err {(c.float() - ref).abs().max().item()} vs torch")
    missing = [f"{v.kernel}:{v.key[:12]}" for v in arc.manifest.variants if v.key not in launched]
    if missing:
        problems.append(f"variants never launched: {missing}")
    return {"ok": not problems, "summary": f"{len(launched)}/{len(arc.manifest.variants)} variants launched, "
            f"{checks} output checks, triton imported: {'triton' in sys.modules}", "problems": problems}


def sec_export(work: Path) -> dict:
    dest = work / "exported-cache"
    r = subprocess.run([sys.executable, "-m", "karchive", "export-triton-cache", str(work / "capture.karc"),
                        "--cache-dir", str(dest), "--json"], capture_output=True, text=True, env=_env(work, work / "caches" / "export-cli"))
    print(r.stdout, r.stderr)
    report = json.loads(r.stdout) if r.stdout.strip().startswith("{") else {"counts": {}, "error": r.stderr}
    counts = report.get("counts", {})
    return {"ok": r.returncode == 0 and counts.get("written", 0) > 0 and set(counts) == {"written"},
            "summary": f"rc={r.returncode} {counts}", "report": report}


def sec_jitrun(work: Path) -> dict:
    """Not a section: one fresh Triton process running the workload against TRITON_CACHE_DIR."""
    import torch
    from triton import knobs

    events: list = []
    knobs.compilation.listener = lambda **kw: events.append([kw["src"].name, bool(kw["cache_hit"])])
    inp = {k: v.cuda() for k, v in make_inputs().items()}
    torch.cuda.synchronize()
    marks: dict = {}
    t0 = time.perf_counter()
    out, _ = run_workload(inp, timer=lambda name: marks.setdefault(name, time.perf_counter() - t0))
    total = time.perf_counter() - t0
    ref = torch.load(work / "tensors.pt")
    # Same binaries, same inputs: bit-equal; the matmul may be re-tuned to another config, so it gets a tolerance.
    same = all(torch.equal(out[k].cpu(), ref[k]) for k in ("add", "softmax", "scale1", "scale2")) and all(
        torch.allclose(out[k].cpu().float(), ref[k].float(), atol=5e-2, rtol=1e-2) for k in ("c0", "c1"))
    return {"ok": True, "compiles": sum(1 for _, hit in events if not hit), "cache_hits": sum(1 for _, h in events if h),
            "first_call_s": round(marks.get("first_call", float("nan")), 4), "workload_s": round(total, 3),
            "outputs_equal_capture": same}


def sec_cold(work: Path) -> dict:
    runs = {}
    for label, cache in (("empty cache (cold)", work / "cold-cache"), ("exported cache", work / "exported-cache"),
                         ("exported cache, 2nd process", work / "exported-cache")):
        runs[label] = _child("jitrun", work, cache)
    exported = runs["exported cache"]
    cold = runs["empty cache (cold)"]
    ok = (exported.get("compiles") == 0 and exported.get("cache_hits", 0) > 0 and cold.get("compiles", 0) > 0
          and all(r.get("outputs_equal_capture") for r in runs.values()))
    line = "; ".join(f"{k}: {r.get('compiles')} compiles/{r.get('cache_hits')} hits, first call "
                     f"{r.get('first_call_s')} s, workload {r.get('workload_s')} s" for k, r in runs.items())
    return {"ok": ok, "summary": line, "runs": runs}


_TORCH_FNS = {"torch_inproc": 1.0, "torch_workers": 2.0}  # a different constant: a different kernel per section


def sec_torch_capture(work: Path, section: str) -> dict:
    import karchive
    import torch

    c = _TORCH_FNS[section]

    def f(x, y):
        return torch.relu(x * y + c)

    g = torch.Generator(device="cpu").manual_seed(1)
    x, y = torch.randn(1 << 20, generator=g).cuda(), torch.randn(1 << 20, generator=g).cuda()
    fc = torch.compile(f)
    with karchive.capture(section, version="1") as cap:
        out = fc(x, y)
        torch.cuda.synchronize()
    summary = cap.summary()
    cap.save(work / f"{section}.karc")
    torch.save({"x": x.cpu(), "y": y.cpu(), "out": out.cpu()}, work / f"{section}.pt")
    ok = summary["variants"] > 0 and not summary["errors"]
    return {"ok": ok, "summary": f"{summary['variants']} variant(s) {summary['kernels']}, events {summary['events']}",
            "capture": summary}


def _block_of(arc: Any, v: Any) -> int | None:
    for name in ("XBLOCK", "BLOCK"):
        if name in v.constexprs:
            return int(v.constexprs[name])
    if "ttir" in v.ir:  # a harvested variant: the block size is baked in; read it from the IR
        import re

        ends = [int(m) for m in re.findall(r"tt\.make_range \{end = (\d+) : i32, start = 0", arc.reader.read(
            v.ir["ttir"].path).decode())]
        return max(ends) if ends else None
    return None


def sec_torch_relaunch(work: Path, section: str) -> dict:
    import karchive
    import torch

    saved = torch.load(work / f"{section}.pt")
    x, y, ref = saved["x"].cuda(), saved["y"].cuda(), saved["out"].cuda()
    arc = karchive.open(work / f"{section}.karc")
    problems, done = [], []
    for v in arc.manifest.variants:
        names = [p.name for p in v.params]
        unknown = [n for n in names if not (n.startswith(("in_ptr", "out_ptr")) or n in ("xnumel", "XBLOCK"))]
        if unknown:
            problems.append(f"{v.kernel}: parameters {unknown} are outside this demo's pointwise replay")
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
        torch.cuda.synchronize()
        for o in outs.values():
            if not torch.equal(o, ref):
                problems.append(f"{v.kernel}: output differs from torch.compile's (max abs diff "
                                f"{(o - ref).abs().max().item()})")
        done.append(f"{v.kernel}[{v.provenance.get('origin')}{', harvested' if v.provenance.get('harvested') else ''}]")
    return {"ok": bool(done) and not problems, "summary": f"relaunched {done}", "problems": problems}


# --- orchestration ---------------------------------------------------------------------------------------
def _env(work: Path, cache: Any, extra: dict | None = None) -> dict:
    env = dict(os.environ, TRITON_CACHE_DIR=str(cache),
               PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "examples"), os.environ.get("PYTHONPATH", "")]))
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    env.update(extra or {})
    return env


def _child(phase: str, work: Path, cache: Path, extra: dict | None = None, timeout: int = 300) -> dict:
    log_dir = work / "logs"
    log_dir.mkdir(exist_ok=True)
    result_file = work / f"{phase}-{time.monotonic_ns()}.json"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--phase", phase, "--work", str(work),
           "--result", str(result_file)]
    t0 = time.perf_counter()
    try:
        r = subprocess.run(cmd, env=_env(work, cache, extra), capture_output=True, text=True, timeout=timeout)
        rc, stdout, stderr = r.returncode, r.stdout, r.stderr
    except subprocess.TimeoutExpired as exc:
        rc, stdout, stderr = 124, str(exc.stdout or ""), f"timed out after {timeout}s"
    with open(log_dir / f"{phase}.log", "a") as fh:
        fh.write(f"$ TRITON_CACHE_DIR={cache} {' '.join(cmd)}\nrc={rc} ({time.perf_counter() - t0:.1f}s)\n"
                 f"--- stdout\n{stdout}\n--- stderr\n{stderr}\n")
    if result_file.exists():
        result = json.loads(result_file.read_text())
    else:
        tail = (stderr or stdout).strip().splitlines()[-3:]
        result = {"ok": False, "summary": f"process failed rc={rc}: {' | '.join(tail)}"}
    result["seconds"] = round(time.perf_counter() - t0, 1)
    return result


def run_phase(phase: str, work: Path) -> dict:
    _paths()
    if phase == "capture":
        return sec_capture(work)
    if phase == "relaunch":
        return sec_relaunch(work)
    if phase == "export":
        return sec_export(work)
    if phase == "jitrun":
        return sec_jitrun(work)
    if phase in _TORCH_FNS:
        return sec_torch_capture(work, phase)
    if phase.endswith("_relaunch") and phase[: -len("_relaunch")] in _TORCH_FNS:
        return sec_torch_relaunch(work, phase[: -len("_relaunch")])
    raise SystemExit(f"unknown phase {phase}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sections", default=",".join(SECTIONS))
    ap.add_argument("--phase", help=argparse.SUPPRESS)
    ap.add_argument("--work", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.phase:  # child process
        try:
            result = run_phase(args.phase, Path(args.work))
        except BaseException as exc:  # noqa: BLE001 - report, never hide
            traceback.print_exc()
            result = {"ok": False, "summary": f"{type(exc).__name__}: {exc}"[:400]}
        Path(args.result).write_text(json.dumps(result, indent=1, default=str))
        return 0

    out_env = os.environ.get("OUT")
    work = Path(out_env) / "gpu_capture" if out_env else Path(tempfile.mkdtemp(prefix="gpu_capture_"))
    work.mkdir(parents=True, exist_ok=True)
    wanted = [s.strip() for s in args.sections.split(",") if s.strip()]
    results: dict[str, dict] = {}
    caches = work / "caches"
    for section in wanted:
        print(f"== {section}", flush=True)
        try:
            if section == "capture":
                results[section] = _child("capture", work, caches / "capture")
            elif section == "relaunch":
                results[section] = _child("relaunch", work, caches / "relaunch")
            elif section == "export":
                results[section] = _child("export", work, caches / "export")
            elif section == "cold":
                results[section] = sec_cold(work)
            elif section in _TORCH_FNS:
                threads = "1" if section == "torch_inproc" else "4"
                extra = {"TORCHINDUCTOR_COMPILE_THREADS": threads, "TORCHINDUCTOR_FX_GRAPH_CACHE": "0",
                         "TORCHINDUCTOR_CACHE_DIR": str(work / f"inductor-{section}")}
                cap = _child(section, work, caches / section, extra)
                rel = _child(f"{section}_relaunch", work, caches / f"{section}-relaunch")
                results[section] = {"ok": cap.get("ok") and rel.get("ok"),
                                    "summary": f"capture: {cap.get('summary')} || relaunch: {rel.get('summary')}",
                                    "capture": cap, "relaunch": rel}
            else:
                results[section] = {"ok": False, "summary": f"unknown section {section!r}"}
        except Exception as exc:  # noqa: BLE001
            results[section] = {"ok": False, "summary": f"{type(exc).__name__}: {exc}"}
        print(f"   {'PASS' if results[section].get('ok') else 'FAIL'}: {results[section].get('summary')}", flush=True)
    (work / "summary.json").write_text(json.dumps(results, indent=1, default=str))
    print("\nsection        result  details")
    print("-------------  ------  -------")
    for section, r in results.items():
        print(f"{section:<13}  {'PASS' if r.get('ok') else 'FAIL':<6}  {r.get('summary')}")
        for p in (r.get("problems") or []) + ((r.get("relaunch") or {}).get("problems") or []):
            print(f"{'':<23}- {p}")
    print(f"\nlogs and summary.json in {work}")
    return 0 if all(r.get("ok") for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
