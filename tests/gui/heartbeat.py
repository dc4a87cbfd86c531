"""A heartbeat on the GUI thread: how long the window could not answer (its largest stall).

:class:`Heartbeat` runs a 10 ms ``QTimer`` on the GUI thread and records when each tick
arrives; the largest gap between two ticks is the longest time the event loop could not
run (a slot that took long, or another thread holding the interpreter lock). On a
loaded machine the operating system also delays the ticks now and then, so a test
measures the same heartbeat while nothing happens (:func:`idle_baseline`) and reads the
action's stall against it.

:func:`run_scenario` is the driver the responsiveness test runs in a fresh interpreter
(``python tests/gui/heartbeat.py``), so that Numba is really not imported yet: it opens a
session, runs the first sweep, cancels a second, pins and compares, measuring each, and
prints one JSON object.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from contextlib import contextmanager
from typing import Callable, Iterator

from PySide6 import QtCore, QtWidgets

#: Tick interval of the heartbeat, milliseconds.
TICK_MS = 10


class Heartbeat(QtCore.QObject):
    """Records the arrival time (``time.perf_counter``, seconds) of a 10 ms timer's ticks on
    the GUI thread while :meth:`beating`; :attr:`max_gap_s` is the largest stall."""

    def __init__(self, interval_ms: int = TICK_MS) -> None:
        super().__init__()
        self._timer = QtCore.QTimer(self)
        self._timer.setTimerType(QtCore.Qt.TimerType.PreciseTimer)
        self._timer.setInterval(interval_ms)
        self._timer.timeout.connect(self._on_tick)
        self.ticks: list[float] = []

    @QtCore.Slot()
    def _on_tick(self) -> None:
        self.ticks.append(time.perf_counter())

    @contextmanager
    def beating(self) -> Iterator["Heartbeat"]:
        """Record ticks while the block runs (the block must run the event loop, e.g. by
        waiting on a signal); the start and the end of the block count as ticks."""
        self.ticks = [time.perf_counter()]
        self._timer.start()
        try:
            yield self
        finally:
            self._timer.stop()
            self.ticks.append(time.perf_counter())

    @property
    def gaps_s(self) -> list[float]:
        """Time between consecutive ticks, seconds."""
        return [b - a for a, b in zip(self.ticks, self.ticks[1:])]

    @property
    def max_gap_s(self) -> float:
        """The largest gap between ticks, seconds (the longest the GUI thread was stuck)."""
        return max(self.gaps_s, default=0.0)


def wait_until(app: QtWidgets.QApplication, done: Callable[[], bool], timeout_s: float) -> bool:
    """Run the event loop until ``done()`` (checked every few ms) or ``timeout_s``."""
    end = time.perf_counter() + timeout_s
    while not done():
        if time.perf_counter() > end:
            return False
        app.processEvents(QtCore.QEventLoop.ProcessEventsFlag.AllEvents, 5)
        QtCore.QThread.msleep(1)
    return True


def measure(app: QtWidgets.QApplication, action: Callable[[], object], done: Callable[[], bool],
            timeout_s: float = 120.0, settle_s: float = 0.0, split_at: list | None = None) -> dict:
    """Run ``action()`` under a heartbeat, then the event loop until ``done()`` and ``settle_s``
    more; ``{"max_gap_ms", "ticks", "wall_s", "finished"}``. With ``split_at`` (a list that
    receives one ``time.perf_counter()`` during the run), also ``"before_ms"``: the largest gap
    that ended before that moment."""
    beat = Heartbeat()
    t0 = time.perf_counter()
    with beat.beating():
        action()
        finished = wait_until(app, done, timeout_s)
        if settle_s:
            wait_until(app, lambda: False, settle_s)
    out = {"max_gap_ms": round(beat.max_gap_s * 1e3, 1), "ticks": len(beat.ticks),
           "wall_s": round(time.perf_counter() - t0, 3), "finished": finished,
           "window": (beat.ticks[0], beat.ticks[-1])}
    if split_at:
        before = [b - a for a, b in zip(beat.ticks, beat.ticks[1:]) if b <= split_at[0]]
        out["before_ms"] = round(max(before, default=0.0) * 1e3, 1)
    return out


#: A process that only sleeps 10 ms at a time and prints ``end gap`` (``time.perf_counter``,
#: the system-wide monotonic clock on Linux and macOS) for every wake-up over 15 ms late:
#: how long the operating system alone kept a thread that holds no lock waiting.
_NOISE_PROBE = """
import sys, time
last = time.perf_counter()
while True:
    time.sleep(0.01)
    now = time.perf_counter()
    if now - last > 0.025:
        print(f"{now} {now - last}", flush=True)
    last = now
