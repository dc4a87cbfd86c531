"""A sweep's result: every plan's figures as columns, the Pareto front and the best plans.

:class:`SweepResult` is what :func:`core.studies.sweep.run.run_sweep` returns (the command
line's tables and JSON, the Explore tab's scatter and table); :func:`pareto_front` the
(days, cost) front; :func:`plan_figures` what a result needs of its plans alone (their
columns, FLOPs and error bands), computed while the batches run. No simulation belongs here.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from core.model import model_math
from core.plan.parallel import PLAN_FIELDS, ParallelPlan
from core.plan.session import Session
from core.sim.report import memory_verdict_column
from core.plan.parallel import gemm_peak_dtype
from core.store.calibration_range import (features_of, precision_label, throughput_ceiling,
                                          throughput_departure)
from core.store.interval import (distinct_features, interval_factors, interval_for,
                                 layer_parameters, plan_departures)
from core.studies.sweep.cancel import check_cancelled
from core.studies.sweep.plan_rows import PlanRows, plan_column_arrays, plans_at, row_of_plan
from core.studies.sweep.space import SweepSpace, as_list
from core.sim.comm import CollectiveExtrapolation
from core.util.text import spreadsheet_cell

__all__ = ["SweepResult", "COLUMNS", "column_is_constant", "PLAN_COLUMNS", "BEST_BY_FIELDS",
           "BEST_BY_ENABLED_BY", "best_by_values",
           "pareto_front", "least_memory_of_ties", "plan_column_arrays", "column_codes", "plan_figures", "best_row", "plan_label", "plans_note", "with_plans",
           "throughput_departures"]

PLAN_COLUMNS = PLAN_FIELDS
#: Columns of :meth:`SweepResult.rows` and :meth:`SweepResult.write_csv`, in order.
COLUMNS = PLAN_COLUMNS + (
    "num_microbatches", "num_gpus", "iteration_time_s", "interval_low_s", "interval_high_s",
    "in_calibration_range", "within_calibration", "calibration_departures", "tokens_per_s",
    "mfu", "hfu", "training_days", "gpu_hours",
    "cost_usd", "max_memory_per_gpu_bytes", "memory_verdict", "fits_in_memory", "on_pareto_front",
    "reason")

#: Plans between two checks of ``cancel`` in :func:`plan_figures` (about 10 ms of work).
_CANCEL_EVERY = 2048

BEST_BY_FIELDS = ("tensor_parallel", "pipeline_parallel", "data_parallel", "micro_batch_size",
                  "context_parallel", "expert_parallel", "schedule", "virtual_pipeline_stages",
                  "recompute", "sequence_parallel", "zero_stage", "cp_comm_type",
                  "moe_token_dispatcher_type", "expert_tensor_parallel")

#: Fields of :data:`BEST_BY_FIELDS` that act only where a size enables them, as the sweep
#: varies them (:func:`core.studies.sweep.variants.size_variants`): field -> that size, which
#: must be above 1: the context-parallel exchange with cp > 1, the MoE token dispatcher with
#: ep > 1 (at 1 every plan keeps the session's) and sequence parallelism with t > 1 (off at
#: t = 1). The best plan of each of their values is of the plans where it acts; the others
#: are the value ``-`` (None), as ``virtual_pipeline_stages`` is without the interleaved
#: schedule (:func:`best_by_values`).
BEST_BY_ENABLED_BY = {"cp_comm_type": "context_parallel",
                      "moe_token_dispatcher_type": "expert_parallel",
                      "sequence_parallel": "tensor_parallel"}


def best_by_values(column: Callable[[str], np.ndarray], name: str) -> np.ndarray:
    """Each plan's value of the :data:`BEST_BY_FIELDS` field ``name`` as the best plans of each
    value group them (:meth:`SweepResult.best_by`, and the pruning that keeps them exact:
    :func:`core.studies.sweep.bound.value_codes`): the plans' column (``column(name)``, an
    (n,) array), with None (an object column) where the field does not act
    (:data:`BEST_BY_ENABLED_BY`: cp_comm p2p is not the best "p2p" plan of a plan without
    context parallelism). The column itself where it acts in every plan."""
    col = column(name)
    size = BEST_BY_ENABLED_BY.get(name)
    if size is None:
        return col
    off = np.asarray(np.asarray(column(size)) <= 1, dtype=bool)
    if not off.any():
        return col
    out = np.array(col.tolist(), dtype=object)
    out[off] = None
    return out


def column_is_constant(values: Any) -> bool:
    """Whether every value of a plan column is the same, as its ``repr`` tells them apart
    (``1`` and ``True``, or ``None`` and ``nan``, differ; every ``nan`` is the same).

    ``values``: array (n,) of any dtype. Numbers and text are compared by numpy; an object
    column first by ``==`` in numpy's loop (no Python object per plan), and only where every
    value equals the first are their types and ``repr`` compared (120,000 plans: about a
    millisecond per column when they differ, a few when they do not).
    """
    values = np.asarray(values)
    if values.size <= 1:
        return True
    if values.dtype.kind in "biuUS":  # numbers, text: numpy compares (no Python object per plan)
        return bool((values == values[0]).all())
    if values.dtype.kind == "f":
        nan = np.isnan(values)
        return bool(nan.all() or (not nan.any() and (values == values[0]).all()))
    first = values.flat[0]
    scalar = np.empty((), object)
    scalar[()] = first  # a tuple or list compared as one value, not broadcast as an array
    try:
        same = np.asarray(values == scalar, dtype=bool)
    except (TypeError, ValueError):  # values that do not compare elementwise
        same = None
    if same is not None and same.shape == values.shape:
        if same.all() and first is None:
            return True  # only None equals None
        if not same.all() and not (isinstance(first, float) and math.isnan(first)):
            return False  # a value unlike the first (nan never equals itself: checked below)
    items = values.tolist()
    try:
        distinct = set(zip(map(type, items), items))
    except TypeError:  # unhashable values: compare them all
        return len({repr(v) for v in items}) <= 1
    return len(distinct) <= 1 or len({repr(v) for _, v in distinct}) <= 1


def pareto_front(days: np.ndarray, cost: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """Plans not dominated in (days, cost), both minimized.

    Plan ``j`` dominates ``i`` when ``days[j] <= days[i]`` and ``cost[j] <=
    cost[i]`` with at least one strict. Plans with identical (days, cost) do not
    dominate each other, so both are on the front.

    Parameters
    ----------
    days, cost : float array, shape (n,)
    mask : bool array, shape (n,), optional
        Plans taking part (e.g. those that fit in memory); others are never on the front.

    Returns
    -------
    bool array, shape (n,)
    """
    days = np.asarray(days, np.float64)
    cost = np.asarray(cost, np.float64)
    cand = np.flatnonzero(np.ones(days.shape, bool) if mask is None else np.asarray(mask, bool))
    out = np.zeros(days.shape, bool)
    order = cand[np.lexsort((cost[cand], days[cand]))]
    best_cost = math.inf
    last: tuple[float, float] | None = None
    for i in order.tolist():
        key = (days[i], cost[i])
        if cost[i] < best_cost:
            out[i] = True
            best_cost = cost[i]
            last = key
        elif key == last:  # exact duplicate of a front point
            out[i] = True
    return out


def least_memory_of_ties(days: np.ndarray, cost: np.ndarray, mem: np.ndarray,
                         on: np.ndarray) -> np.ndarray:
    """The front ``on`` (bool (n,), :func:`pareto_front` of ``days`` and ``cost``) less each
    point tied with another point of it on both days and dollars that needs more memory per
    GPU (``mem``, bytes): with the same days and dollars the one with more headroom is no worse
    by any figure and better by one. (A point tied with a front point is on the front:
    :func:`pareto_front` keeps exact duplicates, so the twins are looked for among ``on``.)
    The ties this removes: a plan at ZeRO stage 1 (the distributed optimizer: the gradient
    buffer whole on each rank, reduce-scattered once after the last micro-batch) and the same
    plan at stage 2 (Megatron-FSDP ``optim_grads``: each micro-batch's gradients
    reduce-scattered, ``1/d`` kept) move the same bytes when the iteration has one
    micro-batch, so their time is the same and stage 2's memory less
    (:func:`core.model.memory.bytes_per_parameter`); the front keeps stage 2. Points tied on
    all three stay. Used by ``vtrain sweep``'s front (:class:`SweepResult` ``pareto``), the
    window's Explore front and the GPU choice's combined front. bool (n,)."""
    out = np.asarray(on, bool).copy()
    idx = np.flatnonzero(out)
    groups: dict[tuple[float, float], list[int]] = {}
    for i, key in zip(idx.tolist(), zip(np.asarray(days, np.float64)[idx].tolist(),
                                         np.asarray(cost, np.float64)[idx].tolist())):
        groups.setdefault(key, []).append(i)
    for ks in groups.values():  # a twin on days and dollars with less memory drops the point
        if len(ks) > 1:
            least = min(mem[k] for k in ks)
            for k in ks:
                out[k] = mem[k] <= least
    return out


@dataclass
class SweepResult:
    """All plans of a sweep as columns (numpy arrays of shape (num_plans,)) plus the summary.

    Attributes
    ----------
    session : Session
        The sweep's input (model, cluster, cost inputs, B, precision).
    space : SweepSpace
    plans : sequence of ParallelPlan
        The plan of each row: a sweep's is a :class:`~core.studies.sweep.plan_rows.PlanRows`
        (the plan columns; ``plans[i]`` builds row ``i``'s plan, no plan object held per
        row), a result read back from a file's a list.
    plan_columns : dict of str to array
        One column per plan field (:data:`PLAN_COLUMNS`), also readable as an
        attribute (``result.tensor_parallel``): int64 for integers, bool; object
        arrays for text (one str object per distinct text) and fields that may be None. A field of one value in every
        plan is that value broadcast (``np.broadcast_to``: read-only, no bytes per plan).
    num_microbatches, num_gpus : int64 arrays
    iteration_time_s : float64 array
        Predicted iteration time, seconds (equals ``simulate(session_for(i))``).
    tokens_per_s, mfu, hfu : float64 arrays
        Throughput (tokens/s), model and hardware FLOPs utilization (0..1).
    training_days, gpu_hours, cost_usd : float64 arrays
        For ``session.cost.training_tokens`` tokens at ``session.cost.price_per_gpu_hour_usd``.
    max_memory_per_gpu_bytes : float64 array
        Largest per-GPU memory over the stages, bytes.
    memory_verdict : object array of str
        ``"fits"``, ``"tight"`` or ``"does not fit"`` of each plan's memory against the GPU's
        capacity with ``session.cluster.memory_reserve_fraction`` the margin
        (:func:`core.sim.report.memory_verdict_column`); a tight plan fits in memory.
    memory_capacity_bytes : float
        The GPU's memory, bytes (NaN for a result read back from a file older than it).
    fits_in_memory : bool array
        Plans whose memory fits (tight or not): ``memory_verdict != "does not fit"``, simulated
        or not (a plan too large to simulate, or pruned, has no figures; :attr:`feasible`).
    reason : list of str
        Why a plan does not fit ("" when it fits).
    pareto : bool array
        On the (days, cost) Pareto front of the plans that fit.
    fastest, cheapest : int or None
        Indices among plans that fit (ties: the cheaper, resp. faster, then the first).
    deadline_days : float or None
    cheapest_within_deadline : int or None
        Cheapest plan that fits and trains within ``deadline_days``.
    wall_s : float
        Wall time of the sweep, seconds.
    warnings : list of str
        Distinct lookup warnings of the plans that fit in memory.
    profile : dict
        Device name and provenance of the profile store used.
    interval_low_s, interval_high_s : float64 arrays
        Error band of the iteration time at nominal coverage ``interval_coverage``
        (:mod:`core.store.interval`), seconds; NaN where there is none.
    in_calibration_range : bool array
        Plans whose GPU count and model size lie within the profile's calibration runs.
    calibration_departures : list of str
        Per plan, its features outside the profile's calibration runs ("" when none, and
        for every plan of a profile whose residuals have no feature columns;
        :func:`core.store.calibration_range.feature_departures`).
    interval_coverage : float
    interval_note : str
        Why no plan has a band, or "" when the bands exist.
    pruned : bool array
        Plans that fit in memory but were not simulated: their lower bound shows they change
        no answer of the sweep (branch and bound, :func:`core.studies.sweep.run.run_sweep`); no figures (NaN).
    lower_bound_s : float64 array
        The iteration-time lower bound of each plan that fits, seconds (NaN for the others,
        and for every plan of a sweep without pruning).
    saved : dict or None
        For a result read back from a session file (:func:`core.studies.sweep.saved.restore_sweep`,
        only the rows saved), the whole sweep's ``num_plans``, ``num_feasible``, ``num_pruned``
        and ``wall_s``; None for a sweep run here.
    dimensions : list of dict
        What the sweep chose and what it held (:func:`core.studies.sweep.dimensions.sweep_dimensions`): one dict per plan
        field with ``field``, ``swept`` (bool), ``values`` (those of the plans) and ``why``.
    """

    session: Session
    space: SweepSpace
    plans: Sequence[ParallelPlan]
    plan_columns: dict[str, np.ndarray]
    num_microbatches: np.ndarray
    num_gpus: np.ndarray
    iteration_time_s: np.ndarray
    tokens_per_s: np.ndarray
    mfu: np.ndarray
    hfu: np.ndarray
    training_days: np.ndarray
    gpu_hours: np.ndarray
    cost_usd: np.ndarray
    max_memory_per_gpu_bytes: np.ndarray
    fits_in_memory: np.ndarray
    reason: list[str]
    pareto: np.ndarray
    fastest: int | None
    cheapest: int | None
    deadline_days: float | None
    cheapest_within_deadline: int | None
    wall_s: float
    warnings: list[str] = field(default_factory=list)
    profile: dict[str, Any] = field(default_factory=dict)
    interval_low_s: np.ndarray | None = None
    interval_high_s: np.ndarray | None = None
    in_calibration_range: np.ndarray | None = None
    calibration_departures: list[str] | None = None
    interval_coverage: float = 0.9
    interval_note: str = ""
    pruned: np.ndarray | None = None
    lower_bound_s: np.ndarray | None = None
    dimensions: list[dict[str, Any]] = field(default_factory=list)
    saved: dict[str, Any] | None = None
    memory_capacity_bytes: float = math.nan
    memory_verdict: np.ndarray | None = None
    #: False for a sweep run with ``best_by=False`` (:func:`core.studies.sweep.run_sweep`): its
    #: pruning kept only the front and the best plans exact, so :meth:`best_by` is empty.
    answers_best_by: bool = True
    #: True for a sweep run with ``no_tight`` (:func:`core.studies.sweep.run_sweep`): its tight
    #: plans were left out, never simulated (:attr:`num_tight_left_out`).
    no_tight: bool = False

    def __post_init__(self) -> None:
        n = int(np.asarray(self.iteration_time_s).shape[0])
        if self.memory_verdict is None:  # from the capacity, else (no capacity) from fits
            self.memory_verdict = (
                memory_verdict_column(self.max_memory_per_gpu_bytes, self.memory_capacity_bytes,
                                float(self.session.cluster.memory_reserve_fraction),
                                self.fits_in_memory)
                if math.isfinite(self.memory_capacity_bytes) else
                np.where(np.asarray(self.fits_in_memory, bool), "fits", "does not fit"))
        if self.pruned is None:
            self.pruned = np.zeros(n, bool)
        if self.lower_bound_s is None:
            self.lower_bound_s = np.full(n, np.nan)
        if self.interval_low_s is None:
            self.interval_low_s = np.full(n, np.nan)
        if self.interval_high_s is None:
            self.interval_high_s = np.full(n, np.nan)
        if self.in_calibration_range is None:
            self.in_calibration_range = np.zeros(n, bool)
        if self.calibration_departures is None:
            self.calibration_departures = [""] * n

    def __getattr__(self, name: str) -> np.ndarray:
        # the plan's columns by field name: result.tensor_parallel, result.schedule, ...
        columns = self.__dict__.get("plan_columns")
        if columns is not None and name in columns:
            return columns[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def num_plans(self) -> int:
        """Number of valid plans (fitting or not)."""
        return int(self.iteration_time_s.shape[0])

    @property
    def within_calibration(self) -> np.ndarray:
        """Plans inside what the profile was calibrated on: GPU count and model size
        (:attr:`in_calibration_range`) and every feature (no :attr:`calibration_departures`);
        bool (n,). Computed once per pair of those columns and kept (120,000 plans: 20 ms)."""
        inside, departures = self.in_calibration_range, self.calibration_departures
        kept = self.__dict__.get("_within_calibration")
        if kept is None or kept[0] is not inside or kept[1] is not departures:
            departed = np.fromiter(map(bool, departures), bool, len(departures))
            kept = self.__dict__["_within_calibration"] = (
                inside, departures, np.asarray(inside, bool) & ~departed)
        return kept[2]

    def constant_plan_fields(self) -> frozenset[str]:
        """Plan fields (:data:`PLAN_COLUMNS`) with one value in every plan
        (:func:`column_is_constant`), which a table of the plans may leave out. Computed once
        and kept: the window's sweep worker asks for it before the result reaches the GUI
        thread."""
        kept = self.__dict__.get("_constant_plan_fields")
        if kept is None:
            kept = self.__dict__["_constant_plan_fields"] = frozenset(
                f for f, column in self.plan_columns.items() if column_is_constant(column))
        return kept

    @property
    def num_outside_calibration(self) -> int:
        """Plans that fit in memory, were simulated and leave what the profile was calibrated
        on."""
        return int(np.count_nonzero(self.feasible & ~self.within_calibration))

    @property
    def num_tight_left_out(self) -> int:
        """Plans whose memory verdict is "tight" left out by :attr:`no_tight` (0 without it);
        of a result holding some rows only (:attr:`saved`: read back from a session file, or
        cut by :meth:`take`), the whole sweep's count saved with it."""
        if not self.no_tight:
            return 0
        if self.saved is not None and "num_tight_left_out" in self.saved:
            return int(self.saved["num_tight_left_out"])
        return int(np.count_nonzero(np.asarray(self.memory_verdict) == "tight"))

    @property
    def num_tight_on_front(self) -> int:
        """Plans of the Pareto front whose memory verdict is "tight" (0 with :attr:`no_tight`)."""
        return int(np.count_nonzero(np.asarray(self.pareto, bool)
                                    & (np.asarray(self.memory_verdict) == "tight")))

    @property
    def feasible(self) -> np.ndarray:
        """Plans that fit in memory and have figures (simulated): those the sweep's answers
        (front, fastest, cheapest, best by value) are chosen among; bool (n,)."""
        return np.asarray(self.fits_in_memory, bool) & np.isfinite(self.iteration_time_s)

    @property
    def num_feasible(self) -> int:
        """Number of plans that fit in GPU memory and were simulated (:attr:`feasible`)."""
        return int(np.count_nonzero(self.feasible))

    def plan(self, i: int) -> ParallelPlan:
        """The parallel plan of row ``i`` (a copy)."""
        return dataclasses.replace(self.plans[i])

    def session_for(self, i: int) -> Session:
        """A new session: the sweep's model, cluster and cost with the plan of row ``i``."""
        s = self.session.copy()
        s.plan = self.plan(i)
        return s

    def band_note(self, i: int) -> str:
        """Why plan ``i`` has no error band, in the words ``vtrain simulate`` gives it for the
        plan ("no error band: a 90% band needs at least 19 single-node residuals, the
        H200-SXM-141GB profile store (...) has 3"; :func:`core.store.interval.session_interval`
        with the sweep's profile store, that of ``profile["path"]``, else the session's);
        "" when it has one. A plan without figures (not simulated) says so with its
        :attr:`reason`; the sweep's :attr:`interval_note` when no plan has a band.

        Raises
        ------
        ProfileStoreError
            The profile store cannot be opened (moved since the sweep ran).
        """
        if math.isfinite(float(self.interval_low_s[i])):
            return ""
        if self.interval_note:
            return self.interval_note
        predicted = float(self.iteration_time_s[i])
        if not math.isfinite(predicted):
            return ("no error band: the plan has no predicted time"
                    + (f" ({self.reason[i]})" if self.reason[i] else ""))
        from core.sim.simulate import open_profile, session_profile
        from core.store.interval import session_interval
        session = self.session_for(i)
        path = (self.profile or {}).get("path")
        store = open_profile(path) if path else session_profile(session)
        return session_interval(session, predicted, store, self.interval_coverage).note

    def index_of(self, plan: ParallelPlan) -> int | None:
        """Row of ``plan`` (every field equal; at ``t = 1`` sequence parallelism and the TP
        overlap, which change nothing there, need not be), or None when not in the sweep."""
        i = self._row_of(plan)
        if i is None and plan.tensor_parallel == 1 and (plan.sequence_parallel
                                                         or plan.tp_comm_overlap):
            for sp, ov in ((False, False), (True, False), (False, True), (True, True)):
                i = self._row_of(dataclasses.replace(plan, sequence_parallel=sp,
                                                     tp_comm_overlap=ov))
                if i is not None:
                    break
        return i

    def _row_of(self, plan: ParallelPlan) -> int | None:
        """The last row whose every field equals ``plan``'s (:func:`row_of_plan` of the plan
        columns: no index of every plan kept), or None."""
        return row_of_plan(self.plan_columns, plan, last=True)

    def pareto_indices(self) -> np.ndarray:
        """Rows on the Pareto front sorted by training days (then cost); int64 (k,)."""
        idx = np.flatnonzero(self.pareto)
        return idx[np.lexsort((self.cost_usd[idx], self.training_days[idx]))]

    def dominated_by(self, i: int) -> np.ndarray:
        """Rows of plans that fit, were simulated and dominate row ``i`` in (days, cost);
        int64 (k,)."""
        d, c = self.training_days, self.cost_usd
        dom = self.feasible & (d <= d[i]) & (c <= c[i]) & ((d < d[i]) | (c < c[i]))
        return np.flatnonzero(dom)

    def select(self, num_gpus: int | Sequence[int] | None = None, max_gpus: int | None = None,
               fits_only: bool = False, deadline_days: float | None = None,
               max_cost_usd: float | None = None) -> np.ndarray:
        """Boolean mask (num_plans,) of the rows passing every given filter."""
        mask = np.ones(self.num_plans, bool)
        if num_gpus is not None:
            mask &= np.isin(self.num_gpus, as_list(num_gpus))
        if max_gpus is not None:
            mask &= self.num_gpus <= max_gpus
        if fits_only:
            mask &= self.fits_in_memory
        if deadline_days is not None:
            mask &= self.training_days <= deadline_days
        if max_cost_usd is not None:
            mask &= self.cost_usd <= max_cost_usd
        return mask

    #: The fields with one entry per plan (arrays, or lists for ``reason`` and
    #: ``calibration_departures``, a list or :class:`PlanRows` for ``plans``), which
    #: :meth:`take` cuts.
    PER_PLAN_FIELDS = ("plans", "num_microbatches", "num_gpus", "iteration_time_s",
                       "tokens_per_s", "mfu", "hfu", "training_days", "gpu_hours", "cost_usd",
                       "max_memory_per_gpu_bytes", "fits_in_memory", "reason", "pareto",
                       "interval_low_s", "interval_high_s", "in_calibration_range",
                       "calibration_departures", "pruned", "lower_bound_s", "memory_verdict")

    def take(self, keep: np.ndarray, saved: dict[str, Any]) -> "SweepResult":
        """The plans ``keep`` (int (k,), increasing) as a result of their own: every per-plan
        field (:data:`PER_PLAN_FIELDS`, and the plan columns) cut to them, ``fastest``,
        ``cheapest`` and ``cheapest_within_deadline`` renumbered (None where not kept), and
        ``saved`` the whole sweep's counts (as a result read back from a session file)."""
        ks = np.asarray(keep, np.int64)
        where = {int(i): j for j, i in enumerate(ks.tolist())}

        def cut(values):
            if values is None:
                return None
            if isinstance(values, PlanRows):
                return values.take(ks)
            if isinstance(values, list):
                return [values[i] for i in ks.tolist()]
            return np.asarray(values)[ks]

        def at(i):
            return None if i is None else where.get(int(i))

        return dataclasses.replace(
            self, **{f: cut(getattr(self, f)) for f in self.PER_PLAN_FIELDS},
            plan_columns={f: np.asarray(v)[ks] for f, v in self.plan_columns.items()},
            fastest=at(self.fastest), cheapest=at(self.cheapest),
            cheapest_within_deadline=at(self.cheapest_within_deadline), saved=dict(saved))

    def front_of(self, mask: np.ndarray) -> np.ndarray:
        """The Pareto front of days and dollars among the plans of ``mask`` (bool (n,)) that
        have figures (:attr:`feasible`), of plans tied on both the one needing the least
        memory per GPU (:func:`least_memory_of_ties`): the rule of :attr:`pareto` (the whole
        sweep's front), applied to the plans a filter shows (the window's Explore tab).
        bool (n,)."""
        has = np.asarray(mask, bool) & self.feasible
        return least_memory_of_ties(self.training_days, self.cost_usd,
                                    self.max_memory_per_gpu_bytes,
                                    pareto_front(self.training_days, self.cost_usd, has))

    def best_of(self, by: str, mask: np.ndarray) -> int | None:
        """The fastest (``by="days"``: days, then dollars) or cheapest (``by="cost"``: dollars,
        then days) plan of ``mask`` (bool (n,)) with figures, then the least memory per GPU,
        then the first (:func:`best_row`): the rule of :attr:`fastest` and :attr:`cheapest`,
        applied to the plans a filter shows. None when none. Raises ValueError for another
        ``by``."""
        if by not in ("days", "cost"):
            raise ValueError(f"by must be 'days' or 'cost', not {by!r}")
        first, then = ((self.training_days, self.cost_usd) if by == "days"
                       else (self.cost_usd, self.training_days))
        return best_row(first, then, np.asarray(mask, bool) & self.feasible,
                        self.max_memory_per_gpu_bytes)

    def cheapest_within(self, deadline_days: float) -> int | None:
        """Cheapest plan that fits and trains within ``deadline_days`` (ties: faster, then less
        memory per GPU, then first)."""
        return best_row(self.cost_usd, self.training_days,
                        self.feasible & self.select(deadline_days=deadline_days),
                        self.max_memory_per_gpu_bytes)

    def plan_row(self, i: int) -> dict[str, Any]:
        """Row ``i`` without the figures of the session's token budget (``training_days``,
        ``gpu_hours``, ``cost_usd``), for studies that train for another budget."""
        return {k: v for k, v in self.row(i).items()
                if k not in ("training_days", "gpu_hours", "cost_usd")}

    def row(self, i: int, columns: dict[str, Any] | None = None) -> dict[str, Any]:
        """Row ``i`` as a JSON-able dict with the keys :data:`COLUMNS`; ``columns`` (name ->
        the whole column, :meth:`rows` reads each once) saves computing a derived column (such
        as :attr:`within_calibration`, of every plan) again for each row."""
        out: dict[str, Any] = {}
        for c in COLUMNS:
            if c == "on_pareto_front":
                out[c] = bool(self.pareto[i])
            elif c == "reason":
                out[c] = self.reason[i]
            else:
                v = (getattr(self, c) if columns is None else columns[c])[i]
                v = v.item() if isinstance(v, np.generic) else v
                # no figures (a plan too large to simulate) or no error band: null, never NaN
                out[c] = None if isinstance(v, float) and not math.isfinite(v) else v
        return out

    def row_columns(self) -> dict[str, Any]:
        """Every column of :data:`COLUMNS` but ``on_pareto_front`` and ``reason``, by name (the
        derived ones computed once): what :meth:`row` reads."""
        return {c: getattr(self, c) for c in COLUMNS if c not in ("on_pareto_front", "reason")}

    def rows(self, indices: Iterable[int] | None = None) -> list[dict[str, Any]]:
        """Rows as dicts (all, or ``indices`` in that order), each column read once: the
        dicts :meth:`row` makes, built column by column (:meth:`_column_values`)."""
        return [dict(zip(COLUMNS, r)) for r in zip(*self._column_values(indices))]

    def _column_values(self, indices: Iterable[int] | None = None) -> list[list[Any]]:
        """The values of :meth:`row` of every row (all, or ``indices`` in that order), one
        list per column of :data:`COLUMNS`: each column's rows taken at once (numpy's
        ``tolist``, the Python values ``.item()`` gives), a numpy scalar of an object column
        made its Python value, a float that is not finite None, as :meth:`row` does."""
        columns = self.row_columns()
        idx = (np.arange(self.num_plans) if indices is None
               else np.fromiter(indices, np.int64))
        at = idx.tolist()
        out: list[list[Any]] = []
        for c in COLUMNS:
            if c == "on_pareto_front":
                out.append([bool(v) for v in np.asarray(self.pareto)[idx].tolist()])
                continue
            if c == "reason":
                out.append([self.reason[i] for i in at])
                continue
            col = columns[c]
            if isinstance(col, np.ndarray) and col.dtype != object:
                values = col[idx].tolist()  # Python values: .item() of each
            else:
                values = [col[i] for i in at]
                values = [v.item() if isinstance(v, np.generic) else v for v in values]
            # no figures (a plan too large to simulate) or no error band: null, never NaN
            out.append([None if isinstance(v, float) and not math.isfinite(v) else v
                        for v in values])
        return out

    def megatron_lm(self) -> dict[str, list[str]] | None:
        """When Megatron-LM runs the session's own plan (the sweep's default space also holds
        plans it refuses: ZeRO-2 without overlapped gradient reduction, FSDP2 with pipeline or
        expert parallelism, Transformer Engine's cross-entropy, which Megatron-Bridge runs),
        what keeps it from running the fastest and the cheapest plan: ``{"fastest": [...],
        "cheapest": [...]}`` for those it refuses
        (:func:`core.io.megatron.export.megatron_blockers`); None when it does not run the
        session's plan (a DeepSpeed, torchtitan or Bridge session: nothing to keep to)."""
        from core.io.megatron.export import megatron_blockers
        if megatron_blockers(self.session):
            return None
        out: dict[str, list[str]] = {}
        for name, i in (("fastest", self.fastest), ("cheapest", self.cheapest)):
            if i is not None:
                why = megatron_blockers(self.session_for(i))
                if why:
                    out[name] = why
        return out

    def to_dict(self, include_all: bool = False) -> dict[str, Any]:
        """The summary document ``vtrain sweep --json`` prints.

        Keys: ``num_plans``, ``num_feasible``, ``wall_s``, ``fastest``,
        ``cheapest``, ``deadline_days``, ``cheapest_within_deadline`` (plan
        dicts or None), ``pareto`` (plan dicts sorted by days), ``training_tokens``,
        ``price_per_gpu_hour_usd``, ``profile``, ``warnings``, ``interval_coverage`` and
        ``interval_note`` (the error bands' nominal coverage, and why there are none),
        ``num_outside_calibration`` (:attr:`num_outside_calibration`),
        ``num_fit`` (plans that fit in memory, simulated or not: the table's "fit in memory";
        ``num_feasible`` counts those simulated), ``num_pruned`` (plans that fit but were not
        simulated), ``dimensions``
        (:attr:`dimensions`: what was swept and what held, and why), ``best_by``
        (:meth:`best_by`), ``fewest_gpus`` (:meth:`fewest_gpus`), ``config`` (the
        session's own plan: ``in_sweep``, and when in it ``plan``,
        ``on_pareto_front``, ``num_dominating`` and ``cheapest_dominating``, a
        plan dict or None; when not, ``why_not``, :meth:`SweepSpace.excludes`' words or
        None), ``megatron_lm`` (:meth:`megatron_lm`); with ``include_all``, ``plans`` (every
        row).
        """
        cols = self.row_columns()
        pick = (lambda i: None if i is None else self.row(i, cols))
        own = self.index_of(self.session.plan)
        config: dict[str, Any] = {"in_sweep": own is not None}
        if own is None:
            config["why_not"] = self.space.excludes(self.session.plan)
        if own is not None:
            dom = self.dominated_by(own) if self.feasible[own] else np.empty(0, np.int64)
            config.update(plan=self.row(own, cols), on_pareto_front=bool(self.pareto[own]),
                          num_dominating=int(dom.size),
                          cheapest_dominating=pick(int(dom[np.argmin(self.cost_usd[dom])])
                                                   if dom.size else None))
        doc = {
            "num_plans": self.num_plans, "num_feasible": self.num_feasible, "wall_s": self.wall_s,
            "fastest": pick(self.fastest), "cheapest": pick(self.cheapest),
            "deadline_days": self.deadline_days,
            "cheapest_within_deadline": pick(self.cheapest_within_deadline),
            "pareto": self.rows(self.pareto_indices().tolist()),
            "training_tokens": self.session.cost.training_tokens,
            "price_per_gpu_hour_usd": self.session.cost.price_per_gpu_hour_usd,
            "profile": self.profile, "warnings": self.warnings, "config": config,
            "megatron_lm": self.megatron_lm(),
            "interval_coverage": self.interval_coverage, "interval_note": self.interval_note,
            "num_fit": int(np.count_nonzero(self.fits_in_memory)),
            "num_pruned": int(np.count_nonzero(self.pruned)),
            "num_outside_calibration": self.num_outside_calibration,
            "no_tight": self.no_tight, "num_tight_left_out": self.num_tight_left_out,
            "num_tight_on_front": self.num_tight_on_front,
            "dimensions": self.dimensions, "best_by": self.best_by(),
            "fewest_gpus": self.fewest_gpus(),
        }
        if include_all:
            doc["plans"] = self.rows()
        return doc

    def fewest_gpus(self) -> dict[str, int | None]:
        """The fewest GPUs among the plans that fit in memory, whether simulated or not (the
        memory verdict needs no simulation): ``{"fits or tight": n, "fits": n}``, the second
        among the plans that fit outside the margin (:data:`core.sim.report.MEMORY_VERDICTS`);
        None where no plan qualifies. Answers "how many GPUs does this model need" over the
        swept space (its other dimensions free)."""
        gpus = np.asarray(self.num_gpus)
        verdict = np.asarray(self.memory_verdict)
        out: dict[str, int | None] = {}
        for key, mask in (("fits or tight", np.asarray(self.fits_in_memory, bool)),
                          ("fits", verdict == "fits")):
            out[key] = int(gpus[mask].min()) if mask.any() else None
        return out

    def best_by(self) -> dict[str, list[dict[str, Any]]]:
        """The fastest plan that fits for each value of each swept dimension of
        :data:`BEST_BY_FIELDS`, and for each GPU count (``num_gpus``) when the space names
        several exact counts:
        ``{field: [{"value": v, "plan": row dict}, ...]}`` (values
        sorted; a value whose plans none fits has ``"plan": None`` and a ``"reason"`` saying
        so, with the least memory one of them needs). Exact under pruning: a
        plan is pruned only when a plan of each of its values is already faster than it.
        Empty for a sweep run with ``best_by=False`` (:attr:`answers_best_by`)."""
        out: dict[str, list[dict[str, Any]]] = {}
        if not self.answers_best_by:
            return out
        swept = {d["field"] for d in self.dimensions if d["swept"]} if self.dimensions else None
        counts = list(self.space.gpu_counts() or ())
        cols = self.row_columns()
        feasible = self.feasible
        if len(counts) > 1:
            out["num_gpus"] = [{"value": n, "plan": (lambda i: None if i is None else self.row(i, cols))(
                best_row(self.training_days, self.cost_usd, self.feasible & (self.num_gpus == n),
                         self.max_memory_per_gpu_bytes))}
                for n in counts]
        for name in BEST_BY_FIELDS:
            if swept is not None and name not in swept:
                continue
            # each plan's value, no plan built; "-" where the field does not act
            col = best_by_values(self.plan_columns.__getitem__, name).tolist()
            if len(set(map(repr, col))) < 2:
                continue
            rows = []
            for value in sorted(set(col), key=lambda v: (v is None, repr(type(v)), v if v is not
                                                         None else 0)):
                has = np.array([c == value for c in col], bool)
                i = best_row(self.training_days, self.cost_usd, feasible & has,
                             self.max_memory_per_gpu_bytes)
                if i is None:
                    rows.append({"value": value, "plan": None, "reason": self.why_none(has)})
                else:
                    rows.append({"value": value, "plan": self.row(i, cols)})
            out[name] = rows
        return out

    def why_none(self, has: np.ndarray) -> str:
        """Why none of the plans ``has`` (bool (n,), at least one True) is an answer: every
        one needs more memory than the GPU has (the least they need, GiB per GPU), or those
        that fit have no figures (the first one's reason: too large to simulate)."""
        n = int(np.count_nonzero(has))
        plans = f"{n:,} plan{'s' if n != 1 else ''}"
        fit = np.flatnonzero(has & self.fits_in_memory)
        if fit.size:
            return f"none of its {plans} was simulated: {self.reason[int(fit[0])]}"
        least = float(np.nanmin(self.max_memory_per_gpu_bytes[has]))
        return (f"none of its {plans} fits in memory (the smallest needs {least / 2**30:,.1f} "
                "GiB per GPU)")

    def csv_text(self) -> str:
        """All rows as CSV text with a header row of :data:`COLUMNS`."""
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(COLUMNS)
        # :meth:`rows`' values, formatted column by column; text cells never open as formulas
        # (spreadsheet_cell)
        w.writerows(zip(*[["" if v is None else repr(v) if isinstance(v, float)
                           else spreadsheet_cell(v) for v in values]
                          for values in self._column_values()]))
        return buf.getvalue()

    def write_csv(self, path: str | Path) -> None:
        """Write :meth:`csv_text` to ``path`` atomically. Raises ``OSError`` when not writable."""
        from core.io.session import atomic_write_text
        atomic_write_text(path, self.csv_text())


