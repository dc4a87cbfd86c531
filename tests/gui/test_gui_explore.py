"""Explore tab: sweep in the background, scatter + table in step, pick a plan, cancel, save settings."""

from __future__ import annotations

import csv
import json
import shutil
import threading

import numpy as np
import pytest
from PySide6 import QtCore, QtGui, QtWidgets
from PySide6.QtCore import Qt

from core.plan.session import Session
from core.io.session import load_any, load_session
from core.studies.sweep import COLUMNS, SweepCancelled, SweepSpace, run_sweep
from tests.conftest import EXAMPLES
from vtrain_gui.sweep_table import TABLE_COLUMNS, SweepTableModel
from vtrain_gui.main_window import MainWindow
from vtrain_gui.background import live_runners
from vtrain_gui.workers import SweepRunner

SMALL = EXAMPLES / "gpt3_1.3b_single_node.json"  # GPT-3 1.3B, B=256, 8 GPUs in one node
MTNLG = EXAMPLES / "mtnlg_530b.json"
#: ~200 plans of GPT-3 1.3B on at most 8 GPUs, some not fitting, a Pareto front of several
SMALL_SETTINGS = {"space": SweepSpace(max_gpus=8, micro_batch_sizes=(1, 2, 4),
                                      schedules=("1f1b", "gpipe")).to_dict(),
                  "deadline_days": 5.0}


def _session_file(tmp_path, source=SMALL, sweep=SMALL_SETTINGS, name="small.json"):
    doc = json.loads(source.read_text())
    if sweep is not None:
        doc["sweep"] = sweep
    path = tmp_path / name
    path.write_text(json.dumps(doc, indent=2) + "\n")
    return path


@pytest.fixture(scope="module")
def small_result():
    session = load_any(SMALL)
    return run_sweep(session, SweepSpace.from_dict(SMALL_SETTINGS["space"]), deadline_days=5.0,
                     prune=False)


def _run(window, qtbot, timeout=60_000):
    with qtbot.waitSignal(window.explore.sweep_finished, timeout=timeout) as blocker:
        assert window.explore.run()
    return blocker.args[0]


def _type(qtbot, line_edit, text):
    """Replace the text of a line edit as a user would (emits ``textEdited``)."""
    line_edit.selectAll()
    qtbot.keyClicks(line_edit, text)


# --------------------------------------------------------------------------- the runner

def test_sweep_runner_reports_progress_and_result_on_the_gui_thread(qtbot):
    seen = {}

    def fake(session, space, deadline_days, progress, cancel):
        seen["thread"] = threading.current_thread()
        seen["args"] = (space, deadline_days)
        for done in range(0, 101, 10):
            progress(done, 100)
        return "the result"

    runner = SweepRunner(fake)
    progress = []
    recorder = _Recorder(progress)
    runner.progress.connect(recorder.on_progress)
    try:
        with qtbot.waitSignal(runner.finished, timeout=5000) as blocker:
            rid = runner.start(Session(), SweepSpace(max_gpus=8), 30.0)
        assert blocker.args[:2] == [rid, "the result"]
        assert seen["thread"] is not threading.main_thread()
        assert seen["args"] == (SweepSpace(max_gpus=8), 30.0)
        qtbot.waitUntil(lambda: progress and progress[-1] == (100, 100), timeout=2000)
        assert progress[0] == (0, 100)  # the first report always arrives; later ones throttled
        assert not runner.busy
    finally:
        assert runner.shutdown()
    assert not runner.is_thread_running()


def test_sweep_runner_cancel_and_latest_wins(qtbot):
    started = []
    gate = threading.Event()

    def blocking(session, space, deadline_days, progress, cancel):
        started.append(space.max_gpus)
        progress(0, 10)
        if space.max_gpus == 1:
            gate.wait(5)
            if cancel.is_set():
                raise SweepCancelled("stop")
        return space.max_gpus

    runner = SweepRunner(blocking)
    try:
        with qtbot.waitSignal(runner.cancelled, timeout=5000) as cancelled:
            first = runner.start(Session(), SweepSpace(max_gpus=1))
            qtbot.waitUntil(lambda: started == [1], timeout=2000)
            runner.cancel()
            assert runner.busy
            gate.set()
        assert cancelled.args == [first]
        assert not runner.busy

        # a new start while one runs cancels it and runs the new one next
        gate.clear()
        done = []
        recorder = _Recorder(done)
        runner.finished.connect(recorder.on_finished)
        runner.start(Session(), SweepSpace(max_gpus=1))
        qtbot.waitUntil(lambda: started == [1, 1], timeout=2000)
        last = runner.start(Session(), SweepSpace(max_gpus=2))
        gate.set()
        qtbot.waitUntil(lambda: done == [(last, 2)], timeout=5000)
        assert started == [1, 1, 2]
    finally:
        gate.set()
        assert runner.shutdown()


