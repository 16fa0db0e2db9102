"""The corpus replay's grid for a config other than the one Triton chose (tests/gpu/corpus_record.py).

On the H100, the tutorial matmul's archive built ahead of time tuned on the device and ran another config
than Triton's, on the grid Triton had evaluated for its own config: the launch computed only part of the
output (the rest was the previous call's result, left in the buffer by Triton's autotuner). The capture now
records the library's grid for every config, and the replay answers each config's own grid.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "gpu"))
import corpus_record  # a plain module of the GPU harness (imports nothing heavy)


def test_replay_grid_answers_each_configs_own_grid():
    rec = {
        "grid": [16, 1, 1],
        "grid_per_config": [
            {"kwargs": {"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 128, "FLAG": True}, "grid": [16, 1, 1]},
            {"kwargs": {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 32, "FLAG": True}, "grid": [128, 1, 1]},
        ],
    }
    grid, used = corpus_record.replay_grid(rec, per_config=True)
    assert grid({"M": 512, "BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 32, "FLAG": True}) == (128, 1, 1)
    assert grid({"M": 512, "BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 128, "FLAG": True}) == (16, 1, 1)
    assert used == [[128, 1, 1], [16, 1, 1]]
    with pytest.raises(LookupError, match="no recorded grid"):
        grid({"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 32, "FLAG": 1})  # 1 is not True: another config
    # the capture-based relaunch runs Triton's config: its recorded grid, as Triton launched it
    assert corpus_record.replay_grid(rec, per_config=False)[0] == (16, 1, 1)
    assert corpus_record.replay_grid({"grid": [4, 1, 1]}, per_config=True)[0] == (4, 1, 1)


def test_the_capture_evaluates_the_librarys_grid_for_every_config():
    pytest.importorskip("triton")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import aot_act_kernels

    kernel = aot_act_kernels.at_act
    grid = lambda meta: (-(-meta["n"] // meta["BLOCK"]),)  # noqa: E731
    frame = {"kind": "autotune", "obj": kernel}
    table = corpus_record._grids_per_config(
        frame, kernel.fn, (0, 0, 1000), {"grid": grid, "BLOCK": 64, "ACT": "", "NEG": False}
    )
    assert table == [{"kwargs": {"BLOCK": 64}, "grid": [16, 1, 1]}, {"kwargs": {"BLOCK": 128}, "grid": [8, 1, 1]}]
    assert corpus_record._grids_per_config(frame, kernel.fn, (0, 0, 1000), {"grid": (16,)}) is None
