"""Phases of the autotune/heuristics GPU proof (issue 23), each in a fresh Python process.

    python tests/gpu/wrapped_phases.py PHASE --work DIR --result FILE

The kernels are tests/wrapped_kernels.py (autotune and heuristics in every stacking order, one heuristic that
reads the device). Phases:

  triton_ref   Triton's own autotuned runs on fixed inputs: outputs and the configs Triton chose (ref.pt, ref.json)
  aot_build    the kernels built ahead of time from a spec, with no GPU visible (CUDA_VISIBLE_DEVICES=""):
               every config per kernel -> aot.karc
  aot_launch   Triton unimportable: aot.karc's kernels called as with Triton, without meta-parameters; the
               runtime tunes each key on the device; outputs compared bit for bit with triton_ref (these kernels'
               results do not depend on the config), in-place hooks honoured
  capture      the same calls (and two keys of heuristics over autotune) under karchive.capture -> cap.karc
  relaunch     Triton unimportable: every captured call relaunched through cap.karc; bit-equal; a call the
               device-reading heuristic never saw is refused naming the input that differs
  jit_rerun    plain Triton against an exported cache with TRITON_CACHE_AUTOTUNING=1: benchmarks and compiles
               counted, outputs compared with the capture
  tune_build   build_tune.py with this machine's Triton (when the .gpu fixture was built by another release)
  tune_cli     Triton unimportable: `karchive tune .gpu/tune.karc --keys .gpu/tune-keys.json -o tuned.karc`
               (tests/gpu/build_tune.py), then every call launched through tuned.karc from an empty tuning cache
  tune_from_capture  Triton unimportable: `karchive tune cap.karc --from-capture -o cap-tuned.karc` (the calls the
               capture recorded), then the workload relaunched through cap-tuned.karc, bit-equal
  tune_compare per call of the keys file: Triton's autotuner's choice vs karchive tune's, both timed by do_bench
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from wrapped_specs import kernel_blocks

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
N = 1 << 16
NO_TRITON = {"aot_launch", "relaunch", "tune_cli", "tune_from_capture"}

SPEC = """[archive]
name = "wrapped-gpu"
version = "1"
targets = ["cuda:90"]
{blocks}"""


def _inputs() -> dict:
    import torch

    g = torch.Generator().manual_seed(0)
    x = torch.randn(N, generator=g).cuda()
    off = torch.randn(N, generator=g).cuda()
    return {"x": x, "off": off}


def _grid(n: int):
    return lambda meta: ((n + meta["BLOCK"] - 1) // meta["BLOCK"],)


def _calls(k: Any, t: dict) -> dict:
    """The workload, on Triton's kernels or karchive's (``k``: name -> callable with Triton's call shape)."""
    import torch

    x, off = t["x"], t["off"]
    out: dict = {}
    o = torch.full_like(x, 7.0)
    k["at_copy"][_grid(N)](x, o, N)  # reset_to_zero=["out_ptr"]
    out["at_copy"] = o
    o = torch.empty_like(x)
    k["h_over_at"][_grid(N)](x, o, None, N, 1.5)  # IS_VARLEN False: part of the key
    out["h_over_at_plain"] = o
    o = torch.empty_like(x)
    k["h_over_at"][_grid(N)](x, o, off, N, 1.5)  # IS_VARLEN True: another key
    out["h_over_at_varlen"] = o
    o = torch.empty_like(x)
    xs = x.clone()
    k["at_over_h"][_grid(N - 3)](xs, o, N - 3)  # restore_value=["x_ptr"]; EVEN computed per config
    out["at_over_h"] = o
    out["at_over_h_x"] = xs
    torch.cuda.synchronize()
    return out


def _triton_kernels() -> dict:
    import wrapped_kernels as wk

    return {n: getattr(wk, n) for n in ("at_copy", "h_over_at", "at_over_h", "h_device")}


def _chosen(wk: dict) -> dict:
    from karchive.producer.compile.wrapped import stack_of

    out = {}
    for name, obj in wk.items():
        tuner = stack_of(obj).tuner
        out[name] = {repr(k): str(c) for k, c in tuner.cache.items()}
    return out


def _diff(got: dict, ref: dict) -> dict:
    import torch

    bad = {}
    for name, r in ref.items():
        g = got.get(name)
        if g is None or g.shape != r.shape or not torch.equal(g.cpu(), r.cpu()):
            bad[name] = "missing" if g is None else f"max |diff| {(g.cpu() - r.cpu()).abs().max().item()}"
    return bad


def phase_triton_ref(work: Path, opts: dict) -> dict:
    import torch

    t = _inputs()
    wk = _triton_kernels()
    out = _calls(wk, t)
    torch.save({**{k: v.cpu() for k, v in out.items()}, **{"in_" + k: v.cpu() for k, v in t.items()}}, work / "ref.pt")
    chosen = _chosen(wk)
    (work / "ref.json").write_text(json.dumps(chosen, indent=1))
    return {"chosen": chosen}


def phase_aot_build(work: Path, opts: dict) -> dict:
    from karchive.producer.build.pipeline import build_archive
    from karchive.producer.build.spec_file import load_spec, validate_requests

    spec_path = work / "aot.toml"
    spec_path.write_text(SPEC.format(blocks=kernel_blocks(ROOT / "tests" / "wrapped_kernels.py")))
    spec = load_spec(spec_path)
    warnings = validate_requests(spec.requests)
    t0 = time.perf_counter()
    result = build_archive(spec, work / "aot.karc", progress=False)
    return {
        "variants": len(result.built),
        "seconds": round(time.perf_counter() - t0, 2),
        "warnings": warnings,
        "cuda_visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }


def _load_ref(work: Path) -> tuple[dict, dict]:
    import torch

    ref = torch.load(work / "ref.pt")
    t = {k[3:]: v.cuda() for k, v in ref.items() if k.startswith("in_")}
    return {k: v for k, v in ref.items() if not k.startswith("in_")}, t


def _triton_importable() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def phase_aot_launch(work: Path, opts: dict) -> dict:
    import karchive

    ref, t = _load_ref(work)
    arc = karchive.open(str(work / "aot.karc"))
    k = {n: arc.kernel(n) for n in ("at_copy", "h_over_at", "at_over_h")}
    t0 = time.perf_counter()
    out = _calls(k, t)
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    again = _calls(k, t)  # every key tuned: no benchmarking now
    second = time.perf_counter() - t0
    chosen = {
        n: {repr(key): c[0]["kwargs"] | c[0]["options"] for key, c in kern.resolver._choices.items()}
        for n, kern in k.items()
    }
    from karchive.runtime import launch_path

    # issue 24: the variants a tuned call resolves to launch on their own path (the C dispatcher where built)
    paths = {n: sorted({type(c[2]._run).__name__ for c in kern.resolver._choices.values()}) for n, kern in k.items()}
    return {
        "not_bit_equal": _diff(out, ref),
        "not_bit_equal_again": _diff(again, ref),
        "first_s": round(first, 3),
        "second_s": round(second, 4),
        "chosen": chosen,
        "triton_importable": _triton_importable(),
        "tuned_launch_paths": paths,
        "launch_path": launch_path.choose(),
    }


def phase_capture(work: Path, opts: dict) -> dict:
    import torch

    import karchive

    t = _inputs()
    wk = _triton_kernels()
    with karchive.capture("wrapped-cap", version="1") as cap:
        out = _calls(wk, t)
        o = torch.empty_like(t["x"])
        wk["h_device"][_grid(N)](t["x"], o, N)
        out["h_device"] = o
        torch.cuda.synchronize()
    cap.save(work / "cap.karc")
    torch.save({**{k: v.cpu() for k, v in out.items()}, **{"in_" + k: v.cpu() for k, v in t.items()}}, work / "cap.pt")
    s = cap.summary()
    heur = {r["kernel"].rsplit(":", 1)[-1]: r for r in cap.heuristics.to_json()}
    return {
        "summary": {
            k: s[k] for k in ("kernels", "variants", "autotune_records", "heuristics_records", "errors", "lost")
        },
        "outer": {r["kernel"].rsplit(":", 1)[-1]: r.get("outer_heuristics") for r in cap.autotune.to_json()},
        "h_device_cases": heur.get("h_device", {}).get("cases"),
    }


def phase_relaunch(work: Path, opts: dict) -> dict:
    import torch

    import karchive
    from karchive.errors import NoMatchingVariantError

    ref, t = _load_ref_file(work / "cap.pt")
    arc = karchive.open(str(work / "cap.karc"))
    k = {n: arc.kernel(n) for n in ("at_copy", "h_over_at", "at_over_h", "h_device")}
    out = _calls(k, t)
    o = torch.empty_like(t["x"])
    k["h_device"][_grid(N)](t["x"], o, N)
    torch.cuda.synchronize()
    out["h_device"] = o
    refused = None
    try:
        k["h_device"][_grid(N // 2)](t["x"], torch.empty_like(t["x"]), N // 2)
    except NoMatchingVariantError as exc:
        refused = str(exc)
    return {
        "not_bit_equal": _diff(out, ref),
        "refused": refused,
        "triton_importable": _triton_importable(),
        "kinds": {n: type(v).__name__ for n, v in k.items()},
    }


def _load_ref_file(path: Path) -> tuple[dict, dict]:
    import torch

    ref = torch.load(path)
    t = {k[3:]: v.cuda() for k, v in ref.items() if k.startswith("in_")}
    return {k: v for k, v in ref.items() if not k.startswith("in_")}, t


def phase_jit_rerun(work: Path, opts: dict) -> dict:
    import torch
    from triton import knobs
    from triton.runtime.autotuner import Autotuner

    compiles: list[bool] = []
    knobs.compilation.listener = lambda **kw: compiles.append(bool(kw.get("cache_hit")))
    benched = []
    real = Autotuner._bench

    def counting(self: Any, *a: Any, **kw: Any) -> Any:
        benched.append(1)
        return real(self, *a, **kw)

    Autotuner._bench = counting
    ref, t = _load_ref_file(work / "cap.pt")
    wk = _triton_kernels()
    out = _calls(wk, t)
    o = torch.empty_like(t["x"])
    wk["h_device"][_grid(N)](t["x"], o, N)
    torch.cuda.synchronize()
    out["h_device"] = o
    return {
        "benchmarked": len(benched),
        "compiled": sum(1 for hit in compiles if not hit),
        "cache_hits": sum(1 for hit in compiles if hit),
        "not_bit_equal": _diff(out, ref),
    }


# -- karchive tune (the CLI) against Triton's autotuner, on the archive and keys file of build_tune.py -------------
def _fixtures() -> Path:
    return Path(os.environ.get("KARCHIVE_GPU_FIXTURES", ROOT / ".gpu"))


def phase_tune_build(work: Path, opts: dict) -> dict:
    """tests/gpu/build_tune.py with this machine's Triton into $KARCHIVE_GPU_FIXTURES (the fixture archive was built
    by another Triton release: timing choices on this Triton's JIT compares like with like only for its own binaries)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("build_tune", HERE / "build_tune.py")
    assert spec is not None and spec.loader is not None
    bt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bt)
    return bt.build(_fixtures())


def phase_tune_cli(work: Path, opts: dict) -> dict:
    """Triton unimportable: `karchive tune tune.karc --keys tune-keys.json -o tuned.karc --json` in this process,
    then every call launched through tuned.karc without meta-parameters from an empty tuning cache: the table
    answers (nothing is timed, nothing written to the cache) and the outputs are right."""
    import contextlib
    import io

    import torch

    import karchive
    from karchive.cli.main import main as karchive_main
    from karchive.runtime.tuning.tuner import TorchFactory, grid_for, materialize, parse_keys_file

    fx = _fixtures()
    out = io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(out):
        rc = karchive_main(
            [
                "tune",
                str(fx / "tune.karc"),
                "--keys",
                str(fx / "tune-keys.json"),
                "-o",
                str(work / "tuned.karc"),
                "--json",
            ]
        )
    tune_s = time.perf_counter() - t0
    if rc != 0:
        raise RuntimeError(f"karchive tune exited {rc}: {out.getvalue()[-2000:]}")
    report = json.loads(out.getvalue())
    (work / "tune-report.json").write_text(json.dumps(report, indent=1))
    cache = work / "empty-tuning-cache"
    os.environ["KARCHIVE_CACHE_DIR"] = str(cache)
    arc = karchive.open(str(work / "tuned.karc"))
    calls = parse_keys_file((fx / "tune-keys.json").read_bytes())
    factory = TorchFactory()
    errors = {}
    for call in calls:
        a = materialize(call, factory)
        k = arc.kernel(call.kernel)
        params = [n for n in k.param_names if n in a]
        k[lambda meta, call=call, a=a: grid_for(call, {**a, **meta}, None)](*[a[n] for n in params])
        torch.cuda.synchronize()
        if call.kernel == "tq_linear":
            want = a["x_ptr"].float() @ a["w_ptr"].float().T + a["bias_ptr"].float()
            got = a["out_ptr"].float()
        else:
            want = torch.linalg.vector_norm(a["x_ptr"].float(), dim=1)
            got = a["out_ptr"]
        err = ((got - want).abs().max() / want.abs().max().clamp_min(1e-6)).item()
        if not err < 1e-2:
            errors[f"{call.kernel} {call.index}"] = err
    tuned_files = [str(p) for p in (cache / "tuning").rglob("*.json")] if (cache / "tuning").exists() else []
    return {
        "report": report,
        "tune_s": round(tune_s, 2),
        "relative_errors_over_1e-2": errors,
        "tuning_cache_files": tuned_files,
        "triton_importable": _triton_importable(),
    }


def phase_tune_from_capture(work: Path, opts: dict) -> dict:
    """Triton unimportable: `karchive tune cap.karc --from-capture -o cap-tuned.karc` times again the calls the
    capture recorded with its autotune entries; the tuned capture then relaunches the workload bit-equal."""
    import contextlib
    import io

    import karchive
    from karchive.cli.main import main as karchive_main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = karchive_main(
            [
                "tune",
                str(work / "cap.karc"),
                "--from-capture",
                "-o",
                str(work / "cap-tuned.karc"),
                "--keep-going",
                "--json",
            ]
        )
    if rc != 0:
        raise RuntimeError(f"karchive tune --from-capture exited {rc}: {out.getvalue()[-2000:]}")
    report = json.loads(out.getvalue())
    ref, t = _load_ref_file(work / "cap.pt")
    arc = karchive.open(str(work / "cap-tuned.karc"))
    got = _calls({n: arc.kernel(n) for n in ("at_copy", "h_over_at", "at_over_h")}, t)
    ref = {k: v for k, v in ref.items() if k in got}
    tables = {r["kernel"]: len(r.get("tuned", [{}])[0].get("entries", [])) for r in arc.manifest.autotune}
    return {
        "decisions": [{k: d[k] for k in ("kernel", "key", "config", "timings_ms")} for d in report["decisions"]],
        "failed": report.get("failed", []),
        "tables": tables,
        "not_bit_equal": _diff(got, ref),
        "triton_importable": _triton_importable(),
    }


def phase_tune_compare(work: Path, opts: dict) -> dict:
    """For every call of the keys file: Triton's autotuner's choice (fresh cache) and karchive tune's (tune-report.json),
    both run on Triton's JIT with their meta-parameters and timed by triton.testing.do_bench, alternating, best of
    three rounds each (so only the choice differs)."""
    import torch
    from triton.testing import do_bench

    import karchive
    from karchive.producer.compile.wrapped import stack_of
    from karchive.runtime.tuning.tuner import TorchFactory, grid_for, materialize, parse_keys_file

    sys.path.insert(0, str(ROOT / "tests" / "data" / "tune"))
    import tune_kernels as tk

    fx = _fixtures()
    report = json.loads((work / "tune-report.json").read_text())
    chosen = {(d["kernel"].rpartition(":")[2], json.dumps(d["key"])): d["config"] for d in report["decisions"]}
    arc = karchive.open(str(work / "tuned.karc"))
    calls = parse_keys_file((fx / "tune-keys.json").read_bytes())
    factory = TorchFactory()
    results = []
    for call in calls:
        a = materialize(call, factory)
        obj = getattr(tk, call.kernel)
        tuner = stack_of(obj).tuner
        fn = tuner.fn
        params = [n for n in fn.arg_names if n in a]
        pos = [a[n] for n in params]

        def grid(meta, call=call, a=a):
            return grid_for(call, {**a, **meta}, None)

        tuner.cache.clear()
        obj[grid](*pos)
        torch.cuda.synchronize()
        (t_cfg,) = tuner.cache.values()
        key = arc.kernel(call.kernel).resolver.tuning_key(*pos)
        k_index = chosen[(call.kernel, json.dumps(key))]
        k_cfg = tuner.configs[k_index]
        t_meta, k_meta = t_cfg.all_kwargs(), k_cfg.all_kwargs()

        def timed(meta: dict, fn: Any = fn, grid: Any = grid, pos: list = pos) -> float:
            return do_bench(lambda: fn[grid](*pos, **meta), warmup=50, rep=300)

        t_ms, k_ms = [], []
        for _ in range(3):
            t_ms.append(timed(t_meta))
            k_ms.append(timed(k_meta))
        t_best, k_best = min(t_ms), min(k_ms)
        shape = key[:3] if call.kernel == "tq_linear" else key[:1]
        results.append(
            {
                "kernel": call.kernel,
                "case": " x ".join(str(x) for x in shape),
                "triton": str(t_cfg),
                "karchive": str(k_cfg),
                "same_config": t_cfg is k_cfg,
                "triton_ms": round(t_best, 5),
                "karchive_ms": round(k_best, 5),
                "ratio": round(k_best / t_best, 4),
            }
        )
    return {"results": results, "device": torch.cuda.get_device_name(0)}


PHASES = {
    "tune_build": phase_tune_build,
    "tune_from_capture": phase_tune_from_capture,
    "tune_cli": phase_tune_cli,
    "tune_compare": phase_tune_compare,
    "triton_ref": phase_triton_ref,
    "aot_build": phase_aot_build,
    "aot_launch": phase_aot_launch,
    "capture": phase_capture,
    "relaunch": phase_relaunch,
    "jit_rerun": phase_jit_rerun,
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("phase", choices=sorted(PHASES))
    ap.add_argument("--work", required=True)
    ap.add_argument("--result", required=True)
    args = ap.parse_args()
    if args.phase in NO_TRITON:
        sys.modules["triton"] = None  # type: ignore[assignment]  # `import triton` now raises ImportError
    for p in (str(ROOT), str(ROOT / "tests")):
        if p not in sys.path:
            sys.path.insert(0, p)
    try:
        result = {"ok": True, **PHASES[args.phase](Path(args.work), {})}
    except BaseException as exc:
        traceback.print_exc()
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:2000]}
    Path(args.result).write_text(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