def test_sweep_runner_failure_and_shutdown_while_running(qtbot):
    def broken(session, space, deadline_days, progress, cancel):
        raise ValueError("no profile for this GPU")

    runner = SweepRunner(broken)
    try:
        with qtbot.waitSignal(runner.failed, timeout=5000) as blocker:
            runner.start(Session(), SweepSpace(max_gpus=8))
        assert "no profile for this GPU" in blocker.args[1]
    finally:
        assert runner.shutdown()

    def endless(session, space, deadline_days, progress, cancel):
        while not cancel.wait(0.01):
            pass
        raise SweepCancelled("stop")

    runner = SweepRunner(endless)
    runner.start(Session(), SweepSpace(max_gpus=8))
    qtbot.waitUntil(runner.is_thread_running, timeout=2000)
    assert runner.shutdown(5000)  # sets the cancel event, so the sweep ends at once
    assert not runner.is_thread_running()
    assert not live_runners()


class _Recorder(QtCore.QObject):
    def __init__(self, out):
        super().__init__()
        self.out = out

    @QtCore.Slot(int, int, int)
    def on_progress(self, run_id, done, total):
        self.out.append((done, total))

    @QtCore.Slot(int, object, float)
    def on_finished(self, run_id, result, seconds):
        self.out.append((run_id, result))


# --------------------------------------------------------------------------- the table model

def test_table_model_sorts_filters_and_maps_rows(qtbot, small_result):
    r = small_result
    model = SweepTableModel()
    model.set_result(r)
    assert model.rowCount() == r.num_plans and model.columnCount() == len(TABLE_COLUMNS)
    days_col = [c.attr for c in TABLE_COLUMNS].index("training_days")
    cost_col = [c.attr for c in TABLE_COLUMNS].index("cost_usd")
    fits_col = [c.attr for c in TABLE_COLUMNS].index("memory_verdict")

    model.sort(cost_col, Qt.SortOrder.AscendingOrder)
    shown = model.shown()
    assert np.all(np.diff(r.cost_usd[shown]) >= 0)
    model.sort(cost_col, Qt.SortOrder.DescendingOrder)
    assert np.all(np.diff(r.cost_usd[model.shown()]) <= 0)
    # stable: sorting by days, then by fits (the memory verdict, safest first), lists the
    # plans that fit by days first, then the tight ones (they fit too) by days
    model.sort(days_col, Qt.SortOrder.AscendingOrder)
    model.sort(fits_col, Qt.SortOrder.DescendingOrder)
    shown = model.shown()
    k = int(np.count_nonzero(r.fits_in_memory))  # simulated, pruned or too large to simulate
    assert r.fits_in_memory[shown[:k]].all() and not r.fits_in_memory[shown[k:]].any()
    verdicts = r.memory_verdict[shown[:k]]
    j = int(np.count_nonzero(verdicts == "fits"))
    assert (verdicts[:j] == "fits").all() and (verdicts[j:] == "tight").all()
    assert np.all(np.diff(r.training_days[shown[:j]]) >= 0)
    assert np.all(np.diff(r.training_days[shown[j:k]]) >= 0)
    # the verdict answered as the "fits" column's header asks: yes, tight or no
    assert model.data(model.index(0, fits_col)) == {"fits": "yes", "tight": "tight",
                                                    "does not fit": "no"}[r.memory_verdict[shown[0]]]

    mask = r.select(fits_only=True, deadline_days=5.0)
    model.set_mask(mask, np.zeros(r.num_plans, bool))
    assert model.rowCount() == int(mask.sum())
    for row in range(model.rowCount()):
        i = model.result_index(row)
        assert mask[i] and model.row_of(i) == row
    assert all(model.row_of(i) == -1 for i in np.flatnonzero(~mask))

    row = 0
    i = model.result_index(row)
    assert model.data(model.index(row, days_col), Qt.ItemDataRole.UserRole) == r.training_days[i]
    assert model.data(model.index(row, 0)) == str(r.tensor_parallel[i])
    assert model.headerData(cost_col, Qt.Orientation.Horizontal) == "cost"


