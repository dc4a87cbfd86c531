"""What the Studies tab's two studies share: the form-and-results panel (:class:`StudyPanel`,
its worker thread, Cancel, the stale-result veil), its number fields and tables, and the
plots' axes (:mod:`vtrain_gui.studies`, :mod:`vtrain_gui.study_schedule`)."""

from __future__ import annotations

from typing import Any, Callable

import sys

import pyqtgraph as pg
from PySide6 import QtCore, QtGui, QtWidgets
from PySide6.QtCore import Qt, Signal, Slot

from core.plan.session import Session
from core.studies.optimal import MAX_GPUS

from .empty_state import EmptyStack, StaleVeil, under_banner, warning_banner
from .workers import SweepRunner

__all__ = ["StudyPanel", "PercentSpinBox", "GpuHoursSpinBox", "FrozenFirstColumnTable",
           "SIDE_WIDTH", "AXIS_TEXT", "stale_text", "cancel_check", "dark_axes", "gpu_spin",
           "study_table", "fill_table"]

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


def cancel_check(cancel: Any) -> None:
    from core.studies.sweep import SweepCancelled
    if cancel is not None and cancel.is_set():
        raise SweepCancelled("study cancelled")


#: Axis text and lines of the study plots: dark on white (pyqtgraph's default grey is faint).
AXIS_TEXT = "#202020"
AXIS_LINE = "#404040"


def dark_axes(plot: pg.PlotWidget) -> None:
    """Dark axis lines and tick labels on ``plot``'s left and bottom axes."""
    for side in ("left", "bottom"):
        axis = plot.getAxis(side)
        axis.setPen(pg.mkPen(AXIS_LINE))
        axis.setTextPen(pg.mkPen(AXIS_TEXT))


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


def gpu_spin() -> QtWidgets.QSpinBox:
    """A GPU-count field: 1 to :data:`core.studies.optimal.MAX_GPUS`, 1,024 to start with."""
    w = QtWidgets.QSpinBox()
    w.setRange(1, MAX_GPUS)
    w.setValue(1024)
    w.setSuffix(" GPUs")
    w.setGroupSeparatorShown(True)
    return w


def study_table(headers: list[str], frozen: bool = False) -> QtWidgets.QTableWidget:
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


def fill_table(table: QtWidgets.QTableWidget, rows: list[list[str]], bold: set[int] = frozenset(),
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


class StudyPanel(QtWidgets.QWidget):
    """Settings form, Run / Cancel, a status line and a runner; subclasses add the views."""

    #: a setting was edited (the window marks the session modified)
    settings_changed = Signal()

    def __init__(self, session_fn: Callable[[], Session], study_fn: Callable[..., Any],
                 parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        #: the rules the settings last applied broke, by key (:meth:`apply_settings`)
        self.unused_rules: dict[str, str] = {}
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
        # a word longer than the form is wide (a file's 60-character value in a refusal) is
        # cut at the label's edge instead of widening the form past the panel (clipped)
        self.status.setSizePolicy(QtWidgets.QSizePolicy.Policy.Ignored,
                                  QtWidgets.QSizePolicy.Policy.Preferred)
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

    def setting_rule(self, key: str, value: Any) -> str | None:
        """The rule ``value`` breaks as the saved setting ``key`` (None: the form shows it):
        an unknown key, a value of the wrong type, or one outside its field's range (the
        field's own minimum and maximum; a fraction such as the MFU as a fraction)."""
        from core.util.text import short_repr
        fields = self._fields()
        w = fields.get(key)
        if w is None:
            return f"is not a setting of this study (they are {', '.join(fields)})"
        shown = short_repr(value)
        number = not isinstance(value, bool)
        if isinstance(w, QtWidgets.QSpinBox):
            if not (number and isinstance(value, int) and w.minimum() <= value <= w.maximum()):
                return f"{shown} must be a whole number from {w.minimum():,} to {w.maximum():,}"
        elif isinstance(w, QtWidgets.QDoubleSpinBox):
            if not (number and isinstance(value, (int, float))
                    and w.minimum() <= value <= w.maximum()):
                fraction = " (a fraction: 0.4 is 40 %)" if isinstance(w, PercentSpinBox) else ""
                return (f"{shown} must be a number from {w.minimum():g} to {w.maximum():g}"
                        f"{fraction}")
        elif isinstance(w, QtWidgets.QCheckBox):
            if not isinstance(value, bool):
                return f"{shown} must be true or false"
        elif isinstance(w, QtWidgets.QLineEdit):
            if not isinstance(value, str):
                return f"{shown} must be text"
        return None

    def apply_settings(self, settings: Any) -> list[str]:
        """Show ``settings`` (as :meth:`settings` gives them); values of the wrong type or out of
        a field's range are left at the form's value and named in the returned list, each with
        the rule it breaks in :attr:`unused_rules` (key -> rule, :meth:`setting_rule`)."""
        ignored: list[str] = []
        self.unused_rules: dict[str, str] = {}
        if not isinstance(settings, dict):
            if settings is None:
                return []
            from core.util.text import short_repr
            self.unused_rules["(not a JSON object)"] = f"{short_repr(settings)} must be a JSON object"
            return ["(not a JSON object)"]
        fields = self._fields()
        for key, value in settings.items():
            w = fields.get(key)
            rule = self.setting_rule(key, value)
            if rule is not None:
                self.unused_rules[key] = rule
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
