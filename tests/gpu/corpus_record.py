"""Launch records for the kernel corpus (a plain module: pytest does not collect it).

karchive's capture archives the *kernels* a workload compiles; to relaunch a third-party library's kernels
through karchive with the library's own arguments we also need every *launch*: which kernel object the
library called (autotuner, heuristics, plain JIT function, or a compiled kernel it launched itself), with
which arguments, on which grid, and what memory looked like right before and right after. :class:`Recorder`
keeps that, for the corpus tests only (it is test instrumentation, not part of karchive).

Why memory is kept per *storage*, not per tensor: libraries pass views of one buffer (q, k, v slices, a
tensor and its transpose, in-place outputs). Saving each distinct storage once as bytes, and every tensor as
(storage, offset, size, stride, dtype), rebuilds exactly the aliasing the kernel saw; the comparison after a
relaunch is then byte for byte over whole storages, so writes outside a tensor's nominal extent are seen too.

Why the state is taken at the *real launch* (innermost ``JITFunction.run``, not while an autotuner
benchmarks): Triton's autotuner zeroes ``reset_to_zero`` arguments and restores ``restore_value`` ones after
tuning; the bytes the chosen binary read are what a relaunch must be given.
"""

from __future__ import annotations

import threading
from typing import Any

_tls = threading.local()


def _benchmarking() -> bool:
    """True while an autotuner benchmarks configs on this thread (those launches are not the library's)."""
    return bool(getattr(_tls, "benchmarking", 0))


def _stack() -> list:
    st = getattr(_tls, "stack", None)
    if st is None:
        st = _tls.stack = []
    return st


def _is_tensor(x: Any) -> bool:
    import torch

    return isinstance(x, torch.Tensor)


def _is_desc(x: Any) -> bool:
    """Triton's host ``TensorDescriptor`` (triton.tools.tensor_descriptor): a base tensor, shape, strides, block."""
    return type(x).__name__ == "TensorDescriptor" and all(
        hasattr(x, a) for a in ("base", "shape", "strides", "block_shape")
    )


def _tensors_in(values: Any) -> list:
    """The tensors a launch touches: tensor arguments and the base tensors of descriptor arguments."""
    return [a for a in values if _is_tensor(a)] + [a.base for a in values if _is_desc(a) and _is_tensor(a.base)]


