"""Report figures of one simulation: time, throughput, cost and memory per GPU."""

from __future__ import annotations

import html
import math
from typing import Callable

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtGui, QtWidgets
from PySide6.QtCore import Qt, Signal

from core.sim.labels import (MEMORY_TERMS, TIME_TERM_MEANINGS, TIME_TERMS, capitalized, hidden)
from core.sim.report import Report, gib_texts
from core.store.interval import band_conditions
from core.store.profiles import method_text
from core.util.text import format_amount, format_energy

from .category_axis import CategoryAxis
from .empty_state import StaleVeil
from .formatting import (IDLE_COLOR, KIND_COLORS, duration_formatter, format_bytes, format_count,
                         format_day_count, format_fraction, format_rate, format_usd, format_usd_short)
from .wrapped_label import label_document

__all__ = ["CostPanel", "FIT_STATES", "OneLineLabel", "WARNING_COLOR"]

_GIB = float(2**30)
#: What the memory chart's "To fit" line shows (:attr:`CostPanel.fit_changes_state`).
FIT_STATES = ("none", "searching", "found", "failed")
#: Colour of each memory term (:class:`core.model.stage_memory.StageMemory` attribute); the
#: names are core's (:data:`core.sim.labels.MEMORY_TERMS`), as in ``vtrain simulate``'s table.
_MEMORY_COLORS = {"weights_bytes": "#4C78A8", "gradients_bytes": "#72B7B2",
                  "optimizer_bytes": "#B279A2", "activations_bytes": "#F58518",
                  "workspace_bytes": "#E45756", "allocator_reserve_bytes": "#9D755D",
                  "cuda_context_bytes": "#BAB0AC", "nccl_buffer_bytes": "#54A24B"}
#: Memory parts of :class:`core.sim.report.StageMemory`: attribute, label, colour.
_MEMORY_PARTS = tuple((k, MEMORY_TERMS[k], c) for k, c in _MEMORY_COLORS.items())
#: Report terms of the time breakdown (:class:`core.sim.report.Report`'s ``<term>_s``) and
#: their colours, in the bar's order; a communication term in its kind's timeline colour.
_BREAKDOWN_COLORS = {"compute": "#4C78A8", "comm": KIND_COLORS["tp_comm"],
                     "pp_comm": KIND_COLORS["pp_p2p"], "cp_comm": KIND_COLORS["cp_p2p"],
                     "ep_comm": KIND_COLORS["ep_all_to_all"], "bubble": IDLE_COLOR,
                     "overlap_wait": "#A8B4C4", "imbalance": "#E6D5C3"}
#: The breakdown bar's parts: report attribute, name (:data:`core.sim.labels.TIME_TERMS`), colour.
_BREAKDOWN = tuple((f"{k}_s", TIME_TERMS[k], c) for k, c in _BREAKDOWN_COLORS.items())


#: The short names of the kinds whose hidden parts share the TP/DP collectives' row.
_SHORT_KIND = {"tp_comm": "TP", "dp_comm": "DP"}


def _with_hidden(exposed_s: float, hidden_s: float,
                 fmt: Callable[[float], str] | None = None) -> str:
    """An exposed communication time and, when some ran hidden under other work, that part in
    parentheses, both in one unit: ``"0.00 ms (13.98 ms hidden)"``, not ``"0.000 s (13.98 ms
    hidden)"``; ``fmt`` (:func:`duration_formatter`): the unit of the panel's column, else
    that of the larger of the two."""
    fmt = fmt or duration_formatter(exposed_s, hidden_s)
    if not hidden_s > 0:
        return fmt(exposed_s)
    return f"{fmt(exposed_s)} ({fmt(hidden_s)} hidden)"


def _with_named_hidden(exposed_s: float, *parts: tuple[str, float],
                       fmt: Callable[[float], str] | None = None) -> tuple[str, str]:
    """The exposed TP/DP collectives' time (seconds) and, named, each kind's part that ran
    hidden under other work (``parts``: :data:`core.sim.labels.KIND_NAMES` key, seconds), all
    in one unit, as ``vtrain simulate``'s "Per stage (mean)" line names them
    (:func:`core.sim.labels.hidden`): ``("0.00 ms (hidden TP 13.98 ms, hidden DP 2.10 ms)",
    "hidden TP collectives 13.98 ms, hidden DP collectives 2.10 ms")``; the second is the
    tooltip ("" when nothing ran hidden). Each hidden part is said hidden before its number:
    ``0.247 s (TP 0.244 s, DP 6.987 s hidden)`` read as 0.244 s of TP exposed. ``fmt``
    (:func:`duration_formatter`): the unit of the panel's column, else that of the largest."""
    shown = [(k, s) for k, s in parts if s > 0]
    fmt = fmt or duration_formatter(exposed_s, *(s for _, s in shown))
    if not shown:
        return fmt(exposed_s), ""
    exposed, *hidden_texts = (fmt(x) for x in (exposed_s, *(s for _, s in shown)))
    short = ", ".join(f"hidden {_SHORT_KIND[k]} {t}" for (k, _), t in zip(shown, hidden_texts))
    tip = ", ".join(f"{hidden(k)} {t}" for (k, _), t in zip(shown, hidden_texts))
    return f"{exposed} ({short})", tip
#: Figures that describe running the plan: flagged when the plan does not fit in memory.
_RUN_FIGURES = ("iteration_time", "tokens_per_s", "mfu", "hfu", "training_days", "gpu_hours",
                "cost_usd", "run_days")
_NO_FIT_COLOR = "#C62828"
#: Figures whose text can be long: shown on one line, cut to fit (:class:`OneLineLabel`).
_ONE_LINE = ("band_note", "profile", "num_parameters")
_CAPACITY_COLOR = "#D62728"
#: The figures, top to bottom: (key, name); a name of None makes a heading.
_FIGURE_ROWS = (
    ("Iteration", None),
    ("iteration_time", "Iteration time"),
    ("iteration_band", "Error band"),
    ("band_note", ""),
    ("tokens_per_s", "Throughput"),
    ("mfu", "MFU (model FLOPs utilization)"),
    ("hfu", "HFU (hardware FLOPs utilization)"),
    ("bubble_fraction", "Pipeline bubble fraction"),
    ("Time per iteration (mean over stages)", None),
    *((k, capitalized(TIME_TERMS[k])) for k in _BREAKDOWN_COLORS),
    ("breakdown", ""),
    ("Training run", None),
    ("num_parameters", "Model parameters"),
    ("gpus", "GPUs"),
    ("microbatches", "Micro-batches per iteration"),
    ("iterations", "Iterations"),
    ("training_days", "Training time"),
    ("gpu_hours", "GPU-hours"),
    ("cost_usd", "Cost"),
    ("run_band", "    band"),
    ("run_days", "With failures"),
    ("profile", "Profile"),
)


