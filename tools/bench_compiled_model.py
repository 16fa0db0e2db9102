"""Issue 31's numbers: a torch.compile'd Llama-style decoder's first step since process start, and how many Triton
compiles and autotune benchmarks it took, with cold caches, warm caches, Mega-Cache and karchive.

    python tools/bench_compiled_model.py --out DIR [--workloads default,dynamic,max-autotune] [--budget 360]

Each phase runs in a fresh process (tests/gpu/phase_runner.py) with its own Inductor and Triton cache directories
and Inductor compiling in-process (``TORCHINDUCTOR_COMPILE_THREADS=1``, as the issue's baseline):

  cold       empty caches; afterwards Inductor's Mega-Cache (``torch.compiler.save_cache_artifacts``) is saved
  warm       the caches ``cold`` left
  megacache  empty caches, the Mega-Cache bytes loaded (``torch.compiler.load_cache_artifacts``) before compiling
  capture    empty caches, the steps under ``karchive.capture``: the archive WORKLOAD.karc and the reference outputs
  serve      empty caches, Triton's compiler disabled (every ``triton.compile`` raises and is counted; ptxas points
             nowhere), ``karchive.serve(WORKLOAD.karc, mode="strict")`` (and Inductor's side, install_inductor):
             the same steps, outputs compared bit for bit with ``capture``'s
  serve-cache  as ``serve``, from a signed copy of the archive (WORKLOAD-signed.karc, a key made for the run) under a
             trust policy that lists its key (``trust=``): the archive's torch cache artifacts (the member the capture
             stored) are loaded before the first compile, so Inductor's FX graph cache hits and it neither lowers nor
             generates code; the kernels still come from the archive (Triton's compiler disabled). Needs
             ``cryptography`` in the orchestrating process (skipped without it)
  decisions  Inductor's side alone, without the compile boundary: an empty Inductor cache, the Triton cache
             filled by ``karchive export-triton-cache WORKLOAD.karc``, ``install_inductor`` (strict): Triton
             compiles only as cache hits (fresh compiles counted), Inductor benchmarks nothing; bit-equal

The steps: an inference forward (``no_grad``) of a Llama-style decoder (transformers' ``LlamaForCausalLM`` from a
``LlamaConfig``, 4 layers, hidden 1024, bf16, random weights; without transformers, the same architecture written
here, and the summary says so), then a training step (forward with labels, backward). Workloads: ``default``
(``torch.compile(model)``), ``max-autotune`` (``mode="max-autotune-no-cudagraphs"``), ``dynamic``
(``dynamic=True``, then a second sequence length that must not compile), ``eager-attention`` (``default`` with
attention written out instead of SDPA's flash kernel, whose backward sums dQ with atomics: the gradients can be
compared bit for bit), ``user-kernel`` (``eager-attention`` with the MLP's ``silu(gate) * up`` as user-defined
Triton kernels inside the graph, tests/gpu/inductor_user_kernels.py). Per phase: time from process start to
the end of the first forward and of the training step, Triton compile calls (fresh compiles and cache hits, from
Triton's compilation listener), GPU benchmarks Inductor ran, torch's own cache counters (``torch_caches``: FX graph
and AOTAutograd cache hits and misses), and for serve the karchive reports and the comparison. Everything lands in ``OUT/summary.json`` (written after each phase, so a budget cut keeps what ran).

``--budget`` (seconds, default 360; each phase at most ``--timeout``, 240) skips the phases that would start
after it; the order runs the karchive proofs of ``default`` first. ``--smoke`` runs the plumbing on the CPU (a
tiny model, ``backend="aot_eager"``: no Triton, so capture records nothing); it proves nothing about kernels.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
HERE = ROOT / "tests" / "gpu"

#: workload -> torch.compile keyword arguments
WORKLOADS: dict[str, dict[str, Any]] = {  # in the order they run (max-autotune, the slowest, last)
    "default": {},
    "dynamic": {"dynamic": True},
    "max-autotune": {"mode": "max-autotune-no-cudagraphs"},
    # default compile, attention written out (softmax(QK^T)V) instead of SDPA's flash kernel, whose backward
    # accumulates dQ with atomics: the training step's gradients can then be compared bit for bit
    "eager-attention": {"attention": "eager"},
    # eager-attention with the MLP's silu(gate) * up as user-defined Triton kernels (tests/gpu/inductor_user_kernels:
    # a torch.library.triton_op, autotuned forward, plain backward) that Inductor copies into its graph's modules
    "user-kernel": {"attention": "eager", "mlp": "triton"},
}
#: phases run per workload, in this order (capture before serve; cold before warm and megacache)
PLANS: dict[str, tuple[str, ...]] = {
    "default": ("capture", "serve", "serve-cache", "decisions", "cold", "warm", "megacache"),
    "max-autotune": ("capture", "serve", "decisions"),
    "dynamic": ("capture", "serve"),
    "eager-attention": ("capture", "serve"),
    "user-kernel": ("capture", "serve"),
}
#: which cache directories each phase uses (warm reuses cold's)
CACHES = {
    "cold": "plain",
    "warm": "plain",
    "megacache": "mega",
    "capture": "capture",
    "serve": "serve",
    "serve-cache": "serve-cache",
    "decisions": "decisions",
}
FRESH = {"cold", "megacache", "capture", "serve", "serve-cache", "decisions"}
SERVING = ("serve", "serve-cache")  # Triton's compiler disabled, karchive.serve strict
BATCH, SEQ, SEQ2 = 2, 512, 384


# --- the model -----------------------------------------------------------------------------------------------
def build_model(smoke: bool, attention: str = "sdpa") -> tuple[Any, str]:
    """(model, where it came from): transformers' LlamaForCausalLM when importable, else the same architecture."""
    import torch

    torch.manual_seed(0)
    size = (
        dict(hidden=64, inter=176, layers=1, heads=4, kv=2, vocab=512)
        if smoke
        else dict(hidden=1024, inter=2816, layers=4, heads=16, kv=4, vocab=32000)
    )
    try:
        from transformers import LlamaConfig, LlamaForCausalLM

        cfg = LlamaConfig(
            hidden_size=size["hidden"],
            intermediate_size=size["inter"],
            num_hidden_layers=size["layers"],
            num_attention_heads=size["heads"],
            num_key_value_heads=size["kv"],
            vocab_size=size["vocab"],
            max_position_embeddings=2048,
            use_cache=False,
            attn_implementation=attention,
        )
        model = LlamaForCausalLM(cfg)
        import transformers

        origin = f"transformers {transformers.__version__} LlamaForCausalLM"
    except ImportError as exc:
        model = _Decoder(**size, eager_attention=attention == "eager")
        origin = f"built-in Llama-style decoder (transformers not importable: {exc})"
    return model, origin


