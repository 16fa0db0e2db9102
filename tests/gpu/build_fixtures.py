"""Build the archives the GPU tests and benchmarks use, on a CPU-only machine (any supported Triton).

    python tests/gpu/build_fixtures.py [OUT_DIR]      # default: .gpu/ at the repository root
    python tests/gpu/build_fixtures.py --check [DIR]  # exit 1, naming what is missing, if DIR is incomplete

Writes examples.karc (examples/build.toml, the archive the example scripts and the framework interop
tests use), examples_gpu.karc (every example kernel, the variants the runtime tests select between),
one small archive per launch feature (cluster, pdl, coop, scratch), ptx.karc (an sm_80 cubin with
ISA-8.4 PTX for the runtime's JIT fallback), jaxptx.karc (an sm_90a add_kernel whose PTX is ISA 8.4, so
an older ptxas such as jaxlib's can assemble it), bench.karc (4- and 16-argument kernels),
cold100.karc + cold_kernels.py (100 distinct kernels for the cold-start benchmark), and fixtures.json
(what was built, with which Triton). The whole GPU flow is in tests/gpu/README.md.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")

EX = str(ROOT / "examples" / "kernels.py")
XK = str(ROOT / "tests" / "gpu" / "extra_kernels.py")
RK = str(ROOT / "tests" / "runtime_kernels.py")
ADD = "*fp32:16, *fp32:16, *fp32:16, i32"
MM = "*fp16:16, *fp16:16, *fp16:16, i32, i32, i32, i32, i32:1, i32, i32:1, i32, i32:1"

#: archive name -> (kernel ref, signature, target, constexprs, options) per variant
ARCHIVES: dict[str, list[tuple]] = {
    "examples_gpu": [
        (EX + ":add_kernel", ADD, "cuda:90", {"BLOCK": 1024}, {"num_warps": 4}),
        (EX + ":add_kernel", "*fp32, *fp32, *fp32, i32", "cuda:90", {"BLOCK": 1024}, {"num_warps": 8}),
        (EX + ":add_kernel", ADD, "cuda:80", {"BLOCK": 1024}, {"num_warps": 4}),
        (EX + ":softmax_kernel", "*fp32:16, *fp32:16, i32, i32, i32", "cuda:90", {"BLOCK": 1024}, {"num_warps": 4}),
        (EX + ":matmul_kernel", MM, "cuda:90", {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}, {"num_warps": 4}),
        (EX + ":matmul_kernel", MM, "cuda:90", {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 128}, {"num_warps": 8}),
        (EX + ":scale_kernel", "*fp32:16, *fp32:16, i32, i32:1, fp32", "cuda:90", {"BLOCK": 256}, {"num_warps": 4}),
        (EX + ":scale_kernel", "*fp32:16, *fp32:16, i32, i32, fp32", "cuda:90", {"BLOCK": 256}, {"num_warps": 4}),
        (EX + ":scale_kernel", "*fp16:16, *fp16:16, i32, i32:1, fp16", "cuda:90", {"BLOCK": 256}, {"num_warps": 4}),
        (EX + ":scale_kernel", "*bf16:16, *bf16:16, i32, i32:1, bf16", "cuda:90", {"BLOCK": 256}, {"num_warps": 4}),
    ],
    "cluster": [(EX + ":add_kernel", ADD, "cuda:90", {"BLOCK": 1024}, {"num_warps": 4, "num_ctas": 2})],
    "pdl": [(EX + ":add_kernel", ADD, "cuda:90", {"BLOCK": 1024}, {"num_warps": 4, "launch_pdl": True})],
    "coop": [(EX + ":add_kernel", ADD, "cuda:90", {"BLOCK": 1024}, {"num_warps": 4, "launch_cooperative_grid": True})],
    "scratch": [
        (XK + ":tma_scale_kernel", "*fp32:16, *fp32:16, i32, i32:16", "cuda:90", {"BM": 64, "BN": 64}, {"num_warps": 4})
    ],
    "ptx": [(EX + ":add_kernel", ADD, "cuda:80", {"BLOCK": 1024}, {"num_warps": 4, "ptx_version": 84})],
    # jaxlib assembles PTX with its own ptxas (CUDA 13.0, PTX ISA 9.0 on the H100 of 2026-11-22), older than
    # the producer's: an explicit PTX ISA keeps the JAX bridge's PTX path testable (docs/interop.md).
    "jaxptx": [(EX + ":add_kernel", ADD, "cuda:90", {"BLOCK": 1024}, {"num_warps": 4, "ptx_version": 84})],
    # Calls that omit a constexpr / launch option (issue 19): EVEN with no default in {True, False}; EVEN with
    # default False, built at num_warps 2 and 8 (Triton's default 4 not built) and EVEN=True at 4.
    "omit": [
        (RK + ":even_kernel", "*fp32:16, *fp32:16, i32", "cuda:90", {"BLOCK": 256, "EVEN": True}, {"num_warps": 4}),
        (RK + ":even_kernel", "*fp32:16, *fp32:16, i32", "cuda:90", {"BLOCK": 256, "EVEN": False}, {"num_warps": 4}),
        (
            RK + ":even_default_kernel",
            "*fp32:16, *fp32:16, i32",
            "cuda:90",
            {"BLOCK": 256, "EVEN": True},
            {"num_warps": 4},
        ),
        (
            RK + ":even_default_kernel",
            "*fp32:16, *fp32:16, i32",
            "cuda:90",
            {"BLOCK": 256, "EVEN": False},
            {"num_warps": 2},
        ),
        (
            RK + ":even_default_kernel",
            "*fp32:16, *fp32:16, i32",
            "cuda:90",
            {"BLOCK": 256, "EVEN": False},
            {"num_warps": 8},
        ),
    ],
    # n = 4096 in the benchmark: Triton specialises it as i32:16, the variant a served call site must find
    "bench": [
        (EX + ":add_kernel", ADD, "cuda:90", {"BLOCK": 1024}, {"num_warps": 4}),
        (EX + ":add_kernel", ADD + ":16", "cuda:90", {"BLOCK": 1024}, {"num_warps": 4}),
        (XK + ":add16_kernel", ", ".join(["*fp32:16"] * 15 + ["i32"]), "cuda:90", {"BLOCK": 1024}, {"num_warps": 4}),
        (XK + ":add16_kernel", ", ".join(["*fp32:16"] * 15 + ["i32:16"]), "cuda:90", {"BLOCK": 1024}, {"num_warps": 4}),
    ],
}
#: archives built from a build spec (name -> spec file): the user-facing example archive.
SPEC_ARCHIVES = {"examples": ROOT / "examples" / "build.toml"}
COLD = 100
#: every file the GPU tests and benchmarks read from the fixtures directory
OUTPUTS = sorted(
    [f"{n}.karc" for n in [*ARCHIVES, *SPEC_ARCHIVES, "cold100", "identity"]]
    + ["cold_kernels.py", "alpha.py", "beta.py", "fixtures.json"]
)

COLD_SRC_HEAD = '''"""100 distinct kernels for the cold-start benchmark (generated by tests/gpu/build_fixtures.py)."""
import triton
import triton.language as tl
'''
COLD_KERNEL = """