# --------------------------------------------------------------------------- the tab in the window

def test_small_sweep_runs_in_the_background_and_is_drawn(window, qtbot, tmp_path, real_simulate):
    path = _session_file(tmp_path)
    with qtbot.waitSignal(window.result_shown, timeout=30_000):
        assert window.open_path(path)
    window.show_tab("explore")
    explore = window.explore
    assert not explore.run_button.isHidden()
    gui_thread = threading.current_thread()

    result = _run(window, qtbot)
    assert threading.current_thread() is gui_thread
    assert not explore.runner.busy and explore.run_button.isEnabled()
    assert not explore.cancel_button.isEnabled()
    assert 50 <= result.num_plans <= 2000 and 0 < result.num_feasible < result.num_plans
    # settings without sequence parallelism, ZeRO stages and cp sweep the command line's default
    assert result.space == SweepSpace.from_dict(SMALL_SETTINGS["space"])
    assert result.deadline_days == 5.0
    assert f"{result.num_plans:,} plans" in explore.status_text

    # scatter: every simulated plan once, the ones that do not fit in the grey item (branch and
    # bound, as the command line: the plans pruned or not fitting in memory have no figures)
    items = explore.plot.scatter_items()
    feasible = items["feasible"].data["data"].astype(int)
    infeasible = items["infeasible"].data["data"].astype(int)
    assert result.pruned.any()
    assert sorted([*feasible, *infeasible]) == np.flatnonzero(
        np.isfinite(result.training_days)).tolist()
    assert result.fits_in_memory[feasible].all() and not result.fits_in_memory[infeasible].any()
    # log axes: x is log10(days), y log10(cost)
    i0 = feasible[0]
    spot = items["feasible"].points()[0]
    assert spot.pos().x() == pytest.approx(np.log10(result.training_days[i0]))
    assert spot.pos().y() == pytest.approx(np.log10(result.cost_usd[i0]))

    # without filters the front and the marks are the core's
    assert np.array_equal(explore.front_mask(), result.pareto)
    assert sorted(items["front"].data["data"].astype(int)) == sorted(np.flatnonzero(result.pareto))
    x, _ = explore.plot.front_line_xy()
    assert len(x) == result.pareto.sum() and np.all(np.diff(x) >= 0)
    marks = explore.marks()
    assert marks == {"fastest": result.fastest, "cheapest": result.cheapest,
                     "deadline": result.cheapest_within_deadline}
    assert [int(v) for v in items["fastest"].data["data"]] == [result.fastest]
    assert "fastest" in explore.summary_text and "cheapest within 5 days" in explore.summary_text
    # the plans outside the store's calibration are counted as the command line counts them:
    # among the simulated plans (branch and bound pruned some, which have no figures)
    if result.num_outside_calibration:
        assert (f"⚠ {result.num_outside_calibration:,} simulated plans that fit leave what the "
                "profile was calibrated on") in explore.summary_text
    else:
        assert "⚠" not in explore.summary_text

    # table: one row per plan, the front first
    assert explore.table_model.rowCount() == result.num_plans
    top = [explore.table_model.result_index(r) for r in range(int(result.pareto.sum()))]
    assert result.pareto[top].all()
    # the editor's plan is in the sweep and marked
    current = result.index_of(window.session().plan)
    assert current is not None
    assert [int(v) for v in items["current"].data["data"]] == [current]
    assert not explore.is_stale


