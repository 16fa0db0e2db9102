"""The stable variant key: independent of paths, cache dirs and environment; sensitive to what shapes the binary."""

import json
import os
import shutil
import subprocess
import sys

from support import EXAMPLES, ROOT, needs_triton

pytestmark = needs_triton

SOFTMAX_SIG = "*fp32:16, *fp32:16, i32, i32, i32"

_SCRIPT = r"""
import json, sys
from karchive.producer.compile.aot import VariantRequest, compile_variant
req = VariantRequest(**json.loads(sys.argv[1]))
v = compile_variant(req)
print(json.dumps({"key": v.variant.to_json()["key"], "meta": v.files["metadata"].decode()}))
"""


def _key_in_subprocess(kernel_file, cache_dir, cwd, target="cuda:90", constexprs=None, options=None, fusion_env="1"):
    req = {
        "kernel_ref": f"{kernel_file}:softmax_kernel",
        "signature": SOFTMAX_SIG,
        "target": target,
        "constexprs": constexprs or {"BLOCK": 1024},
        "options": options or {"num_warps": 4},
    }
    env = dict(os.environ, TRITON_CACHE_DIR=str(cache_dir), PYTHONPATH=str(ROOT))
    env.pop("TRITON_DEFAULT_FP_FUSION", None)
    if fusion_env is not None:
        env["TRITON_DEFAULT_FP_FUSION"] = fusion_env
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT, json.dumps(req)], cwd=cwd, env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_same_key_from_two_directories_and_cache_dirs(tmp_path):
    elsewhere = tmp_path / "copied" / "deeper"
    elsewhere.mkdir(parents=True)
    shutil.copy(EXAMPLES / "kernels.py", elsewhere / "kernels.py")
    a = _key_in_subprocess(EXAMPLES / "kernels.py", tmp_path / "cache-a", cwd=ROOT)
    b = _key_in_subprocess(elsewhere / "kernels.py", tmp_path / "cache-b", cwd=tmp_path, fusion_env=None)
    assert a["key"] == b["key"], "the environment (here: a knob set to its default) must not change the key"
    # Neither the cache dir nor the source directory may leak into the stored metadata.
    for result, cache in ((a, "cache-a"), (b, "cache-b")):
        assert cache not in result["meta"] and str(tmp_path) not in result["meta"]
        assert "@KARCHIVE_ROOT@/triton/backends" in result["meta"]


def _key(target="cuda:90", constexprs=None, options=None, kernel_file=None):
    from karchive.producer.compile.aot import VariantRequest, compile_variant

    req = VariantRequest(
        f"{kernel_file or EXAMPLES / 'kernels.py'}:softmax_kernel",
        SOFTMAX_SIG,
        target,
        constexprs or {"BLOCK": 1024},
        options or {"num_warps": 4},
    )
    return compile_variant(req).key


def test_key_changes_with_constexpr_warps_target_and_helper_source(tmp_path):
    base = _key()
    assert _key(constexprs={"BLOCK": 2048}) != base
    assert _key(options={"num_warps": 8}) != base
    assert _key(target="cuda:80") != base
    # Same kernel text, but the jitted helper it calls (_row_max) changes: the key must change.
    changed = tmp_path / "kernels.py"
    text = (EXAMPLES / "kernels.py").read_text()
    helper_old = 'return tl.max(tl.where(mask, row, -float("inf")), axis=0)'
    assert helper_old in text
    changed.write_text(text.replace(helper_old, 'return tl.max(tl.where(mask, row, -float("inf")), axis=0) + 0.0'))
    assert _key(kernel_file=changed) != base
    # And an identical copy in another directory keeps the key.
    same = tmp_path / "same" / "kernels.py"
    same.parent.mkdir()
    same.write_text(text)
    assert _key(kernel_file=same) == base
