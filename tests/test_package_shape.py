"""The package's public shape: the build and compile faces, what ``import karchive`` pulls in, py.typed.

tests/test_layers.py checks the structure (layers, twin names, ``__all__``; circles: test_import_cycles.py); this checks what a
user of the package sees: ``karchive.build`` / ``karchive.compile`` build a real archive with no deep
import, and are the very objects the producer modules define.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

from support import needs_triton

import karchive

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _run(code: str) -> str:
    r = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        cwd=str(ROOT),
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_the_faces_import_no_triton_and_karchive_alone_imports_no_producer():
    out = _run("""
        import sys, karchive
        assert not any(m.startswith("karchive.producer") for m in sys.modules), "import karchive stays light"
        import karchive.build, karchive.compile
        assert "triton" not in sys.modules and "ray" not in sys.modules
        assert karchive.build.build_archive and karchive.compile.compile_variant
        print("ok")
    """)
    assert out == "ok"


def test_the_faces_are_lazy_attributes_of_karchive():
    out = _run("""
        import sys, karchive
        assert "build" in dir(karchive) and "compile" in dir(karchive)
        assert "karchive.build" not in sys.modules
        print(karchive.build.__name__, karchive.compile.__name__)
    """)
    assert out == "karchive.build karchive.compile"


def test_the_faces_export_the_producers_own_objects():
    import karchive.build as build
    import karchive.compile as compile_
    from karchive.producer.build import pipeline, spec_file
    from karchive.producer.build.pack import ArchiveBuilder
    from karchive.producer.compile import aot, toolchain

    assert build.build_archive is pipeline.build_archive and build.load_spec is spec_file.load_spec
    assert build.ArchiveBuilder is ArchiveBuilder and build.VariantRequest is aot.VariantRequest
    assert compile_.compile_variant is aot.compile_variant and compile_.check_target is toolchain.check_target
    for face in (build, compile_):
        assert sorted(face.__all__) == sorted(set(face.__all__)), "no name listed twice"
        assert all(getattr(face, name) is not None for name in face.__all__)


@needs_triton
def test_building_through_the_face_needs_no_deep_import(tmp_path):
    """A real compile (cuda:90, no GPU needed) through karchive.build only, opened with karchive.open."""
    from karchive.build import BuildSpec, VariantRequest, build_archive

    req = VariantRequest(
        str(ROOT / "examples" / "kernels.py") + ":add_kernel",
        "*fp32:16, *fp32:16, *fp32:16, i32",
        "cuda:90",
        {"BLOCK": 256},
        {"num_warps": 4},
    )
    result = build_archive(BuildSpec("face", "1.0", [req]), tmp_path / "face.karc", jobs=1, progress=False)
    assert len(result.built) == 1 and not result.failed
    arc = karchive.open(tmp_path / "face.karc")
    (name,) = arc.kernels()
    assert name.endswith("add_kernel") and len(arc.kernel(name).variants) == 1


def test_the_wheel_ships_py_typed_and_the_stubs():
    assert (ROOT / "karchive" / "py.typed").is_file()
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["karchive"]
    assert "py.typed" in data and any(p.endswith("*.pyi") for p in data)
