"""Gantt view of one simulated iteration: one row per pipeline stage and stream (and a further
one, "comm (2)", for tasks a stream runs at the same time as another: :mod:`.lanes`).

Modules: :mod:`.lanes` (each task's row), :mod:`.layout` (Qt-free numpy columns and merged images of the bars, and the
background :class:`~.layout.Preparation` job), :mod:`.colors` (kind and lane colours),
:mod:`.items` (:class:`~.items.GanttItem`, the batched graphics item) and :mod:`.widget`
(:class:`~.widget.TimelineWidget`: the view with legend, hover, zoom and pan).

Drawing is batched and its cost does not grow with the number of tasks:

* **Zoom bands.** Band ``b`` cuts the iteration ``[0, T]`` into ``2**b`` bins
  of width ``T / 2**b``. A paint uses the band whose bins are one to two
  device pixels wide. In a band, bars at least a bin wide are drawn as
  rectangles (one ``QPainter.drawRects`` call per kind, straight from
  float64 ``(n, 4)`` arrays sliced to the visible time range with
  ``np.searchsorted``); narrower bars are merged into the
  band's image, :data:`~.layout.STRIPS` pixels per (row, bin) stretched over the
  bar's height: strips stacked by the kinds' shares of the bin's time
  (:func:`~.layout.stack_kinds`; a kind with at least ``1 / STRIPS`` of it always
  has one, so recomputation beside a backward step twice as long is seen, not
  painted over by the kind with the most time), at an opacity given by the part
  of the bin's time the row is busy (one of :data:`~.layout.SHADES` steps), so a
  stream busy 10 % of the time in thousands of short bars reads as a pale band,
  not as solid colour. A paint draws the visible columns of that image (one
  ``drawImage`` per row) and, bars on a row not overlapping, at most one
  rectangle per pixel and row.
* **Off the GUI thread.** The sorted arrays and the band images depend only on
  the data: :class:`~.layout.Layout` (numpy only) builds them once per data set. For
  more than :data:`~.items.SYNC_MAX_TASKS` tasks a worker thread (a
  :class:`vtrain_gui.background.BackgroundRunner`, started by the first paint, so a
  hidden view costs nothing) builds them, the band in view first, and hands each piece to the GUI thread through a queued signal;
  until then the lanes are drawn empty (and hover finds nothing). Smaller
  data sets are prepared at once and their bands on first use.
* Zoomed in beyond the finest band (few tasks in view), the visible bars are
  drawn exactly and only those below a pixel are merged, per (row, pixel), in
  the same strips.
* **Huge iterations** (at least :data:`~.items.SUMMARY_MIN_TASKS` tasks) are summarized
  first: the worker's first step merges every bar into the bins of the view the
  first paint asked for (:func:`~.layout.summary_image`, no sorting), drawn until the
  layout arrives. A picture of the whole iteration (``--screenshot``:
  :meth:`~.widget.TimelineWidget.wait_view_ready`) needs nothing more.
"""
