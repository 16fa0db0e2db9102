"""Kernel identity (issue 19): a kernel is filed as ``module:qualname``, so two kernels that share a
``__name__`` in different modules are two kernels, in a build and in a capture; ``arc.kernel`` takes the
qualified name, or the short name where it is unique. Real Triton compiles for cuda:90 (no GPU needed);
the launches are in tests/gpu/test_gpu_identity.py."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import types

import pytest
from identity_support import SIG, make_checkout
from support import have_triton, needs_triton

import karchive
from karchive.errors import KernelNameError, UnsupportedKernelError
from karchive.format.names import find_kernel, is_kernel_name, kernel_matches, select_kernels, short_name

ROOT = pathlib.Path(__file__).resolve().parent.parent
TWINS = ["alpha:add_kernel", "beta:add_kernel", "nested:make.<locals>.scale"]


def _cli(*args: object, cwd: pathlib.Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "karchive", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=600,
    )


@pytest.fixture(scope="module")
def twins(tmp_path_factory) -> tuple[pathlib.Path, pathlib.Path]:
    """The same checkout at two paths, each built by the real CLI in its own interpreter."""
    if not have_triton():
        pytest.skip("needs triton")
    out = []
    for where in ("one/checkout", "two/elsewhere/deeper"):
        root = tmp_path_factory.mktemp("twins") / where
        spec = make_checkout(root)
        archive = root.parent / "twins.karc"
        r = _cli("build", spec, "-o", archive, "--quiet", cwd=root)
        assert r.returncode == 0, r.stderr
        out.append(archive)
    return out[0], out[1]


@needs_triton
def test_two_kernels_of_one_name_are_both_archived_under_their_modules(twins):
    arc = karchive.open(twins[0])
    assert arc.kernels() == TWINS
    alpha, beta = arc.variants("alpha:add_kernel"), arc.variants("beta:add_kernel")
    assert len(alpha) == len(beta) == 1 and alpha[0].key != beta[0].key
    # their own binaries and their own sources (x + y against x - y)
    assert alpha[0].binary.sha256 != beta[0].binary.sha256 and alpha[0].source != beta[0].source
    assert b"+ tl.load(y_ptr" in arc.reader.read(alpha[0].source)
    assert b"- tl.load(y_ptr" in arc.reader.read(beta[0].source)
    # the entry symbol is still the function's __name__, as Triton names it
    assert alpha[0].abi.entry == beta[0].abi.entry == "add_kernel"
    # qualified names do not depend on where the checkout is: the same bytes from another path
    assert twins[0].read_bytes() == twins[1].read_bytes()


@needs_triton
def test_lookup_by_qualified_name_or_unique_short_name(twins):
    arc = karchive.open(twins[0])
    a, b = arc.kernel("alpha:add_kernel"), arc.kernel("beta:add_kernel")
    assert a is not b and a.name == "alpha:add_kernel" and {v.kernel for v in b.variants} == {"beta:add_kernel"}
    with pytest.raises(KernelNameError, match=r"2 kernels named 'add_kernel'.*alpha:add_kernel, beta:add_kernel") as e:
        arc.kernel("add_kernel")
    assert e.value.available == ("alpha:add_kernel", "beta:add_kernel") and isinstance(e.value, KeyError)
    with pytest.raises(KernelNameError):
        arc.variants("add_kernel")  # the same ambiguity, not a silent union
    assert arc.kernel("scale") is arc.kernel("nested:make.<locals>.scale")  # unique short name
    with pytest.raises(KernelNameError, match="no kernel named 'gamma:add_kernel'"):
        arc.kernel("gamma:add_kernel")
    # a call through either kernel selects among its own variants only
    x = 0x7F00_0000_0000
    assert a.select(x, x, x, 10, BLOCK=256, device="cuda:90").key == arc.variants("alpha:add_kernel")[0].key
    assert b.select(x, x, x, 10, BLOCK=256, device="cuda:90").key == arc.variants("beta:add_kernel")[0].key


@needs_triton
def test_tools_take_short_or_qualified_names(twins, tmp_path):
    both = _cli("inspect", twins[0], "--json", "-k", "add_kernel")
    assert both.returncode == 0 and sorted(v["kernel"] for v in json.loads(both.stdout)["variants"]) == TWINS[:2]
    one = _cli("inspect", twins[0], "--json", "-k", "beta:add_kernel")
    assert [v["kernel"] for v in json.loads(one.stdout)["variants"]] == ["beta:add_kernel"]
    table = _cli("inspect", twins[0], "-k", "scale").stdout.splitlines()
    assert [line.split()[0] for line in table if line.startswith("nested:")] == ["nested:make.<locals>.scale"]
    # export-triton-cache names the files as Triton does (by __name__), one directory per Triton hash
    cache = tmp_path / "tc"
    r = _cli("export-triton-cache", twins[0], "--cache-dir", cache, "-k", "add_kernel", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["counts"] == {"written": 2}
    dirs = [d for d in cache.iterdir() if d.is_dir()]
    assert len(dirs) == 2 and all((d / "add_kernel.cubin").is_file() for d in dirs)
    assert not any(":" in f.name for d in dirs for f in d.iterdir())
    r = _cli("export-triton-cache", twins[0], "--cache-dir", tmp_path / "x", "-k", "gamma:add_kernel")
    assert r.returncode == 2 and "has no kernel 'gamma:add_kernel'" in r.stderr


def test_kernel_names_follow_the_grammar():
    assert find_kernel("add_kernel", ["a:add_kernel", "b:add_kernel"]) == ["a:add_kernel", "b:add_kernel"]
    assert find_kernel("a:add_kernel", ["a:add_kernel", "b:add_kernel"]) == ["a:add_kernel"]
    # a bare name beside a qualified one of that short name (a Triton-cache import next to a capture): both
    assert find_kernel("add_kernel", ["add_kernel", "a:add_kernel"]) == ["a:add_kernel", "add_kernel"]
    assert find_kernel("add_kernel", ["add_kernel", "b:mul"]) == ["add_kernel"]
    assert find_kernel("c:add_kernel", ["a:add_kernel"]) == [] and find_kernel(None, ["a:k"]) == []
    assert find_kernel("k", ["m:Outer.<locals>.k"]) == ["m:Outer.<locals>.k"]
    assert kernel_matches("a:k", "k") and kernel_matches("k", "a:k") and not kernel_matches("a:k", "b:k")
    assert select_kernels(["k"], ["a:k", "b:k", "c:j"]) == ["a:k", "b:k"] and select_kernels(None, ["x"]) == ["x"]
    assert short_name("pkg.mod:Outer.<locals>.k") == "k" and is_kernel_name("nested:make.<locals>.scale")


def test_kernel_name_of_scripts_and_functions(tmp_path):
    """__main__ kernels are named after the script where that is an identifier, never after its path."""
    from karchive.producer.compile.canonical import kernel_name

    def fake(module: str, qualname: str, file_name: str) -> types.SimpleNamespace:
        inner = types.SimpleNamespace(__qualname__=qualname, __name__=qualname.rpartition(".")[2])
        return types.SimpleNamespace(fn=inner, __name__=inner.__name__, __module__=module, file_name=file_name)

    assert kernel_name(fake("__main__", "k", str(tmp_path / "train.py"))) == "train:k"
    assert kernel_name(fake("__main__", "run.<locals>.k", str(tmp_path / "my-script.py"))) == "__main__:run.<locals>.k"
    assert kernel_name(fake("__main__", "k", "<stdin>")) == "__main__:k"
    assert kernel_name(fake("pkg.ops", "Ops.k", "rel/ops.py")) == "pkg.ops:Ops.k"
    assert kernel_name(fake("modé", "k", "x.py")) == "k"  # outside the grammar: the bare name
    with pytest.raises(UnsupportedKernelError):
        kernel_name(fake("modé", "ké", "x.py"))


@needs_triton
def test_capture_files_two_same_named_kernels_apart(tmp_path, triton_cache_dir, fake_gpu_driver, monkeypatch):
    """A capture meeting alpha.add_kernel and beta.add_kernel archives both, under their modules."""
    from capture_fakes import ptr

    make_checkout(tmp_path / "co", nested=False)
    monkeypatch.syspath_prepend(str(tmp_path / "co"))
    for name in ("alpha", "beta"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    import alpha
    import beta

    with karchive.capture("twins", version="1.0") as cap:
        alpha.add_kernel[(4,)](ptr(), ptr(), ptr(), 1000, BLOCK=256)
        beta.add_kernel[(4,)](ptr(), ptr(), ptr(), 1000, BLOCK=256)
    out = tmp_path / "cap.karc"
    cap.save(out)
    arc = karchive.open(out)
    assert arc.kernels() == ["alpha:add_kernel", "beta:add_kernel"]
    with pytest.raises(KernelNameError, match="alpha:add_kernel, beta:add_kernel"):
        arc.kernel("add_kernel")
    # the capture names them as the build does: same keys as an AOT compile of the same request
    from karchive.producer.compile.aot import VariantRequest, compile_variant

    aot = compile_variant(
        VariantRequest(f"{tmp_path / 'co' / 'beta.py'}:add_kernel", SIG, "cuda:90", {"BLOCK": 256}, {"num_warps": 4})
    )
    assert aot.kernel == "beta:add_kernel" and aot.key == arc.variants("beta:add_kernel")[0].key


@needs_triton
def test_two_modules_of_one_name_are_refused_not_merged(tmp_path):
    """a/kernels.py and b/kernels.py both define add_kernel: both are kernels:add_kernel, so the build refuses
    rather than file two kernels' variants under one name (selection could then pick between them)."""
    from identity_support import ALPHA, BETA

    for sub, text in (("a", ALPHA), ("b", BETA)):
        (tmp_path / sub).mkdir()
        (tmp_path / sub / "kernels.py").write_text(text)
    spec = tmp_path / "build.toml"
    spec.write_text(f'''[archive]
name = "clash"
version = "1.0"
targets = ["cuda:90"]

[[kernel]]
source = "a/kernels.py:add_kernel"
signature = "{SIG}"
constexprs = {{ BLOCK = [256] }}

[[kernel]]
source = "b/kernels.py:add_kernel"
signature = "{SIG}"
constexprs = {{ BLOCK = [128] }}
''')
    r = _cli("build", spec, "-o", tmp_path / "clash.karc", "-j", "1", cwd=tmp_path)
    assert r.returncode != 0 and "two different kernels would be archived as 'kernels:add_kernel'" in r.stderr, r.stderr
    assert not (tmp_path / "clash.karc").exists()
