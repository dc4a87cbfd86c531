"""The sweep table's schedule and recompute columns hold every schedule and every mode a
sweep tries by default whole, in bold (the Pareto front's rows): "interleaved" was cut to
"interleav…" in the rows worth reading."""

from __future__ import annotations

from PySide6 import QtGui

from core.plan.parallel import RECOMPUTE_MODES, SCHEDULES
from vtrain_gui.sweep_table import COLUMN_INDEX, SweepTableModel, SweepTableView


def test_every_schedule_and_recompute_mode_fits_its_column_in_bold(qtbot):
    view = SweepTableView(SweepTableModel())
    qtbot.addWidget(view)
    bold = QtGui.QFont(view.font())
    bold.setBold(True)
    fm = QtGui.QFontMetrics(bold)
    margin = 8  # a cell's padding
    for attr, values in (("schedule", SCHEDULES), ("recompute", RECOMPUTE_MODES)):
        width = view.columnWidth(COLUMN_INDEX[attr])
        for value in values:
            assert fm.horizontalAdvance(value) + margin <= width, (attr, value, width)
