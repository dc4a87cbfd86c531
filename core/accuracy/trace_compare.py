"""A measured profiler trace against the simulator's prediction, per operation class and stage.

The measurement is :func:`core.io.kineto_classes.measure_step`'s (one iteration of each
rank's PyTorch profiler trace, summed per class: GEMM, attention, norm and elementwise,
optimizer, each collective, other, idle). The prediction is the solved execution graph of
the same session (:func:`core.sim.simulate.simulate`): per pipeline stage, the durations of
its tasks summed by what they run (:data:`core.sim.graph_types.OPS`):

=================  ====================================================================
class              predicted from
=================  ====================================================================
all_reduce         ``tp_all_reduce``, ``dp_all_reduce``
all_gather         ``tp_all_gather``, ``dp_all_gather``, ``etp_all_gather``
reduce_scatter     ``tp_reduce_scatter``, ``dp_reduce_scatter``, ``etp_reduce_scatter``
send_recv          ``p2p_fwd``, ``p2p_bwd`` (counted at the sending stage), ``cp_send_recv``
all_to_all         ``ep_dispatch``, ``ep_combine``
optimizer          the ``optimizer`` tasks (with the per-iteration framework overhead)
compute            every compute task (:data:`core.sim.graph_types.KIND_COMPUTE`); measured:
                   every class but the collectives (GEMM + attention + norm and
                   elementwise + optimizer + other with the shipped table)
idle               the iteration less the union of the stage's tasks on all its streams
iteration          the iteration time
=================  ====================================================================

GEMM, attention and norm and elementwise have no predicted figure of their own: the profile
store times whole layer ops (an attention block: norm, QKV GEMM, attention core, projection,
dropout and residual; an MLP block), so the row says so and the ``compute`` row compares their
sum; neither has ``other``. No figure is ever made up.

Ranks are matched to stages by Megatron-LM's rank order (tensor-parallel rank fastest, then
context-, expert-inside-data-, data-parallel, pipeline outermost: ``stage = rank // (t*cp*d)``,
:mod:`core.sim.comm`); the measured figure of a stage is the mean over its ranks given.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from core.io.kineto import DEVICE_CATEGORIES, KinetoTrace
from core.io.kineto_classes import StepMeasurement, attributed, union_length
from core.plan.fields import ConfigError, FieldError
from core.sim.graph_types import KIND_COMPUTE, KINDS, OPS

__all__ = ["check_world_size", "rank_stages", "rank_stage", "predicted_by_stage", "ComparisonRow",
           "TraceComparison", "compare",
           "MeasuredLanes", "measured_lanes", "OPS_OF_CLASS", "NO_FIGURE"]

#: Simulator ops summed into each collective class.
OPS_OF_CLASS = {
    "all_reduce": ("tp_all_reduce", "dp_all_reduce"),
    "all_gather": ("tp_all_gather", "dp_all_gather", "etp_all_gather"),
    "reduce_scatter": ("tp_reduce_scatter", "dp_reduce_scatter", "etp_reduce_scatter"),
    "send_recv": ("p2p_fwd", "p2p_bwd", "cp_send_recv"),
    "all_to_all": ("ep_dispatch", "ep_combine"),
}
#: Why a class has no predicted figure (the module's docstring says it in full).
NO_FIGURE = {
    "gemm": "no figure: the simulator times whole layer ops, not GEMMs apart (see compute)",
    "attention": "no figure: part of the attention block's time (see compute)",
    "norm_elementwise": "no figure: part of the layer ops' times (see compute)",
    "other": "no figure: the simulator has no time outside its ops (see compute)",
}
#: Notes on rows that have a figure.
_NOTES = {
    "optimizer": "predicted with the per-iteration framework overhead",
    "send_recv": "predicted: the stage's sends; measured: sends, receives and their waits",
    "compute": "measured: every class but the collectives, other included",
    "idle": "no stream (predicted) or lane (measured) of the stage busy",
}


def check_world_size(world_size: int | None, plan) -> None:
    """Refuse traces of a job whose GPU count (``distributedInfo.world_size``) is not the plan's:
    its ranks would be laid on the wrong stages and compared with another plan's figures.

    Raises
    ------
    ConfigError
        Named ``plan.num_gpus``, giving both counts; nothing when ``world_size`` is None (the
        traces do not say).
    """
    n = plan.num_gpus
    if world_size is not None and world_size != n:
        raise ConfigError([FieldError(
            "plan.num_gpus", f"the traces were recorded by a job of {world_size:,} "
            f"rank{'s' if world_size != 1 else ''} "
            f"(distributedInfo.world_size), the plan runs on {n:,} GPUs ({plan.label()}): "
            "compare them with the plan that ran (its t, p, d and cp)")])


def rank_stages(measurement: StepMeasurement, plan) -> dict[int, int]:
    """Each measured rank's pipeline stage (:func:`rank_stage`), after checking that the traces'
    job had the plan's GPU count (:func:`check_world_size`): what every comparison of a trace
    with a plan lays its ranks out by.

    Raises
    ------
    ConfigError
        As :func:`check_world_size` and :func:`rank_stage`.
    """
    check_world_size(measurement.world_size, plan)
    return {r: rank_stage(r, plan) for r in measurement.ranks}


def rank_stage(rank: int, plan) -> int:
    """Pipeline stage of global ``rank`` under ``plan`` (Megatron-LM's order, pipeline outermost).

    Raises
    ------
    ConfigError
        ``rank`` is not below the plan's number of GPUs (named ``rank``).
    """
    n = plan.num_gpus
    if not 0 <= rank < n:
        raise ConfigError([FieldError("rank", f"rank {rank} is not one of the plan's {n:,} GPUs "
                                              f"({plan.label()}): give the traces of its ranks")])
    return rank // (n // plan.pipeline_parallel)


def predicted_by_stage(result) -> dict[str, np.ndarray | None]:
    """Predicted seconds per row and stage of a :class:`core.sim.simulate.SimulationResult`.

    Returns ``{row: float64 array (p,) or None}`` for the rows ``optimizer``, the collective
    classes of :data:`OPS_OF_CLASS`, ``compute``, ``idle`` and ``iteration``; None where the
    graph holds no op information to tell the collectives apart.
    """
    g, sched = result.graph, result.schedule
    p = g.num_stages
    T = float(sched.iteration_time_s)

    def per_stage(mask: np.ndarray) -> np.ndarray:
        return np.bincount(g.stage[mask], g.duration_s[mask], minlength=p).astype(np.float64)

    out: dict[str, np.ndarray | None] = {}
    out["optimizer"] = per_stage(g.kind == KINDS.index("optimizer"))
    for cls, ops in OPS_OF_CLASS.items():
        if g.op is None:
            out[cls] = None
            continue
        out[cls] = per_stage(np.isin(g.op, [OPS.index(o) for o in ops]))
    out["compute"] = per_stage(np.isin(g.kind, sorted(KIND_COMPUTE)))
    out["idle"] = np.array([T - union_length(sched.start_s[g.stage == s], sched.end_s[g.stage == s])
                            for s in range(p)])
    out["iteration"] = np.full(p, T)
    return out


@dataclass
class ComparisonRow:
    """One class on one stage: predicted against measured seconds.

    ``predicted_s`` is None where the simulator has no figure (``note`` says why);
    ``departure_s`` is measured less predicted, ``ratio`` measured over predicted (None where
    either is missing or the prediction is 0).
    """

    stage: int
    row: str
    title: str
    predicted_s: float | None
    measured_s: float
    ranks: list[int]
    note: str = ""

    @property
    def departure_s(self) -> float | None:
        """Measured less predicted, seconds (None without a prediction)."""
        return None if self.predicted_s is None else self.measured_s - self.predicted_s

    @property
    def ratio(self) -> float | None:
        """Measured over predicted (None without a prediction or for a prediction of 0)."""
        if self.predicted_s is None or self.predicted_s <= 0:
            return None
        return self.measured_s / self.predicted_s

    def to_dict(self) -> dict:
        """The row as JSON-ready values."""
        return {"stage": self.stage, "class": self.row, "title": self.title,
                "predicted_s": self.predicted_s, "measured_s": self.measured_s,
                "departure_s": self.departure_s, "ratio": self.ratio, "ranks": self.ranks,
                "note": self.note}


@dataclass
class TraceComparison:
    """Predicted against measured time per class and stage, largest departures first.

    Attributes
    ----------
    rows : list of ComparisonRow
        Rows with a prediction by ``|departure_s|``, largest first, then those without one by
        measured time.
    measurement : StepMeasurement
    rank_stages : dict of int to int
        Pipeline stage of each rank.
    """

    rows: list[ComparisonRow]
    measurement: StepMeasurement
    rank_stages: dict[int, int] = field(default_factory=dict)

    def to_dict(self) -> dict:
        """JSON-ready: the rows, and each rank's measured seconds per row."""
        m = self.measurement
        return {"step": m.step,
                "ranks": [{"rank": r, "stage": self.rank_stages[r], "source": m.source[i],
                           "measured_s": dict(zip(m.rows, m.seconds[i].tolist()))}
                          for i, r in enumerate(m.ranks)],
                "rows": [row.to_dict() for row in self.rows]}


def compare(measurement: StepMeasurement, result) -> TraceComparison:
    """Compare a measured step with a simulation of the session the trace was taken of.

    Parameters
    ----------
    measurement : StepMeasurement
        From :func:`core.io.kineto_classes.measure_step`.
    result : core.sim.simulate.SimulationResult

    Raises
    ------
    ConfigError
        A rank beyond the plan's GPUs (:func:`rank_stage`), or traces recorded by a job of
        another GPU count than the plan's (:func:`check_world_size`).
    """
    plan = result.session.plan
    stages = rank_stages(measurement, plan)
    predicted = predicted_by_stage(result)
    rows_of = list(measurement.rows)
    titles = dict(zip(measurement.rows, measurement.titles))
    titles["compute"] = "compute (all but collectives)"
    measured = measurement.seconds
    # every class but the collectives (a class table's own classes too)
    compute_parts = [i for i, k in enumerate(rows_of[:rows_of.index("idle")])
                     if k not in OPS_OF_CLASS]
    out: list[ComparisonRow] = []
    for stage in sorted(set(stages.values())):
        idx = [i for i, r in enumerate(measurement.ranks) if stages[r] == stage]
        ranks = [measurement.ranks[i] for i in idx]
        mean = measured[idx].mean(axis=0)
        names = [*measurement.rows[:-1], "compute", "iteration"]
        for row in names:
            value = (float(mean[compute_parts].sum()) if row == "compute"
                     else float(mean[rows_of.index(row)]))
            pred = predicted.get(row)
            if pred is None:
                note = NO_FIGURE.get(row, "no figure: the graph holds no op information to tell "
                                          "this collective apart")
                if row not in NO_FIGURE and row not in predicted:
                    note = f"no figure: the simulator has no {row} class"
                out.append(ComparisonRow(stage, row, titles.get(row, row), None, value, ranks, note))
            else:
                out.append(ComparisonRow(stage, row, titles.get(row, row), float(pred[stage]),
                                         value, ranks, _NOTES.get(row, "")))
    with_figure = sorted((r for r in out if r.predicted_s is not None),
                         key=lambda r: (-abs(r.departure_s), r.stage))
    without = sorted((r for r in out if r.predicted_s is None),
                     key=lambda r: (-r.measured_s, r.stage))
    return TraceComparison(rows=with_figure + without, measurement=measurement,
                           rank_stages=stages)


@dataclass
class MeasuredLanes:
    """A measured iteration laid out for a timeline under the simulated one (no Qt).

    Each rank's lanes (threads or streams) hold the events that count for their class, and the
    outermost work that neither holds nor lies in one as ``other``; times are seconds from the rank's iteration window start,
    the simulated iteration's time 0.

    Attributes
    ----------
    lane_names : list of str
        The lanes drawn, ordered by stage, then rank, then the trace's lane order.
    lane_stage, lane_rank : int32 arrays, shape (lanes,)
    lane : int32 array, shape (k,)
        Index into :attr:`lane_names` per event.
    start_s, duration_s : float64 arrays, shape (k,)
    cls : int16 array, shape (k,)
        Index into :attr:`classes`.
    classes : tuple of str
    names : list of str
        The operation's name per event.
    ranges : list of str
        Per event, the innermost ``record_function`` range around it (``"forward mb0"``; for
        device work, around the launch that queued it), ``""`` outside any: what a view matches
        to a phase and micro-batch where the training loop names them. Ranges that count for a
        class (``Optimizer.step#...``) and ``ProfilerStep#N`` are not ranges here.
    """

    lane_names: list[str]
    lane_stage: np.ndarray
    lane_rank: np.ndarray
    lane: np.ndarray
    start_s: np.ndarray
    duration_s: np.ndarray
    cls: np.ndarray
    classes: tuple[str, ...]
    names: list[str]
    ranges: list[str]


def _range_names(trace: KinetoTrace, measurement: StepMeasurement, i: int, li: np.ndarray
                 ) -> list[str]:
    """Innermost enclosing unclassified ``user_annotation`` of each event ``li`` of rank ``i``
    (see :attr:`MeasuredLanes.ranges`)."""
    rank = measurement.ranks[i]
    s0, s1 = trace.steps[rank][measurement.step]  # the host's range, ahead of the device's
    t0, t1 = min(s0, measurement.window_s[i, 0]), max(s1, measurement.window_s[i, 1])
    ann = trace.categories.index("user_annotation") if "user_annotation" in trace.categories else -1
    step = trace.names.index(f"ProfilerStep#{measurement.step}")
    r = np.flatnonzero((trace.rank == rank) & (trace.category == ann) & (trace.name != step)
                       & (measurement.event_class < 0) & (trace.start_s < t1)
                       & (trace.end_s > t0))
    if not r.size or not li.size:
        return [""] * li.size
    # where and on which host lane each event's work was asked for: a device event's launch
    lane, at = trace.lane[li].copy(), trace.start_s[li].copy()
    device = trace.lane_device[lane] & (trace.correlation[li] >= 0)
    if device.any():
        host = np.flatnonzero((trace.rank == rank) & ~trace.lane_device[trace.lane]
                              & (trace.correlation >= 0))
        order = np.argsort(trace.correlation[host], kind="stable")
        keys = trace.correlation[host][order]
        pos = np.searchsorted(keys, trace.correlation[li][device])
        found = (pos < keys.size) & (keys[np.minimum(pos, keys.size - 1)] == trace.correlation[li][device])
        launch = host[order][np.minimum(pos, keys.size - 1)]
        sel = np.flatnonzero(device)[found]
        lane[sel], at[sel] = trace.lane[launch[found]], trace.start_s[launch[found]]
    inside = ((trace.lane[r][None, :] == lane[:, None]) & (trace.start_s[r][None, :] <= at[:, None])
              & (trace.end_s[r][None, :] > at[:, None]))
    # the innermost: the latest start among the enclosing ranges
    score = np.where(inside, trace.start_s[r][None, :], -np.inf)
    best = np.argmax(score, axis=1)
    has = inside.any(axis=1)
    return [trace.names[trace.name[r[b]]] if h else "" for b, h in zip(best.tolist(), has.tolist())]


def shown_value(trace: KinetoTrace, li: np.ndarray, cls: np.ndarray, work: np.ndarray, other: int
           ) -> tuple[np.ndarray, np.ndarray]:
    """The events of one lane drawn: those that count for their class, and the outermost
    work that neither holds one nor lies in one (as ``other``)."""
    start, end = trace.start_s[li], trace.end_s[li]
    counted = cls >= 0
    top = attributed(start, end, np.where(work, 0, -1).astype(np.int16)) & ~counted
    cs, ce = start[counted], end[counted]
    order = np.argsort(cs, kind="stable")
    cs, ce = cs[order], ce[order]
    # a counted event starting inside a top-level one, or one that holds its start
    holds = np.searchsorted(cs, end[top], "left") > np.searchsorted(cs, start[top], "left")
    before = np.searchsorted(cs, start[top], "right") - 1
    inside = (before >= 0) & (ce[np.maximum(before, 0)] > start[top])
    keep = np.flatnonzero(top)[~holds & ~inside]
    chosen = np.sort(np.concatenate([np.flatnonzero(counted), keep]))
    out_cls = np.where(counted[chosen], cls[chosen], other).astype(np.int16)
    return li[chosen], out_cls


def measured_lanes(trace: KinetoTrace, measurement: StepMeasurement, plan) -> MeasuredLanes:
    """The measured events of ``measurement`` on lanes per stage (see :class:`MeasuredLanes`).

    Raises
    ------
    ConfigError
        Traces of another GPU count than the plan's, or a rank beyond its GPUs
        (:func:`rank_stages`).
    """
    stages = rank_stages(measurement, plan)
    n_cls = measurement.rows.index("idle")
    classes = measurement.rows[:n_cls]
    other = classes.index("other")
    work = trace.category_mask(DEVICE_CATEGORIES | {"cpu_op"})
    order = sorted(range(len(measurement.ranks)),
                   key=lambda i: (stages[measurement.ranks[i]], measurement.ranks[i]))
    cols: dict[str, list] = {"lane": [], "start": [], "dur": [], "cls": [], "name": [],
                             "range": []}
    lane_names, lane_stage, lane_rank = [], [], []
    for i in order:
        rank, idx = measurement.ranks[i], measurement.events[i]
        t0 = measurement.window_s[i, 0]
        stage = stages[rank]
        for lane in np.unique(trace.lane[idx]).tolist():
            li = idx[trace.lane[idx] == lane]
            li, shown_cls = shown_value(trace, li, measurement.event_class[li], work[li], other)
            if not li.size:
                continue
            row = len(lane_names)
            lane_names.append(f"stage {stage}: {trace.lane_names[lane]}")
            lane_stage.append(stage)
            lane_rank.append(rank)
            cols["lane"].append(np.full(li.size, row, np.int32))
            cols["start"].append(trace.start_s[li] - t0)
            cols["dur"].append(trace.duration_s[li])
            cols["cls"].append(shown_cls)
            cols["name"] += [trace.names[k] for k in trace.name[li].tolist()]
            cols["range"] += _range_names(trace, measurement, i, li)

    def cat(key: str, dtype) -> np.ndarray:
        return np.concatenate(cols[key]).astype(dtype) if cols[key] else np.zeros(0, dtype)

    return MeasuredLanes(lane_names=lane_names, lane_stage=np.array(lane_stage, np.int32),
                         lane_rank=np.array(lane_rank, np.int32), lane=cat("lane", np.int32),
                         start_s=cat("start", np.float64), duration_s=cat("dur", np.float64),
                         cls=cat("cls", np.int16), classes=classes, names=cols["name"],
                         ranges=cols["range"])
