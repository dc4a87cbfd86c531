"""The Explore plot's legend sits beside the points, not over them: a user's trial found it
over the MT-NLG sweep's upper-right plans."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore

from synthetic import plot_points, shown
from vtrain_gui.sweep_plot import SweepPlot


def _result(n: int = 3000) -> SimpleNamespace:
    """Plans spread over the whole plot, corners included."""
    rng = np.random.default_rng(3)
    days = np.concatenate([[1.0, 1.0, 1000.0, 1000.0], 10.0 ** rng.uniform(0.0, 3.0, n - 4)])
    cost = np.concatenate([[1e5, 1e8, 1e5, 1e8], 10.0 ** rng.uniform(5.0, 8.0, n - 4)])
    return plot_points(days, cost, num_gpus=64)


def _legend(plot: SweepPlot) -> pg.LegendItem:
    (legend,) = [i for i in plot.scene().items() if isinstance(i, pg.LegendItem)]
    return legend


def test_the_legend_covers_no_point_and_stays_in_the_widget(qtbot, qapp):
    plot = shown(qtbot, SweepPlot(), 900, 300)
    plot.set_result(_result())
    plot.set_view(np.ones(3000, bool), np.zeros(3000, bool), {"fastest": 0, "cheapest": 2}, 30.0)
    qapp.processEvents()

    legend = _legend(plot)
    box = legend.sceneBoundingRect()
    assert box.width() > 50 and box.height() > 100  # drawn, with its 7 entries
    assert QtCore.QRectF(plot.rect()).contains(box)  # all of it in the widget
    vb = plot.getPlotItem().getViewBox()
    feasible = plot.scatter_items()["feasible"]
    x, y = feasible.data["x"], feasible.data["y"]
    assert x.size == 3000
    inside = [box.contains(vb.mapViewToScene(QtCore.QPointF(float(a), float(b))))
              for a, b in zip(x, y)]
    assert not any(inside)
    assert not box.intersects(vb.sceneBoundingRect())  # nor any point panned or zoomed to
    assert vb.sceneBoundingRect().width() > 0.6 * plot.width()  # the plot keeps most of it
