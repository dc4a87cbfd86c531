"""Gantt view of one simulated iteration: one row per pipeline stage and stream.

Drawing is batched and its cost does not grow with the number of tasks:

* **Zoom bands.** Band ``b`` cuts the iteration ``[0, T]`` into ``2**b`` bins
  of width ``T / 2**b``. A paint uses the band whose bins are one to two
  device pixels wide. In a band, bars at least a bin wide are drawn as
  rectangles (one ``QPainter.drawRects`` call per kind, straight from
  float64 ``(n, 4)`` arrays sliced to the visible time range with
  ``np.searchsorted``); narrower bars are merged into the
  band's image, one ARGB pixel per (row, bin): the colour of the kind that
  covers most of the bin, at an opacity given by the part of the bin's time
  the row is busy (one of :data:`_SHADES` steps), so a stream busy 10 % of
  the time in thousands of short bars reads as a pale band, not as solid
  colour. A paint draws the visible columns of that image (one
  ``drawImage`` per row) and, bars on a row not overlapping, at most one
  rectangle per pixel and row.
* **Off the GUI thread.** The sorted arrays and the band images depend only on
  the data: :class:`_Layout` (numpy only) builds them once per data set. For
  more than :data:`SYNC_MAX_TASKS` tasks a worker thread (started by the
  first paint, so a hidden view costs nothing) builds them, the band in view
  first, and hands each piece to the GUI thread through a queued signal;
  until then the lanes are drawn empty (and hover finds nothing). Smaller
  data sets are prepared at once and their bands on first use.
* Zoomed in beyond the finest band (few tasks in view), the visible bars are
  drawn exactly and only those below a pixel are merged, per (row, pixel).
* **Huge iterations** (at least :data:`SUMMARY_MIN_TASKS` tasks) are summarized
  first: the worker's first step merges every bar into the bins of the view the
  first paint asked for (:func:`summary_image`, no sorting), drawn until the
  layout arrives. A picture of the whole iteration (``--screenshot``:
  :meth:`TimelineWidget.wait_view_ready`) needs nothing more.
"""

from __future__ import annotations

import math
import threading

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtGui, QtWidgets
from PySide6.QtCore import Qt, Signal, Slot

from core.sim.graph_types import KINDS, STREAMS, ExecutionGraph, Schedule

from .formatting import KIND_COLORS, KIND_LABELS, format_duration

try:  # zero-copy path: QPainter.drawRects(const QRectF *, int) from numpy memory
    import shiboken6

    _HAVE_PTR = True
except ImportError:  # pragma: no cover - PySide6 always ships shiboken6
    _HAVE_PTR = False

__all__ = ["GanttItem", "TimelineWidget", "task_description", "kind_color", "SYNC_MAX_TASKS",
           "SUMMARY_MIN_TASKS", "summary_image"]

#: Bars occupy this part of their row (in row units, y grows downwards).
_BAR_TOP, _BAR_HEIGHT = 0.12, 0.76
#: Above this many sub-pixel bars in view (zoomed in beyond the finest band), merge them per pixel.
_LOD_MIN_SMALL_BARS = 2000
#: Coarsest zoom band (2**_BAND_MIN bins over the iteration).
_BAND_MIN = 6
#: The finest band has at most this many (row, bin) pixels; 4 bytes each.
_BAND_MAX_PIXELS = 1 << 22
#: Band images are computed in blocks of rows of at most this many bars or pixels.
_CHUNK = 1 << 19
#: Opacity steps of merged sub-pixel bars: a bin busy a fraction f of its time gets
#: opacity ceil(f * _SHADES) / _SHADES.
_SHADES = 5
#: Data sets with more tasks are prepared in a worker thread (the GUI thread never waits).
SYNC_MAX_TASKS = 50_000
#: Iterations with more tasks are summarized first: the picture of the view the first paint
#: asked for, merged straight from the task arrays (:func:`summary_image`: no sorting, a few
#: hundred milliseconds for millions of tasks), is drawn until the exact layout arrives (hover,
#: zoom). A picture (``vtrain gui --screenshot``) of the whole iteration needs no more.
SUMMARY_MIN_TASKS = 1_000_000
#: Hover tolerance in device pixels when the mouse is not exactly over a bar.
_HOVER_TOLERANCE_PX = 3.0
_LANE_COLORS = (QtGui.QColor("#EEF1F6"), QtGui.QColor("#F7F7F7"))  # compute, comm lanes
#: Colours of kinds that :data:`vtrain_gui.formatting.KIND_COLORS` does not name yet.
_SPARE_COLORS = ("#8CD17D", "#B6992D", "#FF9D9A", "#79706E", "#D37295", "#499894")


