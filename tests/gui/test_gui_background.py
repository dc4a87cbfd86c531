"""BackgroundRunner: Qt-free jobs on a worker thread, results and progress on the GUI thread."""

from __future__ import annotations

import threading

from PySide6 import QtCore

from vtrain_gui.background import (BackgroundRunner, JobCancelled, JobFailed, live_runners,
                                   shutdown_all)


class _Recorder(QtCore.QObject):
    """Bound slots (cross-thread signals) that record what arrives, and on which thread."""

    def __init__(self, runner: BackgroundRunner) -> None:
        super().__init__()
        self.events: list[tuple] = []
        self.threads: set[threading.Thread] = set()
        runner.progress.connect(self.on_progress)
        runner.finished.connect(self.on_finished)
        runner.failed.connect(self.on_failed)
        runner.cancelled.connect(self.on_cancelled)

    def _add(self, *event) -> None:
        self.threads.add(threading.current_thread())
        self.events.append(event)

    @QtCore.Slot(int, object)
    def on_progress(self, run_id, payload):
        self._add("progress", run_id, payload)

    @QtCore.Slot(int, object, float)
    def on_finished(self, run_id, result, seconds):
        self._add("finished", run_id, result)

    @QtCore.Slot(int, str)
    def on_failed(self, run_id, message):
        self._add("failed", run_id, message)

    @QtCore.Slot(int, object)
    def on_cancelled(self, run_id, result):
        self._add("cancelled", run_id, result)


def test_progress_then_result_arrive_in_order_on_the_gui_thread(qtbot):
    ran_on = []

    def job(report, cancel):
        ran_on.append(threading.current_thread())
        for i in range(5):
            report(i)
        return sum(range(5))

    runner = BackgroundRunner("test")
    rec = _Recorder(runner)
    try:
        rid = runner.submit(job)
        qtbot.waitUntil(lambda: bool(rec.events) and rec.events[-1][0] == "finished", timeout=5000)
        assert rec.events == [("progress", rid, i) for i in range(5)] + [("finished", rid, 10)]
        assert rec.threads == {threading.main_thread()}
        assert ran_on[0] is not threading.main_thread()
        assert not runner.busy and runner.wait_job(0)
    finally:
        assert runner.shutdown()
    assert not runner.is_thread_running()


def test_cancel_latest_wins_failure_and_partial_results(qtbot):
    gate = threading.Event()
    started = []

    def slow(report, cancel):
        started.append("slow")
        gate.wait(5)
        if cancel.is_set():
            raise JobCancelled(result="half")
        return "whole"

    runner = BackgroundRunner("test", cancel_running=True)
    rec = _Recorder(runner)
    try:
        first = runner.submit(slow)
        qtbot.waitUntil(lambda: started == ["slow"], timeout=2000)
        runner.submit(lambda report, cancel: "skipped")  # replaced by the next one
        last = runner.submit(lambda report, cancel: "last")
        assert runner.cancel_requested and runner.running_id == first
        gate.set()
        qtbot.waitUntil(lambda: len(rec.events) == 2, timeout=5000)
        assert rec.events == [("cancelled", first, "half"), ("finished", last, "last")]

        def broken(report, cancel):
            raise JobFailed("no profile for this shape")

        failed = runner.submit(broken)
        qtbot.waitUntil(lambda: len(rec.events) == 3, timeout=5000)
        assert rec.events[2] == ("failed", failed, "no profile for this shape")
        errored = runner.submit(lambda report, cancel: 1 / 0)
        qtbot.waitUntil(lambda: len(rec.events) == 4, timeout=5000)
        assert rec.events[3] == ("failed", errored, "ZeroDivisionError: division by zero")
    finally:
        gate.set()
        assert runner.shutdown()


