"""A plain kernel of a format-2.1 archive: its variants are read per target, for the devices that need them.

``arc.kernel(name)`` over a kernel built for several targets (``cuda:80``, ``cuda:90``, ``hip:gfx942``, ...)
used to parse every variant of every target before its first selection, although a device can only run
the variants of the targets its arch accepts (:func:`..select.may_run_on`: a cubin on its own major
version, PTX on newer GPUs with ``allow_ptx``, a HIP code object on its exact gfx arch). A format-2.1
archive keeps each kernel's variants of one target in a shard of their own, so :class:`LazyKernel` reads
only those:

* a launch, ``bind``, ``preload`` or ``select()`` on this machine's GPU sets the kernel up over the
  targets that some visible device may run (every device of the backend, so a process with two kinds
  of GPU still has one dispatcher, one plan and one cache: nothing is ever added to it later);
* ``select(..., device="cuda:90")`` (a device this machine may not have) answers from a kernel over that
  device's targets, made once per set of targets, without touching the launch path;
* whatever the selection or the arguments' checks refuse is refused again by the kernel over *every*
  variant (read then, once), so the error is the one a kernel over all of them raises: the same
  rejection list (every variant of every target, with its reason), the same argument errors;
* ``kernel.variants`` is still every variant (read when asked for).

The hot path is the eager kernel's: the dispatcher is made from the plan over the variants it can
select (``Kernel._setup``), and its misses go to the same ``Kernel._miss``. Where the machine's devices
cannot be listed (no driver, or a backend without a device count), or a loaded variant's binary arch is
not the one its target names (:func:`..select.target_agrees`: the rule above would not hold for it),
the kernel is set up over every variant, as an eager one.
"""

from __future__ import annotations

from typing import Any
from collections.abc import Callable, Mapping, Sequence

from ...errors import KarchiveError, NoMatchingVariantError
from ...format.manifest import Variant
from ..device import DeviceInfo
from ..select import may_run_on, target_agrees
from .kernel import REFUSALS, Host, Kernel

#: Attributes made by ``Kernel._setup``, which a lazy kernel makes when one of them is first asked for.
_SET_UP = frozenset({"plan", "param_names", "_candidates"})