def kind_color(kind: int) -> QtGui.QColor:
    """Colour of task kind ``kind`` (index into :data:`core.sim.graph_types.KINDS`); kinds without
    an entry in ``KIND_COLORS`` get a spare colour, so a new kind draws without a code change."""
    name = KINDS[kind]
    return QtGui.QColor(KIND_COLORS.get(name, _SPARE_COLORS[kind % len(_SPARE_COLORS)]))


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


def _color_table() -> np.ndarray:
    """Premultiplied ARGB32 pixel of each kind at each opacity step: uint32 ``(len(KINDS), _SHADES + 1)``
    (step 0 is transparent)."""
    table = np.zeros((len(KINDS), _SHADES + 1), np.uint32)
    for k in range(len(KINDS)):
        c = kind_color(k)
        for step in range(1, _SHADES + 1):
            a = step / _SHADES
            argb = [round(255 * a), round(c.red() * a), round(c.green() * a), round(c.blue() * a)]
            table[k, step] = (argb[0] << 24) | (argb[1] << 16) | (argb[2] << 8) | argb[3]
    return table


class _KindColumn:
    """The tasks of one kind as drawable rectangle rows, grouped by width class.

    Group ``g`` holds the tasks drawn as rectangles from band index ``g`` on
    (:attr:`_Layout.group`); inside a group tasks are sorted by start.
    """

    __slots__ = ("kind", "start", "rects", "bounds", "max_duration")

    def __init__(self, kind: int, start: np.ndarray, duration: np.ndarray, row: np.ndarray,
                 group: np.ndarray, num_groups: int):
        """Arrays of shape (n_k,), already sorted by (group, start)."""
        self.kind = kind
        self.start = np.ascontiguousarray(start)
        rects = np.empty((start.size, 4), dtype=np.float64)  # (n_k, 4): x, y, w, h
        rects[:, 0] = start
        rects[:, 1] = row + _BAR_TOP
        rects[:, 2] = duration
        rects[:, 3] = _BAR_HEIGHT
        self.rects = rects
        # group g holds rows bounds[g]:bounds[g+1], g = 0..num_groups
        self.bounds = np.searchsorted(group, np.arange(num_groups + 2))
        self.max_duration = np.zeros(num_groups + 1)
        np.maximum.at(self.max_duration, group, duration)

    def visible(self, x0: float, x1: float, groups: int) -> list[slice]:
        """Slices of the tasks of groups ``0..groups-1`` that may intersect ``[x0, x1]``."""
        out = []
        for g in range(groups):
            a, b = int(self.bounds[g]), int(self.bounds[g + 1])
            if a == b:
                continue
            s = self.start[a:b]
            lo = a + int(np.searchsorted(s, x0 - self.max_duration[g], side="left"))
            hi = a + int(np.searchsorted(s, x1, side="right"))
            if hi > lo:
                out.append(slice(lo, hi))
        return out


