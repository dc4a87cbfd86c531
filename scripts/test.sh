#!/usr/bin/env bash
# Set up a virtual environment with the test extras and run the whole test suite
# (GUI tests included, on Qt's offscreen platform).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install --quiet -e '.[test]'
# torch for the profiling tests: a CPU build from local disk (never a plain `torch`,
# which would download a multi-GB CUDA build).
.venv/bin/python -m pip install --quiet torch==2.13.0
export QT_QPA_PLATFORM=offscreen
exec .venv/bin/python -m pytest "$@"
