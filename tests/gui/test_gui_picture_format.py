"""A picture is written in the format its name says (vtrain_gui.save_image)."""

from __future__ import annotations

import errno

import pytest
from PySide6 import QtGui

from core.cli import main
from tests.conftest import EXAMPLES
from vtrain_gui.save_image import image_format, save_pixmap


def test_a_suffix_qt_does_not_write_is_refused(tmp_path, qapp):
    """save_pixmap wrote PNG bytes under any suffix Qt has no writer for (shot.svg, shot.txt)."""
    pixmap = QtGui.QPixmap(8, 8)
    pixmap.fill()
    for name, head in (("a.png", b"\x89PNG"), ("a", b"\x89PNG"), ("a.JPG", b"\xff\xd8"),
                       ("a.bmp", b"BM")):
        save_pixmap(pixmap, tmp_path / name)
        assert (tmp_path / name).read_bytes().startswith(head), name
    assert image_format("x.Png") == "PNG" and image_format("x") == "PNG"
    for name in ("a.svg", "a.txt"):
        with pytest.raises(OSError) as err:
            save_pixmap(pixmap, tmp_path / name)
        assert err.value.errno == errno.EINVAL and err.value.filename == str(tmp_path / name)
        assert err.value.strerror.startswith(f"'{name[1:]}' is not an image format this program "
                                             "writes; give one of ")
        assert not (tmp_path / name).exists()


def test_screenshot_of_an_unwritable_format_is_refused_before_the_window(tmp_path, capsys):
    shot = tmp_path / "shot.svg"
    assert main(["gui", str(EXAMPLES / "gpt3_1.3b_single_node.json"), "--screenshot", str(shot)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"vtrain: error: --screenshot: {shot}: '.svg' is not an image format "
                          "this program writes; give one of ") and ".png" in err
    assert not shot.exists()
