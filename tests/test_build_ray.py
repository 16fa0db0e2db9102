"""`karchive build --executor ray|auto|ray://|HOST:PORT` on a real Ray cluster: same bytes as `-j N`.

The cluster is real and local (tests/ray_cluster.py): a head and a worker node, each its own
`ray start` process tree with one CPU, stopped at the end of the module even when a test fails.
Builds run the CLI in subprocesses; the worker nodes have a Triton build cache of their own, so what
they compile they really compile. Marked `ray` (deselect with `-m "not ray"`); the tests that show
Ray is optional run without Ray.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest
from build_support import SPEC_VARIANTS, build, karchive, make_checkout
from support import ROOT, needs_triton

HAVE_RAY = importlib.util.find_spec("ray") is not None
needs_ray = pytest.mark.skipif(not HAVE_RAY, reason="needs Ray (pip install 'karchive[ray]')")

#: Compiled only by the worker-kill test, so the cluster compiles it cold (long enough to be caught).
KILL_SPEC = """[archive]
name = "kill"
version = "1"
dictionary = "none"
level = 3
targets = ["cuda:90", "cuda:80"]

[[kernel]]
source = "kernels.py:matmul_kernel"
signature = "*fp16:16, *fp16:16, *fp16:16, i32, i32, i32, i32:16, i32:1, i32:16, i32:1, i32:16, i32:1"
constexprs = { BLOCK_M = [64], BLOCK_N = [64, 128], BLOCK_K = [32] }
num_warps = [4]
"""
KILL_VARIANTS = 4

SMALL_SPEC = """[archive]
name = "small"
version = "1"
dictionary = "none"
level = 3
[[kernel]]
source = "kernels.py:add_kernel"
signature = "*fp32:16, *fp32:16, *fp32:16, i32"
constexprs = { BLOCK = [256] }
targets = ["cuda:90"]
"""

BROKEN = """import triton
import triton.language as tl


@triton.jit
def broken_kernel(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, undefined_name)


@triton.jit
def fine_kernel(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs) * 2)
"""
BROKEN_SPEC = """[archive]
name = "mixed"
version = "1"
dictionary = "none"
level = 3
targets = ["cuda:90"]
[[kernel]]
source = "k.py:broken_kernel"
signature = "*fp32"
constexprs = { BLOCK = [128] }
[[kernel]]
source = "k.py:fine_kernel"
signature = "*fp32"
constexprs = { BLOCK = [128, 256] }
"""


# -- Ray stays optional ------------------------------------------------------------------------------
def test_only_the_ray_executor_module_imports_ray():
    """Statically: no other karchive module mentions `import ray`, even lazily."""
    offenders = []
    for path in sorted((ROOT / "karchive").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and not node.level
                else []
            )
            if any(n == "ray" or n.startswith("ray.") for n in names):
                offenders.append(str(path.relative_to(ROOT)))
    assert offenders == ["karchive/producer/build/executors_ray.py"]


NO_RAY = textwrap.dedent("""
    import json, sys
    class Block:
        def find_spec(self, name, path=None, target=None):
            if name == "ray" or name.startswith("ray."):
                raise ImportError("ray is blocked for this test")
    if sys.argv[1] == "block":
        sys.meta_path.insert(0, Block())
    from karchive.cli.main import main
    code = main(sys.argv[2:])
    print(json.dumps({"code": code, "ray": sorted(m for m in sys.modules if m == "ray" or m.startswith("ray."))}))
