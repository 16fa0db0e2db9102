#!/usr/bin/env bash
# Set up a virtual environment with everything the tests need, then run the whole test suite.
# This is the README's test command and exactly what CI runs (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${KARCHIVE_VENV:-.venv}"
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q -e ".[producer,cuda,hip,s3,gcs,cli,test]"
export TRITON_DEFAULT_FP_FUSION=1
exec "$VENV/bin/python" -m pytest tests -q -ra "$@"
