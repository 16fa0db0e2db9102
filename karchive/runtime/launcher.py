"""One variant loaded on one device, ready to launch: parameter buffer, launch config, generated launch code.

The per-launch function is generated once per (variant, device) with the exact arity and packing of
that variant, so a launch is: grid unpack, one thread-identity check, one ``Struct.pack_into``, one
stream-cache lookup and the driver call. Anything unusual (clusters, cooperative grids, PDL, scratch,
a second thread) takes :meth:`LaunchEntry.launch_generic`, which is plain Python and slower.

:class:`BoundLauncher` goes further for hot loops: grid, stream and argument layout are fixed at bind
time, and ``bound()`` is the driver call plus an error check.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Sequence

from ..errors import ArgumentError, LaunchError
from ..format.manifest import Variant
from .args import NotAPointer, is_torch_tensor_type, pointer_value
from .cuda_driver import LoadedFunction, stream_handle
from .pack import ParamLayout, bf16_bits
from .select import MISSING, DeviceFit, variant_label

log = logging.getLogger("karchive.runtime")


class _Never:
    """A type no argument has: the torch fast path is off until a torch tensor is seen."""


def pad_grid(grid: Any) -> tuple[int, int, int]:
    n = len(grid)
    if n == 1:
        return (grid[0], 1, 1)
    if n == 2:
        return (grid[0], grid[1], 1)
    if n == 3:
        return (grid[0], grid[1], grid[2])
    raise ArgumentError(f"grid must have 1 to 3 dimensions, got {grid!r}")


class LaunchEntry:
    """A loaded variant on one device. ``launch(grid, stream, *call_values)`` is its generated fast path."""

    def __init__(self, kernel: str, variant: Variant, fit: DeviceFit, loaded: LoadedFunction, backend: Any,
                 pool: Any, call_positions: Sequence[int], extracted: frozenset[int]) -> None:
        abi = variant.abi
        self.kernel = kernel
        self.variant = variant
        self.fit = fit
        self.loaded = loaded
        self.backend = backend
        self.pool = pool
        self.device = loaded.device
        self.layout = ParamLayout(abi)
        self.block = (abi.num_warps * abi.warp_size, 1, 1)
        self.shared = abi.shared
        self.cluster = tuple(abi.cluster_dims)
        self.num_ctas = abi.num_ctas
        self.cooperative = abi.cooperative_grid
        self.pdl = abi.pdl
        self.scratch = [(k, s, a) for k, s, a in (("global_scratch", abi.global_scratch_size, abi.global_scratch_align),
                                                  ("profile_scratch", abi.profile_scratch_size, abi.profile_scratch_align))
                        if s > 0 and k in self.layout.scratch_offsets]
        cluster_n = self.cluster[0] * self.cluster[1] * self.cluster[2]
        self.use_ex = cluster_n > 1 or self.cooperative or self.pdl
        self.special = self.use_ex or bool(self.scratch)
        opts = variant.options
        self.meta: dict[str, Any] = {**variant.constexprs, "num_warps": abi.num_warps, "num_ctas": abi.num_ctas,
                                     "num_stages": opts.get("num_stages")}
        self.call_positions = list(call_positions)
        n_user = self.layout.n_user
        # For each user ABI parameter: which call value feeds it, and how it is converted.
        self.slots: list[tuple[int, str | None]] = []
        for p in abi.params[:n_user]:
            j = self.call_positions.index(p.arg)
            conv = None
            if p.kind == "pointer" and p.arg not in extracted:
                conv = "ptr"
            elif p.type == "bf16":
                conv = "bf16"
            self.slots.append((j, conv))
        self._owner = threading.get_ident()
        self._tls = threading.local()
        self._extra = None if backend.name == "hip" else 0
        self.launch = self._generate()
        self.label = variant_label(variant)
        # When the call values map 1:1 onto the binary's parameters (no == 1 parameter dropped, nothing to
        # convert) the dispatcher packs and launches inline, without a second Python frame.
        identity = len(self.slots) == len(self.call_positions) and all(
            j == i and conv is None for i, (j, conv) in enumerate(self.slots))
        self.direct: tuple | None = None if self.special or not identity else (
            self.layout.pack_into, self.layout.buffer, self.layout.kernel_params, loaded.function, self.block[0],
            self.shared, self._owner, self.explain, self.failed)

    # -- conversion (slow path) ----------------------------------------------------------------------
    def convert(self, values: Sequence[Any]) -> list[Any]:
        out = []
        for (j, conv), p in zip(self.slots, self.variant.abi.params):
            v = values[j]
            if conv == "ptr":
                try:
                    v = pointer_value(v)
                except (NotAPointer, TypeError) as exc:
                    raise ArgumentError(f"{self.kernel}: parameter {p.name!r} ({p.type}): {exc}") from None
            elif conv == "bf16":
                try:
                    v = bf16_bits(v)
                except (TypeError, ValueError, OverflowError) as exc:
                    raise ArgumentError(f"{self.kernel}: parameter {p.name!r} (bf16): {v!r}: {exc}") from None
            out.append(v)
        return out

    def explain(self, values: Sequence[Any], exc: BaseException) -> ArgumentError:
        if isinstance(exc, ArgumentError):
            return exc
        for j, v in enumerate(values):
            if v is MISSING:
                name = self.variant.params[self.call_positions[j]].name
                return ArgumentError(f"{self.kernel}() is missing argument {name!r}")
        try:
            converted = self.convert(values)
        except ArgumentError as err:
            return err
        err = self.layout.explain(converted, exc)
        return ArgumentError(f"{self.kernel}: {err}")

    def thread_layout(self) -> ParamLayout:
        if threading.get_ident() == self._owner:
            return self.layout
        layout = getattr(self._tls, "layout", None)
        if layout is None:
            layout = self._tls.layout = ParamLayout(self.variant.abi)
        return layout

    # -- launching -------------------------------------------------------------------------------------
    def launch_generic(self, gx: int, gy: int, gz: int, stream: Any, values: Sequence[Any],
                       layout: ParamLayout | None = None) -> None:
        """Every feature, any thread: used for clusters/cooperative/PDL/scratch and non-owner threads."""
        layout = layout or self.thread_layout()
        try:
            layout.pack(self.convert(values))
        except ArgumentError as exc:
            raise ArgumentError(f"{self.kernel}: {exc}") from None
        s = self.backend.stream(stream)
        if self.scratch:
            blocks = gx * gy * gz * self.num_ctas
            key = stream_handle(stream)
            for kind, size, align in self.scratch:
                addr = self.pool.get(self.device, key, s, kind, blocks * size, align) if blocks else 0
                layout.set_scratch(kind, addr)
        err = self._raw(gx, gy, gz, s, layout)
        if err:
            self.failed(err, gx, gy, gz, s, layout)

    def _raw(self, gx: int, gy: int, gz: int, s: Any, layout: ParamLayout) -> Any:
        if self.use_ex:
            c = self.cluster
            res = self.backend.launch_ex(self.loaded.function, (gx * c[0], gy * c[1], gz * c[2]), self.block,
                                         self.shared, s, layout.kernel_params, c, self.cooperative, self.pdl)
        else:
            res = self.backend.launch(self.loaded.function, gx, gy, gz, self.block[0], 1, 1, self.shared, s,
                                      layout.kernel_params, self._extra)
        return res[0]

    def failed(self, err: Any, gx: int, gy: int, gz: int, s: Any, layout: ParamLayout | None = None) -> None:
        """After a non-zero driver result: skip empty grids, retry once in the right context, else raise."""
        if gx * gy * gz == 0:
            return  # Triton launches nothing for an empty grid; the driver calls that invalid
        layout = layout or self.layout
        b = self.backend
        if int(err) in b.context_errors:
            if not b.has_current():
                b.make_current(self.device)  # a fresh thread: adopt the device's primary context
                err = self._raw(gx, gy, gz, s, layout)
            else:
                with b.in_context(self.device):
                    err = self._raw(gx, gy, gz, s, layout)
            if not err:
                return
        raise LaunchError(
            f"launching {self.kernel} {self.label} on {b.name} device {self.device} failed: {b.error_text(err)} "
            f"(grid=({gx}, {gy}, {gz}), block={self.block}, shared={self.shared})"
        )

    def _generate(self) -> Any:
        n = len(self.call_positions)
        args = ", ".join(f"a{j}" for j in range(n))
        tup = f"({args}{',' if n == 1 else ''})"
        packed = []
        for j, conv in self.slots:
            packed.append(f"_pv(a{j})" if conv == "ptr" else f"_bf16(a{j})" if conv == "bf16" else f"a{j}")
        g: dict[str, Any] = {
            "_ident": threading.get_ident, "_owner": self._owner, "_generic": self.launch_generic,
            "_pack": self.layout.pack_into, "_buf": self.layout.buffer, "_params": self.layout.kernel_params,
            "_explain": self.explain, "_pv": pointer_value, "_bf16": bf16_bits,
            "_streams": self.backend._streams, "_stream": self.backend.stream, "_launch": self.backend.launch,
            "_func": self.loaded.function, "_bx": self.block[0], "_shared": self.shared, "_failed": self.failed,
            "_extra": self._extra,
        }
        head = (f"def launch(grid, stream{', ' if n else ''}{args}):\n"
                "    n = len(grid)\n"
                "    if n == 1:\n        gx = grid[0]; gy = 1; gz = 1\n"
                "    elif n == 2:\n        gx, gy = grid; gz = 1\n"
                "    else:\n        gx, gy, gz = grid\n")
        if self.special:
            body = f"    return _generic(gx, gy, gz, stream, {tup})\n"
        else:
            body = (
                f"    if _ident() != _owner:\n        return _generic(gx, gy, gz, stream, {tup})\n"
                f"    try:\n        _pack(_buf, 0{', ' if packed else ''}{', '.join(packed)})\n"
                f"    except Exception as exc:\n        raise _explain({tup}, exc) from None\n"
                "    s = _streams.get(stream)\n"
                "    if s is None:\n        s = _stream(stream)\n"
                "    err = _launch(_func, gx, gy, gz, _bx, 1, 1, _shared, s, _params, _extra)[0]\n"
                "    if err:\n        _failed(err, gx, gy, gz, s)\n"
            )
        from .codegen import build

        return build(head + body, g, "launch")["launch"]


class BoundLauncher:
    """A variant, grid, stream and argument layout fixed once; ``bound()`` re-launches at near-raw cost.

    ``bound()`` launches with the arguments packed so far; ``bound(*values)`` re-packs every kernel
    parameter first (values in ``bound.param_names`` order: the kernel's non-constexpr parameters,
    without ``== 1`` specialised ones; pointers as tensors/arrays or int addresses); ``bound.set(name,
    value)`` re-packs one. The bound path does not re-check dtypes or devices (it trusts the layout it
    was bound with) but does check 16-byte alignment of ``:16`` pointers. One bound launcher must not be
    used from two threads at once (it owns one parameter buffer).
    """

    def __init__(self, entry: LaunchEntry, grid: tuple[int, int, int], stream: Any, values: Sequence[Any]) -> None:
        self.entry = entry
        self.variant = entry.variant
        abi = entry.variant.abi
        self.layout = ParamLayout(abi)
        user = abi.params[: self.layout.n_user]
        self.param_names = tuple(p.name for p in user)
        self._stream_raw = stream
        self.grid = grid
        self.layout.pack(entry.convert(values))
        self._align_check = [i for i, p in enumerate(user) if p.kind == "pointer"
                             and entry.variant.params[p.arg].divisibility == 16]
        self._g: dict[str, Any] = {}
        self._call = self._generate()
        self.set_stream(stream)
        self.set_grid(grid)
        # Special methods are looked up on the type: give this launcher its own subclass whose __call__
        # is the generated function, so ``bound()`` is a single Python frame before the driver call.
        self.__class__ = type(f"BoundLauncher_{entry.kernel}", (BoundLauncher,),
                              {"__call__": self._call, "launch": self._call, "__slots__": ()})

    def _generate(self) -> Any:
        e = self.entry
        abi = e.variant.abi
        user = abi.params[: self.layout.n_user]
        names = [f"v{i}" for i in range(len(user))]
        lines = []
        packed = []
        for i, p in enumerate(user):
            if p.kind == "pointer":
                lines.append(f"        q{i} = v{i}.data_ptr() if type(v{i}) is _TT else v{i} if type(v{i}) is int "
                             f"else _pv(v{i})\n")
                packed.append(f"q{i}")
            elif p.type == "bf16":
                packed.append(f"_bf16(v{i})")
            else:
                packed.append(f"v{i}")
        check = ""
        if self._align_check:
            ors = " | ".join(f"q{i}" for i in self._align_check)
            check = f"        if ({ors}) & 15:\n            _misaligned({', '.join(packed)})\n"
        g = self._g
        torch_type = None
        try:
            import sys

            torch = sys.modules.get("torch")
            torch_type = torch.Tensor if torch is not None and is_torch_tensor_type(torch.Tensor) else None
        except Exception:  # noqa: BLE001
            torch_type = None
        g.update({
            "_TT": torch_type or _Never, "_pv": pointer_value, "_bf16": bf16_bits, "_pack": self.layout.pack_into,
            "_buf": self.layout.buffer, "_params": self.layout.kernel_params, "_launch": e.backend.launch,
            "_func": e.loaded.function, "_bx": e.block[0], "_shared": e.shared, "_extra": e._extra,
            "_failed": self._failed, "_explain": self._explain, "_misaligned": self._misaligned,
            "_generic": self._generic, "_ArgErr": ArgumentError,
        })
        n = len(user)
        if e.special:
            body = ("def call(self, *args):\n"
                    "    _generic(args)\n")
        else:
            unpack = f"        ({', '.join(names)}{',' if n == 1 else ''}) = args\n" if n else ""
            body = (
                "def call(self, *args):\n"
                "    if args:\n"
                "        try:\n"
                + "".join("    " + ln for ln in (unpack + "".join(lines)).splitlines(True))
                + "        except Exception as exc:\n            raise _explain(args, exc) from None\n"
                + check
                + "        try:\n"
                f"            _pack(_buf, 0{', ' if packed else ''}{', '.join(packed)})\n"
                "        except Exception as exc:\n            raise _explain(args, exc) from None\n"
                "    err = _launch(_func, GX, GY, GZ, _bx, 1, 1, _shared, S, _params, _extra)[0]\n"
                "    if err:\n        _failed(err)\n"
            )
        from .codegen import build

        return build(body, g, "bound")["call"]

    # Python looks special methods up on the type, so __call__ forwards to the generated function.
    def __call__(self, *args: Any) -> None:
        self._call(self, *args)

    def launch(self, *args: Any) -> None:
        """Same as calling the launcher."""
        self._call(self, *args)

    @property
    def fast(self) -> Any:
        """The generated function itself: ``f = bound.fast; f(bound)`` or ``f(bound, *values)`` skips one frame."""
        return self._call

    def set_grid(self, grid: Any) -> None:
        g3 = pad_grid(tuple(grid) if not isinstance(grid, tuple) else grid)
        self.grid = g3
        self._g["GX"], self._g["GY"], self._g["GZ"] = g3

    def set_stream(self, stream: Any) -> None:
        self._stream_raw = stream
        self._g["S"] = self.entry.backend.stream(stream)

    def set(self, name: str, value: Any) -> None:
        """Re-pack one parameter (by name) in place; the next launch uses it."""
        try:
            i = self.param_names.index(name)
        except ValueError:
            raise ArgumentError(f"{self.entry.kernel}: no parameter {name!r} to set; "
                                f"settable: {list(self.param_names)}") from None
        p = self.variant.abi.params[i]
        if p.kind == "pointer":
            value = pointer_value(value)
            if i in self._align_check and value % 16:
                raise ArgumentError(f"{self.entry.kernel}: {name} address 0x{value:x} is not 16-byte aligned; "
                                    f"the bound variant assumes {name}:16")
        self.layout.set_one(i, value)

    def _values(self, args: Sequence[Any]) -> list[Any]:
        if len(args) != len(self.param_names):
            raise ArgumentError(f"{self.entry.kernel}: the bound launcher takes {len(self.param_names)} values "
                                f"{list(self.param_names)}, got {len(args)}")
        out = []
        for p, v in zip(self.variant.abi.params, args):
            if p.kind == "pointer":
                try:
                    v = pointer_value(v)
                except (NotAPointer, TypeError) as exc:
                    raise ArgumentError(f"{self.entry.kernel}: parameter {p.name!r}: {exc}") from None
            elif p.type == "bf16":
                v = bf16_bits(v)
            out.append(v)
        return out

    def _explain(self, args: Sequence[Any], exc: BaseException) -> ArgumentError:
        if isinstance(exc, ArgumentError):
            return exc
        try:
            values = self._values(args)
        except ArgumentError as err:
            return err
        return ArgumentError(f"{self.entry.kernel}: {self.layout.explain(values, exc)}")

    def _misaligned(self, *packed: Any) -> None:
        for i in self._align_check:
            if packed[i] % 16:
                name = self.param_names[i]
                raise ArgumentError(f"{self.entry.kernel}: {name} address 0x{packed[i]:x} is not 16-byte aligned; "
                                    f"the bound variant assumes {name}:16")

    def _generic(self, args: Sequence[Any]) -> None:
        """Clusters / cooperative / PDL / scratch: pack if given, then the entry's full launch path."""
        e = self.entry
        if args:
            values = self._values(args)
            self._misaligned(*values)
            self.layout.pack(values)
        gx, gy, gz = self.grid
        s = self._g["S"]
        if e.scratch:
            blocks = gx * gy * gz * e.num_ctas
            key = stream_handle(self._stream_raw)
            for kind, size, align in e.scratch:
                self.layout.set_scratch(kind, e.pool.get(e.device, key, s, kind, blocks * size, align) if blocks else 0)
        err = e._raw(gx, gy, gz, s, self.layout)
        if err:
            e.failed(err, gx, gy, gz, s, self.layout)

    def _failed(self, err: Any) -> None:
        gx, gy, gz = self.grid
        self.entry.failed(err, gx, gy, gz, self._g["S"], self.layout)