def _decoder_classes() -> Any:
    import torch
    import torch.nn.functional as F
    from torch import nn

    class RMSNorm(nn.Module):
        def __init__(self, d: int) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.ones(d))

        def forward(self, x: Any) -> Any:
            v = x.float().pow(2).mean(-1, keepdim=True)
            return (x.float() * torch.rsqrt(v + 1e-6)).to(x.dtype) * self.weight

    class Block(nn.Module):
        def __init__(self, hidden: int, inter: int, heads: int, kv: int) -> None:
            super().__init__()
            self.h, self.kv, self.d = heads, kv, hidden // heads
            self.eager_attention = False  # set by _Decoder
            self.norm1, self.norm2 = RMSNorm(hidden), RMSNorm(hidden)
            self.q = nn.Linear(hidden, heads * self.d, bias=False)
            self.k = nn.Linear(hidden, kv * self.d, bias=False)
            self.v = nn.Linear(hidden, kv * self.d, bias=False)
            self.o = nn.Linear(heads * self.d, hidden, bias=False)
            self.gate = nn.Linear(hidden, inter, bias=False)
            self.up = nn.Linear(hidden, inter, bias=False)
            self.down = nn.Linear(inter, hidden, bias=False)

        def rope(self, x: Any) -> Any:
            t = x.shape[-2]
            inv = 1.0 / (10000 ** (torch.arange(0, self.d, 2, device=x.device).float() / self.d))
            ang = torch.outer(torch.arange(t, device=x.device).float(), inv)
            cos, sin = torch.cat([ang.cos()] * 2, -1).to(x.dtype), torch.cat([ang.sin()] * 2, -1).to(x.dtype)
            x1, x2 = x[..., : self.d // 2], x[..., self.d // 2 :]
            return x * cos + torch.cat([-x2, x1], -1) * sin

        def forward(self, x: Any) -> Any:
            b, t, _ = x.shape
            h = self.norm1(x)
            q = self.rope(self.q(h).view(b, t, self.h, self.d).transpose(1, 2))
            k = self.rope(self.k(h).view(b, t, self.kv, self.d).transpose(1, 2))
            v = self.v(h).view(b, t, self.kv, self.d).transpose(1, 2)
            rep = self.h // self.kv
            k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
            if self.eager_attention:
                w = (q @ k.transpose(-1, -2)) * self.d**-0.5
                w = w.masked_fill(torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
                a = (w.float().softmax(-1).to(q.dtype) @ v).transpose(1, 2).reshape(b, t, -1)
            else:
                a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, -1)
            x = x + self.o(a)
            h = self.norm2(x)
            return x + self.down(F.silu(self.gate(h)) * self.up(h))

    class Decoder(nn.Module):
        def __init__(self, hidden: int, inter: int, layers: int, heads: int, kv: int, vocab: int) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab, hidden)
            self.layers = nn.ModuleList(Block(hidden, inter, heads, kv) for _ in range(layers))
            self.norm = RMSNorm(hidden)
            self.lm_head = nn.Linear(hidden, vocab, bias=False)

        def forward(self, input_ids: Any, labels: Any = None) -> Any:
            x = self.embed(input_ids)
            for layer in self.layers:
                x = layer(x)
            logits = self.lm_head(self.norm(x))
            loss = None
            if labels is not None:
                loss = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten())
            return {"logits": logits, "loss": loss}

    return Decoder


