"""The Studies tab: both studies run on the worker thread with the session's cluster and show
the numbers core.studies.optimal and core.studies.scheduler compute."""

from __future__ import annotations

import json
import math

import pytest

from core.plan.session import Session
from core.studies.optimal import compute_optimal, format_params
from core.studies.scheduler import POLICIES
from vtrain_gui.studies import DEFAULT_TRACE, OPTIMAL_COLUMNS, StudiesTab


@pytest.fixture
def studies(qtbot):
    session = Session()  # GPT-3 175B plan on 8-GPU A100 nodes; only the cluster matters here
    w = StudiesTab(session_fn=lambda: session)
    qtbot.addWidget(w)
    yield w
    w.shutdown()


def test_compute_optimal_study_shows_the_core_result(studies, qtbot):
    panel = studies.optimal
    panel.gpus.setValue(64)
    panel.days.setValue(10.0)
    panel.candidates.setValue(5)
    with qtbot.waitSignal(panel.runner.finished, timeout=240_000):
        panel.run()
    expected = compute_optimal(Session(), 64, 10.0, assumed_mfu=0.4, num_candidates=5, spread=8.0)
    got = panel.result
    assert [c.n_params for c in got.candidates] == [c.n_params for c in expected.candidates]
    assert got.best == expected.best and got.best is not None
    assert panel.table.rowCount() == len(expected.candidates)
    best = expected.candidates[expected.best]
    col = OPTIMAL_COLUMNS.index
    assert panel.table.item(expected.best, col("loss")).text() == f"{best.loss:.4f}"
    assert "lowest loss" in panel.table.item(expected.best, col("note")).text()
    # ⚠ beside the MFU of a plan outside calibration (as the Explore table's band), its why in
    # the tooltip; the plan is still the candidate's fastest
    for k, c in enumerate(expected.candidates):
        if c.plan is None:
            continue
        item = panel.table.item(k, col("MFU"))
        assert item.text().endswith("⚠") == (c.within_calibration is False)
        assert item.text().startswith(f"{c.mfu:.1%}")
        if c.calibration_departures:
            assert c.calibration_departures in item.toolTip()
        assert panel.table.item(k, col("ZeRO")).text() == str(c.plan["zero_stage"])
        gib = panel.table.item(k, col("GiB"))  # memory per GPU, "~" when tight
        assert gib.text().split()[0] == f"{c.plan['max_memory_per_gpu_bytes'] / 2 ** 30:.1f}"
        assert gib.text().endswith("~") == (c.plan["memory_verdict"] == "tight")
    assert any(c.within_calibration is False for c in expected.candidates)
    assert f"{format_params(best.n_params)} parameters" in panel.summary.text()
    assert panel.run_button.isEnabled() and not panel.cancel_button.isEnabled()


