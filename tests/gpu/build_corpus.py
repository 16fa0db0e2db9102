"""Build the corpus libraries' autotuned kernels ahead of time, on the CPU machine (issue 23), with `karchive build`.

    python tests/gpu/build_corpus.py [OUT_DIR]          # default: .gpu/corpus/ (git-ignored)

For each kernel of :data:`KERNELS` it writes a build spec naming the library's *autotuned* kernel object
(``@triton.autotune``, for fla also ``@triton.heuristics`` over it) with no tuned meta-parameters, and runs
``python -m karchive build SPEC -o NAME.karc`` in its own process: the spec gives the signature and the
constexprs the library passes itself; every config of the autotuner is to be built (issue 23: "a spec ...
naming an autotuned and/or heuristics kernel builds every config of it"). Sources: the tutorials from
.corpus-src/triton_tutorials/, Liger-Kernel and fla-core from their pinned wheels in .whl/, unpacked (pure
Python) into OUT_DIR/site/. Nothing needs a GPU; Liger and fla import torch at module level, so their kernels
build only where torch is importable.

Every kernel's outcome goes into OUT_DIR/corpus-build.json (``ok``, the archive, or the error's last lines);
a kernel that fails does not stop the others, and the exit status is 1 when any failed. The GPU test
(tests/gpu/test_corpus_gpu.py) launches what was built and xfails the rest with this file's reason.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import time
import zipfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
SRC = pathlib.Path(os.environ.get("KARCHIVE_CORPUS_SRC", ROOT / ".corpus-src")) / "triton_tutorials"
WHEELS = {"liger": "liger_kernel-0.8.5-py3-none-any.whl", "fla": "fla_core-0.6.0-py3-none-any.whl"}

#: entry -> library, source ("tutorials:FILE" or a path inside the unpacked site), kernel name, spec body.
#: The signatures are the ones the corpus workload's launches specialise to (tests/gpu/corpus_phases.py).
KERNELS: dict[str, dict] = {
    "tutorials-matmul": {
        "library": "tutorials",
        "file": "tutorials:tut03_matrix_multiplication.py",
        "kernel": "matmul_kernel",
        # a, b, c; M, N, K (512 and 128..384: multiples of 16); strides (row strides multiples of 16, column 1)
        "signature": "*fp16:16, *fp16:16, *fp16:16, i32:16, i32:16, i32:16, i32:16, i32:1, i32:16, i32:1, "
        "i32:16, i32:1",
        "constexprs": {"ACTIVATION": ["", "leaky_relu"]},
    },
    "liger-dyt-fwd": {
        "library": "liger",
        "file": "site:liger_kernel/ops/dyt.py",
        "kernel": "_dyt_fwd_kernel",
        "signature": "*fp32:16, *fp32:16, *fp32:16, *fp32:16, *fp32:16",  # X, Y, Alpha, Gamma, Beta
        "constexprs": {"HAVE_BETA": [True], "N": [512]},
    },
    "liger-dyt-bwd": {
        "library": "liger",
        "file": "site:liger_kernel/ops/dyt.py",
        "kernel": "_dyt_bwd_kernel",
        # DY, DX, DA, DG, DB, X, Alpha, Gamma; M
        "signature": "*fp32:16, *fp32:16, *fp32:16, *fp32:16, *fp32:16, *fp32:16, *fp32:16, *fp32:16, i32:16",
        "constexprs": {"HAVE_BETA": [True], "N": [512]},
    },
    "fla-kkt": {
        "library": "fla-delta-rule",
        "file": "site:fla/ops/common/chunk_scaled_dot_kkt.py",
        "kernel": "chunk_scaled_dot_kkt_fwd_kernel",  # @triton.heuristics over @triton.autotune (tunes BK)
        # k, beta (bf16), A (fp32), T (do_not_specialize); g, cu_seqlens and chunk_indices are None in the
        # corpus step (a spec writes None, the constexpr Triton specialises a None argument to) and USE_G /
        # IS_VARLEN come from its heuristics
        "signature": {
            "k": "*bf16:16",
            "g": "None",
            "beta": "*bf16:16",
            "A": "*fp32:16",
            "T": "i32",
            "cu_seqlens": "None",
            "chunk_indices": "None",
        },
        "constexprs": {"H": [4], "HV": [4], "K": [64], "BT": [64]},
    },
}


def _toml_value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {_toml_value(x)}" for k, x in v.items()) + " }"
    return repr(v)


def spec_text(entry: str, info: dict, source: pathlib.Path) -> str:
    return "\n".join(
        [
            f"# {entry}: the library's autotuned kernel, every config (written by tests/gpu/build_corpus.py)",
            "[archive]",
            f'name = "corpus-{entry}"',
            'version = "1.0"',
            'targets = ["cuda:90"]',
            "",
            "[[kernel]]",
            "source = " + json.dumps(f"{source}:{info['kernel']}"),
            f"signature = {_toml_value(info['signature'])}",
            f"constexprs = {_toml_value(info['constexprs'])}",
            "",
        ]
    )


def unpack_wheels(site: pathlib.Path) -> dict[str, str]:
    """The pinned pure-Python wheels of .whl/ unpacked into ``site``; library -> problem, for those missing."""
    missing = {}
    for lib, wheel in WHEELS.items():
        path = ROOT / ".whl" / wheel
        if not path.is_file():
            missing[lib] = f"{path} missing (tests/gpu/CORPUS.md: pip download ... {wheel.split('-')[0]})"
            continue
        with zipfile.ZipFile(path) as zf:
            for member in zf.namelist():  # our own pinned download; still, no path outside site/
                target = (site / member).resolve()
                if not target.is_relative_to(site.resolve()):
                    raise SystemExit(f"{wheel}: member {member!r} escapes the unpack directory")
            zf.extractall(site)
    return missing


def build(out: pathlib.Path, only: list[str] | None = None) -> int:
    out.mkdir(parents=True, exist_ok=True)
    site = out / "site"
    site.mkdir(exist_ok=True)
    missing = unpack_wheels(site)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(site), env.get("PYTHONPATH", "")])
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    report: dict[str, dict] = {}
    failed = 0
    for entry, info in KERNELS.items():
        if only and entry not in only:
            continue
        where, _, rel = info["file"].partition(":")
        source = (SRC if where == "tutorials" else site) / rel
        row = {
            "library": info["library"],
            "kernel": info["kernel"],
            "archive": f"{entry}.karc",
            "ok": False,
            "error": None,
            "seconds": None,
            "spec": f"{entry}.toml",
        }
        report[entry] = row
        if info["library"].partition("-")[0] in missing:
            row["error"] = missing[info["library"].partition("-")[0]]
        elif not source.is_file():
            row["error"] = f"{source} missing (tests/gpu/CORPUS.md says how to get the tutorials)"
        if row["error"]:
            failed += 1
            print(f"{entry}: NOT BUILT: {row['error']}")
            continue
        spec = out / f"{entry}.toml"
        spec.write_text(spec_text(entry, info, source))
        archive = out / f"{entry}.karc"
        archive.unlink(missing_ok=True)
        t0 = time.perf_counter()
        try:
            r = subprocess.run(
                [sys.executable, "-m", "karchive", "build", str(spec), "-o", str(archive)],
                capture_output=True,
                text=True,
                env=env,
                timeout=900,
                cwd=out,
            )
            rc, text = r.returncode, (r.stderr or "") + (r.stdout or "")
        except subprocess.TimeoutExpired:
            rc, text = 124, "karchive build timed out after 900 s"
        row["seconds"] = round(time.perf_counter() - t0, 1)
        if rc == 0 and archive.is_file():
            row["ok"] = True
            print(f"{entry}: built {archive.name} in {row['seconds']} s")
        else:
            failed += 1
            row["error"] = "\n".join(text.strip().splitlines()[-6:]) or f"karchive build exited {rc}"
            print(f"{entry}: NOT BUILT (exit {rc}, {row['seconds']} s): {row['error']}")
    from karchive.producer.compile.aot import toolchain_versions

    (out / "corpus-build.json").write_text(
        json.dumps({"built_with": toolchain_versions(), "kernels": report}, indent=1, sort_keys=True, default=str)
        + "\n"
    )
    print(f"{len(report) - failed} of {len(report)} corpus kernels built into {out} (corpus-build.json)")
    return 1 if failed else 0


def main(argv: list[str]) -> int:
    args = [a for a in argv if not a.startswith("-k=")]
    only = [a[3:] for a in argv if a.startswith("-k=")] or None
    return build(pathlib.Path(args[0]) if args else ROOT / ".gpu" / "corpus", only)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