def _Decoder(eager_attention: bool = False, **size: int) -> Any:
    model = _decoder_classes()(**size)
    for layer in model.layers:
        layer.eager_attention = eager_attention
    return model


def _get(out: Any, name: str) -> Any:
    return out[name] if isinstance(out, dict) else getattr(out, name)


# --- counting --------------------------------------------------------------------------------------------------
class Counters:
    """Triton compile calls (and what Triton's listener says of them) and Inductor's GPU benchmarks."""

    def __init__(self) -> None:
        self.compile_calls = 0
        self.fresh = 0
        self.cache_hits = 0
        self.benchmarks = 0
        self.refused = 0
        self._tls = threading.local()

    def snapshot(self) -> dict[str, int]:
        return {
            "triton_compile_calls": self.compile_calls,
            "triton_fresh_compiles": self.fresh,
            "triton_cache_hits": self.cache_hits,
            "gpu_benchmarks": self.benchmarks,
            "refused_compiles": self.refused,
        }

    def install(self, refuse: bool) -> None:
        """Count every way into Triton's compiler (refusing each call when ``refuse``) and Inductor's benchmarker.
        Installed before karchive, so karchive's patches sit above: what reaches these is what Triton/Inductor
        actually did."""
        import triton
        import triton.compiler
        import triton.compiler.compiler as cc

        orig = cc.compile
        me = self

        def compile(*a: Any, **k: Any) -> Any:
            me.compile_calls += 1
            if refuse:
                me.refused += 1
                name = getattr(getattr(a[0], "fn", None), "__name__", "?") if a else "?"
                raise RuntimeError(f"Triton's compiler is disabled in this process (karchive serve proof): {name}")
            return orig(*a, **k)

        triton.compile = compile  # type: ignore[attr-defined]
        triton.compiler.compile = compile  # type: ignore[attr-defined]
        cc.compile = compile
        try:
            from triton import knobs

            previous = knobs.compilation.listener

            def listener(*a: Any, **k: Any) -> Any:
                if k.get("cache_hit"):
                    me.cache_hits += 1
                else:
                    me.fresh += 1
                return previous(*a, **k) if previous is not None else None

            knobs.compilation.listener = listener
        except Exception:  # an older Triton (no knobs): calls are still counted
            pass
        from torch._inductor.runtime import benchmarking

        bm = benchmarking.benchmarker
        for name in ("benchmark", "benchmark_gpu", "benchmark_cpu"):
            inner = getattr(bm, name, None)
            if inner is not None:
                setattr(bm, name, self._counted(inner))

    def _counted(self, inner: Any) -> Any:
        me = self

        def bench(*a: Any, **k: Any) -> Any:
            depth = getattr(me._tls, "depth", 0)
            if depth == 0:
                me.benchmarks += 1
            me._tls.depth = depth + 1
            try:
                return inner(*a, **k)
            finally:
                me._tls.depth = depth

        return bench


