"""A sweep's phases told to the caller: progress of each phase and its Cancel, checked often.

A sweep runs in phases (:data:`PHASES`): the enumeration of the plans
(:func:`core.studies.sweep.space.enumerate_plans`), their closed-form memory and lower
bounds (:mod:`core.studies.sweep.bound`) and the simulation of the survivors
(:mod:`core.studies.sweep.run`). Each loop holds a :class:`PhaseTicker` and calls
:meth:`PhaseTicker.tick` per step: it raises :class:`~core.studies.sweep.cancel.SweepCancelled`
as soon as ``cancel`` is set (each step is well under a millisecond to a few milliseconds, so a
sweep stops within 0.5 s of Cancel in every phase) and reports ``(phase, done, total)`` at most
every :data:`REPORT_EVERY_S`. Nothing about plans belongs here.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from core.studies.sweep.cancel import check_cancelled

__all__ = ["PHASES", "PhaseFn", "PhaseTicker", "REPORT_EVERY_S"]

#: The phases of a sweep, in order: ``"enumerate"`` (plans from the space; its ``total`` is the
#: (t, p, cp) combinations, times the micro-batch sizes tried when the space leaves them to
#: memory), ``"memory"`` (closed-form memory per plan), ``"bound"`` (a lower bound per plan that
#: fits) and ``"simulate"`` (plans simulated or pruned, the ``progress(done, total)`` of
#: :func:`core.studies.sweep.run_sweep`).
PHASES = ("enumerate", "memory", "bound", "simulate")

#: ``(phase, done, total) -> None``: a phase's progress (``phase`` one of :data:`PHASES`).
PhaseFn = Callable[[str, int, int], None]

#: A ticker reports a phase's progress at most this often, seconds (and always its first and
#: last step).
REPORT_EVERY_S = 0.05


class PhaseTicker:
    """Progress and Cancel of one phase of a sweep.

    Parameters
    ----------
    phase : str
        One of :data:`PHASES`.
    total : int
        Steps of the phase (>= 0).
    cancel : threading.Event, callable returning bool, or None
        Checked at every :meth:`tick` (:func:`core.studies.sweep.cancel.check_cancelled`).
    report : callable ``(phase, done, total) -> None``, optional
        Told ``(phase, 0, total)`` on construction, then at most every :data:`REPORT_EVERY_S`,
        and ``(phase, total, total)`` by :meth:`finish`. Must not raise.
    """

    def __init__(self, phase: str, total: int, cancel: Any = None,
                 report: PhaseFn | None = None) -> None:
        self.phase, self.total, self.cancel, self.report = phase, int(total), cancel, report
        self._last = time.perf_counter()
        if report is not None:
            report(phase, 0, self.total)

    def tick(self, done: int) -> None:
        """Step ``done`` (from 0) of the phase.

        Raises
        ------
        SweepCancelled
            ``cancel`` is set.
        """
        check_cancelled(self.cancel)
        if self.report is not None:
            now = time.perf_counter()
            if now - self._last >= REPORT_EVERY_S:
                self._last = now
                self.report(self.phase, int(done), self.total)

    def finish(self, done: int | None = None) -> None:
        """The phase ended after ``done`` steps (default: all)."""
        if self.report is not None:
            self.report(self.phase, self.total if done is None else int(done), self.total)
