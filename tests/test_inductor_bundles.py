"""karchive.core.inductor_bundles without torch: a stand-in ``TritonBundler`` module shows that refusals from
captures and serving sessions, opened and closed in any order, keep bundles out while any is open and put back what
they replaced once all ended (tests/test_inductor_capture.py runs the same with torch's own)."""

from __future__ import annotations

import itertools
import sys
import types

import pytest

from karchive.core.inductor_bundles import refuse_triton_bundles

BUNDLE = types.SimpleNamespace(kernel_artifacts=["k"], static_autotuners=[])


@pytest.fixture
def bundler(monkeypatch):
    restored = []

    class TritonBundler:
        @staticmethod
        def read_and_emit(bundle):
            restored.append(bundle)
            return "meta"

    module = types.ModuleType("torch._inductor.triton_bundler")
    module.TritonBundler = TritonBundler
    monkeypatch.setitem(sys.modules, "torch._inductor.triton_bundler", module)
    return TritonBundler, restored


@pytest.mark.parametrize("order", list(itertools.permutations(range(3))))
def test_refusals_end_in_any_order(bundler, order):
    cls, restored = bundler
    theirs = cls.__dict__["read_and_emit"]
    counts = [0, 0, 0]

    def counter(i):
        def count():
            counts[i] += 1

        return count

    undos = [refuse_triton_bundles(counter(i)) for i in range(3)]
    assert cls.read_and_emit(BUNDLE) is None and counts == [1, 1, 1]
    for n, i in enumerate(order):
        undos[i]()
        undos[i]()  # twice: nothing more
        if n < 2:
            assert cls.read_and_emit(BUNDLE) is None, f"a bundle restored with {2 - n} refusal(s) open"
    assert cls.__dict__["read_and_emit"] is theirs and restored == []
    assert cls.read_and_emit(BUNDLE) == "meta" and restored == [BUNDLE]


def test_no_bundler_no_refusal(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch._inductor.triton_bundler", None)
    assert refuse_triton_bundles(lambda: None) is None