# --- one phase (a child process) ----------------------------------------------------------------------------------
def _inputs(device: str, vocab: int, seq: int) -> Any:
    import torch

    g = torch.Generator().manual_seed(1)
    return torch.randint(0, vocab, (BATCH, seq), generator=g).to(device)


def trace_inductor(path: Path) -> None:
    """Diagnostics (``OUT/<workload>-<phase>-trace.log``): every template lookup, module benchmark, fusion
    benchmark and multi-template finalisation as Inductor sees it, one JSON line each, written as it happens (a
    crash keeps them). Patched above karchive's patches, so the capture's and the serving process's lines compare
    one to one: the first line that differs is where serving answered differently."""
    from torch._inductor import ir
    from torch._inductor.codecache import PersistentCache
    from torch._inductor.codegen.triton import TritonScheduling
    from torch._inductor.scheduler import Scheduler

    out = path.open("a")
    lock = threading.Lock()

    def emit(**kw: Any) -> None:
        with lock:
            out.write(json.dumps(kw, default=str) + "\n")
            out.flush()

    def desc(c: Any) -> str:
        return re.sub(r"ACC_TYPE=.*?ALLOW_TF32=\w+, |USE_FAST_ACCUM=\w+, ", "", str(getattr(c, "description", c)))[:120]

    orig_lookup = PersistentCache.lookup

    def lookup(self: Any, choices: Any, op: str, inputs: str, benchmark: Any, *a: Any, **k: Any) -> Any:
        got = orig_lookup(self, choices, op, inputs, benchmark, *a, **k)
        best = min(got, key=got.get) if got else None
        emit(
            ev="lookup", op=op, inputs=str(inputs)[:24], n=len(choices), probe=benchmark is None, got=len(got or {}),
            best=None if best is None else desc(best), ms=None if best is None else got[best],
        )  # fmt: skip
        return got

    orig_module = TritonScheduling.benchmark_codegened_module

    def module(self: Any, mod: Any, *a: Any, **k: Any) -> Any:
        got = orig_module(self, mod, *a, **k)
        emit(ev="module", file=os.path.basename(str(getattr(mod, "__file__", "?"))), ms=got[0])
        return got

    orig_fusion = Scheduler.speedup_by_fusion

    def fusion(self: Any, node1: Any, node2: Any) -> Any:
        emit(ev="fusion", n1=node1.get_name(), n2=node2.get_name())
        return orig_fusion(self, node1, node2)

    orig_final = ir.MultiTemplateBuffer.finalize_as_triton_caller

    def final(self: Any, caller: Any) -> Any:
        emit(ev="finalize", node=self.get_name(), choice=desc(caller))
        return orig_final(self, caller)

    PersistentCache.lookup = lookup
    TritonScheduling.benchmark_codegened_module = module
    Scheduler.speedup_by_fusion = fusion
    ir.MultiTemplateBuffer.finalize_as_triton_caller = final


