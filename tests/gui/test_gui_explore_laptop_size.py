"""The Explore plot keeps its time axis and its title in view at 1,280 x 800 with three marked
plans: the summary over the plot (the counts, the fastest, the cheapest and the cheapest
within the deadline, each a plan of two lines, the plan in the editor and a calibration
warning) took every line it needed, the splitter under it got less than its minimum height,
the plot was squeezed below its own and its bottom, the days axis and "training time (days)",
was cut off."""

from __future__ import annotations

import pytest
from PySide6 import QtCore

from core.io.session import load_any
from core.studies.sweep import SweepSpace, run_sweep
from synthetic import synthetic_result
from tests.conftest import EXAMPLES
from vtrain_gui.explore import SUMMARY_LINES

SMALL = EXAMPLES / "gpt3_1.3b_single_node.json"  # GPT-3 1.3B, B=256, 8 GPUs in one node


@pytest.fixture(scope="module")
def three_marks():
    """~1,000 plans of GPT-3 1.3B on at most 8 GPUs whose fastest (8 GPUs), cheapest (2 GPUs)
    and cheapest within 5 days (4 GPUs) are three different plans."""
    session = load_any(SMALL)
    space = SweepSpace(max_gpus=8, micro_batch_sizes=(1, 2, 4), schedules=("1f1b", "gpipe"))
    result = run_sweep(session, space, deadline_days=5.0, prune=False)
    assert len({result.fastest, result.cheapest, result.cheapest_within_deadline}) == 3
    return session, result


def _in_view(widget, top) -> QtCore.QRect:
    """The part of ``widget`` that its ancestors up to ``top`` show, in ``widget``'s
    coordinates."""
    origin = widget.mapTo(top, QtCore.QPoint(0, 0))
    rect = QtCore.QRect(origin, widget.size())  # in top's coordinates
    w = widget.parentWidget()
    while w is not None:
        rect = rect.intersected(QtCore.QRect(w.mapTo(top, QtCore.QPoint(0, 0)), w.size()))
        if w is top:
            break
        w = w.parentWidget()
    return rect.translated(-origin)


def assert_days_axis_in_view(window) -> None:
    """The Explore plot has its minimum height and its days axis, ticks and title, in view."""
    explore = window.explore
    plot = explore.plot
    assert explore.plot_view.height() >= plot.minimumHeight()
    shown = _in_view(plot, window)
    axis = plot.getPlotItem().getAxis("bottom")
    title = plot.mapFromScene(axis.label.mapRectToScene(axis.label.boundingRect())).boundingRect()
    assert title.height() > 10 and title.width() > 80  # "training time (days)" drawn
    assert shown.contains(title), (shown, title)
    ticks = plot.mapFromScene(axis.sceneBoundingRect()).boundingRect()
    assert shown.contains(ticks), (shown, ticks)


def test_the_days_axis_title_stays_in_view_with_three_marked_plans(window, qtbot, qapp,
                                                                   three_marks):
    session, result = three_marks
    size = (1280, 800)
    window.resize(*size)
    window.show_tab("explore")
    explore = window.explore
    explore.set_session(session)
    explore.settings_panel.deadline.setValue(5.0)
    explore.set_result(result)
    explore.plan_preview.show_simulation(synthetic_result(session))  # its title: two lines
    for _ in range(3):
        qapp.processEvents()
    text = explore.summary_text
    for label in ("fastest", "cheapest", "cheapest within 5 days", "plan in the editor"):
        assert f">{label}</a>" in text
    assert window.height() == size[1]

    # the plot's container is given at least the plot's minimum height (it was 213 px of 220)
    assert_days_axis_in_view(window)
    # the summary's box is at most SUMMARY_LINES lines tall, the rest scrolls; the marked
    # plans come first (the calibration warning after them)
    box = explore.summary_box
    assert box.height() <= SUMMARY_LINES * box.fontMetrics().lineSpacing() + 4
    assert box.label.height() > box.height()  # this summary is longer: it scrolls
    assert text.index(">fastest</a>") < text.index("⚠")
