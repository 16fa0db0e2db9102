"""TEST SUPPORT (run as a script, one fresh interpreter per phase): a max-autotune ``torch.compile`` of a small
Llama-style decoder lowered and scheduled by the real Inductor on the CPU (Triton codegen, ``cpu_backend="triton"``,
the GPU-less driver of tests/capture_fakes.py), once under ``karchive.capture`` and once served by
``install_inductor(strict)``, so that tests/test_inductor_max_autotune.py can compare what the two processes generate
(issue 31: the H200's serving process generated a template module the capture never had).

    python tests/inductor_autotune_run.py capture|serve WORKDIR

What a CPU cannot do is scripted, the same way in both phases where it runs at all: a template choice's precompile
does nothing (no Triton backend for the CPU), a selection's benchmark times every choice with a seeded random
number per benchmark call (a GPU's noise: a second benchmark of the same choices measures other times), a module
benchmark times each module file once (Inductor keeps it beside the module, ``.kernel_perf``), and
``AsyncCompile.triton`` records the kernel source instead of compiling it (graphs are generated, never run).
Writes ``WORKDIR/<phase>.json``: the wrapper source of every graph, the sources of the final kernels, and (capture)
the manifest's ``inductor`` section or (serve) the serving report. Both backward and forward are lowered
(``force_non_lazy_backward_lowering``) without running anything.
"""

from __future__ import annotations

import json
import os
import pathlib
import random
import sys
import types

ROOT = pathlib.Path(__file__).resolve().parents[1]


class _NotRun(Exception):
    """A generated graph was called: nothing runs on the CPU here."""


def main(phase: str, work: pathlib.Path) -> None:
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(work / f"inductor-{phase}")  # empty caches per phase
    os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = "1"
    sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "tools")]
    import torch
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config
    from torch._inductor.async_compile import AsyncCompile
    from torch._inductor.codegen.triton import TritonKernel, TritonScheduling
    from torch._inductor.graph import GraphLowering
    from torch._inductor.select_algorithm import AlgorithmSelectorCache, TritonTemplateCaller

    inductor_config.cpu_backend = "triton"
    functorch_config.force_non_lazy_backward_lowering = True
    rng = random.Random(int(os.environ.get("KARCHIVE_TEST_SEED", "0")))
    perf: dict[str, float] = {}
    counts = {"selection_benchmarks": 0, "module_benchmarks": 0}

    def bench(self, choices, *args, **kwargs):
        counts["selection_benchmarks"] += 1
        return {c: rng.uniform(1.0, 2.0) for c in choices}

    def bench_module(self, mod, *args, **kwargs):
        counts["module_benchmarks"] += 1
        return perf.setdefault(mod.__file__, rng.uniform(0.5, 3.0)), mod.__file__

    # the CPU build's benchmark-module imports are indented wrongly (torch 2.13): written as a GPU's would be
    TritonKernel.imports_for_benchmark_kernel = lambda self: (
        "from torch._dynamo.testing import rand_strided\ndef get_raw_stream(_):\n    return 0\nimport torch\n"
    )
    TritonTemplateCaller.precompile = lambda self: None
    AlgorithmSelectorCache.benchmark = bench
    TritonScheduling.benchmark_codegened_module = bench_module  # before karchive wraps it (capture or serve)

    wrappers: list[str] = []
    kernels: dict[str, list[str]] = {}
    orig_lines = GraphLowering._compile_to_module_lines

    def lines(self, wrapper_code):
        wrappers.append(wrapper_code.value)
        return orig_lines(self, wrapper_code)

    class Kernel:
        def run(self, *args, **kwargs):
            raise _NotRun

    def triton(self, kernel_name, source_code, *args, **kwargs):
        kernels.setdefault(kernel_name, []).append(source_code)
        return Kernel()

    GraphLowering._compile_to_module_lines = lines
    AsyncCompile.triton = triton

    from bench_compiled_model import _Decoder
    from capture_fakes import fake_gpu

    import karchive

    torch.manual_seed(0)
    model = _Decoder(hidden=128, inter=352, layers=1, heads=4, kv=2, vocab=512).to(torch.bfloat16)
    ids = torch.randint(0, 512, (2, 64))
    compiled = torch.compile(model, mode="max-autotune-no-cudagraphs")

    def steps() -> None:
        model.eval()
        with torch.no_grad():
            _call(lambda: compiled(ids))
        model.train()
        _call(lambda: compiled(ids, labels=ids))

    out: dict = {}
    with fake_gpu(timings=[1.0]):
        if phase == "capture":
            with karchive.capture("autotuned", version="1") as cap:
                steps()
            out["section"] = cap.inductor.section(set(), empty=True)
        else:
            from karchive.serve.inductor_serve import install_inductor, uninstall_inductor

            section = json.loads((work / "capture.json").read_text())["section"]
            archive = types.SimpleNamespace(
                name="autotuned", version="1", manifest=types.SimpleNamespace(extra={"inductor": section})
            )
            serving = install_inductor(types.SimpleNamespace(archives=[archive], mode="strict"))
            try:
                steps()
            finally:
                out["report"] = serving.to_json() if serving is not None else None
                uninstall_inductor()
    out.update(wrappers=wrappers, kernels=kernels, counts=counts)
    (work / f"{phase}.json").write_text(json.dumps(out))


def _call(step) -> None:
    try:
        step()
    except Exception as exc:  # a generated graph raised _NotRun when called: it was generated
        if "_NotRun" not in repr(exc) and not isinstance(exc, _NotRun):
            raise


if __name__ == "__main__":
    main(sys.argv[1], pathlib.Path(sys.argv[2]))