class LazyKernel(Kernel):
    """A :class:`Kernel` that reads its variants per target when a device first needs them (module doc).

    ``load(targets)`` returns the variants of those targets (key order), ``load_all()`` every variant of
    the kernel (as the eager kernel gets them); ``targets`` and ``count`` come from the archive's index.
    """

    def __init__(self, archive: Host, name: str, targets: Sequence[str], count: int,
                 load: Callable[[Sequence[str]], list[Variant]], load_all: Callable[[], list[Variant]]) -> None:
        # Kernel.__init__ would parse every variant: the fields that need none are made here, the plan
        # by Kernel._setup once the targets are known (:meth:`_set_up_here`).
        self._init_fields(archive, name, None)
        self._targets = tuple(targets)
        self._count = count
        self._load = load
        self._load_all = load_all
        self._all: Kernel | None = None  # the kernel over every variant (errors, ``variants``), made once
        self._views: dict[tuple[str, ...], Kernel] = {}  # select(device=...) per set of targets

    def __getattr__(self, attr: str) -> Any:
        """``plan``, ``param_names`` and the candidates are made on first use; ``variants`` is every variant."""
        if attr in _SET_UP:
            self._set_up_here()
            return self.__dict__[attr]
        if attr == "variants":
            return self._every().variants
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {attr!r}")

    # -- the variants a kernel is set up over ----------------------------------------------------------
    def _every(self) -> Kernel:
        """The eager kernel over every variant: what explains a refusal, and ``variants``."""
        k = self._all
        if k is None:
            with self._lock:
                k = self._all
                if k is None:
                    k = Kernel(self.archive, self.name, self._load_all())
                    k.launch_path = self.launch_path
                    self._all = k
        return k

    def _targets_for(self, devices: Sequence[DeviceInfo]) -> tuple[str, ...]:
        allow_ptx = self.archive.allow_ptx
        return tuple(t for t in self._targets if any(may_run_on(t, d, allow_ptx) for d in devices))

    def _scoped(self, targets: tuple[str, ...]) -> tuple[Variant, ...] | None:
        """The variants of ``targets`` when a kernel over them selects what one over every variant does;
        None when it would not (every target, none, or a variant whose target does not name its arch)."""
        if not targets or len(targets) == len(self._targets):
            return None
        variants = tuple(self._load(targets))
        if not variants or not all(target_agrees(t, arch) for t, arch in
                                   {(str(v.target), v.abi.binary_arch) for v in variants}):
            return None
        return variants

    def _machine_devices(self) -> list[DeviceInfo] | None:
        """Every device the archive's backend sees (None: it cannot say, or there is no driver)."""
        try:
            backend = self.archive.backend()
            count = getattr(backend, "count", None)
            if type(count) is not int or count < 1:
                return None
            return [backend.device_info(i) for i in range(count)]
        except KarchiveError:  # no driver here: set up over every variant; the launch raises as it did
            return None

    def _set_up_here(self) -> None:
        """Make the plan over the variants this machine's devices can run (every variant when unknown)."""
        with self._lock:
            if "plan" in self.__dict__:
                return
            devices = self._machine_devices()
            variants = self._scoped(self._targets_for(devices)) if devices else None
            self._partial = variants is not None
            try:
                self._setup(variants if variants is not None else self._every().variants)
            except NoMatchingVariantError:  # parameter lists that disagree: as the eager kernel words it
                self._every()
                raise

    def _view(self, device: DeviceInfo) -> Kernel:
        """A kernel over the targets ``device`` may run, for ``select(device=...)``."""
        targets = self._targets_for([device])
        k = self._views.get(targets)
        if k is None:
            with self._lock:
                k = self._views.get(targets)
                if k is None:
                    variants = self._scoped(targets)
                    k = self._every() if variants is None else Kernel(self.archive, self.name, variants)
                    self._views[targets] = k
        return k

    # -- refusals: said by the kernel over every variant -----------------------------------------------
    def _explain(self, exc: Exception, args: Sequence[Any], kwargs: Mapping[str, Any],
                 device: DeviceInfo | int | str | None = None) -> None:
        """Raise what the kernel over every variant says of this call: the eager kernel's error (its
        rejection list names every variant of every target). Returns (the original error stands) where
        this kernel holds every variant already, or where that kernel accepts the call."""
        if "plan" in self.__dict__ and not self._partial and isinstance(device, (int, type(None))):
            return
        every = self._every()
        try:
            values, options = every._bind_call(args, dict(kwargs))
            infos = every._infos(values)
            on = every._argument_device(infos)
            if isinstance(device, str):
                device = DeviceInfo.describe_target(device)
            if isinstance(device, DeviceInfo):
                dev = device
            else:
                backend = every.archive.backend()
                dev = backend.device_info(device if isinstance(device, int) else
                                          backend.current_device() if on is None else on)
            every._select(dev, values, infos, options)
        except KarchiveError as err:
            raise err from None

    # -- the public calls ------------------------------------------------------------------------------
    def select(self, *args: Any, device: DeviceInfo | int | str | None = None, **kwargs: Any) -> Variant:
        """:meth:`Kernel.select`; a ``device`` named by a target or :class:`DeviceInfo` (a GPU this machine
        may not have) is answered from the variants of the targets it may run, read for it."""
        dev = device
        if isinstance(dev, str):
            try:
                dev = DeviceInfo.describe_target(dev)
            except KarchiveError:  # a bad target: refused where the eager kernel refuses it (after the arguments)
                return self._every().select(*args, device=device, **kwargs)
        if not isinstance(dev, DeviceInfo):
            return super().select(*args, device=device, **kwargs)
        view = self._view(dev)
        try:
            return view.select(*args, device=dev, **kwargs)
        except REFUSALS as exc:
            if view is not self._all:
                self._explain(exc, args, kwargs, dev)
            raise

    def __repr__(self) -> str:
        """As the eager kernel's (every variant and target, from the index), without reading them all."""
        from ...core.text import printable

        if "plan" in self.__dict__:
            names = self.param_names
        else:  # one target's variants name the parameters (all of them agree, or selection says so)
            names = tuple(p.name for p in self._load(self._targets[:1])[0].params)
        n = self._count
        return printable(f"<karchive.Kernel {self.name}({', '.join(names)}): {n} variant"
                         f"{'' if n == 1 else 's'} for {', '.join(sorted(self._targets))}, from {self.archive.name} "
                         f"{self.archive.version}>")