def plan_figures(plans: list[ParallelPlan], model, store, cluster, num_gpus: np.ndarray,
                  coverage: float, cancel: Any = None,
                  plan_columns: dict[str, np.ndarray] | None = None) -> tuple:
    """What a sweep's result needs of its plans alone: ``(plan columns (:func:`plan_column_arrays`),
    model FLOPs, hardware FLOPs (float64 (n,) each), error-band factors low, high (float64
    (n,)), in calibration range (bool (n,)), the note when the store has no bands, the
    features outside the calibration runs (list of str, :attr:`SweepResult.calibration_departures`))``.
    The bands are conditioned on each plan's features when the store's residuals have them.
    ``cancel`` is checked every few tens of milliseconds (:class:`SweepCancelled`).
    ``plan_columns``: :func:`plan_column_arrays` of ``plans``, made when not given."""
    if plan_columns is None:
        plan_columns = plan_column_arrays(plans, cancel)
    # the FLOPs do not depend on d or b (B is the session's): one evaluation per other fields
    of, firsts = column_codes(plan_columns, _FLOPS_FIELDS, len(plans), cancel)
    both = np.array([(model_math.model_flops_per_iteration(model, pl),
                      model_math.hardware_flops_per_iteration(model, pl))
                     for pl in plans_at(plans, firsts)], dtype=float).reshape(-1, 2)[of]
    flops, hw_flops = both[:, 0], both[:, 1]
    residuals = getattr(store, "residuals", None)
    low_f, high_f, in_range, departures = _plan_bands(plans, model, cluster, residuals,
                                                      np.asarray(num_gpus, np.int64), coverage,
                                                      cancel, plan_columns)
    no_band = "" if residuals is not None else interval_for(
        None, 1.0, 1, 1, 1.0, coverage, store_name=f"the {store.device_name} profile store "
        f"({store.provenance.get('method', 'unknown method')})").note
    return plan_columns, flops, hw_flops, low_f, high_f, in_range, no_band, departures