def test_picking_a_point_or_a_row_loads_the_plan(window, qtbot, tmp_path, real_simulate):
    path = _session_file(tmp_path)
    with qtbot.waitSignal(window.result_shown, timeout=30_000):
        window.open_path(path)
    window.show_tab("explore")
    explore = window.explore
    result = _run(window, qtbot)
    notes = window.session().notes

    # click the cheapest point, as pyqtgraph reports a click on a spot
    front = explore.plot.scatter_items()["front"]
    spot = next(p for p in front.points() if int(p.data()) == result.cheapest)
    with qtbot.waitSignal(window.result_shown, timeout=30_000) as shown:
        front.sigClicked.emit(front, [spot], None)
    assert explore.selected_index == result.cheapest
    assert window.session().plan == result.plan(result.cheapest)
    assert window.session().notes == notes
    assert window.isWindowModified()
    assert shown.args[0].session.plan == result.plan(result.cheapest)
    # the selection shows in both views, and the editor's plan is now that point
    row = explore.table_model.row_of(result.cheapest)
    assert explore.table.selectionModel().isRowSelected(row, QtCore.QModelIndex())
    assert [int(v) for v in explore.plot.scatter_items()["selected"].data["data"]] == [result.cheapest]
    assert [int(v) for v in explore.plot.scatter_items()["current"].data["data"]] == [result.cheapest]
    # the timeline of the picked plan is in the Explore tab too
    assert explore.preview.num_tasks == shown.args[0].graph.num_tasks
    assert window.current_tab() == "explore"
    # same numbers as simulating that plan alone
    assert shown.args[0].report.iteration_time_s == pytest.approx(
        result.iteration_time_s[result.cheapest], rel=1e-9)

    # pick another plan with the keyboard in the table
    explore.table.setFocus()
    target_row = 5
    target = explore.table_model.result_index(target_row)
    with qtbot.waitSignal(window.result_shown, timeout=30_000) as shown:
        explore.table.selectRow(target_row)
    assert explore.selected_index == target
    assert window.editor.session().plan == result.plan(target)
    assert shown.args[0].session.plan == result.plan(target)
    assert [int(v) for v in explore.plot.scatter_items()["selected"].data["data"]] == [target]

    # sorting keeps the selection on the same plan
    cost_col = [c.attr for c in TABLE_COLUMNS].index("cost_usd")
    explore.table.sortByColumn(cost_col, Qt.SortOrder.DescendingOrder)
    rows = explore.table.selectionModel().selectedRows()
    assert [explore.table_model.result_index(ix.row()) for ix in rows] == [target]
    assert explore.selected_index == target

    # a double click (or the button) opens the Plan tab; the Explore selection stays
    explore.open_button.click()
    assert window.current_tab() == "plan"
    window.show_tab("explore")
    assert explore.selected_index == target
    qtbot.waitUntil(lambda: not window.runner.busy, timeout=30_000)


def test_filters_change_plot_table_front_and_marks(window, qtbot, tmp_path, real_simulate):
    with qtbot.waitSignal(window.result_shown, timeout=30_000):
        window.open_path(_session_file(tmp_path))
    explore = window.explore
    result = _run(window, qtbot)

    explore.fits_only.setChecked(True)
    # every plan that fits, the pruned ones too (they fit; they have no figures to plot)
    assert explore.table_model.rowCount() == int(np.count_nonzero(result.fits_in_memory))
    assert explore.plot.scatter_items()["infeasible"].data.size == 0

    explore.gpu_filter_mode.setCurrentText("exactly")
    explore.gpu_filter.setValue(4)
    mask = result.select(num_gpus=4, fits_only=True)
    assert np.array_equal(explore.visible_mask(), mask)
    assert explore.table_model.rowCount() == int(mask.sum())
    assert (result.num_gpus[explore.table_model.shown()] == 4).all()
    front = explore.front_mask()
    assert front.any() and not (front & ~mask).any()
    from core.studies.sweep import pareto_front
    assert np.array_equal(front, pareto_front(result.training_days, result.cost_usd, mask))
    fastest = explore.marks()["fastest"]
    simulated = mask & result.feasible  # the pruned plans shown have no figures
    assert fastest == np.flatnonzero(simulated)[np.argmin(result.training_days[simulated])]

    explore.gpu_filter_mode.setCurrentText("at most")
    explore.gpu_filter.setValue(2)
    assert (result.num_gpus[explore.table_model.shown()] <= 2).all()

    # the deadline works at once, without a new sweep; its legend entry comes with it
    explore.gpu_filter_mode.setCurrentText("all GPU counts")
    explore.settings_panel.deadline.setValue(0.0)
    assert "cheapest within deadline" not in explore.plot.legend_labels()
    explore.settings_panel.deadline.setValue(3.0)
    assert "cheapest within deadline" in explore.plot.legend_labels()
    assert explore.marks()["deadline"] == result.cheapest_within(3.0)
    explore.within_deadline.setChecked(True)
    assert (result.training_days[explore.table_model.shown()] <= 3.0).all()
    assert explore.table_model.rowCount() == int(result.select(fits_only=True, deadline_days=3.0).sum())
    assert window.isWindowModified()  # the deadline is a saved setting
    qtbot.waitUntil(lambda: not window.runner.busy, timeout=30_000)