def summary_image(start: np.ndarray, end: np.ndarray, kind: np.ndarray, row: np.ndarray,
                  num_rows: int, t_end: float, nbins: int, colors: np.ndarray) -> np.ndarray:
    """Every bar merged into ``nbins`` bins of ``t_end / nbins`` seconds per row: uint32
    ``(num_rows, nbins)`` premultiplied ARGB, as :meth:`_Layout.band_image` merges the narrow
    bars (the colour of the kind with the most time in the bin, the opacity step of the bin's
    busy share), but of all bars, wide ones too, and without sorting the tasks.

    Parameters
    ----------
    start, end : float64 arrays, shape (n,)
        Seconds.
    kind, row : int arrays, shape (n,)
        Kind (index into :data:`core.sim.graph_types.KINDS`) and row (``0..num_rows-1``).
    colors : uint32 array, shape (len(KINDS), _SHADES + 1)
        :func:`_color_table`.

    A bar adds the time it overlaps each bin to that bin's tally of its kind: its first and
    last bins directly, the whole bins between them through a count per (row, kind, bin)
    whose running sum over the bins is exact. Works through blocks of :data:`_CHUNK` tasks so
    that no numpy call holds the interpreter long.
    """
    n = start.shape[0]
    image = np.zeros((num_rows, nbins), np.uint32)
    if n == 0 or not t_end > 0:
        return image
    present = np.flatnonzero(np.bincount(kind, minlength=len(KINDS)))
    slot = np.zeros(len(KINDS), np.int64)
    slot[present] = np.arange(present.size)  # kinds present, numbered 0..K-1
    K, width = present.size, nbins + 1
    size = num_rows * K * width
    tally = np.zeros(size)                    # (rows, K, nbins + 1): seconds in the bin
    whole = np.zeros(size, np.int64)          # bars starting to cover whole bins (+1), ending (-1)
    w = t_end / nbins
    for a in range(0, n, _CHUNK):
        s, e = start[a:a + _CHUNK], end[a:a + _CHUNK]
        base = (row[a:a + _CHUNK].astype(np.int64) * K + slot[kind[a:a + _CHUNK]]) * width
        j0 = np.minimum((s / w).astype(np.int64), nbins - 1)
        j1 = np.maximum(np.minimum((e / w).astype(np.int64), nbins - 1), j0)
        one = j0 == j1
        # +tiny: a zero-length task still shows
        first = np.where(one, e - s, (j0 + 1) * w - s) + 1e-300
        tally += np.bincount(base + j0, first, minlength=size)
        two = ~one
        tally += np.bincount(base[two] + j1[two], e[two] - j1[two] * w, minlength=size)
        span = j1 - j0 >= 2
        whole += np.bincount(base[span] + j0[span] + 1, minlength=size)
        whole -= np.bincount(base[span] + j1[span], minlength=size)
    per_kind = (tally.reshape(num_rows, K, width)
                + np.cumsum(whole.reshape(num_rows, K, width), axis=2) * w)[:, :, :nbins]
    total = per_kind.sum(axis=1)                                          # (rows, nbins)
    best = present[per_kind.argmax(axis=1)]                               # (rows, nbins)
    cells = total > 0
    image[cells] = colors[best[cells], _shade_step(total[cells] / w)]
    return image


def _small_int(a: np.ndarray) -> np.ndarray:
    """``a`` as int16 when its values fit (numpy's stable sort is then a radix sort)."""
    return a.astype(np.int16) if a.size == 0 or (a.min() >= 0 and a.max() < 2**15) else a


