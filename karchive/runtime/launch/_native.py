"""The compiled launch path: ``_fastlaunch`` objects made from the kernel's plan and the variants' records.

Imported only for kernels on the extension path (:mod:`..launch_path`). Everything the C code needs is
handed over here, by name: the plan's roles and key flags (:mod:`._plan`), each record's pack codes and
offsets (:mod:`._argpack`), and the Python functions it calls back for the rare cases. The C objects are
made from :class:`._record.VariantRecord` values, never the reverse.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ...errors import LaunchError
from .. import launch_path
from ..args import pointer_info, pointer_value
from ..backend import stream_handle
from ..descriptors import TensorDescriptor, blob_offsets, blob_struct
from ..select import MISSING
from ._argpack import NULL_CODE, pack_code
from ._grid import evaluate_reading
from ._plan import FLOAT, INT, MIXED, PTR, STREAM, VALUE, Done, KernelPlan, PlannedKernel, mixed_key
from ._pypath import build, launch_function_name
from ._record import BoundLauncher, LaunchEntry, grid_dims

if TYPE_CHECKING:  # pragma: no cover
    from .. import _fastlaunch  # its stub (_fastlaunch.pyi), for the types of what this module calls
else:  # the module launch_path loaded and checked (not built, or stale: a clear RuntimeLoadError)
    _fastlaunch = launch_path.require_extension()

#: Role numbers of ``_fastlaunch.c`` (ROLE_PTR ...).
ROLE_CODES = {PTR: 1, INT: 2, FLOAT: 3, VALUE: 4, MIXED: 5}
#: Key flags of a kernel with a resolver (fastlaunch.h): the value itself; exactly int/float/bool.
F_EXACT, F_VALUE = 0x10, 0x20


class Owner:
    """The Python side of one dispatcher: every function the C code calls back (the contract:
    ``c-ext/fastlaunch.h``), and the C ``Entry`` made once per loaded variant."""

    done_type: type | None = Done

    def __init__(self, kernel: PlannedKernel) -> None:
        self.kernel = kernel
        self.names = kernel.plan.names
        self.calls = kernel.plan.call_positions
        self.slow = kernel._slow
        self.stream_handle = stream_handle
        self.pointer_info = pointer_info
        self.mixed_key = mixed_key
        self.answers = getattr(kernel, "answers_misses", False)  # its _miss takes the grid, may return a Done
        self._natives: dict[LaunchEntry, Any] = {}

    def miss(self, grid: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
        """``Kernel._miss``, with the C twin of the resolved variant attached (made once, from its record); a
        :class:`Done` the kernel answered itself goes back as it is."""
        if self.answers:
            target = self.kernel._miss(args, kwargs, grid)
            if type(target) is Done:
                return target
        else:
            target = self.kernel._miss(args, kwargs)
        target.native = self.native(target.entry)
        return target

    def native(self, entry: LaunchEntry) -> Any:
        native = self._natives.get(entry)
        if native is None:
            native = self._natives[entry] = make_entry(entry, self.kernel.plan)
        return native

    def grid(self, grid: Any, meta: dict[str, Any], values: Sequence[Any]) -> tuple[int, int, int, Any]:
        """A grid that is not a tuple of small ints: its dims, and what a callable grid read (:mod:`._grid`)."""
        dims, reads = evaluate_reading(grid, self.names, meta, values)
        gx, gy, gz = grid_dims(dims, self.kernel.name)
        return gx, gy, gz, reads


class ResolvingOwner(Owner):
    """The owner of a kernel with a resolver (autotune, heuristics, both): a miss asks the resolver, then the
    kernel over the variants it leaves; the key (``resolver_flags``) holds everything the answer depends on,
    so a hit launches with no Python step. Calls the C code cannot key run the Python resolving launch."""

    def __init__(self, kernel: PlannedKernel, resolver: Any, run: Any) -> None:
        super().__init__(kernel)
        self.resolver = resolver
        self.slow = lambda grid, args, kwargs: run(grid, *args, **kwargs)
        self.index = {n: i for i, n in enumerate(self.names)}
        self.valued = {i for i, p in enumerate(kernel.plan.params) if p.role == VALUE}

    def miss(self, grid: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
        try:
            return self.resolved(grid, args, kwargs)
        except Exception as exc:  # noqa: BLE001 - _answer re-raises what the kernel does not answer (a Done: answered)
            return self.kernel._answer(exc, grid, args, kwargs)

    def resolved(self, grid: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
        """The resolver's answer, then the miss of the kernel over the variants it leaves (with the C twin)."""
        kwargs = dict(kwargs)
        stream = kwargs.pop(STREAM, None)
        settled = self.resolver.settled  # before: a resolver that learns on this call is not remembered
        sub, cx = self.resolver.resolve(grid, args, kwargs, stream)
        target = sub._miss(args, {**kwargs, **cx})
        target.native = self.native(target.entry)
        extra = tuple((self.index[n], v) for n, v in cx.items() if self.index.get(n) not in self.valued)
        target.extra = extra or None
        target.remember = settled and self.resolver.settled
        return target


