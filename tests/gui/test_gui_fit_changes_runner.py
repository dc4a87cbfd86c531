"""What would make a plan fit is a second background job: the simulated result shows at once,
the memory panel's "To fit" line says it is looking, then shows the changes; the search of an
earlier result is cancelled (its answer dropped) and a failed search is one line in the panel."""

from __future__ import annotations

import threading

import pytest

from PySide6 import QtWidgets

from core.plan.session import Session
from core.studies import fit_changes as fit_module
from vtrain_gui.workers import FitChangesRunner

_REAL_FIT_CHANGES = fit_module.fit_changes


class _GatedFitChanges:
    """A stand-in for ``fit_changes`` that waits, per global batch size, until the test
    releases it, then answers as the real one (and records the sessions it was asked about)."""

    def __init__(self) -> None:
        self.gates: dict[int, threading.Event] = {}
        self.asked: list[int] = []
        self.answers: dict[int, object] = {}
        self.cancels: dict[int, threading.Event] = {}

    def gate(self, global_batch: int) -> threading.Event:
        return self.gates.setdefault(global_batch, threading.Event())

    def __call__(self, session: Session, *args, cancel=None, **kwargs):
        b = session.plan.global_batch_size
        self.asked.append(b)
        self.cancels[b] = cancel
        assert self.gate(b).wait(20), "the test never released the search"
        self.answers[b] = _REAL_FIT_CHANGES(session, *args, cancel=cancel, **kwargs)
        return self.answers[b]

    def release_all(self) -> None:
        for gate in self.gates.values():
            gate.set()


def test_runner_answers_on_the_gui_thread_and_reports_a_failure(qtbot):
    threads = []

    def fake(session, cancel):
        threads.append(threading.current_thread())
        if session.plan.global_batch_size == 13:
            raise ValueError("no memory model for this plan")
        return ("fit", session.plan.global_batch_size)

    runner = FitChangesRunner(fake)
    try:
        s = Session()
        with qtbot.waitSignal(runner.finished, timeout=5000) as blocker:
            rid = runner.request(s)
        assert blocker.args[:2] == [rid, ("fit", s.plan.global_batch_size)]
        assert threads[0] is not threading.main_thread()
        s.plan.global_batch_size = 13
        with qtbot.waitSignal(runner.failed, timeout=5000) as blocker:
            rid2 = runner.request(s)
        assert rid2 == rid + 1 == runner.latest_request_id
        assert blocker.args == [rid2, "ValueError: no memory model for this plan"]
        assert not runner.busy
    finally:
        assert runner.shutdown()
    assert not runner.is_thread_running()


def test_result_shows_before_a_slow_fit_search_ends(window, qtbot, real_simulate,
                                                    oom_session_file, monkeypatch,
                                                    message_boxes):
    fake = _GatedFitChanges()
    monkeypatch.setattr(fit_module, "fit_changes", fake)
    panel = window.cost_panel
    button = panel.findChild(QtWidgets.QToolButton, "use_fit_change")
    try:
        with qtbot.waitSignal(window.result_shown, timeout=60_000) as shown:
            assert window.open_path(oom_session_file)
        result = shown.args[0]
        # the result is on screen while the search has not answered
        assert panel.report is result.report
        assert result.report.memory_verdict == "does not fit"
        assert window.timeline.num_tasks == result.graph.num_tasks > 0
        qtbot.waitUntil(lambda: fake.asked == [128], timeout=10_000)
        assert window.fit_search_pending
        assert panel.fit_changes_state == "searching"
        assert panel.fit_changes_text  # the line says it is looking
        assert not button.isVisible()  # nothing to use yet
        assert result.fit_changes is None
        with qtbot.waitSignal(window.fit_changes_shown, timeout=60_000) as found:
            fake.gate(128).set()
    finally:
        fake.release_all()
    fit = fake.answers[128]
    assert found.args == [fit]
    assert not window.fit_search_pending
    assert result.fit_changes is fit  # kept on the result, for whatever reads it
    assert panel.fit_changes_state == "found"
    assert fit.rows and fit.rows[0].text in panel.fit_changes_text
    assert button.isVisible()
    with qtbot.waitSignal(window.result_shown, timeout=60_000):  # "Use it" works as before
        button.click()
    assert window.editor.session().plan == fit.rows[0].plan
    assert panel.report.memory_verdict == "fits" and panel.fit_changes_state == "none"
    assert message_boxes.calls == []


