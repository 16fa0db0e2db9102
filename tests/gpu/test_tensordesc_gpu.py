"""Host tensor descriptors launched from archives with Triton unimportable, against Triton's own launch (issue 21).

The archives are built on the CPU machine by ``python tests/gpu/build_tensordesc.py`` (after, optionally,
``bash tools/tritons.sh 3.6``) into ``.gpu/tensordesc/``: one per Triton release that built it, each with
its own descriptor convention recorded (``triton-3.5`` from Triton 3.5/3.6, ``triton-3.8`` from
3.7/3.8/3.9; a release venv without one is skipped there with a note).

Here, for every archive and both launch paths, a fresh interpreter that blocks every ``triton`` import
launches with ``karchive.TensorDescriptor`` arguments built from torch tensors: a descriptor copy, a
three-descriptor add, a persistent matmul (three descriptors), an attention forward (four), a device-side
descriptor copy (plain pointers, global scratch) and an autotuned descriptor matmul whose call-site
descriptors carry placeholder block shapes. This process's Triton launches the same kernels from the
same source with its own ``TensorDescriptor`` objects (its autotuner's ``pre_hook`` setting the blocks).

Comparison: an archive built by this machine's Triton release holds the binaries Triton's JIT compiles
here, so every output must be **bit-equal** (the autotuned matmul: both pick a config; when they pick the
same one, bit-equal, else within fp16 tolerance of each other). An archive of another release holds other
compilers' binaries: copies and adds must still be bit-equal, matmul and attention within a tolerance
stated below. The selection must pick the sm_90a variant and never load the sm_100a one next to it.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

from karchive.runtime import launch_path

USES_BUILD_FIXTURES = False  # its own archives (build_tensordesc.py)
ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = pathlib.Path(os.environ.get("KARCHIVE_GPU_FIXTURES", ROOT / ".gpu")) / "tensordesc"
KERNELS = ROOT / "tests" / "data" / "tma_kernels.py"


def _index() -> dict[str, str]:
    try:
        return json.loads((OUT / "index.json").read_text())
    except (OSError, ValueError):
        return {}


_ARCHIVES = _index()
_MISSING = (
    f"{OUT}/index.json missing: on the CPU machine run `bash tools/tritons.sh 3.6` (optional) and "
    "`python tests/gpu/build_tensordesc.py`, then carry .gpu/tensordesc"
)
_RELEASES = [pytest.param(v, id=f"archive-triton-{v}") for v in sorted(_ARCHIVES)] or [
    pytest.param(None, id="no-archives", marks=pytest.mark.skip(reason=_MISSING))
]

# Problem sizes (multiples of every block, so no masking question arises).
SIZES = {"copy": (256, 128), "mm": (512, 384, 256), "attn": (2, 4, 256, 64), "tuned": (256, 256, 128)}

CHILD = textwrap.dedent(r"""
    import json, os, sys


    # The producer's compiler must not be needed to launch its archive: `import triton` raises ImportError and
    # importlib.util.find_spec("triton") answers None, as where Triton is not installed (torch asks at CUDA init).
    for _name in [m for m in sys.modules if m.split(".")[0] == "triton"] + ["triton"]:
        sys.modules[_name] = None
    import torch

    import karchive

    TD = karchive.TensorDescriptor
    archive, inputs, out_path = sys.argv[1:4]
    arc = karchive.open(archive)
    x = torch.load(inputs)
    dev = "cuda"
    got, info = {}, {}


    def k(name):
        kern = arc.kernel(name)
        assert kern.launch_path == os.environ["KARCHIVE_LAUNCH_PATH"], kern.launch_path
        return kern


    # copy and add: one tile per program
    a, b = x["a"].to(dev), x["b"].to(dev)
    y = torch.full_like(a, float("nan"))
    kc = k("desc_copy")
    info["copy_arch"] = kc.select(TD(a, [64, 64]), TD(y, [64, 64]), BLOCK_M=64, BLOCK_N=64).abi.binary_arch
    kc[(a.shape[0] // 64, a.shape[1] // 64)](TD(a, [64, 64]), TD(y, [64, 64]), BLOCK_M=64, BLOCK_N=64)
    got["copy"] = y
    s = torch.full_like(a, float("nan"))
    k("desc_add")[(a.shape[0] // 64, a.shape[1] // 64)](TD(a, [64, 64]), TD(b, [64, 64]), TD(s, [64, 64]),
                                                        BLOCK_M=64, BLOCK_N=64)
    got["add"] = s
    # the steady state (the compiled path's memo: same descriptors, same addresses), then the output tensor's
    # storage moved under the same descriptor (a new map at that launch)
    s2 = torch.full_like(a, float("nan"))
    da, db, ds = TD(a, [64, 64]), TD(b, [64, 64]), TD(s2, [64, 64])
    kadd = k("desc_add")
    for _ in range(3):
        s2.fill_(float("nan"))
        kadd[(a.shape[0] // 64, a.shape[1] // 64)](da, db, ds, BLOCK_M=64, BLOCK_N=64)
    got["add_again"] = s2.clone()
    moved = torch.full_like(a, float("nan"))
    s2.set_(moved)
    kadd[(a.shape[0] // 64, a.shape[1] // 64)](da, db, ds, BLOCK_M=64, BLOCK_N=64)
    got["add_moved"] = moved

    # persistent matmul: C = A @ B^T over 132 programs
    ma, mb = x["ma"].to(dev), x["mb"].to(dev)
    mc = torch.full((ma.shape[0], mb.shape[0]), float("nan"), device=dev, dtype=torch.float16)
    k("desc_matmul_persistent")[(132,)](TD(ma, [128, 64]), TD(mb, [128, 64]), TD(mc, [128, 128]), ma.shape[0],
                                       mb.shape[0], ma.shape[1], BLOCK_M=128, BLOCK_N=128, BLOCK_K=64,
                                       NUM_PROGRAMS=132, num_warps=8, num_stages=3)
    got["matmul"] = mc

    # attention forward over (batch*heads*seq, head_dim) views
    q, kk, v = (x[n].to(dev) for n in ("q", "k", "v"))
    o = torch.full_like(q, float("nan"))
    seq, heads = x["seq"], x["heads"]
    k("desc_attention_fwd")[(seq // 128, heads)](TD(q, [128, 64]), TD(kk, [64, 64]), TD(v, [64, 64]),
                                                 TD(o, [128, 64]), seq, x["scale"], HEAD_DIM=64, BLOCK_M=128,
                                                 BLOCK_N=64, num_warps=8)
    got["attention"] = o

    # device-side descriptors: plain pointers in, the maps written to global scratch by the kernel
    d = torch.full_like(a, float("nan"))
    k("device_desc_copy")[(a.shape[0] // 64, a.shape[1] // 64)](a, d, a.shape[0], a.shape[1], BLOCK_M=64,
                                                                BLOCK_N=64)
    got["device_copy"] = d

    # autotuned: placeholder block shapes at the call site; the chosen variant's blocks are encoded
    ta, tb = x["ta"].to(dev), x["tb"].to(dev)
    tc = torch.full((ta.shape[0], tb.shape[0]), float("nan"), device=dev, dtype=torch.float16)
    kt = k("desc_matmul_tuned")
    M, N, K = ta.shape[0], tb.shape[0], ta.shape[1]
    args = (TD(ta, [1, 1]), TD(tb, None), TD(tc, [1, 1]), M, N, K)
    grid = lambda meta: ((M // meta["BLOCK_M"]) * (N // meta["BLOCK_N"]),)
    kt[grid](*args)
    info["tuned_config"] = {n: kt.select(*args).constexprs[n] for n in ("BLOCK_M", "BLOCK_N", "BLOCK_K")}
    got["tuned"] = tc

    torch.cuda.synchronize()
    torch.save({n: t.cpu() for n, t in got.items()}, out_path)
    print(json.dumps(info))
""")


def _inputs(path: pathlib.Path) -> dict:
    import torch

    g = torch.Generator().manual_seed(21)
    r, c = SIZES["copy"]
    M, N, K = SIZES["mm"]
    z, h, seq, dh = SIZES["attn"]
    tm, tn, tk = SIZES["tuned"]
    x = {
        "a": torch.randn(r, c, generator=g).half(),
        "b": torch.randn(r, c, generator=g).half(),
        "ma": (torch.randn(M, K, generator=g) * 0.1).half(),
        "mb": (torch.randn(N, K, generator=g) * 0.1).half(),
        "q": torch.randn(z * h * seq, dh, generator=g).half(),
        "k": torch.randn(z * h * seq, dh, generator=g).half(),
        "v": torch.randn(z * h * seq, dh, generator=g).half(),
        "seq": seq,
        "heads": z * h,
        "scale": dh**-0.5,
        "ta": (torch.randn(tm, tk, generator=g) * 0.1).half(),
        "tb": (torch.randn(tn, tk, generator=g) * 0.1).half(),
    }
    torch.save(x, path)
    return x


def _triton_reference(x: dict) -> tuple[dict, dict]:
    """This machine's Triton launching the same kernels from source, with its own TensorDescriptor."""
    import importlib.util

    import torch
    import triton
    from triton.tools.tensor_descriptor import TensorDescriptor as TD

    spec = importlib.util.spec_from_file_location("karchive_gpu_tma_kernels", KERNELS)
    tk = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tk)
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    dev = "cuda"
    ref, info = {}, {}
    a, b = x["a"].to(dev), x["b"].to(dev)
    y = torch.full_like(a, float("nan"))
    tk.desc_copy[(a.shape[0] // 64, a.shape[1] // 64)](
        TD.from_tensor(a, [64, 64]), TD.from_tensor(y, [64, 64]), BLOCK_M=64, BLOCK_N=64
    )
    ref["copy"] = y
    s = torch.full_like(a, float("nan"))
    tk.desc_add[(a.shape[0] // 64, a.shape[1] // 64)](
        TD.from_tensor(a, [64, 64]), TD.from_tensor(b, [64, 64]), TD.from_tensor(s, [64, 64]), BLOCK_M=64, BLOCK_N=64
    )
    ref["add"] = s
    ma, mb = x["ma"].to(dev), x["mb"].to(dev)
    mc = torch.full((ma.shape[0], mb.shape[0]), float("nan"), device=dev, dtype=torch.float16)
    tk.desc_matmul_persistent[(132,)](
        TD.from_tensor(ma, [128, 64]),
        TD.from_tensor(mb, [128, 64]),
        TD.from_tensor(mc, [128, 128]),
        ma.shape[0],
        mb.shape[0],
        ma.shape[1],
        BLOCK_M=128,
        BLOCK_N=128,
        BLOCK_K=64,
        NUM_PROGRAMS=132,
        num_warps=8,
        num_stages=3,
    )
    ref["matmul"] = mc
    q, kk, v = (x[n].to(dev) for n in ("q", "k", "v"))
    o = torch.full_like(q, float("nan"))
    tk.desc_attention_fwd[(x["seq"] // 128, x["heads"])](
        TD.from_tensor(q, [128, 64]),
        TD.from_tensor(kk, [64, 64]),
        TD.from_tensor(v, [64, 64]),
        TD.from_tensor(o, [128, 64]),
        x["seq"],
        x["scale"],
        HEAD_DIM=64,
        BLOCK_M=128,
        BLOCK_N=64,
        num_warps=8,
    )
    ref["attention"] = o
    d = torch.full_like(a, float("nan"))
    tk.device_desc_copy[(a.shape[0] // 64, a.shape[1] // 64)](a, d, a.shape[0], a.shape[1], BLOCK_M=64, BLOCK_N=64)
    ref["device_copy"] = d
    ta, tb = x["ta"].to(dev), x["tb"].to(dev)
    tc = torch.full((ta.shape[0], tb.shape[0]), float("nan"), device=dev, dtype=torch.float16)
    M, N, K = ta.shape[0], tb.shape[0], ta.shape[1]
    tk.desc_matmul_tuned[lambda meta: ((M // meta["BLOCK_M"]) * (N // meta["BLOCK_N"]),)](
        TD(ta, [M, K], [K, 1], [1, 1]), TD(tb, [N, K], [K, 1], [1, 1]), TD(tc, [M, N], [N, 1], [1, 1]), M, N, K
    )
    best = tk.desc_matmul_tuned.best_config
    info["tuned_config"] = {n: best.kwargs[n] for n in ("BLOCK_M", "BLOCK_N", "BLOCK_K")}
    ref["tuned"] = tc
    torch.cuda.synchronize()
    return {n: t.cpu() for n, t in ref.items()}, info


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    pytest.importorskip("triton")
    path = tmp_path_factory.mktemp("tensordesc") / "inputs.pt"
    x = _inputs(path)
    ref, info = _triton_reference(x)
    return path, x, ref, info


@pytest.mark.parametrize("path", [launch_path.PYTHON, launch_path.EXTENSION])
@pytest.mark.parametrize("version", _RELEASES)
def test_descriptor_kernels_launch_without_triton_equal_to_tritons_launch(version, path, reference, tmp_path):
    import torch
    import triton

    if path == launch_path.EXTENSION and launch_path.extension() is None:
        pytest.skip(f"the compiled launcher is not built here: {launch_path.status().detail}")
    inputs, x, ref, ref_info = reference
    out = tmp_path / "out.pt"
    env = dict(
        os.environ, KARCHIVE_LAUNCH_PATH=path, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    )
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(OUT / _ARCHIVES[version]), str(inputs), str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    got = torch.load(out)
    assert info["copy_arch"] == "sm_90a"  # next to the sm_100a variant, never loaded here
    same_release = ".".join(version.split(".")[:2]) == ".".join(triton.__version__.split(".")[:2])
    # exact everywhere: pure data movement and one fp16 add per element
    for name in ("copy", "add", "device_copy"):
        assert torch.equal(got[name], ref[name]), (version, path, name)
    assert torch.equal(got["copy"], x["a"]) and torch.equal(got["add"], x["a"] + x["b"])
    assert torch.equal(got["add_again"], x["a"] + x["b"]) and torch.equal(got["add_moved"], x["a"] + x["b"])
    # the compute kernels: bit-equal from the same release, else within a tolerance (another compiler)
    report = {}
    for name, tol in (("matmul", 2e-3), ("attention", 2e-3)):
        diff = float((got[name].float() - ref[name].float()).abs().max())
        report[name] = diff
        assert not torch.isnan(got[name]).any(), (version, path, name)
        if same_release:
            assert torch.equal(got[name], ref[name]), (version, path, name, diff)
        else:
            assert diff <= tol, (version, path, name, diff)
    mm_ref = x["ma"].float() @ x["mb"].float().T
    assert float((got["matmul"].float() - mm_ref).abs().max()) <= 2e-2
    q, kk, v = (x[n].float().view(x["heads"], x["seq"], -1) for n in ("q", "k", "v"))
    attn_ref = (torch.softmax(q @ kk.transpose(1, 2) * x["scale"], -1) @ v).reshape(-1, q.shape[-1])
    assert float((got["attention"].float() - attn_ref).abs().max()) <= 2e-2
    tuned_ref = x["ta"].float() @ x["tb"].float().T
    assert float((got["tuned"].float() - tuned_ref).abs().max()) <= 2e-2
    if same_release and info["tuned_config"] == ref_info["tuned_config"]:
        assert torch.equal(got["tuned"], ref["tuned"])
    print(
        f"\n[tensordesc] archive triton {version}, {path} path, here triton {triton.__version__}: "
        f"max |karchive - triton| {report}; tuned config karchive {info['tuned_config']} "
        f"triton {ref_info['tuned_config']}"
    )
