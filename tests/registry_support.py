"""Archives and isolation for the registry tests.

Archives are made from real add_kernel variants compiled by Triton (GPU-less). The large archive
(hundreds of variants) clones a handful of compiled variants under new keys with distinct binaries,
which keeps its build well under a second while giving it a realistic shape: one frame per variant
binary, one per IR set, a big manifest and a trained dictionary.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from registry_servers import ROOT, subprocess_env

# gcsfs otherwise probes every bucket over gRPC (zonal/HNS detection), which no emulator speaks.
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")

KERNEL = str(ROOT / "examples" / "kernels.py") + ":add_kernel"
SIGNATURE = "*fp32:16, *fp32:16, *fp32:16, i32"
BIG_VARIANTS = 400

_workdir: Path | None = None


def workdir() -> Path:
    global _workdir
    if _workdir is None:
        _workdir = Path(tempfile.mkdtemp(prefix="karchive-registry-tests-"))
        atexit.register(shutil.rmtree, _workdir, True)
    return _workdir


def _triton_or_skip() -> None:
    try:
        import triton  # noqa: F401
    except ImportError:
        pytest.skip("needs triton (pip install karchive[producer]) to compile test archives")


@functools.cache
def compiled(target: str = "cuda:90", block: int = 1024, warps: int = 4):
    _triton_or_skip()
    from karchive.producer.compile.aot import VariantRequest, compile_variant

    return compile_variant(VariantRequest(KERNEL, SIGNATURE, target, {"BLOCK": block}, {"num_warps": warps}))


@functools.cache
def small_archive(
    name: str = "examples",
    version: str = "0.1.0",
    block: int = 1024,
    target: str = "cuda:90",
    format_version: tuple[int, int] | None = None,
) -> Path:
    """A one-variant archive; different ``block`` values give different bytes for the same name@version.
    ``format_version=(1, 0)`` gives the format karchive wrote before 2.0 (tests/format1_writer.py: karchive
    reads 1.0 archives, it no longer writes them)."""
    from karchive.producer.build.pack import ArchiveBuilder

    builder = ArchiveBuilder(name, version, level=3)
    builder.add(compiled(target, block))
    suffix = "" if format_version is None else f"-v{format_version[0]}_{format_version[1]}"
    path = workdir() / f"{name}-{version}-{block}-{target.replace(':', '_')}{suffix}.karc"
    if format_version == (1, 0):
        from format1_writer import build_format1

        path.write_bytes(build_format1(builder)[0])
    else:
        assert format_version in (None, (2, 0), (2, 1)), format_version
        builder.write(path)
    return path


@functools.cache
def big_archive(name: str = "big", version: str = "1.0.0", variants: int = BIG_VARIANTS) -> Path:
    from karchive.producer.build.pack import ArchiveBuilder

    seeds = [compiled(t, b, w) for t in ("cuda:80", "cuda:90") for b in (256, 1024) for w in (4, 8)]
    builder = ArchiveBuilder(name, version, level=3)
    for i in range(variants):
        seed = seeds[i % len(seeds)]
        key = hashlib.sha256(f"{name}-{version}-variant-{i}".encode()).hexdigest()
        noise = b"".join(hashlib.sha256(f"{i}-{j}".encode()).digest() for j in range(32))  # 1 KiB, incompressible
        builder.add(seed.rekeyed(key, dict(seed.files, binary=seed.files["binary"] + noise)))
    path = workdir() / f"{name}-{version}-{variants}.karc"
    builder.write(path)
    return path


def run_cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120, **popen: object
) -> subprocess.CompletedProcess:
    """`karchive ARGS` in a child process (the console script's code path, a real new process)."""
    return subprocess.run(
        [_python(), "-m", "karchive.cli.main", *args],
        capture_output=True,
        text=True,
        env=subprocess_env(**(env or {})),
        timeout=timeout,
        cwd=str(ROOT),
        **popen,
    )


def _python() -> str:
    import sys

    return sys.executable


@pytest.fixture
def isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Keep every test away from the real ~/.cache and ~/.local/share; fast retries."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    monkeypatch.delenv("KARCHIVE_REGISTRY", raising=False)
    monkeypatch.delenv("KARCHIVE_CACHE_DIR", raising=False)
    monkeypatch.delenv("KARCHIVE_LOCKFILE", raising=False)
    monkeypatch.delenv("KARCHIVE_FETCH", raising=False)
    monkeypatch.setenv("KARCHIVE_RETRY_DELAY", "0.01")
    return tmp_path


def release_together(procs: list[subprocess.Popen], timeout: float = 120) -> list[str]:
    """Children print "ready" once set up, then wait for a line on stdin: start them all at once.

    Returns each child's remaining stdout (stripped); a child that fails fails the test.
    """
    for p in procs:
        line = p.stdout.readline()
        if line.strip() != "ready":
            p.wait(timeout)
            raise AssertionError(f"child did not get ready: {line!r} {p.stderr.read()}")
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=timeout)
        assert p.returncode == 0, err
        outs.append(out.strip())
    return outs