#: Plan fields :func:`core.store.calibration_range.features_of` does not read: plans that
#: differ only in them share their features (tests compare with each plan's own). It reads
#: t, d and sequence parallelism (whether the TP overlap applies, whether gradients are
#: reduced across GPUs and FSDP shards over more than one rank) and the data-parallel
#: overlaps.
_FEATURE_FREE_PLAN_FIELDS = ("pipeline_parallel", "virtual_pipeline_stages")
_FEATURE_FIELDS = tuple(f for f in PLAN_FIELDS if f not in _FEATURE_FREE_PLAN_FIELDS)
#: Plan fields but d and b: the FLOPs of an iteration are a function of these (B is the
#: session's).
_FLOPS_FIELDS = tuple(f for f in PLAN_FIELDS if f not in ("data_parallel", "micro_batch_size"))


#: Largest mixed radix :func:`column_codes` builds before numbering its codes (int64's range).
_RADIX_LIMIT = 2**62


def column_codes(columns: dict[str, np.ndarray], fields: Sequence[str], n: int,
                  cancel: Any = None) -> tuple[np.ndarray, list[int]]:
    """The plans grouped by their values of ``fields``: each plan's group as a code (int64
    (n,)) and the first plan of each group, code by code.

    ``columns`` are :func:`plan_column_arrays`' (n,) arrays. Plans share a group when each
    field's values are equal as dict keys are (the tuples of the fields would be the same
    key): an int64 or bool column holds values of one Python type, where numpy's
    equality is Python's; an object column (text too) goes through a dict of its values. A column of
    one value splits nothing and is skipped (most fields of a sweep). The fields' codes are
    combined in mixed radix and numbered once at the end (sooner only where the radix would
    pass :data:`_RADIX_LIMIT`): the numbers of numbering them field by field. ``cancel`` is checked
    before each field (:class:`~core.studies.sweep.cancel.SweepCancelled`)."""
    code = np.zeros(n, np.int64)
    if not n:
        return code, []
    size = 1  # the codes are below size
    for name in fields:
        check_cancelled(cancel)
        col = columns[name]
        if col.dtype == object:
            values = col.tolist()
            if values.count(values[0]) == n:
                continue
            index = {v: i for i, v in enumerate(dict.fromkeys(values))}
            part, m = np.fromiter(map(index.__getitem__, values), np.int64, n), len(index)
        else:
            if bool((col == col[0]).all()):
                continue
            distinct, part = np.unique(col, return_inverse=True)
            part, m = part.reshape(-1), distinct.size
        if size * m > _RADIX_LIMIT:  # numbered now (in order), so that the radix fits int64
            code = np.unique(code, return_inverse=True)[1].reshape(-1)
            size = int(code.max()) + 1
        code, size = code * m + part, size * m
    code = np.unique(code, return_inverse=True)[1].reshape(-1)
    return code, np.unique(code, return_index=True)[1].tolist()


