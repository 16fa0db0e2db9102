"""TEST SUPPORT for Inductor on a GPU-less machine (torch with Inductor installed, CPU build): load an
Inductor-generated kernel module (tests/data/inductor) the way Inductor does (``_reload_python_module`` from a
file under a ``torchinductor_<user>`` directory), with Triton's driver replaced by tests/capture_fakes.py's
double, so ``CachingAutotuner`` compiles through the real ``triton.compile`` for cuda:90. Launching needs a CUDA
torch: tests/gpu/test_inductor_gpu.py does that on the device.
"""

from __future__ import annotations

import pathlib
import shutil
import uuid
from typing import Any

DATA = pathlib.Path(__file__).parent / "data" / "inductor"


def load_generated(name: str, root: pathlib.Path, user: str = "alice", edit: tuple[str, str] | None = None) -> Any:
    """The ``CachingAutotuner`` of sample ``name`` loaded as Inductor loads its modules, from
    ``root/torchinductor_<user>/xy/c<random>.py`` (so every load has another path and module name)."""
    from torch._inductor.runtime import triton_helpers
    from torch._inductor.runtime.compile_tasks import _reload_python_module

    triton_helpers.set_driver_to_gpu = lambda: None  # the fake driver is active; torch's check needs a real one
    key = "c" + uuid.uuid4().hex[:20]
    path = root / f"torchinductor_{user}" / key[1:3] / f"{key}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    text = (DATA / name).read_text()
    if edit is not None:
        assert edit[0] in text
        text = text.replace(*edit)
    path.write_text(text)
    mod = _reload_python_module(key, str(path))
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    kernels = [v for v in vars(mod).values() if isinstance(v, CachingAutotuner)]
    assert len(kernels) == 1
    return kernels[0]


class FakeLauncher:
    """What ``CachingAutotuner.run`` calls once it has one launcher: counts the launches."""

    def __init__(self, config: Any) -> None:
        self.config = config
        self.calls = 0
        self.cache_hash = "fake"
        self.n_regs = self.n_spills = self.shared = 0
        self.store_cubin = False

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        self.calls += 1


def copy_samples(dest: pathlib.Path) -> None:
    shutil.copytree(DATA, dest)
