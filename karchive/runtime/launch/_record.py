"""One loaded variant: its plain record (:class:`VariantRecord`), its launch (:class:`LaunchEntry`), and the
bound launcher for hot loops (:class:`BoundLauncher`).

A :class:`VariantRecord` holds what a launch of that variant needs: the loaded function, the block and
shared memory, scratch sizes, which call value feeds which binary parameter. Both launch paths are built
from it. :meth:`LaunchEntry.launch_dims` is the pure-Python launch (pack with :mod:`._argpack`, then the
driver through the backend); the compiled launcher gets the same record as a ``_fastlaunch.Entry``
(:func:`._native.make_entry`) and calls back into :meth:`LaunchEntry.failed` / :meth:`LaunchEntry.explain`
for errors, so both paths raise the same errors. The compiled launcher packs clusters, cooperative grids, PDL
(``cuLaunchKernelEx``) and scratch pointers (:meth:`LaunchEntry.scratch_for` when the pool must give one)
itself; on the Python path they take :meth:`LaunchEntry.launch_dims`.

:class:`BoundLauncher` fixes variant, grid, stream and packed parameters once; ``bound()`` is one
driver call.
"""

from __future__ import annotations

import logging
import operator
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, cast

from ...errors import ArgumentError, LaunchError
from ...format.manifest import Variant
from ...format.tensordesc import TensorDescAbi, parse_tensordesc_type
from .. import args as args_module
from ..args import NotAPointer, pointer_value
from ..backend import Backend, LoadedFunction, stream_handle
from ..descriptors import expand, packed
from ..select import MISSING, DeviceFit, variant_label
from ._argpack import ParamLayout, bf16_bits
from ._plan import KernelPlan

log = logging.getLogger("karchive.runtime")

_MAX_DIM = (1 << 32) - 1


def grid_dims(grid: Any, kernel: str) -> tuple[int, int, int]:
    """``(gx, gy, gz)`` from a grid of 1 to 3 ints (or one int); :class:`ArgumentError` (naming ``kernel``,
    the kernel launched) otherwise.

    Both launch paths call this for any grid that is not a plain tuple of small ints, so both raise the
    same errors (the compiled one through a ``partial`` that binds ``kernel``: launch/_native.py).
    """
    if type(grid) is tuple and len(grid) == 3:
        gx, gy, gz = grid
        if (
            type(gx) is int
            and type(gy) is int
            and type(gz) is int
            and 0 <= gx <= _MAX_DIM
            and 0 <= gy <= _MAX_DIM
            and 0 <= gz <= _MAX_DIM
        ):
            return grid
    if isinstance(grid, int) and not isinstance(grid, bool):
        grid = (grid,)
    try:
        dims = tuple(grid)
    except TypeError:
        raise ArgumentError(
            f"grid must be 1 to 3 ints, a tuple of them, or a callable returning one; got {grid!r}",
            kernel=kernel,
            param="grid",
        ) from None
    if not 1 <= len(dims) <= 3:
        raise ArgumentError(f"grid must have 1 to 3 dimensions, got {grid!r}", kernel=kernel, param="grid")
    out = []
    for d in dims:
        if isinstance(d, bool) or not hasattr(d, "__index__"):
            raise ArgumentError(f"grid dimensions must be ints, got {grid!r}", kernel=kernel, param="grid")
        d = operator.index(d)
        if not 0 <= d <= _MAX_DIM:
            raise ArgumentError(
                f"grid dimension {d} is out of range [0, 2**32) in {grid!r}", kernel=kernel, param="grid"
            )
        out.append(d)
    out += [1] * (3 - len(out))
    return (out[0], out[1], out[2])


class PackSlot(NamedTuple):
    """Where one of the binary's user parameters comes from."""

    value: int  # index into the call values (the kernel's non-constexpr parameters, in call order)
    convert: str | None  # None: as is; "ptr": read the address from an object; "bf16": to bf16 bits