def _plan_bands(plans: list[ParallelPlan], model, cluster, residuals, num_gpus: np.ndarray,
                coverage: float, cancel: Any = None,
                plan_columns: dict[str, np.ndarray] | None = None
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """Each plan's error-band factors low and high (float64 (n,)), whether it is in the
    calibration range (bool (n,)) and its departures (list of n str):
    :func:`core.store.interval.interval_factors` and
    :func:`core.store.interval.plan_departures` of the plans' GPU counts (int (n,)) and
    features (:func:`core.store.calibration_range.features_of`, when ``residuals`` has
    feature columns; ``plan_columns``: :func:`plan_column_arrays`' of the plans, made when
    not given). The features are made once per distinct value of the plan fields they can
    read, the departures once per distinct features, and the bands once per
    distinct :func:`core.store.interval.band_key` (a few dozen in a sweep of 650,000
    plans), spread to the plans with numpy: the same figures, bit for bit, as each plan's
    own :func:`core.store.interval.interval_for`. ``cancel`` is checked between the steps."""
    n, gpn, layer_params = len(plans), cluster.gpus_per_node, layer_parameters(model)
    check_cancelled(cancel)
    if residuals is None or not residuals.has_features:
        low, high, inside = interval_factors(residuals, num_gpus, gpn, layer_params, coverage)
        return low, high, inside, [""] * n
    if not n:
        return np.zeros(0), np.zeros(0), np.zeros(0, bool), []
    if plan_columns is None:
        plan_columns = plan_column_arrays(plans, cancel)
    of, firsts = column_codes(plan_columns, _FEATURE_FIELDS, n, cancel)
    feats, same = distinct_features([features_of(model, cluster, pl)
                                     for pl in plans_at(plans, firsts)])
    of = same[of]  # groups of fields that read alike: one dict, one band and departure each
    low, high, inside = interval_factors(residuals, num_gpus, gpn, layer_params, coverage,
                                         features=feats, feature_index=of)
    check_cancelled(cancel)
    texts = np.array(plan_departures(residuals, feats), dtype=object)
    return low, high, inside, texts[of].tolist()


#: Plan fields :func:`core.store.calibration_range.precision_label` and the MFU peak read.
_PRECISION_FIELDS = ("precision", "fp8_recipe", "tf32")


def throughput_departures(plans: list[ParallelPlan], model, cluster, store, num_gpus: np.ndarray,
                          iteration_s: np.ndarray, flops: np.ndarray, low_f: np.ndarray,
                          high_f: np.ndarray, departures: list[str], coverage: float,
                          plan_columns: dict[str, np.ndarray] | None = None, cancel: Any = None
                          ) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """The sweep's bands and departures (:func:`_plan_bands`' ``low_f``, ``high_f`` and
    ``departures``) with the throughput ceiling: a plan whose predicted model FLOP/s per GPU
    (``flops / num_gpus / iteration_s``: model FLOPs of an iteration, float (n,), over its
    world size and predicted seconds) is above every calibration run of its GPU kind and
    precision class (:func:`core.store.calibration_range.throughput_departure`) gets that
    departure's text after its others, and, where the store's residuals have a
    ``feature_transfer`` set and it had no other departure, the band of a departing plan
    (:func:`core.store.interval.interval_factors` with ``above_ceiling``): each plan's own
    :func:`core.store.interval.interval_for` given its predicted time and FLOPs. The ceiling is
    looked up once per distinct precision and the comparison vectorized; the text is made per
    departing plan. Plans without a time (NaN) never depart. Returns new arrays and list; the
    inputs are returned unchanged when the residuals lack the throughput column."""
    residuals = getattr(store, "residuals", None)
    n = len(plans)
    if residuals is None or not residuals.has_features or not residuals.has_throughput or not n:
        return low_f, high_f, departures
    if plan_columns is None:
        plan_columns = plan_column_arrays(plans, cancel)
    of, firsts = column_codes(plan_columns, _PRECISION_FIELDS, n, cancel)
    gpu = str(cluster.gpu)
    per_peak, labels = [], []
    for i in firsts:
        labels.append(precision_label(plans[i]))
        per_peak.append(float(store.peak_flops.get(gemm_peak_dtype(plans[i]), 0.0)) or None)
    found = [throughput_ceiling(residuals, gpu, lab) for lab in labels]  # None: no such run
    ceiling = np.array([np.inf if c is None else c.flops_per_s for c in found], np.float64)[of]
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = np.asarray(flops, np.float64) / np.asarray(num_gpus, np.float64) \
            / np.asarray(iteration_s, np.float64)
    above = np.isfinite(rate) & (rate > ceiling)
    if not above.any():
        return low_f, high_f, departures
    check_cancelled(cancel)
    rows = np.flatnonzero(above)
    out = list(departures)
    for i, g in zip(rows.tolist(), of[rows].tolist()):
        d = throughput_departure(residuals, gpu, labels[g], float(rate[i]), per_peak[g])
        text = d.text  # above the ceiling: a departure
        out[i] = f"{out[i]}; {text}" if out[i] else text
    low_f, high_f = low_f.copy(), high_f.copy()
    if residuals.has_set("feature_transfer"):  # a departure widens the band: only plans with none
        fresh = rows[[not departures[i] for i in rows.tolist()]]
        if fresh.size:
            sub_cols = {k: v[fresh] for k, v in plan_columns.items()}
            f_of, f_firsts = column_codes(sub_cols, _FEATURE_FIELDS, fresh.size, cancel)
            feats, same = distinct_features([features_of(model, cluster, plans[int(fresh[j])])
                                             for j in f_firsts])
            f_of = same[f_of]
            gpus = np.asarray(num_gpus, np.int64)[fresh]
            lo, hi, _ = interval_factors(
                residuals, gpus, cluster.gpus_per_node, layer_parameters(model), coverage,
                features=feats, feature_index=f_of, above_ceiling=np.ones(fresh.size, bool),
                predicted_s=np.asarray(iteration_s, np.float64)[fresh],
                model_flops_per_gpu=np.asarray(flops, np.float64)[fresh] / gpus)
            low_f[fresh], high_f[fresh] = lo, hi
    return low_f, high_f, out


def best_row(primary: np.ndarray, secondary: np.ndarray, mask: np.ndarray,
             memory: np.ndarray | None = None) -> int | None:
    """The row among ``mask`` (bool (n,)) with the least ``primary`` (float (n,)), ties broken
    by the least ``secondary``, then (given ``memory``, float (n,) bytes per GPU) the least
    memory, as :func:`least_memory_of_ties` keeps on the front, then the first row; None when
    ``mask`` has none (the fastest plan: days then cost; the cheapest: cost then days)."""
    idx = np.flatnonzero(mask)
    if not idx.size:
        return None
    keys = (idx, secondary[idx], primary[idx]) if memory is None else (
        idx, np.asarray(memory, np.float64)[idx], secondary[idx], primary[idx])
    return int(idx[np.lexsort(keys)[0]])


def plan_label(pl: ParallelPlan) -> str:
    """Short name of a plan in messages (:meth:`ParallelPlan.label`), e.g.
    ``t=8 p=2 d=4 b=1 1f1b recompute=full``."""
    return pl.label()


def with_plans(warning: str, plans: list[ParallelPlan], shown: int = 3) -> str:
    """``warning`` naming the sweep's plans it concerns: a warning with fields
    (:class:`core.sim.comm.CollectiveExtrapolation`) keeps them, with the plans as fields too;
    another gets :func:`plans_note` appended."""
    if isinstance(warning, CollectiveExtrapolation):
        return warning.in_plans([plan_label(pl) for pl in plans[:shown]], len(plans))
    return warning + plans_note(plans, shown)


def plans_note(plans: list[ParallelPlan], shown: int = 3) -> str:
    """``"; in 5 plans: t=8 p=2 ..., ... and 2 more"``: which plans a sweep warning concerns."""
    n = len(plans)
    labels = [plan_label(pl) for pl in plans[:shown]]  # only those shown: a warning can concern
    more = f" and {n - shown} more" if n > shown else ""  # thousands of plans
    return f"; in {n} plan{'s' if n != 1 else ''}: {', '.join(labels)}{more}"
