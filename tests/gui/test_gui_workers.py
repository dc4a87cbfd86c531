"""SimulationRunner: off the GUI thread, latest request wins, clean shutdown."""

from __future__ import annotations

import threading
import time

from PySide6 import QtCore

from core.plan.session import Session
from synthetic import synthetic_result
from vtrain_gui.workers import SimulationRunner


def test_result_arrives_on_the_gui_thread(qtbot):
    seen = {}

    def fake(session):
        seen["thread"] = threading.current_thread()
        return synthetic_result(session, p=2, m=2)

    runner = SimulationRunner(fake)
    try:
        with qtbot.waitSignal(runner.finished, timeout=5000) as blocker:
            rid = runner.request(Session())
        assert blocker.args[0] == rid
        assert blocker.args[1].graph.num_tasks > 0
        assert seen["thread"] is not threading.main_thread()
        assert not runner.busy
    finally:
        assert runner.shutdown()
    assert not runner.is_thread_running()


def test_latest_request_wins(qtbot):
    gate = threading.Event()
    ran = []

    def slow(session):
        ran.append(session.plan.data_parallel)
        gate.wait(5)
        return synthetic_result(session, p=2, m=2)

    runner = SimulationRunner(slow)
    done = []
    recorder = _Recorder(done)  # keep a reference while connected
    runner.finished.connect(recorder.on_finished)
    try:
        for d in (1, 2, 3, 4):
            s = Session()
            s.plan.data_parallel = d
            runner.request(s)
        qtbot.waitUntil(lambda: len(ran) == 1, timeout=2000)
        gate.set()
        qtbot.waitUntil(lambda: len(done) == 2, timeout=5000)
        qtbot.wait(100)
        assert ran == [1, 4]  # 2 and 3 were superseded while 1 ran
        assert done == [1, 4]
    finally:
        gate.set()
        assert runner.shutdown()


class _Recorder(QtCore.QObject):
    def __init__(self, out):
        super().__init__()
        self.out = out

    @QtCore.Slot(int, object, float)
    def on_finished(self, request_id, result, seconds):
        self.out.append(request_id)


def test_failure_is_reported_with_its_message(qtbot):
    def broken(session):
        raise ValueError("no profile for this shape")

    runner = SimulationRunner(broken)
    try:
        with qtbot.waitSignal(runner.failed, timeout=5000) as blocker:
            runner.request(Session())
        assert "no profile for this shape" in blocker.args[1]
    finally:
        runner.shutdown()


def test_shutdown_waits_for_the_running_simulation(qtbot):
    def slow(session):
        time.sleep(0.3)
        return synthetic_result(session, p=2, m=2)

    runner = SimulationRunner(slow)
    runner.request(Session())
    assert runner.shutdown()
    assert not runner.is_thread_running()
    assert runner.shutdown()  # twice is fine
