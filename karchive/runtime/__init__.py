"""Consumer side: open an archive and launch its kernels through the driver, with no Triton and no torch.

``karchive.open(ref)`` -> :class:`Archive`; ``archive.kernel(name)`` -> :class:`Kernel`;
``kernel[grid](*args, **constexprs)`` launches; ``kernel.bind(grid, *args)`` -> :class:`BoundLauncher`.
Importing this package imports no GPU bindings: the driver is initialised on the first launch.
"""

from .archive import Archive, open_archive
from .device import DeviceInfo
from .launch._record import BoundLauncher
from .launch.kernel import Kernel

__all__ = ["Archive", "BoundLauncher", "DeviceInfo", "Kernel", "open_archive"]
