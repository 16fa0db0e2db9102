"""Which of Triton's runtime features a library uses at import (docs/triton-semantics.md's rows), as JSON.

    python tests/gpu/corpus2_features.py MODULE [MODULE ...] [--fake-h100]

Wraps ``triton.jit``, ``triton.autotune``, ``triton.heuristics`` and ``Autotuner.__init__`` before importing the
modules and counts what their decorators were asked for (autotuners with ``prune_configs_by``, ``reset_to_zero``,
``restore_value``, hooks, ``use_cuda_graph``, ``cache_results``, ``do_bench``; ``Autotuner`` subclasses; JIT
functions with ``do_not_specialize``, ``launch_metadata``, parameters with defaults). ``--fake-h100`` (CPU machine
only: TEST DOUBLE for the missing GPU) answers torch's CUDA device queries as an H100 would, for libraries that
read the device at import (FlagGems, GemLite); nothing launches.
"""

from __future__ import annotations

import argparse
import collections
import importlib
import inspect
import json
import sys
import types
from pathlib import Path
from typing import Any


def fake_h100() -> None:
    """torch.cuda's device queries answered as on an H100 (the CPU machine has no GPU; nothing is launched)."""
    import torch

    props = types.SimpleNamespace(
        name="NVIDIA H100 80GB HBM3",
        major=9,
        minor=0,
        multi_processor_count=132,
        total_memory=80 * 2**30,
        warp_size=32,
        max_threads_per_multi_processor=2048,
        L2_cache_size=50 * 2**20,
        regs_per_multiprocessor=65536,
    )
    cuda = torch.cuda
    cuda.is_available = lambda: True  # type: ignore[assignment]
    cuda.device_count = lambda: 1  # type: ignore[assignment]
    cuda.current_device = lambda: 0  # type: ignore[assignment]
    cuda.get_device_capability = lambda device=None: (9, 0)  # type: ignore[assignment]
    cuda.get_device_properties = lambda device=None: props  # type: ignore[assignment]
    cuda.get_device_name = lambda device=None: props.name  # type: ignore[assignment]
    cuda.is_bf16_supported = lambda *a, **k: True  # type: ignore[assignment]
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from capture_fakes import FakeDriver
    from triton.runtime.driver import driver

    driver.set_active(FakeDriver())  # Triton's driver: target cuda:90, no GPU (gemlite asks it at import)


def instrument() -> collections.Counter:
    import triton
    from triton.runtime import autotuner

    seen: collections.Counter = collections.Counter()
    jit, autotune, heuristics = triton.jit, triton.autotune, triton.heuristics
    init = autotuner.Autotuner.__init__

    def count_jit(fn: Any = None, **kw: Any) -> Any:
        seen["jit"] += 1
        for name in (
            "do_not_specialize",
            "do_not_specialize_on_alignment",
            "launch_metadata",
            "repr",
            "debug",
            "noinline",
        ):
            if kw.get(name):
                seen[f"jit.{name}"] += 1
        target = fn
        if target is not None and any(
            p.default is not inspect.Parameter.empty for p in inspect.signature(target).parameters.values()
        ):
            seen["jit.params_with_defaults"] += 1
        return jit(fn, **kw) if fn is not None else jit(**kw)

    def count_autotune(
        configs: Any,
        key: Any,
        prune_configs_by: Any = None,
        reset_to_zero: Any = None,
        restore_value: Any = None,
        pre_hook: Any = None,
        post_hook: Any = None,
        warmup: Any = None,
        rep: Any = None,
        use_cuda_graph: bool = False,
        do_bench: Any = None,
        cache_results: bool = False,
    ) -> Any:
        seen["autotune"] += 1
        for name, value in (
            ("prune_configs_by", prune_configs_by),
            ("reset_to_zero", reset_to_zero),
            ("restore_value", restore_value),
            ("pre_hook", pre_hook),
            ("post_hook", post_hook),
            ("warmup_rep", warmup or rep),
            ("use_cuda_graph", use_cuda_graph),
            ("do_bench", do_bench),
            ("cache_results", cache_results),
        ):
            if value:
                seen[f"autotune.{name}"] += 1
        for k in prune_configs_by or {}:
            seen[f"autotune.prune_configs_by.{k}"] += 1
        if any(getattr(c, "pre_hook", None) for c in configs or []):
            seen["autotune.config_pre_hook"] += 1
        if len(configs or []) <= 1:
            seen["autotune.one_config"] += 1
        return autotune(
            configs,
            key,
            prune_configs_by=prune_configs_by,
            reset_to_zero=reset_to_zero,
            restore_value=restore_value,
            pre_hook=pre_hook,
            post_hook=post_hook,
            warmup=warmup,
            rep=rep,
            use_cuda_graph=use_cuda_graph,
            do_bench=do_bench,
            cache_results=cache_results,
        )

    def count_heuristics(values: Any) -> Any:
        seen["heuristics"] += 1
        if any(k in ("num_warps", "num_stages") for k in values):
            seen["heuristics.launch_options"] += 1
        return heuristics(values)

    def count_init(self: Any, *a: Any, **k: Any) -> None:
        if type(self) is not autotuner.Autotuner:
            seen[f"Autotuner subclass {type(self).__module__}.{type(self).__qualname__.split('.')[0]}"] += 1
            mro = type(self).__mro__
            own = mro[: mro.index(autotuner.Autotuner)]  # the library's classes above Triton's
            for meth in ("run", "prune_configs", "_bench", "do_bench", "check_disk_cache", "warmup"):
                if any(meth in c.__dict__ for c in own):
                    seen[f"Autotuner subclass overrides {meth}"] += 1
        init(self, *a, **k)

    triton.jit = count_jit  # type: ignore[assignment]
    triton.autotune = count_autotune  # type: ignore[assignment]
    triton.heuristics = count_heuristics  # type: ignore[assignment]
    autotuner.Autotuner.__init__ = count_init  # type: ignore[method-assign]
    return seen


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("modules", nargs="+")
    ap.add_argument("--fake-h100", action="store_true")
    args = ap.parse_args()
    if args.fake_h100:
        fake_h100()
    seen = instrument()
    errors = {}
    for name in args.modules:
        try:
            importlib.import_module(name)
        except Exception as exc:
            errors[name] = f"{type(exc).__name__}: {exc}"[:500]
    print(
        json.dumps({"modules": args.modules, "features": dict(sorted(seen.items())), "import_errors": errors}, indent=1)
    )
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
