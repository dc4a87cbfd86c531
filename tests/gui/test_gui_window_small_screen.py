"""The window fits the screens users have: 1,024 x 768, and a 1,366 x 768 laptop (a title bar
and a taskbar leave about 700 pixels of height). Its minimum was 1,220 x 770, set by the
Explore tab: a filter row of 722 pixels beside a left column of 490, and under the plot a
preview whose title took three lines and whose legend four; ``vtrain gui --screenshot --size
1024x768`` wrote a 1,220 x 770 picture without a word."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from PySide6 import QtCore, QtGui

import test_gui_explore_laptop_size as laptop
from tests.conftest import EXAMPLES, ROOT
from vtrain_gui.plan_preview import LEGEND_LINES, TITLE_LINES

SMALL = EXAMPLES / "gpt3_1.3b_single_node.json"
three_marks = laptop.three_marks  # the fixture: a sweep whose three marked plans differ


def _show_three_marks(window, qapp, three_marks, real_simulate, size) -> None:
    """The Explore tab at ``size`` with a sweep of three marked plans and the editor's plan's
    timeline under it."""
    session, result = three_marks
    window.show_tab("explore")
    explore = window.explore
    explore.set_session(session)
    explore.settings_panel.deadline.setValue(5.0)
    explore.set_result(result)
    explore.plan_preview.show_simulation(real_simulate(session))
    for _ in range(3):
        window.resize(*size)
        qapp.processEvents()
    text = explore.summary_text
    for label in ("fastest", "cheapest", "cheapest within 5 days", "plan in the editor"):
        assert f">{label}</a>" in text


def test_the_window_can_be_1024_by_700(window, qtbot, qapp, three_marks, real_simulate):
    _show_three_marks(window, qapp, three_marks, real_simulate, (1024, 700))
    least = window.minimumSizeHint()
    assert least.width() <= 1024 and least.height() <= 700, least  # it was 1,220 x 770
    assert (window.width(), window.height()) == (1024, 700)
    laptop.assert_days_axis_in_view(window)
    # the filters wrap onto a second row, each whole inside the bar, the bar over the summary
    explore = window.explore
    bar = explore.filter_bar
    rows = set()
    for w in (explore.gpu_filter_mode, explore.gpu_filter, explore.fits_only,
              explore.within_deadline, explore.log_axes):
        rect = QtCore.QRect(w.mapTo(bar, QtCore.QPoint(0, 0)), w.size())
        assert bar.rect().contains(rect), (w.objectName(), rect, bar.rect())
        rows.add(rect.center().y() // 10)
    assert len(rows) == 2
    assert bar.geometry().bottom() < explore.summary_box.mapTo(bar.parentWidget(),
                                                               QtCore.QPoint(0, 0)).y()


@pytest.mark.xfail(strict=True, reason="the Plan tab after a simulation is 1,156 pixels wide at "
                   "least: the editor's column (500) beside the cost panel's figures (503, the "
                   "longest: 'With failures 2.9 days (2.9-2.9), $1,100, goodput 99.9 %') and "
                   "memory chart (143); not fixed yet")
def test_the_window_with_a_simulated_plan_can_be_1024_wide(window, qtbot, qapp, real_simulate):
    with qtbot.waitSignal(window.result_shown, timeout=60_000):
        assert window.open_path(SMALL)
    window.resize(1024, 700)
    qapp.processEvents()
    least = window.minimumSizeHint()
    assert least.width() <= 1024 and least.height() <= 700, least


def test_a_1366_by_768_laptop_shows_the_days_axis_with_three_marked_plans(
        window, qtbot, qapp, three_marks, real_simulate):
    size = (1366, 768)
    _show_three_marks(window, qapp, three_marks, real_simulate, size)
    assert (window.width(), window.height()) == size
    assert window.minimumSizeHint().height() <= 700
    laptop.assert_days_axis_in_view(window)


def test_the_preview_shows_at_most_its_lines_of_title_and_legend_the_rest_scrolls(
        window, qtbot, qapp, three_marks, real_simulate):
    _show_three_marks(window, qapp, three_marks, real_simulate, (1024, 700))
    preview = window.explore.plan_preview
    for box, lines in ((preview.title, TITLE_LINES), (preview.timeline.legend_view, LEGEND_LINES)):
        label = box.label
        full = label.text_height(label.width())
        one = label.text_height(label.width(), 1)
        assert full > lines * one  # longer than the box at 1,024 pixels: it scrolls
        assert box.height() == label.text_height(label.width(), lines)
        assert label.height() >= full  # the whole text, in the scroll area
        assert box.verticalScrollBar().maximum() > 0
    # the legend's lines are as tall as its 14 pt colour squares, taller than the font's
    legend = preview.timeline.legend_view.label
    assert legend.text_height(legend.width(), 1) > legend.fontMetrics().lineSpacing()
    assert preview.timeline.plot.height() >= 60  # room for the bars and the time axis


def _screenshot(out, size: str) -> subprocess.CompletedProcess:
    """``vtrain gui SMALL --tab plan --size SIZE --screenshot OUT``, offscreen."""
    return subprocess.run([sys.executable, "-m", "core.cli", "gui", str(SMALL), "--tab", "plan",
                           "--size", size, "--screenshot", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})


def test_a_screenshot_smaller_than_the_window_can_be_says_so(tmp_path):
    out = tmp_path / "shot.png"
    proc = _screenshot(out, "640x480")
    assert proc.returncode == 0, proc.stderr
    image = QtGui.QImage(str(out))
    assert image.width() > 640 and image.height() > 480  # the window's minimum
    assert (f"the picture is {image.width()}x{image.height()} pixels, not the 640x480 of "
            "--size: the window cannot be smaller than") in proc.stderr, proc.stderr
    least = proc.stderr.split("cannot be smaller than ")[1].split(" ")[0]
    width, height = (int(x) for x in least.split("x"))
    assert (image.width(), image.height()) == (max(640, width), max(480, height))
    # a size the window can take: that picture, and nothing said
    proc = _screenshot(out, "1280x800")
    assert proc.returncode == 0, proc.stderr
    image = QtGui.QImage(str(out))
    assert (image.width(), image.height()) == (1280, 800)
    assert proc.stderr == ""