@dataclass(frozen=True, eq=False)
class VariantRecord:
    """The facts of one variant loaded on one device that a launch needs: plain data, made once per load.

    Both launch paths are built from it: :class:`LaunchEntry` (the Python launch and the rare cases) and the
    compiled launcher's ``_fastlaunch.Entry`` (:func:`._native.make_entry`), never the reverse.
    """

    kernel: str
    variant: Variant
    fit: DeviceFit
    loaded: LoadedFunction
    device: int
    block_x: int  # threads per block (num_warps * warp size); block y and z are 1
    shared: int  # dynamic shared memory bytes
    cluster: tuple[int, int, int]
    num_ctas: int
    cooperative: bool
    pdl: bool
    #: (kind, bytes per block, alignment) of each scratch buffer the binary takes (global, profile)
    scratch: tuple[tuple[str, int, int], ...]
    #: per user parameter of the binary: which call value feeds it, and how it is converted
    slots: tuple[PackSlot, ...]
    call_positions: tuple[int, ...]
    meta: dict[str, Any]  # constexprs and launch options, as a callable grid sees them (never mutated)
    label: str

    @property
    def use_ex(self) -> bool:
        """Needs launch attributes (clusters, cooperative grid, PDL): the driver's extended launch."""
        c = self.cluster
        return c[0] * c[1] * c[2] > 1 or self.cooperative or self.pdl

    @property
    def special(self) -> bool:
        """Needs more than pack + plain launch (launch attributes, scratch, or a host tensor descriptor, which
        expands into several binary parameters): the Python launch, and the Python bound launcher. (The
        compiled ``k[grid]`` launches descriptor kernels itself: launch/_native.make_entry.)"""
        return self.use_ex or bool(self.scratch) or any(p.kind == "tensordesc" for p in self.variant.abi.params)

    @property
    def converts(self) -> bool:
        """Some value needs a Python conversion before packing (an object's pointer, a bf16)."""
        return any(s.convert for s in self.slots)

    @classmethod
    def of(
        cls,
        kernel: str,
        variant: Variant,
        fit: DeviceFit,
        loaded: LoadedFunction,
        plan: KernelPlan,
        layout: ParamLayout,
    ) -> VariantRecord:
        abi = variant.abi
        scratch = tuple(
            (k, s, a)
            for k, s, a in (
                ("global_scratch", abi.global_scratch_size, abi.global_scratch_align),
                ("profile_scratch", abi.profile_scratch_size, abi.profile_scratch_align),
            )
            if s > 0 and k in layout.scratch_offsets
        )
        extracted = plan.extracted
        slots = []
        for p in abi.params[: layout.n_user]:
            convert = None
            if p.kind == "tensordesc":
                convert = "desc"  # one call value -> several binary parameters (tensordesc.expand)
            elif p.kind == "pointer" and p.arg not in extracted:
                convert = "ptr"
            elif p.type == "bf16":
                convert = "bf16"
            slots.append(PackSlot(plan.call_positions.index(p.arg), convert))
        meta = {
            **variant.constexprs,
            "num_warps": abi.num_warps,
            "num_ctas": abi.num_ctas,
            "num_stages": variant.options.get("num_stages"),
        }
        return cls(
            kernel,
            variant,
            fit,
            loaded,
            loaded.device,
            abi.num_warps * abi.warp_size,
            abi.shared,
            abi.cluster_dims,
            abi.num_ctas,
            abi.cooperative_grid,
            abi.pdl,
            scratch,
            tuple(slots),
            plan.call_positions,
            meta,
            variant_label(variant),
        )


