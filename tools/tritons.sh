#!/usr/bin/env bash
# Make (or reuse) one virtual environment per Triton release for tests/test_triton_releases.py, which builds
# the probe kernels with each of them (issue 19: every Triton that pyproject.toml allows must build).
#
#   bash tools/tritons.sh                 # the CI set: the oldest supported (pyproject.toml's floor), 3.6, 3.9
#   bash tools/tritons.sh 3.5 3.7 3.8     # others; `all` = every minor from the floor to 3.9
#   bash tools/tritons.sh --check [...]   # only say whether those venvs are ready (exit 1 if one is not)
#
# Each venv is .venv-triton/<minor>/ (git-ignored) with only `pip install -e .` and `triton==<minor>.*`: no
# torch, no extras. A venv that already holds that Triton, imports karchive from this checkout and was made
# for pyproject.toml's current dependencies is reused without running pip, so a second run needs no network.
# A venv that cannot be made (no network on a first run) is removed again and the script exits 1 naming it.
# Prints how long it took. PYTHON picks the interpreter the venvs are made from (default python3).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BASE=${KARCHIVE_TRITON_VENVS:-.venv-triton}
PYTHON=${PYTHON:-python3}
NEWEST=3.9

# The floor is stated once, in pyproject.toml ("triton>=X.Y" in the producer extra).
FLOOR=$(sed -n 's/.*"triton>=\([0-9][0-9]*\.[0-9][0-9]*\).*/\1/p' pyproject.toml | head -1)
if [ -z "$FLOOR" ]; then
  echo "tools/tritons.sh: no \"triton>=X.Y\" in pyproject.toml" >&2
  exit 2
fi

minors_from() {  # every minor from $1 to $NEWEST (same major)
  local major=${1%%.*} lo=${1#*.} hi=${NEWEST#*.}
  for ((m = lo; m <= hi; m++)); do echo "$major.$m"; done
}

CHECK=0
if [ "${1:-}" = --check ]; then
  CHECK=1
  shift
fi
if [ "$#" -eq 0 ]; then
  set -- "$FLOOR" 3.6 "$NEWEST"
elif [ "$1" = all ]; then
  # shellcheck disable=SC2046 - one word per minor
  set -- $(minors_from "$FLOOR")
fi

# What the venv was made for: the Triton minor, this checkout, and pyproject.toml's base dependencies.
deps=$("$PYTHON" - <<'EOF'
import hashlib, json
try:
    import tomllib
    deps = json.dumps(sorted(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))
except ImportError:  # Python 3.10: the whole file stands in for the dependency list
    deps = open("pyproject.toml", "rb").read().decode()
print(hashlib.sha256(deps.encode()).hexdigest()[:16])
EOF
)

ready() {  # $1 venv, $2 minor: complete and made for this checkout and these dependencies?
  [ -x "$1/bin/python" ] && [ -f "$1/karchive-tritons.stamp" ] || return 1
  [ "$(cat "$1/karchive-tritons.stamp")" = "triton=$2 root=$ROOT deps=$deps" ] || return 1
  "$1/bin/python" - "$2" "$ROOT" <<'EOF' 2>/dev/null
import os, sys
import triton, karchive, zstandard, fsspec  # noqa: F401 - the venv is complete only if all import
assert ".".join(triton.__version__.split(".")[:2]) == sys.argv[1], triton.__version__
assert os.path.realpath(karchive.__file__).startswith(os.path.realpath(sys.argv[2]) + os.sep), karchive.__file__
EOF
}

start=$SECONDS
status=0
for v in "$@"; do
  minor=$(echo "$v" | cut -d. -f1,2)
  venv=$BASE/$minor
  if ready "$venv" "$minor"; then
    echo "tritons: $venv (triton $minor) ready, reused"
    continue
  fi
  if [ "$CHECK" = 1 ]; then
    echo "tritons: $venv (triton $minor) missing or stale: bash tools/tritons.sh $minor"
    status=1
    continue
  fi
  t0=$SECONDS
  rm -rf "$venv"
  mkdir -p "$BASE"
  if "$PYTHON" -m venv "$venv" \
      && "$venv/bin/python" -m pip install -q --disable-pip-version-check -e . "triton==$minor.*" \
      && echo "triton=$minor root=$ROOT deps=$deps" > "$venv/karchive-tritons.stamp" \
      && ready "$venv" "$minor"; then
    echo "tritons: $venv made in $((SECONDS - t0)) s ($("$venv/bin/python" -c 'import triton; print("triton", triton.__version__)'))"
  else
    echo "tritons: could not make $venv with triton==$minor.* (a first run needs the package index); removed" >&2
    rm -rf "$venv"
    status=1
  fi
done
echo "tritons: $# venv(s) in $((SECONDS - start)) s"
exit $status
