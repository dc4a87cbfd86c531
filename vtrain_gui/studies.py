"""The Studies tab: the vTrain paper's compute-optimal model study and its shared-cluster
scheduler study, over the session's cluster.

Both run on a worker thread (a :class:`~vtrain_gui.workers.SweepRunner` with the study
in place of the sweep, so Cancel and progress work the same way) and show only what
:mod:`core.studies.optimal` and :mod:`core.studies.scheduler` compute; ``vtrain optimal`` and
``vtrain schedule`` print the same numbers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import html
import json
import sys

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtGui, QtWidgets
from PySide6.QtCore import Qt, Signal, Slot

from core.cli.common import NO_TIGHT_OPTIMAL_HELP, NO_TIGHT_OPTIMAL_NOTE
from core.plan.session import Session
from core.studies.optimal import MAX_DAYS, MAX_GPUS, MAX_SPREAD

from .empty_state import EmptyStack, StaleVeil, under_banner, warning_banner
from .sweep_header import dimensions_html
from .workers import SweepRunner

__all__ = ["StudiesTab", "OptimalPanel", "SchedulePanel", "DEFAULT_TRACE", "OPTIMAL_COLUMNS"]

#: The trace the scheduler study opens with.
DEFAULT_TRACE = Path(__file__).resolve().parent.parent / "resources" / "traces" / "jobs_trace.json"
_BEST = "#2E7D32"
_POINT = "#1565C0"
_WAIT = "#CFD8DC"
_RUN = "#1565C0"
#: The compute-optimal table's columns (their keys; the headers: :data:`OPTIMAL_HEADERS`).
OPTIMAL_COLUMNS = ("params", "L", "h", "heads", "t p d b", "SP", "ZeRO", "cp", "schedule",
                   "recompute", "MFU", "GiB", "tokens", "tokens/param", "loss", "note")
#: Each column's header, short as ``vtrain optimal``'s table heads it (16 columns beside the
#: form in a 1,024-pixel window), and its tooltip: the full name, units and Megatron-LM name.
OPTIMAL_HEADERS = {
    "params": ("params", "Parameters N of the candidate model"),
    "L": ("L", "Transformer layers (--num-layers)"),
    "h": ("h", "Hidden size (--hidden-size)"),
    "heads": ("a", "Attention heads (--num-attention-heads)"),
    "t p d b": ("t p d b", "The fastest plan's tensor-, pipeline- and data-parallel sizes and "
                           "micro-batch size (--tensor-model-parallel-size, "
                           "--pipeline-model-parallel-size, data parallel, --micro-batch-size)"),
    "SP": ("SP", "Sequence parallelism (--sequence-parallel)"),
    "ZeRO": ("ZeRO", "ZeRO stage (0: nothing sharded; 1: the optimizer state, Megatron's "
                     "distributed optimizer; 2: and the gradients; 3: and the weights, FSDP)"),
    "cp": ("cp", "Context-parallel size (--context-parallel-size)"),
    "schedule": ("sched", "Pipeline schedule"),
    "recompute": ("recomp", "Activation recomputation (--recompute-granularity)"),
    "MFU": ("MFU", "Model FLOPs utilization of the fastest plan, attention and output layer "
                   "counted (Megatron-LM's definition); ⚠: outside what the profile was "
                   "calibrated on"),
    "GiB": ("GiB", "Memory per GPU in GiB (~ = tight: inside the margin of the GPU's memory, "
                   "or over it only with the allocator's cache)"),
    "tokens": ("tokens", "Tokens the plan trains in the budget's days"),
    "tokens/param": ("D/N", "Tokens per parameter, D / N (Chinchilla's rule: about 20)"),
    "loss": ("loss", "Chinchilla's fitted loss (nats/token; Besiroglu et al. 2024)"),
    "note": ("note", "The lowest-loss candidate, the rule's size, or why no plan fits"),
}


#: The study form's width beside the results (px; the splitter between them moves it, down to
#: the form's fields' least width, then closes it), 330 before the compute-optimal table's 16
#: columns wanted the width of a 1,024-pixel window.
SIDE_WIDTH = 290


def stale_text(changed: list[str]) -> str:
    """The banner over a study's result when the Plan tab changed a field the study reads,
    naming the fields ``changed`` (:func:`core.studies.sweep.saved.changed_inputs`, the first
    four)."""
    text = "The Plan tab changed since this study ran: press Run to update it."
    if changed:
        text += f" Changed: {'; '.join(changed[:4])}{' …' if len(changed) > 4 else ''}."
    return text


def _cancel_check(cancel: Any) -> None:
    from core.studies.sweep import SweepCancelled
    if cancel is not None and cancel.is_set():
        raise SweepCancelled("study cancelled")


def budget_days(settings: dict) -> float:
    """The wall-clock days of the compute-optimal form's budget: ``settings["days"]``, or with
    ``settings["budget"] == "gpu_hours"`` the days that ``num_gpus`` GPUs take to spend
    ``settings["gpu_hours"]`` GPU-hours (:func:`core.studies.optimal.days_for_gpu_hours`, what
    ``vtrain optimal --gpu-hours`` studies).

    Raises
    ------
    ConfigError
        The GPU-hours' days out of the study's range, in the command line's words (named
        ``--gpu-hours``)."""
    if settings.get("budget") == "gpu_hours":
        from core.studies.optimal import days_for_gpu_hours
        return days_for_gpu_hours(settings["num_gpus"], settings["gpu_hours"])
    return settings["days"]


def run_optimal_study(session: Session, settings: dict, _unused: Any,
                      progress: Callable[[int, int], None], cancel: Any) -> Any:
    """Worker-thread body of the compute-optimal study (``settings``: :meth:`OptimalPanel.settings`;
    its budget's days: :func:`budget_days`)."""
    from core.studies.optimal import compute_optimal

    def on_progress(done: int, total: int, _name: str) -> None:
        _cancel_check(cancel)
        progress(done, total)
    budget_given = None  # as vtrain optimal --gpu-hours: a refusal names the GPU-hours given
    if settings.get("budget") == "gpu_hours":
        budget_given = ("--gpu-hours", f"{float(settings['gpu_hours']):g} GPU-hours")
    return compute_optimal(session, settings["num_gpus"], budget_days(settings),
                           assumed_mfu=settings["assumed_mfu"],
                           num_candidates=settings["num_candidates"], spread=settings["spread"],
                           progress=on_progress, cancel=cancel,
                           no_tight=bool(settings.get("no_tight", False)),
                           budget_given=budget_given)


def run_schedule_study(session: Session, settings: dict, _unused: Any,
                       progress: Callable[[int, int], None], cancel: Any) -> Any:
    """Worker-thread body of the scheduler study: ``(jobs, counts, tokens_per_s, results)``."""
    from core.studies.scheduler import read_jobs, schedule_study

    path = settings["trace"] or str(DEFAULT_TRACE)
    jobs = read_jobs(path)

    def on_progress(done: int, total: int, _name: str) -> None:
        _cancel_check(cancel)
        progress(done, total)
    counts, tps, results = schedule_study(jobs, session, settings["gpus"],
                                          backfill=settings["backfill"],
                                          min_efficiency=settings["min_efficiency"],
                                          source=Path(path).name, progress=on_progress,
                                          cancel=cancel,
                                          hold_session_values=bool(
                                              settings.get("hold_session_values", False)))
    return jobs, counts, tps, results


#: Axis text and lines of the study plots: dark on white (pyqtgraph's default grey is faint).
_AXIS_TEXT = "#202020"
_AXIS_LINE = "#404040"


def _dark_axes(plot: pg.PlotWidget) -> None:
    """Dark axis lines and tick labels on ``plot``'s left and bottom axes."""
    for side in ("left", "bottom"):
        axis = plot.getAxis(side)
        axis.setPen(pg.mkPen(_AXIS_LINE))
        axis.setTextPen(pg.mkPen(_AXIS_TEXT))


class PercentSpinBox(QtWidgets.QDoubleSpinBox):
    """A fraction (``value()`` 0.4) shown and typed as a percentage ("40 %"), as the tables
    beside it show MFU; the study form showed "0.40" next to a table of "38.2 %"."""

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.setDecimals(4)  # of the fraction: whole tenths of a percent
        self.setSuffix(" %")

    def textFromValue(self, value: float) -> str:  # noqa: N802 - Qt API
        return f"{value * 100:.1f}".rstrip("0").rstrip(".")

    def valueFromText(self, text: str) -> float:  # noqa: N802 - Qt API
        number = self._number(text)
        return self.value() if number is None else number / 100

    def validate(self, text: str, pos: int):  # noqa: N802 - Qt API
        number = self._number(text)
        if number is None:
            return QtGui.QValidator.State.Intermediate, text, pos
        ok = self.minimum() <= number / 100 <= self.maximum()
        return (QtGui.QValidator.State.Acceptable if ok
                else QtGui.QValidator.State.Intermediate), text, pos

    def _number(self, text: str) -> float | None:
        try:
            return float(text.removesuffix(self.suffix()).strip().rstrip("%").strip())
        except ValueError:
            return None


class GpuHoursSpinBox(QtWidgets.QDoubleSpinBox):
    """A budget of GPU-hours, shown with group separators and no trailing zeros
    ("2,000,000 GPU-hours"), typed as such or as the command line takes it ("2e6").

    Any finite number is taken as typed, as ``vtrain optimal
    --gpu-hours`` takes it, and the core refuses what it cannot study in its words (0, -1,
    1e13: :func:`core.studies.optimal.days_for_gpu_hours`); a range of [0, 1e12] made "1e13"
    an out-of-range text and the field kept the "1e1" typed on the way: 10 GPU-hours. A value
    under a hundredth shows its digits ("0.001 GPU-hours", not "0"), one of 1e15 or more its
    exponent ("1e+16 GPU-hours")."""

    #: the field's range, +-LIMIT GPU-hours (a spin box needs one): every finite float
    LIMIT = sys.float_info.max

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.setDecimals(12)  # the value as typed (0.001), not rounded to a hundredth
        self.setRange(-self.LIMIT, self.LIMIT)
        self.setSuffix(" GPU-hours")

    def textFromValue(self, value: float) -> str:  # noqa: N802 - Qt API
        if abs(value) >= 1e15:  # 1e+20, not 21 digits (1e308: 309, the float's noise too)
            return f"{value:.6g}"
        text = f"{value:,.2f}".rstrip("0").rstrip(".")
        if value and abs(value) < 1.0 and float(text.replace(",", "")) != value:
            return f"{value:.3g}"  # 0.001, 5e-05: a hundredth's rounding hid them ("0")
        return text

    def _hint(self, hint: QtCore.QSize) -> QtCore.QSize:
        text = self.fontMetrics().horizontalAdvance("20,000,000" + self.suffix())
        return QtCore.QSize(min(hint.width(), text + 28), hint.height())

    def minimumSizeHint(self) -> QtCore.QSize:  # noqa: N802 - Qt API
        """As wide as a budget of millions of GPU-hours, not as its range (printed in full:
        the 140 px and more that the form beside the results does not have)."""
        return self._hint(super().minimumSizeHint())

    def sizeHint(self) -> QtCore.QSize:  # noqa: N802 - Qt API
        """As :meth:`minimumSizeHint` (the field stretches to the form's width)."""
        return self._hint(super().sizeHint())

    def valueFromText(self, text: str) -> float:  # noqa: N802 - Qt API
        number = self._number(text)
        return self.value() if number is None else number

    def validate(self, text: str, pos: int):  # noqa: N802 - Qt API
        number = self._number(text)
        if number is None:
            return QtGui.QValidator.State.Intermediate, text, pos
        ok = self.minimum() <= number <= self.maximum()
        return (QtGui.QValidator.State.Acceptable if ok
                else QtGui.QValidator.State.Intermediate), text, pos

    def _number(self, text: str) -> float | None:
        text = text.removesuffix(self.suffix()).strip()
        for sep in (",", "_", " ", "\u202f", "\u00a0"):
            text = text.replace(sep, "")
        try:
            number = float(text)
        except ValueError:
            return None
        return number if number == number else None  # nan: not a number of hours


def _gpu_spin() -> QtWidgets.QSpinBox:
    """A GPU-count field: 1 to :data:`core.studies.optimal.MAX_GPUS`, 1,024 to start with."""
    w = QtWidgets.QSpinBox()
    w.setRange(1, MAX_GPUS)
    w.setValue(1024)
    w.setSuffix(" GPUs")
    w.setGroupSeparatorShown(True)
    return w


def _table(headers: list[str], frozen: bool = False) -> QtWidgets.QTableWidget:
    """A read-only table of whole rows with ``headers``; with ``frozen`` its first column stays
    in view as the others scroll sideways (:class:`FrozenFirstColumnTable`)."""
    t = (FrozenFirstColumnTable if frozen else QtWidgets.QTableWidget)(0, len(headers))
    t.setHorizontalHeaderLabels(headers)
    t.setEditTriggers(QtWidgets.QAbstractItemView.EditTrigger.NoEditTriggers)
    t.setSelectionBehavior(QtWidgets.QAbstractItemView.SelectionBehavior.SelectRows)
    t.verticalHeader().setVisible(False)
    t.horizontalHeader().setSectionResizeMode(QtWidgets.QHeaderView.ResizeMode.ResizeToContents)
    return t


class FrozenFirstColumnTable(QtWidgets.QTableWidget):
    """A table whose first column stays in view while the others scroll sideways, as a
    spreadsheet's frozen column (Qt's "Frozen Column" example): a view of the same model,
    showing only that column, lies over it. The compute-optimal table names each row's model
    size there while its 15 other columns, wider than a 1,024-pixel window leaves them,
    scroll."""

    def __init__(self, rows: int, columns: int,
                 parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(rows, columns, parent)
        self.frozen = QtWidgets.QTableView(self)
        self.frozen.setObjectName("frozen_column")
        self.frozen.setModel(self.model())
        self.frozen.setSelectionModel(self.selectionModel())
        self.frozen.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.frozen.verticalHeader().hide()
        self.frozen.setEditTriggers(QtWidgets.QAbstractItemView.EditTrigger.NoEditTriggers)
        self.frozen.setSelectionBehavior(QtWidgets.QAbstractItemView.SelectionBehavior.SelectRows)
        self.frozen.horizontalHeader().setSectionResizeMode(QtWidgets.QHeaderView.ResizeMode.Fixed)
        self.frozen.verticalHeader().setSectionResizeMode(QtWidgets.QHeaderView.ResizeMode.Fixed)
        self.frozen.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.frozen.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.frozen.setVerticalScrollMode(self.verticalScrollMode())
        # a line on its right edge: where the scrolled columns pass under it
        self.frozen.setStyleSheet("QTableView { border: none; border-right: 1px solid #9E9E9E; }")
        self.viewport().stackUnder(self.frozen)
        self.horizontalHeader().sectionResized.connect(self._column_resized)
        self.verticalHeader().sectionResized.connect(
            lambda row, _old, size: self.frozen.setRowHeight(row, size))
        self.frozen.verticalScrollBar().valueChanged.connect(self.verticalScrollBar().setValue)
        self.verticalScrollBar().valueChanged.connect(self.frozen.verticalScrollBar().setValue)
        self.model().columnsInserted.connect(lambda *_: self._hide_scrolled_columns())
        self.model().rowsInserted.connect(lambda *_: self._place())
        self.model().rowsRemoved.connect(lambda *_: self._place())
        self._hide_scrolled_columns()

    def _hide_scrolled_columns(self) -> None:
        for c in range(1, self.columnCount()):
            self.frozen.setColumnHidden(c, True)
        self._place()

    def _column_resized(self, column: int, _old: int, size: int) -> None:
        if column == 0:
            self.frozen.setColumnWidth(0, size)
            self._place()

    def resizeEvent(self, event: QtGui.QResizeEvent) -> None:  # noqa: N802 - Qt API
        super().resizeEvent(event)
        self._place()

    def _place(self) -> None:
        """Lay the frozen view over the first column, header included."""
        self.frozen.verticalHeader().setDefaultSectionSize(
            self.verticalHeader().defaultSectionSize())
        self.frozen.horizontalHeader().setFixedHeight(self.horizontalHeader().height())
        self.frozen.setColumnWidth(0, self.columnWidth(0))
        shown = self.columnCount() > 0 and not self.isColumnHidden(0)
        self.frozen.setVisible(shown)
        if shown:  # as high as the rows (its right edge's line ends with them)
            rows = self.verticalHeader().length()
            self.frozen.setGeometry(self.verticalHeader().width() + self.frameWidth(),
                                    self.frameWidth(), self.columnWidth(0) + 1,
                                    min(self.viewport().height(), rows)
                                    + self.horizontalHeader().height())


def _fill(table: QtWidgets.QTableWidget, rows: list[list[str]], bold: set[int] = frozenset(),
          left: set[int] = frozenset({0})) -> None:
    """Put ``rows`` in ``table``: columns in ``left`` left-aligned, the others right-aligned;
    rows in ``bold`` bold."""
    table.setRowCount(len(rows))
    for r, row in enumerate(rows):
        for c, text in enumerate(row):
            item = QtWidgets.QTableWidgetItem(text)
            if c not in left:
                item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            if r in bold:
                font = item.font()
                font.setBold(True)
                item.setFont(font)
            table.setItem(r, c, item)
    table.resizeColumnsToContents()


class _StudyPanel(QtWidgets.QWidget):
    """Settings form, Run / Cancel, a status line and a runner; subclasses add the views."""

    #: a setting was edited (the window marks the session modified)
    settings_changed = Signal()

    def __init__(self, session_fn: Callable[[], Session], study_fn: Callable[..., Any],
                 parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self._session_fn = session_fn
        self.runner = SweepRunner(sweep_fn=study_fn, parent=self)
        self.runner.progress.connect(self._on_progress)
        self.runner.finished.connect(self._on_finish)
        self.runner.failed.connect(self._on_fail)
        self.runner.cancelled.connect(self._on_cancel)
        #: runs up to this id are of a session no longer shown (:meth:`abandon_run`)
        self._abandoned_run = 0
        self.settings_changed.connect(self._on_settings_edit)
        self.form = QtWidgets.QFormLayout()
        self.run_button = QtWidgets.QPushButton("Run")
        self.run_button.clicked.connect(self.run)
        self.cancel_button = QtWidgets.QPushButton("Cancel")
        self.cancel_button.setEnabled(False)
        self.cancel_button.clicked.connect(self.runner.cancel)
        self.status = QtWidgets.QLabel("")
        self.status.setWordWrap(True)
        self.status.setObjectName("status")
        self.result: Any = None
        #: the session the result shown was computed from (None without a result)
        self.result_session: Session | None = None
        #: the form's settings the result shown was computed with (:meth:`settings`; None
        #: without a result)
        self.result_settings: dict | None = None
        self._run_settings: dict | None = None
        self._run_session: Session | None = None

    def _layout(self, top: list[QtWidgets.QWidget],
                bottom: list[QtWidgets.QWidget]) -> QtWidgets.QSplitter:
        """The settings on the left; on the right, ``top`` over ``bottom`` in a splitter (the
        last widget of each stretches)."""
        right = QtWidgets.QSplitter(Qt.Orientation.Vertical)
        for widgets in (top, bottom):
            pane = QtWidgets.QWidget()
            lay = QtWidgets.QVBoxLayout(pane)
            lay.setContentsMargins(0, 0, 0, 0)
            for k, w in enumerate(widgets):
                lay.addWidget(w, 1 if k == len(widgets) - 1 else 0)
            right.addWidget(pane)
        # no result: say what to do instead of empty tables and placeholder axes
        self.results_view = EmptyStack(right, self._empty_text)
        # over the result while the Plan tab holds other inputs than those it ran with, as
        # the Plan and Explore tabs' banners
        self.stale_banner = warning_banner("stale_banner")
        self._veil = StaleVeil(self.results_view)  # not on the splitter: it would be a pane
        # the form beside the results in a splitter: dragged narrower (or closed) it gives a
        # small window's width to the table
        self.columns = QtWidgets.QSplitter(Qt.Orientation.Horizontal)
        self.columns.setObjectName("study_columns")
        side = self._side()
        self.columns.addWidget(side)
        self.columns.addWidget(under_banner(self.stale_banner, self.results_view))
        self.columns.setStretchFactor(0, 0)
        self.columns.setStretchFactor(1, 1)
        self.columns.setCollapsible(1, False)
        self.columns.setSizes([max(SIDE_WIDTH, side.minimumWidth()), 10 * SIDE_WIDTH])
        lay = QtWidgets.QHBoxLayout(self)
        lay.addWidget(self.columns)
        return right

    @property
    def is_stale(self) -> bool:
        """Whether the result shown was computed from other Plan-tab inputs than the current."""
        return not self.stale_banner.isHidden()

    def set_session(self, session: Session) -> None:
        """The Plan tab's session changed: mark the result stale when a field the study reads
        (:meth:`study_inputs`) differs from the run's, unmark it when they agree again."""
        changed: list[str] = []
        if self.result is not None and self.result_session is not None:
            from core.studies.sweep.saved import changed_inputs
            try:
                changed = changed_inputs(self.study_inputs(self.result_session),
                                         self.study_inputs(session))
            except (TypeError, ValueError, AttributeError):  # fields the editor flags as invalid
                changed = ["(the Plan tab's inputs are invalid)"]
        self.stale_banner.setText(stale_text(changed))
        self.stale_banner.setVisible(bool(changed))
        self._veil.set_stale(bool(changed))

    def study_inputs(self, session: Session) -> dict:  # pragma: no cover - overridden
        """What the study reads of ``session`` (``{section: {field: value}}``)."""
        raise NotImplementedError

    def _side(self) -> QtWidgets.QWidget:
        side = QtWidgets.QWidget()
        lay = QtWidgets.QVBoxLayout(side)
        lay.addLayout(self.form)
        buttons = QtWidgets.QHBoxLayout()
        buttons.addWidget(self.run_button)
        buttons.addWidget(self.cancel_button)
        lay.addLayout(buttons)
        lay.addWidget(self.status)
        lay.addStretch(1)
        # its hint wraps to a dozen lines at this width: it scrolls rather than squeezes its
        # lines over each other in a window 768 pixels high
        area = QtWidgets.QScrollArea()
        area.setObjectName("study_form")
        area.setWidgetResizable(True)
        area.setFrameShape(QtWidgets.QFrame.Shape.NoFrame)
        area.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        area.setWidget(side)
        area.viewport().setAutoFillBackground(False)  # the tab's background, as before
        side.setAutoFillBackground(False)
        # never narrower than its fields (it does not scroll sideways)
        area.setMinimumWidth(side.minimumSizeHint().width()
                             + area.verticalScrollBar().sizeHint().width())
        return area

    def settings(self) -> dict:  # pragma: no cover - overridden
        raise NotImplementedError

    def _watch(self, *widgets: QtWidgets.QWidget) -> None:
        """Report edits of ``widgets`` as :attr:`settings_changed`."""
        for w in widgets:
            for name in ("valueChanged", "toggled", "textEdited"):
                if hasattr(w, name):
                    getattr(w, name).connect(lambda *_: self.settings_changed.emit())
                    break

    def apply_settings(self, settings: Any) -> list[str]:
        """Show ``settings`` (as :meth:`settings` gives them); values of the wrong type or out of
        a field's range are left at the form's value and named in the returned list."""
        ignored: list[str] = []
        if not isinstance(settings, dict):
            return ["(not a JSON object)"] if settings is not None else []
        fields = self._fields()
        for key, value in settings.items():
            w = fields.get(key)
            ok = w is not None
            if isinstance(w, QtWidgets.QSpinBox):
                ok = (isinstance(value, int) and not isinstance(value, bool)
                      and w.minimum() <= value <= w.maximum())
            elif isinstance(w, QtWidgets.QDoubleSpinBox):
                ok = (isinstance(value, (int, float)) and not isinstance(value, bool)
                      and w.minimum() <= value <= w.maximum())
            elif isinstance(w, QtWidgets.QCheckBox):
                ok = isinstance(value, bool)
            elif isinstance(w, QtWidgets.QLineEdit):
                ok = isinstance(value, str)
            if not ok:
                ignored.append(key)
                continue
            w.blockSignals(True)
            if isinstance(w, (QtWidgets.QSpinBox, QtWidgets.QDoubleSpinBox)):
                w.setValue(value)
            elif isinstance(w, QtWidgets.QCheckBox):
                w.setChecked(value)
            else:
                w.setText(value)
            w.blockSignals(False)
        return ignored

    def _fields(self) -> dict[str, QtWidgets.QWidget]:  # pragma: no cover - overridden
        raise NotImplementedError

    @Slot()
    def run(self) -> int | None:
        """Start the study with the form's settings on the session's cluster; returns the run id,
        or None when the Plan tab's configuration or the form cannot run it (the status says
        why: the form's refusals in the command line's words, :meth:`check_settings`)."""
        from core.plan.fields import ConfigError
        session = self._session_fn()
        try:
            self.check_session(session)
        except ConfigError as exc:
            self._set_status("The Plan tab's configuration cannot run this study: "
                             + "; ".join(str(e) for e in exc.errors), False, error=True)
            return None
        settings = self.settings()
        try:
            self.check_settings(settings)
        except ConfigError as exc:
            self._set_status("; ".join(str(e) for e in exc.errors), False, error=True)
            return None
        self._set_status("Running…", True)
        self.clear_result()
        self._run_session = session.copy()  # what the result will be of
        self._run_settings = settings
        self.results_view.set_empty(True, "<p style='font-size:13pt'><b>Running…</b></p>"
                                          "<p>The results appear here when the study finishes.</p>")
        return self.runner.start(session, settings)

    def check_settings(self, settings: dict) -> None:
        """Raise ConfigError when the form's ``settings`` cannot run the study (the fields' ranges
        hold everything else); nothing by default."""

    def check_session(self, session: Session) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def clear_result(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def shutdown(self) -> bool:
        """Stop the worker thread (window closing)."""
        return self.runner.shutdown()

    def abandon_run(self) -> None:
        """A new or opened session: stop the running (or waiting) study, which is of the
        previous session; its progress, result, failure or cancellation, should any still
        come, is dropped (the result of another file's model appeared under the new one)."""
        self._abandoned_run = self.runner.latest_run_id
        self.runner.cancel()

    def _abandoned(self, run_id: int) -> bool:
        return run_id <= self._abandoned_run

    def _set_status(self, text: str, busy: bool, error: bool = False) -> None:
        self.status.setText(text)
        self.status.setStyleSheet("color: #C62828;" if error else "")
        self.run_button.setEnabled(not busy)
        self.cancel_button.setEnabled(busy)

    @Slot()
    def _on_settings_edit(self) -> None:
        if self.result is not None and not self.runner.busy:
            self._set_status("Settings changed since this result: Run to update it.", False)

    @Slot(int, int, int)
    def _on_progress(self, _run: int, done: int, total: int) -> None:
        if total and not self._abandoned(_run):
            self._set_status(f"Running… {self._progress_noun} {min(done + 1, total)} of {total}",
                             True)

    @Slot(int, str)
    def _on_fail(self, _run: int, message: str) -> None:
        if self._abandoned(_run):
            return
        parts = message.split("; ")
        if len(parts) > 3:
            message = "; ".join(parts[:3]) + f"; … and {len(parts) - 3} more"
        self._set_status(message, False, error=True)
        self.results_view.set_empty(True)  # no longer "Running…": the status says why not

    @Slot(int)
    def _on_cancel(self, _run: int) -> None:
        if self._abandoned(_run):
            return
        self._set_status("Cancelled.", False)
        self.results_view.set_empty(True)  # no longer "Running…"

    @Slot(int, object, float)
    def _on_finish(self, _run: int, result: object, seconds: float) -> None:
        if self._abandoned(_run):
            return
        self.result = result
        self.result_session = self._run_session
        self.result_settings = self._run_settings
        self._set_status(f"Done in {seconds:.1f} s.", False)
        self.show_result(result)
        self.results_view.set_empty(False)
        self.set_session(self._session_fn())  # edited while it ran: stale at once

    def show_result(self, result: Any) -> None:  # pragma: no cover - overridden
        raise NotImplementedError


class OptimalPanel(_StudyPanel):
    """Which model trains to the lowest loss on N GPUs in D days (:func:`core.studies.optimal.compute_optimal`)."""

    _empty_text = ("<p style='font-size:13pt'><b>No study yet</b></p>"
                   "<p>Set the GPU budget and the days (or GPU-hours) on the left and press "
                   "<b>Run</b>.</p>"
                   "<p>Model sizes around the Chinchilla-optimal one are each trained with "
                   "their fastest plan on the Plan tab's cluster; their table and loss curve "
                   "appear here.</p>")

    def __init__(self, session_fn: Callable[[], Session], parent: QtWidgets.QWidget | None = None,
                 study_fn: Callable[..., Any] | None = None) -> None:
        super().__init__(session_fn, study_fn or run_optimal_study, parent)
        self._progress_noun = "sweeping the plans of candidate"
        self.gpus = _gpu_spin()
        self.days = QtWidgets.QDoubleSpinBox()
        self.days.setRange(0.01, float(MAX_DAYS))
        self.days.setValue(30.0)
        self.days.setSuffix(" days")
        self.days.setToolTip("Wall-clock days of the budget (vtrain optimal --days)")
        # vtrain optimal --gpu-hours: a budget of GPU-hours instead of days, the days
        # H / (GPUs x 24) (core.studies.optimal.days_for_gpu_hours)
        self.gpu_hours = GpuHoursSpinBox()
        self.gpu_hours.setObjectName("optimal.gpu_hours")
        # any finite number, as the command line: the core's refusals say what is wrong
        self.gpu_hours.setValue(1024 * 30 * 24.0)  # the default GPUs for the default days
        self.gpu_hours.setToolTip("A budget of GPU-hours instead of days (vtrain optimal "
                                  "--gpu-hours): the days H / (GPUs x 24)")
        self.by_days = QtWidgets.QRadioButton()
        self.by_days.setObjectName("optimal.by_days")
        self.by_days.setToolTip("The budget in wall-clock days (vtrain optimal --days)")
        self.by_gpu_hours = QtWidgets.QRadioButton()
        self.by_gpu_hours.setObjectName("optimal.by_gpu_hours")
        self.by_gpu_hours.setToolTip("The budget in GPU-hours (vtrain optimal --gpu-hours)")
        self.by_days.setChecked(True)
        self._budget_group = QtWidgets.QButtonGroup(self)
        for button in (self.by_days, self.by_gpu_hours):
            self._budget_group.addButton(button)
        # typing in a field makes it the budget, as the command line's option given does
        self.days.valueChanged.connect(lambda *_: self.by_days.setChecked(True))
        self.gpu_hours.valueChanged.connect(lambda *_: self.by_gpu_hours.setChecked(True))
        #: the days a GPU-hour budget is, or why it cannot be studied (in the CLI's words)
        self.budget_note = QtWidgets.QLabel("")
        self.budget_note.setObjectName("optimal.budget_note")
        self.budget_note.setWordWrap(True)
        self.mfu = PercentSpinBox()
        self.mfu.setRange(0.01, 1.0)
        self.mfu.setSingleStep(0.05)
        self.mfu.setValue(0.40)
        self.mfu.setToolTip("MFU the Chinchilla rule's FLOP budget assumes")
        self.candidates = QtWidgets.QSpinBox()
        self.candidates.setRange(2, 25)
        self.candidates.setValue(9)
        self.spread = QtWidgets.QDoubleSpinBox()
        self.spread.setRange(1.5, MAX_SPREAD)
        self.spread.setValue(8.0)
        self.spread.setSuffix(" ×")  # a ratio: "8.00" alone read as a size
        self.spread.setToolTip("Largest over smallest candidate size")
        # vtrain optimal --no-tight: each candidate's plans inside the memory margin left out
        self.no_tight = QtWidgets.QCheckBox("fits outside the margin only (--no-tight)")
        self.no_tight.setObjectName("optimal.no_tight")
        self.no_tight.setToolTip(NO_TIGHT_OPTIMAL_HELP[0].upper() + NO_TIGHT_OPTIMAL_HELP[1:]
                                 + ".")
        self.form.addRow("Budget", self.gpus)
        for label, button, field in (("for", self.by_days, self.days),
                                     ("or", self.by_gpu_hours, self.gpu_hours)):
            row = QtWidgets.QHBoxLayout()
            row.addWidget(button)
            row.addWidget(field, 1)
            # a spin box's least width is its preferred one: as narrow as its text instead
            field.setSizePolicy(QtWidgets.QSizePolicy.Policy.Expanding,
                                QtWidgets.QSizePolicy.Policy.Fixed)
            self.form.addRow(label, row)
        self.form.addRow("", self.budget_note)
        for label, w in (("Assumed MFU", self.mfu), ("Candidates", self.candidates),
                         ("Size spread", self.spread)):
            self.form.addRow(label, w)
        self.form.addRow(self.no_tight)  # both columns: its text is wider than a field
        self._watch(self.gpus, self.days, self.gpu_hours, self.by_gpu_hours, self.mfu,
                    self.candidates, self.spread, self.no_tight)
        for w in (self.gpus, self.gpu_hours, self.by_gpu_hours):
            getattr(w, "toggled" if w is self.by_gpu_hours else "valueChanged").connect(
                lambda *_: self._show_budget())
        self._show_budget()
        hint = QtWidgets.QLabel("Cluster, global batch, precision and price come from the "
                                "Plan tab; the candidates are shaped like its model (family, "
                                "head size, query groups, MLP ratio, sequence length; only L "
                                "and h change; a mixture-of-experts or latent-attention model "
                                "is refused: the loss law is fitted on dense models). Each "
                                "model's plans are those the Explore tab sweeps by default (t, "
                                "p, d, b, schedule, recomputation, sequence parallelism, ZeRO "
                                "stage, cp, the overlaps); ⚠ marks a plan outside what the "
                                "profile was calibrated on.")
        hint.setWordWrap(True)
        hint.setStyleSheet("color: #616161;")
        self.form.addRow(hint)
        self.summary = QtWidgets.QLabel("Run to size candidate models around the Chinchilla-"
                                        "optimal size and train each with its fastest plan.")
        self.summary.setWordWrap(True)
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.table = _table([OPTIMAL_HEADERS[k][0] for k in OPTIMAL_COLUMNS], frozen=True)
        for k, key in enumerate(OPTIMAL_COLUMNS):
            self.table.horizontalHeaderItem(k).setToolTip(OPTIMAL_HEADERS[key][1])
        # 16 columns beside the form at 1,024 pixels: each as wide as its values, rows one
        # line high, the note (a reason can be a sentence) cut with "…" and whole in its
        # tooltip; what does not fit scrolls sideways by pixels under the model sizes
        self.table.verticalHeader().setDefaultSectionSize(self.table.fontMetrics().height() + 6)
        self.table.verticalHeader().setSectionResizeMode(QtWidgets.QHeaderView.ResizeMode.Fixed)
        self.table.setHorizontalScrollMode(QtWidgets.QAbstractItemView.ScrollMode.ScrollPerPixel)
        self.table.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.table.setWordWrap(False)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QtWidgets.QHeaderView.ResizeMode.Interactive)
        # the note takes what the other columns leave, but never less than its marks
        # (:meth:`_stretch_note`): Qt's stretched last section shrank to the rest, and at
        # 1,024 px the 1.3B example's best row read "lowe…"
        header.setStretchLastSection(False)
        header.setHighlightSections(False)
        self._note_least = 0
        self.table.viewport().installEventFilter(self)
        self.plot = pg.PlotWidget(background="w")
        self.plot.setLabel("bottom", "parameters (billions)", color=_AXIS_TEXT)
        self.plot.setLabel("left", "Chinchilla loss (nats/token)", color=_AXIS_TEXT)
        _dark_axes(self.plot)
        for side in ("bottom", "left"):
            self.plot.getAxis(side).enableAutoSIPrefix(False)
        self.plot.getAxis("left").setWidth(70)
        self.plot.showGrid(x=True, y=True, alpha=0.25)
        self._points = pg.ScatterPlotItem(size=9, brush=pg.mkBrush(_POINT), pen=pg.mkPen("w"))
        self._line = pg.PlotDataItem(pen=pg.mkPen(_POINT, width=1.5), connect="finite")
        self._best = pg.ScatterPlotItem(size=18, symbol="star", brush=pg.mkBrush(_BEST),
                                        pen=pg.mkPen("#1B5E20"))
        self._rule = pg.InfiniteLine(angle=90, movable=False,
                                     pen=pg.mkPen("#7A5C00", width=1.5, style=Qt.PenStyle.DashLine),
                                     label="Chinchilla N_opt",
                                     labelOpts={"position": 0.9, "color": "#7A5C00"})
        self._rule.setVisible(False)
        for item in (self._line, self._points, self._best, self._rule):
            self.plot.addItem(item)
        # the summary takes what the table's rows leave of their pane and scrolls in it (its
        # swept / held lines and warnings wrap to a dozen beside the form at 1,024 pixels):
        # the table keeps its rows (:meth:`_fit_summary`)
        self.summary_area = QtWidgets.QScrollArea()
        self.summary_area.setObjectName("optimal.summary_area")
        self.summary_area.setWidgetResizable(True)
        self.summary_area.setFrameShape(QtWidgets.QFrame.Shape.NoFrame)
        self.summary_area.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.summary_area.setWidget(self.summary)
        self.summary_area.viewport().setAutoFillBackground(False)  # the pane's, as before
        self.summary.setAutoFillBackground(False)
        right = self._layout([self.summary_area, self.table], [self.plot])
        right.setSizes([400, 400])
        self.summary_area.parentWidget().installEventFilter(self)  # its pane: resized
        self._fit_summary()

    def eventFilter(self, watched: QtCore.QObject, event: QtCore.QEvent) -> bool:  # noqa: N802
        if event.type() == QtCore.QEvent.Type.Resize:
            if watched is self.table.viewport():
                self._stretch_note()
            elif watched is self.summary_area.parentWidget():
                self._fit_summary()
        return super().eventFilter(watched, event)

    def _stretch_note(self) -> None:
        """The note column as wide as what the other columns leave of the table, and at least
        as its marks (``_note_least``: the table scrolls sideways for the rest)."""
        t = self.table
        note = OPTIMAL_COLUMNS.index("note")
        if t.columnCount() <= note:
            return
        rest = t.viewport().width() - sum(t.columnWidth(c) for c in range(t.columnCount())
                                          if c != note)
        t.setColumnWidth(note, max(self._note_least, rest))

    def _fit_summary(self) -> None:
        """Make the summary as high as its text, or as what the table's header and rows leave
        of their pane when that is less (3 lines at least); it scrolls for the rest."""
        lines = self.fontMetrics().lineSpacing()
        t = self.table
        rows = (t.horizontalHeader().sizeHint().height() + t.verticalHeader().length()
                + t.horizontalScrollBar().sizeHint().height() + 2 * t.frameWidth())
        room = self.summary_area.parentWidget().height() - rows - 6
        width = self.summary_area.viewport().width()
        text = self.summary.heightForWidth(width) if width > 0 else -1
        if text < 0:
            text = self.summary.sizeHint().height()
        self.summary_area.setFixedHeight(max(min(text + 2, room), min(text + 2, 3 * lines + 4)))

    def _note_width(self) -> int:
        """The note column's widest: its longest mark in bold, with a cell's padding (a
        longer note, why no plan fits, is cut there; the last column stretches)."""
        bold = QtGui.QFont(self.table.font())
        bold.setBold(True)
        return QtGui.QFontMetrics(bold).horizontalAdvance("lowest loss, rule's size") + 12

    def _fields(self) -> dict[str, QtWidgets.QWidget]:
        return {"num_gpus": self.gpus, "days": self.days, "gpu_hours": self.gpu_hours,
                "assumed_mfu": self.mfu, "num_candidates": self.candidates,
                "spread": self.spread, "no_tight": self.no_tight}

    #: the budgets the form offers: ``settings()["budget"]``
    BUDGETS = ("days", "gpu_hours")

    def apply_settings(self, settings: Any) -> list[str]:
        """:meth:`_StudyPanel.apply_settings`, and ``budget`` (one of :attr:`BUDGETS`: which
        field is the budget; settings saved before it read as days, the defaults applied
        first)."""
        if not isinstance(settings, dict) or "budget" not in settings:
            ignored = super().apply_settings(settings)
        else:
            rest = dict(settings)
            budget = rest.pop("budget")
            ignored = super().apply_settings(rest)
            if budget in self.BUDGETS:
                for button in (self.by_days, self.by_gpu_hours):  # shown, not an edit
                    button.blockSignals(True)
                (self.by_gpu_hours if budget == "gpu_hours" else self.by_days).setChecked(True)
                for button in (self.by_days, self.by_gpu_hours):
                    button.blockSignals(False)
            else:
                ignored.append("budget")
                ignored.sort(key=list(settings).index)  # in the file's order
        self._show_budget()
        return ignored

    def check_settings(self, settings: dict) -> None:
        """Raise ConfigError when the budget's GPU-hours cannot be studied: what ``vtrain optimal
        --gpu-hours`` refuses, in its words (:func:`budget_days`)."""
        budget_days(settings)

    @Slot()
    def _show_budget(self) -> None:
        """Under the budget: the days a GPU-hour budget is (``vtrain optimal --gpu-hours``'
        header), or why it cannot be studied (red, as the command line refuses it)."""
        from core.cli.optimal import days_text
        from core.plan.fields import ConfigError
        settings = self.settings()
        if settings["budget"] != "gpu_hours":
            self.budget_note.setText("")
            self.budget_note.setVisible(False)
            return
        try:
            days = budget_days(settings)
        except ConfigError as exc:
            self.budget_note.setText("; ".join(str(e) for e in exc.errors))
            self.budget_note.setStyleSheet("color: #C62828;")
        else:
            from core.util.text import days_phrase
            self.budget_note.setText(f"= {days_phrase(days_text(days))} on "
                                     f"{settings['num_gpus']:,} GPUs")
            self.budget_note.setStyleSheet("color: #616161;")
        self.budget_note.setVisible(True)

    def study_inputs(self, session: Session) -> dict:
        """:func:`core.studies.optimal.study_inputs`."""
        from core.studies.optimal import study_inputs
        return study_inputs(session)

    def check_session(self, session: Session) -> None:
        """Raise ConfigError when the session's model cannot be the candidates' template (a
        mixture-of-experts or latent-attention model:
        :func:`core.studies.optimal.check_template`) or its cluster, batch or sequence cannot
        run the study."""
        from core.plan.rules import check_all_but_the_plan
        from core.studies.optimal import check_template, shape_like
        check_template(session.model)
        check_all_but_the_plan(session, shape_like(session.model, 1e9))

    def clear_result(self) -> None:
        """Empty the table, the summary and the plot."""
        self.result = None
        self.result_session = None
        self.result_settings = None
        self.results_view.set_empty(True)
        self.set_session(self._session_fn())  # no result: nothing stale
        self.table.setRowCount(0)
        self.summary.setText("")
        self._fit_summary()
        for item in (self._points, self._line, self._best):
            item.setData([], [])
        self._rule.setVisible(False)

    def settings(self) -> dict:
        """The form as :func:`core.studies.optimal.compute_optimal` keywords, with the budget:
        ``budget`` ``"days"`` (``days``) or ``"gpu_hours"`` (``gpu_hours``: the days are
        :func:`budget_days`); settings saved before ``no_tight`` or ``budget`` read as unticked
        and days (the defaults are applied first)."""
        return {"num_gpus": self.gpus.value(), "days": self.days.value(),
                "budget": "gpu_hours" if self.by_gpu_hours.isChecked() else "days",
                "gpu_hours": self.gpu_hours.value(),
                "assumed_mfu": self.mfu.value(), "num_candidates": self.candidates.value(),
                "spread": self.spread.value(), "no_tight": self.no_tight.isChecked()}

    def show_result(self, result: Any) -> None:
        """Fill the table, the summary and the loss plot from an OptimalResult."""
        from core.studies.optimal import format_params as fp
        rows = []
        for k, c in enumerate(result.candidates):
            m = c.model
            mark = ", ".join(x for x, on in (("lowest loss", k == result.best),
                                             ("rule's size", k == result.rule_index)) if on)
            if c.plan is None:
                rows.append([fp(c.n_params), str(m.num_layers), str(m.hidden_size),
                             str(m.num_attention_heads), *["–"] * (len(OPTIMAL_COLUMNS) - 5),
                             c.reason + (f" ({mark})" if mark else "")])
                continue
            p = c.plan
            # ⚠ as the Explore table's band: a plan outside what the profile was calibrated on
            outside = " ⚠" if c.within_calibration is False else ""
            rows.append([fp(c.n_params), str(m.num_layers), str(m.hidden_size),
                         str(m.num_attention_heads),
                         f"{p['tensor_parallel']} {p['pipeline_parallel']} {p['data_parallel']} "
                         f"{p['micro_batch_size']}", "yes" if p["sequence_parallel"] else "no",
                         str(p["zero_stage"]), str(p["context_parallel"]), p["schedule"],
                         p["recompute"], f"{c.mfu:.1%}{outside}",
                         f"{p['max_memory_per_gpu_bytes'] / 2 ** 30:.1f}"
                         + (" ~" if p["memory_verdict"] == "tight" else ""), fp(c.tokens),
                         f"{c.tokens_per_parameter:.3g}", f"{c.loss:.4f}", mark])
        _fill(self.table, rows, bold={result.best} if result.best is not None else set(),
              left={OPTIMAL_COLUMNS.index(n) for n in ("schedule", "recompute", "note")})
        note = OPTIMAL_COLUMNS.index("note")
        for k in range(len(rows)):  # a reason no plan fits is a sentence: cut, whole here
            item = self.table.item(k, note)
            if item.text():
                item.setToolTip(item.text())
        self._note_least = min(self.table.columnWidth(note), self._note_width())
        self._stretch_note()
        mfu = OPTIMAL_COLUMNS.index("MFU")
        for k, c in enumerate(result.candidates):  # the ⚠'s why, as the Explore band's tooltip
            if c.plan is not None and c.within_calibration is False:
                self.table.item(k, mfu).setToolTip(
                    "⚠ outside the calibration runs' features: " + c.calibration_departures
                    if c.calibration_departures else
                    "⚠ outside the calibration range (GPU count or model size beyond the "
                    "calibrated runs)")
        gib = OPTIMAL_COLUMNS.index("GiB")
        for k, c in enumerate(result.candidates):  # a tight plan's why, as the sweep's "~"
            if c.plan is not None and c.plan["memory_verdict"] == "tight":
                self.table.item(k, gib).setToolTip(
                    "~ tight: inside the margin of the GPU's memory, or over it only with the "
                    "allocator's cache")
        # the inputs it ran with (the Plan tab may hold others since: the banner says so)
        session = self.result_session or self._session_fn()
        price = session.cost.price_per_gpu_hour_usd
        cost = result.num_gpus * result.days * 24 * price
        shown = f"{result.days:g}"
        ran = self.result_settings or {}
        if ran.get("budget") == "gpu_hours":  # as vtrain optimal --gpu-hours' header
            from core.cli.optimal import days_text
            shown = f"{days_text(ran['gpu_hours'])} GPU-hours, {days_text(result.days)}"
        from core.util.text import days_phrase  # "1 day", "1.5 days": as vtrain optimal's header
        text = (f"<b>{result.num_gpus:,} x {html.escape(str(session.cluster.gpu))} for "
                f"{days_phrase(shown)}</b> (${cost:,.{0 if cost >= 100 else 2}f} at "
                f"${price:,.2f}/GPU-hour). "
                f"Chinchilla rule at an assumed MFU of {result.assumed_mfu:.0%}: "
                f"C = {result.budget_flops:.3g} FLOPs → N_opt {fp(result.rule_params)} "
                f"parameters on {fp(result.rule_tokens)} tokens.")
        if getattr(result, "template", None):  # which model the candidates' shapes follow
            from core.studies.optimal import template_text
            text += " Candidates " + html.escape(template_text(result.template), quote=False) + "."
        if result.rule_index is None:
            text += " (No candidate shape is within a factor of 2 of N_opt.)"
        if result.best is None:
            from core.studies.optimal import no_plan_explanation
            text += " " + no_plan_explanation(result, session.plan.global_batch_size)
        else:
            b = result.candidates[result.best]
            text += (f" <b>Lowest loss: {fp(b.n_params)} parameters</b> (L={b.model.num_layers}, "
                     f"h={b.model.hidden_size}) on {fp(b.tokens)} tokens at {b.mfu:.1%} MFU, "
                     f"loss {b.loss:.4f}")
            r = result.candidates[result.rule_index] if result.rule_index is not None else None
            if r is not None and r is not b and r.plan is not None:
                text += f" (the rule's size: {r.loss:.4f})"
            text += "."
        if getattr(result, "no_tight", False):  # as vtrain optimal prints it under its table
            text += f"<br>{html.escape(NO_TIGHT_OPTIMAL_NOTE, quote=False)}"
        dims = dimensions_html(result.dimensions, session.plan)  # what the sweeps swept and held
        if dims:
            text += f"<br><small>{dims}</small>"
        if result.warnings:
            from core.sim.comm import summarize_warnings
            text += f"<br><span style='color:#7A5C00'>⚠ {summarize_warnings(result.warnings)[0]}</span>"
        self.summary.setText(text)
        x = np.array([c.n_params for c in result.candidates], float) / 1e9
        y = np.array([c.loss for c in result.candidates], float)  # NaN where no plan fits
        ok = np.isfinite(y)
        self._points.setData(x[ok], y[ok])
        self._line.setData(x, y)
        if result.best is not None:
            b = result.candidates[result.best]
            self._best.setData([b.n_params / 1e9], [b.loss])
        else:
            self._best.setData([], [])
        self._rule.setPos(result.rule_params / 1e9)
        self._rule.setVisible(bool(ok.any()))
        self.plot.enableAutoRange()
        self._fit_summary()


class SchedulePanel(_StudyPanel):
    """A job trace on a shared cluster under GPU-allocation policies (:mod:`core.studies.scheduler`)."""

    _empty_text = ("<p style='font-size:13pt'><b>No study yet</b></p>"
                   "<p>Choose a job trace on the left (empty: the shipped example trace) and "
                   "the cluster's GPUs, and press <b>Run</b>.</p>"
                   "<p>Each GPU-allocation policy's job completion times, waits and "
                   "utilization appear here, with a chart of its jobs over time.</p>")

    def __init__(self, session_fn: Callable[[], Session], parent: QtWidgets.QWidget | None = None,
                 study_fn: Callable[..., Any] | None = None) -> None:
        super().__init__(session_fn, study_fn or run_schedule_study, parent)
        self._progress_noun = "sweeping the plans of job"
        self.trace = QtWidgets.QLineEdit()
        self.trace.setPlaceholderText("the example trace")
        self.trace.setToolTip(f"A JSON job trace; empty: {DEFAULT_TRACE}")
        browse = QtWidgets.QPushButton("…")
        browse.setFixedWidth(28)
        browse.clicked.connect(self._browse)
        row = QtWidgets.QHBoxLayout()
        row.addWidget(self.trace, 1)
        row.addWidget(browse)
        self.gpus = _gpu_spin()
        self.min_efficiency = QtWidgets.QDoubleSpinBox()
        self.min_efficiency.setRange(0.05, 1.0)
        self.min_efficiency.setSingleStep(0.05)
        self.min_efficiency.setValue(0.80)
        self.min_efficiency.setToolTip("Least tokens/s per GPU, relative to the job's best, that "
                                       "'efficient' and 'adaptive' accept")
        self.backfill = QtWidgets.QCheckBox("backfill")
        self.backfill.setToolTip("Let a later job start ahead of a waiting one when it fits")
        self.hold = QtWidgets.QCheckBox("keep the Plan tab's switches")
        self.hold.setToolTip("Each job's sweep keeps the Plan tab's sequence parallelism, ZeRO "
                             "stage, cp, overlaps and fusions (t, p, d, b, schedule and "
                             "recomputation swept) instead of searching what the Explore tab "
                             "searches by default: about 18 times faster, slower plans")
        self.form.addRow("Job trace", row)
        self.form.addRow("Cluster", self.gpus)
        self.form.addRow("Min. efficiency", self.min_efficiency)
        self.form.addRow("", self.backfill)
        self.form.addRow("", self.hold)
        self._watch(self.trace, self.gpus, self.min_efficiency, self.backfill, self.hold)
        hint = QtWidgets.QLabel("GPU kind, node size, network, precision and profile come from "
                                "the Plan tab; each job's sweep searches the Explore tab's default "
                                "space (or keeps the Plan tab's switches). "
                                "Policies: requested (as asked), efficient (cut to "
                                "where GPUs still pay), adaptive (efficient, but start on half "
                                "rather than wait).")
        hint.setWordWrap(True)
        hint.setStyleSheet("color: #616161;")
        self.form.addRow(hint)
        self.policies = _table(["policy", "mean JCT h", "median JCT h", "mean wait h",
                                "makespan h", "utilization", "GPU-hours"])
        self.policies.itemSelectionChanged.connect(self._on_policy_select)
        self.notes = QtWidgets.QLabel("")
        self.notes.setWordWrap(True)
        self.notes.setStyleSheet("color: #7A5C00;")
        self.gantt = pg.PlotWidget(background="w")
        self.gantt.setLabel("bottom", "hours since the first arrival", color=_AXIS_TEXT)
        _dark_axes(self.gantt)
        self.gantt.getViewBox().invertY(True)
        self.gantt.showGrid(x=True, y=False, alpha=0.25)
        self.gantt.getAxis("left").setWidth(110)
        self._bars: list[pg.GraphicsObject] = []
        self.gantt_title = QtWidgets.QLabel("")
        right = self._layout([self.policies, self.notes], [self.gantt_title, self.gantt])
        right.setStretchFactor(1, 3)

    def _fields(self) -> dict[str, QtWidgets.QWidget]:
        return {"trace": self.trace, "gpus": self.gpus, "backfill": self.backfill,
                "min_efficiency": self.min_efficiency, "hold_session_values": self.hold}

    def study_inputs(self, session: Session) -> dict:
        """:func:`core.studies.scheduler.study_inputs`."""
        from core.studies.scheduler import study_inputs
        return study_inputs(session)

    def check_session(self, session: Session) -> None:
        """Raise ConfigError when the session's cluster, precision or profile cannot run the
        study (the jobs bring their own models and batches)."""
        from core.plan.rules import check_all_but_the_plan
        from core.studies.optimal import gpt_shape
        check_all_but_the_plan(session, gpt_shape(1e9), global_batch_size=1)

    def clear_result(self) -> None:
        """Empty the policy table, the notes and the chart."""
        self.result = None
        self.result_session = None
        self.result_settings = None
        self.results_view.set_empty(True)
        self.set_session(self._session_fn())  # no result: nothing stale
        self.policies.setRowCount(0)
        self.notes.setText("")
        for item in self._bars:
            self.gantt.removeItem(item)
        self._bars = []
        self.gantt_title.setText("")

    def settings(self) -> dict:
        """The form: trace path (empty: the example trace), GPUs, backfill, min_efficiency,
        hold_session_values (:func:`core.studies.scheduler.throughput_table`)."""
        return {"trace": self.trace.text().strip(), "gpus": self.gpus.value(),
                "backfill": self.backfill.isChecked(),
                "min_efficiency": self.min_efficiency.value(),
                "hold_session_values": self.hold.isChecked()}

    def _browse(self) -> None:
        path, _ = QtWidgets.QFileDialog.getOpenFileName(self, "Open a job trace",
                                                        str(Path(self.trace.text().strip()
                                                                 or DEFAULT_TRACE).parent),
                                                        "Job traces (*.json)")
        if path:
            self.trace.setText(path)
            self.settings_changed.emit()

    def show_result(self, result: Any) -> None:
        """Fill the policy table and draw the first policy's jobs."""
        _jobs, _counts, _tps, results = result
        rows = []
        for r in results:
            m = r.metrics()
            rows.append([r.policy, f"{m['mean_jct_h']:,.1f}", f"{m['median_jct_h']:,.1f}",
                         f"{m['mean_wait_h']:,.1f}", f"{m['makespan_h']:,.1f}",
                         f"{m['utilization']:.1%}", f"{m['gpu_hours']:,.0f}"])
        _fill(self.policies, rows)
        notes = []
        if results and results[0].unrunnable:
            notes.append(f"No plan fits on any count for {', '.join(results[0].unrunnable)}: "
                         "left out of every policy.")
        for r in results:
            notes += [f"{r.policy}: {name} asked for {asked} GPUs; no plan fits "
                      f"{'there' if r.policy == 'requested' else 'at or below that'}, so it ran "
                      f"on {got}." for name, asked, got in r.adjusted]
        if len(notes) > 6:
            notes = notes[:6] + [f"… and {len(notes) - 6} more (vtrain schedule prints all)."]
        self.notes.setText("\n".join(notes))
        self.policies.selectRow(0)
        self.show_policy(0)

    @Slot()
    def _on_policy_select(self) -> None:
        rows = {i.row() for i in self.policies.selectedIndexes()}
        if rows and self.result is not None:
            self.show_policy(min(rows))

    def show_policy(self, index: int) -> None:
        """Draw policy ``index``'s jobs: waiting (arrival to start) and running (start to end)."""
        jobs, _counts, _tps, results = self.result
        r = results[index]
        for item in self._bars:
            self.gantt.removeItem(item)
        self._bars = []
        runs = r.runs
        if not runs:
            return
        t0 = min(x.job.arrival_h for x in runs)
        y = np.arange(len(runs), dtype=float)
        arr = np.array([x.job.arrival_h - t0 for x in runs])
        start = np.array([x.start_h - t0 for x in runs])
        end = np.array([x.end_h - t0 for x in runs])
        wait = pg.BarGraphItem(x0=arr, x1=start, y=y, height=0.6, brush=pg.mkBrush(_WAIT),
                               pen=pg.mkPen(None))
        run = pg.BarGraphItem(x0=start, x1=end, y=y, height=0.6, brush=pg.mkBrush(_RUN),
                              pen=pg.mkPen("w"))
        self._bars = [wait, run]
        for k, x in enumerate(runs):  # beside the bar, so short bars keep their label
            label = pg.TextItem(f"{x.gpus} GPU{'s' if x.gpus != 1 else ''}", color="#263238",
                                anchor=(0, 0.5))
            label.setPos(end[k], y[k])
            self._bars.append(label)
        for item in self._bars:
            self.gantt.addItem(item)
        self.gantt.getAxis("left").setTicks([[(k, x.job.name) for k, x in enumerate(runs)]])
        self.gantt_title.setText(f"<b>{r.policy}</b>: each job waits (grey) from its arrival to "
                                 "its start, then runs (blue) on the GPUs shown")
        self.gantt.enableAutoRange(axis="y")
        self.gantt.setXRange(0.0, float(end.max()) * 1.1, padding=0.02)  # room for the labels


class StudiesTab(QtWidgets.QTabWidget):
    """The compute-optimal model study and the shared-cluster study, as two inner tabs.

    Their settings are saved with the session (``Session.studies``).
    """

    #: a study setting was edited
    settings_changed = Signal()

    def __init__(self, session_fn: Callable[[], Session],
                 parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.optimal = OptimalPanel(session_fn)
        self.schedule = SchedulePanel(session_fn)
        self.addTab(self.optimal, "Compute-optimal model")
        self.addTab(self.schedule, "Shared cluster")
        self.setTabToolTip(0, "Which model trains to the lowest loss on N GPUs in D days")
        self.setTabToolTip(1, "A job trace on a shared cluster under GPU-allocation policies")
        self._defaults = self.current_settings()
        self._loaded: dict | None = None
        self._touched = False
        for panel in (self.optimal, self.schedule):
            panel.settings_changed.connect(self._on_edit)
            panel.run_button.clicked.connect(self._on_run)

    def set_session(self, session: Session) -> None:
        """The Plan tab's session changed: each study's result is marked stale when a field it
        reads changed since it ran (:meth:`_StudyPanel.set_session`)."""
        self.optimal.set_session(session)
        self.schedule.set_session(session)

    def current_settings(self) -> dict:
        """``{"optimal": {...}, "schedule": {...}}`` as the forms show them."""
        return {"optimal": self.optimal.settings(), "schedule": self.schedule.settings()}

    def settings(self) -> dict | None:
        """What ``Session.studies`` should hold: None while the forms show untouched defaults,
        the loaded dict while unedited (an exact round trip), else :meth:`current_settings`."""
        if not self._touched:
            return None if self._loaded is None else json.loads(json.dumps(self._loaded))
        return self.current_settings()

    @Slot()
    def _on_edit(self) -> None:
        self._touched = True
        self.settings_changed.emit()

    @Slot()
    def _on_run(self) -> None:
        self._touched = True  # the settings were used: save them from now on

    def reset(self, session: Session) -> list[str]:
        """Show ``session.studies`` (defaults for what it lacks), a running study stopped and
        dropped (:meth:`_StudyPanel.abandon_run`); returns the settings it had that could not
        be used (wrong type or out of range), as ``panel.key``."""
        self._loaded = json.loads(json.dumps(session.studies)) if session.studies is not None else None
        self._touched = False
        studies = session.studies if isinstance(session.studies, dict) else {}
        ignored = [] if session.studies is None or isinstance(session.studies, dict) else ["studies"]
        for name, panel in (("optimal", self.optimal), ("schedule", self.schedule)):
            panel.abandon_run()  # a study of the previous session
            panel.apply_settings(self._defaults[name])
            bad = panel.apply_settings(studies.get(name))
            panel.clear_result()
            panel._set_status("Settings from the file not used (unknown, of the wrong type or out "
                              "of range): "
                              + ", ".join(bad) if bad else "", False, error=bool(bad))
            ignored += [f"{name}.{k}" for k in bad]
        if ignored:  # the forms no longer show the file's settings: save what they show
            self._touched = True
        return ignored

    def shutdown(self) -> bool:
        """Stop both studies' worker threads (window closing)."""
        a = self.optimal.shutdown()
        return self.schedule.shutdown() and a
