#!/usr/bin/env bash
# Set up a virtual environment with everything the tests need, then lint, type-check and run the whole
# test suite. This is the README's test command and exactly what CI runs (.ci/run).
# Arguments go to pytest; given any, the lint and type check are skipped (a focused run while you work).
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/venv.sh "producer,cuda,hip,s3,gcs,cli,test"
if [ "$#" -eq 0 ]; then
  echo "ruff check ."
  "$PY" -m ruff check .
  echo "mypy (karchive/)"
  "$PY" -m mypy
fi
exec "$PY" -m pytest tests -q -ra "$@"
