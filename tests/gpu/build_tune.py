"""Build the archive and keys file of the GPU tuning-quality check, on a CPU-only machine.

    python tests/gpu/build_tune.py [OUT_DIR]          # default: .gpu/ at the repository root
    python tests/gpu/build_tune.py --check [OUT_DIR]  # exit 1, naming what is missing

Writes ``tune.karc`` (every config of tests/data/tune/tune_kernels.py's ``tq_linear`` (7 configs) and
``tq_row_l2`` (7 configs), for cuda:90, no GPU involved) and ``tune-keys.json`` (the calls ``karchive tune``
times on the H100: three matmul shapes and four reduction shapes; spec/FORMAT.md §6.6). The H100 side is
tests/gpu/test_wrapped_gpu.py::test_karchive_tune_picks_within_5_percent_of_triton.
"""

from __future__ import annotations

import json
import os
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
KERNELS = ROOT / "tests" / "data" / "tune" / "tune_kernels.py"
FILES = ("tune.karc", "tune-keys.json")

# Divisibility hints as Triton's JIT gives them to these calls (every size and stride a multiple of 16), so the
# variants karchive times are the code Triton's autotuner times.
SPEC = f"""[archive]
name = "tune-quality"
version = "1"
targets = ["cuda:90"]
[[kernel]]
source = "{KERNELS}:tq_linear"
signature = "*fp16:16, *fp16:16, *fp16:16, *fp16:16, i32:16, i32:16, i32:16, i32:16, i32:16, i32:16"
[[kernel]]
source = "{KERNELS}:tq_row_l2"
signature = "*fp32:16, *fp32:16, i32:16, i32:16"
"""

#: (M, N, K) of tq_linear and (rows, cols) of tq_row_l2: large enough (>= 100 MB moved or ~10 GFLOP) that a
#: 5% difference is well above run-to-run noise.
LINEAR_SHAPES = ((2048, 2048, 2048), (256, 8192, 4096), (8192, 2048, 512))
ROW_SHAPES = ((16384, 2048), (4096, 16384), (1024, 131072), (65536, 512))


def _t(shape: list[int], dtype: str, init: str = "randn") -> dict:
    return {"tensor": {"shape": shape, "dtype": dtype, "init": init}}


def _stride0(name: str) -> dict:
    return {"expr": ["probe", ["arg", name], "stride(0)"]}


def keys_file() -> dict:
    calls = []
    f16 = "torch.float16"
    for m, n, k in LINEAR_SHAPES:
        calls.append(
            {
                "kernel": "tq_linear",
                "label": f"linear {m}x{n}x{k}",
                "args": {
                    "x_ptr": _t([m, k], "float16"),
                    "w_ptr": _t([n, k], "float16"),
                    "bias_ptr": _t([n], "float16"),
                    "out_ptr": _t([m, n], "float16", "zeros"),
                    "M": m,
                    "N": n,
                    "K": k,
                    "stride_xm": _stride0("x_ptr"),
                    "stride_wn": _stride0("w_ptr"),
                    "stride_om": _stride0("out_ptr"),
                },
                "grid": [
                    [
                        "*",
                        ["call", "cdiv", ["arg", "M"], ["arg", "TILE_M"]],
                        ["call", "cdiv", ["arg", "N"], ["arg", "TILE_N"]],
                    ]
                ],
                "key": [m, n, k, f16, f16, f16, f16],
            }
        )
    for rows, cols in ROW_SHAPES:
        calls.append(
            {
                "kernel": "tq_row_l2",
                "label": f"row_l2 {rows}x{cols}",
                "args": {
                    "x_ptr": _t([rows, cols], "float32"),
                    "out_ptr": _t([rows], "float32", "zeros"),
                    "n_cols": cols,
                    "row_stride": _stride0("x_ptr"),
                },
                "grid": [rows],
                "key": [cols, "torch.float32", "torch.float32"],
            }
        )
    return {"format": "karchive-tune-keys/1", "calls": calls}


def missing(out: pathlib.Path) -> list[str]:
    return [f for f in FILES if not (out / f).is_file()]


def build(out: pathlib.Path) -> dict:
    from karchive.producer.build.pipeline import build_archive
    from karchive.producer.build.spec_file import load_spec, validate_requests

    out.mkdir(parents=True, exist_ok=True)
    spec_path = out / "tune.toml"
    spec_path.write_text(SPEC)
    spec = load_spec(spec_path)
    warnings = validate_requests(spec.requests)
    t0 = time.perf_counter()
    result = build_archive(spec, out / "tune.karc", progress=False)
    (out / "tune-keys.json").write_text(json.dumps(keys_file(), indent=1) + "\n")
    import triton

    return {
        "variants": len(result.built),
        "seconds": round(time.perf_counter() - t0, 1),
        "triton": triton.__version__,
        "warnings": warnings + [w for w in result.warnings if w not in warnings],
    }


def main(argv: list[str]) -> int:
    check = "--check" in argv
    rest = [a for a in argv if a != "--check"]
    out = pathlib.Path(rest[0]) if rest else pathlib.Path(os.environ.get("KARCHIVE_GPU_FIXTURES", ROOT / ".gpu"))
    if check:
        gone = missing(out)
        print("missing: " + ", ".join(gone) if gone else "complete")
        return 1 if gone else 0
    print(json.dumps(build(out), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
