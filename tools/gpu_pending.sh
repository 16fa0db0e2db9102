#!/usr/bin/env bash
# The GPU proofs of issues 30 and 31 that sessions 31-32 added (tests/gpu/README.md, "The proofs of 2026-11-28"), in
# ONE device call on a 2-GPU machine (`nvidia-h200-x2`), in parallel lanes, so that a 30-minute device budget covers
# them (session 32 ran them all; LANES="0" re-runs max-autotune alone, ~300 s):
#
#   lane 0 (GPU 0)   max-autotune: capture, then serve(strict); a miss keeps both processes' module sources
#   lane 1 (GPU 1)   the user-kernel workload (user-defined Triton kernels inside the graph), then the
#                    serve-fidelity scenarios on the GPU (tests/gpu/test_serve_fidelity_gpu.py)
#   lane 2 (both)    the 2-rank job, twice (the second capture over the Inductor cache the first left)
#
# Run from the repository root on the device, carrying .whl (README.md's wheels); writes $OUT/logs.tgz (every JSON,
# text, log and kept module source, small enough for the device's 8 files back) and $OUT/timeline.txt.
# Knobs: BUDGET=565 (seconds for the whole call; the device allows 600), LANES="0 1 2".
set -u -o pipefail
cd "$(dirname "$0")/.."
START=$SECONDS
END=$((START + ${BUDGET:-565}))
LANES=${LANES:-"0 1 2"}
OUT=${OUT:-/tmp/karchive-gpu-out}
L=$OUT/logs
mkdir -p "$L"
left() { echo $((END - SECONDS)); }
stamp() { echo "[$((SECONDS - START))s] $*" | tee -a "$L/timeline.txt"; }
lane() { [[ " $LANES " == *" $1 "* ]]; }
finish() {
  stamp "packing"
  (cd "$OUT" && find logs -type f \( -name '*.json' -o -name '*.txt' -o -name '*.log' -o -name 'missed-*.py' \) \
    -size -4M -print0 | tar czf "$OUT/logs.tgz" --null -T -)
  cp "$L/timeline.txt" "$OUT/timeline.txt"
}
trap finish EXIT
# NVLink multicast stays off on the shared hosts (the device's KINDS.md)
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/karchive-site \
    .whl/*.whl > "$L/pip.txt" 2>&1
  export PYTHONPATH=/tmp/karchive-site
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
{
  date -u
  nvidia-smi --query-gpu=index,name,driver_version --format=csv
  python3 -c "import sys,torch,triton;print(sys.version.split()[0],'torch',torch.__version__,'triton',triton.__version__)"
  git log -1 --format=%H 2>/dev/null
} > "$L/env.txt" 2>&1
python3 tools/build_extension.py > "$L/build_extension.txt" 2>&1 || stamp "build_extension FAILED"
stamp "lanes: $LANES"
if lane 0; then (
  CUDA_VISIBLE_DEVICES=0 timeout -k 5 $(($(left) - 3)) python3 tools/bench_compiled_model.py --out "$L/ib-max" \
    --workloads max-autotune --phases capture,serve --timeout 400 --budget $(($(left) - 120)) > "$L/ib-max.txt" 2>&1
  stamp "lane 0: max-autotune rc=$?"
  # every kernel of the captured archive (name, variants, decision or not): what a miss's source is compared with
  python3 - "$L/ib-max/max-autotune.karc" > "$L/ib-max-kernels.json" 2>&1 <<'PY'
import json, sys
import karchive
from karchive.format.inductor_records import section_of
arc = karchive.open(sys.argv[1])
sec = section_of(arc.manifest)
decided = {d.kernel for d in (sec.kernels if sec else [])}
per: dict = {}
for v in arc.manifest.variants:
    per[v.kernel] = per.get(v.kernel, 0) + 1
print(json.dumps({k: {"variants": n, "decision": k in decided} for k, n in sorted(per.items())}, indent=0))
PY
) & fi
if lane 1; then (
  CUDA_VISIBLE_DEVICES=1 timeout -k 5 $(($(left) - 3)) python3 tools/bench_compiled_model.py --out "$L/ib-user" \
    --workloads user-kernel --budget 200 > "$L/ib-user.txt" 2>&1
  stamp "lane 1: user-kernel rc=$?"
  mkdir -p "$L/fid"
  CUDA_VISIBLE_DEVICES=1 KARCHIVE_SERVE_GPU=1 KARCHIVE_FIDELITY_WORK=$L/fid KARCHIVE_FIDELITY_TIMEOUT=200 \
    timeout -k 5 $(($(left) - 5)) python3 -m pytest tests/gpu/test_serve_fidelity_gpu.py -q -rs -p no:cacheprovider \
    > "$L/fidelity.txt" 2>&1
  stamp "lane 1: fidelity rc=$?"
) & fi
if lane 2; then (
  for i in 1 2; do
    KARCHIVE_SERVE_GPU=1 KARCHIVE_CORPUS_WORK=$L/mg$i timeout -k 5 150 python3 -m pytest \
      tests/gpu/test_serve_corpus2_gpu.py -k two_ranks -v -p no:cacheprovider -rs > "$L/two_ranks$i.txt" 2>&1
    stamp "lane 2: two_ranks run $i rc=$?"
  done
) & fi
wait
stamp "done"