def test_cancel_keeps_the_previous_result(window, qtbot, tmp_path, real_simulate):
    with qtbot.waitSignal(window.result_shown, timeout=30_000):
        window.open_path(_session_file(tmp_path))
    explore = window.explore
    small = _run(window, qtbot)

    # the MT-NLG sweep takes seconds; cancel it after its first progress report
    with qtbot.waitSignal(window.result_shown, timeout=30_000):
        window.open_path(MTNLG, as_template=True)
    assert explore.result is None  # another session: the old sweep is gone
    explore.set_result(small)  # (shown again to check that a cancel keeps it)
    with qtbot.waitSignal(explore.runner.phase_progress, timeout=30_000):  # enumerating
        assert explore.run()
    assert explore.cancel_button.isEnabled() and not explore.run_button.isEnabled()
    with qtbot.waitSignal(explore.sweep_cancelled, timeout=5_000):
        explore.cancel_button.click()
    assert "cancelled" in explore.status_text
    assert explore.result is small
    assert explore.run_button.isEnabled() and not explore.cancel_button.isEnabled()
    assert not explore.runner.busy


def test_closing_the_window_stops_a_running_sweep(qtbot, settings, real_simulate):
    w = MainWindow(settings=settings)
    qtbot.addWidget(w)
    w.show()
    with qtbot.waitSignal(w.result_shown, timeout=30_000):
        w.open_path(MTNLG, as_template=True)
    with qtbot.waitSignal(w.explore.runner.phase_progress, timeout=30_000):
        assert w.explore.run()
    w.setWindowModified(False)
    assert w.close()
    assert not w.explore.runner.is_thread_running()
    assert not live_runners()


def test_settings_round_trip_through_a_saved_session(window, qtbot, tmp_path):
    # a file without sweep settings is saved without them (the examples stay byte-identical)
    plain = tmp_path / "plain.json"
    shutil.copy(SMALL, plain)
    assert window.open_path(plain)
    assert window.explore.settings() is None
    assert window.save_to(tmp_path / "plain_again.json")
    assert (tmp_path / "plain_again.json").read_text() == SMALL.read_text()

    # edit the settings as a user would
    panel = window.explore.settings_panel
    window.show_tab("explore")
    assert panel.budget_mode.currentText() == "at most" and panel.gpus.text() == "8"
    panel.budget_mode.setCurrentText("exactly")
    _type(qtbot, panel.gpus, "4, 8")
    _type(qtbot, panel.tensor_parallel, "1 2 4")
    _type(qtbot, panel.micro_batch_sizes, "1, 2")
    for name in ("gpipe", "interleaved", "zb-h1"):
        panel.schedule_boxes[name].setChecked(False)
    panel.max_data_parallel.setValue(4)
    panel.deadline.setValue(12.5)
    assert window.isWindowModified()
    # sequence parallelism, ZeRO stage and cp: the command line's defaults ("default" ticked)
    expected = SweepSpace(num_gpus=(4, 8), tensor_parallel=(1, 2, 4), micro_batch_sizes=(1, 2),
                          schedules=("1f1b",), max_data_parallel=4)
    assert panel.space() == expected

    out = tmp_path / "with_sweep.json"
    assert window.save_to(out)
    saved = load_session(out)
    assert saved.sweep == {"space": expected.to_dict(), "deadline_days": 12.5}
    assert saved.plan == load_any(SMALL).plan

    window.new_session()
    assert window.explore.settings() is None
    assert window.open_path(out)
    assert panel.space() == expected and panel.deadline_days() == 12.5
    assert panel.budget_mode.currentText() == "exactly" and panel.gpus.text() == "4, 8"
    assert window.session().to_dict() == saved.to_dict()
    again = tmp_path / "again.json"
    assert window.save_to(again)
    assert again.read_bytes() == out.read_bytes()
    qtbot.waitUntil(lambda: not window.runner.busy, timeout=30_000)