"""


class NoiseProbe:
    """The machine's scheduling noise while actions run: a sleeping child process's late
    wake-ups (:data:`_NOISE_PROBE`), read back per time window."""

    def __init__(self) -> None:
        import subprocess
        import threading
        self._proc = subprocess.Popen([sys.executable, "-c", _NOISE_PROBE],
                                      stdout=subprocess.PIPE, text=True)
        self._gaps: list[tuple[float, float]] = []  # (end, gap) seconds
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self._proc.stdout:
            end, gap = map(float, line.split())
            self._gaps.append((end, gap))

    def max_gap_ms(self, window: tuple[float, float]) -> float:
        """The probe's largest gap overlapping ``window`` (perf_counter seconds), ms (10: none
        late)."""
        t0, t1 = window
        return round(max([g for end, g in list(self._gaps) if end > t0 and end - g < t1],
                         default=0.01) * 1e3, 1)

    def close(self) -> None:
        """Stop the probe process."""
        self._proc.kill()
        self._proc.wait()
        self._reader.join(5)


def idle_baseline(app: QtWidgets.QApplication, seconds: float = 1.0) -> dict:
    """The heartbeat's largest gap while nothing happens: the machine's own noise."""
    return measure(app, lambda: None, lambda: False, timeout_s=seconds)


def run_scenario(example: str, workers: int | None = None) -> dict:
    """Open ``example`` in a new window and measure, each under the heartbeat: opening it (and
    its first simulation), the first sweep (cold: nothing of the sweep loaded yet), a sweep
    cancelled at once, pinning the plan and showing the Compare tab. Returns the figures
    and whether Numba was imported into this (the GUI's) process; each action's
    ``noise_ms`` is the largest late wake-up of a process that only sleeps
    (:class:`NoiseProbe`) meanwhile."""
    app = QtWidgets.QApplication.instance() or QtWidgets.QApplication(sys.argv[:1])
    with tempfile.TemporaryDirectory(prefix="vtrain-heartbeat-") as scratch:
        settings = QtCore.QSettings(os.path.join(scratch, "settings.ini"),
                                    QtCore.QSettings.Format.IniFormat)
        return _scenario(app, settings, example, workers)


def _scenario(app: QtWidgets.QApplication, settings: QtCore.QSettings, example: str,
              workers: int | None) -> dict:
    """:func:`run_scenario` in a window with private ``settings``."""
    out: dict = {"numba_loaded_at_start": "numba" in sys.modules,
                 "loadavg": os.getloadavg(), "cpus": os.cpu_count()}
    probe = NoiseProbe()
    try:
        _actions(app, settings, example, workers, out)
    finally:
        probe.close()
    for figures in out.values():  # what the machine alone did meanwhile
        if isinstance(figures, dict) and "window" in figures:
            figures["noise_ms"] = probe.max_gap_ms(figures.pop("window"))
    return out


def _actions(app: QtWidgets.QApplication, settings: QtCore.QSettings, example: str,
             workers: int | None, out: dict) -> None:
    """The measured actions of :func:`run_scenario`; their figures go into ``out``."""
    from vtrain_gui.main_window import MainWindow

    window = MainWindow(settings=settings)
    window.resize(1600, 1000)
    window.show()
    out["baseline"] = idle_baseline(app)
    shown: list = []
    window.result_shown.connect(shown.append)
    out["open"] = measure(app, lambda: window.open_path(example, as_template=True),
                          lambda: bool(shown), settle_s=0.3)
    explore = window.explore
    if workers is not None:
        explore.settings_panel.workers.setValue(workers)
    ended: list = []
    explore.sweep_finished.connect(lambda r: ended.append("finished"))
    explore.sweep_failed.connect(lambda m: ended.append(f"failed: {m}"))
    explore.sweep_cancelled.connect(lambda: ended.append("cancelled"))
    window.show_tab("explore")
    # the sweep running (worker thread and processes) apart from showing its result (GUI thread)
    shown_at: list[float] = []
    set_result = explore.set_result

    def timed_set_result(result) -> None:
        shown_at.append(time.perf_counter())
        set_result(result)
        shown_at.append(time.perf_counter())

    explore.set_result = timed_set_result
    out["first_sweep"] = measure(app, explore.run, lambda: bool(ended), timeout_s=300,
                                 settle_s=0.3, split_at=shown_at)
    out["first_sweep"]["show_result_ms"] = (round((shown_at[1] - shown_at[0]) * 1e3, 1)
                                            if len(shown_at) >= 2 else None)
    explore.set_result = set_result
    out["first_sweep"]["outcome"] = ended[-1] if ended else None
    out["numba_loaded_after_sweep"] = "numba" in sys.modules
    ended.clear()

    def run_and_cancel() -> None:
        explore.run()
        QtCore.QTimer.singleShot(300, explore.cancel)

    out["cancel"] = measure(app, run_and_cancel, lambda: bool(ended), timeout_s=120, settle_s=0.3)
    out["cancel"]["outcome"] = ended[-1] if ended else None
    window.show_tab("plan")
    out["pin"] = measure(app, window.pin_plan, lambda: True, settle_s=0.3)
    out["compare"] = measure(app, lambda: window.show_tab("compare"), lambda: True, settle_s=0.5)
    out["numba_loaded_at_end"] = "numba" in sys.modules
    out["loadavg_end"] = os.getloadavg()
    window.setWindowModified(False)
    window.close()
    for runner in (window.runner, window.fit_runner, explore.runner):
        runner.shutdown()


if __name__ == "__main__":  # python tests/gui/heartbeat.py EXAMPLE.json [WORKERS]
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    args = sys.argv[1:]
    print(json.dumps(run_scenario(args[0], int(args[1]) if len(args) > 1 else None)))
