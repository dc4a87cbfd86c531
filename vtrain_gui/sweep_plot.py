"""The Explore tab's plot: training days against dollars, one point per plan of a sweep.

Plans that do not fit in memory and have figures (none of a sweep's) are greyed, the Pareto front is a line
(its tight plans ringed, those beyond the store's calibration runs crossed), the
fastest, cheapest and cheapest-within-deadline plans are marked. Used by
:class:`vtrain_gui.explore.ExploreTab`.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import pyqtgraph as pg
from PySide6 import QtGui, QtWidgets
from PySide6.QtCore import Qt, Signal, Slot

from core.studies.sweep import SweepResult

from .formatting import (format_bytes, format_day_count, format_duration, format_gpus,
                         format_fraction, format_number_short, format_usd, format_usd_short)
from .point_cloud import PointCloudItem

__all__ = ["SweepPlot", "ValueAxis", "plan_text", "FEASIBLE_COLOR", "INFEASIBLE_COLOR", "FRONT_COLOR",
           "FASTEST_COLOR", "CHEAPEST_COLOR", "DEADLINE_COLOR"]

#: Colours of the scatter (feasible plans use the timeline's forward blue).
FEASIBLE_COLOR = "#4C78A8"
INFEASIBLE_COLOR = (150, 150, 150, 80)
FRONT_COLOR = "#D62728"
FASTEST_COLOR = "#2CA02C"
CHEAPEST_COLOR = "#9467BD"
DEADLINE_COLOR = "#F2B701"
#: The front's tight plans (memory within the margin) are ringed in this colour; its plans
#: outside the store's calibration runs carry a cross.
TIGHT_COLOR = "#FF7F0E"
UNCALIBRATED_COLOR = "#202020"
#: Their legend entries, which say that only the front's plans are so marked (the table's ~ and
#: ⚠ mark every plan; "beyond the calibration runs" alone read as every plan's mark).
FRONT_TIGHT_LABEL = "front plans tight in memory"
FRONT_UNCALIBRATED_LABEL = "front plans beyond the calibration runs"


def plan_text(result: SweepResult, i: int) -> str:
    """The label of plan ``i`` (:meth:`core.plan.parallel.ParallelPlan.label`)."""
    return result.plans[i].label()


#: Labelled mantissas of log-axis ticks, densest first, with the smallest gap between
#: neighbours in decades: a set is used when that gap is wide enough for a label.
_LOG_LABEL_SETS = (((1, 2, 3, 4, 5, 6, 7, 8, 9), math.log10(9 / 8)),
                   ((1, 2, 3, 4, 5), math.log10(5 / 4)),
                   ((1, 2, 3, 5), math.log10(3 / 2)),
                   ((1, 2, 5), math.log10(2)),
                   ((1,), 1.0))


class ValueAxis(pg.AxisItem):
    """An axis whose tick labels come from ``formatter(value)``, in linear or log mode.

    In log mode every minor tick (2..9 × 10^k) is drawn but only as many are
    labelled as fit: 1, 2, 5 × 10^k on a normal plot, fewer or more by zoom. A view of less
    than a decade (costs of $0.8M to $2M, say) has too few such ticks: it gets evenly spaced
    round values instead (a 1, 2, 2.5 or 5 × 10^k step), every one labelled.

    Round ticks rarely fall on the data's ends (the fastest plan at 2.2 days, the cheapest
    at $838, below the first tick of $1k): the values of :meth:`set_end_values` get a
    labelled tick of their own in log mode, and round ticks too close to one for both labels
    are left out.
    """

    def __init__(self, orientation: str, formatter: Callable[[float], str]) -> None:
        super().__init__(orientation)
        self._formatter = formatter
        self._fine = False  # the last ticks were the round linear ones of a sub-decade view
        self._ends: tuple[float, ...] = ()  # data units (days, USD)
        self._end_ticks: tuple[float, ...] = ()  # of the last ticks: axis units (log10)

    @property
    def _label_px(self) -> float:
        """Room a tick label takes along the axis, pixels."""
        return 60.0 if self.orientation in ("bottom", "top") else 22.0

    def set_end_values(self, values: Any) -> None:
        """Values (data units, > 0) that get a labelled tick in log mode when in view: the
        ends of the data (the least and the most days or cost plotted)."""
        ends = tuple(sorted({float(v) for v in values if np.isfinite(v) and v > 0}))
        if ends != self._ends:
            self._ends = ends
            self.picture = None  # redrawn with the new ticks
            self.update()

    def tickValues(self, minVal, maxVal, size):  # noqa: N802 - pyqtgraph API
        levels = self._round_tick_values(minVal, maxVal, size)
        lo_log, hi_log = sorted((float(minVal), float(maxVal)))
        ends = ([math.log10(v) for v in self._ends] if self.logMode else [])
        ends = [v for v in ends if lo_log <= v <= hi_log]
        self._end_ticks = tuple(ends)
        if not ends or not levels:
            return levels
        # a round tick within a label's room of an end value would overwrite its label
        room = self._label_px * (hi_log - lo_log) / max(float(size), 1.0)  # axis units
        kept = [(spacing, [v for v in values if min(abs(float(v) - e) for e in ends) >= room])
                for spacing, values in levels]
        spacing, first = kept[0]
        return [(spacing, sorted([*first, *ends])), *kept[1:]]

    def _round_tick_values(self, minVal: float, maxVal: float, size: float) -> list:
        """pyqtgraph's ticks, or round linear values in a log view of less than a decade."""
        lo_log, hi_log = sorted((float(minVal), float(maxVal)))
        self._fine = bool(self.logMode) and 0.0 < hi_log - lo_log < 1.0
        if not self._fine:
            return super().tickValues(minVal, maxVal, size)
        lo, hi = 10.0 ** lo_log, 10.0 ** hi_log
        horizontal = self.orientation in ("bottom", "top")
        wanted = max(2, int(float(size) / (90.0 if horizontal else 40.0)))
        raw = (hi - lo) / wanted
        mag = 10.0 ** math.floor(math.log10(raw))
        step = next(m * mag for m in (1.0, 2.0, 2.5, 5.0, 10.0) if m * mag >= raw)
        first = math.ceil(lo / step - 1e-9)
        values = [math.log10(k * step) for k in range(first, int(math.floor(hi / step + 1e-9)) + 1)
                  if k > 0]
        return [(1.0, values)]

    def _labelled_mantissas(self) -> tuple[int, ...]:
        lo, hi = self.range
        span = abs(float(hi) - float(lo)) or 1.0
        horizontal = self.orientation in ("bottom", "top")
        length = self.width() if horizontal else self.height()
        per_decade = length / span  # pixels
        for mantissas, gap in _LOG_LABEL_SETS:
            if per_decade * gap >= self._label_px:
                return mantissas
        return (1,)

    def tickStrings(self, values, scale, spacing):  # noqa: N802 - pyqtgraph API
        if not self.logMode:
            return [self._formatter(float(v) * scale) for v in values]
        if self._fine:  # round values of a sub-decade view: each labelled
            return [self._formatter(10.0 ** float(v)) for v in values]
        keep = self._labelled_mantissas()
        out = []
        for v in values:
            v = float(v)
            if v in self._end_ticks:  # the data's ends: always labelled
                out.append(self._formatter(10.0 ** v))
                continue
            mantissa = 10.0 ** (v - math.floor(v + 1e-9))
            near = round(mantissa)
            labelled = abs(mantissa - near) < 1e-6 * near and (near in keep or near == 10)
            out.append(self._formatter(10.0 ** v) if labelled else "")
        return out


