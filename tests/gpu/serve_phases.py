"""Issue 22's GPU proof: unmodified library code served from archives with no JIT, each phase in a fresh process.

    python tests/gpu/serve_phases.py PHASE --lib LIB --work DIR --result FILE

The workloads are tests/gpu/corpus_phases.py's (Liger-Kernel ops and flash-linear-attention's chunk ops,
forward and backward, pinned versions: tests/gpu/CORPUS.md), called exactly as there: the library's own
``torch.autograd.Function``s, whose ``kernel[grid](...)`` call sites nobody changed. Every phase records the
step's outputs and input gradients (``_grad_step`` is wrapped to keep them; nothing in the library changes).

Phases:
  reference   plain Triton under ``karchive.capture``: the archive LIB.karc of every kernel the step compiled
              (with its autotune decisions and heuristics cases), the outputs LIB-reference.pt, the step time
  serve       a fresh, empty Triton cache; Triton's compiler made unusable (``triton.compile`` raises and
              counts, ptxas points nowhere); ``karchive.serve(LIB.karc, mode="strict")``; the same step: the
              outputs LIB-serve.pt, the compile count (must be 0), the serve report, the first-step time
  cold        plain Triton, empty cache: the first step's time (compiles and autotunes)
  warm        plain Triton, the cache ``cold`` left: the first step's time (autotuning runs again)
  exported    plain Triton, an empty cache filled by ``karchive export-triton-cache LIB.karc``: first step's time
  shim        Triton unimportable (``sys.modules["triton"] = None``): ``karchive.serve`` installs its import shim,
              the library imports on it and its step is served from LIB.karc: the outputs LIB-shim.pt, or the
              error that says why the library needs real Triton
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
sys.path[:0] = [str(ROOT), str(HERE)]

import corpus_phases  # noqa: E402 - the workloads, and how libraries are pinned

#: The libraries of this proof (entries of corpus_phases.LIBRARIES).
SERVE_LIBS = ("liger", "fla-delta-rule", "liger-compiled", "liger-mlp")


def _collecting() -> list[tuple[str, Any]]:
    """Wrap corpus_phases._grad_step so every step's outputs and input gradients are kept, in order."""
    import torch

    kept: list[tuple[str, Any]] = []
    inner = corpus_phases._grad_step

    def grad_step(fn: Any, inputs: list, seed: int) -> None:
        outs: list[Any] = []

        def keep(*a: Any) -> Any:
            o = fn(*a)
            outs.extend(o if isinstance(o, (tuple, list)) else (o,))
            return o

        inner(keep, inputs, seed)
        for i, o in enumerate(outs):
            if isinstance(o, torch.Tensor):
                kept.append((f"step{seed}.out{i}", o.detach().clone()))
        for i, t in enumerate(inputs):
            if isinstance(t, torch.Tensor) and t.grad is not None:
                kept.append((f"step{seed}.grad{i}", t.grad.detach().clone()))

    corpus_phases._grad_step = grad_step
    return kept


def _step(lib: str) -> tuple[dict, list[tuple[str, Any]], float]:
    kept = _collecting()
    t0 = time.perf_counter()
    info = corpus_phases.LIBRARIES[lib]()
    corpus_phases._sync()
    return info, kept, time.perf_counter() - t0


def phase_reference(lib: str, work: Path) -> dict:
    import torch

    import karchive

    reason = corpus_phases.unavailable(lib)
    if reason:
        return {"skip": reason}
    cap = karchive.capture(f"serve-{lib}", version="1.0", scope="process")
    with cap:
        info, kept, step_s = _step(lib)
    torch.save(dict(kept), work / f"{lib}-reference.pt")
    note = None
    try:
        cap.save(work / f"{lib}.karc")
    except Exception as exc:
        if "Out of range float values" not in str(exc):
            raise
        note = corpus_phases._null_non_finite_timings(cap)  # issue 23's known capture failure, as the corpus does
        cap.save(work / f"{lib}.karc")
    return {
        "save_workaround": note,
        "ops": info["ops"],
        "op_errors": info["op_errors"],
        "step_s": round(step_s, 3),
        "tensors": len(kept),
        "library": corpus_phases.library_version(lib),
    }


class _NoCompiler(Exception):
    pass


def _disable_compiler() -> dict[str, int]:
    """Triton's compiler made unusable: every way into it raises, and is counted."""
    import triton
    import triton.compiler
    import triton.compiler.compiler as cc

    count = {"compiles": 0}

    def refuse(*a: Any, **k: Any) -> Any:
        count["compiles"] += 1
        raise _NoCompiler("Triton's compiler is disabled in this process (karchive.serve strict proof)")

    triton.compile = refuse  # type: ignore[attr-defined]
    triton.compiler.compile = refuse  # type: ignore[attr-defined]
    cc.compile = refuse
    return count