@pytest.fixture
def searching(window, qtbot, real_simulate, oom_session_file, monkeypatch):
    """The window showing the out-of-memory session's result while its fit search waits at
    its gate: ``(fake, shown)``, the gated search and the list of what the window showed
    (``fit_changes_shown``); every gate is released at the end."""
    fake = _GatedFitChanges()
    monkeypatch.setattr(fit_module, "fit_changes", fake)
    shown = []
    window.fit_changes_shown.connect(shown.append)
    try:
        with qtbot.waitSignal(window.result_shown, timeout=60_000):
            assert window.open_path(oom_session_file)
        qtbot.waitUntil(lambda: fake.asked == [128], timeout=10_000)
        yield fake, shown
    finally:
        fake.release_all()


def test_an_answer_for_an_earlier_result_is_dropped(window, qtbot, searching):
    fake, shown = searching
    panel = window.cost_panel
    # a new simulation is not held up by the running search of the first result
    with qtbot.waitSignal(window.result_shown, timeout=60_000) as second:
        window.editor.field_widget("plan.global_batch_size").setValue(256)
    assert second.args[0].session.plan.global_batch_size == 256
    assert panel.report is second.args[0].report
    assert panel.fit_changes_state == "searching"
    # the first search is cancelled: it stops at its first plan once released
    assert fake.cancels[128].is_set()
    fake.gate(128).set()
    qtbot.waitUntil(lambda: fake.asked == [128, 256], timeout=10_000)
    assert 128 not in fake.answers  # it raised instead of answering
    assert shown == [] and panel.fit_changes_state == "searching"
    assert window.fit_search_pending and not fake.cancels[256].is_set()
    with qtbot.waitSignal(window.fit_changes_shown, timeout=60_000):
        fake.gate(256).set()
    assert shown == [fake.answers[256]]
    assert second.args[0].fit_changes is fake.answers[256]
    assert panel.fit_changes_state == "found"
    assert panel._fit_plan.global_batch_size == 256


def test_a_result_that_fits_drops_the_search_of_the_one_before(window, qtbot, searching):
    fake, shown = searching
    panel = window.cost_panel
    with qtbot.waitSignal(window.result_shown, timeout=60_000) as fits:
        window.editor.set_field("plan.zero_stage", 1)
    assert fits.args[0].report.memory_verdict == "fits"
    assert panel.fit_changes_state == "none" and panel.fit_changes_text == ""
    assert not window.fit_search_pending
    assert fake.cancels[128].is_set()  # its search is not wanted any more
    fake.gate(128).set()
    qtbot.waitUntil(lambda: not window.fit_runner.busy, timeout=60_000)
    assert 128 not in fake.answers  # cancelled at its first plan
    assert shown == [] and panel.fit_changes_state == "none"
    assert fits.args[0].fit_changes is None
    assert fake.asked == [128]  # a plan that fits is not searched


def test_a_failed_search_is_one_line_in_the_panel(window, qtbot, real_simulate,
                                                  oom_session_file, monkeypatch, message_boxes):
    def broken(session, *args, **kwargs):
        raise ValueError("no memory model for\nthis plan")

    monkeypatch.setattr(fit_module, "fit_changes", broken)
    panel = window.cost_panel
    shown = []
    window.fit_changes_shown.connect(shown.append)
    with qtbot.waitSignals([window.result_shown, window.fit_changes_shown], timeout=60_000):
        assert window.open_path(oom_session_file)
    assert shown == [None]
    assert panel.report.memory_verdict == "does not fit"  # the result stays
    assert panel.fit_changes_state == "failed"
    text = panel.fit_changes_text
    assert "\n" not in text and "Traceback" not in text
    assert "ValueError: no memory model for this plan" in text
    assert not panel.findChild(QtWidgets.QToolButton, "use_fit_change").isVisible()
    assert window._result.fit_changes is None
    assert message_boxes.calls == []