def resolver_flags(kernel: PlannedKernel, resolver: Any) -> list[int] | None:
    """Per parameter, the key flags the resolver's reads add (:class:`autotuned.Reads`); None where the key
    cannot hold what it reads (a pointer's value or shape, a computed pointer): the Python resolving launch."""
    try:
        reads = resolver.reads()
    except Exception:  # noqa: BLE001 - a resolver that cannot say: keep it in Python
        return None
    plan = kernel.plan
    index = {p.name: i for i, p in enumerate(plan.params)}
    flags = [0] * len(plan.params)
    for name in reads.outputs:
        i = index.get(name)
        if i is not None and plan.params[i].role in (PTR, MIXED):
            return None
    for name in reads.values | reads.outputs:
        i = index.get(name)
        if i is None:
            continue
        if plan.params[i].role == PTR and name in reads.values:
            return None  # its value (shape, strides, address) is not in the key
        flags[i] |= F_VALUE
    for name in reads.objects:
        i = index.get(name)
        if i is not None and plan.params[i].role in (PTR, MIXED):
            flags[i] |= F_VALUE  # dtype and None-ness are in the key; an int address by its value
        elif i is not None:
            flags[i] |= F_VALUE
    if reads.dtypes:
        first = kernel._candidates[0].params
        for i, p in enumerate(plan.params):
            if p.role in (INT, FLOAT) and not first[i].type.startswith("tensordesc"):
                flags[i] |= F_EXACT  # a numpy scalar's dtype joins Triton's key: such calls go to Python
            elif p.role == MIXED:
                flags[i] |= F_VALUE
    return flags


def make_dispatcher(kernel: PlannedKernel) -> Any:
    """``kernel[grid](...)`` of one kernel in C (falls back to the Python path for plans it cannot hold)."""
    launch_path.require_extension()  # (this module may be imported already while the extension is disowned)
    plan = kernel.plan
    resolver = kernel.resolver
    roles = [ROLE_CODES[p.role] for p in plan.params] + [ROLE_CODES[VALUE]] * len(plan.options)
    extra_flags: list[int] | None = [0] * len(plan.params)
    owner: Owner
    if resolver is not None:
        run = kernel._resolving_run(resolver)
        extra_flags = resolver_flags(kernel, resolver)
        if extra_flags is None or len(roles) >= _fastlaunch.MAX_SLOTS:
            return run  # what the key cannot hold: the resolver in Python on every launch
        owner = ResolvingOwner(kernel, resolver, run)
    else:
        if len(roles) >= _fastlaunch.MAX_SLOTS:
            return build(kernel)
        owner = Owner(kernel)
    assert extra_flags is not None
    flags = [p.flags | f for p, f in zip(plan.params, extra_flags)] + [0] * len(plan.options)
    return _fastlaunch.Dispatcher(
        # (a kernel without the stream keyword: a name no keyword argument spells, so stream= is an unknown keyword)
        names=plan.names + plan.options + (STREAM if kernel.takes_stream else "\x00stream",),
        roles=bytes(roles),
        flags=bytes(flags),
        n_params=len(plan.params),
        call_positions=plan.call_positions,
        owner=owner,
        missing=MISSING,
        qualname=launch_function_name(kernel.name),
    )


class _Renumbered:
    """A launch entry seen through another plan's call values (a resolver's dispatcher holds the kernel over
    every variant; the entry was loaded by the kernel over a subset): the owner the C ``Entry`` calls back."""

    def __init__(self, entry: LaunchEntry, picks: Sequence[int], unread: frozenset[int]) -> None:
        self.entry, self.picks, self.unread = entry, tuple(picks), unread

    def values(self, values: Sequence[Any]) -> list[Any]:
        out = [values[j] for j in self.picks]
        for j in self.unread:  # a pointer the dispatcher did not read (mixed there): its address
            out[j] = pointer_value(out[j])
        return out

    def launch_dims(self, gx: int, gy: int, gz: int, stream: Any, values: Sequence[Any]) -> None:
        self.entry.launch_dims(gx, gy, gz, stream, self.values(values))

    def failed(self, err: Any, gx: int, gy: int, gz: int, stream: Any, values: Sequence[Any] | None) -> None:
        self.entry.failed(err, gx, gy, gz, stream, None if values is None else self.values(values))

    def explain(self, values: Sequence[Any], exc: BaseException | None) -> Exception:
        return self.entry.explain(self.values(values), exc)

    def scratch_for(self, index: int, nbytes: int, stream: int) -> tuple[int, int]:
        return self.entry.scratch_for(index, nbytes, stream)