class Recorder:
    """``with Recorder() as rec:`` around a workload (outside ``karchive.capture``, so each restores its own
    wrappers); ``rec.launches`` then lists one dict per kernel launch (see :meth:`_finish`)."""

    def __init__(self, max_launches: int = 2000) -> None:
        self.launches: list[dict] = []
        self.unreplayable: list[str] = []
        self.max_launches = max_launches
        self._restore: list[Any] = []
        self._lock = threading.Lock()

    # -- installation --------------------------------------------------------------------------------
    def __enter__(self) -> Recorder:
        from triton.compiler.compiler import CompiledKernel
        from triton.runtime.autotuner import Autotuner, Heuristics
        from triton.runtime.jit import JITFunction

        rec = self

        def outer_wrap(cls: Any, kind: str) -> None:
            original = cls.run

            def run(self: Any, *args: Any, **kwargs: Any) -> Any:
                st = _stack()
                if st or kwargs.get("warmup") or _benchmarking():
                    st.append(None)  # nested (the autotuner's inner call) or not a launch
                    try:
                        return original(self, *args, **kwargs)
                    finally:
                        st.pop()
                frame = {"kind": kind, "obj": self, "args": args, "kwargs": kwargs, "launch": None}
                st.append(frame)
                try:
                    ret = original(self, *args, **kwargs)
                finally:
                    st.pop()
                rec._finish(frame)
                return ret

            cls.run = run
            rec._restore.append(lambda: setattr(cls, "run", original))

        outer_wrap(Autotuner, "autotune")
        outer_wrap(Heuristics, "heuristics")

        jit_original = JITFunction.run

        def jit_run(self: Any, *args: Any, **kwargs: Any) -> Any:
            st = _stack()
            launching = not kwargs.get("warmup") and not _benchmarking()
            frame = None
            if not st and launching:
                frame = {"kind": "jit", "obj": self, "args": args, "kwargs": kwargs, "launch": None}
                st.append(frame)
            else:
                st.append(None)
            try:
                if launching:
                    return rec._launch(self, args, kwargs, lambda: jit_original(self, *args, **kwargs))
                return jit_original(self, *args, **kwargs)
            finally:
                st.pop()
                if frame is not None:
                    rec._finish(frame)

        JITFunction.run = jit_run
        self._restore.append(lambda: setattr(JITFunction, "run", jit_original))

        bench_original = Autotuner._bench

        def bench(self: Any, *args: Any, **kwargs: Any) -> Any:
            _tls.benchmarking = getattr(_tls, "benchmarking", 0) + 1
            try:
                return bench_original(self, *args, **kwargs)
            finally:
                _tls.benchmarking -= 1

        Autotuner._bench = bench
        self._restore.append(lambda: setattr(Autotuner, "_bench", bench_original))

        getitem_original = CompiledKernel.__getitem__

        def getitem(self: Any, grid: Any) -> Any:
            runner = getitem_original(self, grid)

            def record_runner(*args: Any, stream: Any = None) -> Any:
                if _stack() or _benchmarking():
                    return runner(*args, stream=stream)
                frame = {"kind": "compiled", "obj": self, "args": args, "kwargs": {}, "launch": None}
                try:
                    pre = _snapshot(_tensors_in(args))
                except Exception as exc:  # never break the library: noted, launched as usual
                    rec._failed(str(getattr(self, "name", "?")), f"snapshot: {type(exc).__name__}: {exc}")
                    return runner(*args, stream=stream)
                rec._launch_compiled(self, frame, grid, pre, lambda: runner(*args, stream=stream))
                rec._finish(frame)
                return None

            return record_runner

        CompiledKernel.__getitem__ = getitem
        self._restore.append(lambda: setattr(CompiledKernel, "__getitem__", getitem_original))
        return self

    def __exit__(self, *exc: Any) -> None:
        for undo in reversed(self._restore):
            undo()
        self._restore = []

    # -- one launch ------------------------------------------------------------------------------------
    def _outer_frame(self) -> dict | None:
        st = _stack()
        return st[0] if st and st[0] is not None else None

    def _launch(self, jit: Any, args: tuple, kwargs: dict, go: Any) -> Any:
        import torch

        frame = self._outer_frame()
        if frame is None or len(self.launches) >= self.max_launches:
            return go()
        try:
            tensors = _tensors_in((*args, *kwargs.values()))
            tensors += _tensors_in((*frame["args"], *frame["kwargs"].values()))
            pre = _snapshot(tensors)
        except Exception as exc:  # the recorder must never break the library: the launch is noted, not replayed
            self._failed(jit.__name__, f"snapshot before the launch: {type(exc).__name__}: {exc}")
            return go()
        ret = go()
        torch.cuda.synchronize()
        try:
            grid = _resolve_grid(jit, args, kwargs)
            frame["launch"] = {
                "name": jit.__name__,
                "grid": grid,
                "pre": pre,
                "post": _snapshot(tensors),
                "tensors": tensors,
                "triton_hash": getattr(ret, "hash", None),
                "grid_callable": callable(kwargs.get("grid")),
                "grid_per_config": _grids_per_config(frame, jit, args, kwargs),
            }
        except Exception as exc:  # noted as above
            self._failed(jit.__name__, f"grid or snapshot after the launch: {type(exc).__name__}: {exc}")
        return ret

    def _failed(self, kernel: str, why: str) -> None:
        with self._lock:
            self.launches.append(
                {
                    "kind": "unrecorded",
                    "kernel": kernel,
                    "grid": [],
                    "args": [],
                    "kwargs": {},
                    "pre": [],
                    "post": [],
                    "unreplayable": [why[:300]],
                }
            )

    def _launch_compiled(self, kernel: Any, frame: dict, grid: Any, pre: dict, go: Any) -> None:
        import torch

        tensors = _tensors_in(frame["args"])
        go()
        torch.cuda.synchronize()
        g = tuple(int(v) for v in grid) + (1,) * (3 - len(tuple(grid)))
        frame["launch"] = {
            "name": kernel.src.fn.__name__ if getattr(kernel, "src", None) is not None else kernel.name,
            "grid": g,
            "pre": pre,
            "post": _snapshot(tensors),
            "tensors": tensors,
            "triton_hash": getattr(kernel, "hash", None),
        }

    def _finish(self, frame: dict) -> None:
        launch = frame.get("launch")
        if launch is None:
            return
        try:
            record = self._record(frame, launch)
        except Exception as exc:  # never break the library: noted
            self._failed(launch["name"], f"encoding the launch: {type(exc).__name__}: {exc}")
            return
        with self._lock:
            self.launches.append(record)

    def _record(self, frame: dict, launch: dict) -> dict:
        storages: dict[int, int] = {}  # data_ptr of the storage -> index in pre/post
        for key in launch["pre"]["order"]:
            storages.setdefault(key, len(storages))

        def enc(v: Any) -> Any:
            import torch

            if _is_tensor(v):
                s = v.untyped_storage()
                return {
                    "tensor": {
                        "storage": storages[s.data_ptr()],
                        "offset": v.storage_offset(),
                        "size": list(v.shape),
                        "stride": list(v.stride()),
                        "dtype": str(v.dtype),
                    }
                }
            if _is_desc(v):
                # the block as the launch had it (an autotune pre_hook sets it per config before the launch)
                return {
                    "tensordesc": {
                        **enc(v.base),
                        "shape": [int(x) for x in v.shape],
                        "strides": [int(x) for x in v.strides],
                        "block_shape": [int(x) for x in v.block_shape],
                        "padding": str(getattr(v, "padding", "zero")),
                    }
                }
            if v is None or isinstance(v, (bool, int, float, str)):
                return {"value": v}
            if isinstance(v, torch.dtype):
                return {"torch_dtype": str(v)}
            if type(v).__module__.startswith("triton"):
                # tl.constexpr(x) is x; a tl.dtype constexpr is archived as its str() ("fp32"): pass that
                if hasattr(v, "value"):
                    return enc(v.value)
                return {"value": str(v), "triton_object": type(v).__qualname__}
            return {"unreplayable": f"{type(v).__module__}.{type(v).__qualname__}: {v!r}"[:200]}

        kwargs = {k: v for k, v in frame["kwargs"].items() if k not in ("grid", "warmup")}
        th = launch.get("triton_hash")
        record = {
            "kind": frame["kind"],
            "kernel": launch["name"],
            "grid": list(launch["grid"]),
            "triton_hash": th if isinstance(th, str) else None,
            "args": [enc(a) for a in frame["args"]],
            "kwargs": {k: enc(v) for k, v in kwargs.items()},
            "pre": [launch["pre"]["bytes"][k] for k in storages],
            "post": [launch["post"]["bytes"][k] for k in storages],
        }
        if "grid_callable" in launch:
            record["grid_callable"] = bool(launch["grid_callable"])
        if launch.get("grid_per_config"):
            record["grid_per_config"] = launch["grid_per_config"]
        bad = [str(v) for v in [*record["args"], *record["kwargs"].values()] if "unreplayable" in v]
        if bad:
            record["unreplayable"] = bad
        return record