def test_a_job_returning_after_cancel_counts_as_cancelled_with_cancel_wins(qtbot):
    gate, running = threading.Event(), threading.Event()

    def job(report, cancel):
        running.set()
        gate.wait(5)
        return "done anyway"

    runner = BackgroundRunner("test", cancel_wins=True)
    rec = _Recorder(runner)
    try:
        rid = runner.submit(job)
        assert running.wait(5)
        runner.cancel()
        gate.set()
        qtbot.waitUntil(lambda: bool(rec.events), timeout=5000)
        assert rec.events == [("cancelled", rid, "done anyway")]
    finally:
        gate.set()
        assert runner.shutdown()


def test_an_idle_runner_holds_no_thread_with_stop_when_idle(qtbot):
    runner = BackgroundRunner("test", stop_when_idle=True)
    rec = _Recorder(runner)
    for expected in (1, 2):  # the thread starts again with the next job
        runner.submit(lambda report, cancel, x=expected: x)
        assert runner.is_thread_running()
        qtbot.waitUntil(lambda: len(rec.events) == expected, timeout=5000)
        qtbot.waitUntil(lambda: not runner.is_thread_running(), timeout=5000)
    assert [e[2] for e in rec.events] == [1, 2]
    assert runner not in live_runners()
    assert runner.shutdown() and runner.shutdown()


def test_shutdown_all_stops_a_cancelled_runner_no_view_holds(qtbot):
    """A timeline drops its cancelled layout runner while the job still runs (the runner keeps
    itself alive until its thread ends); closing the window must still stop that thread, or
    the process aborts ("QThread: Destroyed while thread ... is still running")."""
    started, release = threading.Event(), threading.Event()

    def job(report, cancel):  # a step that does not look at cancel: it ends when released
        started.set()
        release.wait(10)
        return None

    runner = BackgroundRunner("orphan", stop_when_idle=True)
    runner.submit(job)
    assert started.wait(5)
    runner.cancel()  # what GanttItem._stop_preparation does, then forgets the runner
    name = runner.objectName()
    del runner
    assert any(r.is_thread_running() for r in live_runners())
    threading.Timer(0.2, release.set).start()  # the step ends while shutdown_all waits
    assert shutdown_all(5000)
    assert not live_runners(), name


def test_a_worker_thread_lowers_the_switch_interval_for_the_gui_thread(qtbot):
    """Once a worker thread runs, the GUI thread gets the interpreter back within 1 ms of
    asking (CPython's 5 ms default, per competing thread, stalled the window 100+ ms)."""
    import sys

    from vtrain_gui.background import GUI_SWITCH_INTERVAL_S

    before = sys.getswitchinterval()
    sys.setswitchinterval(0.005)
    runner = BackgroundRunner("switch")
    rec = _Recorder(runner)
    try:
        runner.submit(lambda report, cancel: 7)
        qtbot.waitUntil(lambda: any(e[0] == "finished" for e in rec.events), timeout=5000)
        assert sys.getswitchinterval() == GUI_SWITCH_INTERVAL_S == 0.001
    finally:
        runner.shutdown()
        sys.setswitchinterval(min(before, GUI_SWITCH_INTERVAL_S))


def test_timeline_layouts_take_turns(monkeypatch):
    """Two timelines' layout preparations never compute a step at the same time (each holds
    the shared turn lock while it computes), so they do not both compete with the GUI thread."""
    import time

    import numpy as np

    from vtrain_gui.timeline import layout as layout_module

    inside = [0]
    most = [0]
    real = layout_module.Layout

    class Slow(real):
        def __init__(self, *args, **kw):
            inside[0] += 1
            most[0] = max(most[0], inside[0])
            time.sleep(0.05)
            super().__init__(*args, **kw)
            inside[0] -= 1

    monkeypatch.setattr(layout_module, "Layout", Slow)
    n = 200
    start = np.linspace(0, 1, n)
    arrays = (start, start + 0.001, np.zeros(n, np.int64), np.zeros(n, np.int64), 1, None)
    preps = [layout_module.Preparation(g, arrays) for g in (1, 2)]
    threads = [threading.Thread(target=p.run, args=(lambda payload: None, threading.Event()))
               for p in preps]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert most[0] == 1
