"""The Triton release venvs of tools/tritons.sh and the probe spec they build (a plain module: the CPU test
tests/test_triton_releases.py and the GPU fixture script tests/gpu/build_triton_probes.py both use it)."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
from dataclasses import dataclass

ROOT = pathlib.Path(__file__).resolve().parent.parent
#: The probe kernels and their build spec (every target karchive builds).
PROBES = ROOT / "tests" / "data" / "probes"
#: Where tools/tritons.sh makes one venv per Triton minor.
VENVS = pathlib.Path(os.environ.get("KARCHIVE_TRITON_VENVS", ROOT / ".venv-triton"))
#: kernel -> what it probes (every one is built for every target of build.toml).
KERNELS = {
    "strided_kernel": "pointer arithmetic",
    "masked_kernel": "masked loads",
    "atomic_kernel": "tl.atomic_add",
    "dot_kernel": "tl.dot",
    "libdevice_kernel": "libdevice math",
    "descriptor_kernel": "device-side tensor descriptor (global scratch)",
}
TARGETS = ("cuda:80", "cuda:90", "hip:gfx942")


@dataclass(frozen=True)
class Venv:
    minor: str  # "3.6"
    version: str  # "3.6.0", from the installed distribution's metadata directory
    python: pathlib.Path

    @property
    def key(self) -> tuple[int, ...]:
        return tuple(int(p) for p in self.minor.split("."))


def floor() -> str:
    """The oldest Triton pyproject.toml allows ("triton>=X.Y", stated there once)."""
    m = re.search(r'"triton>=(\d+\.\d+)', (ROOT / "pyproject.toml").read_text())
    assert m, "pyproject.toml names no triton>=X.Y"
    return m.group(1)


def venvs(base: pathlib.Path = VENVS) -> list[Venv]:
    """The complete venvs under ``base`` (tools/tritons.sh writes its stamp last), oldest Triton first."""
    found = []
    if base.is_dir():
        for d in base.iterdir():
            python = d / "bin" / "python"
            if not (
                python.is_file() and (d / "karchive-tritons.stamp").is_file() and re.fullmatch(r"\d+\.\d+", d.name)
            ):
                continue
            dists = sorted(d.glob("lib/python*/site-packages/triton-*.dist-info"))
            if len(dists) != 1:
                continue
            version = dists[0].name[len("triton-") : -len(".dist-info")]
            found.append(Venv(d.name, version, python))
    return sorted(found, key=lambda v: v.key)


def build(
    venv: Venv, spec: pathlib.Path, out: pathlib.Path, *, cwd: pathlib.Path, env: dict[str, str], jobs: int = 2
) -> subprocess.CompletedProcess:
    """``karchive build`` with ``venv``'s interpreter (its Triton), in a fresh process."""
    r = subprocess.run(
        [str(venv.python), "-m", "karchive", "build", str(spec), "-o", str(out), "-j", str(jobs)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if r.returncode != 0:
        raise AssertionError(f"triton {venv.version}: karchive build exited {r.returncode}:\n{r.stdout}\n{r.stderr}")
    return r
