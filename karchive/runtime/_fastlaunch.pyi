"""Types of the compiled launcher (``_fastlaunch.c``), so that the Python that calls it is checked.

Keyword names and argument types follow each ``PyArg_ParseTupleAndKeywords`` format in the C file;
a change there changes this stub in the same commit. Callables the C code calls back are ``Callable[...,
Any]``: their contracts are written in :mod:`karchive.runtime.launch._native`, which hands them over.
"""

from collections.abc import Callable
from typing import Any, final

ABI_VERSION: int
MAX_SLOTS: int

@final
class Entry:
    """One variant loaded on one device, as the compiled launcher needs it."""

    def __new__(
        cls, launch: int, function: int, block_x: int, shared: int, device: int,
        slots: tuple[tuple[Any, ...], ...], buffer_size: int, meta: dict[str, Any],
        python_launch: Callable[..., Any] | None, failed: Callable[..., Any],
        explain: Callable[..., BaseException], param_offsets: tuple[int, ...] = ...,
        desc_type: type | None = ...,
    ) -> Entry: ...
    @property
    def meta(self) -> dict[str, Any]: ...

@final
class Dispatcher:
    """``kernel[grid](...)`` of one kernel: bind, key, look up, pack, launch (``len()``: resolved keys)."""

    def __new__(
        cls, names: tuple[str, ...], roles: bytes, flags: bytes, n_params: int, call_positions: tuple[int, ...],
        miss: Callable[..., Any], slow: Callable[..., Any], grid_of: Callable[..., Any],
        grid_dims: Callable[..., Any], stream_handle: Callable[[Any], int], pointer_info: Callable[..., Any],
        mixed_key: Callable[..., Any], missing: object, qualname: str,
    ) -> Dispatcher: ...
    def __call__(self, grid: Any, /, *args: Any, **kwargs: Any) -> Any: ...
    def __len__(self) -> int: ...
    def clear(self) -> None: ...

@final
class GridLaunch:
    """``kernel[grid]``: call it with the kernel's arguments."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...

class Bound:
    """Base of the compiled path's bound launcher: ``bound(*values)`` packs and launches in C."""

    def __call__(self, *values: Any) -> None: ...
    def launch(self, *values: Any) -> None: ...
    def _configure(
        self, launch: int, function: int, grid: tuple[int, int, int], block_x: int, shared: int, stream: int,
        kernel_params: int, buffer: int, buffer_size: int, slots: tuple[tuple[str, int, bool], ...],
        pointer_value: Callable[[Any], int],
    ) -> None: ...
    def _set_grid(self, gx: int, gy: int, gz: int, /) -> None: ...
    def _set_stream(self, stream: int, /) -> None: ...

@final
class _Subscript:
    """The type of :data:`subscript` (``Subscript`` in C; not exported): binds like a function."""

    def __get__(self, instance: Any, owner: type | None = None, /) -> Any: ...
    def __call__(self, kernel: Any, grid: Any, /) -> GridLaunch: ...

#: ``Kernel.__getitem__`` on the compiled path: ``kernel[grid]`` is a :class:`GridLaunch` calling ``kernel._run``.
subscript: _Subscript

def set_tensor_type(tp: type | None, /) -> None: ...
def set_tensor_subtype(tp: type | None, /) -> None: ...
def set_tensor_abi(
    fns: tuple[int, int, int, int] | None, host_type: int = ..., gpu_type: int = ..., dtypes: dict[int, Any] = ...,
    direct: int = ..., /,
) -> None: ...
def tensor_abi_activate() -> None: ...
def set_tensor_stream(getter: Callable[[int], int] | None, address: int = ..., /) -> None: ...
def tensor_stream_state() -> int | None: ...
def tensor_abi_codes(
    t: Any, fns: tuple[int, int, int, int], /,
) -> tuple[int | None, int | None, int | None, int | None]: ...
def tensor_abi_read(t: Any, /) -> tuple[int, Any, int] | None: ...
def forward_address() -> int: ...
def noop_address() -> int: ...
def forward_to(target: Callable[..., Any] | None, /) -> None: ...
def time_launches(
    launch: int, function: int, grid: tuple[int, int, int], block_x: int, shared: int, stream: int,
    kernel_params: int, count: int,
) -> tuple[float, int]: ...