""")


def _no_ray_run(mode: str, *argv: str, env: dict) -> tuple[dict, str]:
    r = subprocess.run(
        [sys.executable, "-c", NO_RAY, mode, *argv],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **env, "PYTHONPATH": str(ROOT)},
    )
    return json.loads(r.stdout.strip().splitlines()[-1]), r.stderr


@needs_triton
def test_a_build_without_executor_ray_never_imports_ray(tmp_path):
    spec = make_checkout(tmp_path / "proj", SMALL_SPEC)
    env = {"KARCHIVE_CACHE_DIR": str(tmp_path / "cache")}
    out, _ = _no_ray_run("watch", "build", str(spec), "-o", str(tmp_path / "a.karc"), "-j", "1", "--quiet", env=env)
    assert out == {"code": 0, "ray": []}
    out, _ = _no_ray_run(
        "watch",
        "build",
        str(spec),
        "-o",
        str(tmp_path / "b.karc"),
        "--reuse",
        str(tmp_path / "a.karc"),
        "--quiet",
        env=env,
    )
    assert out == {"code": 0, "ray": []}
    # Nothing left to compile: not even --executor ray needs Ray.
    out, _ = _no_ray_run(
        "block",
        "build",
        str(spec),
        "-o",
        str(tmp_path / "b2.karc"),
        "--executor",
        "ray",
        "--reuse",
        str(tmp_path / "a.karc"),
        "--quiet",
        env=env,
    )
    assert out == {"code": 0, "ray": []}
    # Without Ray installed, asking for it is a clear error before anything compiles.
    out, err = _no_ray_run("block", "build", str(spec), "-o", str(tmp_path / "c.karc"), "--executor", "ray", env=env)
    assert out["code"] == 2 and "pip install 'karchive[ray]'" in err and not (tmp_path / "c.karc").exists()


@needs_triton
def test_unknown_executor_is_refused(tmp_path):
    spec = make_checkout(tmp_path / "proj", SMALL_SPEC)
    r = karchive("build", str(spec), "-o", str(tmp_path / "x.karc"), "--executor", "spark://x")
    assert r.returncode == 2 and "unknown executor 'spark://x'" in r.stderr


# -- a real cluster --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> pathlib.Path:
    return tmp_path_factory.mktemp("raybuild")


@pytest.fixture(scope="module")
def cluster(workdir):
    if not HAVE_RAY:
        pytest.skip("needs Ray")
    from ray_cluster import LocalRayCluster

    c = LocalRayCluster(
        workers=1, cpus=1, client_server=True, env={"KARCHIVE_CACHE_DIR": str(workdir / "cluster-cache")}
    )
    c.start()
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def local(workdir) -> tuple[pathlib.Path, pathlib.Path, dict]:
    """(spec, archive built with -j 2, env) from a checkout the cluster tests share."""
    env = {"KARCHIVE_CACHE_DIR": str(workdir / "local-cache")}
    spec = make_checkout(workdir / "proj")
    out = workdir / "local.karc"
    build(spec, out, "-j", "2", env=env)
    return spec, out, env


def _ray_env(cluster, **extra: str) -> dict[str, str]:
    return {k: v for k, v in cluster.driver_env(**extra).items() if k.startswith(("RAY_", "KARCHIVE_"))}


@pytest.mark.ray
@needs_ray
@needs_triton
def test_cluster_build_is_byte_identical_with_progress(cluster, local, workdir):
    spec, expected, env = local
    out = workdir / "ray.karc"
    r = karchive("build", str(spec), "-o", str(out), "--executor", cluster.address, env={**env, **_ray_env(cluster)})
    assert r.returncode == 0, r.stderr
    assert out.read_bytes() == expected.read_bytes()
    # Progress: the cluster's nodes and CPUs up front, then completed/total with where each variant ran.
    assert f"compiling {SPEC_VARIANTS} variants on Ray cluster {cluster.address}: 2 nodes, 2 CPUs" in r.stderr
    lines = re.findall(
        r"^\[(\d+)/(\d+)\] ok   \S+ \(\d+\.\d\ds on node ([0-9a-f]{8}) pid (\d+)(?:, from the build cache)?\)$",
        r.stderr,
        re.M,
    )
    assert [int(n) for n, _, _, _ in lines] == list(range(1, SPEC_VARIANTS + 1))
    assert {int(t) for _, t, _, _ in lines} == {SPEC_VARIANTS}
    assert len({node for _, _, node, _ in lines}) == 2  # both nodes compiled
    assert re.search(r"compiled on Ray \(127\.0\.0\.1:\d+\): 2 nodes, \d workers?", r.stdout)


@pytest.mark.ray
@needs_ray
@needs_triton
def test_client_and_auto_addresses_give_the_same_bytes(cluster, local, workdir):
    spec, expected, env = local
    summary = build(
        spec, workdir / "client.karc", "--executor", cluster.client_address, env={**env, **_ray_env(cluster)}
    )
    assert summary["executor"]["kind"] == "ray" and summary["executor"]["nodes"] == 2
    assert (workdir / "client.karc").read_bytes() == expected.read_bytes()
    summary = build(
        spec, workdir / "auto.karc", "--executor", "auto", env={**env, **_ray_env(cluster, RAY_ADDRESS=cluster.address)}
    )
    assert summary["executor"]["address"] == "auto"
    assert (workdir / "auto.karc").read_bytes() == expected.read_bytes()


#: Ships the sources, deletes the checkout, then compiles on the cluster and packs: the workers can
#: only have imported the shipped text.
SHIP_THEN_DELETE = textwrap.dedent("""
    import shutil, sys
    from karchive.producer.compile.aot import toolchain_versions
    from karchive.producer.build.executors_ray import RayExecutor
    from karchive.producer.build._executors_ship import ship_requests
    from karchive.producer.build.pack import ArchiveBuilder
    from karchive.producer.build.spec_file import load_spec, validate_requests
    spec_path, address, out = sys.argv[1:4]
    spec = load_spec(spec_path)
    validate_requests(spec.requests)
    shipped, kernels = ship_requests(spec.requests)
    print(sorted({m.name for k in kernels.values() for m in k.modules}), len({k.modules for k in kernels.values()}))
    shutil.rmtree(spec.requests[0].base_dir)
    built, failed = [], []
    with RayExecutor(address) as ex:
        ex.run_shipped(shipped, kernels, lambda o: (built if o.variant else failed).append(o.variant or o.error))
    assert not failed, failed
    b = ArchiveBuilder(spec.name, spec.version, produced_by=toolchain_versions(), level=spec.level,
                       dictionary=spec.dictionary)
    b.extend(built)
    b.write(out)
