"""Kernels captured from ``@triton.autotune``: pick the recorded config per call, never compile.

The manifest's ``autotune`` records (spec/FORMAT.md §6.3) map an autotune key (the ``key=`` argument
values, then argument dtypes) to the config Triton chose and the variant compiled for it. A call
computes its key, takes the recorded entry (exact key, else the ``nearest-log2`` fallback), and
launches exactly that variant with that config's constexprs. With ``benchmark=True`` a key that was
never tuned is timed once across the prebuilt variants of every recorded config (no compiling) and
the fastest is remembered for the life of the process.
"""

from __future__ import annotations

import threading
import time
from functools import partial
from typing import Any, Mapping, Sequence

from ..errors import ArgumentError, NoMatchingVariantError
from ..format.autotune import choose_config, entry_config, key_for_call
from ..format.manifest import Variant
from .dispatch import Kernel


class AutotunedKernel:
    """Triton's call shape (``k[grid](...)``) over a kernel whose tuned meta-parameters come from records."""

    def __init__(self, base: Kernel, records: Sequence[Mapping[str, Any]], *, benchmark: bool = False,
                 benchmark_reps: int = 10) -> None:
        self.base = base
        self.name = base.name
        self.param_names = base.param_names
        self.variants = base.variants
        self.records = list(records)
        self.benchmark = benchmark
        self.benchmark_reps = benchmark_reps
        self.tuned_names = frozenset(k for r in self.records for c in r.get("configs", []) for k in c.get("kwargs", {}))
        self._by_key = {v.key: v for v in base.variants}
        self._sub: dict[str, Kernel] = {}
        self._choices: dict[tuple, tuple[Kernel, dict]] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        n = sum(len(r.get("entries", [])) for r in self.records)
        return f"<karchive.AutotunedKernel {self.name} ({len(self.variants)} variants, {n} tuned keys)>"

    # -- choosing -------------------------------------------------------------------------------------
    def _kernel_for(self, variant_key: str | None) -> Kernel:
        """A dispatcher restricted to one recorded variant (so warps/stages are exactly the tuned ones)."""
        if variant_key is None or variant_key not in self._by_key:
            return self.base
        sub = self._sub.get(variant_key)
        if sub is None:
            sub = self._sub[variant_key] = Kernel(self.base.archive, self.name, [self._by_key[variant_key]])
        return sub

    def _record_for(self, entry: Mapping[str, Any]) -> Mapping[str, Any]:
        return next(r for r in self.records if any(e is entry for e in r.get("entries", [])))

    def _candidates(self) -> list[tuple[Kernel, dict]]:
        seen, out = set(), []
        for r in self.records:
            for e in r.get("entries", []):
                cfg = entry_config(r, e)
                if cfg is None or e.get("variant") in seen:
                    continue
                seen.add(e.get("variant"))
                out.append((self._kernel_for(e.get("variant")), dict(cfg.get("kwargs", {}))))
        return out

    def choose(self, named: Mapping[str, Any]) -> tuple[Kernel, dict, Mapping[str, Any] | None]:
        """The (dispatcher, tuned constexprs, entry) a call with these named arguments uses."""
        key = key_for_call(self.records[0], named) if self.records else []
        entry = choose_config(self.records, key, kernel=self.name)
        if entry is None:
            recorded = sorted({str(e.get("key")) for r in self.records for e in r.get("entries", [])})
            raise NoMatchingVariantError(
                f"{self.name}: autotune key {key} matches no recorded config (recorded keys: "
                f"{', '.join(recorded) or 'none'}); pass the meta-parameters {sorted(self.tuned_names)} explicitly")
        cfg = entry_config(self._record_for(entry), entry) or {}
        return self._kernel_for(entry.get("variant")), dict(cfg.get("kwargs", {})), entry

    def _named(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        if len(args) > len(self.param_names):
            raise ArgumentError(f"{self.name}: {len(args)} positional arguments for {len(self.param_names)} parameters")
        return {**dict(zip(self.param_names, args)), **kwargs}

    def _resolve(self, grid: Any, args: Sequence[Any], kwargs: dict, stream: Any) -> tuple[Kernel, dict]:
        given = self.tuned_names & kwargs.keys()
        if given:
            if given != self.tuned_names:
                raise ArgumentError(f"{self.name}: give all tuned meta-parameters {sorted(self.tuned_names)} "
                                    f"or none (got {sorted(given)})")
            return self.base, {}
        named = self._named(args, kwargs)
        key = tuple(key_for_call(self.records[0], named)) if self.records else ()
        hit = self._choices.get(key)
        if hit is not None:
            return hit
        kernel, cx, entry = self.choose(named)
        if self.benchmark and entry is not None and tuple(entry.get("key", ())) != key:
            kernel, cx = self._fastest(grid, args, kwargs, stream)
        with self._lock:
            self._choices[key] = (kernel, cx)
        return kernel, cx

    def _fastest(self, grid: Any, args: Sequence[Any], kwargs: dict, stream: Any) -> tuple[Kernel, dict]:
        """Time every recorded config's prebuilt variant on this call (outputs are overwritten, as Triton's
        autotuner does); configs that cannot run here are skipped."""
        backend = self.base.archive.backend()
        best: tuple[float, Kernel, dict] | None = None
        for kernel, cx in self._candidates():
            try:
                bound = kernel.bind(grid, *args, stream=stream, **{**kwargs, **cx})
            except NoMatchingVariantError:
                continue
            s = backend.stream(bound._stream_raw)
            bound()
            backend.synchronize(s)
            start = time.perf_counter()
            for _ in range(self.benchmark_reps):
                bound()
            backend.synchronize(s)
            took = time.perf_counter() - start
            if best is None or took < best[0]:
                best = (took, kernel, cx)
        if best is None:
            raise NoMatchingVariantError(f"{self.name}: no recorded config can run on this device for this call")
        return best[1], best[2]

    # -- Triton's call shape and the runtime's API ---------------------------------------------------------
    def __getitem__(self, grid: Any):
        return partial(self.run, grid=grid)

    def run(self, *args: Any, grid: Any, stream: Any = None, **kwargs: Any) -> None:
        kernel, cx = self._resolve(grid, args, kwargs, stream)
        kernel._run(grid, *args, stream=stream, **kwargs, **cx)

    def select(self, *args: Any, device: Any = None, **kwargs: Any) -> Variant:
        kernel, cx = self._resolve(None, args, kwargs, None) if not self.benchmark else self.choose(
            self._named(args, kwargs))[:2]
        return kernel.select(*args, device=device, **kwargs, **cx)

    def bind(self, grid: Any, *args: Any, stream: Any = None, **kwargs: Any):
        kernel, cx = self._resolve(grid, args, kwargs, stream)
        return kernel.bind(grid, *args, stream=stream, **kwargs, **cx)

    def preload(self, device: int | None = None) -> int:
        return self.base.preload(device)
