"""The Explore plot's large layers: 100,000 plans drawn by one PointCloudItem, with the
nearest-point lookup that hover tooltips and clicks use (no timing assertions)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from PySide6 import QtCore, QtGui
from PySide6.QtCore import Qt

from synthetic import shown
from vtrain_gui.point_cloud import PointCloudItem
from vtrain_gui.sweep_plot import SweepPlot

N = 100_000


class _Plan:
    def __init__(self, i: int) -> None:
        self.i = i

    def label(self) -> str:
        return f"plan #{self.i}"


class _Plans:
    def __getitem__(self, i: int) -> _Plan:
        return _Plan(int(i))


def _synthetic_result(n: int = N, seed: int = 7) -> SimpleNamespace:
    rng = np.random.default_rng(seed)
    days = 10.0 ** rng.uniform(0.0, 3.0, n)
    cost = 10.0 ** rng.uniform(5.0, 8.0, n)
    fits = rng.random(n) < 0.05  # most plans in the grey "does not fit" layer, as in MT-NLG
    return SimpleNamespace(num_plans=n, training_days=days, cost_usd=cost, fits_in_memory=fits,
                           feasible=fits,
                           plans=_Plans(), num_gpus=np.full(n, 1024), iteration_time_s=np.ones(n),
                           mfu=np.full(n, 0.4), max_memory_per_gpu_bytes=np.full(n, 2.0**35),
                           reason=[""] * n)


class _Click:
    """The part of pyqtgraph's MouseClickEvent that PointCloudItem reads."""

    def __init__(self, pos: QtCore.QPointF, double: bool = False) -> None:
        self._pos, self._double, self.accepted = pos, double, None

    def button(self):
        return Qt.MouseButton.LeftButton

    def pos(self) -> QtCore.QPointF:
        return self._pos

    def double(self) -> bool:
        return self._double

    def accept(self) -> None:
        self.accepted = True

    def ignore(self) -> None:
        self.accepted = False


def test_a_hundred_thousand_points_in_the_fast_layer(qtbot):
    plot = shown(qtbot, SweepPlot(), 900, 600)
    r = _synthetic_result()
    plot.set_result(r)
    qtbot.wait(10)

    items = plot.scatter_items()
    infeasible, feasible = items["infeasible"], items["feasible"]
    assert isinstance(infeasible, PointCloudItem) and isinstance(feasible, PointCloudItem)
    assert infeasible.data.size == int((~r.fits_in_memory).sum()) > 90_000
    held = np.concatenate([infeasible.data["data"], feasible.data["data"]])
    assert np.array_equal(np.sort(held), np.arange(N))
    assert not r.fits_in_memory[infeasible.data["data"]].any()
    assert r.fits_in_memory[feasible.data["data"]].all()
    # log axes: the item's coordinates are log10(days), log10(cost); bounds are the extents
    assert np.allclose(infeasible.data["x"], np.log10(r.training_days[infeasible.data["data"]]))
    lo, hi = infeasible.dataBounds(1)
    assert lo == infeasible.data["y"].min() and hi == infeasible.data["y"].max()
    assert infeasible.boundingRect().contains(QtCore.QPointF(infeasible.data["x"][0],
                                                            infeasible.data["y"][0]))

    # it paints (one drawPoints per pass) without error
    image = QtGui.QImage(plot.size(), QtGui.QImage.Format.Format_ARGB32)
    image.fill(Qt.GlobalColor.white)
    painter = QtGui.QPainter(image)
    plot.render(painter)
    painter.end()

    # hover and click find the plan under the pointer
    row = 12_345
    i = int(infeasible.data["data"][row])
    at = QtCore.QPointF(float(infeasible.data["x"][row]), float(infeasible.data["y"][row]))
    assert infeasible.nearest(at) == row
    assert infeasible.tip_at(at).startswith(f"plan #{i}\n")
    clicked = []
    plot.point_clicked.connect(lambda index, double: clicked.append((index, double)))
    event = _Click(at, double=True)
    infeasible.mouseClickEvent(event)
    assert event.accepted and clicked == [(i, True)]

    # a few pixels away still picks it; far outside every point picks nothing
    t = infeasible.deviceTransform_()
    near = t.inverted()[0].map(t.map(at) + QtCore.QPointF(0.0, 1.0))
    assert infeasible.nearest(near, max_px=3.0) is not None
    far = QtCore.QPointF(infeasible.data["x"].max() + 5.0, infeasible.data["y"].max() + 5.0)
    assert infeasible.nearest(far) is None and infeasible.tip_at(far) == ""
    miss = _Click(far)
    infeasible.mouseClickEvent(miss)
    assert miss.accepted is False and len(clicked) == 1

    # a linear-axis redraw and an empty result leave consistent layers
    plot.set_log_axes(False)
    assert np.allclose(infeasible.data["x"], r.training_days[infeasible.data["data"]])
    plot.set_result(None)
    assert infeasible.data.size == 0 and infeasible.dataBounds(0) == (None, None)


def test_a_sub_decade_log_axis_gets_round_labelled_ticks(qtbot):
    """Costs of $0.8M to $2M on a log axis: the 1..9 x 10^k ticks would label $800k, $900k and
    $1M and leave the rest bare; the axis gives round linear steps instead, all labelled. A
    view of more than a decade keeps pyqtgraph's log ticks."""
    import math

    from vtrain_gui.formatting import format_usd_short
    from vtrain_gui.sweep_plot import ValueAxis
    axis = ValueAxis("left", format_usd_short)
    axis.setLogMode(False, True)
    levels = axis.tickValues(math.log10(8e5), math.log10(2e6), 400)
    values = levels[0][1]
    assert axis.tickStrings(values, 1.0, 1.0) == ["$800k", "$1M", "$1.2M", "$1.4M", "$1.6M",
                                                  "$1.8M", "$2M"]
    steps = np.diff([10 ** v for v in values])
    assert np.allclose(steps, 2e5)
    axis.tickValues(0.0, 3.0, 400)
    assert not axis._fine  # decades: the log ticks as before
