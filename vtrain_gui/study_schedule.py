"""The Studies tab's shared-cluster scheduler study (vTrain's second case study): its form,
its worker-thread body and its results, what :mod:`core.studies.scheduler` computes and
``vtrain schedule`` prints."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable


import numpy as np
import pyqtgraph as pg
from PySide6 import QtWidgets
from PySide6.QtCore import Qt, Slot

from core.plan.session import Session

from core.cli.schedule import job_cells, job_columns, outside_calibration_lines

from .study_panel import (AXIS_TEXT, StudyPanel,
                          cancel_check, dark_axes, fill_table, gpu_spin, study_table)

__all__ = ["SchedulePanel", "DEFAULT_TRACE", "run_schedule_study"]

#: The trace the scheduler study opens with.
DEFAULT_TRACE = Path(__file__).resolve().parent.parent / "resources" / "traces" / "jobs_trace.json"
_WAIT = "#CFD8DC"
_RUN = "#1565C0"


def run_schedule_study(session: Session, settings: dict, _unused: Any,
                       progress: Callable[[int, int], None], cancel: Any) -> Any:
    """Worker-thread body of the scheduler study: ``(jobs, counts, tokens_per_s, results,
    rows, warnings)``, ``rows`` the jobs table (:func:`core.studies.scheduler.job_rows`) and
    ``warnings`` the sweeps' (:func:`core.sim.comm.summarize_warnings`), as ``vtrain schedule``
    prints them."""
    from core.sim.comm import summarize_warnings
    from core.sim.simulate import profile_gpu_note, session_profile
    from core.studies.scheduler import job_rows, read_jobs, schedule_study

    path = settings["trace"] or str(DEFAULT_TRACE)
    jobs = read_jobs(path)

    def on_progress(done: int, total: int, _name: str) -> None:
        cancel_check(cancel)
        progress(done, total)
    store = session_profile(session)  # opened once, as vtrain schedule does
    warnings = [w for w in [profile_gpu_note(store, session.cluster)] if w]
    counts, tps, plans, results = schedule_study(jobs, session, settings["gpus"],
                                                 backfill=settings["backfill"],
                                                 min_efficiency=settings["min_efficiency"],
                                                 source=Path(path).name, store=store,
                                                 progress=on_progress, cancel=cancel,
                                                 warnings=warnings,
                                                 hold_session_values=bool(
                                                     settings.get("hold_session_values", False)))
    rows = job_rows(jobs, counts, tps, plans, settings["min_efficiency"])
    return jobs, counts, tps, results, rows, summarize_warnings(warnings)


def _fmt(v: float | None, spec: str) -> str:
    """``v`` formatted by ``spec``; "–" when undefined (``vtrain schedule``'s policy table)."""
    return "–" if v is None else format(v, spec)


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
        self.jobs = study_table(job_columns(0.8))
        self.jobs.setToolTip("Each job's predicted tokens/s per GPU as a share of its best over "
                             "all counts, at its request and at the efficient count; ⚠: the "
                             "plan there is outside what the profile was calibrated on (its "
                             "tooltip says what)")
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
        self.notes.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        # the footnotes scroll: a dozen departures and warnings would crush the chart
        notes = QtWidgets.QScrollArea()
        notes.setWidget(self.notes)
        notes.setWidgetResizable(True)
        notes.setFrameShape(QtWidgets.QFrame.Shape.NoFrame)
        notes.setMaximumHeight(110)
        self.notes_area = notes
        right = self._layout([self.policies, self.jobs], [notes, self.gantt_title, self.gantt])
        right.setStretchFactor(0, 1)
        right.setStretchFactor(1, 1)
        right.setSizes([1, 1])  # halves at first (by size hints the chart took most)

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
        self.jobs.setRowCount(0)
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
        """Fill the jobs table and the policy table as ``vtrain schedule`` prints them
        (:func:`core.cli.schedule.job_cells`), the notes (the calibration footnote, the
        replays' notes and the sweeps' warnings) and draw the first policy's jobs."""
        from core.studies.scheduler import schedule_notes
        _jobs, _counts, _tps, results, job_rows_, warnings = result
        min_efficiency = (self.result_settings or self.settings())["min_efficiency"]
        self.jobs.setHorizontalHeaderLabels(job_columns(min_efficiency))
        fill_table(self.jobs, [job_cells(r) for r in job_rows_], left={0, 1})
        tps_col = len(job_columns(min_efficiency)) - 1
        for k, r in enumerate(job_rows_):  # the ⚠'s why where it stands, as the optimal table
            if r.calibration_departures:
                self.jobs.item(k, tps_col).setToolTip(r.calibration_departures)
        rows = []
        for r in results:
            m = r.metrics()
            rows.append([r.policy, _fmt(m['mean_jct_h'], ",.1f"), _fmt(m['median_jct_h'], ",.1f"),
                         _fmt(m['mean_wait_h'], ",.1f"), _fmt(m['makespan_h'], ",.1f"),
                         _fmt(m['utilization'], ".1%"), _fmt(m['gpu_hours'], ",.0f")])
        fill_table(self.policies, rows)
        # as high as its rows: the jobs table below gets the rest
        self.policies.setMaximumHeight(self.policies.horizontalHeader().height()
                                       + self.policies.verticalHeader().length()
                                       + 2 * self.policies.frameWidth() + 2)
        notes = outside_calibration_lines(job_rows_) + schedule_notes(results) + [
            f"warning: {w}" for w in warnings]
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
        results = self.result[3]
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
