"""GPU proof of issue 30: public Triton libraries that karchive's serving was not built against, served unchanged.

For each library of tests/gpu/corpus2_phases.py (FlagGems, GemLite, cut-cross-entropy with and without its
autotuner), each phase a fresh process: the library's ops (every one called three times) under plain Triton and
``karchive.capture`` (the archive and the reference outputs); then a fresh process with empty Triton and library
caches, Triton's compiler made unusable and ``karchive.serve(LIB.karc, mode="strict")`` running the same ops.
Asserted: every op ran, 0 compiles, no kernel file in the Triton cache, no miss in the report, every output and
gradient bit-equal to the reference (kernels whose TTIR holds atomics: within ``ATOMIC_ATOL + ATOMIC_RTOL * |want|``,
listed in the summary; a second plain run says whether plain Triton itself differs there). Then the multi-GPU job
(tests/gpu/serve_multigpu.py; skipped with fewer than 2 GPUs).

Opt-in: ``KARCHIVE_SERVE_GPU=1``; ``KARCHIVE_CORPUS2_LIBS=flaggems,gemlite,cce,cce-autotune`` picks libraries;
numbers and results in ``$OUT/corpus2/summary.json``. The command: tests/gpu/CORPUS.md, "Issue 30's corpus".
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from corpus2_phases import LIBRARIES, run_phase
from corpus_phases import ATOMIC_ATOL, ATOMIC_RTOL

USES_BUILD_FIXTURES = False  # captures its own archives (conftest.py: no .gpu/ fixtures needed)
ENABLED = os.environ.get("KARCHIVE_SERVE_GPU") == "1"
LIBS = [lb for lb in os.environ.get("KARCHIVE_CORPUS2_LIBS", ",".join(LIBRARIES)).split(",") if lb]
TIMEOUT = int(os.environ.get("KARCHIVE_CORPUS_TIMEOUT", "300"))
_SUMMARY: dict[str, dict] = {}

pytestmark = pytest.mark.skipif(
    not ENABLED,
    reason="compiles and tunes public libraries (minutes): "
    "KARCHIVE_SERVE_GPU=1 pytest tests/gpu/test_serve_corpus2_gpu.py",
)


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    where = os.environ.get("KARCHIVE_CORPUS_WORK") or (os.environ.get("OUT") and Path(os.environ["OUT"]) / "corpus2")
    d = Path(where) if where else tmp_path_factory.mktemp("corpus2")
    d.mkdir(parents=True, exist_ok=True)
    return d


def _save(work: Path) -> None:
    (work / "summary.json").write_text(json.dumps(_SUMMARY, indent=1, default=str))


def _ok(result: dict, what: str) -> dict:
    if "skip" in result:
        pytest.skip(result["skip"])
    assert result.get("ok"), f"{what}: {result.get('error')}"
    assert not result.get("op_errors"), f"{what}: ops failed: {json.dumps(result['op_errors'], indent=1)}"
    return result


def _atomic_kernels(path: Path) -> set[str]:
    import karchive

    arc = karchive.open(path)
    out = set()
    for v in arc.manifest.variants:
        ttir = v.ir.get("ttir") if v.ir else None
        if ttir is not None and b"tt.atomic" in arc.reader.read(ttir.path):
            out.add(v.kernel)
    return out


def _compare(want: dict, got: dict, tolerate: bool) -> tuple[list[str], list[str]]:
    """(tensors that differ, tensors only within the atomics tolerance)."""
    import torch

    differ, tolerated = [], []
    for name, w in want.items():
        g = got[name]
        if g.shape != w.shape or g.dtype != w.dtype:
            differ.append(f"{name}: {tuple(g.shape)} {g.dtype}, want {tuple(w.shape)} {w.dtype}")
            continue
        if torch.equal(g, w) or (
            g.is_floating_point()
            and torch.equal(g.isnan(), w.isnan())
            and torch.equal(torch.nan_to_num(g), torch.nan_to_num(w))
        ):
            continue
        if tolerate and torch.allclose(g.float(), w.float(), atol=ATOMIC_ATOL, rtol=ATOMIC_RTOL, equal_nan=True):
            tolerated.append(name)
        else:
            differ.append(f"{name}: max |diff| {(g.float() - w.float()).abs().max().item():.3g}")
    return differ, tolerated


@pytest.mark.parametrize("lib", LIBS)
def test_library_served_strict_zero_compiles_bit_equal(lib, work):
    import torch

    summary = _SUMMARY.setdefault(lib, {})
    ref = _ok(run_phase("reference", lib, work, TIMEOUT), f"{lib} reference")
    summary["reference"] = {
        k: ref.get(k)
        for k in ("library", "ops", "step_s", "process_s", "kernels", "left_out", "capture_warnings", "save_workaround")
    }
    assert ref["left_out"] == [], ref["left_out"]
    served = run_phase("serve", lib, work, TIMEOUT)
    summary["serve"] = served
    _save(work)
    served = _ok(served, f"{lib} serve(strict)")
    assert served["compiles"] == 0, f"Triton compiled {served['compiles']} time(s)"
    kernels = [
        f
        for f in served["triton_cache_files"]
        if f.endswith((".cubin", ".ptx", ".ttir", ".ttgir", ".llir", ".hsaco", ".amdgcn"))
    ]
    assert kernels == [], kernels
    assert served["report"]["missed"] == [], served["report_text"]
    assert served["report"]["served"], "nothing was served"
    assert served["ops"] == ref["ops"]
    want = torch.load(work / f"{lib}-reference.pt", weights_only=True)
    got = torch.load(work / f"{lib}-serve.pt", weights_only=True)
    assert set(got) == set(want) and want
    atomics = _atomic_kernels(work / f"{lib}.karc")
    differ, tolerated = _compare(want, got, bool(atomics))
    summary.update(
        tensors=len(want),
        bit_equal=len(want) - len(tolerated) - len(differ),
        within_tolerance=tolerated,
        atomic_kernels=sorted(atomics),
        differ=differ,
    )
    if tolerated:  # is that plain Triton's own run-to-run difference? a second plain run says
        plain = _ok(run_phase("plain", lib, work, TIMEOUT), f"{lib} plain")
        again = torch.load(work / f"{lib}-plain.pt", weights_only=True)
        summary["plain_rerun_differs_in"] = sorted(
            set(_compare(want, again, True)[1]) | set(_compare(want, again, False)[0])
        )
        summary["plain_step_s"] = plain["step_s"]
    _save(work)
    assert not differ, f"outputs differ from the reference run: {differ}"


def test_two_ranks_each_serve_their_own_device(work):
    """torchrun, 2 ranks, started through ``python -m karchive.serve`` with ``KARCHIVE_SERVE``: each rank serves its
    own GPU (default stream, a side stream, a CUDA graph captured on a side stream), 0 compiles, outputs equal to a
    plain Triton run of the same job (cut-cross-entropy's atomics: within the stated tolerance)."""
    import torch
    from serve_multigpu import job_main

    ref = job_main("reference", work, TIMEOUT)
    if "skip" in ref:
        pytest.skip(ref["skip"])
    _SUMMARY["multi-gpu"] = {"reference": ref}
    assert ref["rc"] == 0 and all(r["ok"] for r in ref["ranks"]), json.dumps(ref, indent=1, default=str)[-4000:]
    served = job_main("serve", work, TIMEOUT)
    _SUMMARY["multi-gpu"]["serve"] = served
    _save(work)
    assert served["rc"] == 0 and all(r["ok"] for r in served["ranks"]), json.dumps(served, indent=1)[-4000:]
    assert served["triton_cache_kernel_files"] == []  # no compile left a kernel, and ptxas pointed nowhere
    tolerated_all = {}
    for rank in served["ranks"]:
        r = rank["rank"]
        assert rank["device"] == r
        assert rank["report"] is not None and rank["report"]["mode"] == "strict", rank
        assert rank["report"]["missed"] == [], rank["report_text"]
        assert {"kernels:add_kernel", "kernels:softmax_kernel"} <= set(rank["report"]["served"])
        want = torch.load(work / f"mg-reference-rank{r}.pt", weights_only=True)
        got = torch.load(work / f"mg-serve-rank{r}.pt", weights_only=True)
        assert set(got) == set(want)
        differ, tolerated = _compare(want, got, True)
        assert not differ, f"rank {r}: {differ}"
        assert not [t for t in tolerated if not t.startswith("cce")], tolerated  # only the atomics may differ
        tolerated_all[r] = tolerated
    _SUMMARY["multi-gpu"]["within_tolerance"] = tolerated_all
    _save(work)
