"""The Explore tab's plan table at a 1,366 x 768 laptop's size: the plan's main fields and its
figures through the error band (memory per GPU among them) whole beside the settings column,
and every column wide enough for its values, in bold on the Pareto front's rows (a new-user
trial found the memory column cut off at 1,366 x 768: the settings column was 480 px wide,
its schedules on one line, and each column had the sort arrow's room on top of its widest
value). At 1,024 the rest is a horizontal scroll away."""

from __future__ import annotations

import pytest
from PySide6 import QtCore, QtGui

import test_gui_explore_laptop_size as laptop
from synthetic import synthetic_result
from vtrain_gui.sweep_table import COLUMN_INDEX, TABLE_COLUMNS

three_marks = laptop.three_marks  # the fixture: ~1,000 plans of GPT-3 1.3B on up to 8 GPUs


def _show(window, qapp, three_marks, size):
    session, result = three_marks
    window.show_tab("explore")
    explore = window.explore
    explore.set_session(session)
    explore.set_result(result)
    explore.plan_preview.show_simulation(synthetic_result(session))
    for _ in range(3):
        window.resize(*size)
        qapp.processEvents()
    assert (window.width(), window.height()) == size
    return explore.table


def _cells_fit(table) -> None:
    """Every shown cell of the first rows (the front's, bold, among them) and every header
    fits its column: nothing elided (``reason`` aside: last, elided, whole in its tooltip)."""
    model = table.model()
    header = table.horizontalHeader()
    hfm = header.fontMetrics()
    for c, col in enumerate(TABLE_COLUMNS):
        if table.isColumnHidden(c) or col.attr == "reason":
            continue
        width = table.columnWidth(c)
        assert hfm.horizontalAdvance(col.header) + 20 <= width, (col.header, width)
        for r in range(min(model.rowCount(), 12)):
            index = model.index(r, c)
            font = model.data(index, QtCore.Qt.ItemDataRole.FontRole) or table.font()
            text = model.data(index, QtCore.Qt.ItemDataRole.DisplayRole)
            assert QtGui.QFontMetrics(font).horizontalAdvance(text) + 6 <= width, (
                col.header, text, width)


def test_the_figures_through_the_error_band_are_whole_at_1366_by_768(window, qapp, three_marks):
    table = _show(window, qapp, three_marks, (1366, 768))
    model = table.model()
    assert any(model.data(model.index(r, 0), QtCore.Qt.ItemDataRole.FontRole) is not None
               for r in range(3))  # the front's rows, bold, are measured too
    header = table.horizontalHeader()
    view = table.viewport().width()
    assert table.mapTo(window, QtCore.QPoint(table.width(), 0)).x() <= window.width()
    shown = [c for c in range(COLUMN_INDEX["iteration_band"] + 1) if not table.isColumnHidden(c)]
    for c in shown:
        left = header.sectionViewportPosition(c)
        assert 0 <= left and left + header.sectionSize(c) <= view, (
            TABLE_COLUMNS[c].header, left, header.sectionSize(c), view)
    assert [TABLE_COLUMNS[c].header for c in shown] == [
        "t", "p", "d", "b", "m", "schedule", "recompute", "GPUs", "iteration", "days", "cost",
        "memory/GPU", "error band"]
    _cells_fit(table)


@pytest.mark.parametrize("size", [(1024, 768), (1600, 1000)])
def test_every_column_is_readable_and_scrolls_into_view(window, qapp, three_marks, size):
    table = _show(window, qapp, three_marks, size)
    _cells_fit(table)
    bar = table.horizontalScrollBar()
    if size[0] == 1024:  # the columns past the view are a scroll away
        assert bar.isVisible() and bar.maximum() > 0
    bar.setValue(bar.maximum())
    qapp.processEvents()
    last = max(c for c in range(len(TABLE_COLUMNS)) if not table.isColumnHidden(c))
    header = table.horizontalHeader()
    assert header.sectionViewportPosition(last) < table.viewport().width()  # reachable
