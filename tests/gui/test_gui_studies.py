"""The Studies tab: both studies run on the worker thread with the session's cluster and show
the numbers core.optimal and core.scheduler compute."""

from __future__ import annotations

import json

import pytest

from core.config import Session
from core.optimal import compute_optimal, format_params
from core.scheduler import POLICIES
from vtrain_gui.studies import DEFAULT_TRACE, StudiesTab


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
    with qtbot.waitSignal(panel.runner.finished, timeout=60_000):
        panel.run()
    expected = compute_optimal(Session(), 64, 10.0, assumed_mfu=0.4, num_candidates=5, spread=8.0)
    got = panel.result
    assert [c.n_params for c in got.candidates] == [c.n_params for c in expected.candidates]
    assert got.best == expected.best and got.best is not None
    assert panel.table.rowCount() == len(expected.candidates)
    best = expected.candidates[expected.best]
    assert panel.table.item(expected.best, 10).text() == f"{best.loss:.4f}"
    assert "lowest loss" in panel.table.item(expected.best, 11).text()
    assert f"{format_params(best.n_params)} parameters" in panel.summary.text()
    assert panel.run_button.isEnabled() and not panel.cancel_button.isEnabled()


def test_schedule_study_shows_every_policy_and_draws_the_selected_one(studies, qtbot):
    panel = studies.schedule
    assert panel.trace.text() == str(DEFAULT_TRACE)
    with qtbot.waitSignal(panel.runner.finished, timeout=60_000):
        panel.run()
    jobs, _counts, _tps, results = panel.result
    assert [r.policy for r in results] == list(POLICIES)
    assert panel.policies.rowCount() == len(POLICIES)
    req = results[0].metrics()
    assert panel.policies.item(0, 1).text() == f"{req['mean_jct_h']:,.1f}"
    # the Gantt shows the selected policy: a y tick per job
    panel.policies.selectRow(1)
    ticks = panel.gantt.getAxis("left")._tickLevels[0]
    assert [name for _, name in ticks] == [x.job.name for x in results[1].runs]
    assert "efficient" in panel.gantt_title.text()


def test_a_bad_trace_is_a_readable_error_not_a_traceback(studies, qtbot, tmp_path):
    panel = studies.schedule
    bad = tmp_path / "trace.json"
    bad.write_text(json.dumps([{"arrival_h": 0, "model": "GPT-9"}]))
    panel.trace.setText(str(bad))
    with qtbot.waitSignal(panel.runner.failed, timeout=30_000):
        panel.run()
    text = panel.status.text()
    assert "trace.json[0].model" in text and "Traceback" not in text
    assert panel.run_button.isEnabled()


def test_window_has_a_studies_tab(window):
    window.show_tab("studies")
    assert window.current_tab() == "studies"
