"""The Explore tab's status under a finished sweep stays in view at 1,366 x 768: its warning
shortened, whole on hover (a trial user found "⚠ large sweep: ... (10,000,000 ..." cut off at
the bottom of the column)."""

from __future__ import annotations

import dataclasses

from PySide6 import QtCore, QtWidgets

from core.io.session import load_any
from core.studies.sweep import SweepSpace, run_sweep
from tests.conftest import EXAMPLES
from vtrain_gui.explore import STATUS_WARNING_CHARS
from vtrain_gui.formatting import short_text

#: vtrain sweep's large-sweep note of Qwen3-30B-A3B on 64 H100 (core.studies.sweep.bound).
LARGE = ("large sweep: the 1,011,950 plans that fit in memory and are within the simulation's "
         "limit (10,000,000 pipeline steps each) need up to 2,030,000,000 pipeline steps to "
         "simulate, about 9 minutes on one core before pruning")


def test_short_text_cuts_at_a_space_within_the_limit():
    assert short_text("abc def", 7) == "abc def"
    assert short_text("large sweep: the 1,011,950 plans", 20) == "large sweep: the…"
    assert short_text("abcdefgh", 5) == "abcd…"
    cut = short_text(LARGE, STATUS_WARNING_CHARS)
    assert len(cut) <= STATUS_WARNING_CHARS and cut.endswith("…")
    assert LARGE.startswith(cut[:-1])


def _settle() -> None:
    for _ in range(5):
        QtCore.QCoreApplication.sendPostedEvents(None, QtCore.QEvent.Type.LayoutRequest)
        QtWidgets.QApplication.processEvents()


def _bottom_in_view(widget, scroll) -> bool:
    view = scroll.viewport()
    top = widget.mapTo(view, QtCore.QPoint(0, 0)).y()
    return top >= 0 and top + widget.height() <= view.height()


def test_a_finished_sweeps_status_and_its_warning_are_in_view(window, qtbot):
    """At 1,366 x 700 (the window's least height) the settings column scrolls: the finished
    sweep's status and the export buttons under it are scrolled into view."""
    window.resize(1366, 700)
    window.tabs.setCurrentWidget(window.explore)
    _settle()
    explore = window.explore
    small = run_sweep(load_any(EXAMPLES / "gpt3_1.3b_single_node.json"),
                      SweepSpace(max_gpus=8, micro_batch_sizes=(1,), schedules=("1f1b",)))
    result = dataclasses.replace(small, warnings=[LARGE, "second warning"])
    scroll = explore._left_scroll
    assert scroll.verticalScrollBar().maximum() > 0 and scroll.verticalScrollBar().value() == 0
    assert not _bottom_in_view(explore.export_csv_button, scroll)
    explore._on_sweep_finish(explore.runner.latest_run_id, result, 555.5)
    qtbot.wait(50)  # the column scrolls once laid out again
    _settle()
    status = explore._status
    last = status.text().splitlines()[-1]
    assert last == f"⚠ {short_text(LARGE, STATUS_WARNING_CHARS)} (+1 more, hover)"
    assert status.toolTip() == f"⚠ {LARGE}\n⚠ second warning"
    # every line of the status and the export buttons inside the column's view
    assert _bottom_in_view(status, scroll) and _bottom_in_view(explore.export_csv_button, scroll)
    assert status.height() <= 5 * status.fontMetrics().lineSpacing()
