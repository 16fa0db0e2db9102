"""Types of the compiled launcher (``_fastlaunch.c``), so that the Python that calls it is checked.

Keyword names and argument types follow each ``PyArg_ParseTupleAndKeywords`` format in the C file;
a change there changes this stub in the same commit. The whole C <-> Python contract: the C code calls
back only the methods of a dispatcher's :class:`DispatcherOwner` and of an entry's :class:`EntryOwner`
(``c-ext/fastlaunch.h`` says the same from the C side; :mod:`karchive.runtime.launch._native` implements them).
"""

from collections.abc import Callable, Sequence
from typing import Any, Protocol, final

ABI_VERSION: int
MAX_SLOTS: int

class CallTarget(Protocol):
    """What ``DispatcherOwner.miss`` answers (``launch.kernel.CallTarget``)."""

    native: Entry  # the variant's entry
    stream_fn: Callable[[int], int] | None  # device -> current stream handle; None: stream 0
    extra: tuple[tuple[int, Any], ...] | None  # (parameter index, value) added to every call with this key
    remember: bool  # False: launch this call, keep no key

class DispatcherOwner(Protocol):
    """The Python side of one dispatcher; its methods are read once, when the Dispatcher is made."""

    #: the type of a miss the owner answered itself (``miss`` returns one: its ``result`` is the call's result and
    #: nothing is remembered); None: every miss returns a CallTarget
    done_type: type | None
    def miss(self, grid: Any, args: tuple[Any, ...], kwargs: dict[str, Any], /) -> CallTarget | Any: ...
    def slow(self, grid: Any, args: tuple[Any, ...], kwargs: dict[str, Any], /) -> Any: ...
    def grid(
        self,
        grid: Any,
        meta: dict[str, Any],
        values: tuple[Any, ...],
        /,
    ) -> tuple[int, int, int, tuple[tuple[int, ...], tuple[str, ...]] | None]: ...
    def stream_handle(self, obj: Any, /) -> int: ...
    def pointer_info(self, obj: Any, /) -> tuple[int, Any, int | None]: ...
    def mixed_key(self, obj: Any, /) -> Any: ...

class EntryOwner(Protocol):
    """The Python side of one Entry (``launch._record.LaunchEntry``)."""

    def failed(self, err: int, gx: int, gy: int, gz: int, stream: Any, values: Sequence[Any], /) -> None: ...
    def explain(self, values: Sequence[Any], exc: BaseException | None, /) -> BaseException: ...
    def launch_dims(self, gx: int, gy: int, gz: int, stream: Any, values: Sequence[Any], /) -> None: ...
    def scratch_for(self, index: int, nbytes: int, stream: int, /) -> tuple[int, int]: ...

@final
class Entry:
    """One variant loaded on one device, as the compiled launcher needs it."""

    def __new__(
        cls,
        launch: int,
        function: int,
        block_x: int,
        shared: int,
        device: int,
        slots: tuple[tuple[Any, ...], ...],
        buffer_size: int,
        meta: dict[str, Any],
        owner: EntryOwner,
        via_python: bool,
        param_offsets: tuple[int, ...] = ...,
        desc_type: type | None = ...,
        launch_ex: int = ...,
        cluster: tuple[int, int, int] = ...,
        cooperative: bool = ...,
        pdl: bool = ...,
    ) -> Entry: ...
    @property
    def meta(self) -> dict[str, Any]: ...
    #: What a launch of this entry returns (None until set; ``del`` sets None again).
    result: Any
    #: None, or ``(obj, name, value)``: every launch first does ``setattr(obj, name, value)`` (``del``: None).
    effect: tuple[Any, str, Any] | None

@final
class Dispatcher:
    """``kernel[grid](...)`` of one kernel: bind, key, look up, pack, launch (``len()``: resolved keys)."""

    def __new__(
        cls,
        names: tuple[str, ...],
        roles: bytes,
        flags: bytes,
        n_params: int,
        call_positions: tuple[int, ...],
        owner: DispatcherOwner,
        missing: object,
        qualname: str,
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
        self,
        launch: int,
        function: int,
        grid: tuple[int, int, int],
        block_x: int,
        shared: int,
        stream: int,
        kernel_params: int,
        buffer: int,
        buffer_size: int,
        slots: tuple[tuple[str, int, bool], ...],
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
    fns: tuple[int, int, int, int] | None,
    host_type: int = ...,
    gpu_type: int = ...,
    dtypes: dict[int, Any] = ...,
    direct: int = ...,
    /,
) -> None: ...
def tensor_abi_activate() -> None: ...
def set_tensor_stream(getter: Callable[[int], int] | None, address: int = ..., /) -> None: ...
def tensor_stream_state() -> int | None: ...
def tensor_abi_codes(
    t: Any,
    fns: tuple[int, int, int, int],
    /,
) -> tuple[int | None, int | None, int | None, int | None]: ...
def tensor_abi_read(t: Any, /) -> tuple[int, Any, int] | None: ...
def forward_address() -> int: ...
def noop_address() -> int: ...
def forward_ex_address() -> int: ...
def forward_to(target: Callable[..., Any] | None, /) -> None: ...
def time_launches(
    launch: int,
    function: int,
    grid: tuple[int, int, int],
    block_x: int,
    shared: int,
    stream: int,
    kernel_params: int,
    count: int,
) -> tuple[float, int]: ...
