"""karchive's import shim: ``@triton.autotune`` / ``@triton.heuristics`` / ``Config`` (records only; the
archive's tuning records choose configs, nothing is benchmarked)."""

from __future__ import annotations

from typing import Any

from .jit import KernelInterface


class Config:
    def __init__(
        self,
        kwargs: dict[str, Any],
        num_warps: int = 4,
        num_stages: int = 3,
        num_ctas: int = 1,
        maxnreg: int | None = None,
        pre_hook: Any = None,
        ir_override: Any = None,
    ) -> None:
        self.kwargs = kwargs
        self.num_warps, self.num_stages, self.num_ctas, self.maxnreg = num_warps, num_stages, num_ctas, maxnreg
        self.pre_hook, self.ir_override = pre_hook, ir_override

    def all_kwargs(self) -> dict[str, Any]:
        opts = (
            ("num_warps", self.num_warps),
            ("num_ctas", self.num_ctas),
            ("num_stages", self.num_stages),
            ("maxnreg", self.maxnreg),
            ("ir_override", self.ir_override),
        )
        return {**self.kwargs, **{k: v for k, v in opts if v is not None}}

    def __repr__(self) -> str:
        return f"Config({self.kwargs}, num_warps={self.num_warps}, num_stages={self.num_stages})"


class Autotuner(KernelInterface):
    run = KernelInterface.run  # its own, as Triton's (karchive.serve patches each class's run)

    def __init__(
        self,
        fn: Any,
        arg_names: list[str],
        configs: list[Config],
        key: list[str],
        reset_to_zero: Any = None,
        restore_value: Any = None,
        pre_hook: Any = None,
        post_hook: Any = None,
        prune_configs_by: Any = None,
        warmup: Any = None,
        rep: Any = None,
        use_cuda_graph: bool = False,
        do_bench: Any = None,
        cache_results: bool = False,
    ) -> None:
        self.fn = fn
        self.arg_names = arg_names
        self.configs = configs or [Config({}, num_warps=4, num_stages=3, num_ctas=1)]
        self.keys = key
        self.cache: dict[Any, Config] = {}
        self.reset_to_zero = list(reset_to_zero or [])
        self.restore_value = list(restore_value or [])
        self.prune_configs_by = prune_configs_by
        # As Triton's Autotuner sets them: libraries' subclasses read them (fla's CachedAutotuner installs its own
        # reset/restore hooks when no user hook was given). Nothing here benchmarks, so nothing calls them.
        self.pre_hook, self.post_hook = pre_hook, post_hook
        self.user_defined_pre_hook = pre_hook is not None
        self.user_defined_post_hook = post_hook is not None
        prune = prune_configs_by or {}
        self.early_config_prune = prune.get("early_config_prune")
        self.perf_model = prune.get("perf_model")
        self.configs_top_k = prune.get("top_k", 1.0)
        self.rep, self.use_cuda_graph, self.cache_results = rep, use_cuda_graph, cache_results
        self.base_fn = fn
        while hasattr(self.base_fn, "fn") and not callable(getattr(self.base_fn, "__code__", None)):
            self.base_fn = self.base_fn.fn


class Heuristics(KernelInterface):
    run = KernelInterface.run

    def __init__(self, fn: Any, arg_names: list[str], values: dict[str, Any]) -> None:
        self.fn = fn
        self.values = values
        self.arg_names = arg_names


def autotune(
    configs: list[Config],
    key: list[str],
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
    def decorator(fn: Any) -> Autotuner:
        return Autotuner(
            fn,
            fn.arg_names,
            configs,
            key,
            reset_to_zero,
            restore_value,
            pre_hook=pre_hook,
            post_hook=post_hook,
            prune_configs_by=prune_configs_by,
            warmup=warmup,
            rep=rep,
            use_cuda_graph=use_cuda_graph,
            do_bench=do_bench,
            cache_results=cache_results,
        )

    return decorator


def heuristics(values: dict[str, Any]) -> Any:
    def decorator(fn: Any) -> Heuristics:
        return Heuristics(fn, fn.arg_names, values)

    return decorator
