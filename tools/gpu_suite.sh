#!/usr/bin/env bash
# One device run: environment, GPU pytest suite, launch benchmark, cold-start benchmark; results in $OUT.
#
# Archives are built beforehand on a CPU machine (python tests/gpu/build_fixtures.py -> .gpu/) and
# carried with the run (carry=[".gpu", ".whl"]). Usage on the device machine, from the repo root:
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
#     && export PYTHONPATH=/tmp/site:$PWD && bash tools/gpu_suite.sh
set -u
OUT=${OUT:-/tmp/karchive-gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TRITON_DEFAULT_FP_FUSION=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH=${PYTHONPATH:-$PWD}
PY=${PY:-python3}
if ! $PY -c "import pytest" 2>/dev/null; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site-pytest .gpu/whl/*.whl \
    && export PYTHONPATH=$PYTHONPATH:/tmp/site-pytest
fi
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  $PY - <<'EOF'
import platform, importlib
print("python", platform.python_version())
for m in ("torch", "triton", "cuda.bindings", "cupy", "jax", "zstandard", "pytest"):
    try:
        mod = importlib.import_module(m); print(m, getattr(mod, "__version__", "?"))
    except Exception as e:
        print(m, "MISSING", e)
EOF
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

# Benchmarks first, so no process left over from a test (JAX, compile workers) disturbs the timings.
SECTIONS=${SECTIONS:-"launch cold tests"}
GPU_TESTS=${GPU_TESTS:-tests/gpu}
if [[ " $SECTIONS " == *" launch "* ]]; then
  timeout 150 $PY tools/bench_launch.py --json "$OUT/bench_launch.json" 2>&1 | tee "$OUT/bench_launch.txt"
fi
if [[ " $SECTIONS " == *" cold "* ]]; then
  timeout 200 $PY tools/bench_coldstart.py --json "$OUT/bench_coldstart.json" 2>&1 | tee "$OUT/bench_coldstart.txt"
fi
if [[ " $SECTIONS " == *" tests "* ]]; then
  timeout 240 $PY -m pytest $GPU_TESTS -q -rs -p no:cacheprovider 2>&1 | tee "$OUT/pytest.log" | tail -40
fi