""")


@pytest.mark.ray
@needs_ray
@needs_triton
def test_sources_travel_with_the_tasks_and_the_checkout_is_never_read(cluster, local, workdir):
    spec, expected, env = local
    elsewhere = workdir / "elsewhere"
    shutil.copytree(spec.parent, elsewhere)
    out = workdir / "shipped.karc"
    r = subprocess.run(
        [sys.executable, "-c", SHIP_THEN_DELETE, str(elsewhere / "build.toml"), cluster.address, str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=workdir,
        env={**os.environ, **env, **_ray_env(cluster), "PYTHONPATH": str(ROOT)},
    )
    assert r.returncode == 0, r.stdout + r.stderr
    # The JIT modules and the plain config module travelled, as one bundle for the whole checkout.
    assert r.stdout.splitlines()[0] == f"{sorted(['config.py', 'helpers.py', 'kernels.py', 'mykern.py'])} 1"
    assert not elsewhere.exists()
    assert out.read_bytes() == expected.read_bytes()


@pytest.mark.ray
@needs_ray
@needs_triton
def test_a_worker_killed_mid_build_is_retried_and_bytes_do_not_change(cluster, local, workdir):
    _, _, env = local
    spec = make_checkout(workdir / "killproj", KILL_SPEC)
    expected = workdir / "kill-local.karc"
    build(spec, expected, "-j", "2", env=env)
    out = workdir / "kill-ray.karc"
    full = {**os.environ, **env, **_ray_env(cluster), "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "karchive", "build", str(spec), "-o", str(out), "--json", "--executor", cluster.address],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=full,
    )
    killed = None
    try:
        deadline = time.time() + 300
        while killed is None and proc.poll() is None and time.time() < deadline:
            for p in cluster.task_processes("ray::_ray_compile"):
                if cluster.owns(p.pid):  # a worker of this cluster, running a compile right now
                    os.kill(p.pid, signal.SIGKILL)
                    killed = p.pid
                    break
            time.sleep(0.02)
        stdout, stderr = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert killed is not None, "no compile task was caught running: " + stderr
    assert proc.returncode == 0, stderr
    summary = json.loads(stdout)
    workers = summary["executor"]["workers"]
    assert sum(w["variants"] for w in workers) == KILL_VARIANTS and summary["built"] == KILL_VARIANTS
    assert all(not w["worker"].endswith(f" pid {killed}") for w in workers)  # its task finished elsewhere
    assert out.read_bytes() == expected.read_bytes()


@pytest.mark.ray
@needs_ray
@needs_triton
def test_compile_errors_are_reported_once_as_locally_and_keep_going_works(cluster, local, workdir):
    _, _, env = local
    proj = workdir / "broken"
    proj.mkdir()
    (proj / "k.py").write_text(BROKEN)
    (proj / "spec.toml").write_text(BROKEN_SPEC)
    renv = {**env, **_ray_env(cluster)}
    runs = {}
    for name, extra in (("local", ["-j", "2"]), ("ray", ["--executor", cluster.address])):
        r = karchive("build", str(proj / "spec.toml"), "-o", str(workdir / f"{name}-mixed.karc"), *extra, env=renv)
        assert r.returncode == 2 and not (workdir / f"{name}-mixed.karc").exists()
        runs[name] = r.stderr
    # The same error block, Triton's message included, exactly once.
    errors = {name: err[err.index("karchive: error:") :] for name, err in runs.items()}
    assert errors["ray"] == errors["local"] and errors["ray"].startswith("karchive: error: 1 of 3 variants failed")
    for err in runs.values():
        assert err.count("NameError('undefined_name is not defined')") == 1
    kept = {}
    for name, extra in (("local", ["-j", "2"]), ("ray", ["--executor", cluster.address])):
        kept[name] = build(
            proj / "spec.toml", workdir / f"{name}-kept.karc", "--keep-going", *extra, env=renv, expect=1
        )
    assert kept["ray"]["failed"] == kept["local"]["failed"] and len(kept["ray"]["failed"]) == 1
    assert kept["ray"]["built"] == 2
    assert (workdir / "ray-kept.karc").read_bytes() == (workdir / "local-kept.karc").read_bytes()


@pytest.mark.ray
@needs_ray
@needs_triton
def test_executor_ray_starts_a_local_ray_for_the_build(local, workdir):
    """`--executor ray`: a Ray instance of its own, started and stopped by the build."""
    spec, expected, env = local
    ray_tmp = tempfile.mkdtemp(prefix="kr-", dir="/tmp")  # short: Ray's socket paths live below it
    try:
        summary = build(
            spec,
            workdir / "ondemand.karc",
            "--executor",
            "ray",
            "-j",
            "2",
            env={
                **env,
                "RAY_TMPDIR": ray_tmp,
                "RAY_USAGE_STATS_ENABLED": "0",
                "RAY_AUTH_MODE": "token",
                "RAY_AUTH_TOKEN": "0" * 64,
            },
        )
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert summary["executor"]["address"] == "local" and summary["executor"]["nodes"] == 1
    assert summary["executor"]["cpus"] == 2
    assert (workdir / "ondemand.karc").read_bytes() == expected.read_bytes()


def _second_ptxas() -> str | None:
    """The CUDA toolkit's ptxas, if this machine has one of another version than Triton's own for sm_80."""
    try:
        from triton.backends.nvidia.compiler import get_ptxas
    except ImportError:
        return None
    other = shutil.which("ptxas", path="/usr/local/cuda/bin:" + os.environ.get("PATH", ""))
    if other is None or os.path.realpath(other) == os.path.realpath(get_ptxas(80).path):
        return None
    r = subprocess.run([other, "--version"], capture_output=True, text=True)
    return other if get_ptxas(80).version and str(get_ptxas(80).version) not in r.stdout else None


@pytest.mark.ray
@needs_ray
@needs_triton
def test_a_worker_with_another_toolchain_stops_the_build(local, workdir):
    """A node whose Triton uses another ptxas (TRITON_PTXAS_PATH, a real CUDA toolkit's) must not add
    its variants to an archive that records this machine's toolchain."""
    other = _second_ptxas()
    if other is None:
        pytest.skip("no second ptxas of another version on this machine")
    from ray_cluster import LocalRayCluster

    spec, _, env = local
    out = workdir / "mixed-toolchain.karc"
    with LocalRayCluster(
        workers=0, cpus=1, env={"KARCHIVE_CACHE_DIR": str(workdir / "odd-cache"), "TRITON_PTXAS_PATH": other}
    ) as odd:
        r = karchive(
            "build", str(spec), "-o", str(out), "--executor", odd.address, "--quiet", env={**env, **_ray_env(odd)}
        )
    assert r.returncode == 2 and not out.exists(), r.stderr
    assert re.search(
        r"karchive: error: worker node [0-9a-f]{8} pid \d+ compiles with another toolchain "
        r"\(ptxas_below_sm90 [\d.]+ \(worker\) vs [\d.]+ \(here\)\)",
        r.stderr,
    ), r.stderr
