"""On a GPU: the example scripts run to their end on examples.karc, each in a fresh process.

A script that lacks its framework prints ``skipped...`` and exits 0: that is reported as a skip here.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

#: script -> lines its output must contain on success
EXPECT = {
    "torch_example.py": ["torch example OK: eager, torch.compile(fullgraph=True), CUDA graph replay"],
    "jax_example.py": ["jax example OK: add_kernel ran inside jax.jit from the archive's"],
    "cupy_example.py": ["cupy example OK"],
    # raw cuda.bindings pointers: no Triton, no torch, no numpy in the process
    "launch.py": [
        "add_kernel     ok",
        "scale_kernel   ok",
        "softmax_kernel ok",
        "triton imported: False | torch imported: False",
    ],
}


@pytest.mark.parametrize("script", sorted(EXPECT))
def test_example_script(script, examples_archive):
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    r = subprocess.run(
        [sys.executable, str(ROOT / "examples" / script), str(examples_archive)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": path},
    )
    out = r.stdout + r.stderr
    skipped = [ln for ln in r.stdout.splitlines() if ln.startswith("skipped")]
    if skipped and r.returncode == 0:
        pytest.skip(f"{script}: {skipped[-1]}")
    assert r.returncode == 0, out[-4000:]
    for line in EXPECT[script]:
        assert line in r.stdout, f"{script} did not print {line!r}:\n{out[-4000:]}"
    print(r.stdout)  # visible with -s: the scripts' own numbers (launch.py's first-launch time)
