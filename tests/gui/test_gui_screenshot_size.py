"""``vtrain gui --screenshot OUT --size WxH``: the picture at the sizes users have (1280x800 a
laptop, 1920x1080), to look at each tab as they see it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from core.cli import main
from tests.conftest import EXAMPLES, ROOT

SMALL = EXAMPLES / "gpt3_1.3b_single_node.json"


def test_a_picture_at_a_laptops_size(tmp_path, real_simulate):
    from PySide6 import QtGui
    out = tmp_path / "shot.png"
    proc = subprocess.run([sys.executable, "-m", "core.cli", "gui", str(SMALL), "--size",
                           "1280x800", "--screenshot", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    assert proc.returncode == 0, proc.stderr
    image = QtGui.QImage(str(out))
    assert (image.width(), image.height()) == (1280, 800)  # the window fits a laptop's screen


@pytest.mark.parametrize("text", ["1280", "1280x", "x800", "100x100", "wide"])
def test_a_size_that_is_not_width_x_height_is_refused(text, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["gui", "--size", text, "--screenshot", "x.png"])
    assert exc.value.code == 2
    assert "WIDTHxHEIGHT" in capsys.readouterr().err
