"""A plain kernel of a format-2.1 archive: its variants are read per target, for the devices that need them.

``arc.kernel(name)`` over a kernel built for several targets (``cuda:80``, ``cuda:90``, ``hip:gfx942``, ...)
used to parse every variant of every target before its first selection, although a device can only run
the variants of the targets its arch accepts (:func:`..select.may_run_on`: a cubin on its own major
version, PTX on newer GPUs with ``allow_ptx``, a HIP code object on its exact gfx arch). A format-2.1
archive keeps each kernel's variants of one target in a shard of their own, so a kernel made by
``Kernel.lazy`` reads only those (a :class:`TargetSource` behind it; still the one kernel type):

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
select (``Kernel._setup``), and its misses go to the same ``Kernel._miss``; only a refusal (on its
way out) and ``select`` for a named device ask the source. Where the machine's devices
cannot be listed (no driver, or a backend without a device count), or a loaded variant's binary arch is
not the one its target names (:func:`..select.target_agrees`: the rule above would not hold for it),
the kernel is set up over every variant, as an eager one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from operator import attrgetter
from typing import Any

from ...errors import ArgumentError, KarchiveError, NoMatchingVariantError
from ...format.manifest import Variant, target_labels
from ..device import DeviceInfo
from ..select import may_run_on, target_agrees

#: A :class:`.kernel.Kernel` (not imported: kernel.py imports this module, and a circle of imports,
#: type-only ones included, is what tests/test_import_cycles.py refuses).
Kernel = Any

_BINARY_ARCH = attrgetter("abi.binary_arch")

#: What a kernel's argument checks and selection raise for a call (``Kernel._explain`` sees them first):
#: the errors whose words depend on the variants the kernel was set up over.
REFUSALS = (ArgumentError, NoMatchingVariantError)


class TargetSource:
    """Where a lazy :class:`Kernel` reads its variants: per target, from the archive (module doc).

    ``load(targets)`` returns the variants of those targets (key order), ``load_all()`` every variant of
    the kernel (as the eager kernel gets them); ``targets`` and ``count`` come from the archive's index.
    """

    def __init__(
        self,
        targets: Sequence[str],
        count: int,
        load: Callable[[Sequence[str]], list[Variant]],
        load_all: Callable[[], list[Variant]],
    ) -> None:
        self.targets = tuple(targets)
        self.count = count
        self._load = load
        self._load_all = load_all
        self._lock = threading.RLock()
        self._all: Kernel | None = None  # the kernel over every variant (refusals, ``variants``), made once
        self._views: dict[tuple[str, ...], Kernel] = {}  # select(device=...) per set of targets
        #: The kernel was set up over some targets only (None: not set up yet).
        self.partial: bool | None = None

    # -- the variants a kernel is set up over ----------------------------------------------------------
    def every(self, kernel: Kernel) -> Kernel:
        """The eager kernel over every variant: what explains a refusal, and ``kernel.variants``."""
        k = self._all
        if k is None:
            with self._lock:
                k = self._all
                if k is None:
                    k = type(kernel)(kernel.archive, kernel.name, self._load_all())
                    k.launch_path = kernel.launch_path
                    self._all = k
        return k

    def _targets_for(self, kernel: Kernel, devices: Sequence[DeviceInfo]) -> tuple[str, ...]:
        allow_ptx = kernel.archive.allow_ptx
        return tuple(t for t in self.targets if any(may_run_on(t, d, allow_ptx) for d in devices))

    def _scoped(self, targets: tuple[str, ...]) -> tuple[Variant, ...] | None:
        """The variants of ``targets`` when a kernel over them selects what one over every variant does;
        None when it would not (every target, none, or a variant whose target does not name its arch)."""
        if not targets or len(targets) == len(self.targets):
            return None
        variants = tuple(self._load(targets))
        if not variants or not all(
            target_agrees(t, arch) for t, arch in set(zip(target_labels(variants), map(_BINARY_ARCH, variants)))
        ):
            return None
        return variants

    @staticmethod
    def _machine_devices(kernel: Kernel) -> list[DeviceInfo] | None:
        """Every device the archive's backend sees (None: it cannot say, or there is no driver)."""
        try:
            backend = kernel.archive.backend()
            count = getattr(backend, "count", None)
            if type(count) is not int or count < 1:
                return None
            return [backend.device_info(i) for i in range(count)]
        except KarchiveError:  # no driver here: set up over every variant; the launch raises as it did
            return None

    def set_up(self, kernel: Kernel) -> None:
        """Make ``kernel``'s plan over the variants this machine's devices can run (every variant when
        that is unknown): ``Kernel._setup``, once."""
        with self._lock:
            if kernel._plan is not None:
                return
            devices = self._machine_devices(kernel)
            variants = self._scoped(self._targets_for(kernel, devices)) if devices else None
            self.partial = variants is not None
            try:
                kernel._setup(variants if variants is not None else self.every(kernel).variants)
            except NoMatchingVariantError:  # parameter lists that disagree: as the eager kernel words it
                self.every(kernel)
                raise

    def view(self, kernel: Kernel, device: DeviceInfo) -> Kernel:
        """A kernel over the targets ``device`` may run, for ``select(device=...)``."""
        targets = self._targets_for(kernel, [device])
        k = self._views.get(targets)
        if k is None:
            with self._lock:
                k = self._views.get(targets)
                if k is None:
                    variants = self._scoped(targets)
                    k = self.every(kernel) if variants is None else type(kernel)(kernel.archive, kernel.name, variants)
                    self._views[targets] = k
        return k

    # -- what the kernel asks ----------------------------------------------------------------------------
    def select(self, kernel: Kernel, args: Sequence[Any], kwargs: dict[str, Any], device: DeviceInfo | str) -> Variant:
        """``kernel.select`` for a device named by a target or a :class:`DeviceInfo` (a GPU this machine may
        not have): answered by the kernel over the variants of the targets it may run, read for it."""
        try:
            dev = DeviceInfo.describe_target(device) if isinstance(device, str) else device
        except KarchiveError:  # a bad target: refused where the eager kernel refuses it (after the arguments)
            return self.every(kernel).select(*args, device=device, **kwargs)
        view = self.view(kernel, dev)
        try:
            return view.select(*args, device=dev, **kwargs)
        except REFUSALS as exc:
            if view is not self._all:
                self.explain(kernel, exc, args, kwargs, dev)
            raise

    def explain(
        self,
        kernel: Kernel,
        exc: Exception,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        device: DeviceInfo | int | str | None = None,
    ) -> None:
        """Raise what the kernel over every variant says of this call: the eager kernel's error (its
        rejection list names every variant of every target). Returns (the original error stands) where
        ``kernel`` holds every variant already, or where that kernel accepts the call."""
        if self.partial is False and isinstance(device, (int, type(None))):
            return
        every = self.every(kernel)
        try:
            values, options = every._bind_call(args, dict(kwargs))
            infos = every._infos(values)
            every._select(every._asked_device(device, infos), values, infos, options)
        except KarchiveError as err:
            raise err from None

    def param_names(self, kernel: Kernel) -> tuple[str, ...]:
        """The parameter names, from the plan when made, else from one target's variants (all agree)."""
        if kernel._plan is not None:
            return kernel.param_names
        return tuple(p.name for p in self._load(self.targets[:1])[0].params)