class LaunchEntry:
    """A :class:`VariantRecord` with its launch behaviour: pack, launch through the backend, explain, retry."""

    def __init__(self, record: VariantRecord, layout: ParamLayout, backend: Backend, pool: Any) -> None:
        r = self.record = record
        # the record's fields as attributes: the launch reads them per call
        self.kernel, self.variant, self.fit, self.loaded = r.kernel, r.variant, r.fit, r.loaded
        self.function, self.device = r.loaded.function, r.device
        self.block_x, self.shared, self.cluster, self.num_ctas = r.block_x, r.shared, r.cluster, r.num_ctas
        self.cooperative, self.pdl, self.scratch, self.slots = r.cooperative, r.pdl, r.scratch, r.slots
        self.use_ex, self.special, self.converts = r.use_ex, r.special, r.converts
        self.meta, self.call_positions, self.label = r.meta, r.call_positions, r.label
        self.backend = backend
        self.pool = pool
        self.layout = layout  # the creating thread's buffer; other threads get their own
        #: Autotuned kernels: a descriptor's block shape is the chosen variant's, whatever the call site's says.
        self.descriptor_block_from_variant = False
        #: Per descriptor parameter, the block of the variant's signature: what the call's descriptor must have
        #: (the ABI's block_shape is the TMA box, which can be smaller).
        self.desc_blocks: dict[Any, tuple[int, ...] | None] = {}
        for p in self.variant.abi.params:
            if p.kind == "tensordesc":
                parsed = parse_tensordesc_type(self.variant.params[cast(int, p.arg)].type)
                self.desc_blocks[p.arg] = parsed.block_shape if parsed is not None else None
        # Values reach the binary in order, or some (the == 1 ones) are dropped: an itemgetter picks them.
        indices = [s.value for s in self.slots]
        self._pick: Callable[[Sequence[Any]], Sequence[Any]] | None = None
        if indices != list(range(len(self.call_positions))):
            if len(indices) > 1:
                self._pick = operator.itemgetter(*indices)
            elif indices:
                only = indices[0]
                self._pick = lambda v: (v[only],)
            else:
                self._pick = lambda v: ()
        self._owner = threading.get_ident()
        self._tls = threading.local()
        #: What a launch of this entry returns (:meth:`set_result`; ``Kernel.set_result`` sets it by variant).
        self.result: Any = None
        #: None, or ``(obj, name, value)`` set before each launch, grid first evaluated after (:meth:`set_result`).
        self.effect: tuple[Any, str, Any] | None = None
        #: The compiled launcher's ``_fastlaunch.Entry`` twins of this entry (their ``result`` follows this one's).
        self.natives: list[Any] = []
        #: ``launch(grid, stream, values)``: the Python path's launch (grid as the caller gave it, after a
        #: callable grid ran; ``values`` the call values).
        self.launch: Callable[[Any, Any, Sequence[Any]], None] = self._make_launch()

    @classmethod
    def load(
        cls,
        kernel: str,
        variant: Variant,
        fit: DeviceFit,
        loaded: LoadedFunction,
        backend: Backend,
        pool: Any,
        plan: KernelPlan,
    ) -> LaunchEntry:
        layout = ParamLayout(variant.abi)
        return cls(VariantRecord.of(kernel, variant, fit, loaded, plan, layout), layout, backend, pool)

    def set_result(self, result: Any, effect: tuple[Any, str, Any] | None = None) -> None:
        """What a launch of this entry returns, and what it sets first, on both paths (the C twins hold the same)."""
        self.result, self.effect = result, effect
        for native in self.natives:
            native.result, native.effect = result, effect

    # -- values -> parameter buffer ------------------------------------------------------------------
    def convert(self, values: Sequence[Any]) -> list[Any]:
        """The binary's user parameter values from the call values (errors name the parameter)."""
        out = []
        for (j, conv), p in zip(self.slots, self.variant.abi.params):
            v = values[j]
            if conv == "desc":
                try:
                    out.extend(
                        expand(
                            p.name,
                            cast(TensorDescAbi, p.desc),
                            v,
                            self.descriptor_block_from_variant,
                            self.device,
                            self.desc_blocks.get(p.arg),
                        )
                    )
                except ArgumentError as exc:
                    raise ArgumentError(f"{self.kernel}: {exc}", kernel=self.kernel, param=p.name) from None
                continue
            if conv == "ptr":
                try:
                    v = pointer_value(v)
                except (NotAPointer, TypeError) as exc:
                    raise ArgumentError(
                        f"{self.kernel}: parameter {p.name!r} ({p.type}): {exc}", kernel=self.kernel, param=p.name
                    ) from None
            elif conv == "bf16":
                try:
                    v = bf16_bits(v)
                except (TypeError, ValueError, OverflowError) as exc:
                    raise ArgumentError(
                        f"{self.kernel}: parameter {p.name!r} (bf16): {v!r}: {exc}", kernel=self.kernel, param=p.name
                    ) from None
            out.append(v)
        return out

    def descriptor_packer(self, index: int) -> Callable[[Any], bytes]:
        """For the compiled launcher: the ``index``-th ABI parameter's (a tensor descriptor) call value -> the
        packed bytes of its binary parameters. The same expansion, checks and errors as :meth:`convert`;
        a value that does not pack raises what ``struct`` raises, which :meth:`explain` turns into the
        Python path's error."""
        p = self.variant.abi.params[index]
        name, d, kernel = p.name, cast(TensorDescAbi, p.desc), self.kernel
        block, device = self.desc_blocks.get(p.arg), self.device

        def pack_descriptor(value: Any) -> bytes:
            try:  # (descriptor_block_from_variant is read per call: an autotuner sets it after loading)
                values = expand(name, d, value, self.descriptor_block_from_variant, device, block)
            except ArgumentError as exc:
                raise ArgumentError(f"{kernel}: {exc}", kernel=kernel, param=name) from None
            blob = getattr(values, "blob", None)  # the cached expansion's bytes (descriptors.Expansion)
            return blob if blob is not None else packed(values, d)

        return pack_descriptor

    def pack(self, layout: ParamLayout, values: Sequence[Any]) -> None:
        try:
            if self.converts:
                layout.pack_into(layout.buffer, 0, *self.convert(values))
            elif self._pick is not None:
                layout.pack_into(layout.buffer, 0, *self._pick(values))
            else:
                layout.pack_into(layout.buffer, 0, *values)
        except Exception as exc:  # noqa: BLE001 - struct.error, OverflowError, TypeError, ArgumentError
            raise self.explain(values, exc) from None

    def explain(self, values: Sequence[Any], exc: BaseException | None) -> ArgumentError:
        """The :class:`ArgumentError` for call values that did not pack (shared by both launch paths)."""
        if isinstance(exc, ArgumentError):
            return exc
        for j, v in enumerate(values):
            if v is MISSING:
                name = self.variant.params[self.call_positions[j]].name
                return ArgumentError(f"{self.kernel}() is missing argument {name!r}", kernel=self.kernel, param=name)
        try:
            converted = self.convert(values)
        except ArgumentError as err:
            return err
        why = self.layout.explain(converted, exc)
        return ArgumentError(f"{self.kernel}: {why}", kernel=self.kernel, param=why.param)

    def thread_layout(self) -> ParamLayout:
        """The calling thread's parameter buffer: the driver call releases the GIL, so threads never share one."""
        if threading.get_ident() == self._owner:
            return self.layout
        layout = getattr(self._tls, "layout", None)
        if layout is None:
            layout = self._tls.layout = ParamLayout(self.variant.abi)
        return layout

    # -- launching -------------------------------------------------------------------------------------
    def _make_launch(self) -> Callable[[Any, Any, Sequence[Any]], None]:
        """The Python path's launch as one function: for the common case (a plain launch from the thread
        that made this entry) pack and call the driver in one frame; anything else is :meth:`launch_dims`.
        It does what :meth:`launch_dims` does, with this entry's fixed parts bound once."""
        layout = self.layout
        pack_into, buffer, params = layout.pack_into, layout.buffer, layout.kernel_params
        pick, owner, get_ident, kernel = self._pick, self._owner, threading.get_ident, self.kernel
        streams = self.backend.streams
        known, stream_of, driver_launch = streams.known, streams.get, self.backend.launch
        function, block_x, shared = self.function, self.block_x, self.shared
        general = self.special or self.converts
        launch_dims, explain, failed = self.launch_dims, self.explain, self.failed

        def launch(grid: Any, stream: Any, values: Sequence[Any]) -> None:
            if type(grid) is tuple and len(grid) == 1 and type(grid[0]) is int and 0 <= grid[0] <= _MAX_DIM:
                gx, gy, gz = grid[0], 1, 1
            else:
                gx, gy, gz = grid_dims(grid, kernel)
            if not gx * gy * gz:
                return  # Triton launches nothing for an empty grid
            if general or get_ident() != owner:
                return launch_dims(gx, gy, gz, stream, values)
            try:
                pack_into(buffer, 0, *(values if pick is None else pick(values)))
            except Exception as exc:  # noqa: BLE001 - struct.error, OverflowError, TypeError
                raise explain(values, exc) from None
            s = known(stream) if type(stream) is int else None
            err = driver_launch(
                function, gx, gy, gz, block_x, shared, s if s is not None else stream_of(stream), params
            )
            if err:
                failed(err, gx, gy, gz, stream, values, layout)

        return launch

    def launch_dims(self, gx: int, gy: int, gz: int, stream: Any, values: Sequence[Any]) -> None:
        """Pack ``values`` into this thread's buffer and launch through the binding (every feature)."""
        layout = self.thread_layout()
        self.pack(layout, values)
        s = self.backend.stream(stream)
        if self.scratch:
            self.set_scratch(layout, gx, gy, gz, stream, s)
        err = self.raw_launch(gx, gy, gz, s, layout)
        if err:
            self.failed(err, gx, gy, gz, stream, values, layout)

    def set_scratch(self, layout: ParamLayout, gx: int, gy: int, gz: int, stream: Any, s: Any) -> None:
        blocks = gx * gy * gz * self.num_ctas
        key = stream_handle(stream)
        for kind, size, align in self.scratch:
            address = self.pool.get(self.device, key, s, kind, blocks * size, align, self.kernel) if blocks else 0
            layout.set_scratch(kind, address)

    def scratch_for(self, index: int, nbytes: int, stream: int) -> tuple[int, int]:
        """For the compiled launcher: (address, usable bytes) of the ``index``-th scratch buffer this entry takes,
        ``nbytes`` long, on the stream with this handle (the pool's rules and errors, as :meth:`set_scratch`)."""
        kind, _size, align = self.scratch[index]
        address, usable = self.pool.reserve(
            self.device, stream, self.backend.stream(stream), kind, nbytes, align, self.kernel
        )
        return int(address), int(usable)

    def raw_launch(self, gx: int, gy: int, gz: int, s: Any, layout: ParamLayout) -> int:
        """One driver call with an already packed buffer; returns the driver's result."""
        if self.use_ex:
            c = self.cluster
            try:
                return self.backend.launch_ex(
                    self.function,
                    (gx * c[0], gy * c[1], gz * c[2]),
                    (self.block_x, 1, 1),
                    self.shared,
                    s,
                    layout.kernel_params,
                    c,
                    self.cooperative,
                    self.pdl,
                )
            except LaunchError as exc:  # a backend refusing the launch's attributes is not told the kernel
                if exc.kernel is None and "kernel" in exc._field_names:
                    exc.kernel = self.kernel
                raise
        return self.backend.launch(self.function, gx, gy, gz, self.block_x, self.shared, s, layout.kernel_params)

    def failed(
        self,
        err: Any,
        gx: int,
        gy: int,
        gz: int,
        stream: Any,
        values: Sequence[Any] | None,
        layout: ParamLayout | None = None,
    ) -> None:
        """After a non-zero driver result: retry once in the device's context, else raise :class:`LaunchError`.

        A thread that never touched the GPU has no current context; adopting the device's primary
        context (the one torch, CuPy and Triton share) and launching again is what their launchers do.
        ``values`` re-pack the buffer when the failed launch packed elsewhere (the compiled path).
        """
        b = self.backend
        s = b.stream(stream)
        if int(err) in b.context_errors:
            if layout is None:
                layout = self.thread_layout()
                self.pack(layout, values or ())
                if self.scratch:
                    self.set_scratch(layout, gx, gy, gz, stream, s)
            if not b.has_current():
                b.make_current(self.device)
                err = self.raw_launch(gx, gy, gz, s, layout)
            else:
                with b.in_context(self.device):
                    err = self.raw_launch(gx, gy, gz, s, layout)
            if not err:
                return
        raise LaunchError(
            f"launching {self.kernel} {self.label} on {b.name} device {self.device} failed: {b.error_text(err)} "
            f"(grid=({gx}, {gy}, {gz}), block=({self.block_x}, 1, 1), shared={self.shared})",
            kernel=self.kernel,
        )


