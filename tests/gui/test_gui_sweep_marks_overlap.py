"""The Explore plot's fastest and cheapest marks stay visible when one plan is both: the
cheapest square was drawn over the fastest triangle, so a sweep whose fastest plan is also
its cheapest (Mixtral 8x7B on 8 B200s, Llama 3 70B on 64 H100s) showed no fastest mark
though the legend lists one."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from PySide6 import QtCore, QtGui

from synthetic import plot_points, shown
from vtrain_gui.sweep_plot import CHEAPEST_COLOR, DEADLINE_COLOR, FASTEST_COLOR, SweepPlot


def _result() -> SimpleNamespace:
    return plot_points(np.array([10.0, 20.0, 40.0, 80.0]), np.array([1e5, 2e5, 4e5, 8e5]),
                       num_gpus=64)


def _pixels_of(image: QtGui.QImage, color: str, center, radius: int, tolerance: int = 24) -> int:
    """Pixels within ``tolerance`` of ``color`` in each channel, within ``radius`` of
    ``center`` (device pixels)."""
    want = QtGui.QColor(color)
    cx, cy = int(center.x()), int(center.y())
    n = 0
    for x in range(max(0, cx - radius), min(image.width(), cx + radius + 1)):
        for y in range(max(0, cy - radius), min(image.height(), cy + radius + 1)):
            got = QtGui.QColor(image.pixel(x, y))
            n += (abs(got.red() - want.red()) <= tolerance
                  and abs(got.green() - want.green()) <= tolerance
                  and abs(got.blue() - want.blue()) <= tolerance)
    return n


def test_fastest_cheapest_and_deadline_marks_on_one_plan_are_all_seen(qtbot, qapp):
    plot = shown(qtbot, SweepPlot(), 900, 400)
    plot.set_result(_result())
    plot.set_view(np.ones(4, bool), np.ones(4, bool),
                  {"fastest": 0, "cheapest": 0, "deadline": 0}, 30.0, auto_range=True)
    qapp.processEvents()
    image = plot.grab().toImage()
    vb = plot.getPlotItem().getViewBox()
    center = plot.mapFromScene(vb.mapViewToScene(QtCore.QPointF(*plot.points_xy(0))))
    # each mark keeps a visible part of its own colour where the three overlap: the whole
    # triangle (97 px of green alone), the square's corners, the star's points (all three
    # at z 4 in the order fastest, cheapest, deadline showed no green pixel)
    seen = {c: _pixels_of(image, c, center, 12)
            for c in (FASTEST_COLOR, CHEAPEST_COLOR, DEADLINE_COLOR)}
    assert seen[FASTEST_COLOR] >= 80, seen
    assert seen[CHEAPEST_COLOR] >= 10, seen
    assert seen[DEADLINE_COLOR] >= 4, seen
