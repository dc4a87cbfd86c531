"""Running a sweep: :func:`run_sweep`, from the space to the result, with progress and Cancel.

:func:`run_sweep` enumerates the plans (:mod:`core.studies.sweep.space`), rules out those
that do not fit in memory (:mod:`core.studies.sweep.bound`), simulates the others in batches
(:mod:`core.studies.sweep.batch`) in this thread or on processes or Dask
(:mod:`core.studies.sweep.parallel`), under branch and bound unless told not to, reports
progress, checks ``cancel`` (:mod:`core.studies.sweep.cancel`) and costs the plans into a
:class:`core.studies.sweep.result.SweepResult`. The driver belongs here; the pieces it
drives do not.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, Callable

import numpy as np

from core.plan.fields import ConfigError, FieldError
from core.plan.layout import largest_model_chunk
from core.plan.parallel import PLAN_FIELDS, ParallelPlan
from core.plan.session import Session
from core.plan.rules import validate
from core.sim import fastpath_kernel
from core.model.moe import flex_buffer_memory_note, num_moe_layers
from core.sim.costing import costing, mfu_peak_flops
from core.sim.simulate import profile_gpu_note, session_profile, small_nvlink_domain_note
from core.sim.report import MEMORY_VERDICTS, memory_verdict_column
from core.store.calibration_range import unchecked_note
from core.store.interval import DEFAULT_COVERAGE
from core.studies.sweep import parallel
from core.studies.sweep.batch import group_batches, solve_batch
from core.studies.sweep.bound import (fill_lower_bounds, branch_and_bound, mark_too_large,
                                      memory_verdicts, plan_microbatches, value_codes,
                                      work_notes)
from core.studies.sweep.cancel import check_cancelled
from core.studies.sweep.pace import gc_paused
from core.studies.sweep.phase import PhaseFn
from core.studies.sweep.plan_rows import (PlanRows, concat_plan_columns, is_broadcast,
                                          plan_column_arrays, plan_keys, plans_at,
                                          row_of_plan)
from core.studies.sweep.result import (SweepResult, best_row, least_memory_of_ties, pareto_front,
                                       plan_figures, throughput_departures, with_plans)
from core.studies.sweep.space import (SweepSpace, as_list, check_enumerable, divisors,
                                      enumerate_plans, in_budget, index_of_plan,
                                      micro_batch_sizes_of)
from core.studies.sweep.variants import plan_maker, sweep_verdicts
from core.studies.sweep.dimensions import sweep_dimensions

__all__ = ["run_sweep", "check_sweep_work", "check_workers", "ProgressFn",
           "COMPILED_MIN_SWEEP_ELEMENTS"]

ProgressFn = Callable[[int, int], None]
#: Sweeps whose batch solver has at least this many (stage, item, plan) elements in all use
#: its compiled pass (:mod:`core.sim.fastpath_kernel`, when Numba is installed): about 45 ns per
#: element saved against Numba's import and cache load, about 0.5 s per process.
COMPILED_MIN_SWEEP_ELEMENTS = 20_000_000
#: Sweeps of fewer plans than this run in the calling process whatever ``workers`` says.
_PARALLEL_MIN_PLANS = 2000
#: Candidates (t x p x d x b x schedule x recompute, before validation) from which a sweep on
#: several processes starts its worker processes before it enumerates the plans, so that they
#: import the compiled batch solver meanwhile (the MT-NLG and GPT-3 examples: about 47,000;
#: a one-node sweep: about 14,000, about 1,000 plans).
_EARLY_POOL_CANDIDATES = 30_000


def _early_pool(session: Session, space: SweepSpace, workers: int, dask: str | None):
    """A process pool of ``workers - 1`` processes started now, warming up with the compiled
    batch solver (:func:`core.studies.sweep.parallel.start_pool`), when the sweep will run on several
    local processes and is large (its candidate count, a cheap upper bound on its plans, is
    at least :data:`_EARLY_POOL_CANDIDATES`); else None."""
    if dask is not None or workers < 2 or space.errors():
        return None
    try:
        m, B = session.model, session.plan.global_batch_size
        ts = (space.tensor_parallel if space.tensor_parallel is not None
              else divisors(session.cluster.gpus_per_node))
        ps = (space.pipeline_parallel if space.pipeline_parallel is not None
              else divisors(m.num_layers))
        candidates = (len(as_list(ts)) * len(as_list(ps)) * len(divisors(B))
                      * len(as_list(space.micro_batch_sizes)) * len(as_list(space.schedules))
                      * len(as_list(space.recompute)))
    except (TypeError, ValueError, AttributeError):  # an invalid session: enumeration says why
        return None
    if candidates < _EARLY_POOL_CANDIDATES:
        return None
    if fastpath_kernel.loaded():  # this process has it: it takes the heavy batches itself
        return None
    return parallel.start_pool(workers - 1, compiled=True)


def check_workers(workers: Any, local: bool = True, field: str = "sweep.workers") -> int:
    """``workers`` (processes) as an int; :class:`ConfigError` naming ``field`` unless a
    positive integer, and, for processes started on this machine (``local``: a process pool or
    a local Dask cluster), at most its cores (:func:`core.studies.sweep.parallel.default_workers`):
    each worker is one process solving on one core, so more cannot make the sweep faster, and
    a forked pool starts all of them at once (100,000 would be 100,000 processes).

    ``field`` is what the value came from: ``sweep.workers`` (a session's sweep settings, the
    default, its message ``workers=N``) or a command-line option such as ``--workers`` (its
    message the bare value), so that a refusal names what the user typed."""
    what = "workers=" if field == "sweep.workers" else ""
    if isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or workers < 1:
        raise ConfigError([FieldError(field, f"{what}{workers!r} must be a positive "
                                      "integer")])
    cores = parallel.default_workers()
    if local and workers > cores:
        raise ConfigError([FieldError(field, f"{what}{int(workers):,} is more than "
                                      f"this machine's {cores} cores (one process per core; "
                                      "more cannot make the sweep faster)")])
    return int(workers)


def _check_arguments(deadline_days: Any, workers: Any, max_work: Any, dask: Any) -> int:
    """Check :func:`run_sweep`'s arguments other than the session and the space; return
    ``workers`` as an int.

    Raises
    ------
    ConfigError
        ``deadline_days`` not a positive finite number (field ``sweep.deadline_days``),
        ``workers`` or ``max_work`` not a positive integer (``sweep.workers``,
        ``sweep.max_work``), ``workers`` above this machine's cores for processes started
        here (a pool or ``dask="local"``), ``dask`` not a non-blank string (``sweep.dask``).
    """
    if deadline_days is not None and not (isinstance(deadline_days, (int, float))
                                          and math.isfinite(deadline_days) and deadline_days > 0):
        raise ConfigError([FieldError("sweep.deadline_days", f"deadline_days={deadline_days!r} "
                                      "must be a positive number")])
    workers = check_workers(workers, local=dask is None or dask == "local")
    if max_work is not None and (isinstance(max_work, bool) or not isinstance(
            max_work, (int, np.integer)) or max_work < 1):
        raise ConfigError([FieldError("sweep.max_work", f"max_work={max_work!r} must be a "
                                      "positive integer (pipeline steps)")])
    if dask is not None and not (isinstance(dask, str) and dask.strip()):
        raise ConfigError([FieldError("sweep.dask", f"dask={dask!r} must be a scheduler address "
                                      "(tcp://host:8786) or 'local'")])
    return workers


def run_sweep(session: Session, space: SweepSpace, *, store=None, deadline_days: float | None = None,
              progress: ProgressFn | None = None, cancel: Any = None, workers: int = 1,
              dask: str | None = None, coverage: float = DEFAULT_COVERAGE, prune: bool = True,
              max_work: int | None = None, notice: Callable[[str], None] | None = None,
              phase: PhaseFn | None = None, best_by: bool | str = True,
              no_tight: bool = False) -> SweepResult:
    """Enumerate, simulate and cost every valid plan of ``space``.

    Plans that do not fit in memory (closed form,
    :func:`core.model.memory.stage_memory_arrays`) are never simulated. With ``prune``
    (default), the plans that fit are simulated in rounds by increasing lower bound
    (:func:`core.studies.sweep.bound.iteration_lower_bound_s`) and a plan whose bound shows
    that it can change neither the (days, cost) front, nor the fastest, cheapest or deadline
    plan, nor the best plan of any value of :data:`core.studies.sweep.result.BEST_BY_FIELDS`
    or of any of the space's exact GPU counts is not simulated (branch and bound; exact:
    these answers equal an exhaustive sweep's, the tests check it); its row has no figures,
    ``pruned`` True and its bound in ``lower_bound_s``.

    Parameters
    ----------
    session : Session
        Model, cluster, cost inputs (token budget, price per GPU-hour), global
        batch size and precision; its plan's t, p, d, b, schedule and recompute
        are not used.
    space : SweepSpace
        Budget and candidate sizes.
    store : ProfileStore, optional
        Default: the store :func:`core.sim.simulate.profile_path` names for the session.
    deadline_days : float, optional
        Also find the cheapest plan within this many days (> 0).
    progress : callable ``(done, total) -> None``, optional
        Called with ``(0, total)`` first, then after each batch of plans with the
        number of plans finished (``total`` = number of valid plans), from the
        calling thread. Must not raise.
    cancel : threading.Event or callable returning bool, optional
        Checked between batches (each a few ms to ~0.1 s of work; with ``workers`` or
        ``dask``, every 0.1 s while chunks run: the chunks not started are dropped);
        when set, :class:`core.studies.sweep.cancel.SweepCancelled` is raised.
    workers : int
        Processes to solve the batches on (1: this process; default; at most this machine's
        cores, unless ``dask`` is a remote scheduler). The batches are
        grouped in chunks, solved by this thread and a pool of ``workers - 1`` processes
        (:mod:`core.studies.sweep.parallel`; each worker opens the profile store itself) and put
        back in order: the result is the serial one, bit for bit. Sweeps of fewer than ``_PARALLEL_MIN_PLANS`` plans
        run here (starting processes would cost more).
    dask : str, optional
        Send the chunks to a Dask distributed scheduler at this address
        (``tcp://host:8786``), or ``"local"`` for a ``LocalCluster`` of ``workers``
        processes; the profile store travels with the chunks. Needs ``dask[distributed]``
        (the ``dask`` extra). Same result as serial.
    coverage : float
        Nominal coverage of the error bands, in (0, 1) (:mod:`core.store.interval`).
    prune : bool
        Branch and bound (default); False simulates every plan, those that do not fit in
        memory too (the oracle, and figures for every point of a scatter).
    max_work : int, optional
        Refuse (``ConfigError``, field ``sweep.max_work``) when the plans that fit need more
        than this many pipeline steps (:func:`core.studies.sweep.bound.sweep_work`); default
        None, no limit.
    notice : callable ``(str) -> None``, optional
        Told, before the simulation starts, when the sweep is large (more than
        :data:`core.studies.sweep.bound.LARGE_SWEEP_WORK` steps), with a time estimate (also
        in the result's warnings).
    phase : callable ``(phase, done, total) -> None``, optional
        Told the progress of every phase (:data:`core.studies.sweep.phase.PHASES`: the
        enumeration, the closed-form memory, the lower bounds, the simulation), from the
        calling thread, at most every 0.05 s per phase and at each phase's start and end.
        ``cancel`` is checked as often in every phase: a sweep stops within 0.5 s of it.
        Must not raise.
    best_by : bool
        Keep the best plan of each value exact under pruning (default). False: the branch and
        bound keeps only the front and the fastest, cheapest and deadline plans exact, and
        drops a plan once a simulated plan beats its bound, whatever its values (a study that
        needs the fastest plan alone: the compute-optimal study, about 2.5x faster on its
        example); the result's :meth:`~core.studies.sweep.result.SweepResult.best_by` is then
        empty. ``"num_gpus"``: as False, but the best plan of each of the space's exact GPU
        counts is kept exact too (the scheduler study's throughput table, which reads only
        those: about 2x faster on its trace); ``best_by()`` is empty then as well.
    no_tight : bool
        Leave out the plans whose memory verdict is "tight" (:func:`core.sim.report.memory_verdict`:
        inside ``cluster.memory_reserve_fraction`` of the GPU's memory, or over it only
        with the allocator's cache): they are never simulated, so every answer (front,
        fastest, cheapest, deadline, best by value) is among plans that fit outside the
        margin, exactly (the branch and bound runs on those alone); their rows keep their
        verdict, no figures and the reason (``vtrain sweep --no-tight``). Default False:
        tight plans count as fitting.

    Returns
    -------
    SweepResult

    Raises
    ------
    ConfigError
        Invalid space, model, cluster or cost inputs, or ``deadline_days <= 0``.
    ProfileStoreError
        The profile store cannot be opened.
    KeyError
        The profile lacks data a plan needs (dtype peak, collectives).
    SweepCancelled
        ``cancel`` was set.
    ConfigError
        ``workers`` is not a positive integer, or ``dask`` names no reachable scheduler
        or dask is not installed (field ``sweep.dask``).
    """
    t0 = time.perf_counter()
    workers = _check_arguments(deadline_days, workers, max_work, dask)
    with gc_paused():  # before the pool forks: its processes start with it paused too
        early = _early_pool(session, space, workers, dask)
        ok = False
        try:
            result = _run_sweep(session, space, store, deadline_days, progress, cancel, workers,
                                dask, coverage, t0, early, prune, max_work, notice, phase,
                                best_by, no_tight)
            ok = True
            return result
        finally:
            if early is not None:  # cancelled or failed: its processes are ended too
                parallel.stop_pool(early, stopped=not ok)


def check_sweep_work(session: Session, space: SweepSpace, *, max_work: int | None = None,
                     prune: bool = True, cancel: Any = None,
                     phase: PhaseFn | None = None, no_tight: bool = False) -> list[str]:
    """What :func:`run_sweep` says of the size of the sweep of ``space`` before it simulates,
    without simulating: the plans and their closed-form memory (its first phases, the same
    plans), then :func:`core.studies.sweep.bound.work_notes` of those that fit and can be
    simulated: its "large sweep" note with the time estimate (empty when not large; ``prune``
    as :func:`run_sweep`'s, which says "before pruning"; ``no_tight`` as its too: the tight
    plans, known from the closed-form memory, are not counted, so the estimate is the one
    ``run_sweep(..., no_tight=True)`` gives). Nothing
    is kept: the plans are dropped on return (a caller checking several sweeps before running
    any holds one sweep's plans at a time).

    Raises
    ------
    ConfigError
        As :func:`run_sweep` (an invalid space or session), and ``sweep.max_work`` when the
        plans that fit need more than ``max_work`` pipeline steps.
    SweepCancelled
        ``cancel`` was set.
    """
    session = session.copy()
    opened: list = [None]

    def get_store():
        if opened[0] is None:
            opened[0] = session_profile(session)
        return opened[0]

    plans, _, (max_mem, mem_fits, reason), _, columns = _plans(session, space, get_store,
                                                               cancel, phase)
    steps, too_large = mark_too_large(plans, mem_fits, reason, session.model, columns)
    left_out = (_leave_out_tight(max_mem, mem_fits, reason, float(get_store().memory_bytes),
                                 float(session.cluster.memory_reserve_fraction))
                if no_tight else np.zeros(len(plans), bool))
    return work_notes(plans, np.flatnonzero(mem_fits & ~too_large & ~left_out),
                      session.model.num_layers, prune, max_work, steps)


class _Runner:
    """A sweep's simulation: the iteration times filled batch by batch (in this thread, on a
    process pool or on Dask, :meth:`solve`), the warnings of the plans that fit, the progress
    told, and the figures of the plans alone (:meth:`prepare`, computed once, while a pool
    starts on its first chunks)."""

    def __init__(self, plans, session: Session, store, *, progress, cancel, workers: int,
                 dask: str | None, compiled: bool | None, early, num_gpus: np.ndarray,
                 coverage: float, columns: dict[str, np.ndarray] | None = None,
                 fits: np.ndarray | None = None) -> None:
        self.plans, self.store = plans, store
        self.model, self.cluster, self.cost = session.model, session.cluster, session.cost
        self.progress, self.cancel, self.workers, self.dask = progress, cancel, workers, dask
        self.compiled, self.early = compiled, early
        self.num_gpus, self.coverage, self.columns = num_gpus, coverage, columns
        self.fits = fits  # the plans' memory verdicts (bool (n,)): solve_batch need not repeat them
        self.n = len(plans)
        self.iteration = np.full(self.n, math.nan)
        self.warned: dict[str, list[int]] = {}  # warning -> the plans (that fit) it concerns
        self.done_n = 0
        self.lookup_cache: dict = {}
        self.prepared: tuple | None = None

    def take(self, idx: list[int], out: tuple) -> None:
        """Put a batch's figures (:func:`solve_batch`'s ``out``) at its rows ``idx``."""
        it, _, _, warn = out
        self.iteration[idx] = it
        for w, local in warn.items():  # batch positions -> plan rows
            self.warned.setdefault(w, []).extend(idx[j] for j in local)
        self.done_n += len(idx)
        if self.progress is not None:
            self.progress(self.done_n, self.n)

    def skip(self, count: int) -> None:
        """``count`` plans dropped by branch and bound count as done."""
        self.done_n += count
        if self.progress is not None and count:
            self.progress(self.done_n, self.n)

    def prepare(self) -> None:
        """Compute the figures of the plans alone (:func:`plan_figures`), once."""
        if self.prepared is None:
            self.prepared = plan_figures(self.plans, self.model, self.store, self.cluster,
                                         self.num_gpus, self.coverage, self.cancel, self.columns)

    def _solve_here(self, jobs: list, how: bool | None) -> list[tuple]:
        return [solve_batch(self.model, self.cluster, self.cost, key, pls, self.store,
                            self.lookup_cache, how) for key, pls in jobs]

    def _take_chunk(self, chunk: list, outs: list) -> None:
        for (_, idx), out in zip(chunk, outs):
            self.take(idx, out)

    def solve(self, batches: list) -> None:
        """Solve ``batches`` (:func:`group_batches`) and take their figures: on Dask, on this
        thread and a pool of ``workers - 1`` processes (large sweeps), or here one by one.

        Raises
        ------
        SweepCancelled
            ``cancel`` was set.
        """
        if not batches:
            return
        plans, store, model, cluster, cost = (self.plans, self.store, self.model, self.cluster,
                                              self.cost)
        n_rows = sum(len(idx) for _, idx in batches)
        if self.dask is not None or (self.workers > 1 and len(batches) > 1
                                     and n_rows >= _PARALLEL_MIN_PLANS):
            if self.dask is not None:
                parallel.run_on_dask(batches, plans, store, model, cluster, cost,
                                     workers=self.workers, address=self.dask, cancel=self.cancel,
                                     on_result=self._take_chunk, compiled=self.compiled,
                                     after_submit=self.prepare)
            else:  # this thread solves chunks too: a pool of workers - 1 processes
                parallel.run_on_pool(
                    batches, plans, store, model, cluster, cost, workers=self.workers,
                    cancel=self.cancel, on_result=self._take_chunk, compiled=self.compiled,
                    local=self._solve_here, pool=self.early if self.compiled else None,
                    after_submit=self.prepare)
            return
        for key, idx in batches:
            check_cancelled(self.cancel)
            self.take(idx, solve_batch(model, cluster, cost, key, list(plans_at(plans, idx)), store,
                                       self.lookup_cache, self.compiled,
                                       None if self.fits is None else self.fits[idx].tolist()))


def _without_row(columns: dict[str, np.ndarray], row: int) -> dict[str, np.ndarray]:
    """The plan ``columns`` (:func:`plan_column_arrays`) without row ``row``: a broadcast
    column (one value) stays one, broadcast to one row fewer (no bytes per plan); the others
    are copied without it."""
    return {k: (np.broadcast_to(v[:1], (v.shape[0] - 1,)) if is_broadcast(v)
                else np.delete(v, row)) for k, v in columns.items()}


def _plans_up_to_memory(session: Session, space: SweepSpace, store, cancel: Any,
                        phase: PhaseFn | None, memo: dict) -> tuple[list, tuple, str]:
    """The plans of a space without micro-batch sizes (``micro_batch_sizes=None``): every b
    that divides the global batch B (:func:`micro_batch_sizes_of`: Megatron takes any b with
    B % (d*b) == 0, not only powers of two), in increasing order, while memory allows: once
    no plan of a b fits in closed-form memory, no multiple of that b is tried (a b without
    valid plans is passed over; when no plan of any b fits, those of the smallest b with
    plans are kept, to say so). Exact: a plan of b' = k*b has the same plan at b (same d: B % (d*b) == 0 as
    B % (d*b') == 0; k times the micro-batches, which no schedule rule refuses) whose
    activation memory is no larger (b times the micro-batches in flight, at most
    min(p, m) of them, does not grow as b shrinks), so when none of b's fits, none of b''s
    does. Returns the plans (a :class:`PlanRows`: each b's plans made columns once their
    memory is known, so that one b's plan objects exist at a time), their
    :func:`memory_verdicts` (computed once, here, with ``memo``, its memo of shared parts) and
    where the sizes stopped, in words."""
    sizes = micro_batch_sizes_of(session.plan.global_batch_size)
    parts: list = []  # each b's plans as columns: its plans are not kept
    mems: list = []
    stop = f"b = {sizes[-1]}, the global batch" if sizes else "no b"
    full: list[int] = []  # the b none of whose plans fits: their multiples are not tried
    unfit = None  # the plans and memory of the first of them
    verdicts = sweep_verdicts(session)  # one for every b: what one b's plans teach it, kept
    for k, b in enumerate(sizes):
        if any(b % f == 0 for f in full):
            continue
        part_phase = None if phase is None else (
            lambda name, done, total, k=k: phase(name, k * total + done, len(sizes) * total))
        part = enumerate_plans(session, dataclasses.replace(space, micro_batch_sizes=(b,)),
                               cancel=cancel, phase=part_phase, verdicts=verdicts)
        if not part:
            continue
        mem = memory_verdicts(part, session.model, store, cancel=cancel, phase=phase, memo=memo)
        if not mem[1].any():
            if not full:
                stop = (f"stopped at b = {b}: its smallest-memory plan needs "
                        f"{mem[0].min() / 2**30:,.1f} GiB per GPU, more than fits (and "
                        "its multiples)")
            full.append(b)
            if unfit is None:
                unfit = part, mem
            continue
        parts.append(plan_column_arrays(part, cancel))
        del part
        mems.append(mem)
    if not parts and unfit is not None:  # none fits: the smallest b's plans say so
        parts, mems = [plan_column_arrays(unfit[0], cancel)], [unfit[1]]
    unfit = None
    if phase is not None:
        phase("enumerate", 1, 1)
    merged = (np.concatenate([m[0] for m in mems]) if mems else np.zeros(0),
              np.concatenate([m[1] for m in mems]) if mems else np.zeros(0, bool),
              [w for m in mems for w in m[2]])
    columns = concat_plan_columns(parts) if parts else plan_column_arrays([])
    return PlanRows(columns, plan_maker(session.plan)), merged, stop


def _plans(session: Session, space: SweepSpace, get_store: Callable[[], Any],
           cancel: Any = None, phase: PhaseFn | None = None
           ) -> tuple[list, list[dict[str, Any]], tuple, int | None, dict[str, np.ndarray]]:
    """The sweep's plans (:func:`enumerate_plans`, as a :class:`PlanRows` of their columns:
    the plan objects are dropped once their memory and columns are known),
    :func:`sweep_dimensions`, the plans'
    closed-form memory (:func:`memory_verdicts`: bytes, fits, reasons), the row of the
    session's own plan among them (None when not among them) and the plans' columns
    (:func:`plan_column_arrays`, read once for the dimensions and the rest). The session's own plan
    is always simulated: added when the space's values leave it out (a setting the default
    holds, such as sequence parallelism off) but it is valid and in the budget. Without
    micro-batch sizes in the space, b goes up to what memory allows
    (:func:`_plans_up_to_memory`) and the dimension ``micro_batch_size`` says where it
    stopped. ``get_store()`` is the profile store (opened after a space with its micro-batch
    sizes is enumerated: its errors first)."""
    memo: dict = {}  # memory_verdicts' shared parts: the plans' and their partial recomputations'
    make = plan_maker(session.plan)
    listed: list | None = None  # the plans as objects, until their columns are made
    if space.micro_batch_sizes is None:
        check_enumerable(session, space)
        rows, mem, stop = _plans_up_to_memory(session, space, get_store(), cancel, phase,
                                              memo)
        columns = rows.columns
        n_enumerated = len(rows)  # what the sweep chose: these, not the session's own plan
        own = row_of_plan(columns, session.plan) if n_enumerated else None  # added below
    else:
        listed = enumerate_plans(session, space, cancel=cancel, phase=phase)
        mem = None
        n_enumerated = len(listed)
        own = index_of_plan(listed, session.plan) if listed else None
    if (n_enumerated and own is None
            and space.excludes(session.plan) is None
            and in_budget(space, session.plan) and not validate(session)):
        own_plan = dataclasses.replace(session.plan)
        own = n_enumerated
        if listed is not None:
            listed.append(own_plan)
        else:
            own_mem = memory_verdicts([own_plan], session.model, get_store())
            mem = (np.concatenate([mem[0], own_mem[0]]), np.concatenate([mem[1], own_mem[1]]),
                   mem[2] + own_mem[2])
            columns = concat_plan_columns([columns, plan_column_arrays([own_plan])])
    if listed is not None:  # the plans' memory, then their columns: the plans are not kept
        mem = memory_verdicts(listed, session.model, get_store(), cancel=cancel, phase=phase,
                              memo=memo)
        columns = plan_column_arrays(listed, cancel)
        listed = None
    plans = PlanRows(columns, make)
    if (not space.hold_session_values and session.plan.recompute_num_layers is None
            and space.recompute_num_layers is None  # counts asked: those alone
            and "full" in as_list(space.recompute)):
        # not of the session's own plan where it was added: its fields are the session's, not
        # the space's (its cross-entropy, say), and the sweep's plans are the space's
        more_plans, more_mem = _partial_recompute_plans(
            plans, mem, session, get_store(), cancel, memo,
            skip=own if own == n_enumerated else None)
        if more_plans:  # after the enumerated plans (and the session's own)
            columns = concat_plan_columns([columns, plan_column_arrays(more_plans, cancel)])
            del more_plans
            plans = PlanRows(columns, make)
            mem = (np.concatenate([mem[0], more_mem[0]]), np.concatenate([mem[1], more_mem[1]]),
                   mem[2] + more_mem[2])
    if own == n_enumerated:  # the session's own plan, added: not among the sweep's choices
        dimensions = sweep_dimensions(session, space, plans, _without_row(columns, own))
    else:
        dimensions = sweep_dimensions(session, space, plans, columns)
    if space.micro_batch_sizes is None:
        for d in dimensions:
            if d["field"] == "micro_batch_size":
                d["why"] = (("the only valid value; " if len(d["values"]) == 1 else "")
                            + "default: every b that divides the global batch, while the "
                            f"closed-form memory of the smallest-memory plan of that b fits; {stop}")
                d["stopped"] = stop  # where the sizes stopped, in words
    return plans, dimensions, mem, own, columns


def _partial_recompute_plans(plans: PlanRows, mem: tuple, session: Session, store,
                             cancel: Any = None, memo: dict | None = None,
                             skip: int | None = None) -> tuple[list, tuple]:
    """For each plan of ``plans`` (read from its columns) that recomputes every layer (``recompute="full"``,
    ``recompute_num_layers`` None) and fits (``mem``: :func:`memory_verdicts`' bytes, fits,
    reasons), the same plan recomputing the fewest layers per model chunk that still fit
    (Megatron-LM's ``--recompute-method block --recompute-num-layers N``), when fewer than
    all: its plans and their memory verdicts. "Fit" here is the whole need, the caching
    allocator's reserve included, within the capacity (stricter than the verdict's, which
    leaves the reserve out: :func:`core.sim.simulate.memory_verdict`), so no partial
    recomputation the sweep builds needs PyTorch to free its cache. Exact for the sweep's
    answers: memory falls and the iteration time grows with N (each recomputed layer repeats its forward), so
    that N is the fastest of the plan's partial recomputations that fit. The N are found
    by bisection over all plans at once, :func:`memory_verdicts` of one batch per round
    (at most log2 of the largest chunk's layers rounds), with ``memo`` (that of ``mem``'s
    plans: a partial recomputation shares all but its recomputed layers with its plan).
    ``skip``: a row left out (the session's own plan, added to the space's: not varied)."""
    L = session.model.num_layers
    fits = mem[1]
    make = plan_maker(session.plan)

    def with_layers(key: tuple, n: int) -> ParallelPlan:
        """The plan of :func:`plan_key` ``key`` with ``recompute_num_layers=n``
        (``dataclasses.replace``, without its ``__init__``)."""
        return make(dict(zip(PLAN_FIELDS, key), recompute_num_layers=n))

    # the plans recomputing every layer that fit, read from the columns (no plan built)
    layers = plans.columns["recompute_num_layers"]
    unset = (np.array([v is None for v in layers.tolist()], bool) if layers.dtype == object
             else np.zeros(len(plans), bool))
    full = (np.asarray(plans.columns["recompute"] == "full", bool) & unset
            & np.asarray(fits, bool))
    if skip is not None:
        full[skip] = False
    rows, hi, row_keys = [], [], []
    for i, key in zip(np.flatnonzero(full).tolist(),
                      plan_keys(plans, np.flatnonzero(full).tolist())):
        most = largest_model_chunk(L, make(dict(zip(PLAN_FIELDS, key))))
        if most is not None and most > 1:
            rows.append(i)
            hi.append(most)  # every layer: fits
            row_keys.append(key)
    at = PLAN_FIELDS.index("recompute_num_layers")
    if not rows:
        return [], (np.zeros(0), np.zeros(0, bool), [])
    lo = np.zeros(len(rows), np.int64)        # N known not to fit (0: none tried)
    hi = np.array(hi, np.int64)               # N known to fit
    most = hi.copy()                          # every layer of the largest chunk
    while True:
        check_cancelled(cancel)
        open_ = np.flatnonzero(hi - lo > 1)
        if not open_.size:
            break
        mid = (lo[open_] + hi[open_]) // 2
        # the trial plans as their keys (those of with_layers(key, n)): memory_verdicts
        # builds a plan per key it has not seen alone
        trial = [key[:at] + (n,) + key[at + 1:] for key, n in
                 zip([row_keys[k] for k in open_.tolist()], mid.tolist())]
        # the whole need, the allocator's cache included, within the capacity: the sweep never
        # builds a plan that runs only once PyTorch frees its cache (it may, each time it must
        # retry a cudaMalloc, at a synchronization's cost: memory_stats' num_alloc_retries)
        need = memory_verdicts(None, session.model, store, memo=memo, keys=trial,
                               make=make)[0]
        ok = need <= float(store.memory_bytes)
        hi[open_[ok]] = mid[ok]
        lo[open_[~ok]] = mid[~ok]
    keep = np.flatnonzero(hi < most)
    more = [with_layers(row_keys[k], n) for k, n in zip(keep.tolist(), hi[keep].tolist())]
    if not more:
        return [], (np.zeros(0), np.zeros(0, bool), [])
    return more, memory_verdicts(more, session.model, store, memo=memo)


def _run_sweep(session, space, store, deadline_days, progress, cancel, workers, dask, coverage,
               t0, early, prune=True, max_work=None, notice=None, phase=None,
               best_by=True, no_tight=False) -> SweepResult:
    """:func:`run_sweep` after its checks (``early``: a started process pool, or None)."""
    session = session.copy()  # the result keeps the inputs it was computed from
    opened = [store]

    def get_store():
        if opened[0] is None:
            opened[0] = session_profile(session)
        return opened[0]

    # 1. memory in closed form: plans that do not fit are never simulated
    plans, dimensions, (max_mem, mem_fits, reason), own, columns = _plans(
        session, space, get_store, cancel, phase)
    store = get_store()
    if phase is not None:  # the simulation's progress is the phase "simulate" too
        progress = _with_phase(progress, phase)
    n = len(plans)
    model = session.model
    num_mb = plan_microbatches(columns)
    num_gpus = np.prod([np.asarray(columns[f], np.int64) for f in (  # ParallelPlan.num_gpus
        "tensor_parallel", "pipeline_parallel", "context_parallel", "data_parallel")], axis=0)
    steps, too_large = mark_too_large(plans, mem_fits, reason, model, columns)
    left_out = (_leave_out_tight(max_mem, mem_fits, reason, float(store.memory_bytes),
                                 float(session.cluster.memory_reserve_fraction))
                if no_tight else np.zeros(n, bool))
    candidates = np.flatnonzero(mem_fits & ~too_large & ~left_out)
    sweep_notes = work_notes(plans, candidates, model.num_layers, prune, max_work, steps)
    if sweep_notes and notice is not None:
        notice(sweep_notes[0])
    if progress is not None and not prune:  # with pruning: after the lower bounds
        progress(0, n)
    # the compiled fast path pays for Numba's import (~0.5 s per process) on large sweeps only
    elements = 3 * int(steps[candidates].sum()) if candidates.size else 0
    compiled = True if elements >= COMPILED_MIN_SWEEP_ELEMENTS else None
    runner = _Runner(plans, session, store, progress=progress, cancel=cancel, workers=workers,
                     dask=dask, compiled=compiled, early=early, num_gpus=num_gpus,
                     coverage=coverage, columns=columns, fits=mem_fits)
    pruned = np.zeros(n, bool)
    lower = np.full(n, math.nan)
    if not prune:  # the oracle: every plan simulated, those that do not fit too
        runner.solve(group_batches(plans, np.flatnonzero(~too_large & ~left_out).tolist()))
    else:
        own_first = (own if own is not None and mem_fits[own] and not too_large[own]
                     and not left_out[own] else None)
        pruned = _branch_and_bound(runner, session, space, lower, candidates, own_first, reason,
                                   phase, best_by)
    if progress is not None and runner.done_n < n:  # the plans that do not fit, never simulated
        progress(n, n)
    runner.prepare()
    result = _result(session, space, runner, max_mem, mem_fits, reason, num_mb, sweep_notes,
                     deadline_days, pruned, lower)
    result.dimensions = dimensions
    result.answers_best_by = best_by is True or not prune
    result.no_tight = bool(no_tight)
    if deadline_days is not None:
        result.cheapest_within_deadline = result.cheapest_within(deadline_days)
    result.wall_s = time.perf_counter() - t0
    return result


def _leave_out_tight(max_mem: np.ndarray, mem_fits: np.ndarray, reason: list[str],
                     capacity: float, reserve: float) -> np.ndarray:
    """The plans whose memory verdict is "tight" (:func:`core.sim.report.memory_verdict_column`
    of ``max_mem`` bytes, ``capacity`` bytes and the margin ``reserve``), which ``run_sweep``'s
    ``no_tight`` leaves out; their ``reason`` says so, with the need and capacity in GiB.
    Returns the mask, bool (n,)."""
    from core.sim.report import gib_texts, tight_reason
    verdict = memory_verdict_column(max_mem, capacity, reserve, mem_fits)
    tight = verdict == MEMORY_VERDICTS[1]
    for i in np.flatnonzero(tight).tolist():
        need, cap = gib_texts(float(max_mem[i]), capacity)
        reason[i] = (f"tight: needs {need} GiB of {cap} GiB per GPU ("
                     + tight_reason(float(max_mem[i]), capacity, reserve)
                     + "); left out, not simulated (--no-tight)")
    return tight


def _with_phase(progress: ProgressFn | None, phase: PhaseFn) -> ProgressFn:
    """``progress`` that also tells ``phase`` ``("simulate", done, total)``."""
    def both(done: int, total: int) -> None:
        phase("simulate", done, total)
        if progress is not None:
            progress(done, total)
    return both


def _figures(runner: _Runner, session: Session, times: np.ndarray):
    """:func:`core.sim.costing.costing` of iteration times ``times`` (float64 (n,)) of the
    sweep's plans, as :mod:`core.sim.simulate` costs one plan."""
    _, flops, hw_flops = runner.prepared[:3]
    return costing(times, tokens_per_iteration=session.plan.global_batch_size
                   * session.model.seq_length,
                   model_flops=flops, hardware_flops=hw_flops, num_gpus=runner.num_gpus,
                   peak_flops_per_gpu=mfu_peak_flops(runner.store, session.plan),
                   training_tokens=session.cost.training_tokens,
                   price_per_gpu_hour_usd=session.cost.price_per_gpu_hour_usd)


def _branch_and_bound(runner: _Runner, session: Session, space: SweepSpace, lower: np.ndarray,
                      candidates: np.ndarray, own: int | None, reason: list[str],
                      phase: PhaseFn | None = None, best_by: bool = True) -> np.ndarray:
    """2. a lower bound of each plan that fits (``candidates``; its stage times: no graph, into
    ``lower``), then branch and bound (:func:`core.studies.sweep.bound.branch_and_bound`):
    simulate in rounds by increasing bound (the session's own plan ``own`` first), and drop the
    plans whose bound shows they cannot change the front, the best plans or (with ``best_by``)
    any dimension's best (``"num_gpus"``: any GPU count's best). Returns the plans dropped (bool (n,)); their reasons are set in
    ``reason``."""
    plans = runner.plans
    fill_lower_bounds(lower, plans, candidates, runner.model, runner.cluster, runner.cost,
                      runner.store, runner.lookup_cache, runner.cancel, phase)
    # the bound plans' layouts, templates and op times are released now: their memo grows
    # with the distinct plan shapes (a third of the sweep's memory up to 32 GPUs), and the
    # few plans simulated next make their own (the same figures: each entry is a function
    # of its key)
    runner.lookup_cache.clear()
    runner.prepare()
    lb = _figures(runner, session, np.where(np.isfinite(lower), lower, 1.0))
    several_counts = len(space.gpu_counts() or ()) > 1
    if best_by == "num_gpus":  # the GPU count's code alone (value_codes puts it first)
        codes = [value_codes(plans, runner.num_gpus, True, runner.cancel, runner.columns,
                             fields=())[0]] if several_counts else []
    else:
        codes = value_codes(plans, runner.num_gpus, several_counts, runner.cancel,
                            runner.columns) if best_by else []
    if runner.progress is not None:  # the simulation starts
        runner.progress(0, runner.n)
    order = candidates[np.argsort(lower[candidates], kind="stable")]
    if own is not None:  # always simulated
        order = np.concatenate(([own], order[order != own]))
    pruned = branch_and_bound(order, lower, lb.training_days, lb.cost_usd, runner.iteration,
                              codes, lambda rows: runner.solve(group_batches(plans, rows)),
                              lambda times: _figures(runner, session, times), runner.skip)
    tail = (" s per iteration shows it cannot reach the Pareto front"
            + (" nor be the best plan of its GPU count" if best_by == "num_gpus" else
               " nor be the best plan of any of its values" if best_by else ""))
    texts: dict[str, str] = {}  # one text per bound as written: most pruned plans share one
    for i in np.flatnonzero(pruned).tolist():
        bound = f"{lower[i]:.3f}"
        text = texts.get(bound)
        if text is None:
            text = texts[bound] = f"not simulated: its lower bound {bound}{tail}"
        reason[i] = text
    return pruned


def _result(session: Session, space: SweepSpace, runner: _Runner, max_mem: np.ndarray,
            mem_fits: np.ndarray, reason: list[str], num_mb: np.ndarray, sweep_notes: list[str],
            deadline_days: float | None, pruned: np.ndarray, lower: np.ndarray) -> SweepResult:
    """The :class:`SweepResult` of a sweep whose batches are all solved (``runner``)."""
    plans, store, iteration, num_gpus = runner.plans, runner.store, runner.iteration, runner.num_gpus
    plan_columns, flops, hw_flops, low_f, high_f, in_range, no_band, departures = runner.prepared
    low_f, high_f, departures = throughput_departures(
        plans, runner.model, runner.cluster, store, num_gpus, iteration, flops, low_f, high_f,
        departures, runner.coverage, plan_columns, runner.cancel)
    figures = _figures(runner, session, iteration)
    capacity = float(store.memory_bytes)
    reserve = float(session.cluster.memory_reserve_fraction)
    verdict = memory_verdict_column(max_mem, capacity, reserve, mem_fits)  # tight plans fit
    fits = verdict != MEMORY_VERDICTS[2]  # the verdict's answer, simulated or not
    feasible = fits & np.isfinite(iteration)  # the answers are among plans with figures
    days, cost_usd = figures.training_days, figures.cost_usd
    # of plans tied on days and dollars (ZeRO-1 and ZeRO-2 at one micro-batch), the front and
    # the best plans keep the one needing the least memory per GPU
    pareto = least_memory_of_ties(days, cost_usd, max_mem, pareto_front(days, cost_usd, feasible))
    fastest = best_row(days, cost_usd, feasible, max_mem)
    cheapest = best_row(cost_usd, days, feasible, max_mem)
    flex = flex_memory_note(runner.model, plans, plan_columns, feasible,
                            {"the fastest": fastest, "the cheapest": cheapest}, pareto)
    return SweepResult(
        session=session, space=space, plans=plans, plan_columns=plan_columns,
        num_microbatches=num_mb, num_gpus=num_gpus,
        iteration_time_s=iteration, tokens_per_s=figures.tokens_per_s, mfu=figures.mfu,
        hfu=figures.hfu, training_days=days, gpu_hours=figures.gpu_hours, cost_usd=cost_usd,
        max_memory_per_gpu_bytes=max_mem, fits_in_memory=fits, reason=reason, pareto=pareto,
        fastest=fastest, cheapest=cheapest,
        deadline_days=deadline_days, cheapest_within_deadline=None, wall_s=0.0,
        warnings=[w for w in [profile_gpu_note(store, session.cluster),
                              unchecked_note(getattr(store, "residuals", None),
                                             f"the {store.device_name} profile store")] if w]
        + sweep_notes
        + sorted(with_plans(w, list(plans_at(plans, sorted(idx))))
                 for w, idx in runner.warned.items())
        + [w for w in [small_nvlink_domain_note(session.cluster, int(num_gpus.max(initial=0))),
                       flex] if w],
        profile={"device": store.device_name, "path": str(store.path) if store.path else "",
                 **{k: v for k, v in store.provenance.items() if isinstance(v, (str, int, float))}},
        interval_low_s=iteration * low_f, interval_high_s=iteration * high_f,
        in_calibration_range=in_range, calibration_departures=departures,
        interval_coverage=runner.coverage, interval_note=no_band,
        pruned=pruned, lower_bound_s=lower, memory_capacity_bytes=capacity,
        memory_verdict=verdict,
    )


def flex_memory_note(model, plans, plan_columns: dict[str, np.ndarray], feasible: np.ndarray,
                     best: dict[str, int | None], pareto: np.ndarray) -> str | None:
    """The sweep's note on the flex dispatcher's memory (None when no plan with figures, bool
    ``feasible`` (n,), runs it): :func:`core.model.moe.flex_buffer_memory_note` (DeepEP's and
    HybridEP's buffers are not in the memory per GPU, so a flex plan's figure is a lower bound
    and its "fits" or "tight" may not hold), with how many plans with figures use it and which
    of ``best`` (name -> row or None) and the ``pareto`` rows (int array) are among them. The
    rules admit flex only where ``etp * ep > 1``, so the note holds for every such plan."""
    column = plan_columns.get("moe_token_dispatcher_type")
    if column is None or not num_moe_layers(model):
        return None
    flex = np.asarray(column == "flex", bool) & feasible
    if not flex.any():
        return None
    rows = np.flatnonzero(flex)
    note = flex_buffer_memory_note(model, next(iter(plans_at(plans, rows[:1].tolist()))))
    if note is None:
        return None
    named = [name for name, row in best.items() if row is not None and flex[row]]
    front = int(flex[np.asarray(pareto, np.int64)].sum()) if len(pareto) else 0
    among = named + ([f"{front} of the {len(pareto)} front plans"] if front else [])
    return (f"{note}: {rows.size:,} of the {int(feasible.sum()):,} plans with figures use it"
            + (", among them " + ", ".join(among[:-1]) + (" and " if len(among) > 1 else "")
               + among[-1] if among else "")
            + "; their memory is a lower bound")

