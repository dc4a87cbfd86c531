"""Gantt view of one simulated iteration: one row per pipeline stage and stream.

Drawing is batched: a single :class:`GanttItem` holds the tasks as numpy
columns and paints each task kind with one ``QPainter.drawRects`` call made
directly from a float64 ``(n, 4)`` array (no per-bar Python objects). The
per-kind rectangle arrays are built once per :meth:`TimelineWidget.set_data`;
a paint only slices them to the visible time range (``np.searchsorted`` on
sorted starts). When many bars are narrower than a device pixel, those bars
are merged per (row, pixel column) and coloured by the kind that covers most
of that pixel (level of detail), so a paint draws at most a few thousand
rectangles however many tasks the iteration holds. A merged pixel is shaded
by the part of its time the row is busy (one of five opacity steps), so a
stream that is busy 10 % of the time in thousands of short bars reads as a
pale band, not as solid colour.
"""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtGui, QtWidgets
from PySide6.QtCore import Qt, Signal, Slot

from core.graph_types import KINDS, STREAMS, ExecutionGraph, Schedule

from .formatting import KIND_COLORS, KIND_LABELS, format_duration

try:  # zero-copy path: QPainter.drawRects(const QRectF *, int) from numpy memory
    import shiboken6

    _HAVE_PTR = True
except ImportError:  # pragma: no cover - PySide6 always ships shiboken6
    _HAVE_PTR = False

__all__ = ["GanttItem", "TimelineWidget", "task_description"]

#: Bars occupy this part of their row (in row units, y grows downwards).
_BAR_TOP, _BAR_HEIGHT = 0.12, 0.76
#: Above this many sub-pixel bars in view, merge them per pixel column.
_LOD_MIN_SMALL_BARS = 2000
#: Merge per zoom level over the whole iteration while it spans at most this many pixels.
_LEVEL_MAX_COLUMNS = 12_000
#: Opacity steps of merged sub-pixel bars: a pixel busy a fraction f of its time gets
#: opacity ceil(f * _SHADES) / _SHADES.
_SHADES = 5
#: Hover tolerance in device pixels when the mouse is not exactly over a bar.
_HOVER_TOLERANCE_PX = 3.0
_LANE_COLORS = (QtGui.QColor("#EEF1F6"), QtGui.QColor("#F7F7F7"))  # compute, comm lanes


def _draw_rects(painter: QtGui.QPainter, rects: np.ndarray) -> None:
    """Draw all rows ``(x, y, w, h)`` of a C-contiguous float64 array with one call."""
    n = int(rects.shape[0])
    if n == 0:
        return
    if _HAVE_PTR:
        rects = np.ascontiguousarray(rects, dtype=np.float64)
        ptr = shiboken6.wrapInstance(rects.ctypes.data, QtCore.QRectF)
        painter.drawRects(ptr, n)  # `rects` stays alive until this returns
    else:  # pragma: no cover
        painter.drawRects([QtCore.QRectF(*r) for r in rects.tolist()])


def _blend(color: QtGui.QColor, background: QtGui.QColor, alpha: float) -> str:
    """``color`` drawn at opacity ``alpha`` over ``background``, as ``#RRGGBB`` (legend swatches)."""
    mix = [round(c * alpha + b * (1.0 - alpha)) for c, b in
           zip(color.getRgb()[:3], background.getRgb()[:3])]
    return "#{:02X}{:02X}{:02X}".format(*mix)


def _shade_step(busy: np.ndarray) -> np.ndarray:
    """Opacity step ``1.._SHADES`` of pixels busy a fraction ``busy`` of their time; shape kept."""
    return np.clip(np.ceil(np.asarray(busy) * _SHADES), 1, _SHADES).astype(np.int64)


