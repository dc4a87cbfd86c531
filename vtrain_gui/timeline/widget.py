"""The timeline view: legend, hover read-out, zoom and pan around one :class:`GanttItem`.

:class:`TimelineWidget` shows one simulated iteration, one row per pipeline stage and lane
(stage 0 on top), and optionally a measured iteration's lanes under it on the same time axis
(:class:`vtrain_gui.timeline.measured.MeasuredItem`); :func:`task_description` is the one-line
text of a task that hover shows.
"""

from __future__ import annotations

import html
import math

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtGui, QtWidgets
from PySide6.QtCore import Qt, Signal, Slot

from core.sim.graph_types import KINDS, STREAMS, ExecutionGraph, Schedule
from core.sim.labels import KIND_MEANINGS, KIND_NAMES, TIME_TERMS

from ..formatting import KIND_COLORS, format_duration
from ..wrapped_label import CappedTextBox, WrappedLabel
from . import items
from .colors import LANE_COLORS, blend, kind_color
from .lanes import Lane, lane_name, lane_rows
from .layout import BAR_HEIGHT, BAR_TOP, SHADES, STRIPS
from .measured import MeasuredItem, class_color, matched_span, phase_of

__all__ = ["TimelineWidget", "task_description"]

#: Hover tolerance in device pixels when the mouse is not exactly over a bar.
_HOVER_TOLERANCE_PX = 3.0


def task_description(graph: ExecutionGraph, schedule: Schedule, index: int,
                     lane: str | None = None) -> str:
    """One line describing task ``index``: kind, stage, stream, micro-batch, layer, start, duration.

    ``lane``: the lane it is drawn on, named in place of its stream (``"comm (2)"``: a task
    run at the same time as another of its stream, :func:`.lanes.lane_rows`)."""
    kind = KINDS[int(graph.kind[index])]
    parts = [KIND_NAMES.get(kind, kind),
             f"stage {int(graph.stage[index])} {lane or STREAMS[int(graph.stream[index])]}"]
    mb = int(graph.microbatch[index])
    parts.append(f"micro-batch {mb}" if mb >= 0 else "micro-batch –")
    if graph.num_chunks > 1 and graph.chunk[index] >= 0:
        # several chunks per stage (interleaved, ZB-V): the chunk and the virtual stage it runs
        c = int(graph.chunk[index])
        parts.append(f"chunk {c} (virtual stage {graph.virtual_stage(index)})")
    layer = int(graph.layer[index])
    parts.append(f"layer {layer}" if layer >= 0 else "layer –")
    parts.append(f"start {format_duration(float(schedule.start_s[index]))}")
    parts.append(f"duration {format_duration(float(graph.duration_s[index]))}")
    return " · ".join(parts)


def _unbreakable(text: str) -> str:
    """``text`` as HTML that never breaks across lines: no-break spaces and hyphens, and a word
    joiner after each slash (at 1,280 px the legend broke "PP send/recv" after the slash)."""
    return html.escape(text).replace(" ", "&nbsp;").replace("-", "&#8209;").replace("/", "/&#8288;")


#: Pixels an end label of the time axis may reach past the axis (pyqtgraph's
#: ``hideOverlappingLabels``); the widget keeps that much room right of the axis.
END_LABEL_OVERHANG = 12