def run_steps(workload: str, device: str, smoke: bool, t_start: float) -> tuple[dict, dict]:
    """The inference forward and the training step; (timings and counts, tensors to compare)."""
    import torch

    out: dict[str, Any] = {}
    tensors: dict[str, Any] = {}
    kwargs = dict(WORKLOADS[workload])
    model, origin = build_model(smoke, kwargs.pop("attention", "sdpa"))
    dtype = torch.float32 if smoke else torch.bfloat16
    model = model.to(device=device, dtype=dtype)
    if kwargs.pop("mlp", None) == "triton":
        if smoke:  # Triton kernels need a GPU: the smoke run keeps torch's MLP
            out["user_kernels"] = "skipped (smoke: no GPU)"
        else:
            sys.path.insert(0, str(HERE))
            from inductor_user_kernels import patch_mlp

            out["user_kernels"] = f"{patch_mlp(model)} MLPs through karchive_bench::silu_mul"
    vocab = model.lm_head.weight.shape[0]
    if smoke:
        kwargs = {"backend": "aot_eager", **({"dynamic": True} if workload == "dynamic" else {})}
    compiled = torch.compile(model, **kwargs)
    out["model"] = origin
    out["compile_kwargs"] = {k: str(v) for k, v in kwargs.items()}
    ids = _inputs(device, vocab, SEQ)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)

    model.eval()
    t0 = time.perf_counter()
    with torch.no_grad():
        logits = _get(compiled(ids), "logits")
    sync()
    out["forward_s"] = round(time.perf_counter() - t0, 3)
    out["first_forward_since_start_s"] = round(time.time() - t_start, 3)
    tensors["forward.logits"] = logits.detach().cpu()
    out["after_forward"] = COUNTERS.snapshot() if COUNTERS else None

    model.train()
    t0 = time.perf_counter()
    res = compiled(ids, labels=ids)
    loss = _get(res, "loss")
    loss.backward()
    sync()
    out["train_step_s"] = round(time.perf_counter() - t0, 3)
    out["train_step_since_start_s"] = round(time.time() - t_start, 3)
    tensors["train.loss"] = loss.detach().cpu()
    tensors["train.logits"] = _get(res, "logits").detach().cpu()
    for name, p in model.named_parameters():
        if p.grad is not None:
            tensors[f"grad.{name}"] = p.grad.detach().cpu()
    if workload == "dynamic":  # another length: a dynamic graph must serve it without compiling
        model.eval()
        t0 = time.perf_counter()
        with torch.no_grad():
            tensors["forward2.logits"] = _get(compiled(_inputs(device, vocab, SEQ2)), "logits").detach().cpu()
        sync()
        out["second_length_forward_s"] = round(time.perf_counter() - t0, 3)
    out["counts"] = COUNTERS.snapshot() if COUNTERS else None
    out["torch_caches"] = torch_caches()
    return out, tensors


def torch_caches() -> dict[str, int]:
    """torch's own cache counters: FX graph cache and AOTAutograd cache hits and misses."""
    from torch._dynamo.utils import counters

    ind, aot = counters["inductor"], counters["aot_autograd"]
    return {
        "fxgraph_cache_hit": ind["fxgraph_cache_hit"],
        "fxgraph_cache_miss": ind["fxgraph_cache_miss"],
        "autograd_cache_hit": aot["autograd_cache_hit"],
        "autograd_cache_miss": aot["autograd_cache_miss"],
    }


COUNTERS: Counters | None = None


