#!/usr/bin/env bash
# Set up a virtual environment and simulate the shipped example (MT-NLG 530B on 3,360 A100s).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install --quiet -e .
exec .venv/bin/vtrain simulate resources/examples/mtnlg_530b.json --trace-out mtnlg_530b.trace.json "$@"