def test_space_fields_the_form_does_not_show_keep_the_files_values(window, qtbot, tmp_path):
    """The exchanges, dispatchers, cross-entropy, overlaps and v the session file's sweep
    names survive an edit in the form and a save (the breaker: a saved cp_comm_type ["p2p"]
    was swept as p2p and a2a, and saving dropped it)."""
    kept = dict(cp_comm_type=("p2p",), moe_token_dispatcher_type=("alltoall",),
                cross_entropy_fusion=("native",), dp_overlap=(False,),
                virtual_pipeline_stages=(2, 4), data_parallel=(2, 4))
    path = tmp_path / "kept.json"
    doc = json.loads(SMALL.read_text())
    doc["sweep"] = {"space": SweepSpace(max_gpus=8, **kept).to_dict(), "deadline_days": None}
    path.write_text(json.dumps(doc))
    assert window.open_path(path)
    panel = window.explore.settings_panel
    window.show_tab("explore")
    _type(qtbot, panel.micro_batch_sizes, "1, 2")
    space = panel.space()
    assert {k: getattr(space, k) for k in kept} == kept
    out = tmp_path / "kept_again.json"
    assert window.save_to(out)
    saved = load_session(out).sweep["space"]
    assert {k: tuple(saved[k]) for k in kept} == kept and saved["micro_batch_sizes"] == [1, 2]
    qtbot.waitUntil(lambda: not window.runner.busy, timeout=30_000)


def test_invalid_settings_are_explained_and_do_not_run(window, qtbot):
    panel = window.explore.settings_panel
    _type(qtbot, panel.micro_batch_sizes, "1, x")
    assert not panel.error_label.isHidden()
    assert "'x' is not a whole number" in panel.error_label.text()
    assert not window.explore.run()
    assert "Cannot run" in window.explore.status_text
    assert not window.explore.runner.busy
    # saving now keeps the last valid settings (typing "1, x" passed through a valid "1")
    assert window.explore.settings()["space"]["micro_batch_sizes"] == [1]
    _type(qtbot, panel.micro_batch_sizes, "1, 2")
    for box in panel.recompute_boxes.values():
        box.setChecked(False)
    assert "recompute" in panel.error_label.text()
    assert not window.explore.run()


def test_unreadable_sweep_settings_fall_back_to_defaults(window, tmp_path):
    path = _session_file(tmp_path, sweep={"space": {"max_gpus": 8, "warp_drive": True}})
    assert window.open_path(path)  # the plan still opens
    panel = window.explore.settings_panel
    assert "not understood" in panel.error_label.text()
    assert panel.gpus.text() == "8"
    assert window.explore.settings() is None


def test_changed_inputs_mark_the_sweep_stale(window, qtbot, tmp_path, real_simulate):
    with qtbot.waitSignal(window.result_shown, timeout=30_000):
        window.open_path(_session_file(tmp_path))
    explore = window.explore
    _run(window, qtbot)
    assert not explore.is_stale
    window.editor.field_widget("cost.price_per_gpu_hour_usd").setValue(3.5)
    assert explore.is_stale
    window.editor.field_widget("cost.price_per_gpu_hour_usd").setValue(2.0)
    assert not explore.is_stale
    qtbot.waitUntil(lambda: not window.runner.busy, timeout=30_000)


def test_export_csv_and_png(window, qtbot, tmp_path, real_simulate, message_boxes):
    with qtbot.waitSignal(window.result_shown, timeout=30_000):
        window.open_path(_session_file(tmp_path))
    window.show_tab("explore")
    explore = window.explore
    assert not explore.export_csv_button.isEnabled()
    result = _run(window, qtbot)
    assert explore.export_csv_button.isEnabled() and explore.export_png_button.isEnabled()

    out = tmp_path / "plans.csv"
    assert explore.export_csv(out)
    with out.open(newline="") as fh:
        rows = list(csv.reader(fh))
    assert tuple(rows[0]) == COLUMNS and len(rows) == result.num_plans + 1
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []

    png = tmp_path / "plot.png"
    assert explore.export_png(png)
    image = QtGui.QImage(str(png))
    assert not image.isNull() and image.width() > 200 and image.height() > 100

    assert not explore.export_csv(tmp_path / "missing" / "plans.csv")
    assert not explore.export_png(tmp_path / "missing" / "plot.png")
    assert len(message_boxes.of_kind("critical")) == 2
    qtbot.waitUntil(lambda: not window.runner.busy, timeout=30_000)


