#!/usr/bin/env bash
# Optional tooling for `lumen bench decode`'s comparison with Pillow and libvips (`make
# bench-compare`). Lumen itself never needs Python: this only installs the baselines.
#
# - libvips (the shared library) from apt, for pyvips;
# - Pillow and pyvips into a virtual environment (never the system site-packages), by default
#   /tmp/lumen-compare-venv; override with LUMEN_COMPARE_VENV. The benchmark finds it there, or
#   through LUMEN_COMPARE_PYTHON (a python executable that can import PIL and/or pyvips).
set -euo pipefail

VENV="${LUMEN_COMPARE_VENV:-/tmp/lumen-compare-venv}"
SUDO=""
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then SUDO="sudo"; fi

if ! ldconfig -p 2>/dev/null | grep -q 'libvips\.so\.42'; then
    echo "install-comparison-tools: installing libvips42 (apt)"
    if ! apt-cache policy libvips42 2>/dev/null | grep -q 'Candidate: [0-9]'; then
        $SUDO apt-get update
    fi
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends libvips42
fi

PYTHON="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
    echo "install-comparison-tools: creating virtual environment $VENV"
    if ! "$PYTHON" -m venv "$VENV" 2>/dev/null; then
        # Debian ships venv (and pip) apart from python3.
        echo "install-comparison-tools: installing python3-venv (apt)"
        rm -rf "$VENV"
        if ! apt-cache policy python3-venv 2>/dev/null | grep -q 'Candidate: [0-9]'; then
            $SUDO apt-get update
        fi
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends python3-venv python3-pip
        "$PYTHON" -m venv "$VENV"
    fi
fi
if ! "$VENV/bin/python" -c 'import PIL, pyvips' >/dev/null 2>&1; then
    echo "install-comparison-tools: installing Pillow and pyvips into $VENV"
    "$VENV/bin/python" -m pip install --quiet Pillow pyvips
fi
"$VENV/bin/python" - <<'PY'
import PIL, pyvips
print(f"install-comparison-tools: Pillow {PIL.__version__}, pyvips {pyvips.__version__}, "
      f"libvips {pyvips.version(0)}.{pyvips.version(1)}.{pyvips.version(2)}")
PY
