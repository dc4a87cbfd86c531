"""Design-space explorer: every valid parallel plan, simulated in batch, with cost and Pareto front.

This package repeats the first case study of vTrain (Bang et al., MICRO 2024):
for one model, one global batch size and a GPU budget, enumerate every valid
plan (t, p, d, b, schedule, recomputation), predict each plan's iteration
time, and turn it into days, GPU-hours and dollars for a token budget. The
time-versus-cost Pareto front then shows which plans are worth considering.

Validity has one source of truth, :func:`core.plan.rules.validate`. Plans that do
not fit in GPU memory are kept and marked with the reason.

Speed
-----
The per-plan iteration time equals :func:`core.sim.simulate.simulate`'s (relative
difference below 1e-9; tests check it), but it is computed without building
per-op graphs:

* :func:`core.sim.stages.stage_times` gives each stage's forward and backward time
  of one micro-batch (the per-op chain merged, exact because the compute
  stream is one chain with one entry and one exit per micro-batch), transfer,
  data-parallel all-reduce and optimizer times. Op lookups and communication
  times are memoized across plans.
* Plans with the same pipeline structure (p, m, schedule) are solved together
  by :func:`core.sim.fastpath.pipeline_iteration_times`: stage end times are a max-plus
  recurrence, solved per stage with a running maximum over that stage's
  program (vectorized over the stage's 2m operations and over plans) and
  Gauss-Seidel sweeps across stages until nothing changes.

Layout
------
Each module imports only those above it in this list (no circle):

* :mod:`~core.studies.sweep.cancel` -- :class:`SweepCancelled` and the test of ``cancel``;
* :mod:`~core.studies.sweep.pace` -- the garbage collector paused, the interpreter yielded;
* :mod:`~core.studies.sweep.phase` -- each phase's progress and Cancel (:class:`PhaseTicker`);
* :mod:`~core.studies.sweep.variants` -- one size's variants built as plans and checked;
* :mod:`~core.studies.sweep.space` -- :class:`SweepSpace`, enumeration;
* :mod:`~core.studies.sweep.dimensions` -- the dimensions swept and held, and why;
* :mod:`~core.studies.sweep.result` -- :class:`SweepResult`, the Pareto front, best plans;
* :mod:`~core.studies.sweep.saved` -- a result saved with its session, read back, stale or not;
* :mod:`~core.studies.sweep.explain` -- why no plan, or a value given unused;
* :mod:`~core.studies.sweep.batch` -- batches of one pipeline structure and their solver;
* :mod:`~core.studies.sweep.bound` -- closed-form memory, work estimate, lower bounds, pruning;
* :mod:`~core.studies.sweep.parallel` -- the batches on a process pool or Dask;
* :mod:`~core.studies.sweep.run` -- :func:`run_sweep`, the driver.

This ``__init__`` exports the front end's names (below); the others live in their modules.

Front-end API (CLI ``vtrain sweep`` and the GUI's Explore tab)
---------------------------------------------------------------
Everything below is Qt-free and safe to call from a worker thread; it touches
no global state except read-only caches::

    import threading
    from core.studies.sweep import SweepSpace, run_sweep, SweepCancelled

    space = SweepSpace(max_gpus=3360)              # or num_gpus=3360 / (1024, 2048)
    cancel = threading.Event()                     # GUI: cancel.set() from the Cancel button

    def on_progress(done: int, total: int) -> None:  # called on the worker thread
        ...                                          # emit a queued signal; never touch widgets

    try:
        result = run_sweep(session, space, deadline_days=90.0,
                           progress=on_progress, cancel=cancel)
    except SweepCancelled:
        ...                                        # the sweep stopped; no result
    except ConfigError as exc:                     # invalid model/cost/space: exc.errors lists
        ...                                        # FieldError(field, message), fields "sweep.*"

* Scatter: ``result.training_days`` (x), ``result.cost_usd`` (y), one point per
  plan; grey where ``~result.feasible`` (no fit, or no figures); the front is
  ``result.pareto_indices()`` (feasible plans only, sorted by days).
* Table: ``result.rows()`` (list of dicts, keys :data:`COLUMNS`) or the numpy
  columns (attributes of :class:`SweepResult`, shape ``(num_plans,)`` each).
* Filters: ``result.select(num_gpus=..., fits_only=True, deadline_days=...)``
  returns a boolean mask; ``result.cheapest_within(deadline_days)`` an index.
* Load a point into the editor: ``result.session_for(i)`` (a new
  :class:`~core.plan.session.Session` with that plan and the sweep's model, cluster
  and cost); simulate it as usual to show its timeline.
* Export: ``result.write_csv(path)``; ``result.to_dict()`` is the CLI's JSON.
* Save the settings: ``space.to_dict()`` / ``SweepSpace.from_dict(d)`` (plain JSON); the
  result: ``saved_sweep(result)`` (the front, best plans, space and inputs) /
  ``restore_sweep(doc)``, and ``stale_reasons(doc, session)`` (the session fields changed).
* Progress of every phase (enumeration, memory, bounds, simulation):
  ``run_sweep(..., phase=lambda name, done, total: ...)``; ``cancel`` is checked in each.
"""

from core.studies.sweep.batch import solve_batch
from core.studies.sweep.bound import (LARGE_SWEEP_WORK, MAX_PIPELINE_STEPS, iteration_lower_bound_s,
                                      sweep_work, work_seconds)
from core.studies.sweep.cancel import SweepCancelled
from core.studies.sweep.explain import no_plan_errors, unused_values, value_errors
from core.studies.sweep.result import (BEST_BY_FIELDS, COLUMNS, PLAN_COLUMNS, SweepResult,
                                       pareto_front, plan_label, plans_note)
from core.studies.sweep.run import run_sweep
from core.studies.sweep.saved import restore_sweep, saved_sweep, stale_reasons
from core.studies.sweep.space import (DEFAULT_MICRO_BATCH_SIZES, SweepSpace, budget_text,
                                      enumerate_plans, one_stage_schedule)
from core.studies.sweep.dimensions import held_dimensions, merge_dimensions, sweep_dimensions

__all__ = ["SweepSpace", "SweepResult", "SweepCancelled", "COLUMNS", "PLAN_COLUMNS",
           "DEFAULT_MICRO_BATCH_SIZES", "BEST_BY_FIELDS", "MAX_PIPELINE_STEPS", "LARGE_SWEEP_WORK",
           "enumerate_plans", "sweep_dimensions", "held_dimensions", "merge_dimensions",
           "one_stage_schedule", "budget_text",
           "run_sweep", "solve_batch", "pareto_front", "plan_label", "plans_note",
           "no_plan_errors", "value_errors", "unused_values", "sweep_work", "work_seconds",
           "iteration_lower_bound_s", "saved_sweep", "restore_sweep", "stale_reasons"]
