"""The batched graphics item that paints all bars of a timeline (:class:`GanttItem`).

Drawing is batched and its cost does not grow with the number of tasks (see the
:mod:`vtrain_gui.timeline` docstring for the zoom bands, the merged sub-pixel bars and the
summary of huge iterations). The numpy side lives in :mod:`vtrain_gui.timeline.layout`; for
more than :data:`SYNC_MAX_TASKS` tasks a :class:`vtrain_gui.background.BackgroundRunner` runs
its :class:`~vtrain_gui.timeline.layout.Preparation` on a worker thread, started by the first
paint (a hidden view costs nothing).
"""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtGui
from PySide6.QtCore import Qt, Signal, Slot

from core.sim.graph_types import KINDS

from ..background import BackgroundRunner
from .colors import LANE_COLORS, color_table, kind_color
from .layout import BAND_MIN, BAR_HEIGHT, BAR_TOP, Layout, Preparation, small_bar_rects

try:  # zero-copy path: QPainter.drawRects(const QRectF *, int) from numpy memory
    import shiboken6

    _HAVE_PTR = True
except ImportError:  # pragma: no cover - PySide6 always ships shiboken6
    _HAVE_PTR = False

__all__ = ["GanttItem", "SYNC_MAX_TASKS", "SUMMARY_MIN_TASKS"]

#: Data sets with more tasks are prepared in a worker thread (the GUI thread never waits).
SYNC_MAX_TASKS = 50_000
#: Iterations with more tasks are summarized first: the picture of the view the first paint
#: asked for, merged straight from the task arrays (:func:`~vtrain_gui.timeline.layout.summary_image`:
#: no sorting, a few hundred milliseconds for millions of tasks), is drawn until the exact layout
#: arrives (hover, zoom). A picture (``vtrain gui --screenshot``) of the whole iteration needs no more.
SUMMARY_MIN_TASKS = 1_000_000


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


