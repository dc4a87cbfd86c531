"""The window's background jobs: simulations, sweeps (and studies) and device profiling.

Each runner here is a thin Qt front of one :class:`vtrain_gui.background.BackgroundRunner`
(one worker thread, results through queued signals) around a Qt-free job function; the
runners keep the signals their views connect to.

No worker thread loads Numba: loading it holds the interpreter lock for seconds, which
froze the window for 2.8 to 10.5 s on the first sweep. The simulation and sweep jobs
run the core under :func:`core.sim.fastpath_kernel.kept_out`, so a simulation uses the numpy
pass and a sweep's compiled batches go to its worker processes (the Workers setting;
with one worker, the numpy pass here).

:class:`SimulationRunner`: requests are numbered; while a simulation runs, newer requests
replace each other and only the latest runs next ("latest wins"), so typing into a field
never queues a backlog.

:class:`FitChangesRunner` asks :func:`core.studies.fit_changes.fit_changes` what would make a
simulated plan that does not fit (or is tight) fit, on a thread of its own, after the
simulation: the window shows the result at once and fills in the memory panel's "To fit" line
when the search is done (seconds for a ZB-V plan of many micro-batches). Latest wins as for
simulations, and a newer request cancels the running search (it checks its cancel event
before each plan it sizes or times); the window also drops an answer that is not of the result
on screen (by request id).

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
from typing import Any, Callable

from PySide6 import QtCore
from PySide6.QtCore import Signal, Slot

from core.sim import fastpath_kernel
from core.plan.session import Session

from .background import BackgroundRunner, Job, JobCancelled, JobFailed

__all__ = ["SimulationRunner", "FitChangesRunner", "SweepRunner", "ProfileRunner",
           "PROGRESS_INTERVAL_S"]

#: Sweep progress reaches the GUI thread at most this often (plus the first and last report).
PROGRESS_INTERVAL_S = 0.05


def _default_simulate(session: Session) -> Any:
    # looked up at call time so the lead's implementation (or a test's stand-in) is used
    from core.sim import simulate as simulate_module

    result = simulate_module.simulate(session)
    # what would make it fit is a second job (:class:`FitChangesRunner`): the result shows first
    # what the timeline asks of the graph first, computed here rather than on the GUI thread
    # (the lanes sort every task's stream: 0.1 s at 200,000 tasks, 0.5 s at 6 million)
    getattr(getattr(result, "graph", None), "lanes", None)
    return result


def _simulation_job(simulate_fn: Callable[[Session], Any], session: Session) -> Job:
    """The job simulating ``session`` (Qt-free; see :mod:`vtrain_gui.background`)."""
    def job(report: Callable[[Any], None], cancel: threading.Event) -> Any:
        try:
            with fastpath_kernel.kept_out():  # Numba's loading would freeze the GUI thread
                return simulate_fn(session)
        except NotImplementedError:
            raise JobFailed("the simulator is not implemented in this build "
                            "(core.sim.simulate.simulate raised NotImplementedError)") from None
    return job


class _SessionRunner(QtCore.QObject):
    """What the simulation and fit-search runners share: one :class:`BackgroundRunner` (named
    ``name``, with ``runner_options``) whose ``finished`` and ``failed`` it forwards, the
    latest request winning; a subclass submits its jobs through :meth:`_submit`.

    Signals (emitted on the GUI thread)
    -----------------------------------
    finished(int, object, float)
        Request ``id`` produced its result in the given seconds.
    failed(int, str)
        Request ``id`` raised; the message is readable.
    """

    finished = Signal(int, object, float)
    failed = Signal(int, str)

    def __init__(self, name: str, parent: QtCore.QObject | None = None,
                 **runner_options: Any) -> None:
        super().__init__(parent)
        self._runner = BackgroundRunner(name, parent=self, **runner_options)
        self._runner.finished.connect(self.finished)
        self._runner.failed.connect(self.failed)

    def _submit(self, job: Job) -> int:
        """Run ``job`` next (replacing a waiting one); its request id.

        Raises
        ------
        RuntimeError
            The runner is shut down.
        """
        return self._runner.submit(job)

    @property
    def busy(self) -> bool:
        """Whether a request is running or waiting."""
        return self._runner.busy

    @property
    def latest_request_id(self) -> int:
        """Id of the newest request (0 before the first)."""
        return self._runner.latest_id

    def is_thread_running(self) -> bool:
        """Whether the worker thread exists and runs."""
        return self._runner.is_thread_running()

    def shutdown(self, timeout_ms: int = 60_000) -> bool:
        """Drop a waiting request, stop the thread once the running one ends (cancelled, for a
        runner that cancels its running job).

        Returns whether the thread stopped within ``timeout_ms``. Safe to call twice.
        """
        return self._runner.shutdown(timeout_ms)


class SimulationRunner(_SessionRunner):
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

    def __init__(self, simulate_fn: Callable[[Session], Any] | None = None,
                 parent: QtCore.QObject | None = None) -> None:
        super().__init__("simulation", parent)
        self._simulate_fn = simulate_fn or _default_simulate
        self._runner.started.connect(self.started)

    def request(self, session: Session) -> int:
        """Ask for a simulation of (a copy of) ``session``; returns the request id.

        If one is running, this request replaces any earlier waiting one (the running one
        finishes).

        Raises
        ------
        RuntimeError
            The runner is shut down.
        """
        return self._submit(_simulation_job(self._simulate_fn, session.copy()))


# --------------------------------------------------------------------------- fit changes

def _default_fit_changes(session: Session, cancel: threading.Event) -> Any:
    # looked up at call time so a test's stand-in (core.studies.fit_changes.fit_changes) is used
    from core.studies import fit_changes as fit_module

    return fit_module.fit_changes(session, cancel=cancel)


def _fit_changes_job(fit_fn: Callable[[Session, threading.Event], Any], session: Session) -> Job:
    """The job asking what would make ``session``'s plan fit (Qt-free); a set ``cancel`` ends it
    as cancelled."""
    from core.studies.sweep.cancel import SweepCancelled

    def job(report: Callable[[Any], None], cancel: threading.Event) -> Any:
        try:
            with fastpath_kernel.kept_out():  # it times plans with the sweep's solver
                return fit_fn(session, cancel)
        except SweepCancelled:
            raise JobCancelled() from None
    return job


class FitChangesRunner(_SessionRunner):
    """Asks :func:`core.studies.fit_changes.fit_changes` on a worker thread; the latest request
    wins.

    A request made while a search runs cancels it (and replaces any earlier waiting one); the
    caller also tells a stale answer by its id. ``fit_fn(session, cancel)`` replaces
    ``fit_changes`` in tests (``cancel``: the job's ``threading.Event``).

    Signals (emitted on the GUI thread)
    -----------------------------------
    finished(int, object, float)
        Request ``id`` produced a :class:`core.studies.fit_changes.FitChanges` in the given
        seconds.
    failed(int, str)
        Request ``id`` raised; the message is readable (one exception line).
    """

    def __init__(self, fit_fn: Callable[[Session, threading.Event], Any] | None = None,
                 parent: QtCore.QObject | None = None) -> None:
        super().__init__("fit-changes", parent, cancel_running=True, describe_error=_error_text)
        self._fit_fn = fit_fn or _default_fit_changes

    def request(self, session: Session) -> int:
        """Ask what would make (a copy of) ``session``'s plan fit; returns the request id.

        Raises
        ------
        RuntimeError
            The runner is shut down.
        """
        return self._submit(_fit_changes_job(self._fit_fn, session.copy()))

    def cancel(self) -> None:
        """Drop a waiting request and stop a running search at its next plan (no signal)."""
        self._runner.cancel()


# --------------------------------------------------------------------------- sweeps

def _default_run_sweep(session: Session, space: Any, deadline_days: float | None,
                       progress: Callable[[int, int], None], cancel: threading.Event,
                       **options: Any) -> Any:
    # looked up at call time so a test's stand-in is used; options: workers, dask
    from core.studies import sweep as sweep_module

    # branch and bound, as the command line (options "prune": False simulates every plan);
    # every phase (enumeration, memory, bounds, simulation) reports through ``progress``
    options.setdefault("prune", True)
    result = sweep_module.run_sweep(
        session, space, deadline_days=deadline_days, progress=progress, cancel=cancel,
        phase=lambda name, done, total: progress(done, total, name), **options)
    # the window looks up the editor's plan among the results (a scan of the plan columns,
    # tens of milliseconds on a million plans): here, not on the GUI thread
    result.index_of(session.plan)
    # and what showing it reads of every plan: its saved form, the constant plan fields
    sweep_module.saved_sweep(result)
    result.constant_plan_fields()
    return result


def _error_text(exc: BaseException) -> str:
    from core.plan.fields import ConfigError

    if isinstance(exc, ConfigError):
        return "; ".join(str(e) for e in exc.errors)
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()


def _sweep_job(sweep_fn: Callable[..., Any], session: Session, space: Any,
               deadline_days: float | None, options: dict[str, Any]) -> Job:
    """The job sweeping ``space`` (Qt-free): progress ``(done, total)`` is reported at most
    every :data:`PROGRESS_INTERVAL_S` (and always the first and the last report)."""
    def job(report: Callable[[Any], None], cancel: threading.Event) -> Any:
        from core.studies.sweep import SweepCancelled

        last = [-math.inf]

        def progress(done: int, total: int, phase: str = "simulate") -> None:  # worker thread
            now = time.monotonic()
            if done == 0 or done >= total or now - last[0] >= PROGRESS_INTERVAL_S:
                last[0] = now
                report((int(done), int(total), phase))

        try:
            with fastpath_kernel.kept_out():  # compiled batches go to the worker processes
                if options:
                    return sweep_fn(session, space, deadline_days, progress, cancel, **options)
                return sweep_fn(session, space, deadline_days, progress, cancel)
        except SweepCancelled:
            raise JobCancelled() from None
    return job


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
    phase_progress(int, str, int, int)
        Run ``id`` is in phase ``name`` (:data:`core.studies.sweep.phase.PHASES`: enumerate,
        memory, bound, simulate) and finished ``done`` of its ``total`` steps; the phase
        "simulate" is also told as ``progress``.
    finished(int, object, float)
        Run ``id`` produced a :class:`core.studies.sweep.SweepResult` in the given seconds.
    failed(int, str)
        Run ``id`` raised (invalid settings, missing profile...); the message is readable.
    cancelled(int)
        Run ``id`` stopped because it was cancelled; it has no result.
    """

    started = Signal(int)
    progress = Signal(int, int, int)
    phase_progress = Signal(int, str, int, int)
    finished = Signal(int, object, float)
    failed = Signal(int, str)
    cancelled = Signal(int)

    def __init__(self, sweep_fn: Callable[..., Any] | None = None,
                 parent: QtCore.QObject | None = None) -> None:
        super().__init__(parent)
        self._sweep_fn = sweep_fn or _default_run_sweep
        self._runner = BackgroundRunner("sweep", cancel_running=True, cancel_wins=True,
                                        describe_error=_error_text, parent=self)
        self._runner.started.connect(self.started)
        self._runner.progress.connect(self._on_progress)
        self._runner.finished.connect(self.finished)
        self._runner.failed.connect(self.failed)
        self._runner.cancelled.connect(self._on_cancelled)

    def start(self, session: Session, space: Any, deadline_days: float | None = None,
              options: dict[str, Any] | None = None) -> int:
        """Sweep ``space`` for (a copy of) ``session``; returns the run id.

        ``options`` are passed on to ``run_sweep`` as keywords (``workers``, ``dask``:
        where the sweep runs); none by default. A running sweep is cancelled and this
        one runs when it has stopped.

        Raises
        ------
        RuntimeError
            The runner is shut down.
        """
        return self._runner.submit(_sweep_job(self._sweep_fn, session.copy(), copy.deepcopy(space),
                                              deadline_days, dict(options or {})))

    def cancel(self) -> None:
        """Drop a waiting sweep and ask the running one to stop (``cancelled`` follows)."""
        self._runner.cancel()

    @property
    def busy(self) -> bool:
        """Whether a sweep is running or waiting."""
        return self._runner.busy

    @property
    def running_id(self) -> int | None:
        """Id of the running sweep, or None."""
        return self._runner.running_id

    @property
    def latest_run_id(self) -> int:
        """Id of the newest run (0 before the first)."""
        return self._runner.latest_id

    def is_thread_running(self) -> bool:
        """Whether the worker thread exists and runs."""
        return self._runner.is_thread_running()

    def shutdown(self, timeout_ms: int = 60_000) -> bool:
        """Cancel everything, wait for the worker to stop, end the thread.

        Returns whether the thread stopped within ``timeout_ms``. Safe to call twice.
        """
        return self._runner.shutdown(timeout_ms)

    @Slot(int, object)
    def _on_progress(self, run_id: int, done_total: object) -> None:
        done, total, phase = done_total
        self.phase_progress.emit(run_id, phase, done, total)
        if phase == "simulate":
            self.progress.emit(run_id, done, total)

    @Slot(int, object)
    def _on_cancelled(self, run_id: int, result: object) -> None:
        self.cancelled.emit(run_id)


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


def _profile_job(profile_fn: Callable[..., Any], out: Any, device: str, shapes: Any,
                 threads: int | None) -> Job:
    """The job profiling ``device`` (Qt-free): one report per profiling step; a result whose
    ``cancelled`` is set (the store keeps the groups finished before) ends as cancelled."""
    def job(report: Callable[[Any], None], cancel: threading.Event) -> Any:
        try:
            result = profile_fn(out, device, shapes, threads, report, cancel)
        except KeyboardInterrupt:
            raise JobCancelled() from None
        if getattr(result, "cancelled", False):
            raise JobCancelled(result)
        return result
    return job


def _probe_job(status_fn: Callable[[], tuple[bool, str]]) -> Job:
    """The job asking whether torch is available (it imports torch: seconds, the first time)."""
    def job(report: Callable[[Any], None], cancel: threading.Event) -> tuple[bool, str]:
        try:
            ok, text = status_fn()
        except Exception as exc:  # noqa: BLE001 - report, do not fail
            ok, text = False, _error_text(exc)
        return bool(ok), str(text)
    return job


class ProfileRunner(QtCore.QObject):
    """Profiles the local device (:func:`core.profiling.run_profile`) on a worker thread.

    One run at a time. :meth:`cancel` sets the run's ``threading.Event``; the
    Qt-free profiler stops at its next measurement and returns a result whose
    store holds the shape groups finished before (``cancelled`` follows).
    :meth:`probe` asks :func:`core.profiling.torch_status` on a second worker
    thread, because with torch installed it imports torch, which takes seconds.

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

    def __init__(self, profile_fn: Callable[..., Any] | None = None,
                 status_fn: Callable[[], tuple[bool, str]] | None = None,
                 parent: QtCore.QObject | None = None) -> None:
        super().__init__(parent)
        self._profile_fn = profile_fn or _default_run_profile
        self._status_fn = status_fn or _default_torch_status
        self._runner = BackgroundRunner("profile", describe_error=_error_text, parent=self)
        for name in ("started", "progress", "finished", "cancelled", "failed"):
            getattr(self._runner, name).connect(getattr(self, name))
        self._prober = BackgroundRunner("profile-probe", stop_when_idle=True, parent=self)
        self._prober.finished.connect(self._on_probed)

    def probe(self) -> None:
        """Ask whether torch is available (:attr:`probed` answers).

        Raises
        ------
        RuntimeError
            The runner is shut down.
        """
        self._prober.submit(_probe_job(self._status_fn))

    def start(self, out: Any, device: str = "cpu", shapes: Any = None,
              threads: int | None = None) -> int:
        """Profile ``device`` for ``shapes`` (None: the default set) into store ``out``.

        Returns the run id.

        Raises
        ------
        RuntimeError
            A run is in progress, or the runner is shut down.
        """
        if self._runner.busy:
            raise RuntimeError("a profile run is in progress")
        return self._runner.submit(_profile_job(
            self._profile_fn, out, str(device),
            copy.deepcopy(shapes) if shapes is not None else None, threads))

    def cancel(self) -> None:
        """Ask the running profile to stop at its next measurement (``cancelled`` follows)."""
        self._runner.cancel()

    @property
    def busy(self) -> bool:
        """Whether a profile runs."""
        return self._runner.busy

    @property
    def cancel_requested(self) -> bool:
        """Whether Cancel was asked of the running profile (it has not stopped yet)."""
        return self._runner.cancel_requested

    @property
    def running_id(self) -> int | None:
        """Id of the running profile, or None."""
        return self._runner.running_id

    def is_thread_running(self) -> bool:
        """Whether a worker thread (profile or probe) exists and runs."""
        return self._runner.is_thread_running() or self._prober.is_thread_running()

    def shutdown(self, timeout_ms: int = 60_000) -> bool:
        """Cancel the running profile, wait for it to stop, end the threads.

        The store keeps the groups finished before. Returns whether the threads
        stopped within ``timeout_ms``. Safe to call twice.
        """
        probe_stopped = self._prober.shutdown(timeout_ms)
        return self._runner.shutdown(timeout_ms) and probe_stopped

    @Slot(int, object, float)
    def _on_probed(self, run_id: int, ok_text: object, seconds: float) -> None:
        self.probed.emit(*ok_text)
