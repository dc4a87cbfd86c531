#!/usr/bin/env bash
# Set up a virtual environment and show the shipped example (MT-NLG 530B on 3,360 A100s):
# in the window when a display is present (DISPLAY or WAYLAND_DISPLAY set, not under CI),
# otherwise (or when the window cannot start) as the printed report plus a Perfetto trace.
# Arguments go to `vtrain simulate` (e.g. --json). Never waits for input under CI.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install --quiet -e .
example=resources/examples/mtnlg_530b.json
case "${CI:-}" in "" | false | 0) under_ci=no ;; *) under_ci=yes ;; esac
if [ "$under_ci" = no ] && [ $# -eq 0 ] && { [ -n "${DISPLAY:-}" ] || [ -n "${WAYLAND_DISPLAY:-}" ]; }; then
    echo "Opening the window on $example (untitled: Save asks for a name). Close it to finish."
    status=0
    .venv/bin/vtrain gui || status=$?   # no PATH: the shipped example, as an untitled session
    [ "$status" -eq 2 ] || exit "$status"
    echo "The window could not start (the reason is above); the report instead:" >&2
fi
.venv/bin/vtrain simulate "$example" --trace-out mtnlg_530b.trace.json "$@"
cat <<MSG

To open the window (on a machine with a display): . .venv/bin/activate && vtrain gui
(Linux needs the XCB libraries listed in README.md, "The desktop window on Linux".)
Without a display: QT_QPA_PLATFORM=offscreen vtrain gui $example --screenshot window.png
MSG
