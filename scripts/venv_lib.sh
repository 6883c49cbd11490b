# Shared by the scripts that build the kit's side environments (setup_vllm_cpu.sh, setup_verl.sh).
# Source after setting VENV, PYTHON and a `log` function. Defines VPY, PIP and the version checks.

if [ ! -x "$VENV/bin/python" ]; then
  log "creating venv $VENV with $PYTHON"
  "$PYTHON" -m venv "$VENV"
fi
VPY="$VENV/bin/python"
PIP=("$VPY" -m pip --disable-pip-version-check)

have_version() {  # have_version DIST VERSION -> exit 0 when DIST==VERSION is installed
  "$VPY" - "$1" "$2" <<'PY'
import sys
from importlib import metadata
try:
    sys.exit(0 if metadata.version(sys.argv[1]) == sys.argv[2] else 1)
except metadata.PackageNotFoundError:
    sys.exit(1)
PY
}

have_dist() {  # have_dist DIST -> exit 0 when DIST is installed (any version)
  "$VPY" - "$1" <<'PY'
import sys
from importlib import metadata
try:
    metadata.version(sys.argv[1])
except metadata.PackageNotFoundError:
    sys.exit(1)
PY
}