def _snapshot(tensors: list) -> dict:
    """Every distinct storage behind ``tensors``, copied to host bytes (uint8), keyed by its device address."""
    import torch

    out: dict[int, Any] = {}
    order: list[int] = []
    for t in tensors:
        s = t.untyped_storage()
        key = s.data_ptr()
        if key in out:
            continue
        order.append(key)
        out[key] = torch.empty(0, dtype=torch.uint8, device=t.device).set_(s).detach().cpu().clone()
    return {"order": order, "bytes": out}


def _resolve_grid(jit: Any, args: tuple, kwargs: dict) -> tuple[int, int, int]:
    """The grid Triton launched with: a callable grid gets the bound arguments, defaults and constexprs."""
    grid = kwargs["grid"]
    if callable(grid):
        import inspect

        bound = {p.name: p.default for p in jit.params if p.default is not inspect.Parameter.empty}
        bound.update(dict(zip(jit.arg_names, args)))
        bound.update(kwargs)
        grid = grid(bound)
    g = tuple(int(v) for v in grid)
    return g + (1,) * (3 - len(g))  # type: ignore[return-value]


def _grids_per_config(frame: dict, jit: Any, args: tuple, kwargs: dict) -> list[dict] | None:
    """The library's grid for *every* config of the autotuner around this launch (a callable grid only), as
    ``[{"kwargs": config constexprs, "grid": [x, y, z]}]``; None for other launches.

    Why: the recorded ``grid`` is the one evaluated for the config Triton chose. A relaunch through an archive
    built ahead of time tunes on the device and may run another config, whose tiles need another grid (the
    tutorial matmul's ``cdiv(M, BLOCK_SIZE_M) * cdiv(N, BLOCK_SIZE_N)``); with Triton's grid it would compute
    only part of the output (and its benchmark would favour the config that does the least of it)."""
    from triton.runtime.autotuner import Autotuner

    if not callable(kwargs.get("grid")):
        return None
    obj = frame.get("obj")
    while obj is not None and not isinstance(obj, Autotuner):
        obj = getattr(obj, "fn", None)  # heuristics above the autotuner wrap it
    if obj is None:
        return None
    out = []
    for cfg in obj.configs:
        values = {k: v for k, v in cfg.kwargs.items() if v is None or isinstance(v, (bool, int, float, str))}
        if len(values) != len(cfg.kwargs):
            return None  # a config value that cannot be matched against the relaunch's meta-parameters
        out.append({"kwargs": values, "grid": list(_resolve_grid(jit, args, {**kwargs, **cfg.all_kwargs()}))})
    return out


