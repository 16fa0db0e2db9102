"""Issue 30's wider corpus: three public Triton libraries nobody here built against, served unchanged, each phase in a
fresh process.

    python tests/gpu/corpus2_phases.py PHASE --lib LIB --work DIR --result FILE

Libraries (:data:`LIBRARIES`; exact versions: :data:`VERSIONS`, wheels in .whl/, tests/gpu/CORPUS.md):

  flaggems      FlagGems, an operator library: torch's aten ops replaced under ``flag_gems.use_gems`` (layer_norm,
                gelu, softmax, log_softmax, addmm, sum; forward and backward). Its ``LibEntry`` keeps the
                ``CompiledKernel`` of the first launch and relaunches it (``kernel[grid](*args)``) on every later call;
                its ``LibTuner`` (an ``Autotuner`` subclass with its own ``run``, key strategies and an SQLite decision
                cache under ``FLAGGEMS_CACHE_DIR``) reads ``best_config``; pointwise ops are Triton source it generates
                into ``FLAGGEMS_CACHE_DIR`` and imports at run time
  gemlite       GemLite, quantized matmuls (forward only: inference): A16W8 (int8 weights, fp16 activations) at batch
                1, 16 and 128 (its GEMV, GEMM_SPLITK and GEMM kernels) and A8W8 int8 dynamic (activations quantized by
                its own kernel); ``@triton.autotune`` whose ``early_config_prune`` returns one config built from the
                shipped per-GPU JSON table (``configs/h100.json``), heuristics under the autotuner
  cce           cut-cross-entropy's ``linear_cross_entropy`` forward and backward (bf16): ``@triton.heuristics``
                that set constexprs and launch options (``num_warps``, ``num_stages``) from one config, atomics and
                a spin lock (``tl.atomic_cas``)
  cce-autotune  the same with ``CCE_AUTOTUNE=1``: ``@triton.autotune`` with ``early_config_prune``, ``perf_model`` and
                ``top_k``, ``restore_value=["LSE"]`` (forward) and ``reset_to_zero=["dE", "dC"]`` (backward)

Every op runs three times (the first call specialises, the later ones take the libraries' cached paths).

Phases:
  reference   plain Triton under ``karchive.capture``: LIB.karc, the outputs and input gradients LIB-reference.pt
  serve       fresh caches (Triton's and the library's), Triton's compiler disabled (``triton.compile`` raises and
              counts; ptxas points nowhere), ``karchive.serve(LIB.karc, mode="strict")``: LIB-serve.pt, the compile
              count, the Triton cache's files, the serve report
  plain       plain Triton, fresh caches, no capture: LIB-plain.pt (what two plain runs differ by: the atomics)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(ROOT), str(HERE)]

#: import name, distribution, version (the wheels in .whl/)
VERSIONS = {
    "flaggems": ("flag_gems", "flag-gems", "5.0.2"),
    "gemlite": ("gemlite", "gemlite", "0.6.0.post2"),
    "cce": ("cut_cross_entropy", "cut-cross-entropy", "25.1.1"),
    "cce-autotune": ("cut_cross_entropy", "cut-cross-entropy", "25.1.1"),
}
#: Environment each library's processes get (besides the per-phase caches).
LIB_ENV = {"cce-autotune": {"CCE_AUTOTUNE": "1"}, "cce": {"CCE_AUTOTUNE": "0"}}
CALLS = 3


class Kept:
    """What a workload produced, by name (outputs and input gradients, cloned), and which ops ran or failed."""

    def __init__(self) -> None:
        self.tensors: dict[str, Any] = {}
        self.ops: list[str] = []
        self.errors: dict[str, str] = {}

    def keep(self, name: str, t: Any) -> None:
        self.tensors[name] = t.detach().clone()

    def run(self, name: str, fn: Callable[[], Any]) -> None:
        import torch

        try:
            fn()
            torch.cuda.synchronize()
            self.ops.append(name)
        except Exception as exc:  # reported per op; the test asserts none failed
            traceback.print_exc()
            self.errors[name] = f"{type(exc).__name__}: {exc}"[:1500]


def _gen(seed: int) -> Any:
    import torch

    return torch.Generator(device="cuda").manual_seed(seed)


def _leaves(*ts: Any) -> list:
    return [t.detach().clone().requires_grad_(True) for t in ts]


def _backward(outs: tuple, seed: int) -> None:
    """Backward of a fixed random projection of every floating output."""
    import torch

    g = _gen(seed)
    loss = sum(
        (o.float() * torch.randn(o.shape, generator=g, device=o.device)).sum()
        for o in outs
        if o.is_floating_point() and o.requires_grad
    )
    loss.backward()


def workload_flaggems(k: Kept) -> None:
    import flag_gems
    import torch
    import torch.nn.functional as F

    g = _gen(0)
    B, D, V = 96, 512, 1000
    base = [
        torch.randn(B, D, generator=g, device="cuda"),
        1 + 0.1 * torch.randn(D, generator=g, device="cuda"),
        0.1 * torch.randn(D, generator=g, device="cuda"),
        0.02 * torch.randn(V, D, generator=g, device="cuda"),
        0.01 * torch.randn(V, generator=g, device="cuda"),
    ]
    # FlagGems names its ops by function; what they replace in aten:
    include = [
        "layer_norm",
        "layer_norm_backward",
        "gelu",
        "gelu_backward",
        "softmax",
        "softmax_backward",
        "log_softmax",
        "log_softmax_backward",
        "addmm",
        "sum",
    ]
    aten = {
        "native_layer_norm",
        "native_layer_norm_backward",
        "gelu",
        "gelu_backward",
        "_softmax",
        "_softmax_backward_data",
        "_log_softmax",
        "_log_softmax_backward_data",
        "addmm",
        "sum",
    }

    def block(x: Any, w: Any, b: Any, W: Any, bias: Any) -> tuple:
        h = F.gelu(F.layer_norm(x, (D,), w, b, 1e-5))
        logits = F.linear(h, W, bias)  # addmm
        return torch.softmax(logits, -1), torch.log_softmax(logits, -1), h.sum()

    with flag_gems.use_gems(include=include):
        missing = aten - set(flag_gems.all_registered_keys())
        assert not missing, f"FlagGems did not take over {sorted(missing)}"
        for step in range(CALLS):

            def one(step: int = step) -> None:
                leaves = _leaves(*base)
                outs = block(*leaves)
                _backward(outs, 10 + step)
                for i, o in enumerate(outs):
                    k.keep(f"step{step}.out{i}", o)
                for i, t in enumerate(leaves):
                    k.keep(f"step{step}.grad{i}", t.grad)

            k.run(f"block fwd+bwd #{step}", one)


def workload_gemlite(k: Kept) -> None:
    import torch
    from gemlite.helper import A16W8, A8W8_int8_dynamic

    g = _gen(0)
    K, N = 1024, 2048
    W = 0.02 * torch.randn(N, K, generator=g, device="cuda", dtype=torch.float16)
    bias = 0.01 * torch.randn(N, generator=g, device="cuda", dtype=torch.float16)
    layers = {
        "A16W8": A16W8(device="cuda:0").from_weights(W.clone(), bias=bias.clone()),
        "A8W8_int8_dynamic": A8W8_int8_dynamic(device="cuda:0", dtype=torch.float16).from_weights(
            W.clone(), bias=bias.clone()
        ),
    }
    for name, layer in layers.items():
        for m in (1, 16, 128):
            x = torch.randn(m, K, generator=g, device="cuda", dtype=torch.float16)
            for call in range(CALLS):
                k.run(
                    f"{name} M={m} #{call}",
                    lambda name=name, layer=layer, x=x, m=m, call=call: k.keep(f"{name}.M{m}.call{call}", layer(x)),
                )


def workload_cce(k: Kept) -> None:
    import torch
    from cut_cross_entropy import linear_cross_entropy

    g = _gen(0)
    B, D, V = 512, 256, 8192
    e0 = torch.randn(B, D, generator=g, device="cuda", dtype=torch.bfloat16)
    c0 = 0.05 * torch.randn(V, D, generator=g, device="cuda", dtype=torch.bfloat16)
    targets = torch.randint(0, V, (B,), generator=g, device="cuda")
    for call in range(CALLS):

        def one(call: int = call) -> None:
            e, c = _leaves(e0, c0)
            loss = linear_cross_entropy(e, c, targets)
            loss.backward()
            k.keep(f"call{call}.loss", loss)
            k.keep(f"call{call}.grad_e", e.grad)
            k.keep(f"call{call}.grad_c", c.grad)

        k.run(f"linear_cross_entropy fwd+bwd #{call}", one)


LIBRARIES: dict[str, Callable[[Kept], None]] = {
    "flaggems": workload_flaggems,
    "gemlite": workload_gemlite,
    "cce": workload_cce,
    "cce-autotune": workload_cce,
}


def unavailable(lib: str) -> str | None:
    import importlib.util

    name, dist, _version = VERSIONS[lib]
    if importlib.util.find_spec(name) is None:
        return f"{dist} is not installed (tests/gpu/CORPUS.md: pip install --no-index --no-deps .whl/*.whl)"
    return None


def library_version(lib: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(VERSIONS[lib][1])
    except metadata.PackageNotFoundError:
        return None


def _step(lib: str) -> tuple[Kept, float]:
    k = Kept()
    t0 = time.perf_counter()
    LIBRARIES[lib](k)
    return k, time.perf_counter() - t0


def _fresh(path: Path) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def phase_reference(lib: str, work: Path) -> dict:
    import torch

    import karchive

    reason = unavailable(lib)
    if reason:
        return {"skip": reason}
    _fresh(Path(os.environ["TRITON_CACHE_DIR"]))
    cap = karchive.capture(f"corpus2-{lib}", version="1.0", scope="process")
    with cap:
        k, step_s = _step(lib)
    torch.save(k.tensors, work / f"{lib}-reference.pt")
    note = None
    try:
        cap.save(work / f"{lib}.karc")
    except Exception as exc:
        if "Out of range float values" not in str(exc):
            raise
        from corpus_phases import _null_non_finite_timings

        note = _null_non_finite_timings(cap)  # issue 23's known capture failure, as the corpus does
        cap.save(work / f"{lib}.karc")
    summary = cap.summary()
    return {
        "ops": k.ops,
        "op_errors": k.errors,
        "step_s": round(step_s, 3),
        "tensors": len(k.tensors),
        "library": library_version(lib),
        "save_workaround": note,
        "left_out": summary.get("left_out"),
        "capture_warnings": [str(w) for w in cap.warnings],
        "kernels": sorted(karchive.open(work / f"{lib}.karc").kernels()),
    }


def phase_serve(lib: str, work: Path) -> dict:
    import torch

    reason = unavailable(lib)
    if reason:
        return {"skip": reason}
    cache = _fresh(Path(os.environ["TRITON_CACHE_DIR"]))
    from serve_phases import _disable_compiler

    count = _disable_compiler()
    import karchive

    report = karchive.serve(work / f"{lib}.karc", mode="strict")
    try:
        k, step_s = _step(lib)
    finally:
        cached = sorted(p.name for p in cache.rglob("*") if p.is_file())
    torch.save(k.tensors, work / f"{lib}-serve.pt")
    return {
        "ops": k.ops,
        "op_errors": k.errors,
        "compiles": count["compiles"],
        "triton_cache_files": cached,
        "step_s": round(step_s, 3),
        "report": report.to_json(),
        "report_text": str(report),
    }


def phase_plain(lib: str, work: Path) -> dict:
    import torch

    reason = unavailable(lib)
    if reason:
        return {"skip": reason}
    _fresh(Path(os.environ["TRITON_CACHE_DIR"]))
    k, step_s = _step(lib)
    torch.save(k.tensors, work / f"{lib}-plain.pt")
    return {"ops": k.ops, "op_errors": k.errors, "step_s": round(step_s, 3)}


PHASES = {"reference": phase_reference, "serve": phase_serve, "plain": phase_plain}


def run_phase(phase: str, lib: str, work: Path, timeout: int = 400) -> dict:
    """``phase`` for ``lib`` in a fresh interpreter, with its own Triton and library caches; its JSON result."""
    from phase_runner import run_child

    env = dict(os.environ)
    env.update(LIB_ENV.get(lib, {}))
    env["TRITON_CACHE_DIR"] = str(work / f"tc-{phase}" / lib)
    # Inductor's own caches (FX graph cache, its Triton bundles) per phase, emptied: a serve phase must not load
    # what the reference phase's torch.compile left there (cut-cross-entropy compiles a cast with Inductor)
    env["TORCHINDUCTOR_CACHE_DIR"] = str(_fresh(work / f"ic-{phase}" / lib))
    env["FLAGGEMS_CACHE_DIR"] = str(_fresh(work / f"flaggems-{phase}" / lib))  # its tuning DB and generated code
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(HERE), os.environ.get("PYTHONPATH", "")])
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    if phase == "serve":
        env["TRITON_PTXAS_PATH"] = "/nonexistent/ptxas"  # and no assembler either
    return run_child(
        Path(__file__).resolve(),
        [phase, "--lib", lib],
        work,
        f"corpus2-{phase}-{lib}",
        f"corpus2-{phase}-{lib}.log",
        env,
        timeout,
        f"phase {phase} {lib}",
        time_key="process_s",
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("phase", choices=sorted(PHASES))
    ap.add_argument("--lib", required=True, choices=sorted(LIBRARIES))
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
