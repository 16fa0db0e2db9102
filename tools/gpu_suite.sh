#!/usr/bin/env bash
# One device run: environment report, the GPU benchmarks, then every GPU test (pytest tests/gpu);
# logs and JSON under $OUT. The whole flow, with the commands for the CPU side, is tests/gpu/README.md:
#
#   here (CPU):   python tests/gpu/build_fixtures.py              # -> .gpu/ (git-ignored), ~1.5 min on 2 cores
#   device:       bash tools/gpu_suite.sh                         # carry .gpu (and .whl if you made one)
#
# Knobs (environment): SECTIONS="env bench tests" (any subset, in that order), BENCHES="launch coldstart
# interop capture tuning" (tools/bench_<name>.py; a missing one is noted and skipped), GPU_TESTS="tests/gpu"
# (pytest arguments), BUDGET=570 (seconds for the whole run: the device allows 600 s per command),
# TESTS_RESERVE=300 (seconds the benchmarks leave for the tests; a benchmark that would eat into them is
# skipped and named in summary.txt: run it in a second call, e.g. SECTIONS=bench BENCHES=capture), PY=python3.
# Exit status: 0 when every step that ran passed, 1 when a benchmark or a test failed or a benchmark was
# skipped for time, 2 when the fixtures are missing (nothing else runs then).
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/karchive-gpu-out}
mkdir -p "$OUT"
PY=${PY:-python3}
SECTIONS=${SECTIONS:-"env bench tests"}
BENCHES=${BENCHES:-"launch coldstart interop capture tuning"}
GPU_TESTS=${GPU_TESTS:-tests/gpu}
BUDGET=${BUDGET:-570}
TESTS_RESERVE=${TESTS_RESERVE:-300}
DEADLINE=$((SECONDS + BUDGET))
export PYTHONUNBUFFERED=1 TRITON_DEFAULT_FP_FUSION=1 XLA_PYTHON_CLIENT_PREALLOCATE=false

# Packages the device lacks travel as wheels in .whl/ (README.md says how to make them); the checkout wins.
if compgen -G ".whl/*.whl" > /dev/null; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/karchive-site .whl/*.whl
  export PYTHONPATH=/tmp/karchive-site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}

STATUS=0
: > "$OUT/summary.txt"
note() { echo "$*" | tee -a "$OUT/summary.txt"; }
left() { echo $((DEADLINE - SECONDS)); }
has() { [[ " $SECTIONS " == *" $1 "* ]]; }

if ! $PY tests/gpu/build_fixtures.py --check 2>&1 | tee "$OUT/fixtures.txt"; then
  note "fixtures: MISSING (see fixtures.txt): build them on the CPU side and carry .gpu"
  exit 2
fi

if has env; then
  {
    date -u
    nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv
    $PY - <<'EOF'
import importlib, json, platform
print("python", platform.python_version())
for m in ("karchive", "torch", "triton", "cuda.bindings", "cupy", "jax", "jaxlib", "numba", "numpy", "zstandard",
          "fsspec", "pytest"):
    try:
        mod = importlib.import_module(m)
        print(m, getattr(mod, "__version__", "?"), getattr(mod, "__file__", ""))
    except Exception as e:  # noqa: BLE001 - report and go on
        print(m, "MISSING", type(e).__name__, e)
info = json.load(open(".gpu/fixtures.json"))
print("fixtures built with", json.dumps(info["built_with"], sort_keys=True))
EOF
  } > "$OUT/env.txt" 2>&1
  cat "$OUT/env.txt"
  note "env: written"
fi

# Benchmarks before the tests, so no process left over from a test (JAX, compile workers) disturbs them.
if has bench; then
  for b in $BENCHES; do
    script=tools/bench_$b.py
    if [ ! -f "$script" ]; then
      note "bench $b: $script not present, skipped"
      continue
    fi
    budget=$(left)
    if has tests; then budget=$(( budget - TESTS_RESERVE )); fi
    if [ "$budget" -lt 30 ]; then
      note "bench $b: SKIPPED, out of time (run it in another call: SECTIONS=bench BENCHES=$b)"
      STATUS=1
      continue
    fi
    [ "$budget" -gt 240 ] && budget=240
    args=()
    if $PY "$script" --help 2>/dev/null | grep -q -- "--json"; then args=(--json "$OUT/bench_$b.json"); fi
    echo "== $script (timeout ${budget}s)"
    timeout "$budget" $PY "$script" ${args[@]+"${args[@]}"} > "$OUT/bench_$b.txt" 2>&1
    rc=$?
    cat "$OUT/bench_$b.txt"
    if [ $rc -ne 0 ]; then STATUS=1; fi
    note "bench $b: rc=$rc$([ $rc -eq 124 ] && echo ' (timed out)') -> bench_$b.txt"
  done
fi

if has tests; then
  budget=$(( $(left) - 10 ))
  [ "$budget" -lt 60 ] && budget=60
  echo "== pytest $GPU_TESTS (timeout ${budget}s)"
  # shellcheck disable=SC2086 - GPU_TESTS is a list of pytest arguments
  timeout "$budget" $PY -m pytest $GPU_TESTS -ra -p no:cacheprovider --durations=15 \
    --junitxml "$OUT/pytest.xml" > "$OUT/pytest.log" 2>&1
  rc=$?
  tail -80 "$OUT/pytest.log"
  if [ $rc -ne 0 ]; then STATUS=1; fi
  note "tests: rc=$rc$([ $rc -eq 124 ] && echo ' (timed out)') -> pytest.log, pytest.xml"
fi
note "suite: status $STATUS, $SECONDS s"
exit $STATUS
