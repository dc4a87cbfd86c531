"""The one adapter that runs long, Qt-free work on a worker thread (STYLE.md "Threads in Qt").

A *job* is a plain function ``job(report, cancel) -> result`` that knows nothing of Qt:

* ``report(payload)`` hands a progress payload (any Python object) to the GUI thread;
* ``cancel`` is a ``threading.Event`` the job checks between steps; it stops by raising
  :class:`JobCancelled` (optionally carrying a partial result);
* :class:`JobFailed` ends it with a message for the user; any other exception is reported
  through the runner's ``describe_error``.

:class:`BackgroundRunner` owns one ``QThread`` with one worker object in it and runs one job at
a time. Everything the job produces comes back to the GUI thread through queued signals, to
bound, decorated slots. A job submitted while another runs waits; a newer submission replaces
a waiting one ("latest wins") and, with ``cancel_running``, also cancels the running one. The
runner keeps itself (and its thread) referenced until the thread has ended, and
:meth:`BackgroundRunner.shutdown` stops it when the window closes. The simulation, sweep, study,
profiling and timeline-layout workers of the window are all built on it
(:mod:`vtrain_gui.workers`, :mod:`vtrain_gui.timeline.items`).
"""

from __future__ import annotations

import sys
import threading
import time
import traceback
import weakref
from typing import Any, Callable

from PySide6 import QtCore
from PySide6.QtCore import Signal, Slot

__all__ = ["BackgroundRunner", "Job", "JobCancelled", "JobFailed", "live_runners", "shutdown_all",
           "keep_gui_responsive", "exception_text"]

#: ``job(report, cancel) -> result``: the Qt-free work a runner runs on its thread.
Job = Callable[[Callable[[Any], None], threading.Event], Any]

_LIVE: "weakref.WeakSet[BackgroundRunner]" = weakref.WeakSet()
#: Runners whose thread may still run: kept referenced until it has ended (a QThread destroyed
#: while running aborts the process).
_KEEP: "set[BackgroundRunner]" = set()
#: The interpreter's thread switch interval, seconds, once a worker thread runs: the GUI thread
#: takes the interpreter lock back within this of asking (CPython's default, 5 ms, is per
#: competing thread and per time Qt calls into Python, which several times a frame adds up to
#: 100 ms stalls with a sweep and two timeline layouts running; benchmarks/bench_gui_heartbeat.py).
GUI_SWITCH_INTERVAL_S = 0.001


def keep_gui_responsive() -> None:
    """Lower the interpreter's switch interval to :data:`GUI_SWITCH_INTERVAL_S` (never raise it):
    called before a worker thread of the window starts. The workers lose a little throughput
    (more lock hand-overs); the sweep's simulation runs in worker processes, unaffected."""
    if sys.getswitchinterval() > GUI_SWITCH_INTERVAL_S:
        sys.setswitchinterval(GUI_SWITCH_INTERVAL_S)


def live_runners() -> list["BackgroundRunner"]:
    """Runners whose worker thread is still running (tests find leaks)."""
    return [r for r in list(_LIVE) if r.is_thread_running()]


def shutdown_all(timeout_ms: int = 60_000) -> bool:
    """Shut down every runner whose thread may still run (:meth:`BackgroundRunner.shutdown`),
    those no view holds any more too (a timeline's cancelled layout of an older data set): the
    window is closing, and a ``QThread`` destroyed while it runs aborts the process. Returns
    whether every thread stopped within ``timeout_ms`` each."""
    ok = True
    for runner in list(_KEEP):
        ok = runner.shutdown(timeout_ms) and ok
    return ok


def exception_text(exc: BaseException) -> str:
    """The last line of a traceback: ``"ValueError: message"``."""
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()


class JobCancelled(Exception):
    """Raised by a job that stopped on its cancel event; ``result`` is what it finished (or None)."""

    def __init__(self, result: Any = None) -> None:
        super().__init__("cancelled")
        self.result = result


