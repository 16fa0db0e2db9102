#!/usr/bin/env bash
# Set up a virtual environment with everything the tests need, then lint, type-check and run the whole
# test suite. This is the README's test command and exactly what CI runs (.ci/run). Runs from any
# directory; a rerun needs no network (tools/venv.sh).
# Arguments go to pytest; given any, the lint and type check are skipped (a focused run while you work).
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/venv.sh "producer,cuda,hip,s3,gcs,oci,cli,test"
# The OCI registry binary tests/test_registry_oci.py runs (Debian's docker-registry): installed once, offline after.
bash tools/oci_registry.sh
# Where a C compiler exists pip builds the compiled launcher, so its absence is a failure, not a skip
# (tests/test_runtime_fastpath.py); without one the pure-Python launch path is the supported fallback.
if command -v cc >/dev/null 2>&1 || command -v gcc >/dev/null 2>&1 || command -v clang >/dev/null 2>&1; then
  export KARCHIVE_REQUIRE_EXTENSION="${KARCHIVE_REQUIRE_EXTENSION:-1}"
fi
if [ "$#" -eq 0 ]; then
  # One venv per Triton release for tests/test_triton_releases.py (the oldest pyproject.toml allows, 3.6, the
  # newest): made once, reused without network after (issue 19: every supported Triton builds).
  bash tools/tritons.sh
  echo "ruff check . (lint, import order) and ruff format --check ."
  "$PY" -m ruff check .
  "$PY" -m ruff format --check .
  echo "mypy (karchive/)"
  "$PY" -m mypy
fi
exec "$PY" -m pytest tests -q -ra "$@"