def test_schedule_study_shows_every_policy_and_draws_the_selected_one(studies, qtbot, capsys):
    panel = studies.schedule
    assert panel.trace.text() == "" and str(DEFAULT_TRACE) in panel.trace.toolTip()  # the example
    assert not panel.hold.isChecked()  # the default: each job's sweep searches the default space
    panel.hold.setChecked(True)  # the Plan tab's switches held: the 18 times faster study
    assert panel.settings()["hold_session_values"] is True
    with qtbot.waitSignal(panel.runner.finished, timeout=240_000):
        panel.run()
    jobs, _counts, _tps, results, _rows, _warnings = panel.result
    assert [r.policy for r in results] == list(POLICIES)
    assert panel.policies.rowCount() == len(POLICIES)
    req = results[0].metrics()
    assert panel.policies.item(0, 1).text() == f"{req['mean_jct_h']:,.1f}"
    # the jobs table and the notes are vtrain schedule's (the window showed neither): each
    # row's cells from the CLI's --json of the same study, ⚠ where the plan is outside
    # calibration with its departures in the tooltip; the sweeps' warnings in the notes
    from core.cli import main
    capsys.readouterr()
    assert main(["schedule", str(DEFAULT_TRACE), "--gpus", str(panel.gpus.value()),
                 "--hold-session-values", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert panel.jobs.rowCount() == len(doc["jobs"]) == 12
    headers = [panel.jobs.horizontalHeaderItem(c).text() for c in range(panel.jobs.columnCount())]
    assert headers[-2:] == ["efficient (>= 80%)", "tokens/s there"]
    for k, j in enumerate(doc["jobs"]):
        cells = [panel.jobs.item(k, c).text() for c in range(panel.jobs.columnCount())]
        tps = j["tokens_per_s"][doc["counts"].index(j["efficient_gpus"])]
        assert cells == [j["name"], j["model"], f"{j['arrival_h']:g}", f"{j['tokens'] / 1e9:,.0f}B",
                         str(j["requested_gpus"]), f"{j['share_at_request']:.0%}",
                         f"{j['efficient_gpus']} ({j['efficient_share']:.0%})",
                         f"{tps:,.0f}" + ("" if j["within_calibration"] else " ⚠")]
        assert panel.jobs.item(k, 7).toolTip() == j["calibration_departures"]
    assert doc["jobs"][1]["name"] == "gpt3-13b-a" and not doc["jobs"][1]["within_calibration"]
    assert "highest measured MFU 46 %" in doc["jobs"][1]["calibration_departures"]
    notes = panel.notes.text()
    assert notes.startswith("⚠ 12 of 12 jobs' plans at the efficient count leave what the "
                            "profile was calibrated on")
    assert doc["warnings"] and all(f"warning: {w}" in notes for w in doc["warnings"])
    # the Gantt shows the selected policy: a y tick per job
    panel.policies.selectRow(1)
    ticks = panel.gantt.getAxis("left")._tickLevels[0]
    assert [name for _, name in ticks] == [x.job.name for x in results[1].runs]
    assert "efficient" in panel.gantt_title.text()


def test_a_bad_trace_is_a_readable_error_not_a_traceback(studies, qtbot, tmp_path):
    panel = studies.schedule
    bad = tmp_path / "trace.json"
    bad.write_text(json.dumps([{"arrival_h": 0, "model": "GPT-9", "global_batch_size": 8,
                                "tokens": 1e9, "requested_gpus": 8}]))
    panel.trace.setText(str(bad))
    with qtbot.waitSignal(panel.runner.failed, timeout=30_000):
        panel.run()
    text = panel.status.text()
    assert "trace.json[0].model" in text and "Traceback" not in text
    assert panel.run_button.isEnabled()


def test_window_has_a_studies_tab(window):
    window.show_tab("studies")
    assert window.current_tab() == "studies"


def test_study_settings_round_trip_through_the_session_file(window, tmp_path, qtbot):
    from core.io.session import load_session
    path = tmp_path / "s.json"
    assert window.save_to(path)
    assert load_session(path).studies is None  # untouched defaults are not written
    window.studies.optimal.gpus.setValue(512)
    window.studies.optimal.gpus.valueChanged.emit(512)
    assert window.isWindowModified()
    window.studies.schedule.backfill.setChecked(True)
    assert window.save_to(path)
    saved = load_session(path).studies
    assert saved["optimal"]["num_gpus"] == 512 and saved["schedule"]["backfill"] is True
    window.new_session()
    assert window.studies.optimal.gpus.value() == 1024
    assert window.open_path(path)
    assert window.studies.optimal.gpus.value() == 512 and window.studies.schedule.backfill.isChecked()
    assert window.session().studies == saved  # unedited: the loaded settings, exactly


def test_bad_study_settings_in_a_file_are_named_and_left_at_defaults(studies):
    from core.plan.session import Session
    s = Session()
    s.studies = {"optimal": {"num_gpus": "many", "days": 7.0, "colour": 1}}
    assert studies.reset(s) == ["optimal.num_gpus", "optimal.colour"]
    assert studies.optimal.gpus.value() == 1024 and studies.optimal.days.value() == 7.0
    assert "num_gpus" in studies.optimal.status.text()


def test_an_invalid_plan_tab_cluster_is_refused_before_running(qtbot):
    session = Session()
    session.cluster.gpus_per_node = 0
    w = StudiesTab(session_fn=lambda: session)
    qtbot.addWidget(w)
    for panel in (w.optimal, w.schedule):
        assert panel.run() is None
        assert "Plan tab" in panel.status.text() and "gpus_per_node" in panel.status.text()
        assert panel.run_button.isEnabled()
    w.shutdown()


def test_an_edit_after_a_run_marks_the_result_stale_and_a_failure_clears_it(studies, qtbot, tmp_path):
    panel = studies.schedule
    panel.hold.setChecked(True)  # the fast study: what is tested is the staleness
    with qtbot.waitSignal(panel.runner.finished, timeout=240_000):
        panel.run()
    panel.gpus.setValue(2048)
    assert "Run to update" in panel.status.text()
    bad = tmp_path / "t.json"
    bad.write_text("[]")
    panel.trace.setText(str(bad))
    with qtbot.waitSignal(panel.runner.failed, timeout=30_000):
        panel.run()
    assert panel.policies.rowCount() == 0 and panel.result is None


def test_a_job_left_out_or_moved_is_named_under_the_policy_table(studies, qtbot, tmp_path):
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps([
        {"name": "small", "arrival_h": 0, "model": "GPT-3 1.3B", "global_batch_size": 512,
         "tokens": 1e9, "requested_gpus": 8},
        {"name": "huge", "arrival_h": 0, "model": "Megatron 1T", "global_batch_size": 512,
         "tokens": 1e9, "requested_gpus": 8}]))
    panel = studies.schedule
    panel.trace.setText(str(trace))
    panel.gpus.setValue(8)
    with qtbot.waitSignal(panel.runner.finished, timeout=240_000):
        panel.run()
    assert "No plan fits on any count for huge" in panel.notes.text()


def test_a_plan_tab_change_the_study_reads_marks_its_result_stale(window, qtbot):
    """Trial s3: a compute-optimal result stays on screen after the Plan tab's GPU changes; it
    is marked stale, naming the field, until the change is undone or the study runs again.
    The summary names the GPU kind and costs the budget at the price the study ran with."""
    from pathlib import Path
    example = (Path(__file__).resolve().parents[2] / "resources" / "examples"
               / "gpt3_1.3b_single_node.json")
    with qtbot.waitSignal(window.result_shown, timeout=60_000):
        assert window.open_path(example)
    panel = window.studies.optimal
    panel.gpus.setValue(8)
    panel.days.setValue(1.0)
    panel.candidates.setValue(2)
    with qtbot.waitSignal(panel.runner.finished, timeout=240_000):
        panel.run()
    session = window.editor.session()
    gpu, price = session.cluster.gpu, session.cost.price_per_gpu_hour_usd
    summary = panel.summary.text()
    assert f"8 x {gpu} for 1 day</b>" in summary  # was "for 1 days"
    assert f"${8 * 24 * price:,.0f} at ${price:,.2f}/GPU-hour" in summary
    assert not panel.is_stale and not window.studies.schedule.is_stale

    window.editor.set_field("cluster.gpu", "H100-SXM5-80GB")
    assert panel.is_stale
    assert f"cluster.gpu: '{gpu}' -> 'H100-SXM5-80GB'" in panel.stale_banner.text()
    assert not window.studies.schedule.is_stale  # it has no result
    window.editor.set_field("cluster.gpu", gpu)  # undone
    assert not panel.is_stale
    window.editor.set_field("model.num_layers", 12)  # the study makes its own shapes
    assert not panel.is_stale
    window.editor.set_field("cost.price_per_gpu_hour_usd", price + 1.0)
    assert panel.is_stale and "cost.price_per_gpu_hour_usd" in panel.stale_banner.text()
    panel.show_result(panel.result)  # redrawn: still at the price it ran with
    assert f"at ${price:,.2f}/GPU-hour" in panel.summary.text()
    with qtbot.waitSignal(panel.runner.finished, timeout=240_000):
        panel.run()
    assert not panel.is_stale
    assert f"at ${price + 1.0:,.2f}/GPU-hour" in panel.summary.text()
    window.setWindowModified(False)


def test_the_scheduler_study_reads_the_cluster_and_held_plan_fields_only():
    """What the shared-cluster study is stale for: not the model or the batch (each job brings
    its own), nor the price; the GPU and the precision, yes."""
    from core.studies.scheduler import study_inputs
    from core.studies.sweep.saved import changed_inputs
    a = Session()
    b = a.copy()
    b.model.num_layers, b.plan.global_batch_size, b.cost.price_per_gpu_hour_usd = 2, 16, 9.0
    assert changed_inputs(study_inputs(a), study_inputs(b)) == []
    b.cluster.gpu, b.plan.precision = "H100-SXM5-80GB", "fp8"
    assert changed_inputs(study_inputs(a), study_inputs(b)) == [
        "cluster.gpu: 'A100-SXM4-80GB' -> 'H100-SXM5-80GB'", "plan.precision: 'bf16' -> 'fp8'"]


def test_the_stale_veil_covers_the_result_and_is_no_splitter_pane(studies):
    """The veil lies over the results (a child of a QSplitter would become a pane of it)."""
    panel = studies.optimal
    splitter = panel.results_view.widget(1)
    assert splitter.count() == 2
    assert panel._veil.parentWidget() is panel.results_view


def test_assumed_mfu_is_shown_and_typed_in_percent_as_the_table_shows_it(qtbot):
    """The form showed "0.40" beside a table of "38.2 %": a percentage, the value a fraction."""
    from PySide6 import QtCore
    from vtrain_gui.studies import PercentSpinBox

    spin = PercentSpinBox()
    qtbot.addWidget(spin)
    spin.setRange(0.01, 1.0)
    spin.setValue(0.4)
    assert spin.text() == "40 %" and spin.value() == 0.4
    spin.lineEdit().selectAll()
    qtbot.keyClicks(spin, "37.5")
    qtbot.keyClick(spin, QtCore.Qt.Key.Key_Enter)
    assert spin.value() == 0.375 and spin.text() == "37.5 %"
    spin.setSingleStep(0.05)
    spin.stepUp()  # a step of 5 %
    assert spin.value() == 0.425 and spin.text() == "42.5 %"


def test_a_moe_plan_tab_model_is_refused_by_name_and_a_dense_ones_shapes_are_said(qtbot):
    """The Studies tab studied a Mixtral 8x7B Plan tab as dense GPT-3 shapes: it now refuses it
    before running, naming model.num_experts and the rule (the loss law is fitted on dense
    models); a Llama model's result says the candidates are shaped like it."""
    import dataclasses
    from core.plan.presets import MODEL_PRESETS
    from core.studies.optimal import OptimalResult, template_summary, template_text
    session = Session()
    session.model = dataclasses.replace(MODEL_PRESETS["Mixtral 8x7B"])
    w = StudiesTab(session_fn=lambda: session)
    qtbot.addWidget(w)
    panel = w.optimal
    assert panel.run() is None
    status = panel.status.text()
    assert "Plan tab" in status and "model.num_experts" in status
    assert "fitted on dense models" in status and panel.result is None
    session.model = dataclasses.replace(MODEL_PRESETS["Llama 3 8B"])
    panel.check_session(session)  # a dense model passes
    r = OptimalResult(8, 1.0, 0.4, 312e12, 1e20, 1e9, 2e10, None,
                      template=template_summary(session.model))
    panel.show_result(r)
    assert ("Candidates shaped like the session's Llama 3 8B (Llama-style: heads of 128 "
            "channels, 8 query groups, MLP 3.5 h") in panel.summary.text()
    assert template_text(r.template) in panel.summary.text()
    w.shutdown()


def test_settings_the_form_cannot_show_are_named_with_their_rules(qtbot):
    """A file's study settings of the wrong type, out of range or unknown: the form keeps its
    own, and its status names each with the rule it breaks (a megabyte key cut short)."""
    session = Session()
    session.studies = {"optimal": {"num_gpus": "abc", "num_candidates": 26, "no_tight": 1,
                                   "k" * 10**6: 1, "days": 10.0},
                       "schedule": "nonsense"}
    w = StudiesTab(session_fn=lambda: session)
    qtbot.addWidget(w)
    w.reset(session)
    assert w.optimal.days.value() == 10.0 and w.optimal.gpus.value() == 1024  # the form's own
    cut = "k" * 57 + "..."
    assert w.unused_settings == {
        "studies.optimal.num_gpus": "'abc' must be a whole number from 1 to 1,000,000",
        "studies.optimal.num_candidates": "26 must be a whole number from 2 to 25",
        "studies.optimal.no_tight": "1 must be true or false",
        f"studies.optimal.{cut}": "is not a setting of this study (they are num_gpus, days, "
                                  "gpu_hours, assumed_mfu, num_candidates, spread, no_tight)",
        "studies.schedule": "'nonsense' must be a JSON object"}
    assert w.schedule.status.text() == ("Settings from the file not used (the form shows its "
                                        "own): 'nonsense' must be a JSON object")
    status = w.optimal.status.text()
    assert status.startswith("Settings from the file not used (the form shows its own): "
                             "num_gpus: 'abc' must be a whole number from 1 to 1,000,000; ")
    assert f"{'k' * 21}...: is not a setting" in status and len(status) < 600  # as wide as the form


def test_the_summary_says_which_candidate_sizes_are_no_row_of_their_own(qtbot):
    """The trial's study asked for 9 candidate sizes and showed 5 rows, saying nothing of the
    other 4 (sizes that round to a shape already in the table); the summary says so, as
    vtrain optimal's footer: here 9 sizes around N_opt = 10 M on a GPT-3 1.3B session all
    round to the smallest GPT shape, L = 8, h = 1,024 (154 M)."""
    from core.model.counts import num_parameters
    from core.studies.optimal import Candidate, OptimalResult, candidate_shapes
    session = Session()
    sizes, models, which = candidate_shapes(session.model, 1e7, 9, 8.0)
    assert len(models) == 1 and which == [0] * 9
    r = OptimalResult(8, 1.0, 0.4, 312e12, 1e20, 1e7, 2e8, None, requested_sizes=sizes,
                      size_candidates=which)
    r.candidates = [Candidate(models[0], num_parameters(models[0]), None, *[math.nan] * 4,
                              "no plan on exactly this many GPUs")]
    w = StudiesTab(session_fn=lambda: session)
    qtbot.addWidget(w)
    w.optimal.show_result(r)
    text = w.optimal.summary.text()
    assert (f"8 of 9 candidate sizes are no row of their own: {format_params(sizes[1])}, "
            in text)
    assert (f"and {format_params(sizes[-1])} round to the shape of "
            f"{format_params(num_parameters(models[0]))} (L=8, h=1024), 8 of them below it, the "
            "smallest GPT-style shape") in text
    assert "the only shape has no plan (its note says why)." in text
    w.shutdown()


@pytest.mark.parametrize("days, notes, footer", [
    (1e-5, ["lowest loss, loss above ln V = 10.82: the fit says nothing here"],
     "the only candidate lies outside it (D below 5B), its loss extrapolated. The only candidate "
     "lies above ln V = 10.82 in loss (a uniform guess over the 50,257-token vocabulary): the "
     "fit says nothing there, and the lowest loss ranks nothing."),
    (0.05, ["lowest loss, rule's size, loss extrapolated", "loss extrapolated"],
     "both candidates lie outside it (D below 5B), their loss extrapolated."),
])
def test_the_summary_says_where_the_loss_fit_is_extrapolated(qtbot, days, notes, footer):
    """As vtrain optimal's footer: the loss is Chinchilla's fit of 70 M-16 B parameters on
    5-500 B tokens (Hoffmann et al. 2022), and a GPT-3 1.3B session's candidates on 8 A100s
    for 0.05 days train on under 5 B tokens (1.7 B-4.2 B); for 1e-5 days the one candidate's
    loss is above ln(50,257): each row's note and the summary say so."""
    from core.io.session import load_any
    from tests.conftest import EXAMPLES
    session = load_any(EXAMPLES / "gpt3_1.3b_single_node.json")
    r = compute_optimal(session, 8, days, num_candidates=3)
    assert [c.loss > math.log(50257) for c in r.candidates] == [days == 1e-5] * len(notes)
    w = StudiesTab(session_fn=lambda: session)
    qtbot.addWidget(w)
    w.optimal.show_result(r)
    col = OPTIMAL_COLUMNS.index("note")
    assert [w.optimal.table.item(k, col).text() for k in range(len(notes))] == notes
    text = w.optimal.summary.text()
    assert ("Loss is Chinchilla's fit of models of 70M-16B parameters on 5B-500B tokens "
            f"(Hoffmann et al. 2022): {footer}") in text
    best = r.candidates[r.best]
    assert f"loss {best.loss:.4f}" + (", above ln V = 10.82: the fit says nothing here"
                                      if days == 1e-5 else " (extrapolated)") in text
    w.shutdown()