def make_entry(entry: LaunchEntry, plan: KernelPlan | None = None) -> Any:
    """The ``_fastlaunch.Entry`` of a loaded variant: what a launch of it packs where (from its record), and
    whom to call back (its :class:`LaunchEntry`), for a dispatcher over ``plan`` (None: the entry's own).

    A host tensor descriptor is a ``"D"`` slot: the C code asks ``LaunchEntry.descriptor_packer``'s function for
    its packed bytes (memoised in Python: one identity check and one address read in the steady state) and
    copies them into its buffer. Variants the C code does not launch itself (launch attributes, scratch,
    values that need a Python conversion, or no driver address from the binding) launch through
    ``LaunchEntry.launch_dims``.
    """
    r = entry.record
    address = entry.backend.launch_address()
    layout = entry.layout
    # the dispatcher's call value of each of the entry's (the same where the plans agree)
    calls = plan.call_positions if plan is not None else r.call_positions
    picks = [calls.index(p) for p in r.call_positions]
    extracted = (
        plan.extracted
        if plan is not None
        else frozenset(r.call_positions[s.value] for s in r.slots if s.convert != "ptr")
    )
    unread = frozenset(
        j
        for j, p in enumerate(r.call_positions)
        if p not in extracted
        and any(s.value == j and s.convert is None for s in r.slots)
        and r.variant.params[p].type.startswith("*")
    )
    slots: list[tuple[Any, ...]] = []
    scratch = {kind: j for j, (kind, _size, _align) in enumerate(r.scratch)}
    descriptors_fit = True
    for i, p in enumerate(r.variant.abi.params):
        if p.desc is not None and i < layout.n_user:
            start = layout.offsets[i]
            first = layout.param_offsets.index(start)
            mine = layout.param_offsets[first : first + len(p.desc.slots)]
            # the packed bytes are laid out from offset 0: they fit where the buffer's offsets agree
            descriptors_fit &= tuple(o - start for o in mine) == blob_offsets(p.desc)
            slots.append((picks[r.slots[i].value], "D", start, entry.descriptor_packer(i), blob_struct(p.desc).size))
            continue
        if i >= layout.n_user and p.kind in scratch:  # a scratch buffer: the pool's address, per stream (C memo)
            slots.append((-1, "S", layout.offsets[i], scratch[p.kind], r.scratch[scratch[p.kind]][1] * r.num_ctas))
            continue
        code = pack_code(p.kind, p.type)
        value = picks[r.slots[i].value] if i < layout.n_user else -1
        slots.append((value if code != NULL_CODE else -1, code, layout.offsets[i]))
    owner: Any = entry
    if picks != list(range(len(picks))) or unread:
        owner = _Renumbered(entry, picks, unread)
    # launch attributes (clusters, cooperative grid, PDL): a CUlaunchConfig packed in C, where the binding gives
    # cuLaunchKernelEx's address (CUDA)
    ex_address = getattr(entry.backend, "launch_ex_address", lambda: None)() if r.use_ex else None
    via_python = bool(
        (r.use_ex and ex_address is None)
        or not descriptors_fit
        or address is None
        or unread
        or any(s.convert == "ptr" for s in r.slots)
    )
    native = _fastlaunch.Entry(
        launch=0 if via_python or address is None else address,
        function=0 if via_python else entry.backend.handle_address(r.loaded.function),
        block_x=r.block_x,
        shared=r.shared,
        device=r.device,
        slots=tuple(slots),
        buffer_size=layout.size,
        meta=r.meta,
        owner=owner,
        via_python=via_python,
        param_offsets=layout.param_offsets,
        desc_type=TensorDescriptor,
        launch_ex=0 if via_python or ex_address is None else ex_address,
        cluster=r.cluster,
        cooperative=r.cooperative,
        pdl=r.pdl,
    )
    native.result, native.effect = entry.result, entry.effect
    entry.natives.append(native)
    return native


class NativeBoundLauncher(_fastlaunch.Bound, BoundLauncher):
    """:class:`BoundLauncher` whose ``__call__`` and ``launch`` are C (``_fastlaunch.Bound``): packing
    ``bound(*values)`` and the driver call happen without a Python frame. Same buffer, same errors."""

    def __init__(self, entry: LaunchEntry, grid: tuple[int, int, int], stream: Any, values: Sequence[Any]) -> None:
        launch = entry.backend.launch_address()
        if launch is None:  # Kernel.bind makes this class only where the binding gives the driver's address
            raise LaunchError(
                f"{entry.kernel}: no launch function address for the compiled bound launcher", kernel=entry.kernel
            )
        BoundLauncher.__init__(self, entry, grid, stream, values)
        abi = entry.variant.abi
        user = abi.params[: self.layout.n_user]
        slots = tuple(
            (pack_code(p.kind, p.type), self.layout.offsets[i], i in self._aligned) for i, p in enumerate(user)
        )
        self._configure(
            launch=launch,
            function=entry.backend.handle_address(entry.function),
            grid=self.grid,
            block_x=entry.block_x,
            shared=entry.shared,
            stream=stream_handle(stream),
            kernel_params=self.layout.kernel_params,
            buffer=_address(self.layout.buffer),
            buffer_size=self.layout.size,
            slots=slots,
            pointer_value=pointer_value,
        )

    def set_grid(self, grid: Any) -> None:
        BoundLauncher.set_grid(self, grid)
        self._set_grid(*self.grid)

    def set_stream(self, stream: Any) -> None:
        BoundLauncher.set_stream(self, stream)
        self._set_stream(stream_handle(stream))


def _address(buffer: Any) -> int:
    import ctypes

    return ctypes.addressof(buffer)