# -- the relaunch side (Triton unimportable) -------------------------------------------------------------
def rebuild(record: dict, device: str = "cuda") -> tuple[list, tuple, dict]:
    """(storages on the device, positional args, keyword args) of a recorded launch, from its pre-state."""
    import torch

    bufs = [b.to(device) for b in record["pre"]]

    def dec(v: dict) -> Any:
        if "tensor" in v:
            return _view(bufs[v["tensor"]["storage"]], v["tensor"])
        if "tensordesc" in v:
            # karchive's own descriptor over the same view; an autotuned launch gives no block (the library's call
            # site passes dummy blocks and its pre_hook sets them per config: the runtime takes the chosen
            # variant's block), any other launch the block the library gave
            import karchive

            d = v["tensordesc"]
            block = None if record["kind"] in ("autotune", "heuristics") else d["block_shape"]
            return karchive.TensorDescriptor(
                _view(bufs[d["tensor"]["storage"]], d["tensor"]),
                block,
                shape=d["shape"],
                strides=d["strides"],
                padding=d["padding"],
            )
        if "torch_dtype" in v:
            return getattr(torch, v["torch_dtype"].rpartition(".")[2])
        return v["value"]

    return bufs, tuple(dec(a) for a in record["args"]), {k: dec(v) for k, v in record["kwargs"].items()}


def replay_grid(record: dict, per_config: bool) -> tuple[Any, list]:
    """(the grid to relaunch ``record`` with, a list that collects the grids a callable one returned).

    ``per_config``: the relaunch may run another config than Triton chose (an ahead-of-time archive tuning on
    the device): the grid is a callable that answers each config's own grid from ``grid_per_config``, as the
    library's grid lambda would. Otherwise (or for a record without that table) the recorded grid."""
    table = record.get("grid_per_config")
    used: list = []
    if not per_config or not table:
        return tuple(record["grid"]), used

    def grid(meta: dict) -> tuple:
        for entry in table:
            if all(
                k in meta and meta[k] == v and isinstance(meta[k], bool) == isinstance(v, bool)
                for k, v in entry["kwargs"].items()
            ):
                used.append(list(entry["grid"]))
                return tuple(entry["grid"])
        raise LookupError(f"no recorded grid for a config with { ({k: meta.get(k) for k in table[0]['kwargs']}) }")

    return grid, used


def _view(buf: Any, t: dict) -> Any:
    """The recorded tensor ``t`` (dtype, offset, size, stride) over the storage bytes ``buf``."""
    import torch

    dtype = getattr(torch, t["dtype"].rpartition(".")[2])
    return torch.empty(0, dtype=dtype, device=buf.device).set_(
        buf.untyped_storage(), t["offset"], t["size"], t["stride"]
    )


def compare(bufs: list, record: dict, rtol: float = 1e-2) -> tuple[bool, float | None, float | None]:
    """(bit-equal over every storage, and where not: the max abs difference over the tensors' elements and the
    max of ``|got - want| - rtol * |want|``, which a tolerance ``atol`` bounds as ``allclose`` does)."""
    import torch

    same = all(torch.equal(b.cpu(), p) for b, p in zip(bufs, record["post"]))
    if same:
        return True, None, None
    worst, excess = 0.0, float("-inf")
    for v in [*record["args"], *record["kwargs"].values()]:
        v = v.get("tensordesc", v)
        if "tensor" not in v:
            continue
        t = v["tensor"]
        a, b = _view(bufs[t["storage"]].cpu(), t), _view(record["post"][t["storage"]], t)
        if a.numel() and (a.is_floating_point() or a.dtype in (torch.int32, torch.int64)):
            a64, b64 = a.double(), b.double()
            d = (a64 - b64).abs()
            keep = ~(torch.isnan(a64) & torch.isnan(b64))  # NaN where Triton had NaN is no difference
            d, ref = d[keep], b64.abs()[keep]
            d = torch.nan_to_num(d, nan=float("inf"))
            if d.numel():
                worst = max(worst, float(d.max()))
                excess = max(excess, float((d - rtol * ref).max()))
    return False, worst, excess
