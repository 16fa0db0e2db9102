"""``karchive.open(ref)``: an archive as a set of launchable kernels.

Opening reads the archive's tail (footer, index, manifest) and nothing else; binaries are read,
digest-checked and decompressed only when a variant is first launched (or preloaded) on a device, and
each (variant, device) module is loaded once, under a lock. No GPU, driver or framework is touched
until then, so opening and inspecting work on any machine.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .. import resolve
from ..core.text import plural, printable, table
from ..core.units import human_bytes
from ..errors import KernelNameError, NoDeviceError, NoMatchingVariantError
from ..format.autotune import AutotuneRecord
from ..format.heuristics import records_for as heuristics_records
from ..format.manifest import Manifest, Variant
from ..format.names import KernelIndex
from ..format.reader import ArchiveReader
from ..registry.options import OpenOptions
from .autotuned import AutotuneResolver, HeuristicsResolver
from .device import ptx_header
from .launch._lazy import TargetSource
from .launch.kernel import Kernel
from .select import DeviceFit

if TYPE_CHECKING:  # pragma: no cover
    from .backend import Backend

log = logging.getLogger("karchive.runtime")


class Archive:
    """The consumer's view of one archive: ``kernel(name)`` returns a dispatcher over its variants."""

    def __init__(
        self, reader: ArchiveReader, *, ref: str = "<archive>", allow_ptx: bool = False, backend: str | None = None
    ) -> None:
        self.reader = reader
        self.ref = ref
        # Variants are parsed (and schema-checked) per kernel on first use, and a format-2 archive reads
        # a kernel's manifest shard only then: a cold start that launches a few kernels of a large
        # archive pays for those kernels, not for the whole manifest.
        self.manifest: Manifest = reader.model
        self.allow_ptx = allow_ptx
        self._backend_name = backend
        self._backend: Backend | None = None
        self._lock = threading.RLock()
        self._kernels: dict[tuple[Any, ...], Kernel] = {}  # (name, benchmark, targets or None) -> its dispatcher
        self._functions: dict[tuple[str, int], Any] = {}
        self._ptx_headers: dict[str, tuple] = {}
        self._pool: Any = None
        self._index: KernelIndex | None = None  # kernel names by short name, made on the first lookup

    # -- inspection ------------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.manifest.name

    @property
    def version(self) -> str:
        return self.manifest.version

    def kernels(self) -> list[str]:
        return self.manifest.kernels()

    def variants(self, kernel: str | None = None) -> list[Variant]:
        """Every variant, or those of one kernel (named as :meth:`kernel` takes it; [] for none)."""
        if kernel is None:
            return list(self.manifest.variants)
        found = self._names().find(kernel)
        return self.manifest.variants_of(self.kernel_name(kernel)) if found else []

    def __repr__(self) -> str:
        n = len(self.manifest)
        return printable(
            f"<karchive.Archive {self.name} {self.version}: {n} variant{'' if n == 1 else 's'} of "
            f"{len(self.kernels())} kernel{'' if len(self.kernels()) == 1 else 's'}, from {self.ref}>"
        )

    def summary(self) -> str:
        """What the archive holds, readable (``print(arc.summary())``): one line per kernel with its targets
        and specialisations, as ``karchive inspect`` shows them (that command has the per-variant table)."""
        rows = []
        for name in self.kernels():
            vs = self.variants(name)
            values: dict[str, set] = {}  # constexpr name -> values; ints fixed to 1 count separately
            fixed: dict[str, int] = {}
            for v in vs:
                for p in v.params:
                    if p.equal_to_1:
                        fixed[p.name] = fixed.get(p.name, 0) + 1
                    elif p.is_constexpr:
                        values.setdefault(p.name, set()).add(p.constexpr)
            spec = [f"{k}==1" + ("" if n == len(vs) else f" (in {n})") for k, n in fixed.items()]
            spec += [f"{k}=" + "|".join(str(x) for x in sorted(vals, key=_value_order)) for k, vals in values.items()]
            rows.append(
                [
                    name,
                    plural(len(vs), "variant"),
                    ", ".join(sorted({str(v.target) for v in vs})),
                    " ".join(spec) or "-",
                ]
            )
        head = (
            f"{self.name} {self.version}: {plural(len(self.manifest), 'variant')} of "
            f"{plural(len(rows), 'kernel')} ({human_bytes(self.reader.source.size)}) from {self.ref}"
        )
        return (
            printable(head)
            + "\n"
            + table(["kernel", "variants", "targets", "specialisations"], rows)
            + "\n\narc.kernel(NAME) gives a launcher; arc.variants(NAME) lists the variants; `karchive inspect` "
            "shows every variant."
        )

    def kernel(self, name: str, *, benchmark: bool = False, targets: Iterable[str] | None = None) -> Kernel:
        """The dispatcher for ``name`` (created once per archive, and per ``targets``).

        Always a :class:`Kernel`. One captured from ``@triton.autotune`` (the manifest holds autotune records
        for it) has an :class:`AutotuneResolver`: each call uses the config recorded for its autotune key.
        With ``benchmark=True`` a key that was never tuned is timed across the prebuilt configs instead of
        taking the fallback rule's pick. A kernel with heuristics records (``@triton.heuristics``) takes
        the computed meta-parameters from the recorded case that matches each call
        (a :class:`HeuristicsResolver`, or inside the :class:`AutotuneResolver`).

        ``targets`` (``["cuda:90"]``) limits the dispatcher to the variants built for those targets: a
        process that knows its device reads only those (a format-2.1 archive keeps each kernel's
        variants of one target in a shard of their own, so opening and selecting in an archive of
        100,000 variants parses only the device's candidates).
        """
        only = tuple(sorted(set(targets))) if targets is not None else None
        key = (name, benchmark, only)
        k = self._kernels.get(key)
        if k is None:
            with self._lock:
                k = self._kernels.get(key)
                if k is None:
                    canonical = (self.kernel_name(name), benchmark, only)  # an alias and its name share one
                    k = self._kernels.get(canonical)
                    if k is None:
                        k = self._kernels[canonical] = self._new_kernel(canonical[0], benchmark, only)
                    self._kernels[key] = k
        return k

    def _new_kernel(self, name: str, benchmark: bool, targets: tuple[str, ...] | None) -> Kernel:
        """The dispatcher :meth:`kernel` caches: over ``targets``' variants, else lazy per target where the
        archive allows it, else over every variant."""
        if targets is not None:
            variants = sorted((v for t in targets for v in self.manifest.variants_of(name, t)), key=lambda v: v.key)
            if not variants:
                have = tuple(t for s in self.manifest.summary() if s.kernel == name for t, _ in s.targets)
                raise NoMatchingVariantError(
                    f"{self.ref}: kernel {name!r} has no variant for {', '.join(targets) or 'no target'} "
                    f"(it has {', '.join(have)})",
                    kernel=name,
                    rejections=tuple((t, "built for a target not asked for") for t in have),
                    param="targets",
                    values=tuple(map(repr, have)),
                )
            return self._make_kernel(name, variants, benchmark)
        k = self._lazy_kernel(name)
        if k is not None:
            return k
        variants = self.variants(name)
        if not variants:
            raise KernelNameError(
                f"{self.ref}: kernel {name!r} has no variants", kernel=name, available=tuple(self.kernels())
            )
        return self._make_kernel(name, variants, benchmark)

    def _lazy_kernel(self, name: str) -> Kernel | None:
        """A kernel that reads its variants per target when a device first needs them (launch/_lazy.py),
        where the archive stores them so (format 2.1) and the kernel has several targets and no autotune
        or heuristics records (their resolvers choose among every variant); else None."""
        manifest = self.manifest
        if not self.reader.sharded or not self.reader.split_by_target(name):
            return None
        summary = manifest.summary_of(name)
        if (
            summary is None
            or len(summary.targets) < 2
            or heuristics_records(manifest.heuristics, name)
            or any(isinstance(r, dict) and r.get("kernel") == name for r in manifest.autotune or [])
        ):
            return None

        def load(targets: Iterable[str]) -> list[Variant]:
            return sorted((v for t in targets for v in manifest.variants_of(name, t)), key=lambda v: v.key)

        return Kernel.lazy(
            self,
            name,
            TargetSource([t for t, _ in summary.targets], summary.variants, load, lambda: manifest.variants_of(name)),
        )

    def _make_kernel(self, name: str, variants: list[Variant], benchmark: bool, cls: type[Kernel] = Kernel) -> Kernel:
        """A dispatcher over ``variants``, with the resolver the manifest's records call for (a tuned one of
        type ``cls``: a served call site's own)."""
        k = Kernel(self, name, variants)
        records = [
            AutotuneRecord.from_json(r)
            for r in self.manifest.autotune or []
            if isinstance(r, dict) and r.get("kernel") == name
        ]
        heuristics = heuristics_records(self.manifest.heuristics, name)
        # The resolver chooses among subsets of ``k``'s variants; the kernel handed out asks it first.
        if records:
            return cls(self, name, variants, AutotuneResolver(k, records, benchmark=benchmark, heuristics=heuristics))
        if heuristics:
            return Kernel(self, name, variants, HeuristicsResolver(k, heuristics))
        return k

    def kernel_name(self, name: str) -> str:
        """The archive's name for the kernel ``name`` asks for: the name itself (``module:qualname``, or a
        bare name in an archive from before qualified names), or the one kernel whose short name it is.
        :class:`KernelNameError` when none is, or when several are (it lists their qualified names)."""
        index = self._names()
        have = index.names
        found = index.find(name)
        if len(found) == 1:
            return found[0]
        if found:
            raise KernelNameError(
                f"{self.ref} has {len(found)} kernels named {name!r} (in different modules): "
                f"{', '.join(found)}; ask for one by its qualified name, e.g. arc.kernel({found[0]!r})",
                kernel=name,
                available=tuple(found),
            )
        raise KernelNameError(
            f"{self.ref} has no kernel named {name!r}; it has: {', '.join(have) or '(none)'}",
            kernel=name if isinstance(name, str) else repr(name),
            available=tuple(have),
        )

    def _names(self) -> KernelIndex:
        index = self._index
        if index is None:
            index = self._index = KernelIndex(self.kernels())
        return index

    def __getitem__(self, name: str) -> Kernel:
        return self.kernel(name)

    # -- device side -----------------------------------------------------------------------------------
    def backend(self) -> Backend:
        """The driver backend for this archive's variants (CUDA before HIP), initialised on first use."""
        b = self._backend
        if b is None:
            from .backend import first_available

            if self._backend_name:
                names = [self._backend_name]
            else:
                present = self.manifest.backends()
                names = [n for n in ("cuda", "hip") if n in present] or ["cuda"]
            b = self._backend = first_available(names)
        return b

    def scratch_pool(self) -> Any:
        if self._pool is None:
            with self._lock:
                if self._pool is None:
                    from .scratch import ScratchPool

                    self._pool = ScratchPool(self.backend())
        return self._pool

    def ptx_header(self, variant: Variant) -> tuple:
        """(PTX ISA version, .target) of a variant's stored PTX (read once)."""
        h = self._ptx_headers.get(variant.key)
        if h is None:
            h = self._ptx_headers[variant.key] = ptx_header(self.reader.read(variant.ir["ptx"].path))
        return h

    def load_function(self, variant: Variant, fit: DeviceFit, device: int) -> Any:
        """Read + verify + decompress the binary and load it on ``device``, once per (variant, device)."""
        key = (variant.key, device)
        fn = self._functions.get(key)
        if fn is not None:
            return fn
        with self._lock:
            fn = self._functions.get(key)
            if fn is not None:
                return fn
            backend = self.backend()
            if fit.mode == "ptx":
                image = self.reader.read(variant.ir["ptx"].path) + b"\0"
                version, target = self.ptx_header(variant)
                log.warning(
                    "karchive: JIT-compiling PTX (%s, ISA %s) of %s variant %s for %s; "
                    "ship a cubin for this arch to avoid it",
                    target,
                    version,
                    variant.kernel,
                    variant.key[:12],
                    backend.device_info(device),
                )
            else:
                image = self.reader.read(variant.binary.path)
            fn = backend.load(device, image, variant.abi.entry, variant.abi.shared, variant.abi.num_ctas)
            self._functions[key] = fn
            return fn

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
        close = getattr(self.reader.source, "close", None)
        if callable(close):
            close()


