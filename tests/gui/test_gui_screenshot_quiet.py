"""``vtrain gui --screenshot`` on Qt's offscreen platform: the plugin's
"This plugin does not support propagateSizeHints()" warning is dropped, other Qt messages
pass as before."""

from __future__ import annotations

import os
import subprocess
import sys

from PySide6 import QtCore

from tests.conftest import EXAMPLES, ROOT
from vtrain_gui.app import OFFSCREEN_NOISE, offscreen_noise_dropped


def test_screenshot_prints_nothing_on_stderr(tmp_path, real_simulate):
    out = tmp_path / "shot.png"
    proc = subprocess.run([sys.executable, "-m", "core.cli", "gui",
                           str(EXAMPLES / "gpt3_1.3b_single_node.json"), "--screenshot", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert out.stat().st_size > 0


def test_only_that_message_is_dropped_and_the_handler_is_put_back():
    seen: list[tuple[QtCore.QtMsgType, str]] = []

    def record(mode, context, message):
        seen.append((mode, message))

    before = QtCore.qInstallMessageHandler(record)
    try:
        with offscreen_noise_dropped():
            QtCore.qWarning(OFFSCREEN_NOISE)
            QtCore.qWarning("a plugin cannot load")
        QtCore.qWarning(OFFSCREEN_NOISE)  # after the block: the recorder again, unfiltered
    finally:
        QtCore.qInstallMessageHandler(before)
    warning = QtCore.QtMsgType.QtWarningMsg
    assert seen == [(warning, "a plugin cannot load"), (warning, OFFSCREEN_NOISE)]
