"""Run :func:`core.sim.simulate.simulate` and :func:`core.studies.sweep.run_sweep` off the GUI thread.

No worker thread loads Numba: loading it holds the interpreter lock for seconds, which
froze the window for 2.8 to 10.5 s on the first sweep. The simulation and sweep workers
run the core under :func:`core.sim.fastpath_kernel.kept_out`, so a simulation uses the numpy
pass and a sweep's compiled batches go to its worker processes (the Workers setting;
with one worker, the numpy pass here).

One :class:`SimulationRunner` owns one worker thread. Requests are numbered;
while a simulation runs, newer requests replace each other and only the latest
runs next ("latest wins"), so typing into a field never queues a backlog.
Results come back to the GUI thread through queued signals. The simulator is
a Qt-free function; the worker never touches a widget.

:class:`SweepRunner` does the same for design-space sweeps, which take
seconds: each run gets its own ``threading.Event`` that Cancel (or a newer
run, or :meth:`SweepRunner.shutdown`) sets; the Qt-free sweep checks it
between batches and raises :class:`core.studies.sweep.SweepCancelled`. Progress
``(done, total)`` comes back through a queued signal, at most every
:data:`PROGRESS_INTERVAL_S`.

:class:`ProfileRunner` runs :func:`core.profiling.run_profile` (minutes) the
same way: a cancel ``threading.Event`` per run, one queued progress signal per
profiling step, and the partial store reported on Cancel.
"""

from __future__ import annotations

import copy
import math
import threading
import time
import traceback
import weakref
from typing import Any, Callable

from PySide6 import QtCore
from PySide6.QtCore import Signal, Slot

from core.sim import fastpath_kernel
from core.plan.session import Session

__all__ = ["SimulationRunner", "SweepRunner", "ProfileRunner", "live_runners", "PROGRESS_INTERVAL_S"]

#: Sweep progress reaches the GUI thread at most this often (plus the first and last report).
PROGRESS_INTERVAL_S = 0.05

_LIVE: "weakref.WeakSet[SimulationRunner | SweepRunner | ProfileRunner]" = weakref.WeakSet()


def live_runners() -> list["SimulationRunner | SweepRunner | ProfileRunner"]:
    """Runners (simulation, sweep or profile) whose worker thread is still running (tests find leaks)."""
    return [r for r in list(_LIVE) if r.is_thread_running()]


def _default_simulate(session: Session) -> Any:
    # looked up at call time so the lead's implementation (or a test's stand-in) is used
    from core.sim import simulate as simulate_module

    result = simulate_module.simulate(session)
    # what the timeline asks of the graph first, computed here rather than on the GUI thread
    # (the lanes sort every task's stream: 0.1 s at 200,000 tasks, 0.5 s at 6 million)
    getattr(getattr(result, "graph", None), "lanes", None)
    return result


def _new_worker_thread(name: str, worker: QtCore.QObject) -> QtCore.QThread:
    """A named thread that owns ``worker``; connect the signals, then start it."""
    thread = QtCore.QThread()
    thread.setObjectName(name)
    worker.moveToThread(thread)
    return thread


def _stop_worker_thread(thread: QtCore.QThread, worker: QtCore.QObject, timeout_ms: int) -> bool:
    """End ``thread``'s event loop and wait; on success schedule both for deletion (the
    worker's signals still queued for the GUI thread are dropped with it)."""
    thread.quit()
    stopped = thread.wait(timeout_ms)
    if stopped:
        worker.deleteLater()
        thread.deleteLater()
    return stopped


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
            with fastpath_kernel.kept_out():  # Numba's loading would freeze the GUI thread
                result = self._simulate(session)
        except NotImplementedError:
            self.failed.emit(request_id, "the simulator is not implemented in this build "
                                         "(core.sim.simulate.simulate raised NotImplementedError)")
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
        Request ``id`` produced a :class:`core.sim.simulate.SimulationResult` in the
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
        stopped = _stop_worker_thread(self._thread, self._worker, timeout_ms)
        if stopped:
            self._worker = None
            self._thread = None
            self._running_id = None
        return stopped

    # ------------------------------------------------------------------ internals
    def _ensure_thread(self) -> None:
        if self._thread is not None:
            return
        self._worker = _SimulationWorker(self._simulate_fn)
        self._thread = _new_worker_thread("vtrain-simulation", self._worker)
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


# --------------------------------------------------------------------------- sweeps

