"""The Studies tab's shared-cluster scheduler study (vTrain's second case study): its form,
its worker-thread body and its results, what :mod:`core.studies.scheduler` computes and
``vtrain schedule`` prints."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable


import numpy as np
import pyqtgraph as pg
from PySide6 import QtWidgets
from PySide6.QtCore import Slot

from core.plan.session import Session

from .study_panel import (AXIS_TEXT, StudyPanel,
                          cancel_check, dark_axes, fill_table, gpu_spin, study_table)

__all__ = ["SchedulePanel", "DEFAULT_TRACE", "run_schedule_study"]

#: The trace the scheduler study opens with.
DEFAULT_TRACE = Path(__file__).resolve().parent.parent / "resources" / "traces" / "jobs_trace.json"
_WAIT = "#CFD8DC"
_RUN = "#1565C0"


def run_schedule_study(session: Session, settings: dict, _unused: Any,
                       progress: Callable[[int, int], None], cancel: Any) -> Any:
    """Worker-thread body of the scheduler study: ``(jobs, counts, tokens_per_s, results)``."""
    from core.studies.scheduler import read_jobs, schedule_study

    path = settings["trace"] or str(DEFAULT_TRACE)
    jobs = read_jobs(path)

    def on_progress(done: int, total: int, _name: str) -> None:
        cancel_check(cancel)
        progress(done, total)
    counts, tps, results = schedule_study(jobs, session, settings["gpus"],
                                          backfill=settings["backfill"],
                                          min_efficiency=settings["min_efficiency"],
                                          source=Path(path).name, progress=on_progress,
                                          cancel=cancel,
                                          hold_session_values=bool(
                                              settings.get("hold_session_values", False)))
    return jobs, counts, tps, results


class SchedulePanel(StudyPanel):
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
        self.gpus = gpu_spin()
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
        self.policies = study_table(["policy", "mean JCT h", "median JCT h", "mean wait h",
                                "makespan h", "utilization", "GPU-hours"])
        self.policies.itemSelectionChanged.connect(self._on_policy_select)
        self.notes = QtWidgets.QLabel("")
        self.notes.setWordWrap(True)
        self.notes.setStyleSheet("color: #7A5C00;")
        self.gantt = pg.PlotWidget(background="w")
        self.gantt.setLabel("bottom", "hours since the first arrival", color=AXIS_TEXT)
        dark_axes(self.gantt)
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
        fill_table(self.policies, rows)
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
