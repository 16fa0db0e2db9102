"""On this machine there is genuinely no GPU: opening and selecting work, launching says what is missing.

Also: ``import karchive`` and the whole open -> kernel -> select -> launch-attempt path import neither
triton nor torch (checked in a fresh interpreter where both are made unimportable).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap

import pytest
from runtime_support import ROOT

import karchive
from karchive.errors import NoDeviceError
from karchive.runtime import backend as backend_mod


def _has_gpu() -> bool:
    try:
        from cuda.bindings import driver

        return driver.cuInit(0)[0] == 0
    except Exception:
        return False


def _has_cuda_python() -> bool:
    try:
        return (
            importlib.util.find_spec("cuda.bindings") is not None or importlib.util.find_spec("cuda.cuda") is not None
        )
    except ImportError:  # no "cuda" package at all
        return False


needs_no_gpu = pytest.mark.skipif(_has_gpu(), reason="this machine has a GPU; the no-device behaviour cannot show")
needs_cuda_python = pytest.mark.skipif(
    not _has_cuda_python(),
    reason="cuda-python is not installed, so a launch stops at the missing package before it looks for libcuda "
    "(test_launch_without_cuda_python_names_the_package covers that)",
)

BLOCKER = textwrap.dedent("""
    import sys
    class _Block:
        def __init__(self, names): self.names = names
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in self.names:
                raise ImportError(f"{name} is blocked for this test")
    sys.meta_path.insert(0, _Block(BLOCKED))
""")


def _child(code: str, blocked: list[str]) -> dict:
    src = f"BLOCKED = {blocked!r}\n" + BLOCKER + textwrap.dedent(code)
    r = subprocess.run(
        [sys.executable, "-c", src],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_import_karchive_is_light():
    out = _child(
        """
        import json, sys, time
        t = time.perf_counter()
        import karchive
        ms = (time.perf_counter() - t) * 1e3
        heavy = sorted(m for m in sys.modules if m.split(".")[0] in
                       ("triton", "torch", "cuda", "fsspec", "zstandard", "numpy", "hip", "jax", "cupy"))
        print(json.dumps({"heavy": heavy, "ms": ms}))
    """,
        [],
    )
    assert out["heavy"] == []


def test_load_and_launch_path_imports_neither_triton_nor_torch(cuda_archive):
    out = _child(
        f"""
        import json, sys
        import karchive
        from karchive.runtime import DeviceInfo
        from karchive.errors import NoDeviceError
        arc = karchive.open({str(cuda_archive)!r})
        add = arc.kernel("add_kernel")
        v = add.select(0x10000, 0x20000, 0x30000, 100, device=DeviceInfo.describe_target("cuda:90"))
        try:
            add[(1,)](0x10000, 0x20000, 0x30000, 100)   # no GPU here: NoDeviceError, but the whole path ran
            launched = "launched"
        except NoDeviceError as exc:
            launched = str(exc)
        bad = sorted(m for m in sys.modules if m.split(".")[0] in ("triton", "torch"))
        print(json.dumps({{"bad": bad, "variant": v.key, "launched": launched}}))
    """,
        ["triton", "torch"],
    )
    assert out["bad"] == []
    assert len(out["variant"]) == 64


@needs_no_gpu
@needs_cuda_python
def test_launch_without_driver_names_libcuda(cuda_archive, monkeypatch):
    monkeypatch.setattr(backend_mod, "_backends", {})
    monkeypatch.setattr(backend_mod, "_failures", {})
    add = karchive.open(str(cuda_archive)).kernel("add_kernel")
    with pytest.raises(NoDeviceError, match=r"libcuda\.so"):
        add[(1,)](0x10000, 0x20000, 0x30000, 100)
    with pytest.raises(NoDeviceError, match=r"libcuda\.so"):  # remembered: fails fast the second time
        add.bind((1,), 0x10000, 0x20000, 0x30000, 100)


def test_launch_without_cuda_python_names_the_package(cuda_archive):
    out = _child(
        f"""
        import json
        import karchive
        from karchive.errors import NoDeviceError
        add = karchive.open({str(cuda_archive)!r}).kernel("add_kernel")
        try:
            add[(1,)](0x10000, 0x20000, 0x30000, 100)
            msg = "launched"
        except NoDeviceError as exc:
            msg = str(exc)
        print(json.dumps({{"msg": msg}}))
    """,
        ["cuda"],
    )
    assert "cuda-python" in out["msg"] and "karchive[cuda]" in out["msg"]


def test_hip_archive_without_hip_python_names_the_package(monkeypatch):
    monkeypatch.setattr(backend_mod, "_backends", {})
    monkeypatch.setattr(backend_mod, "_failures", {})
    try:
        import hip  # noqa: F401

        pytest.skip("hip-python is installed here")
    except ImportError:
        pass
    with pytest.raises(NoDeviceError, match="hip-python is not installed"):
        backend_mod.get_backend("hip")