def _default_run_sweep(session: Session, space: Any, deadline_days: float | None,
                       progress: Callable[[int, int], None], cancel: threading.Event,
                       **options: Any) -> Any:
    # looked up at call time so a test's stand-in is used; options: workers, dask
    from core.studies import sweep as sweep_module

    # the scatter and table show every plan's figures (grey where it does not fit): no
    # branch and bound here unless asked (options "prune")
    options.setdefault("prune", False)
    result = sweep_module.run_sweep(session, space, deadline_days=deadline_days,
                                    progress=progress, cancel=cancel, **options)
    # the window looks up the editor's plan among the results: the index of every plan
    # (tens of thousands) is built here, not on the GUI thread
    result.index_of(session.plan)
    return result


def _error_text(exc: BaseException) -> str:
    from core.plan.fields import ConfigError

    if isinstance(exc, ConfigError):
        return "; ".join(str(e) for e in exc.errors)
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()


class _SweepWorker(QtCore.QObject):
    """Lives in the worker thread; runs one sweep per :meth:`run` call."""

    progressed = Signal(int, int, int)  # run id, plans done, plans in total
    succeeded = Signal(int, object, float)  # run id, SweepResult, seconds
    failed = Signal(int, str)  # run id, message
    cancelled = Signal(int)  # run id

    def __init__(self, sweep_fn: Callable[..., Any]) -> None:
        super().__init__()
        self._sweep = sweep_fn

    @Slot(int, object, object, object, object, object)
    def run(self, run_id: int, session: Session, space: Any, deadline_days: Any,
            cancel: threading.Event, options: Any) -> None:
        from core.studies.sweep import SweepCancelled

        last = [-math.inf]

        def progress(done: int, total: int) -> None:  # called on this (worker) thread
            now = time.monotonic()
            if done == 0 or done >= total or now - last[0] >= PROGRESS_INTERVAL_S:
                last[0] = now
                self.progressed.emit(run_id, int(done), int(total))

        t0 = time.perf_counter()
        try:
            if cancel.is_set():
                raise SweepCancelled("sweep cancelled")
            with fastpath_kernel.kept_out():  # compiled batches go to the worker processes
                if options:
                    result = self._sweep(session, space, deadline_days, progress, cancel,
                                         **options)
                else:
                    result = self._sweep(session, space, deadline_days, progress, cancel)
        except SweepCancelled:
            self.cancelled.emit(run_id)
            return
        except Exception as exc:  # noqa: BLE001 - report any sweep error to the user
            self.failed.emit(run_id, _error_text(exc))
            return
        self.succeeded.emit(run_id, result, time.perf_counter() - t0)