def test_explore_screenshot(tmp_path, real_simulate):
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    out = tmp_path / "explore.png"
    path = _session_file(tmp_path)
    code = ("import sys; from vtrain_gui.app import run_gui; "
            f"sys.exit(run_gui({str(path)!r}, screenshot={str(out)!r}, explore=True))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    assert proc.returncode == 0, proc.stderr
    image = QtGui.QImage(str(out))
    assert (image.width(), image.height()) == (1600, 1000)


def test_tab_shortcuts(window):
    assert window.current_tab() == "plan"
    actions = {a.text(): a for a in window.findChildren(QtGui.QAction)}
    actions["&Explore tab"].trigger()
    assert window.current_tab() == "explore"
    actions["&Plan tab"].trigger()
    assert window.current_tab() == "plan"
    assert isinstance(window.tabs, QtWidgets.QTabWidget)


def test_table_shows_each_plans_error_band(qtbot, small_result):
    """The band column: the sweep's interval columns, sorted by the upper bound, ⚠ outside the
    calibration range (here: none, every plan is on one node of a calibrated A100 store)."""
    from core.store.interval import session_interval
    from core.sim.simulate import open_profile, profile_path
    r = small_result
    assert np.all(r.interval_low_s < r.iteration_time_s) and np.all(r.iteration_time_s < r.interval_high_s)
    model = SweepTableModel()
    model.set_result(r)
    col = [c.attr for c in TABLE_COLUMNS].index("iteration_band")
    model.sort(col, Qt.SortOrder.AscendingOrder)
    assert np.all(np.diff(r.interval_high_s[model.shown()]) >= 0)
    i = model.result_index(0)
    text = model.data(model.index(0, col))
    iv = session_interval(r.session_for(i), float(r.iteration_time_s[i]),
                          open_profile(profile_path(r.session)))
    assert iv.low_s == pytest.approx(r.interval_low_s[i]) and iv.high_s == pytest.approx(r.interval_high_s[i])
    assert text.removesuffix(" ⚠").endswith((" s", " ms"))
    assert ("⚠" in text) == (not iv.within_calibration)
    assert "90% of runs like this one" in model.data(model.index(0, col), Qt.ItemDataRole.ToolTipRole)


def test_a_sweep_without_plans_says_why(window, qtbot, tmp_path, real_simulate):
    """No valid plan (t = 3 divides neither the heads nor the node): the status names the budget
    and the rule the value breaks, as the command line does."""
    settings = {"space": SweepSpace(max_gpus=8, tensor_parallel=(3,), micro_batch_sizes=(1,),
                                    schedules=("1f1b",)).to_dict(), "deadline_days": None}
    with qtbot.waitSignal(window.result_shown, timeout=30_000):
        assert window.open_path(_session_file(tmp_path, sweep=settings))
    result = _run(window, qtbot)
    assert result.num_plans == 0
    text = window.explore.status_text
    assert "no valid plan" in text and "--tensor-parallel 3" in text


def test_a_plan_too_large_to_simulate_is_shown_as_fitting(qtbot):
    """The editor's plan t1 p8 d1 at B = 2**17 fits (6 GiB of 80) but is too large to
    simulate: the summary counts it among the plans that fit, says why it has no figures
    (never "does not fit in memory"), and the "fits in memory only" filter keeps it."""
    from tests.test_sweep_memory_verdict import too_large_sweep
    from vtrain_gui.explore import ExploreTab
    s, r = too_large_sweep()
    own = r.index_of(s.plan)
    assert r.memory_verdict[own] == "fits" and not np.isfinite(r.iteration_time_s[own])
    tab = ExploreTab()
    qtbot.addWidget(tab)
    tab.set_session(s)
    tab.set_result(r)
    fit, simulated = int(r.fits_in_memory.sum()), int(r.feasible.sum())
    assert fit == r.num_plans > simulated > 0
    text = tab.summary_text
    assert f"({fit} fit in memory, {simulated} simulated)" in text
    assert "too large to simulate" in text and "does not fit in memory" not in text
    tab.fits_only.setChecked(True)
    assert tab.table_model.rowCount() == fit
    assert own in tab.table_model.shown().tolist()
