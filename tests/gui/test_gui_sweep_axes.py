"""The Explore plot's log axes label the data's ends, and its legend has no entry that can
never have a point (a user's trial: the 1.3B sweep's cheapest plans at $838-$840 sat below
the first cost tick, $1k, and its fastest at 2.2 days left of the first day tick, 3)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np

from synthetic import plot_points, shown
from vtrain_gui.sweep_plot import SweepPlot


def _result(days: np.ndarray, cost: np.ndarray, fits: np.ndarray | None = None) -> SimpleNamespace:
    return plot_points(days, cost, fits)


def _plot(qtbot, qapp, result: SimpleNamespace) -> SweepPlot:
    plot = shown(qtbot, SweepPlot(), 1100, 330)
    n = result.num_plans
    plot.set_result(result)
    plot.set_view(np.ones(n, bool), np.zeros(n, bool), {}, None, auto_range=True)
    qapp.processEvents()
    return plot


def _labelled(plot: SweepPlot, name: str) -> dict[float, str]:
    """The ticks of axis ``name`` with a label: value (data units) -> label."""
    axis = plot.getPlotItem().getAxis(name)
    size = axis.width() if name == "bottom" else axis.height()
    out = {}
    for spacing, values in axis.tickValues(*axis.range, size):
        for v, text in zip(values, axis.tickStrings(values, 1.0, spacing)):
            if text:
                out[10.0 ** float(v)] = text
    return out


def test_log_axes_label_the_least_and_the_most_days_and_cost(qtbot, qapp):
    rng = np.random.default_rng(5)  # as the 1.3B example: 2.19-8.73 days, $838-$1,530
    days = np.concatenate([[2.188, 8.728], rng.uniform(2.3, 8.5, 200)])
    cost = np.concatenate([[837.84, 1529.561], rng.uniform(850.0, 1500.0, 200)])
    plot = _plot(qtbot, qapp, _result(days, cost))

    x, y = _labelled(plot, "bottom"), _labelled(plot, "left")
    assert math.isclose(min(x), 2.188) and x[min(x)] == "2.19"
    assert math.isclose(max(x), 8.728) and x[max(x)] == "8.73"
    assert math.isclose(min(y), 837.84) and y[min(y)] == "$838"
    assert math.isclose(max(y), 1529.561)
    assert 1000.0 in {round(v, 6) for v in y}  # round ticks between them stay
    # no two labels closer than the room a label takes
    axis = plot.getPlotItem().getAxis("bottom")
    px = axis.width() / (axis.range[1] - axis.range[0])
    xs = sorted(math.log10(v) for v in x)
    assert min(b - a for a, b in zip(xs, xs[1:])) * px >= 59.0


def test_log_axes_over_decades_label_the_ends_too(qtbot, qapp):
    days = np.array([0.83, 3.0, 40.0, 420.0])
    cost = np.array([7.3e4, 2e5, 3e6, 8.6e7])
    plot = _plot(qtbot, qapp, _result(days, cost))
    y = _labelled(plot, "left")
    assert math.isclose(min(y), 7.3e4) and math.isclose(max(y), 8.6e7)
    assert any(math.isclose(v, 1e6) for v in y)  # the decades stay labelled
    x = _labelled(plot, "bottom")
    assert math.isclose(min(x), 0.83) and math.isclose(max(x), 420.0)


def test_linear_axes_get_no_end_ticks(qtbot, qapp):
    days = np.array([2.188, 3.0, 8.728])
    plot = _plot(qtbot, qapp, _result(days, np.array([837.84, 900.0, 1529.0])))
    plot.set_log_axes(False)
    qapp.processEvents()
    assert not any(math.isclose(v, 2.188) for v in plot.getPlotItem().getAxis("bottom").tickValues(
        *plot.getPlotItem().getAxis("bottom").range, 800)[0][1])


def test_the_legend_names_the_unfit_layer_only_when_it_has_points(qtbot, qapp):
    days = np.array([2.0, 3.0, 4.0])
    cost = np.array([900.0, 1000.0, 1100.0])
    plot = _plot(qtbot, qapp, _result(days, cost))
    assert "does not fit" not in plot.legend_labels()  # a sweep's: never a point to show
    assert plot.legend_labels()[0] == "fits in memory"

    # a result whose unfit plans have figures (made elsewhere): they are drawn and named
    plot.set_result(_result(days, cost, np.array([True, False, True])))
    plot.set_view(np.ones(3, bool), np.zeros(3, bool), {}, 5.0)
    labels = plot.legend_labels()
    assert labels[:2] == ["fits in memory", "does not fit"]
    assert "cheapest within deadline" in labels
    plot.set_result(None)
    assert "does not fit" not in plot.legend_labels()


def test_the_front_rings_tight_plans_and_crosses_those_beyond_the_calibration(qtbot, qapp):
    """Issue 27: the sweep's front marks the plans a planner should not take at face value:
    memory within the margin ("tight") and plans beyond the store's calibration runs; each
    legend entry only while the front has such a plan."""
    days = np.array([2.0, 3.0, 4.0, 5.0])
    cost = np.array([1100.0, 1000.0, 900.0, 1200.0])
    r = _result(days, cost)
    r.memory_verdict = np.array(["tight", "fits", "fits", "tight"])
    r.within_calibration = np.array([True, False, True, False])
    plot = _plot(qtbot, qapp, r)
    front = np.array([True, True, True, False])  # plan 3 is not on the front
    plot.set_view(np.ones(4, bool), front, {}, None)
    flags = plot.front_flags()
    assert flags["tight"].tolist() == [0] and flags["uncalibrated"].tolist() == [1]
    items = plot.scatter_items()
    assert list(items["front_tight"].data["data"]) == [0]
    assert list(items["front_uncalibrated"].data["data"]) == [1]
    labels = plot.legend_labels()
    # only the front's plans are ringed and crossed, and the legend says so (a trial user read
    # "beyond the calibration runs" as every plan's mark, where the table's ⚠ marks them all)
    assert labels.index("Pareto front") + 1 == labels.index("front plans tight in memory")
    assert labels.index("Pareto front") + 2 == labels.index(
        "front plans beyond the calibration runs")
    r.memory_verdict = np.array(["fits"] * 4)
    r.within_calibration = np.ones(4, bool)
    plot.set_result(r)
    plot.set_view(np.ones(4, bool), front, {}, None)
    assert not {"front plans tight in memory", "front plans beyond the calibration runs"} & set(
        plot.legend_labels())


def test_a_short_run_in_days_has_no_si_prefix_on_the_axis_label(qtbot, qapp):
    """A 50-iteration Megatron-Bridge benchmark run: 0.0118-0.02 days. The ticks showed the
    values themselves (0.0118, 0.02) while pyqtgraph's automatic SI prefix added "(x0.001)"
    to the label, which a reader could apply twice: the label is the quantity alone."""
    days = np.array([0.0118, 0.0200, 0.0150])
    cost = np.array([31.0, 52.0, 40.0])
    plot = _plot(qtbot, qapp, _result(days, cost))
    for name, label in (("bottom", "training time (days)"), ("left", "cost (USD)")):
        axis = plot.getPlotItem().getAxis(name)
        assert axis.labelString().count("x0.001") == 0 and axis.autoSIPrefixScale == 1.0
        assert label in axis.labelString()
    x = _labelled(plot, "bottom")
    assert math.isclose(min(x), 0.0118) and x[min(x)] == "0.0118"