def _draw_lines(painter: QtGui.QPainter, lines: np.ndarray) -> None:
    """Draw all rows ``(x1, y1, x2, y2)`` of a float64 array with one call."""
    n = int(lines.shape[0])
    if n == 0:
        return
    if _HAVE_PTR:
        lines = np.ascontiguousarray(lines, dtype=np.float64)
        painter.drawLines(shiboken6.wrapInstance(lines.ctypes.data, QtCore.QLineF), n)
    else:  # pragma: no cover
        painter.drawLines([QtCore.QLineF(*r) for r in lines.tolist()])


class _KindColumn:
    """The tasks of one kind, sorted by start, as drawable rectangle rows."""

    __slots__ = ("kind", "start", "rects", "max_duration")

    def __init__(self, kind: int, start: np.ndarray, duration: np.ndarray, row: np.ndarray):
        order = np.argsort(start, kind="stable")
        self.kind = kind
        self.start = np.ascontiguousarray(start[order])
        rects = np.empty((order.size, 4), dtype=np.float64)  # (n_k, 4): x, y, w, h
        rects[:, 0] = self.start
        rects[:, 1] = row[order] + _BAR_TOP
        rects[:, 2] = duration[order]
        rects[:, 3] = _BAR_HEIGHT
        self.rects = rects
        self.max_duration = float(duration.max()) if duration.size else 0.0

    def visible(self, x0: float, x1: float) -> slice:
        """Slice of the tasks that may intersect ``[x0, x1]`` (conservative on the left)."""
        lo = int(np.searchsorted(self.start, x0 - self.max_duration, side="left"))
        hi = int(np.searchsorted(self.start, x1, side="right"))
        return slice(lo, hi)