def child(phase: str, workload: str, work: Path, smoke: bool, t_start: float) -> dict:
    global COUNTERS
    import torch

    device = "cpu" if smoke else "cuda"
    out: dict[str, Any] = {
        "phase": phase,
        "workload": workload,
        "torch": torch.__version__,
        "import_torch_s": round(time.time() - t_start, 3),
    }
    if device == "cuda":
        out["gpu"] = torch.cuda.get_device_name()
    import triton

    out["triton"] = triton.__version__
    COUNTERS = Counters()
    COUNTERS.install(refuse=(phase in SERVING))
    mega = work / f"{workload}-megacache.bin"
    arc = work / f"{workload}.karc"
    ref = work / f"{workload}-capture.pt"
    if phase == "megacache":
        if not mega.exists():
            return {"skip": "the cold phase saved no Mega-Cache"}
        t0 = time.perf_counter()
        info = torch.compiler.load_cache_artifacts(mega.read_bytes())
        out["megacache_load_s"] = round(time.perf_counter() - t0, 3)
        out["megacache_bytes"] = mega.stat().st_size
        out["megacache_info"] = str(info)[:2000]
    if phase == "capture":
        import karchive

        with karchive.capture(f"compiled-llama-{workload}", version="1") as cap:
            if workload == "max-autotune" and not smoke:
                trace_inductor(work / f"{workload}-{phase}-trace.log")
            steps, tensors = run_steps(workload, device, smoke, t_start)
        out.update(steps)
        summary = cap.summary()
        out["capture"] = {
            k: summary[k]
            for k in (
                "variants",
                "events",
                "inductor_decisions",
                "inductor_template_tables",
                "warnings",
                "errors",
                "lost",
                "left_out_counts",
            )
        }
        out["capture"]["kernels"] = len(summary["kernels"])
        t0 = time.perf_counter()
        try:
            cap.save(arc)
            out["archive_bytes"] = arc.stat().st_size
        except Exception as exc:  # reported (smoke: nothing to archive)
            out["save_error"] = f"{type(exc).__name__}: {exc}"[:2000]
        out["save_s"] = round(time.perf_counter() - t0, 3)
        torch.save(tensors, ref)
        return out
    if phase in SERVING:
        import karchive
        import karchive.serve
        from karchive.serve import core, inductor_serve

        trust = {}
        if phase == "serve-cache":
            arc, trust = work / f"{workload}-signed.karc", {"trust": str(work / f"{workload}-policy.toml")}
        t0 = time.perf_counter()
        report = karchive.serve(arc, mode="strict", **trust)
        if inductor_serve.active_inductor() is None:  # until serve() installs it itself
            inductor_serve.install_inductor(core.active())
        out["serve_call_s"] = round(time.perf_counter() - t0, 3)
        if workload == "max-autotune" and not smoke:
            trace_inductor(work / f"{workload}-{phase}-trace.log")
        try:
            steps, tensors = run_steps(workload, device, smoke, t_start)
        finally:
            out["serve_report"] = report.to_json()
            ind = inductor_serve.active_inductor()
            out["inductor_serve"] = ind.to_json() if ind is not None else None
        out.update(steps)
        out["compare"] = compare(torch.load(ref), tensors)
        return out
    if phase == "decisions":
        import subprocess

        import karchive
        from karchive.serve import inductor_serve

        t0 = time.perf_counter()
        exported = subprocess.run(
            [sys.executable, "-m", "karchive", "export-triton-cache", str(arc)],
            env=dict(os.environ),
            capture_output=True,
            text=True,
        )
        out["export_s"] = round(time.perf_counter() - t0, 3)
        out["export_rc"] = exported.returncode
        out["export_tail"] = (exported.stdout + exported.stderr)[-1500:]
        session = type("Session", (), {"archives": [karchive.open(arc)], "mode": "strict"})()
        serving = inductor_serve.install_inductor(session)
        try:
            steps, tensors = run_steps(workload, device, smoke, t_start)
        finally:
            out["inductor_serve"] = serving.to_json() if serving is not None else None
        out.update(steps)
        out["compare"] = compare(torch.load(ref), tensors)
        return out
    steps, _tensors = run_steps(workload, device, smoke, t_start)
    out.update(steps)
    if phase == "cold":
        t0 = time.perf_counter()
        saved = torch.compiler.save_cache_artifacts()
        if saved is not None:
            mega.write_bytes(saved[0])
            out["megacache_bytes"] = len(saved[0])
        out["megacache_save_s"] = round(time.perf_counter() - t0, 3)
    return out


def compare(want: dict, got: dict) -> dict:
    """Bit equality per tensor; where unequal, the largest difference (atomics in a backward may reorder sums)."""
    import torch

    res: dict[str, Any] = {"missing": sorted(set(want) - set(got)), "equal": [], "unequal": {}}
    for k, w in want.items():
        g = got.get(k)
        if g is None:
            continue
        if w.shape == g.shape and w.dtype == g.dtype and torch.equal(w, g):
            res["equal"].append(k)
        else:
            d = (w.float() - g.float()).abs().max().item() if w.shape == g.shape else None
            res["unequal"][k] = {"max_abs_diff": d, "shape": list(w.shape), "got_shape": list(g.shape)}
    res["forward_bit_equal"] = all(
        k in res["equal"] for k in want if k.startswith(("forward", "train.loss", "train.logits"))
    )
    res["all_bit_equal"] = not res["unequal"] and not res["missing"]
    res["equal"] = len(res["equal"])
    return res


