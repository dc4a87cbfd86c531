"""Run :func:`core.simulate.simulate` off the GUI thread.

One :class:`SimulationRunner` owns one worker thread. Requests are numbered;
while a simulation runs, newer requests replace each other and only the latest
runs next ("latest wins"), so typing into a field never queues a backlog.
Results come back to the GUI thread through queued signals. The simulator is
a Qt-free function; the worker never touches a widget.
"""

from __future__ import annotations

import time
import traceback
import weakref
from typing import Any, Callable

from PySide6 import QtCore
from PySide6.QtCore import Signal, Slot

from core.config import Session

__all__ = ["SimulationRunner", "live_runners"]

_LIVE: "weakref.WeakSet[SimulationRunner]" = weakref.WeakSet()


def live_runners() -> list["SimulationRunner"]:
    """Runners whose worker thread is still running (tests use this to find leaks)."""
    return [r for r in list(_LIVE) if r.is_thread_running()]


def _default_simulate(session: Session) -> Any:
    # looked up at call time so the lead's implementation (or a test's stand-in) is used
    from core import simulate as simulate_module

    return simulate_module.simulate(session)


class _SimulationWorker(QtCore.QObject):
    """Lives in the worker thread; runs one simulation per :meth:`run` call."""

    succeeded = Signal(int, object, float)  # request id, SimulationResult, seconds
    failed = Signal(int, str)  # request id, message

    def __init__(self, simulate_fn: Callable[[Session], Any]) -> None:
        super().__init__()
        self._simulate = simulate_fn

    @Slot(int, object)
    def run(self, request_id: int, session: Session) -> None:
        t0 = time.perf_counter()
        try:
            result = self._simulate(session)
        except NotImplementedError:
            self.failed.emit(request_id, "the simulator is not implemented in this build "
                                         "(core.simulate.simulate raised NotImplementedError)")
            return
        except Exception as exc:  # noqa: BLE001 - report any simulator error to the user
            detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            self.failed.emit(request_id, detail)
            return
        self.succeeded.emit(request_id, result, time.perf_counter() - t0)


class SimulationRunner(QtCore.QObject):
    """Runs simulations on a worker thread; the latest request wins.

    Signals (emitted on the GUI thread)
    -----------------------------------
    started(int)
        Request ``id`` began simulating.
    finished(int, object, float)
        Request ``id`` produced a :class:`core.simulate.SimulationResult` in the
        given seconds.
    failed(int, str)
        Request ``id`` raised; the message is readable.
    """

    started = Signal(int)
    finished = Signal(int, object, float)
    failed = Signal(int, str)
    _run_requested = Signal(int, object)

    def __init__(self, simulate_fn: Callable[[Session], Any] | None = None,
                 parent: QtCore.QObject | None = None) -> None:
        super().__init__(parent)
        self._simulate_fn = simulate_fn or _default_simulate
        self._thread: QtCore.QThread | None = None
        self._worker: _SimulationWorker | None = None
        self._running_id: int | None = None
        self._pending: tuple[int, Session] | None = None
        self._next_id = 0
        self._closed = False
        _LIVE.add(self)

    # ------------------------------------------------------------------ API
    def request(self, session: Session) -> int:
        """Ask for a simulation of (a copy of) ``session``; returns the request id.

        If one is running, this request replaces any earlier waiting one.
        """
        if self._closed:
            raise RuntimeError("SimulationRunner is shut down")
        self._next_id += 1
        request_id = self._next_id
        self._pending = (request_id, session.copy())
        if self._running_id is None:
            self._start_pending()
        return request_id

    @property
    def busy(self) -> bool:
        """Whether a simulation is running or waiting."""
        return self._running_id is not None or self._pending is not None

    @property
    def latest_request_id(self) -> int:
        """Id of the newest request (0 before the first)."""
        return self._next_id

    def is_thread_running(self) -> bool:
        """Whether the worker thread exists and runs."""
        return self._thread is not None and self._thread.isRunning()

    def shutdown(self, timeout_ms: int = 60_000) -> bool:
        """Drop waiting work, let a running simulation finish, stop the thread.

        Returns whether the thread stopped within ``timeout_ms``. Safe to call twice.
        """
        self._closed = True
        self._pending = None
        if self._thread is None:
            return True
        self._thread.quit()
        stopped = self._thread.wait(timeout_ms)
        if stopped:
            # the worker signals still queued for the GUI thread are dropped with the worker
            self._worker.deleteLater()
            self._thread.deleteLater()
            self._worker = None
            self._thread = None
            self._running_id = None
        return stopped

    # ------------------------------------------------------------------ internals
    def _ensure_thread(self) -> None:
        if self._thread is not None:
            return
        self._thread = QtCore.QThread()
        self._thread.setObjectName("vtrain-simulation")
        self._worker = _SimulationWorker(self._simulate_fn)
        self._worker.moveToThread(self._thread)
        self._run_requested.connect(self._worker.run)  # queued: worker lives in the thread
        self._worker.succeeded.connect(self._on_worker_succeeded)
        self._worker.failed.connect(self._on_worker_failed)
        self._thread.start()

    def _start_pending(self) -> None:
        if self._pending is None or self._closed:
            return
        self._ensure_thread()
        request_id, session = self._pending
        self._pending = None
        self._running_id = request_id
        self.started.emit(request_id)
        self._run_requested.emit(request_id, session)

    @Slot(int, object, float)
    def _on_worker_succeeded(self, request_id: int, result: object, seconds: float) -> None:
        self._running_id = None
        if self._closed:
            return
        self.finished.emit(request_id, result, seconds)
        self._start_pending()

    @Slot(int, str)
    def _on_worker_failed(self, request_id: int, message: str) -> None:
        self._running_id = None
        if self._closed:
            return
        self.failed.emit(request_id, message)
        self._start_pending()