def _value_order(value: Any) -> tuple[int, Any]:
    """Numbers first, in numeric order (256 before 1024), then anything else by its text."""
    return (0, value) if isinstance(value, (int, float)) else (1, str(value))


def open_archive(
    ref: str | os.PathLike,
    options: OpenOptions | None = None,
    *,
    allow_ptx: bool = False,
    backend: str | None = None,
    **fields: Any,
) -> Archive:
    """Open an archive for launching: a local path, any fsspec URL, or a registry ``name[@version]``.

    ``options`` (:class:`~karchive.registry.options.OpenOptions`) say how the reference is opened;
    keyword arguments replace single fields, so ``karchive.open(ref, trust="policy.toml", fetch="lazy")``
    and ``karchive.open(ref, OpenOptions(trust=..., fetch=...))`` are the same call: ``registry``,
    ``lockfile``, ``cache_dir``, ``fetch`` and ``allow_downgrade`` apply to registry references,
    ``storage_options`` to URLs and remote registries, ``limits`` to the reader, and ``trust`` (a trust
    policy or its file; default ``$KARCHIVE_TRUST_POLICY``) refuses an archive its signatures do not
    satisfy, before anything is loaded (:func:`karchive.resolve.open`).

    ``allow_ptx`` lets variants whose cubin does not fit the GPU run from their PTX through the driver's
    JIT (logged; only when the driver reads that PTX ISA version). ``backend`` forces "cuda" or "hip".
    """
    if backend not in (None, "cuda", "hip"):
        raise NoDeviceError(f"backend={backend!r}: karchive launches on 'cuda' or 'hip'", backend=str(backend))
    reader = resolve.open(ref, OpenOptions.of(options, **fields))
    return Archive(reader, ref=os.fspath(ref), allow_ptx=allow_ptx, backend=backend)
