"""Build the tensor-descriptor proof archives (issue 21) on the CPU machine, for tests/gpu/test_tensordesc_gpu.py.

    bash tools/tritons.sh 3.6                      # optional: a Triton 3.6 venv (the H100's release)
    python tests/gpu/build_tensordesc.py [OUT]     # -> .gpu/tensordesc/ (git-ignored; the lead carries .gpu/)

``OUT/tensordesc.karc``: this checkout's ``karchive build`` (its Triton) of tests/gpu/tensordesc_build.toml
(host-descriptor copy and add, persistent matmul, attention forward, a device-side descriptor kernel and an
autotuned descriptor matmul, for cuda:90 and cuda:100). ``OUT/tensordesc-triton-<X.Y.Z>.karc``: the same
spec built by each Triton release venv under ``.venv-triton/`` (tools/tritons.sh), so the H100 launches
archives of two descriptor conventions (``triton-3.5`` from 3.5/3.6, ``triton-3.8`` from 3.7/3.8/3.9).
A venv whose Triton has no descriptor convention in this checkout (a release karchive has not read, which
its producer refuses) is skipped with a printed note instead of failing the whole build.
``OUT/index.json`` names each archive with the Triton that built it. ``OUT/im2col.karc``: this checkout's
build of tests/gpu/im2col_build.toml (a Gluon im2col descriptor kernel), when its Triton has Gluon im2col
(3.8+; otherwise skipped with a note). No GPU needed.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
SPEC = ROOT / "tests" / "gpu" / "tensordesc_build.toml"
IM2COL_SPEC = ROOT / "tests" / "gpu" / "im2col_build.toml"
DEFAULT_OUT = ROOT / ".gpu" / "tensordesc"
VENVS = ROOT / os.environ.get("KARCHIVE_TRITON_VENVS", ".venv-triton")


def _build(python: str, out: pathlib.Path, spec: pathlib.Path = SPEC) -> str:
    """Build ``spec`` with ``python``'s karchive into ``out``; the Triton version that built it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRITON_")}
    subprocess.run([python, "-m", "karchive", "build", str(spec), "-o", str(out)], cwd=ROOT, env=env, check=True)
    from karchive.format.open import open_location

    return str(open_location(out).manifest["produced_by"]["triton"])


def venv_triton(venv: pathlib.Path) -> str | None:
    """The Triton version a release venv holds, from its installed distribution (None: no single one)."""
    dists = sorted(venv.glob("lib/python*/site-packages/triton-*.dist-info"))
    return dists[0].name[len("triton-") : -len(".dist-info")] if len(dists) == 1 else None


def release_venvs(base: pathlib.Path) -> tuple[list[pathlib.Path], list[str]]:
    """The venvs under ``base`` to build with, and a note for each one skipped (no interpreter, no single
    Triton, or a Triton whose descriptor convention this checkout does not know: karchive's producer would
    refuse its descriptor kernels, which says nothing about the archives the other releases build)."""
    from karchive.format.tensordesc import CONVENTIONS, convention_for_triton

    use: list[pathlib.Path] = []
    notes: list[str] = []
    for venv in sorted(base.glob("*")) if base.is_dir() else []:
        if not (venv / "bin" / "python").exists():
            continue
        version = venv_triton(venv)
        if version is None:
            notes.append(f"skipped {venv}: no single triton distribution installed there")
        elif convention_for_triton(version) is None:
            known = "; ".join(f"{c}: Triton {', '.join(m)}" for c, m in CONVENTIONS.items())
            notes.append(
                f"skipped {venv}: karchive knows no tensor-descriptor convention for Triton {version} (known: {known})"
            )
        else:
            use.append(venv)
    return use, notes


def has_gluon_im2col() -> bool:
    """Does this interpreter's Triton compile Gluon im2col loads (``tma.async_load_im2col``, Triton 3.8+)?"""
    try:
        from triton.experimental.gluon.language.nvidia.hopper import tma
    except ImportError:
        return False
    return hasattr(tma, "async_load_im2col")


def main(argv: list[str]) -> int:
    out = pathlib.Path(argv[0]) if argv else DEFAULT_OUT
    out.mkdir(parents=True, exist_ok=True)
    index: dict[str, str] = {}
    try:
        version = _build(sys.executable, out / "tensordesc.karc")
        index[version] = "tensordesc.karc"
        shutil.copyfile(out / "tensordesc.karc", out / f"tensordesc-triton-{version}.karc")
        venvs, notes = release_venvs(VENVS)
        for note in notes:
            print(f"note: {note}")
        for venv in venvs:
            python = venv / "bin" / "python"
            path = out / f"tensordesc-triton-{venv.name}.karc"
            v = _build(str(python), path)
            final = out / f"tensordesc-triton-{v}.karc"
            path.replace(final)
            index.setdefault(v, final.name)
        if has_gluon_im2col():
            _build(sys.executable, out / "im2col.karc", IM2COL_SPEC)
            print(f"im2col: {out / 'im2col.karc'}")
        else:
            print("note: skipped im2col.karc: this Triton has no Gluon im2col loads (Triton 3.8+ has them)")
    except subprocess.CalledProcessError as exc:
        return exc.returncode or 1
    (out / "index.json").write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")
    for v, name in sorted(index.items()):
        print(f"Triton {v}: {out / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