class _Layout:
    """Draw-ready arrays of one set of bars (numpy only: safe to build in a worker thread).

    Parameters
    ----------
    start, end : float64 arrays, shape (n,)
        Seconds.
    kind : int array, shape (n,)
        Index into :data:`core.sim.graph_types.KINDS`.
    row : int array, shape (n,), or a function returning it
        Row ``0..num_rows-1``.
    num_rows : int
    duration : float64 array, shape (n,), optional
        ``end - start`` when not given.

    Attributes
    ----------
    widths : float64 array, shape (num_bands,)
        Bin width of each band, seconds: ``t_end / 2**b`` for ``b = band_lo, band_lo+1, ...``.
    group : int64 array, shape (n,)
        First band index at which a task is a rectangle (at least a bin
        wide); ``num_bands`` if in none.
    order : int64 array, shape (n,)
        Tasks sorted by (row, start); ``rs_*`` are the columns in that order
        and row ``r`` holds positions ``row_bounds[r]:row_bounds[r+1]``.
    columns : list of _KindColumn
        One per kind present, in kind order.
    images : dict
        Band index -> uint32 image from :meth:`band_image` (filled by the owner).
    """

    def __init__(self, start: np.ndarray, end: np.ndarray, kind: np.ndarray, row, num_rows: int,
                 duration: np.ndarray | None = None):
        n = start.shape[0]
        self.num_tasks = n
        self.num_rows = int(num_rows)
        if duration is None:
            duration = end - start
        row = np.asarray(row() if callable(row) else row, dtype=np.int64)
        self.t_end = float(end.max()) if n else 0.0
        num_bands = 0
        if n and self.t_end > 0 and math.isfinite(self.t_end):
            finest = int(math.floor(math.log2(_BAND_MAX_PIXELS / max(self.num_rows, 1))))
            num_bands = max(0, finest - _BAND_MIN + 1)
        self.band_lo = _BAND_MIN
        self.num_bands = num_bands
        self.widths = self.t_end / 2.0 ** np.arange(_BAND_MIN, _BAND_MIN + num_bands)
        # widths decrease: the first band where a task is at least a bin wide
        self.group = np.searchsorted(-self.widths, -duration, side="left").astype(np.int64)
        by_start = np.argsort(start, kind="stable")
        # stable sorts on small integer keys (radix sorts) keep the start order inside
        order = by_start[np.argsort(_small_int(row[by_start]), kind="stable")]
        self.order = order
        self.rs_start = start[order]
        self.rs_end = end[order]
        self.rs_row = row[order].astype(np.int64)
        self.rs_kind = kind[order].astype(np.int64)
        self.rs_group = self.group[order]
        self.row_bounds = np.searchsorted(self.rs_row, np.arange(self.num_rows + 1), side="left")
        counts = np.bincount(kind, minlength=len(KINDS)) if n else np.zeros(len(KINDS), np.int64)
        self.kinds_present = np.flatnonzero(counts)
        kg = kind.astype(np.int64) * (num_bands + 1) + self.group
        by_kind = by_start[np.argsort(_small_int(kg[by_start]), kind="stable")]  # kind, group, start
        bounds = np.concatenate([[0], np.cumsum(counts)])
        self.columns = []
        for k in self.kinds_present.tolist():
            idx = by_kind[bounds[k]:bounds[k + 1]]
            self.columns.append(_KindColumn(k, start[idx], duration[idx], row[idx].astype(np.float64),
                                            self.group[idx], num_bands))
        self.images: dict[int, np.ndarray | None] = {}

    def band_for(self, px_s: float) -> int:
        """Band index whose bins are 1 to 2 pixels of ``px_s`` seconds wide; ``num_bands`` when
        zoomed in beyond the finest band (0 when zoomed out beyond the coarsest)."""
        if self.num_bands == 0 or not px_s > 0:
            return self.num_bands
        b = math.floor(math.log2(self.t_end / px_s))
        return int(min(max(b - self.band_lo, 0), self.num_bands))

    def band_image(self, i: int, colors: np.ndarray) -> np.ndarray | None:
        """The merged picture of band ``i``'s narrow bars: uint32 ``(num_rows, 2**(band_lo+i))``.

        Every bar narrower than a bin adds the time it
        overlaps each bin to that bin's tally of its kind; a bin with any bar
        gets the colour (from ``colors``, see :func:`_color_table`) of the kind
        with the most time and the opacity step of its busy share (the tallies'
        sum over the bin width; at least the lowest step, so zero-length tasks
        show). None when no bar is that narrow.
        Works through blocks of rows of at most :data:`_CHUNK` bars or pixels, so
        that no numpy call holds the interpreter long (the GUI thread runs meanwhile).
        """
        if not (self.rs_group > i).any():
            return None
        nbins = 1 << (self.band_lo + i)
        image = np.zeros((self.num_rows, nbins), np.uint32)
        rb = self.row_bounds
        r0 = 0
        while r0 < self.num_rows:
            r1 = r0 + 1  # grow the block while it stays small
            while (r1 < self.num_rows and (r1 + 1 - r0) * nbins <= _CHUNK
                   and rb[r1 + 1] - rb[r0] <= _CHUNK):
                r1 += 1
            a, b = int(rb[r0]), int(rb[r1])
            if b > a:
                self._band_block(i, a, b, r0, r1, image[r0:r1], colors)
            r0 = r1
        return image

    def _band_block(self, i: int, a: int, b: int, r0: int, r1: int, out: np.ndarray,
                    colors: np.ndarray) -> None:
        """Fill ``out`` (rows ``r0:r1`` of band ``i``'s image) from the bars at (row, start)
        positions ``a:b``."""
        nbins = out.shape[1]
        w = float(self.widths[i])
        narrow = self.rs_group[a:b] > i
        if not narrow.any():
            return
        s, e = self.rs_start[a:b][narrow], self.rs_end[a:b][narrow]
        r, k = self.rs_row[a:b][narrow] - r0, self.rs_kind[a:b][narrow]
        j = np.minimum((s / w).astype(np.int64), nbins - 1)
        key = r * nbins + j
        edge = (j + 1) * w
        cover = np.minimum(e, edge) - s + 1e-300  # the part in its first bin; +tiny: zero-length
        over = np.flatnonzero((e > edge) & (j + 1 < nbins))  # a bar below a bin spans two at most
        if over.size:
            key = np.concatenate([key, key[over] + 1])
            cover = np.concatenate([cover, e[over] - edge[over]])
            k = np.concatenate([k, k[over]])
        size = (r1 - r0) * nbins
        present = np.flatnonzero(np.bincount(k))
        if present.size == 1:
            total = np.bincount(key, weights=cover, minlength=size)
            best = np.full(size, present[0])
        else:  # one dense pass per kind, keeping the running maximum
            total = np.zeros(size)
            best_time = np.zeros(size)
            best = np.zeros(size, np.int64)
            better = np.empty(size, bool)
            for kk in present.tolist():
                m = k == kk
                t = np.bincount(key[m], weights=cover[m], minlength=size)
                total += t
                np.greater(t, best_time, out=better)
                np.copyto(best_time, t, where=better)
                np.copyto(best, kk, where=better)
        cells = np.flatnonzero(total)
        out.reshape(-1)[cells] = colors[best[cells], _shade_step(total[cells] / w)]