# --- the orchestration --------------------------------------------------------------------------------------------
def run_phase(phase: str, workload: str, work: Path, smoke: bool, timeout: int) -> dict:
    sys.path[:0] = [str(HERE)]
    from phase_runner import run_child

    caches = work / "caches" / workload / CACHES[phase]
    if phase in FRESH:
        shutil.rmtree(caches, ignore_errors=True)
    (caches / "inductor").mkdir(parents=True, exist_ok=True)
    (caches / "triton").mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.update(
        {
            "TORCHINDUCTOR_CACHE_DIR": str(caches / "inductor"),
            "TRITON_CACHE_DIR": str(caches / "triton"),
            "TORCHINDUCTOR_COMPILE_THREADS": "1",
            "PYTHONPATH": os.pathsep.join([str(ROOT), str(HERE), os.environ.get("PYTHONPATH", "")]),
        }
    )
    if phase in SERVING:
        env["TRITON_PTXAS_PATH"] = "/nonexistent/ptxas"
    if phase == "serve-cache":
        why = sign_for_run(work, workload)
        if why is not None:
            return {"ok": False, "skip": why}
    args = ["--child", phase, "--workload", workload, "--t-start", repr(time.time())] + (["--smoke"] if smoke else [])
    result = run_child(
        Path(__file__).resolve(),
        args,
        work,
        f"{workload}-{phase}",
        f"{workload}-{phase}.log",
        env,
        timeout,
        f"phase {phase} of {workload}",
        time_key="process_s",
    )
    if phase in ("serve", "serve-cache", "capture", "cold", "warm", "megacache"):
        files = [p for p in (caches / "triton").rglob("*") if p.is_file()]
        # IR files only a compile writes; a cubin may be the archive's, written for Inductor's static launcher
        result["triton_cache_ir_files"] = sum(1 for p in files if p.suffix in (".ptx", ".ttir", ".ttgir", ".llir"))
        result["triton_cache_cubins"] = sum(1 for p in files if p.suffix == ".cubin")
    return result


def sign_for_run(work: Path, workload: str) -> str | None:
    """WORKLOAD-signed.karc (the captured archive signed with a key made now) and WORKLOAD-policy.toml trusting that
    key, for ``serve-cache``; None, or why not."""
    arc = work / f"{workload}.karc"
    if not arc.exists():
        return "the capture phase wrote no archive"
    try:
        from karchive.trust.keys import SigningKey
        from karchive.trust.sign import sign_archive
    except Exception as exc:  # cryptography is the trust extra
        return f"signing needs karchive[trust] here: {type(exc).__name__}: {exc}"
    key = SigningKey.generate()
    signed = work / f"{workload}-signed.karc"
    shutil.copyfile(arc, signed)
    sign_archive(signed, key, replace=True)
    (work / f"{workload}-policy.toml").write_text(
        f'version = 1\n\n[[keys]]\nname = "bench"\npublic_key = "{key.public.inline()}"\n\n'
        '[[rules]]\nnames = ["*"]\nkeys = ["bench"]\nthreshold = 1\n'
    )
    return None


def verdict(result: dict) -> dict:
    """What the serve phase must show (issue 31): 0 compiles, 0 benchmarks, no miss, outputs bit-equal."""
    counts = result.get("counts") or {}
    ind = result.get("inductor_serve") or {}
    cmp = result.get("compare") or {}
    checks = {
        "ran": bool(result.get("ok")),
        "zero_triton_compiles": counts.get("triton_compile_calls") == 0,
        "zero_benchmarks": counts.get("gpu_benchmarks") == 0 and ind.get("benchmarks") == 0,
        "no_inductor_miss": not ind.get("misses"),
        "no_compiler_output_in_triton_cache": result.get("triton_cache_ir_files") == 0,
        "forward_bit_equal": bool(cmp.get("forward_bit_equal")),
        "all_bit_equal": bool(cmp.get("all_bit_equal")),
    }
    if result.get("phase") == "serve-cache":  # and torch's cache artifacts loaded: Inductor's codegen skipped
        loads = ind.get("cache_artifacts") or []
        checks["cache_artifacts_loaded"] = bool(loads) and all(e.get("loaded") for e in loads)
        checks["fx_graph_cache_hits"] = (result.get("torch_caches") or {}).get("fxgraph_cache_hit", 0) > 0
        checks["no_triton_bundle_restored"] = ind.get("triton_bundles_not_restored") == 0
    return {"checks": checks, "passed": all(v for k, v in checks.items() if k != "all_bit_equal")}


def decisions_verdict(result: dict) -> dict:
    """Inductor's side alone: every compile a Triton cache hit (the exported archive), no benchmark, bit-equal."""
    counts = result.get("counts") or {}
    ind = result.get("inductor_serve") or {}
    cmp = result.get("compare") or {}
    checks = {
        "ran": bool(result.get("ok")),
        "zero_fresh_compiles": counts.get("triton_fresh_compiles") == 0,
        "zero_benchmarks": counts.get("gpu_benchmarks") == 0 and ind.get("benchmarks") == 0,
        "no_inductor_miss": not ind.get("misses"),
        "forward_bit_equal": bool(cmp.get("forward_bit_equal")),
        "all_bit_equal": bool(cmp.get("all_bit_equal")),
    }
    return {"checks": checks, "passed": all(v for k, v in checks.items() if k != "all_bit_equal")}


