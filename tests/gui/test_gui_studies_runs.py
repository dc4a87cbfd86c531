"""A study's run ends as the window says: Cancel (or a failure) takes the Studies tab out of
its "Running…" state, and a study still running when another file is opened (or imported) is
stopped and dropped rather than shown under the new session's model."""

from __future__ import annotations

import threading

import pytest

import vtrain_gui.studies as studies_mod
from core.studies.sweep import SweepCancelled
from tests.conftest import EXAMPLES
from vtrain_gui.studies import OptimalPanel

SMALL = EXAMPLES / "gpt3_1.3b_single_node.json"
LARGE = EXAMPLES / "gpt3_175b.json"


@pytest.fixture
def until_cancelled():
    """A study that reports its first candidate and then waits for Cancel."""
    def study(session, settings, _unused, progress, cancel):
        progress(0, 3)
        while not cancel.wait(0.01):
            pass
        raise SweepCancelled("study cancelled")
    return study


@pytest.fixture
def panel(qtbot, until_cancelled):
    from core.io.session import load_any
    session = load_any(SMALL)
    p = OptimalPanel(lambda: session, study_fn=until_cancelled)
    qtbot.addWidget(p)
    yield p
    p.shutdown()


def test_cancel_leaves_the_running_state(panel, qtbot):
    """It read "Running… The results appear here when the study finishes." under the status
    "Cancelled." for good."""
    assert panel.results_view.is_empty and "No study yet" in panel.results_view.message_text
    assert panel.run() is not None
    assert "Running…" in panel.results_view.message_text
    qtbot.waitUntil(lambda: panel.status.text() == "Running… sweeping the plans of candidate "
                            "1 of 3", timeout=10_000)
    assert panel.cancel_button.isEnabled() and not panel.run_button.isEnabled()
    with qtbot.waitSignal(panel.runner.cancelled, timeout=10_000):
        panel.cancel_button.click()
    assert panel.status.text() == "Cancelled."
    assert panel.run_button.isEnabled() and not panel.cancel_button.isEnabled()
    assert panel.results_view.is_empty and panel.result is None
    assert panel.results_view.message_text == OptimalPanel._empty_text


def test_a_failed_study_leaves_the_running_state(qtbot):
    from core.io.session import load_any
    session = load_any(SMALL)

    def study(*_args):
        raise ValueError("no candidate shape")
    p = OptimalPanel(lambda: session, study_fn=study)
    qtbot.addWidget(p)
    try:
        with qtbot.waitSignal(p.runner.failed, timeout=10_000):
            p.run()
        assert "no candidate shape" in p.status.text() and p.run_button.isEnabled()
        assert p.results_view.message_text == OptimalPanel._empty_text
    finally:
        p.shutdown()


def test_a_study_running_when_another_file_opens_is_dropped(qtbot, settings, monkeypatch):
    """The 1.3B example's study (8 GPUs, 3 candidates) still running when the 175B example is
    opened: it stops; nothing of it (its progress, its candidates) appears under the 175B
    session, whose form is ready to run (it showed the 1.3B's candidates in the 175B session,
    with Cancel disabled while it ran)."""
    from vtrain_gui.main_window import MainWindow
    real = studies_mod.run_optimal_study
    computed, gate = threading.Event(), threading.Event()

    def gated(session, settings_, unused, progress, cancel):
        result = real(session, settings_, unused, progress, None)  # the whole study
        computed.set()
        gate.wait(60)  # the window opens another file meanwhile
        progress(2, 3)  # a late report: dropped (and the run stops there when cancelled)
        return result
    monkeypatch.setattr(studies_mod, "run_optimal_study", gated)
    w = MainWindow(settings=settings)
    qtbot.addWidget(w)
    w.show()
    assert w.open_path(SMALL)
    panel = w.studies.optimal
    panel.gpus.setValue(8)
    panel.candidates.setValue(3)
    panel.spread.setValue(2.0)
    assert panel.run() is not None
    assert computed.wait(240)
    assert w.open_path(LARGE)
    gate.set()
    qtbot.waitUntil(lambda: not panel.runner.busy, timeout=60_000)
    for _ in range(3):
        qtbot.wait(10)
    assert w.session().model.num_layers == 96  # the 175B example on screen
    assert panel.result is None and panel.table.rowCount() == 0
    assert panel.results_view.is_empty
    assert panel.results_view.message_text == OptimalPanel._empty_text
    assert panel.status.text() == "" and not panel.is_stale
    assert panel.run_button.isEnabled() and not panel.cancel_button.isEnabled()
    w.setWindowModified(False)
    w.close()