def phase_serve(lib: str, work: Path) -> dict:
    import torch

    reason = corpus_phases.unavailable(lib)
    if reason:
        return {"skip": reason}
    cache = Path(os.environ["TRITON_CACHE_DIR"])
    shutil.rmtree(cache, ignore_errors=True)
    cache.mkdir(parents=True)
    t0 = time.perf_counter()
    count = _disable_compiler()
    import karchive

    report = karchive.serve(work / f"{lib}.karc", mode="strict")
    serve_s = time.perf_counter() - t0
    try:
        info, kept, step_s = _step(lib)
    finally:
        cached = sorted(p.name for p in cache.rglob("*") if p.is_file())
    torch.save(dict(kept), work / f"{lib}-serve.pt")
    return {
        "ops": info["ops"],
        "op_errors": info["op_errors"],
        "compiles": count["compiles"],
        "triton_cache_files": cached,
        "serve_call_s": round(serve_s, 4),
        "step_s": round(step_s, 3),
        "report": report.to_json(),
        "report_text": str(report),
    }


def _plain(lib: str, work: Path, fresh: bool, export: bool = False) -> dict:
    reason = corpus_phases.unavailable(lib)
    if reason:
        return {"skip": reason}
    cache = Path(os.environ["TRITON_CACHE_DIR"])
    if fresh:
        shutil.rmtree(cache, ignore_errors=True)
        cache.mkdir(parents=True)
    export_s = None
    if export:
        t0 = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "karchive", "export-triton-cache", str(work / f"{lib}.karc")],
            check=True,
            env=dict(os.environ),
            capture_output=True,
        )
        export_s = round(time.perf_counter() - t0, 3)
    info, _kept, step_s = _step(lib)
    return {"ops": info["ops"], "op_errors": info["op_errors"], "step_s": round(step_s, 3), "export_s": export_s}


def phase_shim(lib: str, work: Path) -> dict:
    import torch

    reason = corpus_phases.unavailable(lib)
    if reason:
        return {"skip": reason}
    sys.modules["triton"] = None  # type: ignore[assignment]  # no Triton in this process
    import karchive
    import karchive.serve

    report = karchive.serve(work / f"{lib}.karc", mode="strict")
    assert karchive.serve.shim_active(), "the shim is not the triton this process imports"
    try:
        info, kept, step_s = _step(lib)
    except Exception as exc:  # the library needs real Triton: the test reports why
        traceback.print_exc()
        return {
            "needs_triton": f"{type(exc).__name__}: {exc}"[:1500],
            "report_text": str(report),
            "traceback": traceback.format_exc()[-4000:],
        }
    torch.save(dict(kept), work / f"{lib}-shim.pt")
    return {
        "ops": info["ops"],
        "op_errors": info["op_errors"],
        "step_s": round(step_s, 3),
        "report": report.to_json(),
        "report_text": str(report),
        "triton_version_seen": getattr(sys.modules["triton"], "__version__", None),
    }


PHASES = {
    "reference": phase_reference,
    "serve": phase_serve,
    "shim": phase_shim,
    "cold": lambda lib, work: _plain(lib, work, fresh=True),
    "warm": lambda lib, work: _plain(lib, work, fresh=False),
    "exported": lambda lib, work: _plain(lib, work, fresh=True, export=True),
}
#: Each phase's own Triton cache directory under the work directory (warm reuses cold's).
CACHES = {
    "reference": "tc-reference",
    "serve": "tc-serve",
    "shim": "tc-shim",
    "cold": "tc-plain",
    "warm": "tc-plain",
    "exported": "tc-exported",
}


def run_phase(phase: str, lib: str, work: Path, timeout: int = 400) -> dict:
    """``phase`` for ``lib`` in a fresh interpreter; its JSON result (with the process's wall time)."""
    from phase_runner import run_child

    env = dict(os.environ)
    env["TRITON_CACHE_DIR"] = str(work / CACHES[phase] / lib)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(HERE), os.environ.get("PYTHONPATH", "")])
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    env.setdefault("FLA_USE_TMA", "0")
    if phase == "serve":
        env["TRITON_PTXAS_PATH"] = "/nonexistent/ptxas"  # and no assembler either
    return run_child(
        Path(__file__).resolve(),
        [phase, "--lib", lib],
        work,
        f"serve-{phase}-{lib}",
        f"serve-{phase}-{lib}.log",
        env,
        timeout,
        f"phase {phase} {lib}",
        time_key="process_s",
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("phase", choices=sorted(PHASES))
    ap.add_argument("--lib", required=True, choices=sorted(corpus_phases.LIBRARIES))
    ap.add_argument("--work", required=True)
    ap.add_argument("--result", required=True)
    args = ap.parse_args()
    try:
        result = {"ok": True, **PHASES[args.phase](args.lib, Path(args.work))}
    except BaseException as exc:
        traceback.print_exc()
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:3000]}
    Path(args.result).write_text(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
