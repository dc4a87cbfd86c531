"""The Compare tab: a pinned plan (A) against the plan in the editor (B).

The two timelines stand one above the other on one linked time axis; the
difference of their iteration times is drawn as a waterfall of the terms of
:func:`core.studies.diff.diff_results` (green: the term makes B faster, red: slower; the
last bar is the total difference), with memory per GPU and cost of both plans
in a table. Every number comes from :mod:`core.studies.diff`; this module only lays out.
"""

from __future__ import annotations

import html

import numpy as np
import pyqtgraph as pg
from PySide6 import QtGui, QtWidgets
from PySide6.QtCore import Qt, Slot

from core.sim.labels import MEMORY_FIGURES, TIME_TERMS, capitalized, short_name
from core.studies.diff import PlanDiff, beyond_plan_text, diff_results, plan_label
from core.sim.report import gib_texts
from core.sim.simulate import device_gpu_note
from core.util.text import signed

from .category_axis import CategoryAxis
from .cost_panel import WARNING_COLOR, OneLineLabel
from .empty_state import EmptyStack, under_banner, warning_banner
from .formatting import (VERDICT_COLORS, duration_formatter, format_day_count, format_duration,
                         format_usd)
from .timeline.widget import TimelineWidget

__all__ = ["CompareTab", "FASTER_COLOR", "SLOWER_COLOR", "TOTAL_COLOR", "TABLE_ROWS"]

#: Bar colours of the waterfall: a term that makes B faster, slower, and the total difference.
FASTER_COLOR = "#2E9E4F"
SLOWER_COLOR = "#D0433B"
TOTAL_COLOR = "#4A6FA5"
_NEUTRAL_COLOR = "#9AA0A6"
#: Rows of the table of both plans' figures (``cell_text`` takes a row by its name); the memory
#: rows named as ``vtrain diff`` names them (:data:`core.sim.labels.MEMORY_FIGURES`).
TABLE_ROWS = ("Iteration time",
              *(capitalized(MEMORY_FIGURES[k]) for k in ("max_memory_per_gpu_bytes",
                                                         "memory_capacity_bytes",
                                                         "memory_verdict")),
              "Training days", "Cost")
_FITS_ROW = TABLE_ROWS.index(capitalized(MEMORY_FIGURES["memory_verdict"]))

_NOTHING_PINNED = ("<p style='font-size:13pt'><b>Nothing pinned yet</b></p>"
                   "<p>Choose <b>Plan &gt; Pin plan for comparison</b> (Ctrl+Shift+P) to keep the "
                   "plan in the editor as plan A, then change the plan in the editor (or pick one "
                   "in Explore): its timeline, the breakdown of the difference and the memory "
                   "and cost of both plans appear here.</p>")
_WAITING = ("<p style='font-size:13pt'><b>Waiting for the editor's plan</b></p>"
            "<p>Plan A is pinned. The comparison appears once the plan in the editor has been "
            "simulated; fix the fields marked in red if there are any.</p>")


def _gib(num_bytes: float) -> str:
    """Bytes as GiB with one decimal (``"80.0"``), ``"–"`` when unknown."""
    return f"{num_bytes / 2**30:,.1f}" if np.isfinite(num_bytes) else "–"


def _verdict_text(plan: dict) -> str:
    """``"fits"``, ``"tight (78.2 of 80.0 GiB)"`` or ``"does not fit (87.9 of 80.0 GiB)"`` for
    one plan of :meth:`core.studies.diff.PlanDiff.to_dict` (need of the GPU's capacity); a
    plan tight because it fits only once the allocator frees its cache says so
    (``"tight (80.3 of 80.0 GiB with the cache)"``)."""
    verdict = plan["memory_verdict"]
    if verdict == "fits":
        return verdict
    need_b, cap_b = plan["max_memory_per_gpu_bytes"], plan["memory_capacity_bytes"]
    need, cap = gib_texts(need_b, cap_b)
    cache = " with the cache" if verdict == "tight" and need_b > cap_b else ""
    return f"{verdict} ({need} of {cap} GiB{cache})"


