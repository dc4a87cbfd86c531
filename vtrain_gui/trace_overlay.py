"""A measured profiler trace laid over the Plan tab's timeline, and its per-class table.

:class:`TraceOverlay` owns File > Overlay measured trace…: it reads PyTorch profiler traces
through core (:func:`core.io.kineto.read_traces`, :func:`core.io.kineto_classes.measure_step`)
on a :class:`vtrain_gui.background.BackgroundRunner`, then, for every simulation the window
shows, lays the measured iteration out under it (:func:`core.accuracy.trace_compare.measured_lanes`,
drawn by :class:`vtrain_gui.timeline.measured.MeasuredItem`) and fills :class:`TracePanel`,
predicted against measured per class and stage, the largest departures first
(:func:`core.accuracy.trace_compare.compare`). A trace that cannot be read is refused in a
dialog with core's message (file, field, rule). Nothing here parses a trace.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from PySide6 import QtCore, QtWidgets
from PySide6.QtCore import Qt, Signal, Slot

from .background import BackgroundRunner, JobFailed
from .formatting import format_duration

__all__ = ["TraceOverlay", "TracePanel", "read_job", "layout_job"]

_COLUMNS = ("stage", "class", "predicted", "measured", "departure", "measured/predicted", "note")


def read_job(paths: list[str]) -> Callable[[Any, threading.Event], Any]:
    """Job: read the traces and measure their last complete step, ``(trace, measurement)``.

    A trace core refuses ends the job with core's message (:class:`JobFailed`)."""
    def job(report, cancel: threading.Event):
        from core.io.kineto import TraceFileError, choose_step, read_traces
        from core.io.kineto_classes import measure_step
        from core.plan.fields import ConfigError
        try:
            trace = read_traces(paths)
            return trace, measure_step(trace, choose_step(trace))
        except (TraceFileError, ConfigError, ValueError, OSError) as exc:
            raise JobFailed(str(exc)) from None
    return job


def layout_job(trace, measurement, result) -> Callable[[Any, threading.Event], Any]:
    """Job: the measured lanes on ``result``'s stages and the comparison, ``(lanes, comparison)``."""
    def job(report, cancel: threading.Event):
        from core.accuracy.trace_compare import compare, measured_lanes
        from core.plan.fields import ConfigError
        try:
            plan = result.session.plan
            return measured_lanes(trace, measurement, plan), compare(measurement, result)
        except ConfigError as exc:
            raise JobFailed(str(exc)) from None
    return job


class TracePanel(QtWidgets.QWidget):
    """Predicted against measured per class and stage (rows as core sorts them: largest
    departures first, then the classes without a prediction), and a button to remove the trace."""

    remove_requested = Signal()

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.title = QtWidgets.QLabel()
        self.title.setWordWrap(True)
        remove = QtWidgets.QPushButton("Remove trace")
        remove.clicked.connect(self.remove_requested)
        head = QtWidgets.QHBoxLayout()
        head.addWidget(self.title, 1)
        head.addWidget(remove)
        self.table = QtWidgets.QTableWidget(0, len(_COLUMNS))
        self.table.setHorizontalHeaderLabels(list(_COLUMNS))
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QtWidgets.QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.horizontalHeader().setStretchLastSection(True)
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(4, 2, 4, 2)
        layout.addLayout(head)
        layout.addWidget(self.table, 1)

    def set_comparison(self, comparison, title: str) -> None:
        """Fill the table from a :class:`core.accuracy.trace_compare.TraceComparison`; rows
        predicted and measured at 0 are left out (the title says how many)."""
        rows = [r for r in comparison.rows if r.measured_s or r.predicted_s]
        left = len(comparison.rows) - len(rows)
        self.title.setText(title + (f" · {left} rows at 0 s left out" if left else ""))
        self.table.setRowCount(len(rows))
        for i, row in enumerate(rows):
            dep = row.departure_s
            cells = (str(row.stage), row.title,
                     "–" if row.predicted_s is None else format_duration(row.predicted_s),
                     format_duration(row.measured_s),
                     "–" if dep is None else ("+" if dep >= 0 else "−") + format_duration(abs(dep)),
                     "–" if row.ratio is None else f"{row.ratio:.3g}x", row.note)
            for j, text in enumerate(cells):
                item = QtWidgets.QTableWidgetItem(text)
                if j not in (1, 6):
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                self.table.setItem(i, j, item)
        self.table.resizeColumnsToContents()

    def cell(self, row: int, column: str) -> str:
        """Text of ``column`` in table row ``row`` (tests and pictures)."""
        item = self.table.item(row, _COLUMNS.index(column))
        return item.text() if item is not None else ""


