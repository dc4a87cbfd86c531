"""The window fits the screens users have: 1,024 x 768, and a 1,366 x 768 laptop (a title bar
and a taskbar leave about 700 pixels of height). Its minimum was 1,220 x 770, set by the
Explore tab: a filter row of 722 pixels beside a left column of 490, and under the plot a
preview whose title took three lines and whose legend four; ``vtrain gui --screenshot --size
1024x768`` wrote a 1,220 x 770 picture without a word. After a simulation the Plan tab kept it
1,156 pixels wide: the cost panel's figures took their longest name beside their longest value
on one line each."""

from __future__ import annotations

import os
import subprocess
import sys

from PySide6 import QtCore, QtGui, QtWidgets

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


def _figure_rows(panel) -> list[tuple[QtWidgets.QLabel, QtWidgets.QLabel]]:
    """The shown (name, value) pairs of the cost panel's figures."""
    grid = panel._figures.layout()
    rows = []
    for r in range(grid.rowCount()):
        name, value = (grid.itemAtPosition(r, c) for c in (0, 1))
        if (name is not None and value is not None and name.widget() is not value.widget()
                and not value.widget().isHidden()):
            rows.append((name.widget(), value.widget()))
    return rows


def _whole(label: QtWidgets.QLabel) -> bool:
    """The label's text takes no more than the label's height at its width (nothing cut)."""
    return label.heightForWidth(label.width()) <= label.height()


def _lines(label: QtWidgets.QLabel) -> list[str]:
    """The lines of a rich-text label as QLabel lays them out at its width."""
    doc = QtGui.QTextDocument()
    doc.setDefaultFont(label.font())
    doc.setDocumentMargin(0)
    doc.setHtml(label.text())
    doc.setTextWidth(label.contentsRect().width())
    doc.documentLayout()  # lays it out
    block = doc.firstBlock()
    layout = block.layout()
    return [block.text()[layout.lineAt(i).textStart():
                         layout.lineAt(i).textStart() + layout.lineAt(i).textLength()].strip()
            for i in range(layout.lineCount())]


def test_the_window_with_a_simulated_plan_can_be_1024_wide(window, qtbot, qapp, real_simulate):
    """It was 1,156 pixels at least: the editor's column (500) beside the figures (503: the
    longest name beside the longest value, 'With failures 2.9 days (2.9–2.9), $1,100, goodput
    99.9 %') and the memory chart (143). Narrower, the figures' names and values wrap."""
    with qtbot.waitSignal(window.result_shown, timeout=60_000):
        assert window.open_path(SMALL)
    window.resize(1024, 700)
    for _ in range(3):
        qapp.processEvents()
    least = window.minimumSizeHint()
    assert least.width() <= 1024 and least.height() <= 700, least
    assert (window.width(), window.height()) == (1024, 700)
    panel = window.cost_panel
    figures, scroll = panel._figures, panel._figures_scroll
    assert figures.width() <= scroll.viewport().width()  # nothing off to the right
    assert figures.width() < figures.sizeHint().width()  # narrower than its lines...
    rows = _figure_rows(panel)
    assert len(rows) == 6 + 5 + 8  # iteration, time (no CP, EP or wait rows), training run
    line = panel.fontMetrics().lineSpacing()
    for name, value in rows:  # ...each name and value whole, side by side
        assert _whole(name) and _whole(value), (name.text(), value.text())
        assert name.geometry().right() < value.geometry().left(), name.text()
        assert value.geometry().right() < figures.width(), value.text()
    # a name breaks at its spaces, never after a slash ("Exposed PP send/" over "recv")
    pp_name = next(name for name, value in rows if value is panel._values["pp_comm"])
    lines = _lines(pp_name)
    assert len(lines) == 2 and lines[1] == "send/\u2060recv", lines
    run = panel._values["run_days"]
    assert run.text().startswith("2.9 days (2.9–2.9), $1,100, goodput 99.9")
    assert run.height() >= 2 * line  # on two lines, not cut
    # the memory chart keeps its minimum beside them: its title and legend wrapped
    chart = panel.memory_plot.parentWidget()
    assert chart.width() >= chart.minimumSizeHint().width()
    assert scroll.geometry().right() < chart.geometry().left()


def test_wrapped_figures_get_the_height_they_take(window, qtbot, qapp, real_simulate):
    """At 1,024 pixels the figures wrap onto more lines than at their full width: the divider
    under the timeline gives them that height (they fitted the height of their lines unwrapped,
    and scrolled)."""
    with qtbot.waitSignal(window.result_shown, timeout=60_000):
        assert window.open_path(SMALL)
    window.resize(1024, 1100)
    for _ in range(3):
        qapp.processEvents()
    panel = window.cost_panel
    figures, scroll = panel._figures, panel._figures_scroll
    assert figures.heightForWidth(figures.width()) > figures.sizeHint().height() + 40
    assert panel.figures_height() == figures.heightForWidth(scroll.width()) + 2
    assert scroll.verticalScrollBar().maximum() == 0  # nothing to scroll to
    assert scroll.height() >= panel.figures_height()


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