@triton.jit
def k{i:03d}(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * {c}.0 + tl.load(y_ptr + offs, mask=mask), mask=mask)
"""


def missing(out: pathlib.Path) -> list[str]:
    """Files of :data:`OUTPUTS` not in ``out`` (fixtures built by an older version of this script)."""
    return [name for name in OUTPUTS if not (out / name).is_file()]


def _compile(req: Any):
    from karchive.producer.compile.aot import compile_variant

    return compile_variant(req)


def _requests(out: pathlib.Path) -> dict[str, tuple[Any, list]]:
    """archive name -> (spec or None, VariantRequests)."""
    from karchive.producer.build.spec_file import load_spec
    from karchive.producer.compile.aot import VariantRequest

    jobs: dict[str, tuple[Any, list]] = {
        name: (
            None,
            [VariantRequest(ref, sig, target, cx, opts, include_ir=True) for ref, sig, target, cx, opts in reqs],
        )
        for name, reqs in ARCHIVES.items()
    }
    cold_py = out / "cold_kernels.py"
    jobs["cold100"] = (
        None,
        [
            VariantRequest(f"{cold_py}:k{i:03d}", ADD, "cuda:90", {"BLOCK": 1024}, {"num_warps": 4}, include_ir=True)
            for i in range(COLD)
        ],
    )
    # Two modules that each define add_kernel (x + y, x - y): archived as alpha:add_kernel, beta:add_kernel.
    jobs["identity"] = (
        None,
        [
            VariantRequest(
                f"{out / m}.py:add_kernel", ADD, "cuda:90", {"BLOCK": 1024}, {"num_warps": 4}, include_ir=True
            )
            for m in ("alpha", "beta")
        ],
    )
    for name, path in SPEC_ARCHIVES.items():
        spec = load_spec(path)
        jobs[name] = (spec, list(spec.requests))
    return jobs


def build(out: pathlib.Path) -> None:
    from karchive.producer.build.pack import ArchiveBuilder
    from karchive.producer.compile.aot import toolchain_versions

    out.mkdir(parents=True, exist_ok=True)
    (out / "cold_kernels.py").write_text(COLD_SRC_HEAD + "".join(COLD_KERNEL.format(i=i, c=i + 1) for i in range(COLD)))
    sys.path.insert(0, str(ROOT / "tests"))
    from identity_support import ALPHA, BETA

    (out / "alpha.py").write_text(ALPHA)
    (out / "beta.py").write_text(BETA)
    jobs = _requests(out)
    versions = toolchain_versions()
    t0 = time.time()
    total = sum(len(reqs) for _, reqs in jobs.values())
    print(f"compiling {total} variants for {len(jobs)} archives ...", flush=True)
    with ProcessPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        results = {name: list(pool.map(_compile, reqs)) for name, (_, reqs) in jobs.items()}
    built: dict[str, dict] = {}
    for name, variants in results.items():
        spec = jobs[name][0]
        b = (
            ArchiveBuilder(spec.name, spec.version, produced_by=versions, level=spec.level, dictionary=spec.dictionary)
            if spec is not None
            else ArchiveBuilder(name, "0.1.0", produced_by=versions)
        )
        b.extend(variants)
        path = out / f"{name}.karc"
        b.write(path)
        data = path.read_bytes()
        built[path.name] = {"variants": len(variants), "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        print(f"{path.name}: {len(variants)} variants, {len(data)} bytes")
    info = {"built_with": {k: versions[k] for k in sorted(versions)}, "archives": built}
    (out / "fixtures.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
    print(f"built in {time.time() - t0:.1f}s with triton {versions.get('triton')} into {out}")


def main(argv: list[str]) -> int:
    args = [a for a in argv if a != "--check"]
    out = pathlib.Path(args[0]) if args else ROOT / ".gpu"
    if "--check" in argv:
        gone = missing(out)
        if gone:
            print(f"{out}: missing {', '.join(gone)}: run python tests/gpu/build_fixtures.py", file=sys.stderr)
            return 1
        print(f"{out}: all {len(OUTPUTS)} fixture files present")
        return 0
    build(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
