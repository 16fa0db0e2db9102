# Sourced by tools/test.sh and examples/demo.sh (from the repository root): make (or reuse) the project's
# virtual environment and install the project with the extras named in $1 (comma-separated). Sets $VENV
# and $PY (its interpreter).
#
# A rerun needs no network: after a successful install, $VENV/.karchive-install records a digest of what
# it installed (pyproject.toml, the compiled launcher's C source, this checkout's path) and the extras.
# While the digest matches and the extras asked for are among those installed, pip is not run at all.
# The install is editable, so edits to Python files need no reinstall; an edit to pyproject.toml or to
# karchive/runtime/_fastlaunch.c or c-ext/ does. Builds use the venv's own setuptools (--no-build-isolation), so a
# reinstall does not download the build backend again either.
VENV="${KARCHIVE_VENV:-.venv}"
PY="$VENV/bin/python"
_karchive_fresh=0
if [ ! -x "$PY" ]; then
  python3 -m venv "$VENV"
  _karchive_fresh=1
fi
# Prints the extras to install (the union of those asked for and those installed) when an install is
# needed, nothing when the recorded install covers this request.
_karchive_need="$("$PY" -I - "$1" "$VENV/.karchive-install" <<'EOF'
import glob, hashlib, importlib.metadata, os, sys
wanted = {e for e in sys.argv[1].split(",") if e}
h = hashlib.sha256(os.getcwd().encode())
for path in ["pyproject.toml", "karchive/runtime/_fastlaunch.c"] + sorted(glob.glob("karchive/runtime/c-ext/*")):
    with open(path, "rb") as f:
        h.update(b"\0" + path.encode() + b"\0" + f.read())
try:
    with open(sys.argv[2]) as f:
        digest, _, extras = f.read().strip().partition(" ")
    importlib.metadata.version("karchive")  # uninstalled since: the record is stale
except (OSError, importlib.metadata.PackageNotFoundError):
    digest, extras = "", ""
have = {e for e in extras.split(",") if e}
if digest != h.hexdigest() or not wanted <= have:
    print(h.hexdigest(), ",".join(sorted(wanted | have)))
EOF
)"
if [ -n "$_karchive_need" ]; then
  # Say what the silence is (pip is quiet): the first install downloads Triton (about 1 GB installed).
  if [ "$_karchive_fresh" = 1 ]; then
    echo "tools/venv.sh: first install of karchive[${_karchive_need#* }] into $VENV: downloads Triton and the other" \
         "extras (1.1 GB installed for the demo, 2.4 GB for the tests), usually a few minutes; later runs need no network" >&2
    "$PY" -m pip install -q --upgrade pip
  else
    echo "tools/venv.sh: installing karchive[${_karchive_need#* }] into $VENV (what it holds is not what is asked for)" >&2
  fi
  # The build backend pyproject.toml names, installed into the venv once (then found offline).
  "$PY" -I - <<'EOF' > "$VENV/.karchive-build-requires"
import re
text = open("pyproject.toml").read()
block = re.search(r"^\[build-system\]\s*$(.*?)^\[", text, re.M | re.S).group(1)
print("\n".join(re.findall(r'"([^"]+)"', re.search(r"^requires\s*=\s*\[(.*?)\]", block, re.M | re.S).group(1))))
EOF
  # Quiet: setuptools' notes on every build ("ext-modules is experimental", the editable-install
  # banner) are not the user's business; real errors still reach stderr.
  PYTHONWARNINGS='ignore:`[tool.setuptools.ext-modules]`,ignore:Editable installation.' \
    "$PY" -m pip install -q -r "$VENV/.karchive-build-requires"
  PYTHONWARNINGS='ignore:`[tool.setuptools.ext-modules]`,ignore:Editable installation.' \
    "$PY" -m pip install -q --no-build-isolation -e ".[${_karchive_need#* }]"
  echo "$_karchive_need" > "$VENV/.karchive-install"
fi
unset _karchive_fresh _karchive_need
# No TRITON_DEFAULT_FP_FUSION here: karchive builds pass enable_fp_fusion explicitly and ignore the
# shell's codegen variables (spec/BUILD.md, "Environment"); the tests set what they need themselves.