class SweepPlot(pg.PlotWidget):
    """Scatter of training days (x) against cost in USD (y), one point per plan shown.

    Signals
    -------
    point_clicked(int, bool)
        Plan index under a click, and whether it was a double click.
    """

    point_clicked = Signal(int, bool)

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent, background="w",
                         axisItems={"bottom": ValueAxis("bottom", format_number_short),
                                    "left": ValueAxis("left", format_usd_short)})
        self._result: SweepResult | None = None
        self._log = True
        self._shown = np.empty(0, np.int64)
        self._front_idx = np.empty(0, np.int64)
        self._marks: dict[str, int | None] = {}
        self._selected: int | None = None
        self._current: int | None = None
        self._deadline: float | None = None

        item = self.getPlotItem()
        self._style_axes(item)
        self._add_layers(item)
        self._add_legend(item)
        self.setMinimumHeight(220)

    def _style_axes(self, item: pg.PlotItem) -> None:
        """Axis pens, labels, grid and log mode."""
        item.setMenuEnabled(False)
        for name in ("left", "bottom"):
            axis = item.getAxis(name)
            axis.setPen(pg.mkPen("#404040"))
            axis.setTextPen(pg.mkPen("#202020"))
            axis.enableAutoSIPrefix(False)  # the ticks show the values: never "(x0.001)"
        item.setLabel("bottom", "training time (days)")
        item.setLabel("left", "cost (USD)")
        item.showGrid(x=True, y=True, alpha=0.18)
        item.setLogMode(x=True, y=True)  # the items get log10 coordinates from _tx

    def _add_layers(self, item: pg.PlotItem) -> None:
        """The point layers (fitting, not fitting, front, marks, editor's plan, selection) and
        the deadline line, bottom to top."""
        def scatter(z: float, interactive: bool = True, **kw: Any) -> pg.ScatterPlotItem:
            s = pg.ScatterPlotItem(hoverable=interactive, tip=self._tip if interactive else None, **kw)
            s.setZValue(z)
            if interactive:
                s.sigClicked.connect(self._on_points_click)
            else:  # rings drawn over other points must not take their clicks
                s.setAcceptedMouseButtons(Qt.MouseButton.NoButton)
                s.setAcceptHoverEvents(False)
            item.addItem(s)
            return s

        def cloud(z: float, **kw: Any) -> PointCloudItem:
            # the large layers (up to ~100,000 plans): one item painting every point at once
            c = PointCloudItem(tip=self._tip, **kw)
            c.setZValue(z)
            c.sigClicked.connect(self._on_points_click)
            item.addItem(c)
            return c

        self._infeasible = cloud(0, size=5, pen=None, brush=pg.mkBrush(*INFEASIBLE_COLOR))
        self._feasible = cloud(1, size=7, pen=pg.mkPen(QtGui.QColor(FEASIBLE_COLOR).darker(140), width=0.6),
                               brush=pg.mkBrush(QtGui.QColor(FEASIBLE_COLOR)))
        self._front_line = pg.PlotCurveItem(pen=pg.mkPen(FRONT_COLOR, width=2))
        self._front_line.setZValue(2)
        item.addItem(self._front_line)
        self._front_points = scatter(3, size=9, pen=pg.mkPen("w", width=1),
                                     brush=pg.mkBrush(FRONT_COLOR), symbol="o")
        # the front's plans a planner should not take at face value (issue 27): memory within
        # the margin (ringed), or beyond what the store was calibrated on (crossed)
        # over the fastest and cheapest marks (z 4), which are front plans too and the ones a
        # planner acts on: the ring hollow and wider than they are, the cross inside them
        self._front_flags = {
            "tight": scatter(4.6, size=23, symbol="o", brush=pg.mkBrush(None),
                             pen=pg.mkPen(TIGHT_COLOR, width=2)),
            "uncalibrated": scatter(4.7, size=9, symbol="x", brush=pg.mkBrush(UNCALIBRATED_COLOR),
                                    pen=pg.mkPen(UNCALIBRATED_COLOR, width=0.5)),
        }
        # one plan can be two or three of these (a sweep's fastest plan is often its cheapest,
        # and the cheapest within the deadline too): the square lowest, the star's points
        # over its edges, the triangle on top, so each keeps a visible part (the square drawn
        # over the triangle hid it, though the legend lists "fastest")
        self._mark_items = {
            "fastest": scatter(4.2, size=17, symbol="t1", brush=pg.mkBrush(FASTEST_COLOR),
                               pen=pg.mkPen("#1B5E20", width=1.2)),
            "cheapest": scatter(4.0, size=15, symbol="s", brush=pg.mkBrush(CHEAPEST_COLOR),
                                pen=pg.mkPen("#4A2C6B", width=1.2)),
            "deadline": scatter(4.1, size=21, symbol="star", brush=pg.mkBrush(DEADLINE_COLOR),
                                pen=pg.mkPen("#7A5C00", width=1.2)),
        }
        # a large hollow diamond under the marks: a fastest or cheapest plan that is also the
        # editor's shows its own mark inside the diamond instead of being hidden by it
        self._current_item = scatter(3.5, False, size=27, symbol="d", brush=pg.mkBrush(None),
                                     pen=pg.mkPen("#000000", width=1.8))
        self._selected_item = scatter(6, False, size=24, symbol="o", brush=pg.mkBrush(None),
                                      pen=pg.mkPen("#000000", width=2.5))
        self._deadline_line = pg.InfiniteLine(
            angle=90, movable=False, pen=pg.mkPen(DEADLINE_COLOR, width=2, style=Qt.PenStyle.DashLine),
            label="deadline", labelOpts={"position": 0.96, "color": "#7A5C00",
                                         "fill": pg.mkBrush(255, 255, 255, 220)})
        self._deadline_line.setVisible(False)
        item.addItem(self._deadline_line, ignoreBounds=True)

    def _add_legend(self, item: pg.PlotItem) -> None:
        """The legend, right of the plot (over it, it hid the upper-right plans of large
        sweeps); its layer samples hide their layer when clicked."""
        self._legend = pg.LegendItem(offset=None, labelTextColor="#202020")
        fixed = QtWidgets.QSizePolicy.Policy.Fixed  # its entries' size, not the plot's height
        self._legend.setSizePolicy(fixed, fixed)
        beside = pg.GraphicsLayout()  # the plot, and the legend in a column of its own
        self.setCentralItem(beside)  # (takes the plot out of the scene: added back below)
        beside.addItem(item, 0, 0)
        beside.addItem(self._legend, 0, 1)
        beside.layout.setAlignment(self._legend, Qt.AlignmentFlag.AlignTop)
        front_sample = pg.PlotDataItem(pen=pg.mkPen(FRONT_COLOR, width=2), symbol="o", symbolSize=8,
                                       symbolBrush=pg.mkBrush(FRONT_COLOR), symbolPen=pg.mkPen("w"))
        # the legend draws a ScatterPlotItem's symbol; clicking a sample hides its layer
        self._layer_samples = {}
        for layer in (self._feasible, self._infeasible):
            sample = pg.ScatterPlotItem(**{k: layer.opts[k] for k in ("symbol", "size", "pen", "brush")})
            sample.visibleChanged.connect(self._on_sample_visible)
            self._layer_samples[sample] = layer
        self._legend_samples = [front_sample, *self._layer_samples]  # keep alive; not in the plot
        self._legend_state: tuple | None = None
        self._fill_legend(with_deadline=False, with_unfit=False)

    def _fill_legend(self, with_deadline: bool, with_unfit: bool,
                     flags: tuple[str, ...] = ()) -> None:
        """Legend entries; "cheapest within deadline" only while a deadline is set, "does not
        fit" only while that layer has points (a sweep never simulates a plan that does not
        fit, so it has none: only results made elsewhere give such plans figures), the front's
        flags (:meth:`front_flags`) only while some plan of the front has them."""
        if (with_deadline, with_unfit, flags) == self._legend_state:
            return
        legend = self._legend
        legend.clear()
        samples = {layer: sample for sample, layer in self._layer_samples.items()}
        legend.addItem(samples[self._feasible], "fits in memory")
        if with_unfit:
            legend.addItem(samples[self._infeasible], "does not fit")
        legend.addItem(self._legend_samples[0], "Pareto front")
        # front plans only (the table's ⚠ and ~ mark every plan): said so, as a trial user
        # read "beyond the calibration runs" as the plot's whole answer for the uncrossed ones
        if "tight" in flags:
            legend.addItem(self._front_flags["tight"], FRONT_TIGHT_LABEL)
        if "uncalibrated" in flags:
            legend.addItem(self._front_flags["uncalibrated"], FRONT_UNCALIBRATED_LABEL)
        legend.addItem(self._mark_items["fastest"], "fastest")
        legend.addItem(self._mark_items["cheapest"], "cheapest")
        if with_deadline:
            legend.addItem(self._mark_items["deadline"], "cheapest within deadline")
        legend.addItem(self._current_item, "plan in the editor")
        self._legend_state = (with_deadline, with_unfit, flags)

    def legend_labels(self) -> list[str]:
        """Texts of the legend entries, top to bottom."""
        return [label.text for _, label in self._legend.items]

    # ------------------------------------------------------------------ API
    @property
    def log_axes(self) -> bool:
        """Whether both axes are logarithmic."""
        return self._log

    def set_log_axes(self, log: bool) -> None:
        """Logarithmic (default) or linear axes."""
        self._log = bool(log)
        self.getPlotItem().setLogMode(x=self._log, y=self._log)
        self._redraw(auto_range=True)

    def set_result(self, result: SweepResult | None, redraw: bool = True) -> None:
        """Plot ``result`` (every plan, until :meth:`set_view` filters); with ``redraw``
        False the points are drawn by the :meth:`set_view` that follows (tens of thousands
        of points take tens of milliseconds of the GUI thread each time)."""
        self._result = result
        n = result.num_plans if result is not None else 0
        self._shown = np.arange(n)
        self._front_idx = np.empty(0, np.int64)
        self._marks = {}
        self._selected = self._current = None
        if redraw or result is None:
            self._redraw(auto_range=True)

    def set_view(self, shown: np.ndarray, front: np.ndarray, marks: dict[str, int | None],
                 deadline_days: float | None, auto_range: bool = False) -> None:
        """Show plans ``shown`` (bool mask), ``front`` (bool mask) as the front line, and marks."""
        self._shown = np.flatnonzero(shown)
        idx = np.flatnonzero(front)
        if self._result is not None and idx.size:
            r = self._result
            idx = idx[np.lexsort((r.cost_usd[idx], r.training_days[idx]))]
        self._front_idx = idx
        self._marks = dict(marks)
        self._deadline = deadline_days
        self._redraw(auto_range=auto_range)

    def set_selected(self, index: int | None) -> None:
        """Ring plan ``index`` (None: no ring)."""
        self._selected = index
        self._set_one(self._selected_item, index)

    def set_current(self, index: int | None) -> None:
        """Mark plan ``index`` as the plan in the editor (None: no mark)."""
        self._current = index
        self._set_one(self._current_item, index)

    def points_xy(self, index: int) -> tuple[float, float]:
        """Scene-independent plot coordinates of plan ``index`` (log10 in log mode)."""
        r = self._result
        return float(self._tx(r.training_days[index])), float(self._tx(r.cost_usd[index]))

    def scatter_items(self) -> dict[str, pg.ScatterPlotItem | PointCloudItem]:
        """The scatter items by role (``feasible``, ``infeasible``, ``front``, marks...); the
        two large layers are :class:`~vtrain_gui.point_cloud.PointCloudItem` (same ``data``
        fields ``x``, ``y``, ``data``, ``points()`` and ``sigClicked``)."""
        return {"feasible": self._feasible, "infeasible": self._infeasible,
                "front": self._front_points, "current": self._current_item,
                "selected": self._selected_item, **self._mark_items,
                **{f"front_{k}": v for k, v in self._front_flags.items()}}

    def front_flags(self) -> dict[str, np.ndarray]:
        """The front's plans (indices, int64) flagged ``tight`` (memory verdict "tight",
        :func:`core.sim.report.memory_verdict`) and ``uncalibrated`` (outside the store's
        calibration runs: :attr:`core.studies.sweep.SweepResult.within_calibration` False)."""
        r, idx = self._result, self._front_idx
        out = {k: np.empty(0, np.int64) for k in self._front_flags}
        if r is None or not idx.size:
            return out
        verdict = getattr(r, "memory_verdict", None)  # results read from older files lack them
        within = getattr(r, "within_calibration", None)
        if verdict is not None:
            out["tight"] = idx[np.asarray(verdict)[idx] == "tight"]
        if within is not None:
            out["uncalibrated"] = idx[~np.asarray(within, bool)[idx]]
        return out

    def front_line_xy(self) -> tuple[np.ndarray, np.ndarray]:
        """Vertices of the front line (plot coordinates)."""
        x, y = self._front_line.getData()
        return (np.asarray(x if x is not None else []), np.asarray(y if y is not None else []))

    # ------------------------------------------------------------------ internals
    def _tx(self, values: Any) -> Any:
        if not self._log:
            return values
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.log10(values)

    def _xy(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        r = self._result
        x = self._tx(r.training_days[idx])
        y = self._tx(r.cost_usd[idx])
        ok = np.isfinite(x) & np.isfinite(y)
        return x[ok], y[ok], idx[ok]

    def _set_points(self, item: pg.ScatterPlotItem | PointCloudItem, idx: np.ndarray) -> None:
        if self._result is None or idx.size == 0:
            item.setData(x=[], y=[], data=[])
            return
        x, y, idx = self._xy(np.asarray(idx, np.int64))
        item.setData(x=x, y=y, data=idx)

    def _set_one(self, item: pg.ScatterPlotItem, index: int | None) -> None:
        shown = (index is not None and self._result is not None
                 and 0 <= index < self._result.num_plans
                 and bool(np.isin(index, self._shown)))
        self._set_points(item, np.array([index] if shown else [], np.int64))

    def _set_end_ticks(self, idx: np.ndarray) -> None:
        """Label the least and the most days and cost of plans ``idx`` on the axes."""
        r = self._result
        item = self.getPlotItem()
        for name, values in (("bottom", r.training_days if r is not None else None),
                             ("left", r.cost_usd if r is not None else None)):
            v = np.asarray(values[idx], float) if values is not None and idx.size else np.empty(0)
            v = v[np.isfinite(v) & (v > 0)]
            item.getAxis(name).set_end_values((v.min(), v.max()) if v.size else ())

    def _redraw(self, auto_range: bool = False) -> None:
        r = self._result
        if r is None:
            for it in self.scatter_items().values():
                it.setData(x=[], y=[], data=[])
            self._front_line.setData(x=[], y=[])
            self._deadline_line.setVisible(False)
            self._set_end_ticks(np.empty(0, np.int64))
            self._fill_legend(with_deadline=False, with_unfit=False)
            return
        fits = r.feasible[self._shown]  # with figures: a point to draw
        self._set_points(self._infeasible, self._shown[~fits])
        self._set_points(self._feasible, self._shown[fits])
        self._set_end_ticks(self._shown[fits])
        flagged = self.front_flags()
        for name, it in self._front_flags.items():
            self._set_points(it, flagged[name])
        self._fill_legend(with_deadline=self._deadline is not None,
                          with_unfit=bool(len(self._infeasible.data)),
                          flags=tuple(k for k in self._front_flags if flagged[k].size))
        self._set_points(self._front_points, self._front_idx)
        fx, fy, _ = self._xy(self._front_idx)
        self._front_line.setData(x=fx, y=fy)
        for name, it in self._mark_items.items():
            i = self._marks.get(name)
            self._set_points(it, np.array([] if i is None else [i], np.int64))
        self._set_one(self._selected_item, self._selected)
        self._set_one(self._current_item, self._current)
        d = self._deadline
        if d is not None and d > 0:
            self._deadline_line.setValue(float(self._tx(d)))
            self._deadline_line.setVisible(True)
            self._deadline_line.label.setFormat(f"deadline {format_number_short(d)} days")
        else:
            self._deadline_line.setVisible(False)
        if auto_range:
            self._auto_range()

    def _auto_range(self) -> None:
        r = self._result
        idx = self._shown if self._shown.size else np.arange(r.num_plans if r is not None else 0)
        if r is None or not idx.size:
            return
        x, y, _ = self._xy(idx)
        if not x.size:
            return
        vb = self.getPlotItem().getViewBox()
        vb.setRange(xRange=(float(x.min()), float(x.max())), yRange=(float(y.min()), float(y.max())),
                    padding=0.06)

    def _tip(self, x: float, y: float, data: Any) -> str:
        r = self._result
        if r is None or data is None:
            return ""
        i = int(data)
        lines = [plan_text(r, i),
                 f"{format_gpus(r.num_gpus[i])} · {format_day_count(r.training_days[i])} days"
                 f" · {format_usd(r.cost_usd[i])}",
                 f"iteration {format_duration(r.iteration_time_s[i])} · MFU {format_fraction(r.mfu[i])}"
                 f" · {format_bytes(r.max_memory_per_gpu_bytes[i])} per GPU"]
        if r.reason[i]:
            lines.append(r.reason[i])
        return "\n".join(lines)

    @Slot()
    def _on_sample_visible(self) -> None:
        sample = self.sender()
        layer = self._layer_samples.get(sample)
        if layer is not None:
            layer.setVisible(sample.isVisible())

    @Slot(object, object, object)
    def _on_points_click(self, item: Any, points: Any, event: Any) -> None:
        if points is None or len(points) == 0:
            return
        data = points[0].data()
        if data is None:
            return
        double = bool(event is not None and hasattr(event, "double") and event.double())
        self.point_clicked.emit(int(data), double)
