"""Which GPUs to rent: one plan sweep per offer of a price sheet, and the combined front of
expected days against expected dollars across GPU kinds.

For each row of a :class:`core.io.price_sheet.PriceSheet` the session is put on that GPU
kind (:func:`row_session`) and swept up to the row's ``max_gpus`` with the default plan space
(:func:`core.studies.sweep.run.run_sweep`, at the row's price). Each plan that fits is then
costed with failures and checkpoints (:func:`core.sim.goodput.goodput` with the session's
``reliability``): expected days = expected wall time of the run, expected dollars = that time
times the GPUs times the row's price. The combined front is the Pareto front
(:func:`core.studies.sweep.result.pareto_front`) of (expected days, expected dollars) over the
plans of every row, of plans tied on both only those needing the least memory per GPU
(:func:`least_memory_of_ties`: ZeRO-1 and ZeRO-2 of one plan tie at one micro-batch per
iteration, where both reduce-scatter the gradients once, and ZeRO-2 holds ``1/d`` of them). Each front point carries its GPU kind, count, plan, goodput, the failures'
10th-90th percentile spread and the prediction band (the iteration time's error band,
:mod:`core.store.interval`, carried through the goodput model).

Pruning, and what is exact
--------------------------
Each sweep prunes with its own branch and bound (exact for that kind's failure-free front and
best plans). A plan it pruned has a failure-free lower bound ``T_lb`` on its iteration time; its
expected time with failures is at least the work ``n * T_lb`` times :func:`overhead_lower_bound`
(the least expected time per second of work over every checkpoint interval: failures and
checkpoints only add), and its expected dollars at least that times its GPUs and price. When some point
of the combined front dominates that bound, the plan cannot reach the combined front: exact.
The pruned plans no front point rules out this way are counted in
:attr:`GpuChoice.undecided`; with ``prune=False`` (``--exhaustive``) every plan is simulated
and there are none.

Held fixed across the rows: the session's model, global batch size, precision, token budget,
reliability section and memory reserve. A row of another GPU kind than the session's runs on
that kind's reference node (its NVLink domain, or the row's ``gpus_per_node``; the kind's
NICs: the session's network bandwidths are left out, they describe the session's own GPUs).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from core.io.price_sheet import PriceSheet
from core.plan.cluster import GPU_NVLINK_DOMAIN, node_network, processes_per_host
from core.plan.fields import ConfigError
from core.plan.session import Session
from core.sim.costing import iterations_for_tokens
from core.sim.goodput import SPREAD_SAMPLES, checkpoint_size, goodput
from core.store.interval import DEFAULT_COVERAGE
from core.studies.sweep.result import SweepResult, best_row, least_memory_of_ties, pareto_front
from core.studies.sweep.run import check_sweep_work, run_sweep
from core.studies.sweep.space import SweepSpace

__all__ = ["GpuChoice", "choose_gpus", "combine", "row_session", "expected_figures",
           "least_memory_of_ties", "overhead_lower_bound", "POINT_KEYS"]

#: Keys of each point of :meth:`GpuChoice.point` (and of ``--json``'s ``front``).
POINT_KEYS = ("gpu", "row", "num_gpus", "plan", "iteration_time_s", "mfu", "goodput",
              "expected_days", "expected_days_low", "expected_days_high", "days_p10", "days_p90",
              "expected_cost_usd", "expected_cost_usd_low", "expected_cost_usd_high",
              "training_days_without_failures", "price_per_gpu_hour_usd", "session_row",
              "memory_verdict", "max_memory_per_gpu_bytes")


def row_session(session: Session, row) -> Session:
    """``session`` on the GPUs of price-sheet row ``row``, at its price.

    The row's GPU kind and store; its ``gpus_per_node`` or else the kind's NVLink domain
    (:data:`core.plan.cluster.GPU_NVLINK_DOMAIN`; 8 for a store of your own). A row of the
    session's own GPU kind without ``gpus_per_node`` keeps the session's cluster as it is (its
    network too); any other row runs on its kind's reference network (bandwidths empty).
    """
    s = session.copy()
    c = s.cluster
    same = (row.gpu == c.gpu and row.profile_path == c.profile_path and row.gpus_per_node is None)
    if not same:
        per_node = row.gpus_per_node or GPU_NVLINK_DOMAIN.get(row.gpu, 8)
        s.cluster = dataclasses.replace(c, gpu=row.gpu, gpus_per_node=per_node,
                                        intra_node_bandwidth_gbytes_per_s=None,
                                        inter_node_bandwidth_gbits_per_s=None,
                                        profile_path=row.profile_path)
    s.cost = dataclasses.replace(s.cost, price_per_gpu_hour_usd=row.price_per_gpu_hour_usd)
    return s


def expected_figures(result: SweepResult, i: int, iteration_time_s: float | None = None,
                     num_samples: int = 1):
    """:func:`core.sim.goodput.goodput` of row ``i`` of a sweep (its session's reliability and
    price; ``iteration_time_s``: another iteration time, e.g. an end of the error band).
    ``num_samples``: Monte Carlo draws of the spread (1 when only the mean is needed)."""
    s = result.session
    plan = result.plans[i]
    T = float(result.iteration_time_s[i] if iteration_time_s is None else iteration_time_s)
    n = iterations_for_tokens(s.cost.training_tokens, s.plan.global_batch_size * s.model.seq_length)
    size = checkpoint_size(s.model, plan, processes_per_host(s.cluster, plan.num_gpus))
    return goodput(iteration_time_s=T, num_iterations=n, num_gpus=int(result.num_gpus[i]),
                   reliability=s.reliability, size=size,
                   price_per_gpu_hour_usd=s.cost.price_per_gpu_hour_usd, num_samples=num_samples)


@dataclass
class GpuChoice:
    """Every plan that fits and was simulated, of every row, with its expected figures, and
    the combined front.

    Point arrays have shape (num_points,): one point per plan that fits and was simulated.

    Attributes
    ----------
    sheet : PriceSheet
    sweeps : list of SweepResult
        One per row of the sheet (its session on that row's GPUs, at its price), cut to the
        plans that fit and were simulated (the points, and those that never finish): a
        row's sweep of every plan is not kept once its points are costed, so memory is one
        row's sweep at a time, not every row's at once. Its ``saved`` is the whole sweep's
        counts, as :attr:`counts`.
    counts : list of dict
        Per row, the whole sweep's ``num_plans``, ``num_fit`` (fit in memory, simulated or
        not), ``num_feasible`` (fit and simulated), ``num_pruned``, ``num_tight_left_out``
        (tight plans left out by ``no_tight``, :func:`choose_gpus`) and ``wall_s``.
    row, index : int64 arrays
        The sheet row (0-based) and the row of that row's sweep of each point.
    expected_days, expected_cost_usd : float64 arrays
        Expected wall time of the run with failures and checkpoints, days; its GPU-hours at
        the row's price, USD. NaN where the run would never finish (the goodput model refuses).
    goodput : float64 array
        Work over expected time (0..1).
    front : int64 array
        Points of the combined (expected days, expected dollars) Pareto front, fastest first;
        of points tied on both, those needing the least memory per GPU
        (:func:`least_memory_of_ties`).
    band : dict of int to dict
        For each front point (and the best two, and each row's fastest and cheapest):
        ``expected_days_low/high`` and
        ``expected_cost_usd_low/high`` (the iteration time's error band through the goodput
        model; None without a band) and ``days_p10/p90`` (the failures' spread).
    best_by_days, best_by_dollars : int or None
        Points with the fewest expected days (ties: cheaper) and dollars (ties: faster).
    undecided : int
        Plans pruned by their sweep that no front point rules out (module doc); 0 is exact.
    never_finish : int
        Plans that fit but whose run would never finish at the failure rate (left out).
    """

    sheet: PriceSheet
    sweeps: list[SweepResult]
    row: np.ndarray
    index: np.ndarray
    expected_days: np.ndarray
    expected_cost_usd: np.ndarray
    goodput: np.ndarray
    front: np.ndarray
    band: dict[int, dict[str, Any]] = field(default_factory=dict)
    best_by_days: int | None = None
    best_by_dollars: int | None = None
    undecided: int = 0
    never_finish: int = 0
    coverage: float = DEFAULT_COVERAGE
    counts: list[dict[str, Any]] = field(default_factory=list)

    @property
    def no_tight(self) -> bool:
        """Whether the rows' sweeps left out their tight plans (:func:`choose_gpus`'
        ``no_tight``, ``--no-tight``): every point then fits outside the memory margin."""
        return bool(self.sweeps) and all(res.no_tight for res in self.sweeps)

    @property
    def num_tight_left_out(self) -> int:
        """Tight plans the rows' sweeps left out (``no_tight``), over every row."""
        return sum(int(c.get("num_tight_left_out", 0)) for c in self.counts)

    @property
    def num_tight_on_front(self) -> int:
        """Points of the combined front whose memory verdict is "tight"."""
        return sum(1 for k in self.front.tolist()
                   if self.sweeps[int(self.row[k])].memory_verdict[int(self.index[k])] == "tight")

    @property
    def num_points(self) -> int:
        """Plans that fit, over every row."""
        return int(self.row.shape[0])

    def label(self, k: int) -> str:
        """The GPU kind (the sheet's label) of point ``k``."""
        return self.sheet.labels[int(self.row[k])]

    def point(self, k: int) -> dict[str, Any]:
        """Point ``k`` as a JSON-able dict with the keys :data:`POINT_KEYS`; ``plan`` is the
        sweep's row (:meth:`SweepResult.row`); band and spread keys are None off the front."""
        r, i = int(self.row[k]), int(self.index[k])
        res = self.sweeps[r]
        band = self.band.get(k, {})
        fin = (lambda v: float(v) if v is not None and math.isfinite(v) else None)
        return {
            "gpu": self.label(k), "row": self.sheet.rows[r].row, "num_gpus": int(res.num_gpus[i]),
            "plan": res.plans[i].label(), "iteration_time_s": fin(res.iteration_time_s[i]),
            "mfu": fin(res.mfu[i]), "goodput": fin(self.goodput[k]),
            "expected_days": fin(self.expected_days[k]),
            "expected_days_low": band.get("expected_days_low"),
            "expected_days_high": band.get("expected_days_high"),
            "days_p10": band.get("days_p10"), "days_p90": band.get("days_p90"),
            "expected_cost_usd": fin(self.expected_cost_usd[k]),
            "expected_cost_usd_low": band.get("expected_cost_usd_low"),
            "expected_cost_usd_high": band.get("expected_cost_usd_high"),
            "training_days_without_failures": fin(res.training_days[i]),
            "price_per_gpu_hour_usd": self.sheet.rows[r].price_per_gpu_hour_usd,
            "session_row": i, "memory_verdict": str(res.memory_verdict[i]),
            "max_memory_per_gpu_bytes": fin(res.max_memory_per_gpu_bytes[i]),
        }

    @property
    def memory_bytes(self) -> np.ndarray:
        """Each point's peak memory per GPU (its sweep's ``max_memory_per_gpu_bytes``, the
        whole process), bytes, float64 (num_points,)."""
        return np.array([float(self.sweeps[r].max_memory_per_gpu_bytes[i])
                         for r, i in zip(self.row.tolist(), self.index.tolist())], float)

    def no_point_reason(self) -> str:
        """Why there is no point (no plan to pick, :attr:`best_by_days` None): no plan fits
        in memory on any row; or plans fit but none was simulated (too large to simulate);
        or every simulated plan that fits never finishes at the failure rate. Empty when
        there are points."""
        if self.num_points:
            return ""
        fit = sum(c["num_fit"] for c in self.counts)
        simulated = sum(c["num_feasible"] for c in self.counts)
        if not fit:
            return "no plan fits in memory on any GPU kind"
        left = self.num_tight_left_out
        plans = f"{fit:,} plan{'s' if fit != 1 else ''} fit{'s' if fit == 1 else ''}"
        if not simulated and left:
            others = fit - left
            return (f"{plans} in memory but none was simulated: "
                    + (f"{left:,} of them {'are' if left != 1 else 'is'}" if others else
                       "every one is" if fit != 1 else "it is")
                    + " tight and left out (--no-tight)"
                    + (f", {others:,} too large to simulate" if others else ""))
        if not simulated:
            return (f"{plans} in memory but none was simulated (too large to "
                    "simulate: see each row's sweep)")
        return (f"every one of the {simulated:,} plans that fit and were simulated never "
                "finishes at this failure rate (docs/goodput.md)")

    def within_deadline(self, days: float) -> int | None:
        """The point with the fewest expected dollars among those whose expected days (with
        failures, restarts and checkpoints: :attr:`expected_days`) are at most ``days`` (ties:
        faster, then less memory per GPU, as the front keeps); None when no point trains within ``days``. It is a point of the combined
        front (a point dominating it would be within ``days`` and no dearer), so it is exact
        as the front is (:attr:`undecided`). ``vtrain sweep --gpus-from --deadline-days``."""
        days_a = self.expected_days
        within = np.isfinite(days_a) & (days_a <= days)
        return best_row(self.expected_cost_usd, days_a, within, self.memory_bytes)

    def row_front(self, r: int) -> np.ndarray:
        """Points of sheet row ``r``'s own (expected days, expected dollars) front, fastest
        first; int64 (m,)."""
        ks = np.flatnonzero(self.row == r)
        days, cost = self.expected_days[ks], self.expected_cost_usd[ks]
        on = least_memory_of_ties(days, cost, self.memory_bytes[ks], pareto_front(days, cost))
        out = ks[on]
        return out[np.lexsort((self.expected_cost_usd[out], self.expected_days[out]))]

    def row_best(self, r: int) -> tuple[int | None, int | None]:
        """Sheet row ``r``'s own fastest and cheapest point by expected figures (ties: the
        other figure, then the least memory per GPU), each None where the row has no point; ``--json``'s ``rows`` give them
        as ``fastest`` and ``cheapest``, the text as the table under the combined front."""
        ks = np.flatnonzero(self.row == r)
        mem = self.memory_bytes
        return (_best(ks, self.expected_days, self.expected_cost_usd, mem),
                _best(ks, self.expected_cost_usd, self.expected_days, mem))

    def session_for(self, k: int) -> Session:
        """The session of point ``k``: its GPUs, price and plan."""
        return self.sweeps[int(self.row[k])].session_for(int(self.index[k]))

    def to_dict(self) -> dict[str, Any]:
        """The document ``vtrain sweep --gpus-from --json`` prints: ``sheet``, ``rows`` (per
        row: label, ``num_plans``, ``num_fit`` (the plans that fit in memory, simulated or
        not), ``num_feasible`` (those of them simulated), ``num_pruned``, its profile, its
        cluster (``gpus_per_node`` and the network), its sweep's ``warnings`` and ``dimensions``, its fastest and
        cheapest point by expected figures), ``front`` (points, fastest first),
        ``best_by_days``, ``best_by_dollars``, ``undecided``, ``never_finish``,
        ``interval_coverage``, ``training_tokens``."""
        pick = (lambda k: None if k is None else self.point(k))
        rows = []
        for r, res in enumerate(self.sweeps):
            fastest, cheapest = self.row_best(r)
            c = self.counts[r]
            rows.append({"label": self.sheet.labels[r], "num_plans": c["num_plans"],
                         "num_fit": c["num_fit"], "num_feasible": c["num_feasible"],
                         "num_pruned": c["num_pruned"],
                         "profile": res.profile,
                         "gpus_per_node": res.session.cluster.gpus_per_node,
                         "node_network_gbits_per_s": node_network(res.session.cluster),
                         "warnings": list(res.warnings), "dimensions": res.dimensions,
                         "fastest": pick(fastest), "cheapest": pick(cheapest)})
        s = self.sweeps[0].session if self.sweeps else None
        return {"sheet": self.sheet.to_dict(), "rows": rows,
                "front": [self.point(k) for k in self.front.tolist()],
                "best_by_days": pick(self.best_by_days),
                "best_by_dollars": pick(self.best_by_dollars),
                "undecided": self.undecided, "never_finish": self.never_finish,
                "no_tight": self.no_tight, "num_tight_left_out": self.num_tight_left_out,
                "num_tight_on_front": self.num_tight_on_front,
                "interval_coverage": self.coverage,
                "training_tokens": s.cost.training_tokens if s is not None else None}


def _best(ks: np.ndarray, first: np.ndarray, second: np.ndarray,
          memory: np.ndarray) -> int | None:
    """Point of ``ks`` least in ``first`` (ties: ``second``, then the least ``memory`` per GPU,
    bytes, as the combined front and :attr:`GpuChoice.best_by_days` break them), or None."""
    if ks.size == 0:
        return None
    mask = np.zeros(first.shape, bool)
    mask[ks] = np.isfinite(first[ks])
    return best_row(first, second, mask, memory)


def choose_gpus(session: Session, sheet: PriceSheet, *, prune: bool = True, workers: int = 1,
                coverage: float = DEFAULT_COVERAGE, cancel: Any = None,
                max_work: int | None = None,
                progress: Callable[[int, int, int], None] | None = None,
                space_for: Callable[[Any], SweepSpace] | None = None,
                notice: Callable[[str], None] | None = None,
                no_tight: bool = False) -> GpuChoice:
    """Sweep each row of ``sheet`` and combine the rows' plans into one front (module doc).

    Parameters
    ----------
    session : Session
        Model, global batch size, precision, token budget (``cost.training_tokens``) and
        ``reliability``; its cluster and price are replaced per row (:func:`row_session`).
    sheet : PriceSheet
    prune : bool
        Branch and bound in each sweep (default); False simulates every plan (no undecided).
    workers : int
        Processes per sweep (:func:`run_sweep`).
    coverage : float
        Nominal coverage of the error bands.
    cancel : threading.Event or callable, optional
        Checked by each sweep (:class:`core.studies.sweep.cancel.SweepCancelled`).
    progress : callable ``(row, done, total) -> None``, optional
        Each sweep's progress, with its 0-based row.
    max_work : int, optional
        Refuse a row whose plans that fit need more than this many pipeline steps
        (:func:`run_sweep`'s ``max_work``; ConfigError field ``<label>: sweep.max_work``).
        Every row is checked, and its large-sweep note told, before any row is swept
        (:func:`check_sweep_work`: each row's plans and closed-form memory are then computed
        twice, one row at a time); with ``no_tight`` its tight plans are not counted (their
        verdict is known before any simulation), as the sweep counts them.
    notice : callable ``(str) -> None``, optional
        Told, before a row's simulation starts, when that row's sweep is large (``run_sweep``'s
        ``notice``: more than :data:`core.studies.sweep.bound.LARGE_SWEEP_WORK` pipeline
        steps, with a time estimate), the text starting with the row's label.
    space_for : callable ``(PriceRow) -> SweepSpace``, optional
        The space of each row; default the command line's default space
        (:meth:`SweepSpace.default_for`: micro-batch sizes up to what memory allows) up to
        ``row.max_gpus``, the default plan
        space.
    no_tight : bool
        Leave out each row's tight plans (:func:`run_sweep`'s ``no_tight``): the combined front
        is then chosen among plans that fit outside the memory margin (``--no-tight``).
        Default False: tight plans are points too, marked by their ``memory_verdict``.

    Returns
    -------
    GpuChoice

    Raises
    ------
    ConfigError, ProfileStoreError, KeyError, SweepCancelled
        As :func:`run_sweep`; a ConfigError's fields start with the row's ``gpu:`` label.
    """
    def space_of(price_row) -> SweepSpace:
        return space_for(price_row) if space_for else dataclasses.replace(
            SweepSpace.default_for(session), max_gpus=price_row.max_gpus, max_data_parallel=None)

    def labelled(r: int, exc: ConfigError) -> ConfigError:
        return ConfigError([dataclasses.replace(e, field=f"{sheet.labels[r]}: {e.field}")
                            for e in exc.errors])

    if max_work is not None:  # every row checked (and announced) before any row is simulated
        for r, price_row in enumerate(sheet.rows):
            try:
                notes = check_sweep_work(row_session(session, price_row), space_of(price_row),
                                         max_work=max_work, prune=prune, cancel=cancel,
                                         no_tight=no_tight)
            except ConfigError as exc:
                raise labelled(r, exc) from None
            if notes and notice is not None:
                notice(f"{sheet.labels[r]}: {notes[0]}")
    parts = []
    for r, price_row in enumerate(sheet.rows):
        space = space_of(price_row)
        tell = None if progress is None else (lambda d, t, r=r: progress(r, d, t))
        try:
            res = run_sweep(row_session(session, price_row), space, workers=workers,
                            prune=prune, coverage=coverage, cancel=cancel, progress=tell,
                            max_work=max_work, no_tight=no_tight,
                            notice=None if notice is None or max_work is not None else
                            (lambda text, r=r: notice(f"{sheet.labels[r]}: {text}")))
        except ConfigError as exc:
            raise labelled(r, exc) from None
        # only what the answer uses is kept: this row's full sweep (every plan, fitting or
        # not) is dropped before the next row's starts
        parts.append(_row_points(res))
        del res
    return _combine(sheet, parts, coverage)


@dataclass
class _RowPoints:
    """One row's share of a :class:`GpuChoice`: its sweep cut to the plans that fit and were
    simulated (:meth:`SweepResult.take`), their expected figures (``index``: rows of that cut sweep),
    the plans that never finish, and the expected-figure lower bounds ``(days, dollars)`` of
    its pruned plans that its own front does not rule out (:func:`_undecided`)."""

    sweep: SweepResult
    counts: dict[str, Any]
    index: np.ndarray
    days: np.ndarray
    cost: np.ndarray
    good: np.ndarray
    never: int
    bound_days: np.ndarray
    bound_cost: np.ndarray


def _row_points(res: SweepResult) -> _RowPoints:
    """The expected figures of each plan of ``res`` that fits and was simulated, and the
    lower bounds of its pruned plans that may still reach a combined front: a pruned plan
    that this row's own (expected days, dollars) front dominates cannot reach the combined
    front (a point of the combined front dominates or is that point), so only the others
    are kept, with their :func:`overhead_lower_bound` applied. The sweep is then cut to the
    plans that fit and were simulated (:meth:`SweepResult.take`)."""
    feasible = np.flatnonzero(res.feasible)
    idx, days, cost, good = [], [], [], []
    never = 0
    for i in feasible.tolist():
        try:
            g = expected_figures(res, i)
        except ConfigError:  # the failures never let it finish: not a point
            never += 1
            continue
        idx.append(i)
        days.append(g.expected_time_s / 86400.0)
        cost.append(g.expected_time_s * int(res.num_gpus[i]) / 3600.0
                    * res.session.cost.price_per_gpu_hour_usd)
        good.append(g.goodput)
    days_a, cost_a = np.array(days, float), np.array(cost, float)
    own = pareto_front(days_a, cost_a)
    bd, bc = _pruned_bounds(res, days_a[own], cost_a[own])
    counts = {"num_plans": res.num_plans, "num_fit": int(np.count_nonzero(res.fits_in_memory)),
              "num_feasible": int(feasible.size), "num_pruned": int(np.count_nonzero(res.pruned)),
              "num_tight_left_out": res.num_tight_left_out, "wall_s": res.wall_s}
    # the kept rows' positions in the cut sweep: feasible is increasing, idx a subset of it
    index = np.searchsorted(feasible, np.array(idx, np.int64)).astype(np.int64)
    return _RowPoints(sweep=res.take(feasible, counts), counts=counts, index=index,
                      days=days_a, cost=cost_a, good=np.array(good, float), never=never,
                      bound_days=bd, bound_cost=bc)


def combine(sheet: PriceSheet, sweeps: list[SweepResult], coverage: float = DEFAULT_COVERAGE
            ) -> GpuChoice:
    """The :class:`GpuChoice` of finished sweeps, one per row of ``sheet`` (module doc); each
    is cut to the plans that fit and were simulated (:func:`_row_points`)."""
    return _combine(sheet, [_row_points(res) for res in sweeps], coverage)


def _combine(sheet: PriceSheet, parts: list[_RowPoints], coverage: float) -> GpuChoice:
    """The :class:`GpuChoice` of the rows' :func:`_row_points`."""
    row = np.concatenate([np.full(p.index.size, r, np.int64) for r, p in enumerate(parts)]
                         + [np.zeros(0, np.int64)])
    index = np.concatenate([p.index for p in parts] + [np.zeros(0, np.int64)])
    days_a = np.concatenate([p.days for p in parts] + [np.zeros(0)])
    cost_a = np.concatenate([p.cost for p in parts] + [np.zeros(0)])
    good = np.concatenate([p.good for p in parts] + [np.zeros(0)])
    mem = np.concatenate([p.sweep.max_memory_per_gpu_bytes[p.index] for p in parts]
                         + [np.zeros(0)]).astype(float)
    on = least_memory_of_ties(days_a, cost_a, mem, pareto_front(days_a, cost_a))
    every = np.ones(days_a.size, bool)  # the best ones break ties on memory as the front does
    front = np.flatnonzero(on)
    front = front[np.lexsort((cost_a[front], days_a[front]))]
    choice = GpuChoice(sheet=sheet, sweeps=[p.sweep for p in parts], row=row, index=index,
                       expected_days=days_a, expected_cost_usd=cost_a, goodput=good,
                       front=front,
                       best_by_days=best_row(days_a, cost_a, every, mem),
                       best_by_dollars=best_row(cost_a, days_a, every, mem),
                       never_finish=sum(p.never for p in parts), coverage=coverage,
                       counts=[p.counts for p in parts])
    fd, fc = days_a[front], cost_a[front]
    choice.undecided = sum(int(np.count_nonzero(~_dominated(fd, fc, p.bound_days,
                                                            p.bound_cost)))
                           for p in parts)
    per_row = []
    for r in range(len(parts)):
        ks = np.flatnonzero(row == r)
        per_row += [_best(ks, days_a, cost_a, mem), _best(ks, cost_a, days_a, mem)]
    for k in {*front.tolist(), choice.best_by_days, choice.best_by_dollars, *per_row} - {None}:
        choice.band[k] = _band(choice, k)
    return choice


def _dominated(fd: np.ndarray, fc: np.ndarray, d: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Whether a point of the front ``(fd, fc)`` dominates each bound ``(d, c)``; bool (m,)."""
    return ((fd[None, :] <= d[:, None]) & (fc[None, :] <= c[:, None])
            & ((fd[None, :] < d[:, None]) | (fc[None, :] < c[:, None]))).any(axis=1)


def overhead_lower_bound(checkpoint_s: float, mtbi_s: float, restart_s: float) -> float:
    """A lower bound of expected time over work, whatever the checkpoint interval: each segment
    of ``x`` seconds of work and a save ``C`` takes ``M e^{R/M} (e^{(x+C)/M} - 1)`` in
    expectation (:func:`core.sim.goodput.segment_expected_s`), and ``e^y - 1 >= y + y^2/2`` gives
    per second of work at least ``e^{R/M} (1 + C/x + (x+C)^2 / (2Mx))``, whose least value over
    ``x > 0`` is ``e^{R/M} (1 + C/M + sqrt((2C + C^2/M) / M))`` (Young's first-order overhead
    ``sqrt(2C/M)`` and more). 1 without failures (``mtbi_s`` infinite)."""
    C, M, R = checkpoint_s, mtbi_s, restart_s
    if not math.isfinite(M):
        return 1.0
    return math.exp(R / M) * (1.0 + C / M + math.sqrt((2.0 * C + C * C / M) / M))


def _pruned_bounds(res: SweepResult, fd: np.ndarray, fc: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Lower bounds ``(expected days, expected dollars)`` (float64 (m,) each) of the pruned
    plans of ``res`` that the points ``(fd, fc)`` do not dominate (module doc): first the
    work alone, then the work times :func:`overhead_lower_bound` (the plan's checkpoint cost
    as :func:`core.sim.goodput.goodput` defines it); the bounds kept are the latter. A point
    that dominates the first dominates the second too (the overhead is at least 1)."""
    pr = np.flatnonzero(res.pruned)
    if pr.size == 0:
        return np.zeros(0), np.zeros(0)
    s = res.session
    rel = s.reliability
    n = iterations_for_tokens(s.cost.training_tokens, s.plan.global_batch_size * s.model.seq_length)
    work = n * res.lower_bound_s[pr]
    d = work / 86400.0
    c = work * res.num_gpus[pr] / 3600.0 * s.cost.price_per_gpu_hour_usd
    out_d, out_c = [], []
    for j in np.flatnonzero(~_dominated(fd, fc, d, c)).tolist():
        i = int(pr[j])
        size = checkpoint_size(s.model, res.plans[i],
                               processes_per_host(s.cluster, res.plans[i].num_gpus))
        C = (size.per_gpu_bytes / (rel.host_copy_gbytes_per_s_per_gpu * 1e9) if rel.async_save
             else size.per_node_bytes / (rel.checkpoint_write_gbytes_per_s_per_node * 1e9))
        rate = rel.failure_rate_per_gpu_hour * int(res.num_gpus[i]) / 3600.0
        f = overhead_lower_bound(C, 1.0 / rate if rate > 0 else math.inf,
                                 float(rel.restart_time_s))
        out_d.append(float(d[j]) * f)
        out_c.append(float(c[j]) * f)
    return np.array(out_d, float), np.array(out_c, float)


def _band(choice: GpuChoice, k: int) -> dict[str, Any]:
    """Point ``k``'s band: the goodput model at both ends of the iteration time's error band,
    and the failures' 10th-90th percentile spread (:data:`SPREAD_SAMPLES` draws)."""
    r, i = int(choice.row[k]), int(choice.index[k])
    res = choice.sweeps[r]
    price, gpus = res.session.cost.price_per_gpu_hour_usd, int(res.num_gpus[i])
    full = expected_figures(res, i, num_samples=SPREAD_SAMPLES)
    out: dict[str, Any] = {"days_p10": full.p10_time_s / 86400.0,
                           "days_p90": full.p90_time_s / 86400.0}
    for end, t in (("low", res.interval_low_s[i]), ("high", res.interval_high_s[i])):
        if t is None or not math.isfinite(t):
            out[f"expected_days_{end}"] = out[f"expected_cost_usd_{end}"] = None
            continue
        try:
            g = expected_figures(res, i, float(t))
        except ConfigError:
            out[f"expected_days_{end}"] = out[f"expected_cost_usd_{end}"] = None
            continue
        out[f"expected_days_{end}"] = g.expected_time_s / 86400.0
        out[f"expected_cost_usd_{end}"] = g.expected_time_s * gpus / 3600.0 * price
    return out