class _BreakdownBar(QtWidgets.QWidget):
    """A horizontal stacked bar of compute / communication / bubble seconds."""

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self._values: list[float] = []
        self._brushes = [QtGui.QBrush(QtGui.QColor(c)) for _, _, c in _BREAKDOWN]
        self.setMinimumHeight(16)
        self.setMaximumHeight(18)

    def set_values(self, values: list[float]) -> None:
        """Seconds per part, in the order of ``_BREAKDOWN``."""
        self._values = [max(float(v), 0.0) for v in values]
        self.update()

    def paintEvent(self, event) -> None:  # noqa: N802 - Qt API
        painter = QtGui.QPainter(self)
        rect = self.rect().adjusted(0, 1, -1, -1)
        painter.setPen(QtGui.QColor("#B0B4BA"))
        painter.drawRect(rect)
        total = sum(self._values)
        if total <= 0:
            return
        painter.setPen(Qt.PenStyle.NoPen)
        x = float(rect.left() + 1)
        width = float(rect.width() - 1)
        for value, brush in zip(self._values, self._brushes):
            w = width * value / total
            painter.fillRect(int(round(x)), rect.top() + 1, int(round(x + w)) - int(round(x)),
                             rect.height() - 1, brush)
            x += w
        painter.end()


class _FigureLabel(QtWidgets.QLabel):
    """A name or value of the figures: on one line when its column is wide enough, wrapped at
    spaces when it is narrower (never cut). Its size hint is its text on one line (QLabel's
    hint for a word-wrapped text is as narrow as a quarter of 80 average characters whenever
    that takes under four lines: two lines for "Micro-batches per iteration"); its minimum is
    its longest word."""

    def __init__(self, text: str = "", parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(text, parent)
        self.setWordWrap(True)

    def sizeHint(self) -> QtCore.QSize:  # noqa: N802 - Qt API
        doc = label_document(self)  # as QLabel lays rich text out
        line = (math.ceil(doc.idealWidth()) if doc is not None
                else self.fontMetrics().horizontalAdvance(self.text()))
        margins = self.contentsMargins()
        # 2 pixels over the text's advance: at exactly it, QLabel wrapped the last word
        width = line + margins.left() + margins.right() + 2 * self.margin() + 2
        width = max(width, self.minimumSizeHint().width())
        return QtCore.QSize(width, self.heightForWidth(width))


class _FiguresScroll(QtWidgets.QScrollArea):
    """The figures' scroll area: it asks for the width its figures take on one line each (and
    its scroll bar), so that the memory chart beside it gives up its width first; narrower
    than that (down to the figures' minimum, their longest words) the names and values wrap.
    QScrollArea's own hint is a guess from the font (271 pixels of the 503 the figures
    asked), and the figures' width used to be their minimum."""

    def sizeHint(self) -> QtCore.QSize:  # noqa: N802 - Qt API
        hint = super().sizeHint()
        widget = self.widget()
        if widget is None:
            return hint
        bar = self.verticalScrollBar().sizeHint().width()
        return QtCore.QSize(widget.sizeHint().width() + bar + 4, hint.height())


class _ChartColumn(QtWidgets.QWidget):
    """The memory chart's column: it asks for no more width than its minimum (the title and
    legend wrap), and takes what the figures leave (its stretch in the panel's layout)."""

    def sizeHint(self) -> QtCore.QSize:  # noqa: N802 - Qt API
        hint = super().sizeHint()
        return QtCore.QSize(self.minimumSizeHint().width(), hint.height())


#: The colour of a report's warnings (the Plan tab's figures, the Compare tab's titles).
WARNING_COLOR = "#B35C00"


class OneLineLabel(QtWidgets.QLabel):
    """A label that always takes one line: its text cut with "…" to the width it gets, a
    ``suffix`` (e.g. "(+2 more)") kept whole after it, and the whole text in the tooltip.

    Its height never depends on its width (nothing wraps), so the figures' height is known
    before the layout runs, and a long warning never pushes the figures into a scroll area.
    """

    def __init__(self, parent: QtWidgets.QWidget | None = None, max_lines: int = 1) -> None:
        super().__init__(parent)
        self._full = ""
        self._suffix = ""
        self._tooltip: str | None = None
        # more than one: the text wraps onto up to this many lines, the last one cut (the
        # height then follows the width; "To fit in memory: n…" said nothing at 1,280 px)
        self._max_lines = max(1, int(max_lines))
        self._height_floor = 0
        # takes the width the column has; never widens it
        self.setSizePolicy(QtWidgets.QSizePolicy.Policy.Ignored,
                           QtWidgets.QSizePolicy.Policy.Fixed)
        self.setTextFormat(Qt.TextFormat.PlainText)

    def set_full_text(self, text: str, suffix: str = "", tooltip: str | None = None) -> None:
        """Show ``text`` (cut to fit) followed by ``suffix``; the tooltip is ``tooltip`` or,
        when the text is cut, the whole text."""
        self._full, self._suffix = text, suffix
        self._tooltip = tooltip
        self._elide()

    def set_height_floor(self, pixels: int) -> None:
        """Never lower than ``pixels`` (with ``max_lines`` above one: the height follows the
        lines shown)."""
        self._height_floor = int(pixels)
        self.setMinimumHeight(self._height_floor)
        self._elide()

    def full_text(self) -> str:
        """The text before cutting, with its suffix."""
        return self._full + (f" {self._suffix}" if self._suffix else "")

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt API
        super().resizeEvent(event)
        self._elide()

    def _elide(self) -> None:
        metrics = self.fontMetrics()
        suffix = f" {self._suffix}" if self._suffix else ""
        width = self.contentsRect().width()
        lines = self._wrapped(self._full, width) if self._max_lines > 1 else [self._full]
        head, last = lines[:self._max_lines - 1], " ".join(lines[self._max_lines - 1:])
        room = max(0, width - metrics.horizontalAdvance(suffix) - 2)
        cut = metrics.elidedText(last, Qt.TextElideMode.ElideRight, room)
        shown = "\n".join([*head, cut])
        cut_short = cut != last
        super().setText(shown + suffix if self._full else "")
        if self._max_lines > 1:  # as tall as the lines shown
            margins = self.contentsMargins()
            self.setFixedHeight(max(self._height_floor,
                                    (len(head) + 1) * metrics.lineSpacing()
                                    + margins.top() + margins.bottom() + 2))
        shown = self._full if not cut_short else shown
        if self._tooltip is not None:
            self.setToolTip(self._tooltip)
        else:
            self.setToolTip(self._full if shown != self._full else "")

    def _wrapped(self, text: str, width: int) -> list[str]:
        """``text`` broken into lines at most ``width`` pixels wide (at spaces where it can)."""
        layout = QtGui.QTextLayout(text, self.font())
        option = QtGui.QTextOption()
        option.setWrapMode(QtGui.QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere)
        layout.setTextOption(option)
        layout.beginLayout()
        lines = []
        while True:
            line = layout.createLine()
            if not line.isValid():
                break
            line.setLineWidth(max(1, width))
            lines.append(text[line.textStart():line.textStart() + line.textLength()].rstrip())
        layout.endLayout()
        return lines or [""]


def _outside_text(iv) -> str:
    """How a banded prediction leaves what the profile was calibrated on, in a few words:
    outside the calibration range (GPU count or model size, ``in_calibration_range`` False),
    and or else beyond its runs' features (``departures``), or, when the only departure is the
    throughput ceiling (:data:`core.store.calibration_range.THROUGHPUT`), faster than every
    calibration run: a plan in range is not said to be outside it."""
    from core.store.calibration_range import THROUGHPUT
    features = [d.feature for d in iv.departures]
    if iv.in_calibration_range is False:
        return "outside the calibration range" + (" and its runs' features" if features else "")
    if features and set(features) == {THROUGHPUT}:
        return "predicted faster than every calibration run"
    return "beyond the calibration runs' features"


class CostPanel(QtWidgets.QWidget):
    """Figures of a :class:`core.sim.report.Report` and a memory-per-GPU chart by pipeline stage.

    Left: iteration time, tokens/s, MFU, HFU, bubble fraction, the time
    breakdown (compute / exposed communication / bubble, mean over stages),
    training days, GPU-hours and dollars, the profile the times came from and
    the report's warnings. Right: stacked bars of weights, gradients,
    optimizer state and activations per GPU of each stage, with the GPU's
    capacity as a red line and a red "does not fit" notice when a stage
    exceeds it.
    """

    #: The plan of the fastest change that makes the shown plan fit (a ParallelPlan), when
    #: the user asks to use it.
    fit_change_chosen = Signal(object)
    #: The figures' column changed width (its names and values wrap onto more or fewer
    #: lines: :meth:`figures_height` changed).
    figures_width_changed = Signal()

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self._report: Report | None = None
        self._fit_plan = None  # the plan "Use it" puts in the editor
        self._fit_state = "none"  # of the "To fit" line: FIT_STATES
        self._stale = False
        self._values: dict[str, QtWidgets.QLabel] = {}
        figures_scroll = self._build_figures()
        chart = self._build_memory_chart()

        layout = QtWidgets.QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(figures_scroll, 0)
        layout.addWidget(chart, 1)
        self._veil = StaleVeil(self)
        self.clear()
        self._fit_figures_width()

    # ------------------------------------------------------------------ building the panel
    def _build_figures(self) -> QtWidgets.QScrollArea:
        """The figures column (:data:`_FIGURE_ROWS` under the does-not-fit flag, the warnings
        last) in a scroll area."""
        figures = QtWidgets.QWidget()
        grid = QtWidgets.QGridLayout(figures)
        grid.setContentsMargins(6, 6, 6, 6)
        grid.setHorizontalSpacing(14)
        grid.setVerticalSpacing(2)  # 2, not 3: the run with failures fits at 1,600 x 1,000
        heading_font = QtGui.QFont(self.font())
        heading_font.setBold(True)
        big_font = QtGui.QFont(self.font())
        big_font.setPointSizeF(self.font().pointSizeF() * 1.15)
        big_font.setBold(True)
        names: dict[str, QtWidgets.QLabel] = {}
        # a plan that does not fit cannot run: its time and cost carry this flag
        self._no_fit_flag = OneLineLabel()  # the numbers in its tooltip and over the chart
        self._no_fit_flag.setObjectName("no_fit_flag")
        self._no_fit_flag.setStyleSheet(f"background: #FDECEA; color: {_NO_FIT_COLOR}; "
                                        "padding: 3px; font-weight: bold;")
        self._no_fit_flag.setVisible(False)
        grid.addWidget(self._no_fit_flag, 0, 0, 1, 2)
        for r, (key, label) in enumerate(_FIGURE_ROWS, 1):  # row 0: the flag
            self._add_figure_row(grid, r, key, label, names, heading_font, big_font)
        last = len(_FIGURE_ROWS) + 1
        self._band_names = {k: names[k] for k in ("iteration_band", "run_band")}
        # shown for context-parallel plans only (the others have no ring)
        self._cp_row = (names["cp_comm"], self._values["cp_comm"])
        # shown for mixture-of-experts plans with expert parallelism only
        self._ep_row = (names["ep_comm"], self._values["ep_comm"])
        # shown for plans that wait for overlapped communication only
        self._wait_row = (names["overlap_wait"], self._values["overlap_wait"])
        self._values["band_note"].setStyleSheet("color: #505860;")
        for key, color in _BREAKDOWN_COLORS.items():
            name = names[key]
            # wrapped, "send/recv" stays whole (a word joiner after the slash: Qt broke
            # "send/" from "recv")
            words = name.text().replace("/", "/&#8288;")
            name.setText(f'<span style="color:{color}; font-size:13pt;">&#9632;</span>&nbsp;'
                         f"{words}")
            name.setToolTip(TIME_TERM_MEANINGS[key])
        # one line whatever the number of warnings (the first, cut, and "+N more"); all of them
        # in the tooltip: the figures keep their height, so they fit under the timeline
        self._warnings = OneLineLabel()
        self._warnings.setObjectName("warnings")
        self._warnings.setStyleSheet(f"color: {WARNING_COLOR};")
        grid.addWidget(self._warnings, last, 0, 1, 2)
        grid.setRowStretch(last + 1, 1)
        # narrower than their lines, names and values give up width alike (a stretch on the
        # names took theirs first: "Iteration time" wrapped beside a value with room to
        # spare), the names never below 24 average characters (two lines at most)
        grid.setColumnMinimumWidth(0, 24 * self.fontMetrics().averageCharWidth())

        figures_scroll = _FiguresScroll()
        figures_scroll.setWidget(figures)
        figures_scroll.setWidgetResizable(True)
        figures_scroll.setFrameShape(QtWidgets.QFrame.Shape.NoFrame)
        figures_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self._figures = figures
        self._figures_scroll = figures_scroll
        figures_scroll.installEventFilter(self)
        return figures_scroll

    def _add_figure_row(self, grid: QtWidgets.QGridLayout, r: int, key: str, label: str | None,
                        names: dict[str, QtWidgets.QLabel], heading_font: QtGui.QFont,
                        big_font: QtGui.QFont) -> None:
        """Row ``r`` of the figures: a heading, the breakdown bar, or a name and its value
        (in :attr:`_values`; the name in ``names``)."""
        if label is None:
            heading = QtWidgets.QLabel(key)
            heading.setFont(heading_font)
            heading.setContentsMargins(0, 6 if r else 0, 0, 0)
            grid.addWidget(heading, r, 0, 1, 2)
            return
        if key == "breakdown":
            self._breakdown = _BreakdownBar()
            self._breakdown.setToolTip(" / ".join(name for _, name, _ in _BREAKDOWN))
            grid.addWidget(self._breakdown, r, 0, 1, 2)
            return
        # the lines that can be long take one line each, cut to fit, whole in the tooltip
        value = OneLineLabel() if key in _ONE_LINE else _FigureLabel("–")
        value.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        value.setObjectName(key)
        if key == "band_note":
            grid.addWidget(value, r, 0, 1, 2)
        elif key in _ONE_LINE:  # the name, then the value in all the width left
            row = QtWidgets.QWidget()
            row_layout = QtWidgets.QHBoxLayout(row)
            row_layout.setContentsMargins(0, 0, 0, 0)
            row_layout.setSpacing(14)
            row_layout.addWidget(QtWidgets.QLabel(label))
            value.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            row_layout.addWidget(value, 1)
            grid.addWidget(row, r, 0, 1, 2)
        else:
            # names and values wrap at spaces when the column is narrower than the line: a
            # 1,024 px window left the figures 367 pixels of their 503 (the window could not
            # be that narrow while 'With failures 2.9 days (2.9–2.9), $1,100, goodput 99.9 %'
            # took one line); wide enough, each takes one line as before
            name = names[key] = _FigureLabel(label)
            if key in ("iteration_time", "tokens_per_s", "mfu", "training_days", "cost_usd"):
                value.setFont(big_font)
            value.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            grid.addWidget(name, r, 0)
            grid.addWidget(value, r, 1)
        self._values[key] = value

    def _build_memory_chart(self) -> QtWidgets.QWidget:
        """The memory-per-GPU chart: title, fit line, legend, stacked bars, capacity line."""
        self._fit_label = QtWidgets.QLabel()
        self._fit_label.setWordWrap(True)
        # what would make a plan that does not fit (or is tight) fit: the fastest, all on hover
        self._fit_changes = OneLineLabel(max_lines=3)
        self._fit_changes.setObjectName("fit_changes")
        self._fit_changes.setVisible(False)
        # the stage numbers thinned to what fits (sixteen ran "9101112" at 1,280 px)
        self.memory_plot = pg.PlotWidget(background="w",
                                         axisItems={"bottom": CategoryAxis(fit="thin")})
        item = self.memory_plot.getPlotItem()
        item.setMenuEnabled(False)
        item.setMouseEnabled(x=False, y=False)
        item.hideButtons()
        for name in ("left", "bottom"):
            axis = item.getAxis(name)
            axis.setPen(pg.mkPen("#404040"))
            axis.setTextPen(pg.mkPen("#202020"))
            axis.enableAutoSIPrefix(False)  # stage numbers and GiB, never "(x0.001)"
        # the title over the chart says "Memory per GPU": the unit alone fits the short axis
        # of a 1,280 px window ("memory per GPU (GiB)" was cut to "memory per GPU (G")
        item.setLabel("left", "GiB")
        item.setLabel("bottom", "pipeline stage")
        item.showGrid(x=False, y=True, alpha=0.2)
        self._bars: list[pg.BarGraphItem] = []
        for attr, label, color in _MEMORY_PARTS:
            bar = pg.BarGraphItem(x=[], height=[], width=0.7, brush=pg.mkBrush(color),
                                  pen=pg.mkPen(QtGui.QColor(color).darker(130)))
            item.addItem(bar)
            self._bars.append(bar)
        self._capacity_line = pg.InfiniteLine(
            angle=0, movable=False,
            pen=pg.mkPen(_CAPACITY_COLOR, width=2, style=Qt.PenStyle.DashLine),
            )  # named in the legend above the chart: a label on the line would cover a bar
        self._capacity_line.setVisible(False)
        self._capacity_line.setZValue(10)
        item.addItem(self._capacity_line, ignoreBounds=True)

        chart = _ChartColumn()
        chart_layout = QtWidgets.QVBoxLayout(chart)
        # a margin on the right too: the last bar and its number stood against the window's edge
        chart_layout.setContentsMargins(6, 6, 8, 0)
        chart_layout.setSpacing(2)
        self._legend_parts = "&nbsp;&nbsp; ".join(
            f'<span style="color:{color}; font-size:13pt;">&#9632;</span>&nbsp;'
            f'{label.replace(" ", "&nbsp;")}' for _, label, color in _MEMORY_PARTS)
        legend = self._memory_legend = QtWidgets.QLabel(self._legend_parts)
        legend.setWordWrap(True)
        title = QtWidgets.QLabel("<b>Memory per GPU by pipeline stage</b>")
        # wraps at the chart's narrowest: on one line it kept a modern plan's window wider
        # than a 1,280 px screen
        title.setWordWrap(True)
        chart_layout.addWidget(title)
        chart_layout.addWidget(self._fit_label)
        fit_row = QtWidgets.QHBoxLayout()
        fit_row.setContentsMargins(0, 0, 0, 0)
        fit_row.addWidget(self._fit_changes, 1)
        self._use_fit_change = QtWidgets.QToolButton()
        self._use_fit_change.setObjectName("use_fit_change")
        self._use_fit_change.setText("Use it")
        self._use_fit_change.setToolTip("Put this changed plan in the editor and simulate it")
        self._use_fit_change.setVisible(False)
        self._use_fit_change.clicked.connect(self._on_use_fit_change)
        fit_row.addWidget(self._use_fit_change)
        # as tall with the button as without it ("Looking for changes…"): the chart stays put
        self._fit_changes.set_height_floor(self._use_fit_change.sizeHint().height())
        chart_layout.addLayout(fit_row)
        chart_layout.addWidget(legend)
        chart_layout.addWidget(self.memory_plot, 1)
        return chart

    # ------------------------------------------------------------------ API
    @property
    def report(self) -> Report | None:
        """The report shown, if any."""
        return self._report

    def value_text(self, key: str) -> str:
        """Text of figure ``key`` (e.g. ``'cost_usd'``, ``'mfu'``; whole where the line is cut
        to fit); for tests."""
        label = self._values[key]
        return label.full_text() if isinstance(label, OneLineLabel) else label.text()

    @property
    def fit_text(self) -> str:
        """Text of the memory-fit notice."""
        return self._fit_label.text()

    @property
    def fit_changes_text(self) -> str:
        """Text of the line saying what would make the plan fit ('' when none is shown)."""
        return self._fit_changes.full_text() if not self._fit_changes.isHidden() else ""

    @property
    def fit_changes_state(self) -> str:
        """What the "To fit" line shows (:data:`FIT_STATES`): ``"none"`` (hidden),
        ``"searching"`` (:meth:`set_fit_changes_searching`), ``"found"``
        (:meth:`set_fit_changes`) or ``"failed"`` (:meth:`set_fit_changes_failed`)."""
        return self._fit_state

    def set_fit_changes_searching(self) -> None:
        """Say that what would make the plan fit is being looked for (the window runs
        :func:`core.studies.fit_changes.fit_changes` after the simulation; :meth:`set_fit_changes`
        or :meth:`set_fit_changes_failed` follows)."""
        self._show_fit_note("searching", "Looking for changes that fit…",
                            "Trying the plans a few changes away (distributed optimizer, "
                            "recomputation, micro-batch, parallel sizes) on a background thread")

    def set_fit_changes_failed(self, message: str) -> None:
        """Say that the search for changes that fit failed, with ``message`` (one line on
        screen, whole on hover)."""
        line = " ".join(message.split())
        self._show_fit_note("failed", f"Could not look for changes that fit: {line}", message)

    def _show_fit_note(self, state: str, text: str, tooltip: str) -> None:
        """The "To fit" line as a plain note (no plan to use)."""
        self._fit_state = state
        self._fit_plan = None
        self._use_fit_change.setVisible(False)
        self._fit_changes.set_full_text(text, tooltip=f"<p>{html.escape(tooltip)}</p>")
        self._fit_changes.setVisible(True)

    def set_fit_changes(self, fit) -> None:
        """Show what would make the plan fit (:class:`core.studies.fit_changes.FitChanges`, or
        None: nothing to show): the fastest changed plan on one line, every one on hover; when
        none fits, the fewest GPUs that fit (``fit.fewest_gpus``; "Use it" puts its plan in
        the editor) or why none up to the cap does."""
        self._fit_state = "none" if fit is None else "found"
        fewest = fit.fewest_gpus if fit is not None else None
        self._fit_plan = (fit.rows[0].plan if fit is not None and fit.rows
                          else fewest.plan if fewest is not None else None)
        self._use_fit_change.setVisible(self._fit_plan is not None)
        if fit is None:
            self._fit_changes.set_full_text("", tooltip="")
            self._fit_changes.setVisible(False)
            return
        want = "outside the margin" if fit.verdict == "tight" else "in memory"
        fewest_tip = ("" if fewest is None else
                      f"<p><b>Fewest GPUs that fit</b> (counts tried: "
                      f"{html.escape(fewest.counts_text)}; memory only, not timed): "
                      f"{html.escape(fewest.text)}</p>")
        if not fit.rows:
            tip = (f"<p>{fit.tried} plans tried; held fixed: {html.escape(fit.held)}</p>"
                   + fewest_tip)
            if fewest is None:
                text = (f"To fit {want}: nothing tried fits (up to three changes away); a sweep "
                        "searches every plan")
            elif fewest.num_gpus is None:
                text = f"To fit {want}: nothing tried fits; {fewest.reason}"
            else:
                # the count first: the line is cut to the panel's width (whole on hover)
                text = f"To fit {want}: none on {self._gpus():,} GPUs; {fewest.text}"
            self._fit_changes.set_full_text(text, tooltip=tip)
            self._fit_changes.setVisible(True)
            return

        def row_text(x) -> str:
            return (f"{x.text} ({x.max_memory_per_gpu_bytes / _GIB:.1f} GiB, {x.verdict}, "
                    f"{x.iteration_time_s / fit.iteration_time_s - 1:+.1%} time"
                    + (f", {x.num_gpus:,} GPUs" if x.num_gpus != self._gpus() else "") + ")")
        items = "".join(f"<li>{html.escape(row_text(x))}</li>" for x in fit.rows)
        more = f"(+{len(fit.rows) - 1} more, hover)" if len(fit.rows) > 1 else ""
        self._fit_changes.set_full_text(
            f"To fit {want}: {row_text(fit.rows[0])}", suffix=more,
            tooltip=f"<b>To fit {want}</b>, those that fit first, then the tight ones; fastest "
                    f"first in each (iteration time against this "
                    f"plan's):<ul>{items}</ul>Held fixed: {html.escape(fit.held)}. "
                    "A sweep finds the best plan." + fewest_tip)
        self._fit_changes.setVisible(True)

    def _on_use_fit_change(self) -> None:
        if self._fit_plan is not None:
            self.fit_change_chosen.emit(self._fit_plan)

    def _gpus(self) -> int:
        return self._report.num_gpus if self._report is not None else 0

    @property
    def warnings_text(self) -> str:
        """The report's warnings, one per line, each after "⚠ " ('' when none)."""
        warnings = self._report.warnings if self._report is not None else []
        return "\n".join(f"⚠ {w}" for w in warnings)

    def clear(self) -> None:
        """Show no report."""
        self._report = None
        for label in self._values.values():
            if isinstance(label, OneLineLabel):
                label.set_full_text("–" if label.objectName() != "band_note" else "", tooltip="")
            else:
                label.setText("–")
        self._breakdown.set_values([])
        self._set_warnings([])
        self._fit_label.setText("")
        self.set_fit_changes(None)
        self._memory_legend.setText(self._legend_parts)
        self._flag_no_fit(False)
        for bar in self._bars:
            bar.setOpts(x=[], height=[], y0=[])
        self._capacity_line.setVisible(False)

    def set_report(self, report: Report) -> None:
        """Show the figures of ``report`` (and no changes to fit: :meth:`set_fit_changes`)."""
        self._report = report
        self.set_fit_changes(None)
        v = self._values
        # every duration of the panel (the iteration time, its band, the time per iteration's
        # terms and their hidden parts) in one unit, that of the largest, as vtrain simulate
        # prints them all in seconds: "Compute 2.301 s" read beside "Exposed EP all-to-all
        # 130.37 ms (391.11 ms hidden)" and a band "649.37 ms – 1.017 s"
        iv = report.interval
        band = (iv.band(report.iteration_time_s) if iv is not None and iv.available else ())
        fmt = duration_formatter(
            report.iteration_time_s, *band, report.compute_s, report.comm_s, report.tp_hidden_s,
            getattr(report, "dp_hidden_s", 0.0), report.pp_comm_s, report.cp_comm_s,
            report.cp_hidden_s, report.ep_comm_s, getattr(report, "ep_hidden_s", 0.0),
            report.bubble_s, report.overlap_wait_s, report.imbalance_s)
        v["iteration_time"].setText(fmt(report.iteration_time_s))
        v["tokens_per_s"].setText(format_rate(report.tokens_per_s, "tokens/s"))
        # an FP8 plan's MFU is of the BF16 peak (core.sim.costing.mfu_peak_flops): say so
        of_peak = (f" of {report.mfu_peak_dtype.upper()} peak"
                   if getattr(report, "mfu_peak_dtype", report.precision) != report.precision else "")
        causal = getattr(report, "mfu_causal", None)
        if causal is not None and causal < 0.97 * report.mfu:  # long sequences: say both counts
            v["mfu"].setText(format_fraction(report.mfu) + of_peak
                             + f" ({format_fraction(causal)} causal)")
            v["mfu"].setToolTip("Narayanan et al.'s Eq. 3 counts the whole s x s attention "
                                "square, so at long sequences MFU can pass HFU; in parentheses "
                                "only the causal half, as Megatron-Core 0.19 logs it")
        else:
            v["mfu"].setText(format_fraction(report.mfu) + of_peak)
            v["mfu"].setToolTip("")
        v["hfu"].setText(format_fraction(report.hfu) + of_peak)
        v["bubble_fraction"].setText(format_fraction(report.bubble_fraction))
        v["compute"].setText(fmt(report.compute_s))
        comm_text, comm_tip = _with_named_hidden(
            report.comm_s, ("tp_comm", report.tp_hidden_s),
            ("dp_comm", getattr(report, "dp_hidden_s", 0.0)), fmt=fmt)
        v["comm"].setText(comm_text)
        v["comm"].setToolTip(comm_tip + (" (not in the iteration time)" if comm_tip else ""))
        v["pp_comm"].setText(fmt(report.pp_comm_s))
        v["cp_comm"].setText(_with_hidden(report.cp_comm_s, report.cp_hidden_s, fmt))
        for w in self._cp_row:
            w.setVisible(report.cp_comm_s > 0 or report.cp_hidden_s > 0)
        ep_hidden = getattr(report, "ep_hidden_s", 0.0)
        v["ep_comm"].setText(_with_hidden(report.ep_comm_s, ep_hidden, fmt))
        for w in self._ep_row:
            w.setVisible(report.ep_comm_s > 0 or ep_hidden > 0)
        v["bubble"].setText(fmt(report.bubble_s))
        v["overlap_wait"].setText(fmt(report.overlap_wait_s))
        for w in self._wait_row:
            w.setVisible(report.overlap_wait_s > 0)
        v["imbalance"].setText(fmt(report.imbalance_s))
        self._breakdown.set_values([getattr(report, key) for key, _, _ in _BREAKDOWN])
        active, with_embedding = (report.num_active_parameters,
                                  report.num_active_parameters_with_embedding)
        moe = with_embedding and with_embedding != report.num_parameters
        # a mixture of experts' line: the total and the active count as vtrain simulate's
        # "Active parameters" line heads it (without the input embedding), the rest on hover;
        # the whole line was cut at 1,366 x 768 ("... 3.35 ..."); still cut to the figures'
        # width where narrower (the memory chart keeps its own)
        total = f"{report.num_parameters / 1e9:,.2f} B"
        v["num_parameters"].set_full_text(
            total + (f" ({active / 1e9:,.2f} B active)" if moe else ""),
            tooltip=(f"{total} ({active / 1e9:,.2f} B active without the input embedding, "
                     f"{with_embedding / 1e9:,.2f} B with it; MFU counts their GEMMs)"
                     if moe else None))
        v["gpus"].setText(format_count(report.num_gpus))
        v["microbatches"].setText(format_count(report.num_microbatches))
        v["iterations"].setText(format_count(report.num_iterations))
        v["training_days"].setText(f"{format_day_count(report.training_days)} days")
        v["gpu_hours"].setText(format_amount(report.gpu_hours))
        v["cost_usd"].setText(format_usd(report.cost_usd))
        self._set_band(report, fmt)
        profile = report.profile or {}
        shown = [str(x) for x in (profile.get("device"), method_text(profile),
                                  profile.get("date")) if x]
        if profile.get("source"):
            shown.append(str(profile["source"]))
        v["profile"].set_full_text(" · ".join(shown) if shown else "–",
                                   tooltip="\n".join(f"{k}: {val}" for k, val in profile.items()))
        self._set_warnings(report.warnings)
        self._set_memory(report)
        self._flag_no_fit(not report.fits_in_memory, report)
        self._set_run(report)  # after the flag: its tooltips add to the flag's
        self._fit_figures_width()

    def _set_run(self, report: Report) -> None:
        """The run with failures and checkpoints (:mod:`core.sim.goodput`) and, beside the GPU-hours,
        the energy of the run without them (:mod:`core.sim.energy`); the terms in the tooltips.
        Nothing for a report without them (written before they existed)."""
        v, g, e = self._values, getattr(report, "run", None), getattr(report, "energy", None)
        if g is None or e is None:
            v["run_days"].setText("–")
            return
        d = 86400.0
        # the GPU-hours of the expected time at the plan's price, as vtrain simulate prints them
        price = report.cost_usd / report.gpu_hours if report.gpu_hours > 0 else 0.0
        cost = g.expected_time_s * report.num_gpus / 3600.0 * price
        v["run_days"].setText(f"{format_day_count(g.expected_time_s / d)} days "
                              f"({format_count(g.p10_time_s / d, 1)}–"
                              f"{format_count(g.p90_time_s / d, 1)}), {format_usd(cost)}, "
                              f"goodput {format_fraction(g.goodput)}")
        mtbi = (f"one interruption every {g.mtbi_s / 3600:,.1f} h, "
                f"{format_amount(g.expected_interruptions)} expected" if g.mtbi_s is not None
                else "no failures")
        saves = ("none saved: a failure restarts the run"
                 if g.checkpoint_interval_rule == "no checkpoint" else
                 f"every {g.checkpoint_interval_iterations:,} iteration"
                 f"{'s' if g.checkpoint_interval_iterations != 1 else ''}, "
                 f"{format_bytes(g.checkpoint_bytes)}")
        self._add_tip(v["run_days"], (
            f"Expected time with failures (10th–90th percentile): {mtbi}; work "
            f"{g.work_s / d:,.1f} d + checkpoints {g.checkpoint_s / d:,.1f} d ({saves}) "
            f"+ restarts {g.restart_s / d:,.1f} d + lost work {g.lost_work_s / d:,.1f} d; lost "
            f"{format_amount(g.gpu_hours_checkpoints + g.gpu_hours_failures)} GPU-hours, "
            f"{format_usd(g.cost_usd_checkpoints + g.cost_usd_failures)}. With failures the run "
            f"takes {format_energy(e.energy_kwh)}, {format_usd(e.energy_cost_usd)} "
            "(docs/goodput.md)"))
        price = e.energy_cost_usd / e.energy_kwh if e.energy_kwh > 0 else 0.0
        kwh = e.energy_kwh_without_failures
        # the energy vtrain simulate prints ("GPU-hours, energy": with failures; the tooltip
        # says so and gives the figure without them): the figure without them read "8.28 MWh,
        # $662" beside the command line's "8.31 MWh ($665)". No longer text: at 1,024 pixels
        # the figures would wrap past the height the divider gives them
        v["gpu_hours"].setText(f"{v['gpu_hours'].text()} · {format_energy(e.energy_kwh)}, "
                               f"{format_usd(e.energy_cost_usd)} of energy")
        self._add_tip(v["gpu_hours"], (
            f"Energy of the run with failures, as vtrain simulate prints it (without them "
            f"{format_energy(kwh)}, {format_usd(kwh * price)}): GPUs {format_energy(e.gpu_kwh)} "
            f"({e.gpu_power_w:,.0f} W at {e.busy_fraction:.0%} busy) + node overhead "
            f"{format_energy(e.node_kwh)} + facility {format_energy(e.facility_kwh)} (PUE "
            f"{e.power_usage_effectiveness:g}); {e.source}"))

    @staticmethod
    def _add_tip(label: QtWidgets.QLabel, tip: str) -> None:
        """Add ``tip`` under the tooltip ``label`` has (the no-fit flag's)."""
        label.setToolTip(f"{label.toolTip()}\n{tip}" if label.toolTip() else tip)

    def _set_band(self, report: Report, fmt: Callable[[float], str]) -> None:
        """The error band of the iteration time, days and dollars, and where it comes from;
        ``fmt``: the panel's durations' formatter (:func:`duration_formatter`)."""
        v, iv = self._values, report.interval
        coverage = f" ({iv.coverage:.0%})" if iv is not None else ""
        self._band_names["iteration_band"].setText(f"Error band{coverage}")
        self._band_names["run_band"].setText(f"    days and cost, band{coverage}")
        note = v["band_note"]
        if iv is None or not iv.available:
            for key in ("iteration_band", "run_band"):
                v[key].setText("none")
            short = ""
            if iv is not None:
                short = ("outside the calibration range, and no band there (hover for why)"
                         if iv.in_calibration_range is False else
                         "the profile has no cross-validated residuals (hover for more)"
                         if iv.in_calibration_range is None else "too few residuals (hover for more)")
            # a prediction beyond what the store was calibrated on warns as the banded one
            # does, in orange with ⚠ (it read in grey, as the mere lack of residuals)
            outside = iv is not None and not iv.within_calibration
            if outside and iv.in_calibration_range is not False:
                short = "beyond the calibration runs' features, and " + short
            note.set_full_text(("⚠ " if outside else "") + short,
                               tooltip=iv.note if iv is not None else "")
            note.setStyleSheet("color: #B35C00;" if outside else "color: #505860;")
            return
        lo, hi = iv.band(report.iteration_time_s)
        v["iteration_band"].setText(f"{fmt(lo)} – {fmt(hi)}")
        d_lo, d_hi = iv.band(report.training_days)
        c_lo, c_hi = iv.band(report.cost_usd)
        v["run_band"].setText(f"{format_day_count(d_lo)} – {format_day_count(d_hi)} days, "
                              f"{format_usd_short(c_lo)} – {format_usd_short(c_hi)}")
        v["run_band"].setToolTip(f"training days {format_day_count(d_lo)} – {format_day_count(d_hi)}; "
                                 f"cost {format_usd(c_lo)} – {format_usd(c_hi)}")
        source = (f"{iv.coverage:.0%} of runs like this one measured within the band "
                  f"({iv.num_residuals} cross-validated {iv.group.replace('_', '-')} residuals "
                  "of the profile" + (f"; {band_conditions(iv)}" if band_conditions(iv) else "")
                  + ")")
        if iv.within_calibration:  # one short line; the whole story in the tooltip
            note.set_full_text(f"from {iv.num_residuals} cross-validated "
                               f"{iv.group.replace('_', '-')} runs", tooltip=source)
            note.setStyleSheet("color: #505860;")
        else:  # which way it leaves the calibration: a plan in range says so of its features
            note.set_full_text(f"⚠ {_outside_text(iv)} (hover for why)",
                               tooltip=source + ".\n⚠ " + iv.note[0].upper() + iv.note[1:])
            note.setStyleSheet("color: #B35C00;")


    @property
    def no_fit_text(self) -> str:
        """Text of the flag over the figures of a plan that does not fit ('' when it fits)."""
        return self._no_fit_flag.full_text() if not self._no_fit_flag.isHidden() else ""

    @property
    def is_stale(self) -> bool:
        """Whether the figures are marked as not those of the configuration being edited."""
        return self._stale

    def set_stale(self, stale: bool) -> None:
        """Veil the figures and the chart (they belong to an earlier configuration), or unveil."""
        self._stale = bool(stale)
        self._veil.set_stale(self._stale)
        # the changes that would make it fit are of that earlier configuration too
        self._use_fit_change.setEnabled(not self._stale)

    def figures_height(self) -> int:
        """Height in pixels the figures need to show without scrolling, at the width their
        scroll area has (narrower than the figures' lines, names and values wrap: taller)."""
        height = self._figures.sizeHint().height()
        width = self._figures_scroll.width()  # no frame; without a scroll bar: all of it
        if self._figures.hasHeightForWidth() and width > 0:
            height = max(height, self._figures.heightForWidth(width))
        return height + 2

    def _flag_no_fit(self, flag: bool, report: Report | None = None) -> None:
        if flag and report is not None:
            # one line (the numbers are also over the memory chart); the whole story on hover
            needed = format_bytes(report.max_memory_per_gpu_bytes)
            capacity = format_bytes(report.memory_capacity_bytes)
            self._no_fit_flag.set_full_text(
                f"⚠ Does not fit in GPU memory ({needed} needed per GPU of {capacity}): "
                "this plan cannot run as set",
                tooltip=f"Does not fit in GPU memory ({needed} needed per GPU of {capacity}): "
                        "this plan cannot run as set. The time and cost below are what it would "
                        "take with enough memory.")
        self._no_fit_flag.setVisible(flag)
        for key in _RUN_FIGURES:
            label = self._values[key]
            label.setStyleSheet(f"color: {_NO_FIT_COLOR};" if flag else "")
            label.setToolTip("This plan does not fit in GPU memory: it cannot run as set"
                             if flag else "")

    def _set_warnings(self, warnings: list[str]) -> None:
        """The first warning on one line, cut to fit, with "(+N more)"; all of them on hover."""
        self._warnings.setVisible(bool(warnings))
        if not warnings:
            self._warnings.set_full_text("", tooltip="")
            return
        more = f"(+{len(warnings) - 1} more, hover)" if len(warnings) > 1 else ""
        items = "".join(f"<li>{html.escape(w)}</li>" for w in warnings)
        self._warnings.set_full_text(f"⚠ {warnings[0]}", suffix=more,
                                     tooltip=f"<b>Warnings</b><ul>{items}</ul>")

    def _fit_figures_width(self) -> None:
        """Keep the figures column wide enough for its longest word (no clipping); it asks
        for the width of its longest lines (:class:`_FiguresScroll`)."""
        self._figures.adjustSize()
        bar = self._figures_scroll.verticalScrollBar().sizeHint().width()
        self._figures_scroll.setMinimumWidth(self._figures.minimumSizeHint().width() + bar + 4)
        self._figures_scroll.updateGeometry()

    def eventFilter(self, watched: QtCore.QObject, event: QtCore.QEvent) -> bool:  # noqa: N802
        if (watched is self._figures_scroll and event.type() == QtCore.QEvent.Type.Resize
                and event.size().width() != event.oldSize().width()):
            self.figures_width_changed.emit()
        return super().eventFilter(watched, event)

    # ------------------------------------------------------------------ memory
    def _set_memory(self, report: Report) -> None:
        stages = np.array([m.stage for m in report.memory], dtype=np.float64)
        bottom = np.zeros(stages.size)
        for bar, (attr, _, _) in zip(self._bars, _MEMORY_PARTS):
            height = np.array([getattr(m, attr) for m in report.memory], dtype=np.float64) / _GIB
            bar.setOpts(x=stages, height=height, y0=bottom.copy(), width=0.7)
            bottom += height
        # the line is the GPU's capacity: the modelled need is the whole process; a need within
        # the planner's margin (cluster.memory_reserve_fraction) of it is tight
        capacity_gib = report.memory_capacity_bytes / _GIB
        margin = f"{report.memory_reserve_fraction * 100:g}&nbsp;%"
        self._capacity_line.setVisible(report.memory_capacity_bytes > 0)
        self._capacity_line.setValue(capacity_gib)
        if report.memory_capacity_bytes > 0:
            def nb(nbytes: float) -> str:
                return format_bytes(nbytes).replace(" ", "&nbsp;")
            line = f"capacity&nbsp;{nb(report.memory_capacity_bytes)}"
            if report.memory_reserve_fraction > 0:  # the margin that makes a fit tight
                # may go to the next line: at the chart's narrowest (a 1,280 px window) the
                # whole item did not fit, and Qt broke it after the dashes, away from its text
                line += f" (tight&nbsp;within&nbsp;{margin})"
            self._memory_legend.setText(  # the capacity on a line of its own
                f'{self._legend_parts}<br><span style="color:{_CAPACITY_COLOR}; '
                f'font-weight:bold;">&#8211;&nbsp;&#8211;</span>&nbsp;{line}')
        item = self.memory_plot.getPlotItem()
        top = max(float(bottom.max()) if bottom.size else 0.0, capacity_gib) * 1.08
        n = max(stages.size, 1)
        item.setXRange(-0.6, n - 0.4, padding=0)
        item.setYRange(0, max(top, 1.0), padding=0)
        # the bars stand at x = stage (0 .. p-1): one category each
        item.getAxis("bottom").set_categories([str(int(s)) for s in stages],
                                              [f"pipeline stage {int(s)}" for s in stages])
        need = format_bytes(report.max_memory_per_gpu_bytes)
        capacity = format_bytes(report.memory_capacity_bytes)
        margin = f"{report.memory_reserve_fraction * 100:g} %"
        verdict = report.memory_verdict if report.fits_in_memory else "does not fit"
        self._fit_label.setToolTip("")
        if verdict != "tight" and report.fits_in_memory:
            self._fit_label.setText(f"Fits: at most {need} of {capacity} per GPU "
                                    f"(below the {margin} margin)")
            self._fit_label.setStyleSheet("color: #2E7D32;")
        elif verdict == "tight" and report.max_memory_per_gpu_bytes > report.memory_capacity_bytes:
            self._fit_label.setText(f"Tight: at most {need} of {capacity} per GPU with the "
                                    "allocator's cache; fits only once PyTorch frees it")
            self._fit_label.setStyleSheet("color: #B07800; font-weight: bold;")
        elif verdict == "tight":
            # the field's name on hover: "(cluster.memory_reserve_fraction)", one unbreakable
            # word of 232 px, kept a tight plan's window wider than a 1,280 px screen
            self._fit_label.setText(f"Tight: at most {need} of {capacity} per GPU, inside the "
                                    f"{margin} memory margin")
            self._fit_label.setToolTip("The planner's margin: the Cluster section's Memory "
                                       "margin (cluster.memory_reserve_fraction)")
            self._fit_label.setStyleSheet("color: #B07800; font-weight: bold;")
        else:
            need, capacity = gib_texts(report.max_memory_per_gpu_bytes,
                                       report.memory_capacity_bytes)
            self._fit_label.setText(
                f"Does not fit: {need} GiB needed per GPU, {capacity} GiB on the GPU")
            self._fit_label.setStyleSheet("color: #C62828; font-weight: bold;")
