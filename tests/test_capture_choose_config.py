"""The runtime's autotune rule (karchive.format.autotune): exact key, documented fallback, no Triton needed."""

from __future__ import annotations

import pytest

from karchive.format.autotune import (
    choose_config,
    entry_config,
    key_distance,
    key_for_call,
    normalize_key,
    rank_entries,
)

RECORD = {
    "kernel": "matmul",
    "key_names": ["M", "N", "K"],
    "dtype_args": ["a", "b"],
    "configs": [{"kwargs": {"BM": 64}, "num_warps": 4}, {"kwargs": {"BM": 128}, "num_warps": 8}],
    "entries": [
        {"key": [128, 128, 128, "torch.float16", "torch.float16"], "config": 0, "variant": "v-small"},
        {"key": [4096, 4096, 4096, "torch.float16", "torch.float16"], "config": 1, "variant": "v-big"},
        {"key": [4096, 4096, 4096, "torch.float32", "torch.float32"], "config": 0, "variant": "v-f32"},
    ],
    "fallback": "nearest-log2",
}
OTHER = {
    "kernel": "other",
    "key_names": ["n"],
    "dtype_args": [],
    "configs": [{"kwargs": {}}],
    "entries": [{"key": [128, "torch.float16", "torch.float16"], "config": 0, "variant": "o"}],
}


class _T:
    def __init__(self, dtype: str) -> None:
        self.dtype = dtype


def test_exact_key_wins():
    e = choose_config([RECORD, OTHER], [4096, 4096, 4096, "torch.float16", "torch.float16"])
    assert e["variant"] == "v-big"
    assert entry_config(RECORD, e) == {"kwargs": {"BM": 128}, "num_warps": 8}


def test_unseen_key_takes_the_nearest_in_log_space_with_the_same_dtypes():
    assert choose_config(RECORD, [256, 256, 256, "torch.float16", "torch.float16"])["variant"] == "v-small"
    assert choose_config(RECORD, [2048, 2048, 2048, "torch.float16", "torch.float16"])["variant"] == "v-big"
    assert choose_config(RECORD, [100000, 8, 8, "torch.float32", "torch.float32"])["variant"] == "v-f32"


def test_no_choice_when_dtypes_or_arity_differ():
    assert choose_config(RECORD, [128, 128, 128, "torch.bfloat16", "torch.bfloat16"]) is None
    assert choose_config(RECORD, [128, 128]) is None
    assert choose_config([], [1]) is None


def test_kernel_filter_and_ties_go_to_the_first_recorded():
    assert choose_config([RECORD, OTHER], [128, "torch.float16", "torch.float16"], kernel="other")["variant"] == "o"
    assert choose_config([RECORD, OTHER], [128, "torch.float16", "torch.float16"], kernel="matmul") is None
    tie = {"kernel": "t", "entries": [{"key": [64], "variant": "first"}, {"key": [256], "variant": "second"}]}
    assert choose_config(tie, [128])["variant"] == "first"  # log2 distance 1 both ways


def test_ranking_orders_candidates_for_optional_benchmarking():
    ranked = rank_entries(RECORD, [1024, 1024, 1024, "torch.float16", "torch.float16"])
    assert [e["variant"] for _, e in ranked] == ["v-big", "v-small"]
    assert ranked[0][0] < ranked[1][0]


def test_key_for_call_follows_tritons_rule():
    named = {"a": _T("torch.float16"), "b": _T("torch.float16"), "M": 512, "N": 256, "K": 64, "alpha": 1.5}
    assert key_for_call(RECORD, named) == [512, 256, 64, "torch.float16", "torch.float16"]


@pytest.mark.parametrize(
    "a,b,expect", [([1, 2], [1, 2], 0.0), ([0], [0], 0.0), ([True], [1], None), (["x"], ["y"], None), ([-3], [3], 4.0)]
)
def test_distance(a, b, expect):
    assert key_distance(a, b) == expect


def test_normalize_key_is_json_safe():
    class Dtype:
        def __str__(self) -> str:
            return "torch.float16"

    assert normalize_key((3, 2.5, None, True, Dtype())) == [3, 2.5, None, True, "torch.float16"]
