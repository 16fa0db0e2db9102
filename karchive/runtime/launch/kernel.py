"""The kernel: ``kernel[grid](*args, **constexprs)`` with Triton's call shape, over every variant of a kernel.

How a call travels (read in this order; docs/architecture.md walks it with the file names):

1. ``kernel[grid]`` is ``kernel._run`` with the grid bound (``_fastlaunch.subscript`` in C, else
   ``functools.partial``). ``_run`` is the kernel's *launch path*: the compiled
   ``_fastlaunch.Dispatcher`` (:mod:`._native`) or, where the extension is not built or
   ``KARCHIVE_LAUNCH_PATH=python``, a plain Python function (:mod:`._pypath`). Both do the same steps:
2. bind the arguments to the kernel's parameters and launch options, and build the selection key
   (:mod:`._plan` says what it holds: pointer types/dtypes/devices/alignment, int hints, constexprs);
3. look the key up; a new key goes to :meth:`Kernel._miss` -- full checks, variant selection
   (:mod:`..select`), the module load (once per variant and device, a :class:`._record.VariantRecord`)
   -- and is remembered;
4. resolve a callable grid and the default stream, pack the parameters (:mod:`._argpack`) and call the
   driver's launch (:class:`._record.LaunchEntry`, or the C ``Entry`` made from the same record).

Calls the fast steps cannot bind (unknown keywords, too many arguments, objects whose pointer cannot
be read) go to :meth:`Kernel._slow`, which runs every step in plain Python and raises the error.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from functools import cached_property, partial
from typing import Any, Protocol

from ...errors import ArgumentError, NoMatchingVariantError
from ...format.manifest import Variant
from .. import launch_path
from ..args import NotAPointer, framework_of, notice_tensors, pointer_info
from ..backend import Backend, LoadedFunction
from ..device import DeviceInfo
from ..select import MISSING, DeviceFit, device_fit, select_variant
from ._grid import evaluate as evaluate_grid
from ._lazy import REFUSALS, TargetSource
from ._plan import MIXED, PTR, STREAM, Done, KernelPlan, make_plan
from ._record import BoundLauncher, LaunchEntry, grid_dims


class Host(Protocol):
    """What a kernel needs of the archive it comes from (``runtime.archive.Archive`` is one)."""

    allow_ptx: bool

    @property
    def name(self) -> str: ...
    @property
    def version(self) -> str: ...
    def ptx_header(self, variant: Variant) -> Any: ...
    def backend(self) -> Backend: ...
    def load_function(self, variant: Variant, fit: DeviceFit, index: int) -> LoadedFunction: ...
    def scratch_pool(self) -> Any: ...


class MetaResolver(Protocol):
    """Meta-parameters of a call that the caller does not pass (``@triton.autotune``, ``@triton.heuristics``).

    Consulted before the selection key is built: it answers the kernel over the variants that fit the
    resolved values (a plain :class:`Kernel`: its own launch path, the compiled one included) and the
    constexprs to add to the call. ``runtime/autotuned.py`` has the two there are.
    """

    base: Kernel  # the plain kernel over every variant

    def resolve(
        self,
        grid: Any,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        stream: Any,
        *,
        may_benchmark: bool = True,
        device: Any = None,
    ) -> tuple[Kernel, dict[str, Any]]: ...

    def describe(self) -> str: ...

    def reads(self) -> Any:
        """What its answer for a call depends on (``autotuned.Reads``): the compiled launcher keys on that."""
        ...

    @property
    def settled(self) -> bool:
        """False while the same call may still get another answer later (the answer is then not remembered)."""
        ...


class CallTarget:
    """What a selection key leads to: the loaded variant, and where the default stream comes from."""

    __slots__ = ("entry", "stream_fn", "native", "extra", "remember")

    def __init__(self, entry: LaunchEntry, stream_fn: Callable[[int], int] | None) -> None:
        self.entry = entry
        self.stream_fn = stream_fn  # device -> current stream of the arguments' framework; None: stream 0
        self.native: Any = None  # the compiled path's ``_fastlaunch.Entry`` of ``entry`` (set by :mod:`._native`)
        #: ((parameter index, value), ...) a resolver adds to every call with this key (None: nothing)
        self.extra: tuple[tuple[int, Any], ...] | None = None
        self.remember = True  # False: launch this call, but ask again next time (a resolver still learning)


def _torch_default_stream() -> Callable[[int], int] | None:
    torch = sys.modules.get("torch")
    # torch.cuda.current_stream() costs ~5-7 us per call; the raw getter Inductor uses costs ~0.1 us.
    return getattr(getattr(torch, "_C", None), "_cuda_getCurrentRawStream", None)


def _cupy_default_stream() -> Callable[[int], int] | None:
    cupy = sys.modules.get("cupy")
    if cupy is None:
        return None
    get = cupy.cuda.get_current_stream
    return lambda _dev: get().ptr


def _getitem(kernel: Kernel, grid: Any) -> Callable[..., None]:
    """``kernel[grid]`` -> a launcher taking the kernel's arguments (Triton's call shape)."""
    return partial(kernel._run, grid)


class Kernel:
    """Every variant of one kernel in an archive; launch with ``kernel[grid](...)``, ``run`` or ``bind``.

    The one kernel type: a kernel captured from ``@triton.autotune`` / ``@triton.heuristics`` is a Kernel
    with a :class:`MetaResolver`, asked for the meta-parameters before anything else (``run``, ``select``,
    ``bind``, ``preload`` and ``kernel[grid]`` alike).
    """

    #: ``kernel[grid]`` -> a launcher taking the kernel's arguments (Triton's call shape). The compiled
    #: one where the extension is built (a C method-like object: no Python frame, no partial), else
    #: :func:`_getitem`; both call ``kernel._run(grid, *args, **kwargs)``.
    __getitem__ = launch_path.subscript(_getitem)

    _variants: tuple[Variant, ...] | None  # every variant (None: a lazy kernel's, not read yet)
    #: What a launch of a variant returns and sets first (:meth:`set_result`), by variant key; shared with the
    #: kernels a resolver makes over subsets of the variants (``_family``), so one call sets it for all of them.
    _results: dict[str, tuple[Any, tuple[Any, str, Any] | None]]
    _family: list[Kernel]
    #: The plan's names (``()`` until a lazy kernel is set up): what a callable grid is evaluated with,
    #: read on every such launch, so a plain attribute (``param_names`` is the property that sets up).
    _param_names: tuple[str, ...]

    def __init__(
        self, archive: Host, name: str, variants: Sequence[Variant], resolver: MetaResolver | None = None
    ) -> None:
        self._init_fields(archive, name, resolver)
        self._variants = vs = tuple(variants)
        self._setup(vs)
        if resolver is not None:
            self.join_family(resolver.base)

    def join_family(self, base: Kernel) -> None:
        """Share ``base``'s results (:meth:`set_result`): a resolver's kernels over subsets of its variants."""
        self._results = base._results
        self._family = base._family
        self._family.append(self)

    @classmethod
    def lazy(cls, archive: Host, name: str, source: TargetSource) -> Kernel:
        """A kernel that reads its variants per target from ``source`` when a device first needs them
        (a format-2.1 archive's plain kernels: :mod:`._lazy`); it selects and says what one made over
        every variant does."""
        k = cls.__new__(cls)
        k._init_fields(archive, name, None)
        k._source = source
        return k

    def _init_fields(self, archive: Host, name: str, resolver: MetaResolver | None) -> None:
        """What a kernel holds before its variants are known (a lazy kernel makes the rest later)."""
        self.archive = archive
        self.name = name
        #: Where a lazy kernel reads its variants (None: they were all given, ``variants``).
        self._source: TargetSource | None = None
        # Made by _setup (a lazy kernel's when first asked for: the properties below) and __init__.
        self._variants = None
        self._cands: tuple[Variant, ...] | None = None
        self._plan: KernelPlan | None = None
        self._param_names = ()
        #: Set on the per-config dispatchers of autotuned kernels: a tensor descriptor's block shape comes
        #: from the chosen variant (Triton's pre_hook would set it per config), not from the call site.
        self.descriptor_block_from_variant = False
        #: "extension" (the compiled launcher) or "python"; fixed when the kernel is made.
        self.launch_path = launch_path.choose()
        #: Where meta-parameters the caller leaves out come from (autotune, then heuristics); None: plain.
        self.resolver = resolver
        self._lock = threading.RLock()
        self._entries: dict[tuple[str, int], LaunchEntry] = {}
        self._results = {}
        self._family = [self]
        self._py_cache: dict[Any, CallTarget] = {}  # the Python path's key -> target (the compiled one has its own)

    def _setup(self, variants: tuple[Variant, ...]) -> None:
        """The plan over the variants selection chooses among (``_candidates``): every variant here; a lazy
        kernel's (:meth:`lazy`) over the variants this machine's GPUs can run, when first needed."""
        name = self.name
        if not variants:
            raise NoMatchingVariantError(f"the archive has no variant of kernel {name!r}", kernel=name, param=None)
        names = [p.name for p in variants[0].params]
        for v in variants[1:]:
            if [p.name for p in v.params] != names:
                raise NoMatchingVariantError(
                    f"variants of {name!r} disagree on the parameter list ({names} vs {[p.name for p in v.params]}); "
                    "karchive cannot dispatch between them",
                    kernel=name,
                    param=None,
                )
        self._cands = variants
        plan = self._plan = make_plan(name, variants)
        self._param_names = plan.names

    # Properties, not attributes, for what a lazy kernel makes later: no ``__getattr__`` hook, whose
    # presence slows every attribute read of a kernel (``kernel[grid]`` reads ``_run``).
    @property
    def variants(self) -> tuple[Variant, ...]:
        """Every variant of the kernel (a lazy kernel reads the targets it has not read when asked)."""
        vs = self._variants
        if vs is None:
            assert self._source is not None  # only a lazy kernel is made without its variants
            vs = self._variants = self._source.every(self).variants
        return vs

    @property
    def plan(self) -> KernelPlan:
        """How a call's selection key is read (:mod:`._plan`), over the variants selection chooses among."""
        plan = self._plan
        if plan is None:
            assert self._source is not None
            self._source.set_up(self)
            plan = self._plan
            assert plan is not None
        return plan

    @property
    def param_names(self) -> tuple[str, ...]:
        return self._param_names if self._plan is not None else self.plan.names

    @property
    def _candidates(self) -> tuple[Variant, ...]:
        """The variants selection chooses among: every variant, or a lazy kernel's for this machine's GPUs."""
        cands = self._cands
        if cands is None:
            self.plan  # noqa: B018 - sets them up
            cands = self._cands
            assert cands is not None
        return cands

    @cached_property
    def _run(self) -> Callable[..., Any]:
        """The launch path's callable ``(grid, *args, stream=None, **kwargs)``, made on first use."""
        if self.launch_path == launch_path.EXTENSION:
            from ._native import make_dispatcher

            return make_dispatcher(self)
        if self.resolver is not None:
            return self._resolving_run(self.resolver)
        from ._pypath import build

        return build(self)

    def _resolving_run(self, resolver: MetaResolver) -> Callable[..., Any]:
        """``_run`` of a kernel with a resolver on the Python path (and the compiled path's slow step): resolve
        the meta-parameters, then the chosen variants' own launch path with them added to the call."""
        from ._pypath import launch_function_name, with_stream, without_stream

        resolve, answer = resolver.resolve, self._answer

        def run(grid: Any, /, *args: Any, stream: Any = None, **kwargs: Any) -> Any:
            try:
                kernel, cx = resolve(grid, args, kwargs, stream)
                # (computed values replace the caller's)
                return kernel._run(grid, *args, stream=stream, **{**kwargs, **cx})
            except Exception as exc:  # noqa: BLE001 - _answer re-raises what the kernel does not answer
                return answer(exc, grid, args, with_stream(kwargs, stream)).result

        launch = run if self.takes_stream else without_stream(run, self._slow)
        launch.__qualname__ = launch.__name__ = launch_function_name(self.name)
        return launch

    # -- public API ------------------------------------------------------------------------------------
    def run(self, *args: Any, grid: Any, stream: Any = None, **kwargs: Any) -> Any:
        return self._run(grid, *args, stream=stream, **kwargs)

    def set_result(self, variant: Variant | str, result: Any, effect: tuple[Any, str, Any] | None = None) -> None:
        """What ``kernel[grid](...)`` returns when it launches ``variant`` (a Variant or its key; default None):
        a served call site gives the object Triton's launch returns. ``effect``: ``(obj, name, value)`` each such
        launch sets first (a served autotuned call site's ``best_config``). Both launch paths, every device, and
        the kernels a resolver makes over subsets of the variants; the launch does it without a Python step."""
        key = variant if isinstance(variant, str) else variant.key
        with self._lock:
            self._results[key] = (result, effect)
            for k in list(self._family):
                for (vkey, _index), ent in list(k._entries.items()):
                    if vkey == key:
                        ent.set_result(result, effect)

    def __repr__(self) -> str:
        """``<karchive.Kernel add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK): 6 variants for cuda:80,
        cuda:90, hip:gfx942, from examples 0.1.0>``: what to call, and what it can run on."""
        from ...core.text import printable

        if self._source is not None:  # what the index says (reading no variant of another target)
            n, targets = self._source.count, ", ".join(sorted(self._source.targets))
            names = self._source.param_names(self)
        else:
            n, targets = len(self.variants), ", ".join(sorted({str(v.target) for v in self.variants}))
            names = self.param_names
        how = "" if self.resolver is None else f"; {type(self.resolver).__name__}: {self.resolver.describe()}"
        return printable(
            f"<karchive.Kernel {self.name}({', '.join(names)}): {n} variant"
            f"{'' if n == 1 else 's'} for {targets}, from {self.archive.name} {self.archive.version}{how}>"
        )

    @property
    def cached_calls(self) -> int:
        """How many distinct selection keys this kernel has resolved (a new one means a full selection)."""
        run = self._run
        return len(run) if hasattr(run, "__len__") else len(self._py_cache)

    def select(self, *args: Any, device: DeviceInfo | int | str | None = None, **kwargs: Any) -> Variant:
        """The variant a call with these arguments would launch, without launching.

        ``device`` may be a :class:`DeviceInfo` or a target such as ``"cuda:90"`` / ``"hip:gfx942"`` to ask
        about a GPU this machine does not have (no driver is touched then).
        """
        if self.resolver is not None:  # meta-parameters first; select() never benchmarks
            kernel, cx = self.resolver.resolve(None, args, kwargs, None, may_benchmark=False, device=device)
            return kernel.select(*args, device=device, **{**kwargs, **cx})
        if self._source is not None and isinstance(device, (str, DeviceInfo)):
            return self._source.select(self, args, kwargs, device)
        try:
            values, options = self._bind_call(args, kwargs)
            infos = self._infos(values)
            return self._select(self._asked_device(device, infos), values, infos, options)[0]
        except REFUSALS as exc:
            self._explain(exc, args, kwargs, device)
            raise

    def _asked_device(self, device: DeviceInfo | int | str | None, infos: Sequence[Any]) -> DeviceInfo:
        """The device :meth:`select` answers for: a described target, a ``DeviceInfo``, a device index, or
        (None) the arguments' device, else the current one. The launch's argument checks (host memory, two
        GPUs) run whatever ``device`` says: select must never accept a call that the launch refuses."""
        on = self._argument_device(infos)
        if isinstance(device, str):
            return DeviceInfo.describe_target(device)
        if isinstance(device, DeviceInfo):
            return device
        backend = self.archive.backend()
        index = device if isinstance(device, int) else (backend.current_device() if on is None else on)
        return backend.device_info(index)

    def bind(self, grid: Any, *args: Any, stream: Any = None, **kwargs: Any) -> BoundLauncher:
        """Select and load once, fix grid/stream/layout; the returned launcher re-launches at near-raw cost.

        A callable ``grid`` is evaluated once, here. With ``stream=None`` the stream is the framework's
        current stream *at bind time* (torch/CuPy), else the legacy default stream.
        """
        if self.resolver is not None:
            kernel, cx = self.resolver.resolve(grid, args, kwargs, stream)
            return kernel.bind(grid, *args, stream=stream, **{**kwargs, **cx})
        values, ent, infos = self._checked(args, kwargs)
        grid = grid_dims(self._grid_of(grid, ent.meta, values), self.name)
        if stream is None:
            fn = self._stream_fn(values, infos)
            stream = 0 if fn is None else fn(ent.device)
        call_values = self._call_values(values, infos)
        if self.launch_path == launch_path.EXTENSION and not ent.special and ent.backend.launch_address():
            from ._native import NativeBoundLauncher

            return NativeBoundLauncher(ent, grid, stream, call_values)
        return BoundLauncher(ent, grid, stream, call_values)

    def preload(self, device: int | None = None) -> int:
        """Load every variant that can run on ``device`` now (keeps module loads out of timed or captured
        regions); returns how many were loaded."""
        if self.resolver is not None:
            return self.resolver.base.preload(device)
        backend = self.archive.backend()
        index = backend.current_device() if device is None else device
        dev = backend.device_info(index)
        count = 0
        for v in self._candidates:
            fit = device_fit(v, dev, self.archive.allow_ptx, self.archive.ptx_header)
            if not isinstance(fit, str):
                self._entry(v, fit, index)
                count += 1
        return count

    # -- what both launch paths call -------------------------------------------------------------------
    #: A kernel whose ``_miss`` takes the call's grid and may answer a call itself (a ``_plan.Done``: its result,
    #: nothing remembered), on both launch paths; with a resolver, a refused resolution is given to
    #: :meth:`_answer`: a served call site's (serve/fast.py).
    answers_misses = False
    #: Whether ``stream=`` is this kernel's launch keyword. A served call site's is not: Triton refuses every
    #: ``stream=``, so such a call goes to the kernel's ``_slow`` as given, on both launch paths.
    takes_stream = True

    def _miss(self, args: Sequence[Any], kwargs: dict[str, Any], grid: Any = None) -> Any:
        """A selection key seen for the first time: full checks, selection, load (a CallTarget). Raises for a bad
        call. ``grid``: the call's, given only to a kernel that ``answers_misses``."""
        values, ent, infos = self._checked(args, kwargs)
        notice_tensors(values)
        return CallTarget(ent, self._stream_fn(values, infos))

    def _answer(self, exc: Exception, grid: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> Done:
        """A call this kernel refused (``exc``, raised while it resolved, selected or loaded): a kernel that
        ``answers_misses`` may answer it itself (a :class:`Done`); otherwise, and here, the refusal stands."""
        raise exc

    def _slow(self, grid: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
        """A call the fast steps could not bind or key: every step in plain Python (raises for a bad call)."""
        stream = kwargs.get(STREAM)
        values, ent, infos = self._checked(args, kwargs)
        if ent.effect is not None:
            setattr(*ent.effect)
        if stream is None:
            fn = self._stream_fn(values, infos)
            stream = 0 if fn is None else fn(ent.device)
        ent.launch(self._grid_of(grid, ent.meta, values), stream, self._call_values(values, infos))
        return ent.result

    def _checked(self, args: Sequence[Any], kwargs: dict[str, Any]) -> tuple[list[Any], LaunchEntry, list[Any]]:
        """(the call's values, the entry it launches, the argument infos): every check, the selection and the
        load; a refusal is explained (:meth:`_explain`) before it is raised."""
        try:
            values, options = self._bind_call(args, kwargs)
            ent, infos = self._resolve(values, options)
        except REFUSALS as exc:
            self._explain(exc, args, kwargs)
            raise
        return values, ent, infos

    def _explain(
        self,
        exc: Exception,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        device: DeviceInfo | int | str | None = None,
    ) -> None:
        """A call this kernel refuses (its arguments, or no variant fits), before the error is raised: a
        kernel set up over some of its variants (:meth:`lazy`, :mod:`._lazy`) raises what the kernel over
        every variant says instead. A kernel made over every variant: the error stands."""
        if self._source is not None:
            self._source.explain(self, exc, args, kwargs, device)

    def _grid_of(self, grid: Any, meta: dict[str, Any], values: Sequence[Any]) -> Any:
        """A callable grid evaluated on the call's named arguments plus the variant's meta-parameters."""
        return evaluate_grid(grid, self._param_names, meta, values)

    # -- binding and selection (slow path) ---------------------------------------------------------------
    def _bind_call(self, args: Sequence[Any], kwargs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        """(values per parameter, MISSING where not given; launch options given) of a call."""
        kwargs = {k: v for k, v in kwargs.items() if v is not MISSING and k != STREAM}
        options = {o: kwargs.pop(o) for o in self.plan.options if o in kwargs}
        return self._bind_values(args, kwargs), options

    def _bind_values(self, args: Sequence[Any], kwargs: dict[str, Any]) -> list[Any]:
        n = len(self.param_names)
        if len(args) > n:
            raise ArgumentError(
                f"{self.name}() takes {n} arguments ({', '.join(self.param_names)}), "
                f"got {len(args)} positional arguments",
                kernel=self.name,
                param=None,
            )
        values = list(args) + [MISSING] * (n - len(args))
        for k, v in kwargs.items():
            try:
                i = self.param_names.index(k)
            except ValueError:
                raise ArgumentError(
                    f"{self.name}() got an unknown keyword argument {k!r}; parameters are "
                    f"{', '.join(self.param_names)} (launch options: {', '.join(self.plan.options + (STREAM,))})",
                    kernel=self.name,
                    param=k,
                ) from None
            if values[i] is not MISSING:
                raise ArgumentError(f"{self.name}() got two values for {k!r}", kernel=self.name, param=k)
            values[i] = v
        for i, p in enumerate(self.plan.params):
            if p.required and values[i] is MISSING:
                raise ArgumentError(
                    f"{self.name}() is missing argument {p.name!r} (parameter {i} of {', '.join(self.param_names)})",
                    kernel=self.name,
                    param=p.name,
                )
        return values

    def _infos(self, values: Sequence[Any]) -> list[Any]:
        infos: list[Any] = []
        for p, v in zip(self.plan.params, values):
            role = p.role
            if (
                role in (PTR, MIXED)
                and v is not MISSING
                and not isinstance(v, (bool, float))
                and not (role == MIXED and isinstance(v, (int, str)))
            ):
                try:
                    infos.append(pointer_info(v))
                except NotAPointer as exc:
                    if role == PTR:
                        raise ArgumentError(
                            f"{self.name}: argument {p.name!r}: {exc}", kernel=self.name, param=p.name
                        ) from None
                    infos.append(None)
                except Exception as exc:  # noqa: BLE001 - a framework accessor failed
                    raise ArgumentError(
                        f"{self.name}: argument {p.name!r}: cannot read its device pointer: {exc}",
                        kernel=self.name,
                        param=p.name,
                    ) from None
            elif role == PTR and isinstance(v, (bool, float)):
                raise ArgumentError(
                    f"{self.name}: argument {p.name!r} must be a pointer "
                    f"(tensor/array or int address), got {type(v).__name__} {v!r}",
                    kernel=self.name,
                    param=p.name,
                )
            else:
                infos.append(None)
        return infos

    def _device_index(self, infos: Sequence[Any]) -> int:
        """The device the call's tensors are on (the current device when none says)."""
        index = self._argument_device(infos)
        return self.archive.backend().current_device() if index is None else index

    def _argument_device(self, infos: Sequence[Any]) -> int | None:
        """The one device the call's arguments report (None: none reports one); refuses host memory and
        arguments on two GPUs. Touches no driver."""
        first: tuple[str, int] | None = None
        for name, info in zip(self.param_names, infos):
            if info is None:
                continue
            dev = info[2]
            if dev is None:
                continue
            if dev < 0:
                raise ArgumentError(
                    f"{self.name}: argument {name!r} is in host (CPU) memory; "
                    "kernels need device memory (move it to the GPU first)",
                    kernel=self.name,
                    param=name,
                )
            if first is None:
                first = (name, dev)
            elif dev != first[1]:
                raise ArgumentError(
                    f"{self.name}: argument {name!r} is on device {dev} but {first[0]!r} is on "
                    f"device {first[1]}; all tensors of one launch must be on one GPU",
                    kernel=self.name,
                    param=name,
                )
        return None if first is None else first[1]

    def _select(
        self, dev: DeviceInfo, values: Sequence[Any], infos: Sequence[Any], options: dict[str, Any]
    ) -> tuple[Variant, DeviceFit]:
        return select_variant(
            self.name,
            self._candidates,
            dev,
            values,
            infos,
            self.param_names,
            self.archive.allow_ptx,
            self.archive.ptx_header,
            options,
            block_from_variant=self.descriptor_block_from_variant,
        )

    def _entry(self, variant: Variant, fit: DeviceFit, index: int) -> LaunchEntry:
        key = (variant.key, index)
        ent = self._entries.get(key)
        if ent is None:
            with self._lock:
                ent = self._entries.get(key)
                if ent is None:
                    loaded = self.archive.load_function(variant, fit, index)
                    ent = LaunchEntry.load(
                        self.name, variant, fit, loaded, self.archive.backend(), self.archive.scratch_pool(), self.plan
                    )
                    ent.descriptor_block_from_variant = self.descriptor_block_from_variant
                    if variant.key in self._results:
                        ent.set_result(*self._results[variant.key])
                    self._entries[key] = ent
        return ent

    def _resolve(self, values: Sequence[Any], options: dict[str, Any]) -> tuple[LaunchEntry, list[Any]]:
        infos = self._infos(values)
        index = self._device_index(infos)
        dev = self.archive.backend().device_info(index)
        variant, fit = self._select(dev, values, infos, options)
        return self._entry(variant, fit, index), infos

    def _stream_fn(self, values: Sequence[Any], infos: Sequence[Any]) -> Callable[[int], int] | None:
        """The current-stream getter of the framework the first tensor argument belongs to (None: stream 0)."""
        for v, info in zip(values, infos):
            if info is None:
                continue
            fw = framework_of(type(v))
            if fw == "torch":
                return _torch_default_stream()
            if fw == "cupy":
                return _cupy_default_stream()
            if fw is not None:
                return None
        return None

    def _call_values(self, values: Sequence[Any], infos: Sequence[Any]) -> list[Any]:
        extracted = self.plan.extracted
        return [infos[i][0] if i in extracted else values[i] for i in self.plan.call_positions]
