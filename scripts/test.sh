#!/usr/bin/env bash
# Set up a virtual environment with the test extras and run the whole test suite
# (GUI tests on Qt's offscreen platform, and a smoke test of the real window under Xvfb).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install --quiet -e '.[test]'
# torch for the profiling tests, unless the venv has torch 2.13.0 already. A plain install
# takes what pip's indexes offer: a CPU build from local disk on our CI machines, the multi-GB
# CUDA build from PyPI elsewhere; TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu asks for
# the CPU build.
if ! .venv/bin/python -c "import sys, torch; sys.exit(torch.__version__.split('+')[0] != '2.13.0')" \
        >/dev/null 2>&1; then
    .venv/bin/python -m pip install --quiet torch==2.13.0 ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"}
fi
# The Xvfb smoke test (tests/gui/test_gui_xvfb_smoke.py) needs Xvfb and the XCB libraries of
# Qt's xcb platform; it skips, saying why, without them. CI runs as root on Debian or Ubuntu
# and installs them here; a developer's machine is left alone.
if [ "${CI:-}" = "true" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    packages="$(.venv/bin/python -m vtrain_gui.desktop_check --packages debian)"
    command -v Xvfb >/dev/null || packages="xvfb $packages"
    if [ -n "${packages// /}" ]; then
        echo "installing for the Xvfb smoke test: $packages"
        # shellcheck disable=SC2086  # one word per package
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $packages \
            >/dev/null 2>&1 \
        || { DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null 2>&1 \
             && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
                $packages >/dev/null 2>&1; } \
        || echo "warning: could not install $packages; the Xvfb smoke test will skip"
    fi
fi
export QT_QPA_PLATFORM=offscreen
exec .venv/bin/python -m pytest "$@"
