"""The timeline's time labels stay inside the widget: the last one ("35" of the MT-NLG
example's 34.8 s iteration) was cut in half by the widget's right edge at 1,280 x 800 and
1,024 x 768 (pyqtgraph lets an end label reach past its axis; the axis ended at the edge)."""

from __future__ import annotations

import pytest
from PySide6 import QtCore, QtGui

from core.sim.graph_types import Schedule
from synthetic import synthetic_iteration
from vtrain_gui.timeline.widget import TimelineWidget


def _label_rects(plot) -> list[tuple[str, QtCore.QRectF]]:
    """Each drawn tick label of the bottom axis and its rectangle in the plot widget."""
    axis = plot.getPlotItem().getAxis("bottom")
    image = QtGui.QImage(10, 10, QtGui.QImage.Format.Format_ARGB32)
    painter = QtGui.QPainter(image)
    try:
        specs = axis.generateDrawSpecs(painter)
    finally:
        painter.end()
    out = []
    for rect, _flags, text in specs[2]:
        scene = axis.mapRectToScene(rect)
        out.append((text, QtCore.QRectF(plot.mapFromScene(scene).boundingRect())))
    return out


@pytest.mark.parametrize("width", [560, 700, 780, 1000])
def test_every_time_label_is_inside_the_widget(qtbot, qapp, width):
    timeline = TimelineWidget()
    qtbot.addWidget(timeline)
    timeline.resize(width, 300)
    timeline.show()
    qtbot.waitExposed(timeline)
    graph, schedule = synthetic_iteration(p=4, m=8)
    k = 34.768 / schedule.iteration_time_s  # as long as the MT-NLG example's iteration
    schedule = Schedule(start_s=schedule.start_s * k, end_s=schedule.end_s * k,
                        iteration_time_s=34.768)
    timeline.set_data(graph, schedule)
    timeline.wait_view_ready(10)
    qapp.processEvents()
    plot = timeline.plot
    labels = _label_rects(plot)
    assert len(labels) >= 3
    inside = QtCore.QRectF(plot.rect())
    for text, rect in labels:
        assert inside.contains(rect), (text, rect, inside)