class SweepRunner(QtCore.QObject):
    """Runs design-space sweeps (:func:`core.studies.sweep.run_sweep`) on a worker thread.

    One sweep runs at a time. :meth:`start` while one runs cancels it and
    runs the new one next (latest wins); :meth:`cancel` stops the running one
    within one batch of plans (~0.1 s). ``sweep_fn(session, space,
    deadline_days, progress, cancel)`` replaces ``run_sweep`` in tests.

    Signals (emitted on the GUI thread)
    -----------------------------------
    started(int)
        Run ``id`` began.
    progress(int, int, int)
        Run ``id`` finished ``done`` of ``total`` plans (``total`` is 0 until known).
    finished(int, object, float)
        Run ``id`` produced a :class:`core.studies.sweep.SweepResult` in the given seconds.
    failed(int, str)
        Run ``id`` raised (invalid settings, missing profile...); the message is readable.
    cancelled(int)
        Run ``id`` stopped because it was cancelled; it has no result.
    """

    started = Signal(int)
    progress = Signal(int, int, int)
    finished = Signal(int, object, float)
    failed = Signal(int, str)
    cancelled = Signal(int)
    _run_requested = Signal(int, object, object, object, object, object)

    def __init__(self, sweep_fn: Callable[..., Any] | None = None,
                 parent: QtCore.QObject | None = None) -> None:
        super().__init__(parent)
        self._sweep_fn = sweep_fn or _default_run_sweep
        self._thread: QtCore.QThread | None = None
        self._worker: _SweepWorker | None = None
        self._running: tuple[int, threading.Event] | None = None
        self._pending: tuple[int, Session, Any, float | None, dict] | None = None
        self._next_id = 0
        self._closed = False
        _LIVE.add(self)

    # ------------------------------------------------------------------ API
    def start(self, session: Session, space: Any, deadline_days: float | None = None,
              options: dict[str, Any] | None = None) -> int:
        """Sweep ``space`` for (a copy of) ``session``; returns the run id.

        ``options`` are passed on to ``run_sweep`` as keywords (``workers``, ``dask``:
        where the sweep runs); none by default. A running sweep is cancelled and this
        one runs when it has stopped.
        """
        if self._closed:
            raise RuntimeError("SweepRunner is shut down")
        self._next_id += 1
        run_id = self._next_id
        self._pending = (run_id, session.copy(), copy.deepcopy(space), deadline_days,
                         dict(options or {}))
        if self._running is not None:
            self._running[1].set()
        else:
            self._start_pending()
        return run_id

    def cancel(self) -> None:
        """Drop a waiting sweep and ask the running one to stop (``cancelled`` follows)."""
        self._pending = None
        if self._running is not None:
            self._running[1].set()

    @property
    def busy(self) -> bool:
        """Whether a sweep is running or waiting."""
        return self._running is not None or self._pending is not None

    @property
    def running_id(self) -> int | None:
        """Id of the running sweep, or None."""
        return self._running[0] if self._running is not None else None

    @property
    def latest_run_id(self) -> int:
        """Id of the newest run (0 before the first)."""
        return self._next_id

    def is_thread_running(self) -> bool:
        """Whether the worker thread exists and runs."""
        return self._thread is not None and self._thread.isRunning()

    def shutdown(self, timeout_ms: int = 60_000) -> bool:
        """Cancel everything, wait for the worker to stop, end the thread.

        Returns whether the thread stopped within ``timeout_ms``. Safe to call twice.
        """
        self._closed = True
        self.cancel()
        if self._thread is None:
            return True
        stopped = _stop_worker_thread(self._thread, self._worker, timeout_ms)
        if stopped:
            self._worker = None
            self._thread = None
            self._running = None
        return stopped

    # ------------------------------------------------------------------ internals
    def _ensure_thread(self) -> None:
        if self._thread is not None:
            return
        self._worker = _SweepWorker(self._sweep_fn)
        self._thread = _new_worker_thread("vtrain-sweep", self._worker)
        self._run_requested.connect(self._worker.run)  # queued: worker lives in the thread
        self._worker.progressed.connect(self._on_worker_progressed)
        self._worker.succeeded.connect(self._on_worker_succeeded)
        self._worker.failed.connect(self._on_worker_failed)
        self._worker.cancelled.connect(self._on_worker_cancelled)
        self._thread.start()

    def _start_pending(self) -> None:
        if self._pending is None or self._closed:
            return
        self._ensure_thread()
        run_id, session, space, deadline_days, options = self._pending
        self._pending = None
        cancel = threading.Event()
        self._running = (run_id, cancel)
        self.started.emit(run_id)
        self._run_requested.emit(run_id, session, space, deadline_days, cancel, options)

    def _end_run(self, run_id: int) -> bool:
        """Forget run ``run_id``; whether its outcome should be reported."""
        if self._running is not None and self._running[0] == run_id:
            self._running = None
        return not self._closed

    def _was_cancelled(self, run_id: int) -> bool:
        return self._running is not None and self._running[0] == run_id and self._running[1].is_set()

    @Slot(int, int, int)
    def _on_worker_progressed(self, run_id: int, done: int, total: int) -> None:
        if not self._closed and self.running_id == run_id:
            self.progress.emit(run_id, done, total)

    @Slot(int, object, float)
    def _on_worker_succeeded(self, run_id: int, result: object, seconds: float) -> None:
        # a sweep that finished its last batch just as Cancel was pressed counts as cancelled
        cancelled = self._was_cancelled(run_id)
        if self._end_run(run_id):
            if cancelled:
                self.cancelled.emit(run_id)
            else:
                self.finished.emit(run_id, result, seconds)
            self._start_pending()

    @Slot(int, str)
    def _on_worker_failed(self, run_id: int, message: str) -> None:
        if self._end_run(run_id):
            self.failed.emit(run_id, message)
            self._start_pending()

    @Slot(int)
    def _on_worker_cancelled(self, run_id: int) -> None:
        if self._end_run(run_id):
            self.cancelled.emit(run_id)
            self._start_pending()


# --------------------------------------------------------------------------- profiling