class GanttItem(pg.GraphicsObject):
    """All bars of a timeline in one graphics item.

    Item coordinates: x in seconds from iteration start, y in rows (row ``r``
    spans ``[r, r+1)``). Bounds come from the numpy extents of the data.
    """

    #: The data given to :meth:`set_tasks` is laid out (emitted in the GUI thread).
    layout_ready = Signal()

    def __init__(self) -> None:
        super().__init__()
        self._layout: Layout | None = None
        self._prep: Preparation | None = None  # the one in progress
        self._preparer: BackgroundRunner | None = None  # the thread running it
        self._pending: tuple | None = None  # arrays to lay out in a thread once the item is painted
        self._generation = 0
        self._summary: tuple[int, np.ndarray] | None = None  # (bins, image) until the layout
        self._summary_pixels: np.ndarray | None = None  # its ARGB pixels (num_rows, STRIPS, bins)
        self._num_rows = 0
        #: lanes per pipeline stage (compute, comm and the other streams the graph uses)
        self.streams_per_stage = 2
        self._num_tasks = 0
        self._t_end = 0.0
        self._lanes = np.empty((0, 4))
        self._palette = color_table().reshape(-1)  # code -> premultiplied ARGB (layout.cell_code)
        self._brushes = [QtGui.QBrush(kind_color(k)) for k in range(len(KINDS))]
        self._shaded: dict[tuple[int, float], QtGui.QBrush] = {}
        self._pens = [pg.mkPen(kind_color(k).darker(150), width=1, cosmetic=True)
                      for k in range(len(KINDS))]
        self._lane_brushes = [QtGui.QBrush(c) for c in LANE_COLORS]
        self._highlight_pen = pg.mkPen("#000000", width=2, cosmetic=True)
        self._grid_pen = pg.mkPen("#D0D4DA", width=1, cosmetic=True)
        #: callable ``(x0, x1) -> array of x`` giving vertical grid lines (the axis' major ticks)
        self.grid_ticks = None
        self._highlight: np.ndarray | None = None  # (1, 4) rect of the hovered task
        self._cache_key: tuple | None = None
        self._cache: list[tuple[int, np.ndarray, bool, float]] = []
        self.last_paint_num_rects = 0  # for tests and benchmarks
        self.last_paint_band = -1  # band index of the last paint (num_bands: zoomed in beyond)

    # ------------------------------------------------------------------ data
    def set_tasks(self, start_s: np.ndarray, duration_s: np.ndarray | None, kind: np.ndarray,
                  row, num_rows: int, background: bool | None = None,
                  end_s: np.ndarray | None = None) -> None:
        """Replace the bars. Arrays have shape (n,); ``row`` in ``0..num_rows-1``.

        ``duration_s`` may be None when ``end_s`` is given, and ``row`` may be a
        function returning the row array: both are then computed where the
        layout is built, off the GUI thread in the background case (the GUI
        thread only takes the maximum end).

        With ``background`` (default: more than :data:`SYNC_MAX_TASKS` tasks)
        the layout is built in a worker thread, started when the item is first
        painted (or by :meth:`wait_ready`), and :attr:`layout_ready` is emitted
        when it arrives; the call itself takes a few milliseconds. Otherwise it
        is built before this returns.
        """
        self.prepareGeometryChange()
        self._stop_preparation()
        self._generation += 1
        start_s = np.asarray(start_s, dtype=np.float64)
        if duration_s is not None:
            duration_s = np.asarray(duration_s, dtype=np.float64)
            end_s = start_s + duration_s
        end_s = np.asarray(end_s, dtype=np.float64)
        kind = np.asarray(kind)
        self._num_rows = int(num_rows)
        self._num_tasks = int(start_s.shape[0])
        self._t_end = float(end_s.max()) if start_s.size else 0.0
        lanes = np.empty((self._num_rows, 4))  # (rows, 4)
        lanes[:, 0] = 0.0
        lanes[:, 1] = np.arange(self._num_rows) + 0.04
        lanes[:, 2] = self._t_end
        lanes[:, 3] = 0.92
        self._lanes = lanes
        self._layout = None
        self._summary = None
        self._pending = None
        self._highlight = None
        self._cache_key = None
        arrays = (start_s, end_s, kind, row, self._num_rows, duration_s)
        if background is None:
            background = self._num_tasks > SYNC_MAX_TASKS
        if background:  # started by the first paint: a hidden view costs nothing
            self._pending = arrays
        else:
            self._layout = Layout(*arrays)
            self.layout_ready.emit()
        self.update()

    @Slot(int, object)
    def _on_prepared(self, run_id: int, payload: tuple) -> None:
        """A piece from the worker (see :class:`Preparation`): summary, layout or band image."""
        generation, what, *args = payload
        if generation != self._generation:
            return
        if what == "summary":
            self._on_summary(*args)
        elif what == "layout":
            self._on_layout(*args)
        else:
            self._on_band(*args)

    def _on_summary(self, bins: int, image: np.ndarray) -> None:
        if self._layout is not None:
            return
        self._summary = (bins, image)
        self._summary_pixels = self._palette[image]  # ARGB once, not per paint
        self.update()

    @property
    def summary(self) -> tuple[int, np.ndarray] | None:
        """``(bins, codes)`` drawn while the layout of a huge iteration is being built
        (:func:`~.layout.summary_image`: codes ``(num_rows, STRIPS, bins)``), or None."""
        return self._summary

    def _on_layout(self, layout: Layout) -> None:
        self._layout = layout
        self._summary = None
        self._cache_key = None
        if layout.num_bands == 0:
            self._prep = None  # no band images to wait for
        self.update()
        self.layout_ready.emit()

    def _on_band(self, i: int, image: np.ndarray | None) -> None:
        if self._layout is None:
            return
        self._layout.images[i] = image
        self._cache_key = None
        if i == self.last_paint_band or self._prep is not None and self._prep.wanted == i:
            self.update()
        if len(self._layout.images) == self._layout.num_bands:
            self._prep = None  # all done

    @property
    def layout(self) -> Layout | None:
        """The laid-out data, or None while a worker thread still builds it."""
        return self._layout

    @property
    def is_ready(self) -> bool:
        """Whether the layout and every band image are there (nothing left to prepare)."""
        return self._layout is not None and self._prep is None

    def _start_preparation(self) -> None:
        if self._pending is not None:
            arrays, self._pending = self._pending, None
            bins = 0
            if self._num_tasks >= SUMMARY_MIN_TASKS:  # the view asked for, summarized first
                px_s = self.pixelWidth() if self.scene() is not None else 0.0
                b = (math.floor(math.log2(self._t_end / px_s))
                     if px_s and math.isfinite(px_s) and self._t_end > 0 else 11)
                bins = 1 << int(min(max(b, BAND_MIN), 14))
            self._prep = Preparation(self._generation, arrays, summary_bins=bins)
            # a runner (thread) per data set: a new one need not wait for an old one to stop
            self._preparer = BackgroundRunner(f"timeline-layout-{self._generation}",
                                              stop_when_idle=True)
            self._preparer.progress.connect(self._on_prepared)
            self._preparer.submit(self._prep.run)

    def _stop_preparation(self, timeout_s: float = 0.0) -> None:
        """Cancel the preparation in progress (nothing more of it is drawn); with ``timeout_s``,
        wait that long for its thread to end."""
        self._prep = None
        if self._preparer is not None:
            if timeout_s > 0:
                self._preparer.shutdown(int(timeout_s * 1000))
            else:
                self._preparer.cancel()  # its thread ends with the job; the runner keeps itself
            self._preparer = None

    def _wait_preparation(self, timeout_s: float) -> None:
        """Block up to ``timeout_s`` for the worker's current step (then process its signals)."""
        if self._preparer is not None:
            self._preparer.wait_job(timeout_s)

    def wait_ready(self, timeout_s: float = 30.0) -> bool:
        """Process events until :attr:`is_ready` (tests, benchmarks, screenshots); True on success."""
        self._start_preparation()
        deadline = QtCore.QDeadlineTimer(int(timeout_s * 1000))
        app = QtCore.QCoreApplication.instance()
        while not self.is_ready and not deadline.hasExpired():
            if self._prep is not None:
                self._wait_preparation(0.005)
            app.processEvents()
        return self.is_ready

    def _summary_in_view(self) -> bool:
        """Whether the summary is there and the view shows the whole iteration."""
        if self._summary is None or self.scene() is None:
            return False
        view = self.viewRect()
        return view is not None and view.left() <= 0.0 and view.right() >= self._t_end

    def view_band(self) -> int | None:
        """Band the current view paints (``num_bands`` zoomed in beyond the finest), or None
        before the layout is there or when the item is not in a view."""
        px_s = self.pixelWidth() if self.scene() is not None else 0.0
        if self._layout is None or not px_s or not math.isfinite(px_s):
            return None
        return self._layout.band_for(px_s)

    @property
    def view_ready(self) -> bool:
        """Whether what the current view paints is prepared: the layout and the band in view
        (the other zoom bands may still be on their way)."""
        if self._layout is None:
            return self._summary_in_view()  # a huge iteration's summary, zoomed out
        i = self.view_band()
        return i is not None and (i >= self._layout.num_bands or i in self._layout.images)

    def wait_view_ready(self, timeout_s: float = 30.0) -> bool:
        """Process events until :attr:`view_ready`, the band in view prepared first (a picture
        of a huge iteration needs one band of the dozen, not all); True on success."""
        self._start_preparation()
        deadline = QtCore.QDeadlineTimer(int(timeout_s * 1000))
        app = QtCore.QCoreApplication.instance()
        while not self.view_ready and not self.is_ready and not deadline.hasExpired():
            prep, i = self._prep, self.view_band()
            if prep is not None:
                if i is not None:
                    prep.wanted = i  # next, before the bands nearer the middle
                self._wait_preparation(0.005)
            app.processEvents()
        return self.view_ready or self.is_ready

    def shutdown(self) -> None:
        """Stop a worker thread that still prepares the layout (the widget is going away)."""
        self._pending = None
        self._stop_preparation(timeout_s=5.0)

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
    def _band(self, px_s: float) -> tuple[int, np.ndarray | None]:
        """Band index to paint at ``px_s`` seconds per pixel and its image.

        ``num_bands`` (and no image) when zoomed in beyond the finest band. A
        band not prepared yet is computed here when the data is small;
        otherwise the worker is asked for it and the nearest prepared band is
        used meanwhile (-1 when there is none yet: nothing is drawn).
        """
        lay = self._layout
        i = lay.band_for(px_s)
        if i >= lay.num_bands or i in lay.images:
            return i, lay.images.get(i)
        if self._prep is None:
            lay.images[i] = lay.band_image(i)
            return i, lay.images[i]
        self._prep.wanted = i
        if not lay.images:
            return -1, None
        j = min(lay.images, key=lambda b: abs(b - i))
        return j, lay.images[j]

    def draw_list(self, x0: float, x1: float,
                  px_s: float) -> list[tuple[int, np.ndarray, bool, float]]:
        """Rectangles to paint for the view ``[x0, x1]`` at ``px_s`` seconds per pixel.

        Returns ``(kind, rects (k, 4), exact, opacity)`` per kind and opacity.
        In a zoom band (see the module docstring) these are the bars at least
        a bin wide, all exact; the narrower ones are in
        :meth:`band_image_in_view`. Zoomed in beyond the finest band they are
        the visible bars, and ``exact`` is false for level-of-detail
        rectangles that merge (or widen) sub-pixel bars, whose opacity in
        ``(0, 1]`` is the busy part of their pixels (rounded up to a step of
        ``1 / SHADES``); exact bars have opacity 1. Empty while the layout is
        being prepared.
        """
        key = (x0, x1, px_s)
        if key == self._cache_key:
            return self._cache
        lay = self._layout
        if lay is None:
            return []
        i, _ = self._band(px_s)
        if i < 0:
            out: list[tuple[int, np.ndarray, bool, float]] = []
        elif i >= lay.num_bands:
            out = self._visible_draw_list(x0, x1, px_s)
        else:
            out = []
            for col in lay.columns:
                parts = [col.rects[s] for s in col.visible(x0, x1, i + 1)]
                if parts:
                    rects = parts[0] if len(parts) == 1 else np.concatenate(parts)
                    out.append((col.kind, np.ascontiguousarray(rects), True, 1.0))
        self._cache_key, self._cache = key, out
        return out

    def band_image_in_view(self, x0: float, x1: float,
                           px_s: float) -> tuple[np.ndarray, float, float] | None:
        """The visible columns of the band image painted at ``px_s``: ``(pixels, x_left, bin_s)``.

        ``pixels`` is uint32 premultiplied ARGB, shape ``(num_rows, STRIPS, c)``: the strips
        of a row's bar area top to bottom (:func:`~.layout.stack_kinds`), column
        ``j`` covering ``[x_left + j*bin_s, x_left + (j+1)*bin_s)``. None when
        no image is drawn (zoomed in beyond the finest band, no bar narrower
        than a bin, or nothing prepared yet).
        """
        lay = self._layout
        if lay is None:
            return None
        i, image = self._band(px_s)
        if image is None:
            return None
        w = float(lay.widths[i])
        nbins = image.shape[2]
        c0 = min(max(int(math.floor(x0 / w)), 0), nbins)
        c1 = min(max(int(math.ceil(x1 / w)) + 1, c0), nbins)
        if c1 <= c0:
            return None
        return self._palette[image[:, :, c0:c1]], c0 * w, w  # visible columns only: cheap

    def _visible_draw_list(self, x0: float, x1: float,
                           px_s: float) -> list[tuple[int, np.ndarray, bool, float]]:
        """Rectangles of the bars in ``[x0, x1]`` only (zoomed in beyond the finest band)."""
        lay = self._layout
        out: list[tuple[int, np.ndarray, bool, float]] = []
        small = []
        for col in lay.columns:
            slices = col.visible(x0, x1, lay.num_bands + 1)
            if not slices:
                continue
            rects = col.rects[slices[0]] if len(slices) == 1 else np.concatenate(
                [col.rects[s] for s in slices])
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
            merged = small_bar_rects(rects[:, 0], rects[:, 2], rows, kinds, px_s, x0)
            out = [(k, r, False, shade) for k, r, shade in merged] + out
        return out

    def _shaded_brush(self, kind: int, shade: float) -> QtGui.QBrush:
        brush = self._shaded.get((kind, shade))
        if brush is None:
            color = kind_color(kind)
            color.setAlphaF(shade)
            brush = self._shaded[(kind, shade)] = QtGui.QBrush(color)
        return brush

    @staticmethod
    def _draw_rows(painter: QtGui.QPainter, pixels: np.ndarray, left: float, width: float) -> None:
        """Draw ARGB ``pixels`` ``(num_rows, STRIPS, c)`` over ``[left, left + width]``: one
        ``drawImage`` per busy row, its strips stretched over the row's bar area (as the
        rectangles are)."""
        rows, strips, cols = pixels.shape
        pixels = np.ascontiguousarray(pixels)
        image = QtGui.QImage(pixels.data, cols, rows * strips, cols * 4,
                             QtGui.QImage.Format.Format_ARGB32_Premultiplied)
        for r in np.flatnonzero(pixels.reshape(rows, -1).any(axis=1)).tolist():
            painter.drawImage(QtCore.QRectF(left, r + BAR_TOP, width, BAR_HEIGHT), image,
                              QtCore.QRectF(0, r * strips, cols, strips))
        del image  # before `pixels`, whose memory it points into

    def _draw_band_image(self, painter: QtGui.QPainter, x0: float, x1: float, px_s: float) -> None:
        """Draw the visible columns of the band image (:meth:`band_image_in_view`)."""
        part = self.band_image_in_view(x0, x1, px_s)
        if part is None:
            return
        pixels, left, w = part
        self._draw_rows(painter, pixels, left, pixels.shape[2] * w)

    def _draw_summary(self, painter: QtGui.QPainter) -> None:
        """Draw the summary image over the whole iteration (its codes: :attr:`summary`)."""
        self._draw_rows(painter, self._summary_pixels, 0.0, self._t_end)

    def paint(self, painter: QtGui.QPainter, option, widget=None) -> None:  # noqa: D102
        if self._num_rows == 0:
            return
        view = self.viewRect()
        px_s = self.pixelWidth()
        if view is None or not px_s or not math.isfinite(px_s):
            return
        painter.setRenderHint(QtGui.QPainter.RenderHint.Antialiasing, False)
        painter.setRenderHint(QtGui.QPainter.RenderHint.SmoothPixmapTransform, False)
        painter.setPen(Qt.PenStyle.NoPen)
        lanes = self._lanes
        n = self.streams_per_stage
        for stream in range(n):  # compute lanes in one colour, communication lanes in the other
            painter.setBrush(self._lane_brushes[min(stream, len(self._lane_brushes) - 1)])
            _draw_rects(painter, np.ascontiguousarray(lanes[stream::n]))
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
        if self._layout is None:
            self._start_preparation()
            self.last_paint_num_rects = 0
            self.last_paint_band = -1
            if self._summary is not None:
                self._draw_summary(painter)
            return
        x0, x1 = view.left(), view.right()
        self._draw_band_image(painter, x0, x1, px_s)
        parts = self.draw_list(x0, x1, px_s)
        self.last_paint_band = self._band(px_s)[0]
        num = 0
        for kind, rects, exact, shade in parts:
            # outlines only when bars are a few pixels wide on average (zoomed in)
            outline = exact and rects.shape[0] * 4 * px_s < (x1 - x0)
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
