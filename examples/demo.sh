#!/usr/bin/env bash
# The main job on a fresh machine: set up, build the example archive (no GPU needed), publish it to the
# default local registry, inspect and verify it, rebuild part of it from the archive alone, and launch its
# kernels where an NVIDIA GPU is present. Runs from any directory, as often as you like: the build is
# byte-reproducible (spec/FORMAT.md §12), so publishing it again is a no-op, and once .venv is complete
# a rerun needs no network (tools/venv.sh runs no pip when the installed project is current).
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/venv.sh "producer,cuda,cli"
K="$VENV/bin/karchive"
mkdir -p out
echo "== build examples/build.toml -> out/examples.karc"
# A rerun skips the build when nothing it reads changed (the spec, the kernels, karchive, the Triton version:
# tools/build_inputs.py); the build is byte-reproducible, so the archive there is the one it would write.
inputs=$("$PY" tools/build_inputs.py examples/build.toml)
if [ -f out/examples.karc ] && [ "$(cat out/examples.karc.inputs 2>/dev/null)" = "$inputs" ]; then
    echo "out/examples.karc is up to date: its spec, kernels, karchive and Triton are unchanged (not rebuilt)"
else
    rm -f out/examples.karc.inputs
    "$K" build examples/build.toml -o out/examples.karc
    echo "$inputs" > out/examples.karc.inputs
fi
echo "== publish to the default local registry (run again: the same bytes, so a no-op)"
# Versions are immutable: a registry that already holds examples@0.1.0 built by an earlier karchive (another
# format minor gives other bytes) keeps it, and the steps below use that published archive.
if ! published=$("$K" publish out/examples.karc --json 2>/dev/null); then
    if grep -q '"error": "ConflictError"' <<<"$published"; then
        echo "examples@0.1.0 is already published with other bytes (an earlier karchive built it); using the published one"
    else
        "$K" publish out/examples.karc  # the same failure, said for people
    fi
fi
"$K" ls
echo "== inspect"
"$K" inspect examples@0.1.0 2>/dev/null || "$K" inspect out/examples.karc
"$K" verify out/examples.karc
echo "== rebuild add_kernel's variants from the published archive alone and compare (docs/reproducibility.md)"
"$K" rebuild --check examples@0.1.0 -k add_kernel
echo "== launch (needs an NVIDIA GPU and driver)"
"$PY" examples/launch.py examples@0.1.0
echo "== karchive is in $VENV/bin: 'source $VENV/bin/activate' puts it on PATH"
