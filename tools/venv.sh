# Sourced by tools/test.sh and examples/demo.sh: make (or reuse) the project's virtual environment and
# install the project with the extras named in $1 (comma-separated). Sets $PY to its interpreter.
VENV="${KARCHIVE_VENV:-.venv}"
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
PY="$VENV/bin/python"
"$PY" -m pip install -q --upgrade pip
"$PY" -m pip install -q -e ".[$1]"
# No TRITON_DEFAULT_FP_FUSION here: karchive builds pass enable_fp_fusion explicitly and ignore the
# shell's codegen variables (spec/BUILD.md, "Environment"); the tests set what they need themselves.