def _default_run_profile(out: Any, device: str, shapes: Any, threads: int | None,
                         progress: Callable[[Any], None], cancel: threading.Event) -> Any:
    # looked up at call time so a test's stand-in (monkeypatched core.profiling.run_profile) is used
    from core import profiling

    return profiling.run_profile(out, device, shapes, threads=threads, progress=progress,
                                 cancel=cancel)


def _default_torch_status() -> tuple[bool, str]:
    from core import profiling

    return profiling.torch_status()


class _ProfileWorker(QtCore.QObject):
    """Lives in the worker thread; checks for torch and runs one profile per :meth:`run` call."""

    probed = Signal(bool, str)  # torch available, text
    progressed = Signal(int, object)  # run id, core.profiling.ProfileProgress
    succeeded = Signal(int, object, float)  # run id, ProfileRunResult, seconds
    cancelled = Signal(int, object)  # run id, ProfileRunResult (the store keeps finished groups) or None
    failed = Signal(int, str)  # run id, message

    def __init__(self, profile_fn: Callable[..., Any],
                 status_fn: Callable[[], tuple[bool, str]]) -> None:
        super().__init__()
        self._profile = profile_fn
        self._status = status_fn

    @Slot()
    def probe(self) -> None:
        # torch_status() imports torch (seconds, the first time): done here, not on the GUI thread
        try:
            ok, text = self._status()
        except Exception as exc:  # noqa: BLE001 - report, do not kill the thread
            ok, text = False, _error_text(exc)
        self.probed.emit(bool(ok), str(text))

    @Slot(int, object, str, object, object, object)
    def run(self, run_id: int, out: Any, device: str, shapes: Any, threads: Any,
            cancel: threading.Event) -> None:
        def progress(report: Any) -> None:  # called on this (worker) thread, once per step (seconds)
            self.progressed.emit(run_id, report)

        t0 = time.perf_counter()
        try:
            if cancel.is_set():
                self.cancelled.emit(run_id, None)
                return
            result = self._profile(out, device, shapes, threads, progress, cancel)
        except KeyboardInterrupt:
            self.cancelled.emit(run_id, None)
            return
        except Exception as exc:  # noqa: BLE001 - torch missing, bad device, out of memory...
            self.failed.emit(run_id, _error_text(exc))
            return
        if getattr(result, "cancelled", False):
            self.cancelled.emit(run_id, result)
        else:
            self.succeeded.emit(run_id, result, time.perf_counter() - t0)