class _LayoutSignals(QtCore.QObject):
    """Carries a worker thread's results to the GUI thread (queued: the object lives there)."""

    layout = Signal(int, object)  # generation, _Layout
    band = Signal(int, int, object)  # generation, band index, image or None
    summary = Signal(int, int, object)  # generation, bins, summary_image


class _Preparation:
    """One worker thread building a :class:`_Layout` and its band images.

    The band the GUI wants (:attr:`wanted`, set by paints) goes first, then
    the others nearest to it. :meth:`cancel` stops it between steps.
    """

    def __init__(self, generation: int, arrays: tuple, colors: np.ndarray, signals: _LayoutSignals,
                 summary_bins: int = 0):
        """``summary_bins``: first emit the :func:`summary_image` of that many bins (0: none)."""
        self.generation = generation
        self.wanted = -1
        self._summary_bins = summary_bins
        self._cancel = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(arrays, colors, signals),
                                        name=f"timeline-layout-{generation}", daemon=True)
        self._thread.start()

    def cancel(self) -> None:
        """Stop after the current step; nothing more is emitted."""
        self._cancel.set()

    def join(self, timeout_s: float | None = None) -> bool:
        """Wait for the thread; True when it has ended."""
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def _emit(self, signal, *args) -> bool:
        if self._cancel.is_set():
            return False
        try:
            signal.emit(self.generation, *args)
        except RuntimeError:  # the item (and its signals object) is gone
            self._cancel.set()
            return False
        return True

    def _run(self, arrays: tuple, colors: np.ndarray, signals: _LayoutSignals) -> None:
        if self._summary_bins:
            start, end, kind, row, num_rows, duration = arrays
            row = np.asarray(row() if callable(row) else row)  # once, for both
            arrays = (start, end, kind, row, num_rows, duration)
            t_end = float(end.max()) if end.size else 0.0
            image = summary_image(start, end, kind, row, num_rows, t_end, self._summary_bins,
                                  colors)
            if not self._emit(signals.summary, self._summary_bins, image):
                return
        layout = _Layout(*arrays)
        if not self._emit(signals.layout, layout):
            return
        remaining = set(range(layout.num_bands))
        last = layout.num_bands // 2
        while remaining and not self._cancel.is_set():
            i = self.wanted if self.wanted in remaining else min(remaining, key=lambda j: abs(j - last))
            image = layout.band_image(i, colors)
            if not self._emit(signals.band, i, image):
                return
            remaining.discard(i)
            last = i