class TraceOverlay(QtCore.QObject):
    """File > Overlay measured trace…: the measured lanes under the timeline and the table.

    Parameters
    ----------
    window : MainWindow
        Its ``timeline`` shows the lanes.
    file_menu : QMenu
        Gets the action.
    layout : QBoxLayout
        The Plan tab's results layout: the panel goes at its bottom (shown with a trace).

    Signals
    -------
    settled()
        The traces are read and laid over the latest simulation (or refused).
    """

    settled = Signal()

    def __init__(self, window, file_menu: QtWidgets.QMenu, layout: QtWidgets.QBoxLayout) -> None:
        super().__init__(window)
        self._window = window
        self.action = file_menu.addAction("Overlay measured &trace…")
        self.action.setToolTip("Read PyTorch profiler traces (one file per rank) and show the "
                               "measured iteration under the simulated one (vtrain trace import)")
        self.action.triggered.connect(self._on_action_trigger)
        self.panel = TracePanel()
        self.panel.setVisible(False)
        self.panel.remove_requested.connect(self.clear)
        self.panel.setMaximumHeight(260)
        layout.addWidget(self.panel)
        self.runner = BackgroundRunner("trace", stop_when_idle=True, parent=self)
        self.runner.finished.connect(self._on_job_finish)
        self.runner.failed.connect(self._on_job_fail)
        self.paths: list[str] = []
        self.trace = self.measurement = self.lanes = self.comparison = None
        self.last_error: str | None = None
        self.dialog: QtWidgets.QMessageBox | None = None
        self._jobs: dict[int, str] = {}
        self._result = self._pending_result = None
        self._laid_out_for = None

    @property
    def busy(self) -> bool:
        """Whether traces are being read, or read and not yet laid over the latest result."""
        return self.runner.busy or (self.measurement is not None and self._result is not None
                                    and self._laid_out_for is not self._result)

    def load(self, paths: list[str]) -> None:
        """Read ``paths`` (one trace per rank) in the background and overlay them."""
        self.paths = [str(p) for p in paths]
        self.last_error = None
        self._jobs[self.runner.submit(read_job(self.paths))] = "read"
        self._window.statusBar().showMessage(f"Reading {len(self.paths)} trace file(s)…", 5000)

    def set_result(self, result) -> None:
        """The window shows ``result``: lay the measured iteration over it."""
        self._result = result
        if self.measurement is not None:
            self._lay_out()

    def clear(self) -> None:
        """Remove the measured lanes and the table."""
        self.paths, self.trace, self.measurement = [], None, None
        self.lanes = self.comparison = self._laid_out_for = None
        self._window.timeline.set_measured(None)
        self.panel.setVisible(False)

    def shutdown(self) -> None:
        """Stop the runner (the window is closing)."""
        self.runner.shutdown()

    def _lay_out(self) -> None:
        result = self._result
        self._jobs[self.runner.submit(layout_job(self.trace, self.measurement, result))] = "layout"
        self._pending_result = result

    @Slot()
    def _on_action_trigger(self) -> None:
        paths, _ = QtWidgets.QFileDialog.getOpenFileNames(
            self._window, "Overlay measured trace", "",
            "PyTorch profiler traces (*.json *.json.gz *.pt.trace.json);;All files (*)")
        if paths:
            self.load(paths)

    @Slot(int, object, float)
    def _on_job_finish(self, run_id: int, value: object, seconds: float) -> None:
        what = self._jobs.pop(run_id, None)
        if what == "read":
            self.trace, self.measurement = value
            if self._result is not None:
                self._lay_out()
            return
        if what != "layout" or self.measurement is None:
            return
        self.lanes, self.comparison = value
        self._laid_out_for = self._pending_result
        self._window.timeline.set_measured(self.lanes)
        m = self.measurement
        names = ", ".join(QtCore.QFileInfo(p).fileName() for p in self.paths)
        self.panel.set_comparison(self.comparison, f"Measured ProfilerStep#{m.step} of "
                                  f"{len(m.ranks)} rank(s) ({names}) against the prediction, "
                                  "largest departures first")
        self.panel.setVisible(True)
        self._window.statusBar().clearMessage()
        if not self._jobs:
            self.settled.emit()

    @Slot(int, str)
    def _on_job_fail(self, run_id: int, message: str) -> None:
        what = self._jobs.pop(run_id, None)
        self.last_error = message
        if what == "read":
            self.clear()
        elif what == "layout":  # these traces do not fit this plan: no lanes or table of an
            # older plan stay under its timeline; they are laid again over the next result
            self.lanes = self.comparison = None
            self._laid_out_for = self._pending_result
            self._window.timeline.set_measured(None)
            self.panel.setVisible(False)
        box = QtWidgets.QMessageBox(QtWidgets.QMessageBox.Icon.Warning, "Trace not overlaid",
                                    message, QtWidgets.QMessageBox.StandardButton.Ok, self._window)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.open()  # not blocking: the window keeps working
        self.dialog = box
        self.settled.emit()