class ProfileRunner(QtCore.QObject):
    """Profiles the local device (:func:`core.profiling.run_profile`) on a worker thread.

    One run at a time. :meth:`cancel` sets the run's ``threading.Event``; the
    Qt-free profiler stops at its next measurement and returns a result whose
    store holds the shape groups finished before (``cancelled`` follows).
    :meth:`probe` asks :func:`core.profiling.torch_status` on the same thread,
    because with torch installed it imports torch, which takes seconds.

    ``profile_fn(out, device, shapes, threads, progress, cancel)`` and
    ``status_fn()`` replace the defaults in tests.

    Signals (emitted on the GUI thread)
    -----------------------------------
    probed(bool, str)
        Whether torch is available here, its version or the install hint.
    started(int)
        Run ``id`` began.
    progress(int, object)
        Run ``id`` reports a :class:`core.profiling.ProfileProgress` (one per step).
    finished(int, object, float)
        Run ``id`` produced a :class:`core.profiling.ProfileRunResult` in the given seconds.
    cancelled(int, object)
        Run ``id`` stopped on Cancel; the result (or None if it stopped before
        starting) names the store, which holds the groups finished before.
    failed(int, str)
        Run ``id`` raised (torch missing, bad device...); the message is readable.
    """

    probed = Signal(bool, str)
    started = Signal(int)
    progress = Signal(int, object)
    finished = Signal(int, object, float)
    cancelled = Signal(int, object)
    failed = Signal(int, str)
    _probe_requested = Signal()
    _run_requested = Signal(int, object, str, object, object, object)

    def __init__(self, profile_fn: Callable[..., Any] | None = None,
                 status_fn: Callable[[], tuple[bool, str]] | None = None,
                 parent: QtCore.QObject | None = None) -> None:
        super().__init__(parent)
        self._profile_fn = profile_fn or _default_run_profile
        self._status_fn = status_fn or _default_torch_status
        self._thread: QtCore.QThread | None = None
        self._worker: _ProfileWorker | None = None
        self._running: tuple[int, threading.Event] | None = None
        self._next_id = 0
        self._closed = False
        _LIVE.add(self)

    # ------------------------------------------------------------------ API
    def probe(self) -> None:
        """Ask whether torch is available (:attr:`probed` answers)."""
        if self._closed:
            raise RuntimeError("ProfileRunner is shut down")
        self._ensure_thread()
        self._probe_requested.emit()

    def start(self, out: Any, device: str = "cpu", shapes: Any = None,
              threads: int | None = None) -> int:
        """Profile ``device`` for ``shapes`` (None: the default set) into store ``out``.

        Returns the run id.

        Raises
        ------
        RuntimeError
            A run is in progress, or the runner is shut down.
        """
        if self._closed:
            raise RuntimeError("ProfileRunner is shut down")
        if self._running is not None:
            raise RuntimeError("a profile run is in progress")
        self._ensure_thread()
        self._next_id += 1
        run_id = self._next_id
        cancel = threading.Event()
        self._running = (run_id, cancel)
        self.started.emit(run_id)
        self._run_requested.emit(run_id, out, str(device),
                                 copy.deepcopy(shapes) if shapes is not None else None,
                                 threads, cancel)
        return run_id

    def cancel(self) -> None:
        """Ask the running profile to stop at its next measurement (``cancelled`` follows)."""
        if self._running is not None:
            self._running[1].set()

    @property
    def busy(self) -> bool:
        """Whether a profile runs."""
        return self._running is not None

    @property
    def cancel_requested(self) -> bool:
        """Whether Cancel was asked of the running profile (it has not stopped yet)."""
        return self._running is not None and self._running[1].is_set()

    @property
    def running_id(self) -> int | None:
        """Id of the running profile, or None."""
        return self._running[0] if self._running is not None else None

    def is_thread_running(self) -> bool:
        """Whether the worker thread exists and runs."""
        return self._thread is not None and self._thread.isRunning()

    def shutdown(self, timeout_ms: int = 60_000) -> bool:
        """Cancel the running profile, wait for it to stop, end the thread.

        The store keeps the groups finished before. Returns whether the thread
        stopped within ``timeout_ms``. Safe to call twice.
        """
        self._closed = True
        self.cancel()
        if self._thread is None:
            return True
        stopped = _stop_worker_thread(self._thread, self._worker, timeout_ms)
        if stopped:
            self._worker = None
            self._thread = None
            self._running = None
        return stopped

    # ------------------------------------------------------------------ internals
    def _ensure_thread(self) -> None:
        if self._thread is not None:
            return
        self._worker = _ProfileWorker(self._profile_fn, self._status_fn)
        self._thread = _new_worker_thread("vtrain-profile", self._worker)
        self._probe_requested.connect(self._worker.probe)  # queued: worker lives in the thread
        self._run_requested.connect(self._worker.run)
        self._worker.probed.connect(self._on_worker_probed)
        self._worker.progressed.connect(self._on_worker_progressed)
        self._worker.succeeded.connect(self._on_worker_succeeded)
        self._worker.cancelled.connect(self._on_worker_cancelled)
        self._worker.failed.connect(self._on_worker_failed)
        self._thread.start()

    def _end_run(self, run_id: int) -> bool:
        """Forget run ``run_id``; whether its outcome should be reported."""
        if self._running is not None and self._running[0] == run_id:
            self._running = None
        return not self._closed

    @Slot(bool, str)
    def _on_worker_probed(self, ok: bool, text: str) -> None:
        if not self._closed:
            self.probed.emit(ok, text)

    @Slot(int, object)
    def _on_worker_progressed(self, run_id: int, report: object) -> None:
        if not self._closed and self.running_id == run_id:
            self.progress.emit(run_id, report)

    @Slot(int, object, float)
    def _on_worker_succeeded(self, run_id: int, result: object, seconds: float) -> None:
        if self._end_run(run_id):
            self.finished.emit(run_id, result, seconds)

    @Slot(int, object)
    def _on_worker_cancelled(self, run_id: int, result: object) -> None:
        if self._end_run(run_id):
            self.cancelled.emit(run_id, result)

    @Slot(int, str)
    def _on_worker_failed(self, run_id: int, message: str) -> None:
        if self._end_run(run_id):
            self.failed.emit(run_id, message)