class GanttItem(pg.GraphicsObject):
    """All bars of a timeline in one graphics item.

    Item coordinates: x in seconds from iteration start, y in rows (row ``r``
    spans ``[r, r+1)``). Bounds come from the numpy extents of the data.
    """

    #: The data given to :meth:`set_tasks` is laid out (emitted in the GUI thread).
    layout_ready = Signal()

    def __init__(self) -> None:
        super().__init__()
        self._layout: _Layout | None = None
        self._prep: _Preparation | None = None
        self._pending: tuple | None = None  # arrays to lay out in a thread once the item is painted
        self._generation = 0
        self._signals = _LayoutSignals()
        self._signals.layout.connect(self._on_layout)
        self._signals.band.connect(self._on_band)
        self._signals.summary.connect(self._on_summary)
        self._summary: tuple[int, np.ndarray] | None = None  # (bins, image) until the layout        self._num_rows = 0
        #: lanes per pipeline stage (compute, comm and the other streams the graph uses)
        self.streams_per_stage = 2
        self._num_tasks = 0
        self._t_end = 0.0
        self._lanes = np.empty((0, 4))
        self._colors = _color_table()
        self._brushes = [QtGui.QBrush(kind_color(k)) for k in range(len(KINDS))]
        self._shaded: dict[tuple[int, float], QtGui.QBrush] = {}
        self._pens = [pg.mkPen(kind_color(k).darker(150), width=1, cosmetic=True)
                      for k in range(len(KINDS))]
        self._lane_brushes = [QtGui.QBrush(c) for c in _LANE_COLORS]
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
        if self._prep is not None:
            self._prep.cancel()
            self._prep = None
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
            self._layout = _Layout(*arrays)
            self.layout_ready.emit()
        self.update()

    @Slot(int, int, object)
    def _on_summary(self, generation: int, bins: int, image: np.ndarray) -> None:
        if generation != self._generation or self._layout is not None:
            return
        self._summary = (bins, image)
        self.update()

    @property
    def summary(self) -> tuple[int, np.ndarray] | None:
        """``(bins, image)`` drawn while the layout of a huge iteration is being built
        (:func:`summary_image`), or None."""
        return self._summary

    @Slot(int, object)
    def _on_layout(self, generation: int, layout: _Layout) -> None:
        if generation != self._generation:
            return
        self._layout = layout
        self._summary = None
        self._cache_key = None
        if layout.num_bands == 0:
            self._prep = None  # no band images to wait for
        self.update()
        self.layout_ready.emit()

    @Slot(int, int, object)
    def _on_band(self, generation: int, i: int, image: np.ndarray | None) -> None:
        if generation != self._generation or self._layout is None:
            return
        self._layout.images[i] = image
        self._cache_key = None
        if i == self.last_paint_band or self._prep is not None and self._prep.wanted == i:
            self.update()
        if len(self._layout.images) == self._layout.num_bands:
            self._prep = None  # all done

    @property
    def layout(self) -> _Layout | None:
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
                bins = 1 << int(min(max(b, _BAND_MIN), 14))
            self._prep = _Preparation(self._generation, arrays, self._colors, self._signals,
                                      summary_bins=bins)

    def wait_ready(self, timeout_s: float = 30.0) -> bool:
        """Process events until :attr:`is_ready` (tests, benchmarks, screenshots); True on success."""
        self._start_preparation()
        deadline = QtCore.QDeadlineTimer(int(timeout_s * 1000))
        app = QtCore.QCoreApplication.instance()
        while not self.is_ready and not deadline.hasExpired():
            if self._prep is not None:
                self._prep.join(0.005)
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
                prep.join(0.005)
            app.processEvents()
        return self.view_ready or self.is_ready

    def shutdown(self) -> None:
        """Stop a worker thread that still prepares the layout (the widget is going away)."""
        self._pending = None
        if self._prep is not None:
            self._prep.cancel()
            self._prep.join(5.0)
            self._prep = None

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
            lay.images[i] = lay.band_image(i, self._colors)
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
        ``1 / _SHADES``); exact bars have opacity 1. Empty while the layout is
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

        ``pixels`` is uint32 premultiplied ARGB, shape ``(num_rows, c)``, column
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
        nbins = image.shape[1]
        c0 = min(max(int(math.floor(x0 / w)), 0), nbins)
        c1 = min(max(int(math.ceil(x1 / w)) + 1, c0), nbins)
        if c1 <= c0:
            return None
        return image[:, c0:c1], c0 * w, w

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
            merged = self._small_bars(rects[:, 0], rects[:, 2], rows, kinds, px_s, x0)
            out = [(k, r, False, shade) for k, r, shade in merged] + out
        return out

    def _small_bars(self, start: np.ndarray, dur: np.ndarray, row: np.ndarray, kind: np.ndarray,
                    px_s: float, origin: float) -> list[tuple[int, np.ndarray, float]]:
        """Rectangles for bars narrower than a pixel, as ``(kind, rects (k, 4), opacity)``.

        Few bars are widened to one pixel, with the opacity of their own width.
        Many are merged (level of detail): each (row, pixel column) cell gets
        the kind that covers most of its time and the opacity of the time all
        its bars cover, and runs of adjacent cells with the same kind and
        opacity become one rectangle. Cells are
        ``row * columns + floor((start - origin) / px_s)``.
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
            color = kind_color(kind)
            color.setAlphaF(shade)
            brush = self._shaded[(kind, shade)] = QtGui.QBrush(color)
        return brush

    def _draw_band_image(self, painter: QtGui.QPainter, x0: float, x1: float, px_s: float) -> None:
        """Draw the visible columns of the band image: one ``drawImage`` per row, each pixel row
        of the image stretched over the row's bar area (as the rectangles are)."""
        part = self.band_image_in_view(x0, x1, px_s)
        if part is None:
            return
        pixels, left, w = part
        rows, cols = pixels.shape
        pixels = np.ascontiguousarray(pixels)
        image = QtGui.QImage(pixels.data, cols, rows, cols * 4,
                             QtGui.QImage.Format.Format_ARGB32_Premultiplied)
        busy = np.flatnonzero(pixels.any(axis=1)).tolist()
        for r in busy:
            painter.drawImage(QtCore.QRectF(left, r + _BAR_TOP, cols * w, _BAR_HEIGHT), image,
                              QtCore.QRectF(0, r, cols, 1))
        del image  # before `pixels`, whose memory it points into

    def _draw_summary(self, painter: QtGui.QPainter) -> None:
        """Draw the summary image over the whole iteration, one ``drawImage`` per busy row."""
        bins, pixels = self._summary
        pixels = np.ascontiguousarray(pixels)
        rows, cols = pixels.shape
        image = QtGui.QImage(pixels.data, cols, rows, cols * 4,
                             QtGui.QImage.Format.Format_ARGB32_Premultiplied)
        for r in np.flatnonzero(pixels.any(axis=1)).tolist():
            painter.drawImage(QtCore.QRectF(0.0, r + _BAR_TOP, self._t_end, _BAR_HEIGHT), image,
                              QtCore.QRectF(0, r, cols, 1))
        del image  # before `pixels`, whose memory it points into

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