def _set_warnings(line: OneLineLabel, name: str, warnings: list[str]) -> None:
    """Plan ``name``'s (``"A"``, ``"B"``) ``warnings`` on ``line`` as the Plan tab shows a
    report's (:class:`vtrain_gui.cost_panel.CostPanel`): the first after "⚠ " cut to fit with
    "(+N more, hover)", every one in the tooltip; hidden when there are none."""
    line.setVisible(bool(warnings))
    if not warnings:
        line.set_full_text("", tooltip="")
        return
    more = f"(+{len(warnings) - 1} more, hover)" if len(warnings) > 1 else ""
    items = "".join(f"<li>{html.escape(w)}</li>" for w in warnings)
    line.set_full_text(f"⚠ {warnings[0]}", suffix=more,
                       tooltip=f"<b>Warnings of {name}</b><ul>{items}</ul>")


class CompareTab(QtWidgets.QWidget):
    """Plan A (pinned) against plan B (the editor's latest result).

    Call :meth:`set_pinned` with a ``core.sim.simulate.SimulationResult`` (None clears
    the pin) and :meth:`set_current` with each new result of the editor; the view
    redraws when both are there, else shows an empty state saying what to do.
    """

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self._pinned = None
        self._current = None
        self._diff: PlanDiff | None = None

        self._w_label_a = QtWidgets.QLabel()
        self._w_label_b = QtWidgets.QLabel()
        for label in (self._w_label_a, self._w_label_b):
            label.setStyleSheet("font-weight: bold; padding: 2px 6px;")
            label.setTextFormat(Qt.TextFormat.RichText)  # the memory verdict in its colour
            label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            # a modern plan's title (cp, fp8, overlaps ...) is ~1,900 px on one line: it wraps
            # rather than widen the window past the screen
            label.setWordWrap(True)
        # each plan's report warnings (collectives extrapolated beyond the measured sizes, the
        # flex dispatcher's buffers not counted ...), as the Plan tab shows them: the first on
        # one line under the title, all on hover; vtrain diff prints them (warning: A: ...)
        self._w_warnings_a = OneLineLabel()
        self._w_warnings_b = OneLineLabel()
        for line in (self._w_warnings_a, self._w_warnings_b):
            line.setStyleSheet(f"color: {WARNING_COLOR}; padding: 0px 6px;")
            line.setVisible(False)
        # the plans are not all that differs: the waterfall is not the plans' difference alone
        self._w_beyond = warning_banner("beyond_plan", padding=6, extra_style="font-size: 11pt;")
        self._w_beyond.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self._w_timeline_a = TimelineWidget()
        self._w_timeline_b = TimelineWidget()
        # one time axis: B follows A's zoom and pan (and A follows B's); pyqtgraph aligns linked
        # views by screen position, so both keep the wider lane labels' width
        self._w_timeline_b.plot.getPlotItem().setXLink(self._w_timeline_a.plot.getPlotItem())
        for timeline in (self._w_timeline_a, self._w_timeline_b):
            timeline.label_width_changed.connect(self._align_label_widths)

        # the terms' names fit their bars: wrapped, else elided, in full on hover (at 1,280 px
        # "overlap wait" ran into "imbalance")
        self._w_waterfall = pg.PlotWidget(background="w",
                                          axisItems={"bottom": CategoryAxis(fit="wrap")})
        item = self._w_waterfall.getPlotItem()
        item.setMenuEnabled(False)
        item.setMouseEnabled(x=False, y=False)
        # on two lines: on one (616 px) it set the plot's least width, wider than the 584 px
        # the table leaves it at 1,024 px, and the plot was cut on the right: the total's bar
        item.setTitle("Iteration time B − A, by term<br>(green: makes B faster, red: slower; "
                      "blue: the total)", color="#202020")
        item.setLabel("left", "B − A", units="s")
        item.showGrid(y=True, alpha=0.25)
        for name in ("left", "bottom"):
            axis = item.getAxis(name)
            axis.setPen(pg.mkPen("#404040"))
            axis.setTextPen(pg.mkPen("#202020"))
        self._bars = pg.BarGraphItem(x=[], y0=[], height=[], width=0.7)
        item.addItem(self._bars)
        item.addItem(pg.InfiniteLine(pos=0, angle=0, pen=pg.mkPen("#606060")))

        self._w_table = QtWidgets.QTableWidget(len(TABLE_ROWS), 3)
        self._w_table.setHorizontalHeaderLabels(["A (pinned)", "B (editor)", "B − A"])
        self._w_table.setVerticalHeaderLabels(list(TABLE_ROWS))
        self._w_table.setEditTriggers(QtWidgets.QAbstractItemView.EditTrigger.NoEditTriggers)
        self._w_table.horizontalHeader().setSectionResizeMode(
            QtWidgets.QHeaderView.ResizeMode.Stretch)
        self._w_table.setMinimumWidth(380)
        self._w_table.setMaximumWidth(520)

        bottom = QtWidgets.QSplitter(Qt.Orientation.Horizontal)
        bottom.addWidget(self._w_waterfall)
        bottom.addWidget(self._w_table)
        bottom.setStretchFactor(0, 3)
        bottom.setStretchFactor(1, 1)
        bottom.setChildrenCollapsible(False)

        split = QtWidgets.QSplitter(Qt.Orientation.Vertical)
        for label, line, timeline in ((self._w_label_a, self._w_warnings_a, self._w_timeline_a),
                                      (self._w_label_b, self._w_warnings_b, self._w_timeline_b)):
            split.addWidget(under_banner(under_banner(label, line, spacing=0), timeline,
                                         spacing=0))
        split.addWidget(bottom)
        split.setStretchFactor(0, 2)
        split.setStretchFactor(1, 2)
        split.setStretchFactor(2, 2)
        split.setChildrenCollapsible(False)

        self.view = EmptyStack(under_banner(self._w_beyond, split), _NOTHING_PINNED)
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.view)

    # ------------------------------------------------------------------ public API
    # The widgets below are drawn when the tab is shown (or first read): pinning a plan and
    # every new editor result while the tab is hidden only mark the comparison as due, so
    # the GUI thread does not diff and lay out two timelines for a tab nobody looks at.
    @property
    def label_a(self) -> QtWidgets.QLabel:
        """Title of plan A's timeline (drawn first if due)."""
        self._flush()
        return self._w_label_a

    @property
    def label_b(self) -> QtWidgets.QLabel:
        """Title of plan B's timeline (drawn first if due)."""
        self._flush()
        return self._w_label_b

    @property
    def warnings_a(self) -> OneLineLabel:
        """Plan A's warnings under its title: the first (``full_text``, "(+N more, hover)"),
        all of them in the tooltip; hidden when it has none (drawn first if due)."""
        self._flush()
        return self._w_warnings_a

    @property
    def warnings_b(self) -> OneLineLabel:
        """Plan B's warnings under its title (see :attr:`warnings_a`)."""
        self._flush()
        return self._w_warnings_b

    @property
    def beyond_plan_note(self) -> QtWidgets.QLabel:
        """The note over the comparison naming what differs besides the plan (model, cluster,
        cost: :func:`core.studies.diff.beyond_plan`); hidden when only the plans differ."""
        self._flush()
        return self._w_beyond

    @property
    def timeline_a(self) -> TimelineWidget:
        """Plan A's timeline (drawn first if due)."""
        self._flush()
        return self._w_timeline_a

    @property
    def timeline_b(self) -> TimelineWidget:
        """Plan B's timeline (drawn first if due)."""
        self._flush()
        return self._w_timeline_b

    @property
    def waterfall(self) -> pg.PlotWidget:
        """The waterfall of the difference's terms (drawn first if due)."""
        self._flush()
        return self._w_waterfall

    @property
    def table(self) -> QtWidgets.QTableWidget:
        """The table of both plans' figures (drawn first if due)."""
        self._flush()
        return self._w_table

    def showEvent(self, event: QtGui.QShowEvent) -> None:  # noqa: N802 - Qt API
        super().showEvent(event)
        self._flush()

    @property
    def pinned(self):
        """The pinned ``SimulationResult`` (plan A), or None."""
        return self._pinned

    @property
    def diff(self) -> PlanDiff | None:
        """The :class:`core.studies.diff.PlanDiff` on screen (None in the empty state)."""
        self._flush()
        return self._diff

    @property
    def is_empty(self) -> bool:
        """Whether the empty state is shown."""
        return self.view.is_empty

    @Slot(int)
    def _align_label_widths(self, _pixels: int = 0) -> None:
        """Both timelines' lane labels as wide as the wider: the plots then start at the same
        x, and the linked time axis shows both from 0."""
        wide = max(self._w_timeline_a.label_width, self._w_timeline_b.label_width)
        for timeline in (self._w_timeline_a, self._w_timeline_b):
            timeline.set_label_width_floor(wide)

    def set_pinned(self, result) -> None:
        """Pin ``result`` as plan A (None: unpin)."""
        self._pinned = result
        self._refresh()

    def set_current(self, result) -> None:
        """The editor's latest ``SimulationResult`` (plan B)."""
        self._current = result
        self._refresh()

    def bar_heights(self) -> list[float]:
        """Heights (seconds) of the waterfall's bars: one per term of the diff, then the total."""
        self._flush()
        opts = self._bars.opts
        return [float(h) for h in np.asarray(opts.get("height", []), float)]

    def bar_bottoms(self) -> list[float]:
        """Bottoms (seconds) of the waterfall's bars, in the order of :meth:`bar_heights`."""
        self._flush()
        return [float(y) for y in np.asarray(self._bars.opts.get("y0", []), float)]

    def bar_names(self) -> list[str]:
        """Names under the waterfall's bars: core.studies.diff's term names, then ``'total'``."""
        self._flush()
        return list(self._names)

    def bar_colors(self) -> list[str]:
        """``'#rrggbb'`` of each bar, in the order of :meth:`bar_heights`."""
        self._flush()
        return list(self._colors)

    # ------------------------------------------------------------------ drawing
    _names: list[str] = []
    _colors: list[str] = []

    def _refresh(self) -> None:
        self._due = False
        if self._pinned is None:
            self._diff = None
            self.view.set_empty(True, _NOTHING_PINNED)
            return
        if self._current is None:
            self._diff = None
            self.view.set_empty(True, _WAITING)
            return
        self._diff = None
        self._due = True
        self.view.set_empty(False)
        if self.isVisible():
            self._flush()

    def _flush(self) -> None:
        """Draw the comparison if it is due (:meth:`_refresh` marked it)."""
        if not getattr(self, "_due", False):
            return
        self._due = False
        a, b = self._pinned, self._current
        self._diff = diff_results(a, b)
        beyond = self._diff.to_dict()["beyond_plan"]
        self._w_beyond.setText(
            "<b>A and B differ beyond the plan</b> (the differences below are not the plans' "
            "alone): " + html.escape(beyond_plan_text(beyond)) if beyond else "")
        self._w_beyond.setVisible(bool(beyond))
        for label, line, name, r in ((self._w_label_a, self._w_warnings_a, "A (pinned)", a),
                                     (self._w_label_b, self._w_warnings_b, "B (editor)", b)):
            # the model, then the GPUs: the count is what most often sets the cost apart
            # a plan that is tight or does not fit says so by its time (B "faster" by 1.3 s
            # did not say that it needs 156 GiB of 80), as the Explore preview's title does
            verdict = r.report.memory_verdict
            mark = ("" if verdict == "fits" else
                    f' — <span style="color:{VERDICT_COLORS[verdict]};">'
                    f"{html.escape(r.report.memory_verdict_text)}</span>")
            # a plan on another GPU's profile store (cluster.profile_path) is that GPU's times,
            # while its title names cluster.gpu: it says so, as vtrain simulate and diff warn
            device = r.report.profile.get("device")
            other = device_gpu_note(device, r.session.cluster) if device else None
            if other:
                mark += (f' — <span style="color:{VERDICT_COLORS["tight"]};">'
                         f"{html.escape(other)}</span>")
            # the report's other warnings (the title says the one of another GPU's store)
            _set_warnings(line, name[0], [w for w in r.report.warnings if w != other])
            label.setText(html.escape(f"{name}: {r.session.model.name}, {r.report.num_gpus:,} x "
                                      f"{r.session.cluster.gpu}, "
                                      f"{plan_label(r.session)}  ·  "
                                      f"{format_duration(r.report.iteration_time_s)} per "
                                      "iteration") + mark)
        self._w_timeline_a.set_data(a.graph, a.schedule)
        self._w_timeline_b.set_data(b.graph, b.schedule)
        # one time axis: both views may show the longer iteration
        t_end = max(self._w_timeline_a.gantt.end_s, self._w_timeline_b.gantt.end_s, 1e-9)
        for tl in (self._w_timeline_a, self._w_timeline_b):
            tl.view_box.setLimits(xMin=-0.02 * t_end, xMax=1.02 * t_end,
                                  maxXRange=1.04 * t_end)
        self._w_timeline_a.view_box.setXRange(-0.005 * t_end, 1.01 * t_end, padding=0.0)
        self._draw_waterfall(self._diff)
        self._fill_table(self._diff)

    def _draw_waterfall(self, diff: PlanDiff) -> None:
        # the terms vtrain diff prints: not those neither plan has (a zero bar took a slot,
        # and at 1,280 px the names of the others were cut)
        names = diff.shown_terms()
        heights = [diff.terms[n] for n in names]
        # each term's bar starts where the sum of the terms before it ends
        bottoms = np.concatenate([[0.0], np.cumsum(heights)[:-1]]) if heights else np.empty(0)
        colors = [SLOWER_COLOR if h > 0 else FASTER_COLOR if h < 0 else _NEUTRAL_COLOR
                  for h in heights]
        names.append("total")
        heights.append(diff.difference_s)
        bottoms = np.append(bottoms, 0.0)
        colors.append(TOTAL_COLOR)
        self._names, self._colors = names, colors
        x = np.arange(len(names), dtype=float)
        self._bars.setOpts(x=x, y0=bottoms, height=np.asarray(heights, float), width=0.7,
                           brushes=[pg.mkBrush(c) for c in colors],
                           pens=[pg.mkPen(c) for c in colors])
        axis = self._w_waterfall.getPlotItem().getAxis("bottom")
        # the terms' short names under the bars; on hover in full, as vtrain diff prints them
        # (core.sim.labels.TIME_TERMS), with the bar's seconds
        tips = [f"{TIME_TERMS.get(n, n)}: {self._signed_duration(h)}"
                for n, h in zip(names[:-1], heights[:-1])]
        tips.append(f"iteration time B − A: {self._signed_duration(diff.difference_s)}")
        axis.set_categories([short_name(n) for n in names], tips)
        tops = np.concatenate([bottoms, bottoms + np.asarray(heights, float)])
        lo, hi = float(min(tops.min(), 0.0)), float(max(tops.max(), 0.0))
        pad = 0.08 * (hi - lo or 1e-6)
        vb = self._w_waterfall.getPlotItem().getViewBox()
        vb.setRange(xRange=(-0.6, len(names) - 0.4), yRange=(lo - pad, hi + pad), padding=0.0)

    @staticmethod
    def _signed_duration(seconds: float) -> str:
        """``"+1.234 s"``, ``"−12.09 ms"`` (:func:`format_duration` with its sign)."""
        text = format_duration(abs(seconds))
        return ("−" if seconds < 0 else "+" if seconds > 0 else "") + text

    def bar_tooltips(self) -> list[str]:
        """What hovering each bar's name shows, in the order of :meth:`bar_heights`."""
        self._flush()
        return list(self._w_waterfall.getPlotItem().getAxis("bottom").tooltips())

    def _fill_table(self, diff: PlanDiff) -> None:
        """Fill the table from :meth:`core.studies.diff.PlanDiff.to_dict` (a plan that does not fit, or
        fits tightly, says so in its column; its need, the capacity and the margin on hover)."""
        d = diff.to_dict()
        a, b = d["a"], d["b"]

        # a difference that reads zero has no sign, in every row: never "−0.0" (the days of
        # two 0.009-day plans) nor "+0.000 s" (core.util.text.signed, as vtrain diff)
        def delta(value: float, text_of) -> str:
            return signed(value, text_of, minus="−") if np.isfinite(value) else "–"

        def gib_delta(num_bytes: float) -> str:
            return delta(num_bytes / 2**30, lambda x: f"{x:,.1f} GiB")

        # in GiB, as vtrain diff prints them: the need and the capacity with the decimals
        # that keep a need over the capacity reading above it (core.sim.report.gib_texts)
        need_a, cap_a = gib_texts(a["max_memory_per_gpu_bytes"], a["memory_capacity_bytes"])
        need_b, cap_b = gib_texts(b["max_memory_per_gpu_bytes"], b["memory_capacity_bytes"])
        if not np.isfinite(a["memory_capacity_bytes"]):
            need_a, cap_a = _gib(a["max_memory_per_gpu_bytes"]), "–"
        if not np.isfinite(b["memory_capacity_bytes"]):
            need_b, cap_b = _gib(b["max_memory_per_gpu_bytes"]), "–"
        # the row in one unit, the longer iteration's: "+42.95 ms" read beside "2.484 s"
        seconds = duration_formatter(a["iteration_time_s"], b["iteration_time_s"])
        rows = [
            (seconds(a["iteration_time_s"]), seconds(b["iteration_time_s"]),
             delta(d["difference_s"], seconds)),
            (f"{need_a} GiB", f"{need_b} GiB", gib_delta(d["memory_difference_bytes"])),
            (f"{cap_a} GiB" if cap_a != "–" else cap_a, f"{cap_b} GiB" if cap_b != "–" else cap_b,
             gib_delta(b["memory_capacity_bytes"] - a["memory_capacity_bytes"])),
            (_verdict_text(a), _verdict_text(b), ""),
            # days as everywhere else (core.util.text.format_days): "0.009", not "0.0"
            (format_day_count(a["training_days"]), format_day_count(b["training_days"]),
             delta(d["training_days_difference"], format_day_count)),
            (format_usd(a["cost_usd"]), format_usd(b["cost_usd"]),
             delta(d["cost_difference_usd"], format_usd)),
        ]
        for r, cells in enumerate(rows):
            for c, text in enumerate(cells):
                cell = QtWidgets.QTableWidgetItem(text)
                cell.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                if r == _FITS_ROW and c < 2:
                    verdict = (a, b)[c]["memory_verdict"]
                    if verdict != "fits":
                        cell.setForeground(QtGui.QColor(VERDICT_COLORS[verdict]))
                        plan = (a, b)[c]
                        cached = plan["max_memory_per_gpu_bytes"] > plan["memory_capacity_bytes"]
                        cell.setToolTip(plan["memory_verdict_text"] + (
                            " (need per GPU of the GPU's memory, with the allocator's cache)"
                            if verdict == "tight" and cached else
                            " (need per GPU of the GPU's memory; the margin is "
                            "cluster.memory_reserve_fraction)"))
                self._w_table.setItem(r, c, cell)
        self._fit_table_width()
        self._w_table.resizeRowsToContents()  # a long verdict wraps instead of being cut

    def _fit_table_width(self) -> None:
        """The table at least as wide as its row names and its widest cell in each column (the
        memory verdict's figures wrap instead):
        at 1,280 px the stretched columns cut "$1,682,122" to "$1,682,…" and broke the cost's
        difference after its sign."""
        table = self._w_table
        fm = table.fontMetrics()
        # the verdict's figures may wrap (resizeRowsToContents): not measured
        cells = max((fm.horizontalAdvance(item.text()) + 12 for r in range(table.rowCount())
                     for c in range(table.columnCount())
                     if r != _FITS_ROW and (item := table.item(r, c)) is not None), default=0)
        heads = max((table.horizontalHeader().sectionSizeHint(c)
                     for c in range(table.columnCount())), default=0)
        need = (table.verticalHeader().sizeHint().width() + table.columnCount() * max(cells, heads)
                + 2 * table.frameWidth() + table.verticalScrollBar().sizeHint().width())
        table.setMinimumWidth(max(380, need))
        table.setMaximumWidth(max(520, need))

    def cell_text(self, row: int | str, column: int) -> str:
        """Text of the table's cell (rows: :data:`TABLE_ROWS`, by index or name; columns: A,
        B, B − A); for tests."""
        self._flush()
        if isinstance(row, str):
            row = TABLE_ROWS.index(row)
        item = self._w_table.item(row, column)
        return item.text() if item is not None else ""