class JobFailed(Exception):
    """Raised by a job to end with ``message`` shown to the user as it is."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class _JobWorker(QtCore.QObject):
    """Lives in the worker thread; runs one job per :meth:`run` call."""

    reported = Signal(int, object)  # run id, payload
    succeeded = Signal(int, object, float)  # run id, result, seconds
    failed = Signal(int, str)  # run id, message
    cancelled = Signal(int, object)  # run id, partial result or None

    def __init__(self, describe_error: Callable[[BaseException], str],
                 idle: threading.Event) -> None:
        super().__init__()
        self._describe_error = describe_error
        self._idle = idle

    @Slot(int, object, object)
    def run(self, run_id: int, job: Job, cancel: threading.Event) -> None:
        def report(payload: Any) -> None:  # called on this (worker) thread
            self.reported.emit(run_id, payload)

        t0 = time.perf_counter()
        try:
            if cancel.is_set():
                raise JobCancelled()
            result = job(report, cancel)
        except JobCancelled as exc:
            self.cancelled.emit(run_id, exc.result)
        except JobFailed as exc:
            self.failed.emit(run_id, exc.message)
        except Exception as exc:  # noqa: BLE001 - report any error of the job to the user
            self.failed.emit(run_id, self._describe_error(exc))
        else:
            self.succeeded.emit(run_id, result, time.perf_counter() - t0)
        finally:
            self._idle.set()


class BackgroundRunner(QtCore.QObject):
    """Runs Qt-free jobs (:data:`Job`) one at a time on a worker thread it owns.

    Parameters
    ----------
    name : str
        Name of the worker thread (``vtrain-<name>``).
    cancel_running : bool
        :meth:`submit` while a job runs also sets that job's cancel event.
    cancel_wins : bool
        A job that returns after its cancel event was set is reported as cancelled (with
        its result), not finished.
    stop_when_idle : bool
        End the thread when no job is left (it starts again with the next one), so that an
        idle runner holds no thread.
    describe_error : callable, optional
        Message of an exception a job raised (default :func:`exception_text`).

    Signals (emitted on the GUI thread)
    -----------------------------------
    started(int)
        Job ``id`` began.
    progress(int, object)
        Job ``id`` reported a payload.
    finished(int, object, float)
        Job ``id`` returned a result after the given seconds.
    failed(int, str)
        Job ``id`` raised; the message is readable.
    cancelled(int, object)
        Job ``id`` stopped on its cancel event; the partial result or None.
    """

    started = Signal(int)
    progress = Signal(int, object)
    finished = Signal(int, object, float)
    failed = Signal(int, str)
    cancelled = Signal(int, object)
    _run_requested = Signal(int, object, object)

    def __init__(self, name: str, *, cancel_running: bool = False, cancel_wins: bool = False,
                 stop_when_idle: bool = False,
                 describe_error: Callable[[BaseException], str] | None = None,
                 parent: QtCore.QObject | None = None) -> None:
        super().__init__(parent)
        self._name = name
        self._cancel_running = cancel_running
        self._cancel_wins = cancel_wins
        self._stop_when_idle = stop_when_idle
        self._describe_error = describe_error or exception_text
        self._thread: QtCore.QThread | None = None
        self._worker: _JobWorker | None = None
        self._idle = threading.Event()
        self._idle.set()
        self._running: tuple[int, threading.Event] | None = None
        self._pending: tuple[int, Job] | None = None
        self._next_id = 0
        self._closed = False
        _LIVE.add(self)

    # ------------------------------------------------------------------ API
    def submit(self, job: Job) -> int:
        """Run ``job`` when the thread is free (now, if it is); returns the job id.

        Raises
        ------
        RuntimeError
            The runner is shut down.
        """
        if self._closed:
            raise RuntimeError(f"the {self._name} runner is shut down")
        self._next_id += 1
        self._pending = (self._next_id, job)
        if self._running is None:
            self._start_pending()
        elif self._cancel_running:
            self._running[1].set()
        return self._next_id

    def cancel(self) -> None:
        """Drop a waiting job and ask the running one to stop (``cancelled`` follows)."""
        self._pending = None
        if self._running is not None:
            self._running[1].set()

    @property
    def busy(self) -> bool:
        """Whether a job is running or waiting."""
        return self._running is not None or self._pending is not None

    @property
    def running_id(self) -> int | None:
        """Id of the running job, or None."""
        return self._running[0] if self._running is not None else None

    @property
    def latest_id(self) -> int:
        """Id of the newest job (0 before the first)."""
        return self._next_id

    @property
    def cancel_requested(self) -> bool:
        """Whether the running job was asked to stop (it has not stopped yet)."""
        return self._running is not None and self._running[1].is_set()

    def is_thread_running(self) -> bool:
        """Whether the worker thread exists and runs."""
        return self._thread is not None and self._thread.isRunning()

    def wait_job(self, timeout_s: float | None = None) -> bool:
        """Block until the job function on the thread has returned (its signals may still be
        queued); True when none runs there."""
        return self._idle.wait(timeout_s)

    def shutdown(self, timeout_ms: int = 60_000) -> bool:
        """Drop waiting work, cancel the running job, wait for it and end the thread.

        Returns whether the thread stopped within ``timeout_ms``. Safe to call twice.
        """
        self._closed = True
        self.cancel()
        return self._stop_thread(timeout_ms)

    # ------------------------------------------------------------------ internals
    def _ensure_thread(self) -> None:
        if self._thread is not None:
            return
        self._worker = _JobWorker(self._describe_error, self._idle)
        self._thread = QtCore.QThread()
        self._thread.setObjectName(f"vtrain-{self._name}")
        self._worker.moveToThread(self._thread)
        self._run_requested.connect(self._worker.run)  # queued: the worker lives in the thread
        self._worker.reported.connect(self._on_reported)
        self._worker.succeeded.connect(self._on_succeeded)
        self._worker.failed.connect(self._on_failed)
        self._worker.cancelled.connect(self._on_cancelled)
        _KEEP.add(self)
        keep_gui_responsive()
        self._thread.start()

    def _stop_thread(self, timeout_ms: int) -> bool:
        """End the thread's event loop and wait; on success schedule the thread and the worker
        for deletion (signals of the worker still queued for the GUI thread are dropped)."""
        if self._thread is None:
            return True
        self._thread.quit()
        if not self._thread.wait(timeout_ms):
            return False
        self._worker.deleteLater()
        self._thread.deleteLater()
        self._worker = self._thread = None
        self._running = None
        _KEEP.discard(self)
        return True

    def _start_pending(self) -> None:
        if self._pending is None or self._closed:
            return
        self._ensure_thread()
        run_id, job = self._pending
        self._pending = None
        cancel = threading.Event()
        self._running = (run_id, cancel)
        self._idle.clear()
        self.started.emit(run_id)
        self._run_requested.emit(run_id, job, cancel)

    def _end(self, run_id: int) -> bool:
        """Forget job ``run_id``; whether its outcome is to be reported."""
        if self._running is not None and self._running[0] == run_id:
            self._running = None
        return not self._closed

    def _next(self) -> None:
        """Start the waiting job, or end an idle thread (``stop_when_idle``)."""
        self._start_pending()
        if self._running is None and self._stop_when_idle:
            self._stop_thread(60_000)

    @Slot(int, object)
    def _on_reported(self, run_id: int, payload: object) -> None:
        if not self._closed and self.running_id == run_id:
            self.progress.emit(run_id, payload)

    @Slot(int, object, float)
    def _on_succeeded(self, run_id: int, result: object, seconds: float) -> None:
        late_cancel = self._cancel_wins and self.cancel_requested and self.running_id == run_id
        if self._end(run_id):
            if late_cancel:  # finished its last step just as Cancel was pressed
                self.cancelled.emit(run_id, result)
            else:
                self.finished.emit(run_id, result, seconds)
            self._next()

    @Slot(int, str)
    def _on_failed(self, run_id: int, message: str) -> None:
        if self._end(run_id):
            self.failed.emit(run_id, message)
            self._next()

    @Slot(int, object)
    def _on_cancelled(self, run_id: int, result: object) -> None:
        if self._end(run_id):
            self.cancelled.emit(run_id, result)
            self._next()