def keep_missed_sources(out: Path, workload: str, phase: str, error: str) -> list[str]:
    """The generated modules (capture's and this phase's) that define the Inductor kernel a failed serve phase names,
    copied to ``OUT/missed-<workload>-<phase>-<n>.py``: the source difference that made it a miss is in them."""
    found = re.search(r"inductor\.k[0-9a-f]+:([A-Za-z_][A-Za-z0-9_]*)", error)
    if found is None:
        return []
    kept = []
    # this phase's first: under max-autotune the capture's cache holds dozens of benchmark modules of that name
    for where, cap in ((CACHES[phase], 8), ("capture", 40)):
        n = 0
        for path in sorted((out / "caches" / workload / where).rglob("*.py")):
            try:
                text = path.read_text()
            except (OSError, UnicodeDecodeError):
                continue
            if n < cap and re.search(rf"^def {found.group(1)}\(", text, re.MULTILINE) and "triton_heuristics" in text:
                dest = out / f"missed-{workload}-{where}-{len(kept)}.py"
                dest.write_text(text)
                kept.append(f"{dest.name} <- {path.relative_to(out)}")
                n += 1
    return kept


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="output directory (default $OUT/inductor-bench)")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--phases", help="comma-separated subset of each workload's plan")
    ap.add_argument("--budget", type=float, default=360.0, help="seconds: no phase starts after this")
    ap.add_argument("--timeout", type=int, default=240, help="seconds per phase")
    ap.add_argument("--smoke", action="store_true", help="CPU plumbing check (tiny model, aot_eager)")
    ap.add_argument("--child")
    ap.add_argument("--workload", default="default")
    ap.add_argument("--t-start", type=float)
    ap.add_argument("--work")
    ap.add_argument("--result")
    args = ap.parse_args()
    if args.child:
        try:
            result = {
                "ok": True,
                **child(args.child, args.workload, Path(args.work), args.smoke, args.t_start or time.time()),
            }
        except BaseException as exc:
            traceback.print_exc()
            result = {
                "ok": False,
                "error": f"{type(exc).__name__}: {exc}"[-4000:],
                "traceback": traceback.format_exc()[-6000:],
            }
        Path(args.result).write_text(json.dumps(result, indent=1, default=str))
        return 0

    out = Path(args.out or (Path(os.environ.get("OUT", ".")) / "inductor-bench"))
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    only = set(args.phases.split(",")) if args.phases else None
    summary: dict[str, Any] = {"workloads": {}, "budget_s": args.budget, "skipped": []}
    for workload in [w for w in args.workloads.split(",") if w]:
        if workload not in WORKLOADS:
            raise SystemExit(f"unknown workload {workload!r} (known: {', '.join(WORKLOADS)})")
        for phase in PLANS[workload]:
            if only is not None and phase not in only:
                continue
            if time.monotonic() - t0 > args.budget:
                summary["skipped"].append(f"{workload}/{phase}: budget")
                continue
            print(f"[{time.monotonic() - t0:6.1f}s] {workload}: {phase} ...", flush=True)
            result = run_phase(phase, workload, out, args.smoke, args.timeout)
            if phase in SERVING and "skip" not in result:
                result["verdict"] = verdict(result)
                if not result.get("ok"):
                    result["missed_sources"] = keep_missed_sources(out, workload, phase, str(result.get("error")))
            if phase == "decisions":
                result["verdict"] = decisions_verdict(result)
            summary["workloads"].setdefault(workload, {})[phase] = result
            line = {
                k: result.get(k) for k in ("ok", "first_forward_since_start_s", "train_step_since_start_s", "process_s")
            }
            print(
                f"    {line} counts={result.get('counts')}"
                + (f" error={result.get('error')}" if not result.get("ok") else ""),
                flush=True,
            )
            summary["elapsed_s"] = round(time.monotonic() - t0, 1)
            (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    serves = {
        f"{w}/{p}": r[p]["verdict"]
        for w, r in summary["workloads"].items()
        for p in ("serve", "serve-cache", "decisions")
        if "verdict" in r.get(p, {})
    }
    summary["serve_verdicts"] = serves
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    print(json.dumps({"serve_verdicts": serves, "skipped": summary["skipped"]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
