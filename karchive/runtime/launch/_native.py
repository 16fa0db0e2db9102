"""The compiled launch path: ``_fastlaunch`` objects made from the kernel's plan and the variants' records.

Imported only for kernels on the extension path (:mod:`..launch_path`). Everything the C code needs is
handed over here, by name: the plan's roles and key flags (:mod:`._plan`), each record's pack codes and
offsets (:mod:`._argpack`), and the Python functions it calls back for the rare cases. The C objects are
made from :class:`._record.VariantRecord` values, never the reverse.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any
from collections.abc import Sequence

from ...errors import LaunchError
from .. import launch_path
from ..args import pointer_info, pointer_value
from ..backend import stream_handle
from ..descriptors import TensorDescriptor, blob_offsets, blob_struct
from ._record import BoundLauncher, LaunchEntry, grid_dims
from ._argpack import NULL_CODE, pack_code
from ._plan import FLOAT, INT, MIXED, PTR, STREAM, VALUE, PlannedKernel, mixed_key
from ._pypath import build, launch_function_name
from ..select import MISSING

if TYPE_CHECKING:  # pragma: no cover
    from .. import _fastlaunch  # its stub (_fastlaunch.pyi), for the types of what this module calls
else:  # the module launch_path loaded and checked (not built, or stale: a clear RuntimeLoadError)
    _fastlaunch = launch_path.require_extension()

#: Role numbers of ``_fastlaunch.c`` (ROLE_PTR ...).
ROLE_CODES = {PTR: 1, INT: 2, FLOAT: 3, VALUE: 4, MIXED: 5}


def make_dispatcher(kernel: PlannedKernel) -> Any:
    """``kernel[grid](...)`` of one kernel in C (falls back to the Python path for plans it cannot hold)."""
    launch_path.require_extension()  # (this module may be imported already while the extension is disowned)
    plan = kernel.plan
    roles = [ROLE_CODES[p.role] for p in plan.params] + [ROLE_CODES[VALUE]] * len(plan.options)
    if len(roles) >= _fastlaunch.MAX_SLOTS:
        return build(kernel)
    flags = [p.flags for p in plan.params] + [0] * len(plan.options)
    natives: dict[LaunchEntry, Any] = {}  # one C Entry per loaded variant of this kernel
    resolve = kernel._miss

    def miss(args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
        """``Kernel._miss``, with the C twin of the resolved variant attached (made once, from its record)."""
        target = resolve(args, kwargs)
        native = natives.get(target.entry)
        if native is None:
            native = natives[target.entry] = make_entry(target.entry)
        target.native = native
        return target

    return _fastlaunch.Dispatcher(
        names=plan.names + plan.options + (STREAM,), roles=bytes(roles), flags=bytes(flags),
        n_params=len(plan.params), call_positions=plan.call_positions, miss=miss, slow=kernel._slow,
        grid_of=kernel._grid_of, grid_dims=partial(grid_dims, kernel=kernel.name), stream_handle=stream_handle,
        pointer_info=pointer_info,
        mixed_key=mixed_key, missing=MISSING, qualname=launch_function_name(kernel.name),
    )


def make_entry(entry: LaunchEntry) -> Any:
    """The ``_fastlaunch.Entry`` of a loaded variant: what a launch of it packs where (from its record), and
    whom to call back (its :class:`LaunchEntry`).

    A host tensor descriptor is a ``"D"`` slot: the C code asks ``LaunchEntry.descriptor_packer``'s function for
    its packed bytes (memoised in Python: one identity check and one address read in the steady state) and
    copies them into its buffer. Variants the C code does not launch itself (launch attributes, scratch,
    values that need a Python conversion, or no driver address from the binding) launch through
    ``LaunchEntry.launch_dims``.
    """
    r = entry.record
    address = entry.backend.launch_address()
    layout = entry.layout
    slots: list[tuple[Any, ...]] = []
    descriptors_fit = True
    for i, p in enumerate(r.variant.abi.params):
        if p.desc is not None and i < layout.n_user:
            start = layout.offsets[i]
            first = layout.param_offsets.index(start)
            mine = layout.param_offsets[first: first + len(p.desc.slots)]
            # the packed bytes are laid out from offset 0: they fit where the buffer's offsets agree
            descriptors_fit &= tuple(o - start for o in mine) == blob_offsets(p.desc)
            slots.append((r.slots[i].value, "D", start, entry.descriptor_packer(i), blob_struct(p.desc).size))
            continue
        code = pack_code(p.kind, p.type)
        value = r.slots[i].value if i < layout.n_user else -1
        slots.append((value if code != NULL_CODE else -1, code, layout.offsets[i]))
    if (r.use_ex or r.scratch or not descriptors_fit or address is None
            or any(s.convert == "ptr" for s in r.slots)):
        launch, function, python_launch = 0, 0, entry.launch_dims  # the C code calls back into Python
    else:
        launch, function, python_launch = address, entry.backend.handle_address(r.loaded.function), None
    return _fastlaunch.Entry(
        launch=launch, function=function, block_x=r.block_x,
        shared=r.shared, device=r.device, slots=tuple(slots), buffer_size=layout.size, meta=r.meta,
        python_launch=python_launch, failed=entry.failed, explain=entry.explain,
        param_offsets=layout.param_offsets, desc_type=TensorDescriptor,
    )


class NativeBoundLauncher(_fastlaunch.Bound, BoundLauncher):
    """:class:`BoundLauncher` whose ``__call__`` and ``launch`` are C (``_fastlaunch.Bound``): packing
    ``bound(*values)`` and the driver call happen without a Python frame. Same buffer, same errors."""

    def __init__(self, entry: LaunchEntry, grid: tuple[int, int, int], stream: Any, values: Sequence[Any]) -> None:
        launch = entry.backend.launch_address()
        if launch is None:  # Kernel.bind makes this class only where the binding gives the driver's address
            raise LaunchError(f"{entry.kernel}: no launch function address for the compiled bound launcher",
                              kernel=entry.kernel)
        BoundLauncher.__init__(self, entry, grid, stream, values)
        abi = entry.variant.abi
        user = abi.params[: self.layout.n_user]
        slots = tuple((pack_code(p.kind, p.type), self.layout.offsets[i], i in self._aligned)
                      for i, p in enumerate(user))
        self._configure(
            launch=launch, function=entry.backend.handle_address(entry.function),
            grid=self.grid, block_x=entry.block_x, shared=entry.shared, stream=stream_handle(stream),
            kernel_params=self.layout.kernel_params, buffer=_address(self.layout.buffer), buffer_size=self.layout.size,
            slots=slots, pointer_value=pointer_value,
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