class BoundLauncher:
    """A variant, grid, stream and packed parameters fixed once; ``bound()`` re-launches with one driver call.

    ``bound()`` launches with the values packed so far; ``bound(*values)`` re-packs every parameter first
    (in ``bound.param_names`` order: the binary's parameters, i.e. the kernel's non-constexpr ones without
    ``== 1`` specialised ones; pointers as tensors/arrays or int addresses); ``bound.set(name, value)``
    re-packs one. The bound path trusts the dtypes and devices it was bound with but checks 16-byte
    alignment of ``:16`` pointers. A bound launcher owns one parameter buffer: use one per thread.
    """

    def __init__(self, entry: LaunchEntry, grid: tuple[int, int, int], stream: Any, values: Sequence[Any]) -> None:
        self.entry = entry
        self.variant = entry.variant
        abi = entry.variant.abi
        self.layout = ParamLayout(abi)
        user = abi.params[: self.layout.n_user]
        self.param_names = tuple(p.name for p in user)
        # A pointer always has its call argument's index (AbiParam.from_json refuses one without).
        self._aligned = tuple(
            i
            for i, p in enumerate(user)
            if p.kind == "pointer" and entry.variant.params[cast(int, p.arg)].divisibility == 16
        )
        # where each parameter's value sits among the packed values (a tensor descriptor packs several)
        self._flat = [0] * len(user)
        for i in range(1, len(user)):
            prev = user[i - 1]
            self._flat[i] = self._flat[i - 1] + (len(prev.desc.slots) if prev.desc is not None else 1)
        self.grid = grid_dims(grid, entry.kernel)
        self._stream_raw = stream
        self._stream = entry.backend.stream(stream)
        entry.pack(self.layout, values)  # selection already checked the alignment of these values

    def __call__(self, *values: Any) -> None:
        if values:
            self._repack(values)
        gx, gy, gz = self.grid
        if not gx * gy * gz:
            return
        e = self.entry
        if e.special:
            if e.scratch:
                e.set_scratch(self.layout, gx, gy, gz, self._stream_raw, self._stream)
            err = e.raw_launch(gx, gy, gz, self._stream, self.layout)
        else:
            err = e.backend.launch(e.function, gx, gy, gz, e.block_x, e.shared, self._stream, self.layout.kernel_params)
        if err:
            self._failed(err)

    def launch(self, *values: Any) -> None:
        """Same as calling the launcher."""
        self(*values)

    def set_grid(self, grid: Any) -> None:
        self.grid = grid_dims(grid, self.entry.kernel)

    def set_stream(self, stream: Any) -> None:
        self._stream = self.entry.backend.stream(stream)
        self._stream_raw = stream

    def set(self, name: str, value: Any) -> None:
        """Re-pack one parameter (by name) in place; the next launch uses it."""
        try:
            i = self.param_names.index(name)
        except ValueError:
            raise ArgumentError(
                f"{self.entry.kernel}: no parameter {name!r} to set; settable: {list(self.param_names)}",
                kernel=self.entry.kernel,
                param=name,
            ) from None
        if self.variant.abi.params[i].kind == "tensordesc":
            raise ArgumentError(
                f"{self.entry.kernel}: {name!r} is a tensor descriptor; pass every value to the bound "
                "launcher (bound(*values)) to change it",
                kernel=self.entry.kernel,
                param=name,
            )
        if self.variant.abi.params[i].kind == "pointer":
            try:
                value = pointer_value(value)
            except (NotAPointer, TypeError) as exc:
                raise ArgumentError(
                    f"{self.entry.kernel}: parameter {name!r}: {exc}", kernel=self.entry.kernel, param=name
                ) from None
            if i in self._aligned:
                self._misaligned([value], (i,))
        self.layout.set_one(i, value)

    # -- slow parts ------------------------------------------------------------------------------------
    def _repack(self, args: Sequence[Any]) -> None:
        """All or nothing: a value that does not pack leaves the buffer as it was."""
        try:
            values = self._values(args)
            self._misaligned([values[self._flat[i]] for i in self._aligned], self._aligned)
            self.layout.replace(values)
        except Exception as exc:  # noqa: BLE001 - struct.error, OverflowError, TypeError, ArgumentError
            raise self._explain(args, exc) from None

    def _values(self, args: Sequence[Any]) -> list[Any]:
        if len(args) != len(self.param_names):
            raise ArgumentError(
                f"{self.entry.kernel}: the bound launcher takes {len(self.param_names)} values "
                f"{list(self.param_names)}, got {len(args)}",
                kernel=self.entry.kernel,
                param=None,
            )
        out = []
        tensor = args_module.TENSOR_TYPE
        for p, v in zip(self.variant.abi.params, args):
            if p.kind == "tensordesc":
                try:
                    out.extend(
                        expand(
                            p.name,
                            cast(TensorDescAbi, p.desc),
                            v,
                            self.entry.descriptor_block_from_variant,
                            self.entry.device,
                            self.entry.desc_blocks.get(p.arg),
                        )
                    )
                except ArgumentError as exc:  # as LaunchEntry.convert does: the expansion is not told the kernel
                    raise ArgumentError(f"{self.entry.kernel}: {exc}", kernel=self.entry.kernel, param=p.name) from None
                continue
            if p.kind == "pointer":
                try:  # the bound path reads only the address (the binding checked dtypes and devices)
                    v = v.data_ptr() if type(v) is tensor else v if type(v) is int else pointer_value(v)
                except (NotAPointer, TypeError) as exc:
                    raise ArgumentError(
                        f"{self.entry.kernel}: parameter {p.name!r}: {exc}", kernel=self.entry.kernel, param=p.name
                    ) from None
            elif p.type == "bf16":
                try:
                    v = bf16_bits(v)
                except (TypeError, ValueError, OverflowError) as exc:
                    raise ArgumentError(
                        f"{self.entry.kernel}: parameter {p.name!r} (bf16): {v!r}: {exc}",
                        kernel=self.entry.kernel,
                        param=p.name,
                    ) from None
            out.append(v)
        return out

    def _explain(self, args: Sequence[Any], exc: BaseException | None) -> ArgumentError:
        """The error for ``bound(*args)`` values that did not pack (the compiled launcher asks this too)."""
        if isinstance(exc, ArgumentError):
            return exc
        try:
            values = self._values(args)
            self._misaligned([values[self._flat[i]] for i in self._aligned], self._aligned)
        except ArgumentError as err:
            return err
        why = self.layout.explain(values, exc)
        return ArgumentError(f"{self.entry.kernel}: {why}", kernel=self.entry.kernel, param=why.param)

    def _misaligned(self, addresses: Sequence[int], indices: Sequence[int]) -> None:
        for i, a in zip(indices, addresses):
            if isinstance(a, int) and a % 16:
                name = self.param_names[i]
                raise ArgumentError(
                    f"{self.entry.kernel}: {name} address 0x{a:x} is not 16-byte aligned; "
                    f"the bound variant assumes {name}:16",
                    kernel=self.entry.kernel,
                    param=name,
                )

    def _failed(self, err: Any) -> None:
        gx, gy, gz = self.grid
        self.entry.failed(err, gx, gy, gz, self._stream_raw, None, self.layout)
