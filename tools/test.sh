#!/usr/bin/env bash
# Set up a virtual environment with everything the tests need, then run the whole test suite.
# This is the README's test command and exactly what CI runs (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/venv.sh "producer,cuda,hip,s3,gcs,cli,test"
exec "$PY" -m pytest tests -q -ra "$@"