class GanttItem(pg.GraphicsObject):
    """All bars of a timeline in one graphics item.

    Item coordinates: x in seconds from iteration start, y in rows (row ``r``
    spans ``[r, r+1)``). Bounds come from the numpy extents of the data.
    """

    def __init__(self) -> None:
        super().__init__()
        self._columns: list[_KindColumn] = []
        self._num_rows = 0
        self._t_end = 0.0
        self._lanes = np.empty((0, 4))
        self._brushes = [QtGui.QBrush(QtGui.QColor(KIND_COLORS[k])) for k in KINDS]
        self._shaded: dict[tuple[int, float], QtGui.QBrush] = {}
        self._pens = [pg.mkPen(QtGui.QColor(KIND_COLORS[k]).darker(150), width=1, cosmetic=True)
                      for k in KINDS]
        self._lane_brushes = [QtGui.QBrush(c) for c in _LANE_COLORS]
        self._highlight_pen = pg.mkPen("#000000", width=2, cosmetic=True)
        self._grid_pen = pg.mkPen("#D0D4DA", width=1, cosmetic=True)
        #: callable ``(x0, x1) -> array of x`` giving vertical grid lines (the axis' major ticks)
        self.grid_ticks = None
        self._highlight: np.ndarray | None = None  # (1, 4) rect of the hovered task
        self._cache_key: tuple | None = None
        self._cache: list[tuple[int, np.ndarray, bool, float]] = []
        self._levels: dict[float, list] = {}
        self.last_paint_num_rects = 0  # for tests and benchmarks

    # ------------------------------------------------------------------ data
    def set_tasks(self, start_s: np.ndarray, duration_s: np.ndarray, kind: np.ndarray,
                  row: np.ndarray, num_rows: int) -> None:
        """Replace the bars. Arrays have shape (n,); ``row`` in ``0..num_rows-1``."""
        self.prepareGeometryChange()
        start_s = np.asarray(start_s, dtype=np.float64)
        duration_s = np.asarray(duration_s, dtype=np.float64)
        kind = np.asarray(kind)
        row = np.asarray(row, dtype=np.float64)
        self._columns = [
            _KindColumn(k, start_s[mask], duration_s[mask], row[mask])
            for k in range(len(KINDS))
            if (mask := kind == k).any()
        ]
        self._num_rows = int(num_rows)
        self._t_end = float((start_s + duration_s).max()) if start_s.size else 0.0
        lanes = np.empty((self._num_rows, 4))  # (rows, 4)
        lanes[:, 0] = 0.0
        lanes[:, 1] = np.arange(self._num_rows) + 0.04
        lanes[:, 2] = self._t_end
        lanes[:, 3] = 0.92
        self._lanes = lanes
        # all bars sorted by (row, start) for the level-of-detail merge
        order = np.lexsort((start_s, row))
        self._rs_start = start_s[order]
        self._rs_dur = duration_s[order]
        self._rs_row = row[order].astype(np.int64)
        self._rs_kind = kind[order].astype(np.int64)
        self._levels = {}
        self._highlight = None
        self._cache_key = None
        self.update()

    def set_highlight(self, rect: tuple[float, float, float, float] | None) -> None:
        """Outline one bar ``(x, y, w, h)`` (the hovered task), or none."""
        new = None if rect is None else np.array([rect], dtype=np.float64)
        if (new is None) != (self._highlight is None) or (
                new is not None and not np.array_equal(new, self._highlight)):
            self._highlight = new
            self.update()

    @property
    def num_rows(self) -> int:
        """Number of timeline rows."""
        return self._num_rows

    @property
    def end_s(self) -> float:
        """Latest task end in seconds."""
        return self._t_end

    def boundingRect(self) -> QtCore.QRectF:  # noqa: N802 - Qt API
        return QtCore.QRectF(0.0, 0.0, max(self._t_end, 1e-12), float(max(self._num_rows, 1)))

    # ------------------------------------------------------------------ drawing
    def draw_list(self, x0: float, x1: float,
                  px_s: float) -> list[tuple[int, np.ndarray, bool, float]]:
        """Rectangles to paint for the view ``[x0, x1]`` at ``px_s`` seconds per pixel.

        Returns ``(kind, rects (k, 4), exact, opacity)`` per kind and opacity;
        ``exact`` is false for level-of-detail rectangles that merge (or widen)
        sub-pixel bars, whose opacity in ``(0, 1]`` is the busy part of their
        pixels (rounded up to a step of ``1 / _SHADES``); exact bars have opacity 1.

        While the whole iteration spans at most ``_LEVEL_MAX_COLUMNS`` pixels, the
        merged rectangles are computed once per zoom level over the whole
        iteration on a pixel grid anchored at t=0, so panning only slices
        x-sorted arrays. Zoomed in further, only the visible bars are merged.
        """
        key = (x0, x1, px_s)
        if key == self._cache_key:
            return self._cache
        if self._t_end / px_s <= _LEVEL_MAX_COLUMNS:
            out = []
            for kind, starts, rects, max_w, exact, shade in self._level(px_s):
                lo = int(np.searchsorted(starts, x0 - max_w, side="left"))
                hi = int(np.searchsorted(starts, x1, side="right"))
                if hi > lo:
                    out.append((kind, rects[lo:hi], exact, shade))  # contiguous views, no copy
        else:
            out = self._visible_draw_list(x0, x1, px_s)
        self._cache_key, self._cache = key, out
        return out

    def _level(self, px_s: float) -> list[tuple[int, np.ndarray, np.ndarray, float, bool, float]]:
        """Whole-iteration rectangles at one zoom level:
        ``(kind, starts, rects, max_width, exact, opacity)``."""
        cached = self._levels.get(px_s)
        if cached is not None:
            return cached
        parts = []
        for col in self._columns:
            wide = np.ascontiguousarray(col.rects[col.rects[:, 2] >= px_s])  # sorted by start
            if wide.shape[0]:
                parts.append((col.kind, np.ascontiguousarray(wide[:, 0]), wide,
                              float(wide[:, 2].max()), True, 1.0))
        narrow = self._rs_dur < px_s
        for kind, rects, shade in self._small_bars(self._rs_start[narrow], self._rs_dur[narrow],
                                                   self._rs_row[narrow], self._rs_kind[narrow],
                                                   px_s, 0.0, presorted=True):
            order = np.argsort(rects[:, 0], kind="stable")
            rects = np.ascontiguousarray(rects[order])
            parts.append((kind, np.ascontiguousarray(rects[:, 0]), rects,
                          float(rects[:, 2].max()), False, shade))
        if len(self._levels) >= 4:
            self._levels.pop(next(iter(self._levels)))
        self._levels[px_s] = parts
        return parts

    def _visible_draw_list(self, x0: float, x1: float,
                           px_s: float) -> list[tuple[int, np.ndarray, bool, float]]:
        """Rectangles of the bars in ``[x0, x1]`` only (zoomed far in)."""
        out: list[tuple[int, np.ndarray, bool, float]] = []
        small = []
        for col in self._columns:
            rects = col.rects[col.visible(x0, x1)]
            if rects.shape[0] == 0:
                continue
            narrow = rects[:, 2] < px_s
            if narrow.any():
                small.append((col.kind, rects[narrow]))
                rects = rects[~narrow]
            if rects.shape[0]:
                out.append((col.kind, np.ascontiguousarray(rects), True, 1.0))
        if small:
            rects = np.concatenate([r for _, r in small])  # (s, 4)
            kinds = np.concatenate([np.full(r.shape[0], k, np.int64) for k, r in small])
            rows = np.floor(rects[:, 1]).astype(np.int64)
            merged = self._small_bars(rects[:, 0], rects[:, 2], rows, kinds, px_s, x0,
                                      presorted=False)
            out = [(k, r, False, shade) for k, r, shade in merged] + out
        return out

    def _small_bars(self, start: np.ndarray, dur: np.ndarray, row: np.ndarray, kind: np.ndarray,
                    px_s: float, origin: float,
                    presorted: bool) -> list[tuple[int, np.ndarray, float]]:
        """Rectangles for bars narrower than a pixel, as ``(kind, rects (k, 4), opacity)``.

        Few bars are widened to one pixel, with the opacity of their own width.
        Many are merged (level of detail): each (row, pixel column) cell gets
        the kind that covers most of its time and the opacity of the time all
        its bars cover, and runs of adjacent cells with the same kind and
        opacity become one rectangle. Cells are
        ``row * columns + floor((start - origin) / px_s)``; with ``presorted``
        the bars come sorted by (row, start), so cells are already
        non-decreasing and no sort is needed.
        """
        n = start.shape[0]
        if n == 0:
            return []
        if n <= _LOD_MIN_SMALL_BARS:
            out = []
            step = _shade_step(dur / px_s)
            for k in np.unique(kind):
                for lv in np.unique(step[kind == k]):
                    m = (kind == k) & (step == lv)
                    rects = np.empty((int(m.sum()), 4))
                    rects[:, 0] = start[m]
                    rects[:, 1] = row[m] + _BAR_TOP
                    rects[:, 2] = px_s
                    rects[:, 3] = _BAR_HEIGHT
                    out.append((int(k), rects, lv / _SHADES))
            return out
        cols = np.floor((start - origin) / px_s).astype(np.int64)
        ncols = int(cols.max()) + 2
        cell = row.astype(np.int64) * ncols + cols  # (s,)
        if not presorted:
            order = np.argsort(cell, kind="stable")
            cell, kind, dur = cell[order], kind[order], dur[order]
        first_in_cell = np.empty(n, dtype=bool)
        first_in_cell[0] = True
        np.not_equal(cell[1:], cell[:-1], out=first_in_cell[1:])
        cell_id = np.cumsum(first_in_cell) - 1  # compact cell index per bar
        cells = cell[first_in_cell]  # (c,) increasing
        kinds_present, slot = np.unique(kind, return_inverse=True)
        nk = kinds_present.size
        # time covered per (cell, kind); +tiny so zero-length tasks still count
        cover = np.bincount(cell_id * nk + slot, weights=dur + 1e-300,
                            minlength=cells.size * nk).reshape(-1, nk)
        best = cover.argmax(axis=1)
        step = _shade_step(cover.sum(axis=1) / px_s)
        brk = np.ones(cells.size, dtype=bool)
        brk[1:] = ((np.diff(cells) != 1) | (best[1:] != best[:-1]) | (step[1:] != step[:-1])
                   | (cells[1:] // ncols != cells[:-1] // ncols))
        run_first = np.flatnonzero(brk)
        length = np.diff(np.append(run_first, cells.size))
        run_cell, run_slot, run_step = cells[run_first], best[run_first], step[run_first]
        merged = np.empty((run_first.size, 4))
        merged[:, 0] = origin + (run_cell % ncols) * px_s
        merged[:, 1] = run_cell // ncols + _BAR_TOP
        merged[:, 2] = length * px_s
        merged[:, 3] = _BAR_HEIGHT
        out = []
        for s_, k in enumerate(kinds_present):
            for lv in np.unique(run_step[run_slot == s_]):
                part = merged[(run_slot == s_) & (run_step == lv)]
                out.append((int(k), np.ascontiguousarray(part), lv / _SHADES))
        return out

    def _shaded_brush(self, kind: int, shade: float) -> QtGui.QBrush:
        brush = self._shaded.get((kind, shade))
        if brush is None:
            color = QtGui.QColor(KIND_COLORS[KINDS[kind]])
            color.setAlphaF(shade)
            brush = self._shaded[(kind, shade)] = QtGui.QBrush(color)
        return brush

    def paint(self, painter: QtGui.QPainter, option, widget=None) -> None:  # noqa: D102
        if self._num_rows == 0:
            return
        view = self.viewRect()
        px_s = self.pixelWidth()
        if view is None or not px_s or not math.isfinite(px_s):
            return
        painter.setRenderHint(QtGui.QPainter.RenderHint.Antialiasing, False)
        painter.setPen(Qt.PenStyle.NoPen)
        lanes = self._lanes
        for stream in range(len(STREAMS)):
            painter.setBrush(self._lane_brushes[stream % len(self._lane_brushes)])
            _draw_rects(painter, np.ascontiguousarray(lanes[stream::len(STREAMS)]))
        if self.grid_ticks is not None:
            # own grid: pyqtgraph's axis grid replays a picture over the whole
            # view and costs more than all the bars together
            xs = np.asarray(self.grid_ticks(view.left(), view.right()), dtype=np.float64)
            if xs.size:
                lines = np.empty((xs.size, 4))  # (k, 4): x1, y1, x2, y2
                lines[:, 0] = lines[:, 2] = xs
                lines[:, 1], lines[:, 3] = 0.0, float(self._num_rows)
                painter.setPen(self._grid_pen)
                _draw_lines(painter, lines)
                painter.setPen(Qt.PenStyle.NoPen)
        parts = self.draw_list(view.left(), view.right(), px_s)
        num = 0
        for kind, rects, exact, shade in parts:
            # outlines only when bars are a few pixels wide on average (zoomed in)
            outline = exact and rects.shape[0] * 4 * px_s < (view.right() - view.left())
            painter.setPen(self._pens[kind] if outline else Qt.PenStyle.NoPen)
            painter.setBrush(self._brushes[kind] if shade >= 1.0 else self._shaded_brush(kind, shade))
            _draw_rects(painter, rects)
            num += rects.shape[0]
        self.last_paint_num_rects = num
        if self._highlight is not None:
            hl = self._highlight.copy()
            hl[0, 2] = max(hl[0, 2], px_s)
            painter.setPen(self._highlight_pen)
            painter.setBrush(Qt.BrushStyle.NoBrush)
            _draw_rects(painter, hl)


def task_description(graph: ExecutionGraph, schedule: Schedule, index: int) -> str:
    """One line describing task ``index``: kind, stage, stream, micro-batch, layer, start, duration."""
    kind = KINDS[int(graph.kind[index])]
    parts = [KIND_LABELS.get(kind, kind),
             f"stage {int(graph.stage[index])} {STREAMS[int(graph.stream[index])]}"]
    mb = int(graph.microbatch[index])
    parts.append(f"micro-batch {mb}" if mb >= 0 else "micro-batch –")
    if graph.num_chunks > 1 and graph.chunk[index] >= 0:
        # interleaved schedule: the virtual chunk and the virtual stage it runs
        c = int(graph.chunk[index])
        parts.append(f"chunk {c} (virtual stage {c * graph.num_stages + int(graph.stage[index])})")
    layer = int(graph.layer[index])
    parts.append(f"layer {layer}" if layer >= 0 else "layer –")
    parts.append(f"start {format_duration(float(schedule.start_s[index]))}")
    parts.append(f"duration {format_duration(float(graph.duration_s[index]))}")
    return " · ".join(parts)


class TimelineWidget(QtWidgets.QWidget):
    """Gantt chart of one iteration: rows ``stage s compute`` / ``stage s comm``, stage 0 on top.

    Colour encodes the task kind (legend above the plot); empty lane
    background between bars is idle time (pipeline bubbles). The mouse wheel
    and dragging zoom and pan the time axis; hovering a bar shows the task in
    a tooltip and in the label above the plot and emits :attr:`task_hovered`.
    """

    #: Index of the task under the mouse, or -1 when none.
    task_hovered = Signal(int)

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self._graph: ExecutionGraph | None = None
        self._schedule: Schedule | None = None
        self._row_bounds = np.zeros(1, dtype=np.int64)
        self._row_start = np.empty(0)
        self._row_end = np.empty(0)
        self._row_index = np.empty(0, dtype=np.int64)
        self.hovered_task = -1

        self._legend = QtWidgets.QLabel()
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
        strip.addWidget(self._legend)
        strip.addWidget(self._info)

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
        self.gantt = GanttItem()
        self.gantt.grid_ticks = self._grid_ticks
        item.addItem(self.gantt)
        self.plot.scene().sigMouseMoved.connect(self._on_scene_mouse_moved)
        self._num_rows = 0
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
        start = np.asarray(schedule.start_s, dtype=np.float64)
        end = np.asarray(schedule.end_s, dtype=np.float64)
        row = graph.row
        num_rows = int(graph.num_stages) * len(STREAMS)
        if row.size:
            num_rows = max(num_rows, int(row.max()) + 1)
        self.gantt.set_tasks(start, end - start, graph.kind, row, num_rows)

        # hover lookup: tasks grouped by row, sorted by start inside a row
        order = np.lexsort((start, row))
        self._row_index = order
        self._row_start = start[order]
        self._row_end = end[order]
        self._row_bounds = np.searchsorted(row[order], np.arange(num_rows + 1), side="left")

        self._set_row_ticks(num_rows)
        self._set_legend(sorted(set(np.unique(graph.kind).tolist())))
        t_end = self.gantt.end_s or 1e-9
        self.view_box.setLimits(xMin=-0.02 * t_end, xMax=1.02 * t_end, yMin=0, yMax=num_rows,
                                minXRange=t_end * 1e-6, maxXRange=1.04 * t_end)
        self.reset_view()
        self._set_hover(-1, None)

    def clear(self) -> None:
        """Remove all bars."""
        self._graph = self._schedule = None
        self.gantt.set_tasks(np.empty(0), np.empty(0), np.empty(0, np.int8), np.empty(0), 0)
        self._row_bounds = np.zeros(1, dtype=np.int64)
        self._row_start = self._row_end = np.empty(0)
        self._row_index = np.empty(0, dtype=np.int64)
        self._set_row_ticks(0)
        self._legend.setText("<i>No simulation result</i>")
        self._set_hover(-1, None)
        # an empty axis reads in seconds (0..1), not in the picoseconds of a zero-length range
        self.view_box.setLimits(xMin=None, xMax=None, yMin=None, yMax=None,
                                minXRange=None, maxXRange=None)
        self.view_box.setRange(xRange=(0.0, 1.0), yRange=(0, 1), padding=0.0)

    def reset_view(self) -> None:
        """Show the whole iteration and all rows."""
        rows = max(self.gantt.num_rows, 1)
        t_end = max(self.gantt.end_s, 1e-9)
        self.view_box.setRange(xRange=(-0.005 * t_end, 1.01 * t_end), yRange=(0, rows),
                               padding=0.0)

    @property
    def num_tasks(self) -> int:
        """Number of tasks shown."""
        return int(self._row_index.size)

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
        if not (_BAR_TOP - 0.05 <= y_row - r <= _BAR_TOP + _BAR_HEIGHT + 0.05):
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
        """Description of task ``index`` (see :func:`task_description`)."""
        assert self._graph is not None and self._schedule is not None
        return task_description(self._graph, self._schedule, index)

    # ------------------------------------------------------------------ handlers
    @Slot(object)
    def _on_scene_mouse_moved(self, scene_pos: QtCore.QPointF) -> None:
        if self._graph is None or not self.view_box.sceneBoundingRect().contains(scene_pos):
            self._set_hover(-1, None)
            return
        p = self.view_box.mapSceneToView(scene_pos)
        tol = _HOVER_TOLERANCE_PX * self.gantt.pixelWidth()
        self._set_hover(self.task_at(p.x(), p.y(), tolerance_s=tol), scene_pos)

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
            self.gantt.set_highlight((start, float(self._graph.row[index]) + _BAR_TOP, dur,
                                      _BAR_HEIGHT))
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
        n_streams = len(STREAMS)
        if row_px >= metrics.height() or num_rows == 0:
            ticks = [(r + 0.5, f"stage {r // n_streams} {STREAMS[r % n_streams]}")
                     for r in range(num_rows)]
        else:
            step = max(1, math.ceil(1.2 * metrics.height() / (row_px * n_streams)))
            ticks = [(s * n_streams + n_streams / 2, f"stage {s}")
                     for s in range(0, num_rows // n_streams, step)]
        if ticks == getattr(self, "_ticks", None):
            return
        self._ticks = ticks
        axis.setTicks([ticks, []])
        # fixed width from the longest label: the automatic text-space expansion lags one paint
        longest = max((metrics.horizontalAdvance(t) for _, t in ticks), default=40)
        axis.setWidth(longest + 16)

    @Slot()
    def _on_view_box_resize(self) -> None:
        self._set_row_ticks(self._num_rows)

    def _set_legend(self, kinds: list[int]) -> None:
        items = []
        for k in kinds:
            name = KINDS[k]
            label = KIND_LABELS.get(name, name).replace(" ", "&nbsp;").replace("-", "&#8209;")
            items.append(f'<span style="color:{KIND_COLORS[name]}; font-size:14pt;">&#9632;</span>'
                         f"&nbsp;{label}")
        items.append('<span style="color:#DCE1EA; font-size:14pt;">&#9632;</span>&nbsp;idle&nbsp;(bubble)')
        # bars narrower than a pixel are merged; their opacity is the lane's busy share there
        base, lane = QtGui.QColor(KIND_COLORS["tp_comm"]), _LANE_COLORS[1]
        swatches = "".join(
            f'<span style="color:{_blend(base, lane, step / _SHADES)}; font-size:14pt;">&#9632;</span>'
            for step in (1, 3, _SHADES))
        items.append(f"{swatches}&nbsp;paler&nbsp;=&nbsp;busy&nbsp;part&nbsp;of&nbsp;the&nbsp;time")
        self._legend.setText("&nbsp;&nbsp; ".join(items))
        self._legend.setToolTip(
            "Where bars are narrower than a pixel, each pixel shows the share of its time the "
            "lane is busy as the bar's opacity (in steps of 1/5): a pale stretch of a "
            "communication lane is many short collectives with gaps between them, not one "
            "long one.")