class TimelineWidget(QtWidgets.QWidget):
    """Gantt chart of one iteration: rows ``stage s compute`` / ``stage s comm``, stage 0 on top.

    Colour encodes the task kind (legend above the plot); empty lane
    background between bars is idle time (pipeline bubbles). The mouse wheel
    and dragging zoom and pan the time axis; hovering a bar shows the task in
    a tooltip and in the label above the plot and emits :attr:`task_hovered`.
    """

    #: Index of the task under the mouse, or -1 when none.
    task_hovered = Signal(int)
    #: The lane labels' own width changed (pixels, :attr:`label_width`).
    label_width_changed = Signal(int)

    def __init__(self, parent: QtWidgets.QWidget | None = None,
                 legend_lines: int | None = None, hover_line: bool = True) -> None:
        """``legend_lines``: show at most this many lines of the legend, the rest scrolls
        (None: every line); ``hover_line``: the line under the legend that reads out the bar
        under the mouse (its tooltip says the same). The Explore tab's preview, under the
        plot, has room for neither."""
        super().__init__(parent)
        self._graph: ExecutionGraph | None = None
        self._schedule: Schedule | None = None
        self._row_bounds = np.zeros(1, dtype=np.int64)
        self._row_start = np.empty(0)
        self._row_end = np.empty(0)
        self._row_index = np.empty(0, dtype=np.int64)
        #: each task's row (:func:`.lanes.lane_rows`) and the lanes of a stage, top to bottom
        self._rows = np.empty(0, dtype=np.int32)
        self._stage_lanes: tuple[Lane, ...] = ((0, 0), (1, 0))
        self.hovered_task = -1

        # as tall as its lines: wrapped to two in a narrow preview, it was cut under the hover line
        if legend_lines is None:
            self._legend = legend_view = WrappedLabel()
        else:  # at most legend_lines of them, the rest scrolls
            legend_view = CappedTextBox(legend_lines)
            self._legend = legend_view.label
        self.legend_view = legend_view
        self._legend.setTextFormat(Qt.TextFormat.RichText)
        self._info = QtWidgets.QLabel("Hover a bar for details")
        self._info.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self._info.setMinimumWidth(120)
        self._info.setSizePolicy(QtWidgets.QSizePolicy.Policy.Ignored,
                                 QtWidgets.QSizePolicy.Policy.Preferred)
        self._legend.setWordWrap(True)
        self._info.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
        self._info.setStyleSheet("color: #303030;")
        strip = QtWidgets.QVBoxLayout()
        strip.setContentsMargins(6, 2, 6, 0)
        strip.setSpacing(0)
        strip.addWidget(legend_view)
        strip.addWidget(self._info)
        self._info.setVisible(hover_line)

        self.plot = pg.PlotWidget(background="w")
        item = self.plot.getPlotItem()
        item.setMenuEnabled(False)
        self.view_box = item.getViewBox()
        self.view_box.invertY(True)
        self.view_box.setMouseEnabled(x=True, y=False)
        for name in ("left", "bottom"):
            axis = item.getAxis(name)
            axis.setPen(pg.mkPen("#404040"))
            axis.setTextPen(pg.mkPen("#202020"))
        item.setLabel("bottom", "time since iteration start", units="s")
        item.getAxis("bottom").enableAutoSIPrefix(True)
        # the "0" at the axis's left end may reach past it by half its width: pyqtgraph drops
        # a label that leaves the axis, and the Plan tab's timeline started at "5"
        item.getAxis("bottom").setStyle(hideOverlappingLabels=END_LABEL_OVERHANG)
        # ... and the label at the right end as far past it: room for it in the widget (the
        # axis ended at the widget's edge, and the MT-NLG example's "35" was cut in half)
        left, top, right, bottom = item.layout.getContentsMargins()
        item.layout.setContentsMargins(left, top, max(right, END_LABEL_OVERHANG), bottom)
        self.gantt = items.GanttItem()
        self.gantt.grid_ticks = self._grid_ticks
        self.gantt.layout_ready.connect(self._on_layout_ready)
        item.addItem(self.gantt)
        self.measured = MeasuredItem()
        item.addItem(self.measured)
        self.hovered_measured = -1
        self._sim_rows = 0
        self.plot.scene().sigMouseMoved.connect(self._on_scene_mouse_moved)
        self._num_rows = 0
        self._label_width = 0  # the lane labels' own width (px)
        self._label_width_floor = 0  # at least this wide (another timeline's, to align)
        self.view_box.sigResized.connect(self._on_view_box_resize)

        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addLayout(strip)
        layout.addWidget(self.plot, 1)
        self.clear()

    # ------------------------------------------------------------------ data
    def set_data(self, graph: ExecutionGraph, schedule: Schedule) -> None:
        """Show the tasks of ``graph`` at the times of ``schedule`` (arrays of shape (n,))."""
        self._graph, self._schedule = graph, schedule
        # a stream's tasks that run at once (a DP collective beside a TP collective on the comm
        # stream) go on a further lane of it, "comm (2)": on one lane one bar hid the other
        self._rows, self._stage_lanes = lane_rows(graph, schedule)
        n_lanes = len(self._stage_lanes)
        self.gantt.streams_per_stage = n_lanes
        num_rows = int(graph.num_stages) * n_lanes
        if graph.num_tasks:  # the largest row (stage * lanes + lane) it could hold
            num_rows = max(num_rows, (int(graph.stage.max()) + 1) * n_lanes)
        self._clear_lookup()  # hover finds tasks once the layout is there (_on_layout_ready)
        # durations are computed with the layout (off the GUI thread when large)
        self.gantt.set_tasks(schedule.start_s, None, graph.kind, self._rows, num_rows,
                             end_s=schedule.end_s)
        if self.gantt.layout is None:
            self._info.setText(f"{graph.num_tasks:,} tasks: the whole iteration at a glance; "
                               "preparing zoom and hover…"
                               if graph.num_tasks >= items.SUMMARY_MIN_TASKS else
                               f"Preparing the timeline of {graph.num_tasks:,} tasks…")

        self._sim_rows = num_rows
        self._kinds_shown = np.flatnonzero(np.bincount(graph.kind, minlength=len(KINDS))).tolist()
        self._apply_rows()
        self.reset_view()
        self._set_hover(-1, None)

    def set_measured(self, lanes) -> None:
        """Show a measured iteration (:class:`core.accuracy.trace_compare.MeasuredLanes`) on
        lanes under the simulated rows, one empty row between; None removes it."""
        self.measured.set_lanes(lanes, self._sim_rows + 1)
        self._apply_rows()
        self.reset_view()

    def _apply_rows(self) -> None:
        """Row labels, legend and view limits for the simulated rows and the measured lanes."""
        if self.measured.lanes is not None:
            self.measured.set_lanes(self.measured.lanes, self._sim_rows + 1)
        total = self._sim_rows + (self.measured.num_rows + 1 if self.measured.num_rows else 0)
        self._set_row_ticks(total)
        self._set_legend(getattr(self, "_kinds_shown", []))
        t_end = max(self.gantt.end_s, self.measured.end_s) or 1e-9
        self.view_box.setLimits(xMin=-0.02 * t_end, xMax=1.02 * t_end, yMin=0, yMax=max(total, 1),
                                minXRange=t_end * 1e-6, maxXRange=1.04 * t_end)

    def _clear_lookup(self) -> None:
        self._row_bounds = np.zeros(1, dtype=np.int64)
        self._row_start = self._row_end = np.empty(0)
        self._row_index = np.empty(0, dtype=np.int64)

    @Slot()
    def _on_layout_ready(self) -> None:
        """The gantt item has sorted the tasks: use its (row, start) order for hover lookups."""
        layout = self.gantt.layout
        if layout is None or self._graph is None or layout.num_tasks != self._graph.num_tasks:
            return
        self._row_index = layout.order
        self._row_start = layout.rs_start
        self._row_end = layout.rs_end
        self._row_bounds = layout.row_bounds
        if self.hovered_task < 0:
            self._info.setText("Hover a bar for details")

    def wait_ready(self, timeout_s: float = 30.0) -> bool:
        """Process events until the timeline is fully prepared (see :meth:`GanttItem.wait_ready`)."""
        return self.gantt.wait_ready(timeout_s)

    def wait_view_ready(self, timeout_s: float = 30.0) -> bool:
        """Process events until what the view shows is prepared (pictures:
        :meth:`GanttItem.wait_view_ready`); the other zoom bands follow in the background."""
        return self.gantt.wait_view_ready(timeout_s)

    @property
    def legend(self) -> QtWidgets.QLabel:
        """The legend over the plot (rich text: the kinds' colours and names)."""
        return self._legend

    @property
    def is_ready(self) -> bool:
        """Whether the data is laid out and every zoom band prepared."""
        return self.gantt.is_ready

    def shutdown(self) -> None:
        """Stop the worker thread that may still prepare the layout (the view is going away)."""
        self.gantt.shutdown()

    def closeEvent(self, event: QtGui.QCloseEvent) -> None:  # noqa: N802 - Qt API
        """A timeline shown as a window of its own stops its worker when closed."""
        self.shutdown()
        super().closeEvent(event)

    def clear(self) -> None:
        """Remove all bars."""
        self._graph = self._schedule = None
        self._sim_rows = 0
        self.measured.set_lanes(None, 0)
        self.gantt.set_tasks(np.empty(0), np.empty(0), np.empty(0, np.int8), np.empty(0), 0)
        self._clear_lookup()
        self._set_row_ticks(0)
        self.legend_view.setText("<i>No simulation result</i>")
        self._set_hover(-1, None)
        # an empty axis reads in seconds (0..1), not in the picoseconds of a zero-length range
        self.view_box.setLimits(xMin=None, xMax=None, yMin=None, yMax=None,
                                minXRange=None, maxXRange=None)
        self.view_box.setRange(xRange=(0.0, 1.0), yRange=(0, 1), padding=0.0)

    def reset_view(self) -> None:
        """Show the whole iteration and all rows."""
        rows = max(self.gantt.num_rows + (self.measured.num_rows + 1 if self.measured.num_rows
                                          else 0), 1)
        t_end = max(self.gantt.end_s, self.measured.end_s, 1e-9)
        self.view_box.setRange(xRange=(-0.005 * t_end, 1.01 * t_end), yRange=(0, rows),
                               padding=0.0)

    @property
    def task_rows(self) -> np.ndarray:
        """The row each task is drawn on (int32 (n,)): ``stage * len(lanes) + lane``, a task
        run at the same time as another of its stream on a further lane of it
        (:func:`.lanes.lane_rows`); ``graph.row`` when there is none."""
        return self._rows

    @property
    def num_tasks(self) -> int:
        """Number of tasks shown (while they are being laid out too)."""
        return 0 if self._graph is None else int(self._graph.num_tasks)

    # ------------------------------------------------------------------ lookup
    def task_at(self, x_s: float, y_row: float, tolerance_s: float = 0.0) -> int:
        """Index of the task drawn at time ``x_s`` in row coordinate ``y_row``, or -1.

        ``y_row`` is a row coordinate (row ``r`` spans ``[r, r+1)``). A bar within
        ``tolerance_s`` of ``x_s`` counts when no bar covers ``x_s`` exactly.
        """
        if self._graph is None or not math.isfinite(y_row) or not math.isfinite(x_s):
            return -1
        r = int(math.floor(y_row))
        if r < 0 or r + 1 >= self._row_bounds.size:
            return -1
        if not (BAR_TOP - 0.05 <= y_row - r <= BAR_TOP + BAR_HEIGHT + 0.05):
            return -1
        lo, hi = int(self._row_bounds[r]), int(self._row_bounds[r + 1])
        if lo == hi:
            return -1
        starts, ends = self._row_start[lo:hi], self._row_end[lo:hi]
        i = int(np.searchsorted(starts, x_s, side="right"))  # starts[:i] <= x_s
        # bars on a stream rarely overlap; look back a few in case they do
        j = max(0, i - 64)
        covering = np.flatnonzero(ends[j:i] > x_s)
        if covering.size:
            return int(self._row_index[lo + j + covering[-1]])
        if tolerance_s <= 0:
            return -1
        cand = [k for k in (i - 1, i) if 0 <= k < hi - lo]
        dist = [max(starts[k] - x_s, x_s - ends[k]) for k in cand]
        best = int(np.argmin(dist))
        if dist[best] <= tolerance_s:
            return int(self._row_index[lo + cand[best]])
        return -1

    def task_text(self, index: int) -> str:
        """Description of task ``index`` (see :func:`task_description`), naming the lane it
        is drawn on (its row's label)."""
        assert self._graph is not None and self._schedule is not None
        lanes = self._stage_lanes
        return task_description(self._graph, self._schedule, index,
                                lane_name(lanes[int(self._rows[index]) % len(lanes)]))

    # ------------------------------------------------------------------ handlers
    @Slot(object)
    def _on_scene_mouse_moved(self, scene_pos: QtCore.QPointF) -> None:
        if self._graph is None or not self.view_box.sceneBoundingRect().contains(scene_pos):
            self._set_hover(-1, None)
            return
        p = self.view_box.mapSceneToView(scene_pos)
        tol = _HOVER_TOLERANCE_PX * self.gantt.pixelWidth()
        if self.measured.num_rows and p.y() >= self.measured.first_row:
            self._set_hover(-1, None)
            self._set_measured_hover(self.measured.event_at(p.x(), p.y(), tol), scene_pos)
            return
        self._set_measured_hover(-1, None)
        self._set_hover(self.task_at(p.x(), p.y(), tolerance_s=tol), scene_pos)

    def measured_text(self, i: int) -> str:
        """Measured event ``i`` in one line, with the simulated work its range matches (same
        stage, phase and micro-batch) where the range names them."""
        text = self.measured.describe(i)
        L = self.measured.lanes
        match = phase_of(L.ranges[i])
        if match is not None and self._graph is not None and self._schedule is not None:
            stage = int(L.lane_stage[int(L.lane[i])])
            span = matched_span(self._graph, self._schedule, stage, *match)
            if span is not None:
                text += (f" · simulated stage {stage} {match[0]} micro-batch {match[1]}: "
                         f"{format_duration(span[0])} to {format_duration(span[1])}")
        return text

    def _set_measured_hover(self, i: int, scene_pos: QtCore.QPointF | None) -> None:
        """Hover on the measured lanes: the event's text; its bar and the simulated work its
        range matches outlined."""
        if i == self.hovered_measured:
            return
        self.hovered_measured = i
        if i < 0:
            self.measured.set_highlight(None)
            self.gantt.set_highlight(None)
            self._info.setText("Hover a bar for details")
            QtWidgets.QToolTip.hideText()
            return
        L = self.measured.lanes
        row = self.measured.first_row + int(L.lane[i])
        self.measured.set_highlight(QtCore.QRectF(float(L.start_s[i]), row + BAR_TOP,
                                                  float(L.duration_s[i]), BAR_HEIGHT))
        match = phase_of(L.ranges[i])
        span = None
        if match is not None and self._graph is not None and self._schedule is not None:
            stage = int(L.lane_stage[int(L.lane[i])])
            span = matched_span(self._graph, self._schedule, stage, *match)
        if span is not None:  # the stage's compute row (its first lane)
            y = int(L.lane_stage[int(L.lane[i])]) * len(self._stage_lanes) + BAR_TOP
            self.gantt.set_highlight((span[0], y, span[1] - span[0], BAR_HEIGHT))
        else:
            self.gantt.set_highlight(None)
        text = self.measured_text(i)
        self._info.setText(text)
        if scene_pos is not None:
            view_pos = self.plot.mapFromScene(scene_pos)
            QtWidgets.QToolTip.showText(self.plot.viewport().mapToGlobal(view_pos),
                                        text.replace(" · ", "\n"), self.plot)

    def _set_hover(self, index: int, scene_pos: QtCore.QPointF | None) -> None:
        changed = index != self.hovered_task
        self.hovered_task = index
        if index < 0:
            self.gantt.set_highlight(None)
            if changed:
                self._info.setText("Hover a bar for details")
                QtWidgets.QToolTip.hideText()
        else:
            assert self._graph is not None and self._schedule is not None
            text = self.task_text(index)
            start = float(self._schedule.start_s[index])
            dur = float(self._schedule.end_s[index]) - start
            self.gantt.set_highlight((start, float(self._rows[index]) + BAR_TOP, dur,
                                      BAR_HEIGHT))
            if changed:
                self._info.setText(text)
                if scene_pos is not None:
                    view_pos = self.plot.mapFromScene(scene_pos)
                    QtWidgets.QToolTip.showText(
                        self.plot.viewport().mapToGlobal(view_pos), text.replace(" · ", "\n"),
                        self.plot)
        if changed:
            self.task_hovered.emit(index)

    # ------------------------------------------------------------------ decoration
    def _grid_ticks(self, x0: float, x1: float) -> list[float]:
        """Major tick positions of the time axis in ``[x0, x1]`` (seconds)."""
        axis = self.plot.getPlotItem().getAxis("bottom")
        scale = axis.scale or 1.0  # the axis ticks in SI-prefixed units (e.g. ms)
        levels = axis.tickValues(x0 / scale, x1 / scale, max(axis.width(), 1.0))
        return [v * scale for v in levels[0][1]] if levels else []

    def _set_row_ticks(self, num_rows: int) -> None:
        """Label rows; when rows are thinner than a line of text, label every k-th stage."""
        self._num_rows = num_rows
        axis = self.plot.getPlotItem().getAxis("left")
        metrics = QtGui.QFontMetrics(axis.style.get("tickFont") or self.font())
        row_px = self.view_box.height() / max(num_rows, 1)
        if row_px <= 0 and num_rows:
            return  # not laid out yet (a hidden tab): labelled on the first resize
        lanes = self._stage_lanes
        n_streams = len(lanes)
        sim_rows = min(self._sim_rows, num_rows)
        if row_px >= metrics.height() or num_rows == 0:
            ticks = [(r + 0.5, f"stage {r // n_streams} {lane_name(lanes[r % n_streams])}")
                     for r in range(sim_rows)]
        else:
            step = max(1, math.ceil(1.2 * metrics.height() / (row_px * n_streams)))
            ticks = [(s * n_streams + n_streams / 2, f"stage {s}")
                     for s in range(0, sim_rows // n_streams, step)]
        if self.measured.num_rows:  # measured lanes: "measured stage s rank r"
            L = self.measured.lanes
            step = 1 if row_px >= metrics.height() else max(1, math.ceil(1.2 * metrics.height()
                                                                           / max(row_px, 1e-9)))
            ticks += [(self.measured.first_row + r + 0.5,
                       f"measured s{int(L.lane_stage[r])} r{int(L.lane_rank[r])}")
                      for r in range(0, self.measured.num_rows, step)]
        ticks = _inside_view(ticks, num_rows, row_px, metrics.height())
        if ticks == getattr(self, "_ticks", None):
            return
        self._ticks = ticks
        axis.setTicks([ticks, []])
        # fixed width from the longest label: the automatic text-space expansion lags one paint
        longest = max((metrics.horizontalAdvance(t) for _, t in ticks), default=40)
        natural = longest + 16
        axis.setWidth(max(natural, self._label_width_floor))
        if natural != self._label_width:
            self._label_width = natural
            self.label_width_changed.emit(natural)

    @property
    def label_width(self) -> int:
        """The lane labels' own width in pixels (0 before the first labels)."""
        return self._label_width

    def set_label_width_floor(self, pixels: int) -> None:
        """Keep the lane labels at least ``pixels`` wide: timelines stacked on one time axis
        (the Compare tab) give theirs the widest one's, so their plots start at the same x
        (a linked view aligns by screen position)."""
        self._label_width_floor = int(pixels)
        self.plot.getPlotItem().getAxis("left").setWidth(max(self._label_width, pixels))

    @Slot()
    def _on_view_box_resize(self) -> None:
        self._set_row_ticks(self._num_rows)

    def _set_legend(self, kinds: list[int]) -> None:
        items = []
        for k in kinds:
            name = KINDS[k]
            label = _unbreakable(KIND_NAMES.get(name, name))
            items.append(f'<span style="color:{kind_color(k).name()}; font-size:14pt;">&#9632;</span>'
                         f"&nbsp;{label}")
        # the lanes' own backgrounds: a compute lane's idle time, a communication lane's
        items.append(f'<span style="color:{LANE_COLORS[0].name()}; font-size:14pt;">&#9632;</span>'
                     "&nbsp;" + _unbreakable("idle (" + ", ".join(
                         TIME_TERMS[t] for t in ("bubble", "imbalance", "overlap_wait")) + ")"))
        items.append(f'<span style="color:{LANE_COLORS[1].name()}; font-size:14pt;">&#9632;</span>'
                     "&nbsp;" + _unbreakable("no communication"))
        # bars narrower than a pixel are merged; their opacity is the lane's busy share there
        base, lane = QtGui.QColor(KIND_COLORS["tp_comm"]), LANE_COLORS[1]
        swatches = "".join(
            f'<span style="color:{blend(base, lane, step / SHADES)}; font-size:14pt;">&#9632;</span>'
            for step in (1, 3, SHADES))
        items.append(f"{swatches}&nbsp;paler&nbsp;=&nbsp;busy&nbsp;part&nbsp;of&nbsp;the&nbsp;time")
        if self.measured.num_rows:  # the measured lanes' classes
            classes = self.measured.lanes.classes
            shown = sorted(set(self.measured.lanes.cls.tolist()))
            items.append("measured:&nbsp;" + "&nbsp; ".join(
                f'<span style="color:{class_color(classes[c]).name()}; font-size:14pt;">&#9632;'
                f'</span>&nbsp;{classes[c].replace("_", "&nbsp;")}' for c in shown))
        lanes = self._stage_lanes
        if len(lanes) > 1:  # the rows of one stage, top to bottom (unlabelled when zoomed out)
            items.append("lanes&nbsp;per&nbsp;stage:&nbsp;" + "&nbsp;/&nbsp;".join(
                _unbreakable(lane_name(lane)) for lane in lanes))
        self.legend_view.setText("&nbsp;&nbsp; ".join(items))
        # what each colour is (core's one table of names and meanings), then the opacity rule
        meanings = "\n".join(f"{KIND_NAMES.get(KINDS[k], KINDS[k])}: {KIND_MEANINGS[KINDS[k]]}"
                             for k in kinds if KINDS[k] in KIND_MEANINGS)
        self._legend.setToolTip(
            (meanings + "\n\n" if meanings else "")
            + "Where bars are narrower than a pixel or two, each such stretch of the lane shows "
            "the share of its time the lane is busy as the opacity (in steps of 1/5): a pale "
            "stretch of a communication lane is many short collectives with gaps between them, "
            "not one long one. A stretch holding several kinds is split into "
            f"{STRIPS} strips stacked by their shares of its time: a kind with at least "
            f"1/{STRIPS} of it always has a strip.")


def _inside_view(ticks: list[tuple[float, str]], num_rows: int, row_px: float,
                 text_px: float) -> list[tuple[float, str]]:
    """The lane labels ``ticks`` (row coordinate of the label's centre, text) moved so each
    label, ``text_px`` tall and centred on its tick, lies inside the view of ``num_rows`` rows
    of ``row_px`` pixels; a label that would then overlap the one kept before it is dropped.

    A label centred on a lane or a stage sits at least half a row from the view's ends, which
    is less than half a line of text when rows are thinner than the text (a short timeline:
    the Explore tab's preview of MT-NLG's 35 stages, whose "stage 0" at 0.75 px from the top
    was cut in half by the widget's edge; pyqtgraph lets a left axis's labels pass its ends).
    A label moved by at most half a line still covers the start (end) of its stage."""
    if not ticks or num_rows <= 0 or row_px <= 0:
        return ticks
    half = text_px / 2 / row_px  # half a line of text in rows
    lo, hi = (half, num_rows - half) if num_rows >= 2 * half else (num_rows / 2,) * 2
    kept: list[tuple[float, str]] = []
    for y, text in ticks:
        y = min(max(y, lo), hi)
        if not kept or (y - kept[-1][0]) * row_px >= text_px:
            kept.append((y, text))
    return kept