def task_description(graph: ExecutionGraph, schedule: Schedule, index: int) -> str:
    """One line describing task ``index``: kind, stage, stream, micro-batch, layer, start, duration."""
    kind = KINDS[int(graph.kind[index])]
    parts = [KIND_LABELS.get(kind, kind),
             f"stage {int(graph.stage[index])} {STREAMS[int(graph.stream[index])]}"]
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
        self.gantt.layout_ready.connect(self._on_layout_ready)
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
        n_lanes = len(graph.lanes)
        self._lane_streams = graph.lanes
        self.gantt.streams_per_stage = n_lanes
        num_rows = int(graph.num_stages) * n_lanes
        if graph.num_tasks:  # the largest row (stage * lanes + lane) it could hold
            num_rows = max(num_rows, (int(graph.stage.max()) + 1) * n_lanes)
        self._clear_lookup()  # hover finds tasks once the layout is there (_on_layout_ready)
        # rows and durations are computed with the layout (off the GUI thread when large)
        self.gantt.set_tasks(schedule.start_s, None, graph.kind, lambda: graph.row, num_rows,
                             end_s=schedule.end_s)
        if self.gantt.layout is None:
            self._info.setText(f"{graph.num_tasks:,} tasks: the whole iteration at a glance; "
                               "preparing zoom and hover…"
                               if graph.num_tasks >= SUMMARY_MIN_TASKS else
                               f"Preparing the timeline of {graph.num_tasks:,} tasks…")

        self._set_row_ticks(num_rows)
        self._set_legend(np.flatnonzero(np.bincount(graph.kind, minlength=len(KINDS))).tolist())
        t_end = self.gantt.end_s or 1e-9
        self.view_box.setLimits(xMin=-0.02 * t_end, xMax=1.02 * t_end, yMin=0, yMax=num_rows,
                                minXRange=t_end * 1e-6, maxXRange=1.04 * t_end)
        self.reset_view()
        self._set_hover(-1, None)

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
    def is_ready(self) -> bool:
        """Whether the data is laid out and every zoom band prepared."""
        return self.gantt.is_ready

    def clear(self) -> None:
        """Remove all bars."""
        self._graph = self._schedule = None
        self.gantt.set_tasks(np.empty(0), np.empty(0), np.empty(0, np.int8), np.empty(0), 0)
        self._clear_lookup()
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
        lane_streams = getattr(self, "_lane_streams", (0, 1))
        n_streams = len(lane_streams)
        if row_px >= metrics.height() or num_rows == 0:
            ticks = [(r + 0.5, f"stage {r // n_streams} {STREAMS[lane_streams[r % n_streams]]}")
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
            items.append(f'<span style="color:{kind_color(k).name()}; font-size:14pt;">&#9632;</span>'
                         f"&nbsp;{label}")
        items.append('<span style="color:#DCE1EA; font-size:14pt;">&#9632;</span>&nbsp;idle&nbsp;(bubble)')
        # bars narrower than a pixel are merged; their opacity is the lane's busy share there
        base, lane = QtGui.QColor(KIND_COLORS["tp_comm"]), _LANE_COLORS[1]
        swatches = "".join(
            f'<span style="color:{_blend(base, lane, step / _SHADES)}; font-size:14pt;">&#9632;</span>'
            for step in (1, 3, _SHADES))
        items.append(f"{swatches}&nbsp;paler&nbsp;=&nbsp;busy&nbsp;part&nbsp;of&nbsp;the&nbsp;time")
        lanes = getattr(self, "_lane_streams", (0, 1))
        if len(lanes) > 1:  # the rows of one stage, top to bottom (unlabelled when zoomed out)
            items.append("lanes&nbsp;per&nbsp;stage:&nbsp;" + "&nbsp;/&nbsp;".join(
                STREAMS[i].replace(" ", "&nbsp;") for i in lanes))
        self._legend.setText("&nbsp;&nbsp; ".join(items))
        self._legend.setToolTip(
            "Where bars are narrower than a pixel or two, each such stretch of the lane shows "
            "the share of its time the lane is busy as the opacity (in steps of 1/5): a pale "
            "stretch of a communication lane is many short collectives with gaps between them, "
            "not one long one.")
