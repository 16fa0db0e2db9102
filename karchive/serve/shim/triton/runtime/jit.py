"""karchive's import shim: ``@triton.jit`` records the function and its parameters; launching needs an archive."""

from __future__ import annotations

import inspect
from typing import Any


class KernelParam:
    """What Triton's KernelParam tells about a parameter: position, name, constexpr, specialisation opt-outs."""

    def __init__(
        self, num: int, param: inspect.Parameter, do_not_specialize: bool, do_not_specialize_on_alignment: bool
    ) -> None:
        self.num = num
        self._param = param
        self.name = param.name
        self.do_not_specialize = do_not_specialize
        self.do_not_specialize_on_alignment = do_not_specialize_on_alignment
        ann = param.annotation
        text = ann if isinstance(ann, str) else getattr(ann, "__name__", repr(ann))
        self.is_constexpr = "constexpr" in str(text)
        self.default = param.default


class KernelInterface:
    def run(self, *args: Any, **kwargs: Any) -> Any:
        from karchive.errors import KarchiveError

        raise KarchiveError(
            f"{getattr(self, '__name__', type(self).__name__)}: Triton is not installed (this is "
            "karchive's import shim); only launches karchive.serve(...) serves from archives run"
        )

    def warmup(self, *args: Any, grid: Any, **kwargs: Any) -> Any:
        return self.run(*args, grid=grid, warmup=True, **kwargs)

    def __getitem__(self, grid: Any) -> Any:
        return lambda *args, **kwargs: self.run(*args, grid=grid, warmup=False, **kwargs)


class JITFunction(KernelInterface):
    """A ``@triton.jit`` function as far as serving needs it (no source parsing, no compiler)."""

    _karchive_shim = True
    run = KernelInterface.run  # its own, as Triton's classes have (karchive.serve patches each class's run)

    def __init__(
        self,
        fn: Any,
        version: Any = None,
        do_not_specialize: Any = None,
        do_not_specialize_on_alignment: Any = None,
        debug: Any = None,
        noinline: Any = None,
        repr: Any = None,
        launch_metadata: Any = None,
    ) -> None:
        self.fn = fn
        self.module = fn.__module__
        self.signature = inspect.signature(fn)
        dns = list(do_not_specialize or [])
        dns_a = list(do_not_specialize_on_alignment or [])
        self.params = [
            KernelParam(i, p, i in dns or p.name in dns, i in dns_a or p.name in dns_a)
            for i, p in enumerate(self.signature.parameters.values())
        ]
        self.arg_names = [p.name for p in self.params]
        self.constexprs = [p.num for p in self.params if p.is_constexpr]
        self.do_not_specialize = dns
        self.do_not_specialize_on_alignment = dns_a
        self.debug, self.noinline = debug, noinline
        self.pre_run_hooks: list[Any] = []
        self.__doc__ = fn.__doc__
        self.__name__ = fn.__name__
        self.__qualname__ = fn.__qualname__
        self.__globals__ = fn.__globals__
        self.__module__ = fn.__module__

    def add_pre_run_hook(self, hook: Any) -> None:
        self.pre_run_hooks.append(hook)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("Cannot call @triton.jit'd outside of the scope of a kernel")

    def __repr__(self) -> str:
        return f"JITFunction({self.module}:{self.fn.__qualname__})"


def jit(
    fn: Any = None,
    *,
    version: Any = None,
    repr: Any = None,
    launch_metadata: Any = None,
    do_not_specialize: Any = None,
    do_not_specialize_on_alignment: Any = None,
    debug: Any = None,
    noinline: Any = None,
) -> Any:
    def decorator(f: Any) -> JITFunction:
        return JITFunction(
            f,
            version=version,
            do_not_specialize=do_not_specialize,
            do_not_specialize_on_alignment=do_not_specialize_on_alignment,
            debug=debug,
            noinline=noinline,
            repr=repr,
            launch_metadata=launch_metadata,
        )

    return decorator(fn) if fn is not None else decorator
