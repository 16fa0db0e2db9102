"""The tuned kinds of the launch benchmarks (issue 33): an archive of tests/gpu/extra_kernels.py's ``add_tuned``
(autotuned), ``add_heur`` (a heuristic) and ``add_stacked`` (heuristics over autotune), with recorded choices.

    python tools/tuned_bench.py OUT.karc [--target cuda:90]

Each kernel is compiled for every config (Triton, no GPU needed) and gets the records a capture of
``k[grid](x, y, out, 4096)`` would write: the autotune entry for key ``[4096]`` (``[4096, True]`` for the
stacked one) with int addresses and with three fp32 tensors (whose dtypes Triton's key appends), the
heuristics as stored expressions. tools/bench_launch.py and tools/bench_launch_cpu.py time
them beside ``add_kernel`` (the plain fixed-grid kernel of the same arity) and beside the same kernel launched
with every meta-parameter given (its own plain launch).
"""

from __future__ import annotations

import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
SOURCE = ROOT / "tests" / "gpu" / "extra_kernels.py"
SIG = "*fp32:16, *fp32:16, *fp32:16, i32"
CONFIGS = ({"BLOCK": 1024}, {"BLOCK": 512})
#: the calls each row makes (n = 4096), and the meta-parameters the resolver gives them
MEANS = {"add_tuned": {"BLOCK": 1024}, "add_heur": {"BLOCK": 1024}, "add_stacked": {"BLOCK": 1024, "EVEN": True}}


def build(out: pathlib.Path, target: str = "cuda:90") -> pathlib.Path:
    from karchive.producer.build.pack import ArchiveBuilder
    from karchive.producer.compile.aot import VariantRequest, compile_variant

    def variants(name: str, constexprs: list[dict]) -> list:
        return [
            compile_variant(VariantRequest(f"{SOURCE}:{name}", SIG, target, cx, {"num_warps": 4})) for cx in constexprs
        ]

    def key(v: object) -> str:
        return v.variant.to_json()["key"]  # type: ignore[attr-defined]

    tuned = variants("add_tuned", list(CONFIGS))
    heur = variants("add_heur", [{"BLOCK": b} for b in (256, 512, 1024)])
    stacked = variants("add_stacked", [{**c, "EVEN": e} for c in CONFIGS for e in (True, False)])
    configs = [{"kwargs": c, "num_warps": 4, "num_stages": 3} for c in CONFIGS]
    # Triton's autotune key appends str(x.dtype) of every argument with a dtype: int addresses (the CPU bench)
    # add nothing, three fp32 torch tensors (the GPU bench) add three
    fp32 = ["torch.float32"] * 3
    autotune = [
        {
            "kernel": "extra_kernels:add_tuned",
            "key_names": ["n_elements"],
            "dtype_args": [],
            "fallback": "nearest-log2",
            "configs": configs,
            "entries": [
                {"key": [4096], "config": 0, "variant": key(tuned[0])},
                {"key": [4096, *fp32], "config": 0, "variant": key(tuned[0])},
            ],
        },
        {
            "kernel": "extra_kernels:add_stacked",
            "key_names": ["n_elements", "EVEN"],
            "dtype_args": [],
            "fallback": "nearest-log2",
            "outer_heuristics": ["EVEN"],
            "configs": configs,
            "entries": [
                {"key": [4096, True], "config": 0, "variant": key(stacked[0])},
                {"key": [4096, True, *fp32], "config": 0, "variant": key(stacked[0])},
            ],
        },
    ]
    heuristics = [
        {
            "kernel": "extra_kernels:add_heur",
            "names": ["BLOCK"],
            "cases": {"BLOCK": []},
            "exprs": {"BLOCK": ["call", "min", ["call", "next_power_of_2", ["arg", "n_elements"]], ["const", 1024]]},
        },
        {
            "kernel": "extra_kernels:add_stacked",
            "names": ["EVEN"],
            "cases": {"EVEN": []},
            "exprs": {"EVEN": ["==", ["%", ["arg", "n_elements"], ["const", 1024]], ["const", 0]]},
        },
    ]
    b = ArchiveBuilder("tuned-bench", "0.1.0", autotune=autotune, heuristics=heuristics)
    b.extend(tuned + heur + stacked)
    b.write(out)
    return out


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    target = sys.argv[sys.argv.index("--target") + 1] if "--target" in sys.argv else "cuda:90"
    print(build(pathlib.Path(sys.argv[1]), target))
