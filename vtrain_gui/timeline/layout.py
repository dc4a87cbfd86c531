"""Draw-ready numpy columns of a timeline's bars (Qt-free: built on worker threads too).

:class:`Layout` sorts one iteration's bars by (row, start) and by (kind, width class) and
merges the bars narrower than a zoom band's bins into one image per band
(:meth:`Layout.band_image`); :func:`summary_image` merges all bars of a huge iteration without
sorting; :func:`small_bar_rects` merges bars below a pixel when zoomed in beyond the finest
band. :class:`Preparation` is the Qt-free job that builds a layout and its band images in the
background (run by :class:`vtrain_gui.background.BackgroundRunner`).

A merged cell (a row's bin or pixel column) is drawn as :data:`STRIPS` horizontal strips
stacked by the kinds' shares of its time (:func:`stack_kinds`, largest-remainder rounding), so
that every kind holding at least ``1 / STRIPS`` of a cell's time is seen: a recomputation step
beside a backward step twice as long gets a strip of its own instead of losing the whole
cell to the backward (as Perfetto and Nsight Systems show every kind that has time). The
images hold one code per (row, strip, bin), ``kind * (SHADES + 1) + opacity step``
(:func:`cell_code`; 0 is empty); :func:`vtrain_gui.timeline.colors.color_table` flattened is
their palette of premultiplied ARGB pixels.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Any, Callable

import numpy as np

from core.sim.graph_types import KINDS

__all__ = ["Layout", "KindColumn", "Preparation", "summary_image", "small_bar_rects", "shade_step",
           "stack_kinds", "cell_code", "BAR_TOP", "BAR_HEIGHT", "BAND_MIN", "SHADES", "STRIPS"]

#: Bars occupy this part of their row (in row units, y grows downwards).
BAR_TOP, BAR_HEIGHT = 0.12, 0.76
#: Above this many sub-pixel bars in view (zoomed in beyond the finest band), merge them per pixel.
_LOD_MIN_SMALL_BARS = 2000
#: Coarsest zoom band (2**BAND_MIN bins over the iteration).
BAND_MIN = 6
#: The finest band has at most this many (row, bin) pixels; 4 bytes each.
_BAND_MAX_PIXELS = 1 << 22
#: Band images are computed in blocks of rows of at most this many bars or pixels.
_CHUNK = 1 << 19
#: Opacity steps of merged sub-pixel bars: a bin busy a fraction f of its time gets
#: opacity ceil(f * SHADES) / SHADES.
SHADES = 5
#: A merged cell is drawn as this many strips stacked by the kinds' shares of its time: a kind
#: with at least ``1 / STRIPS`` of the cell's time gets at least one strip (:func:`stack_kinds`).
STRIPS = 4
#: dtype of the band images' codes (``len(KINDS) * (SHADES + 1)`` codes).
_CODE_DTYPE = np.uint8 if len(KINDS) * (SHADES + 1) <= 256 else np.uint16


def cell_code(kind, step):
    """Code of a merged cell's strip: ``kind * (SHADES + 1) + step`` (index into the flattened
    :func:`vtrain_gui.timeline.colors.color_table`; step 0, code 0 of kind 0, is empty)."""
    return np.asarray(kind) * (SHADES + 1) + np.asarray(step)


def stack_kinds(time_s: np.ndarray, kinds: np.ndarray) -> np.ndarray:
    """The kind of each of the :data:`STRIPS` strips of merged cells, stacked by share.

    Parameters
    ----------
    time_s : float array, shape (c, K)
        Seconds of each of ``K`` kinds in each of ``c`` cells (each row's sum > 0).
    kinds : int array, shape (K,)
        Kind index (into :data:`core.sim.graph_types.KINDS`) of each column of ``time_s``.

    Returns
    -------
    int64 array, shape (c, STRIPS)
        Strip ``s`` (top to bottom) of cell ``i`` is ``kinds[...]``, the kinds in ``kinds``'s
        order, each over a number of strips proportional to its share, rounded by largest
        remainder (Hamilton's method): a kind holding a share ``f`` gets ``floor(f * STRIPS)``
        or one more strip, so one with ``f >= 1 / STRIPS`` is always drawn.
    """
    c, K = time_s.shape
    out = np.empty((c, STRIPS), np.int64)
    if c == 0:
        return out
    if K == 1:
        out[:] = kinds[0]
        return out
    quota = time_s * (STRIPS / time_s.sum(axis=1, keepdims=True)) + 1e-9  # (c, K)
    count = np.floor(quota).astype(np.int64)
    left = STRIPS - count.sum(axis=1)                                     # (c,) in 0..K-1
    order = np.argsort(count - quota, axis=1, kind="stable")              # largest remainder first
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.broadcast_to(np.arange(K), order.shape), axis=1)
    count += rank < left[:, None]                                         # each row sums to STRIPS
    out[:] = np.repeat(np.tile(kinds, c), count.reshape(-1)).reshape(c, STRIPS)
    return out


def _stacked_codes(time_s: np.ndarray, kinds: np.ndarray, step: np.ndarray) -> np.ndarray:
    """Codes ``(c, STRIPS)`` of cells with ``time_s`` (c, K) per kind and opacity ``step`` (c,):
    cells with one kind fill all strips with it without :func:`stack_kinds`' sort."""
    code = cell_code(kinds[time_s.argmax(axis=1)], step).astype(_CODE_DTYPE)  # (c,)
    codes = np.repeat(code[:, None], STRIPS, axis=1)                      # (c, STRIPS)
    mixed = np.flatnonzero(np.count_nonzero(time_s, axis=1) > 1)
    if mixed.size:
        codes[mixed] = cell_code(stack_kinds(time_s[mixed], kinds), step[mixed, None])
    return codes


def _put_strips(out: np.ndarray, cells: np.ndarray, codes: np.ndarray) -> None:
    """Write ``codes`` (c, STRIPS) into image ``out`` (rows, STRIPS, nbins) at flat
    (row, bin) cells ``cells`` (c,): one 1-d scatter per strip."""
    nbins = out.shape[2]
    flat = out.reshape(-1)
    base = cells + (cells // nbins) * ((STRIPS - 1) * nbins)  # (row * STRIPS) * nbins + bin
    for strip in range(STRIPS):
        flat[base + strip * nbins] = codes[:, strip]


def shade_step(busy: np.ndarray) -> np.ndarray:
    """Opacity step ``1..SHADES`` of pixels busy a fraction ``busy`` of their time; shape kept."""
    return np.clip(np.ceil(np.asarray(busy) * SHADES), 1, SHADES).astype(np.int64)


class KindColumn:
    """The tasks of one kind as drawable rectangle rows, grouped by width class.

    Group ``g`` holds the tasks drawn as rectangles from band index ``g`` on
    (:attr:`Layout.group`); inside a group tasks are sorted by start.
    """

    __slots__ = ("kind", "start", "rects", "bounds", "max_duration")

    def __init__(self, kind: int, start: np.ndarray, duration: np.ndarray, row: np.ndarray,
                 group: np.ndarray, num_groups: int):
        """Arrays of shape (n_k,), already sorted by (group, start)."""
        self.kind = kind
        self.start = np.ascontiguousarray(start)
        rects = np.empty((start.size, 4), dtype=np.float64)  # (n_k, 4): x, y, w, h
        rects[:, 0] = start
        rects[:, 1] = row + BAR_TOP
        rects[:, 2] = duration
        rects[:, 3] = BAR_HEIGHT
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
                  num_rows: int, t_end: float, nbins: int) -> np.ndarray:
    """Every bar merged into ``nbins`` bins of ``t_end / nbins`` seconds per row: codes
    (:func:`cell_code`) of shape ``(num_rows, STRIPS, nbins)``, as :meth:`Layout.band_image`
    merges the narrow bars (the strips stacked by the kinds' time in the bin, the opacity step
    of the bin's busy share), but of all bars, wide ones too, and without sorting the tasks.

    Parameters
    ----------
    start, end : float64 arrays, shape (n,)
        Seconds.
    kind, row : int arrays, shape (n,)
        Kind (index into :data:`core.sim.graph_types.KINDS`) and row (``0..num_rows-1``).

    A bar adds the time it overlaps each bin to that bin's tally of its kind: its first and
    last bins directly, the whole bins between them through a count per (row, kind, bin)
    whose running sum over the bins is exact. Works through blocks of :data:`_CHUNK` tasks so
    that no numpy call holds the interpreter long.
    """
    n = start.shape[0]
    image = np.zeros((num_rows, STRIPS, nbins), _CODE_DTYPE)
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
    per_kind = per_kind.transpose(0, 2, 1).reshape(num_rows * nbins, K)  # (rows * nbins, K)
    total = per_kind.sum(axis=1)
    cells = np.flatnonzero(total)                                         # row * nbins + bin
    _put_strips(image, cells, _stacked_codes(per_kind[cells], present,
                                             shade_step(total[cells] / w)))
    return image


def _small_int(a: np.ndarray) -> np.ndarray:
    """``a`` as int16 when its values fit (numpy's stable sort is then a radix sort)."""
    return a.astype(np.int16) if a.size == 0 or (a.min() >= 0 and a.max() < 2**15) else a


class Layout:
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
    columns : list of KindColumn
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
            num_bands = max(0, finest - BAND_MIN + 1)
        self.band_lo = BAND_MIN
        self.num_bands = num_bands
        self.widths = self.t_end / 2.0 ** np.arange(BAND_MIN, BAND_MIN + num_bands)
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
            self.columns.append(KindColumn(k, start[idx], duration[idx], row[idx].astype(np.float64),
                                            self.group[idx], num_bands))
        self.images: dict[int, np.ndarray | None] = {}

    def band_for(self, px_s: float) -> int:
        """Band index whose bins are 1 to 2 pixels of ``px_s`` seconds wide; ``num_bands`` when
        zoomed in beyond the finest band (0 when zoomed out beyond the coarsest)."""
        if self.num_bands == 0 or not px_s > 0:
            return self.num_bands
        b = math.floor(math.log2(self.t_end / px_s))
        return int(min(max(b - self.band_lo, 0), self.num_bands))

    def band_image(self, i: int) -> np.ndarray | None:
        """The merged picture of band ``i``'s narrow bars: codes (:func:`cell_code`) of shape
        ``(num_rows, STRIPS, 2**(band_lo+i))``.

        Every bar narrower than a bin adds the time it
        overlaps each bin to that bin's tally of its kind; a bin with any bar
        gets :data:`STRIPS` strips stacked by the kinds' tallies (:func:`stack_kinds`: a
        kind with at least ``1 / STRIPS`` of the bin's time has a strip) and the opacity
        step of its busy share (the tallies' sum over the bin width; at least the lowest
        step, so zero-length tasks show). None when no bar is that narrow.
        Works through blocks of rows of at most :data:`_CHUNK` bars or pixels, so
        that no numpy call holds the interpreter long (the GUI thread runs meanwhile).
        """
        if not (self.rs_group > i).any():
            return None
        nbins = 1 << (self.band_lo + i)
        image = np.zeros((self.num_rows, STRIPS, nbins), _CODE_DTYPE)
        rb = self.row_bounds
        r0 = 0
        while r0 < self.num_rows:
            r1 = r0 + 1  # grow the block while it stays small
            while (r1 < self.num_rows and (r1 + 1 - r0) * nbins <= _CHUNK
                   and rb[r1 + 1] - rb[r0] <= _CHUNK):
                r1 += 1
            a, b = int(rb[r0]), int(rb[r1])
            if b > a:
                self._band_block(i, a, b, r0, r1, image[r0:r1])
            r0 = r1
        return image

    def _band_block(self, i: int, a: int, b: int, r0: int, r1: int, out: np.ndarray) -> None:
        """Fill ``out`` (rows ``r0:r1`` of band ``i``'s image, ``(r1 - r0, STRIPS, nbins)``)
        from the bars at (row, start) positions ``a:b``."""
        nbins = out.shape[2]
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
        counts = np.bincount(k)
        present = np.flatnonzero(counts)
        if present.size == 1:
            total = np.bincount(key, weights=cover, minlength=size)
            cells = np.flatnonzero(total)
            code = cell_code(present[0], shade_step(total[cells] / w)).astype(_CODE_DTYPE)
            _put_strips(out, cells, np.broadcast_to(code[:, None], (cells.size, STRIPS)))
            return
        K = present.size
        slot = np.zeros(counts.size, np.int64)
        slot[present] = np.arange(K)
        # the kinds' time per cell in one pass: (size, K)
        per_kind = np.bincount(key * K + slot[k], weights=cover, minlength=size * K).reshape(size, K)
        total = np.bincount(key, weights=cover, minlength=size)           # (size,)
        cells = np.flatnonzero(total)                                     # (c,)
        _put_strips(out, cells, _stacked_codes(per_kind[cells], present,
                                               shade_step(total[cells] / w)))


def small_bar_rects(start: np.ndarray, dur: np.ndarray, row: np.ndarray, kind: np.ndarray,
                px_s: float, origin: float) -> list[tuple[int, np.ndarray, float]]:
    """Rectangles for bars narrower than ``px_s`` seconds (a pixel), as ``(kind, rects (k, 4), opacity)``.

    ``start``, ``dur`` (seconds), ``row`` and ``kind`` are arrays of shape (s,).

    Few bars are widened to one pixel, with the opacity of their own width.
    Many are merged (level of detail): each (row, pixel column) cell gets the
    opacity of the time all its bars cover and is drawn whole in its one kind
    or, holding several, as :data:`STRIPS` strips stacked by the kinds' time
    (:func:`stack_kinds`); runs of adjacent cells with the same kind, opacity
    and strip become one rectangle. Cells are
    ``row * columns + floor((start - origin) / px_s)``.
    """
    n = start.shape[0]
    if n == 0:
        return []
    if n <= _LOD_MIN_SMALL_BARS:
        out = []
        step = shade_step(dur / px_s)
        for k in np.unique(kind):
            for lv in np.unique(step[kind == k]):
                m = (kind == k) & (step == lv)
                rects = np.empty((int(m.sum()), 4))
                rects[:, 0] = start[m]
                rects[:, 1] = row[m] + BAR_TOP
                rects[:, 2] = px_s
                rects[:, 3] = BAR_HEIGHT
                out.append((int(k), rects, lv / SHADES))
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
    step = shade_step(cover.sum(axis=1) / px_s)
    # pieces: a one-kind cell whole (strip -1), a mixed cell as STRIPS strips (0..STRIPS-1)
    single = (cover > 0).sum(axis=1) <= 1
    one = np.flatnonzero(single)
    mix = np.flatnonzero(~single)
    strip_kind = stack_kinds(cover[mix], np.arange(nk))                   # (m, STRIPS) slots
    piece_cell = np.concatenate([one, np.repeat(mix, STRIPS)])            # compact cell index
    piece_strip = np.concatenate([np.full(one.size, -1), np.tile(np.arange(STRIPS), mix.size)])
    piece_slot = np.concatenate([cover[one].argmax(axis=1), strip_kind.reshape(-1)])
    order = np.lexsort((piece_cell, piece_strip))                         # strip, then cell
    piece_cell, piece_strip, piece_slot = piece_cell[order], piece_strip[order], piece_slot[order]
    pc, ps = cells[piece_cell], step[piece_cell]
    brk = np.ones(pc.size, dtype=bool)
    brk[1:] = ((np.diff(pc) != 1) | (piece_slot[1:] != piece_slot[:-1]) | (ps[1:] != ps[:-1])
               | (piece_strip[1:] != piece_strip[:-1]) | (pc[1:] // ncols != pc[:-1] // ncols))
    run_first = np.flatnonzero(brk)
    length = np.diff(np.append(run_first, pc.size))
    run_cell, run_slot, run_step = pc[run_first], piece_slot[run_first], ps[run_first]
    run_strip = piece_strip[run_first]
    strip_h = BAR_HEIGHT / STRIPS
    merged = np.empty((run_first.size, 4))
    merged[:, 0] = origin + (run_cell % ncols) * px_s
    merged[:, 1] = run_cell // ncols + BAR_TOP + np.maximum(run_strip, 0) * strip_h
    merged[:, 2] = length * px_s
    merged[:, 3] = np.where(run_strip < 0, BAR_HEIGHT, strip_h)
    out = []
    for s_, k in enumerate(kinds_present):
        for lv in np.unique(run_step[run_slot == s_]):
            part = merged[(run_slot == s_) & (run_step == lv)]
            out.append((int(k), np.ascontiguousarray(part), lv / SHADES))
    return out


#: Held by a :class:`Preparation` while it computes one step: the layouts of several timelines
#: (the Plan and Explore tabs', the Compare tab's two) take turns instead of all competing with
#: the GUI thread (and a sweep) for the interpreter at once.
_TURN = threading.Lock()
#: Seconds a preparation sleeps before each step: the GUI thread runs meanwhile.
_YIELD_S = 0.002


class Preparation:
    """The Qt-free job building a :class:`Layout` and its band images (run on a worker thread).

    :meth:`run` is a :data:`vtrain_gui.background.Job`: it reports, in this order,
    ``(generation, "summary", bins, image)`` (with ``summary_bins``: :func:`summary_image`
    first), ``(generation, "layout", layout)`` and one ``(generation, "band", i, image)`` per
    zoom band: the band the GUI wants (:attr:`wanted`, set by paints) first, then the others
    nearest to it. It stops between steps once its cancel event is set.

    Parameters
    ----------
    generation : int
        Number of the data set (the receiver drops reports of older ones).
    arrays : tuple
        ``(start, end, kind, row, num_rows, duration)``: the arguments of :class:`Layout`.
    summary_bins : int
        Bins of the summary image reported first (0: none).
    """

    def __init__(self, generation: int, arrays: tuple, summary_bins: int = 0):
        self.generation = generation
        self.wanted = -1
        self._arrays = arrays
        self._summary_bins = summary_bins

    def run(self, report: Callable[[Any], None], cancel: threading.Event) -> None:
        """Build and report the pieces (see the class); returns None."""
        def emit(*payload: Any) -> bool:
            if cancel.is_set():
                return False
            report((self.generation, *payload))
            return True

        def turn() -> Any:  # one timeline's step at a time, and the GUI thread between steps
            time.sleep(_YIELD_S)
            return _TURN

        arrays = self._arrays
        self._arrays = None  # the layout holds what it needs
        if self._summary_bins:
            start, end, kind, row, num_rows, duration = arrays
            row = np.asarray(row() if callable(row) else row)  # once, for both
            arrays = (start, end, kind, row, num_rows, duration)
            t_end = float(end.max()) if end.size else 0.0
            with turn():
                image = summary_image(start, end, kind, row, num_rows, t_end,
                                      self._summary_bins)
            if not emit("summary", self._summary_bins, image):
                return
        with turn():
            layout = Layout(*arrays)
        if not emit("layout", layout):
            return
        remaining = set(range(layout.num_bands))
        last = layout.num_bands // 2
        while remaining and not cancel.is_set():
            i = self.wanted if self.wanted in remaining else min(remaining, key=lambda j: abs(j - last))
            with turn():
                image = layout.band_image(i)
            if not emit("band", i, image):
                return
            remaining.discard(i)
            last = i
