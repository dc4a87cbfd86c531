"""What to change so that a plan that does not fit in memory (or is tight) fits.

The question a planner asks after an out-of-memory verdict: which setting would make this
plan fit, and what does it cost in time. :func:`fit_changes` answers it by trying the levers a
Megatron-Core user reaches for, one at a time, then two and three at a time when fewer do not
suffice, on the session's model, precision, global batch and GPU kind (held fixed):

* the distributed optimizer and ZeRO-2/3 (``zero_stage`` 1-3, ``--use-distributed-optimizer``,
  FSDP);
* activation recomputation: ``selective`` (``--recompute-activations``), then ``full``
  (``--recompute-granularity full``) of every layer;
* a smaller micro-batch (``micro_batch_size``: half, and 1);
* sequence parallelism where ``t > 1`` (``--sequence-parallel``);
* moving GPUs from data parallelism to tensor, pipeline, context or expert parallelism (twice
  the size, half the data-parallel size: the same GPU count);
* with more GPUs: twice the pipeline or tensor parallel size at the same data-parallel size
  (tried only when nothing at the same GPU count fits, and marked).

Each candidate is checked by the plan rules (:func:`core.plan.rules.validate`; a plan
Megatron-LM would refuse is never proposed) and by the graph size ``vtrain simulate`` holds
(:func:`core.sim.simulate.graph_too_large`: a plan it refuses is never proposed), its memory by the same model and verdict as the
report (:func:`core.sim.simulate.stage_memory`, :func:`core.sim.simulate.memory_verdict`,
:func:`core.sim.report.memory_verdict`), and each one that fits is timed by the sweep's solver
(:func:`core.studies.sweep.batch.solve_batch`: the same iteration time as ``vtrain simulate``).
It is a neighbourhood of the plan, not a search: ``vtrain sweep`` finds the best plan.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

from core.plan.rules import validate
from core.plan.parallel import ParallelPlan, plan_key
from core.plan.session import Session
from core.sim.op_times import num_chunks
from core.sim.report import memory_verdict as report_verdict
from core.sim.simulate import graph_too_large, memory_verdict, session_profile, stage_memory
from core.studies.sweep.batch import solve_batch
from core.studies.sweep.space import SPLIT_FLAG_FIELDS, split_flag_options, split_flags_for

__all__ = ["FitChange", "FitChanges", "fit_changes", "LEVERS"]

#: Recomputation modes from least to most memory saved (and time spent).
_RECOMPUTE_ORDER = ("none", "selective_op", "selective", "full")


@dataclass(frozen=True)
class FitChange:
    """One changed plan and its figures.

    Attributes
    ----------
    changes : tuple of (field, old value, new value)
        The plan fields that differ from the session's plan, in :class:`ParallelPlan`'s order.
    plan : ParallelPlan
    verdict : str
        ``"fits"``, ``"tight"`` or ``"does not fit"`` (:func:`core.sim.report.memory_verdict`).
    max_memory_per_gpu_bytes : float
        The largest stage's modelled need per GPU, bytes (the whole process).
    iteration_time_s : float
        Simulated iteration time, seconds (every row fits or is tight, and is timed).
    num_gpus : int
    levers : int
        How many of the levers (:data:`LEVERS`, :data:`MORE_GPU_LEVERS`) were applied: 1 to
        :data:`MAX_LEVERS` (a lever may change several fields: twice the pipeline size and half
        the data-parallel).
    """

    changes: tuple[tuple[str, Any, Any], ...]
    plan: ParallelPlan
    verdict: str
    max_memory_per_gpu_bytes: float
    iteration_time_s: float
    num_gpus: int
    levers: int = 1

    @property
    def text(self) -> str:
        """The changes as ``field old -> new`` joined by ``", "``."""
        return ", ".join(f"{f} {_value(a)} -> {_value(b)}" for f, a, b in self.changes)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: changes, plan text, verdict, need (bytes and GiB), time, GPUs."""
        return {"changes": [{"field": f, "from": a, "to": b} for f, a, b in self.changes],
                "text": self.text, "plan": self.plan.label(), "verdict": self.verdict,
                "max_memory_per_gpu_bytes": self.max_memory_per_gpu_bytes,
                "max_memory_per_gpu_gib": self.max_memory_per_gpu_bytes / 2**30,
                "iteration_time_s": self.iteration_time_s, "num_gpus": self.num_gpus,
                "levers": self.levers}


@dataclass(frozen=True)
class FitChanges:
    """What :func:`fit_changes` found.

    Attributes
    ----------
    verdict : str
        The session plan's own verdict.
    iteration_time_s : float
        The session plan's iteration time, seconds (by the same solver as the rows).
    rows : list of FitChange
        The changed plans that fit (``"fits"`` first, then ``"tight"``), at the session's GPU
        count first, each group by iteration time; only the fewest changes that fit (one
        when any single change fits, else two, else three).
    tried : int
        Valid changed plans whose memory was computed.
    held : str
        What was held fixed.
    """

    verdict: str
    iteration_time_s: float
    rows: list[FitChange]
    tried: int
    held: str

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {"verdict": self.verdict, "iteration_time_s": self.iteration_time_s,
                "tried": self.tried, "held": self.held,
                "changes": [r.as_dict() for r in self.rows]}


def _value(v: Any) -> str:
    return "none" if v is None else str(v).lower() if isinstance(v, bool) else str(v)


def _halve_data(pl: ParallelPlan, **changes: Any) -> ParallelPlan | None:
    """``pl`` with ``changes`` and half its data-parallel size (None when d is odd)."""
    if pl.data_parallel % 2:
        return None
    return dataclasses.replace(pl, data_parallel=pl.data_parallel // 2, **changes)


def _zero(z: int) -> Callable[[ParallelPlan, Session], ParallelPlan | None]:
    return lambda pl, s: dataclasses.replace(pl, zero_stage=z) if pl.zero_stage < z else None


def _recompute(mode: str) -> Callable[[ParallelPlan, Session], ParallelPlan | None]:
    def f(pl: ParallelPlan, s: Session) -> ParallelPlan | None:
        cur = pl.recompute if pl.recompute in _RECOMPUTE_ORDER else "none"
        whole = mode == "full" and pl.recompute == "full" and pl.recompute_num_layers is not None
        if _RECOMPUTE_ORDER.index(cur) >= _RECOMPUTE_ORDER.index(mode) and not whole:
            return None
        return dataclasses.replace(pl, recompute=mode, recompute_num_layers=None,
                                   recompute_modules=None)
    return f


def _micro_batch(to_one: bool) -> Callable[[ParallelPlan, Session], ParallelPlan | None]:
    def f(pl: ParallelPlan, s: Session) -> ParallelPlan | None:
        b = 1 if to_one else pl.micro_batch_size // 2
        if b < 1 or b >= pl.micro_batch_size or (not to_one and b == 1):
            return None
        return dataclasses.replace(pl, micro_batch_size=b)
    return f


def _sequence_parallel(pl: ParallelPlan, s: Session) -> ParallelPlan | None:
    if pl.tensor_parallel < 2 or pl.sequence_parallel:
        return None
    return dataclasses.replace(pl, sequence_parallel=True)


def _tensor(pl: ParallelPlan, s: Session) -> ParallelPlan | None:
    return _halve_data(pl, tensor_parallel=2 * pl.tensor_parallel, sequence_parallel=True)


def _split(pl: ParallelPlan | None, s: Session) -> ParallelPlan | None:
    """``pl`` with the embedding / loss slot flags a Megatron-Core user sets where its layers
    alone do not split over its virtual stages (:func:`core.studies.sweep.space.split_flags_for`)."""
    if pl is None:
        return None
    flags = split_flags_for(s.model.num_layers, split_flag_options(s.plan),
                            pl.pipeline_parallel * num_chunks(pl))
    return dataclasses.replace(pl, **dict(zip(SPLIT_FLAG_FIELDS, flags[0])))


def _pipeline(pl: ParallelPlan, s: Session) -> ParallelPlan | None:
    return _split(_halve_data(pl, pipeline_parallel=2 * pl.pipeline_parallel), s)


def _context(pl: ParallelPlan, s: Session) -> ParallelPlan | None:
    return _halve_data(pl, context_parallel=2 * pl.context_parallel)


def _expert(pl: ParallelPlan, s: Session) -> ParallelPlan | None:
    if not s.model.num_experts:
        return None
    return dataclasses.replace(pl, expert_parallel=2 * pl.expert_parallel)


def _more_pipeline(pl: ParallelPlan, s: Session) -> ParallelPlan | None:
    return _split(dataclasses.replace(pl, pipeline_parallel=2 * pl.pipeline_parallel), s)


def _more_tensor(pl: ParallelPlan, s: Session) -> ParallelPlan | None:
    return dataclasses.replace(pl, tensor_parallel=2 * pl.tensor_parallel, sequence_parallel=True)


#: The levers at the session's GPU count, in the order a Megatron-Core user tries them.
LEVERS: tuple[Callable[[ParallelPlan, Session], ParallelPlan | None], ...] = (
    _zero(1), _zero(2), _zero(3), _recompute("selective"), _recompute("full"),
    _micro_batch(False), _micro_batch(True), _sequence_parallel, _tensor, _pipeline, _context,
    _expert)
#: The levers that add GPUs (tried when none of :data:`LEVERS`, alone or in pairs, fits).
MORE_GPU_LEVERS = (_more_pipeline, _more_tensor)

#: Most levers combined (each level is tried only when the one before has nothing that fits).
MAX_LEVERS = 3
#: Most changed plans timed (the first found, in the order of :data:`LEVERS`).
MAX_TIMED = 40

_HELD = ("the model, precision, global batch, GPU kind and every other plan field; "
         "more GPUs only when nothing at the plan's GPU count fits")


def _changes(a: ParallelPlan, b: ParallelPlan) -> tuple[tuple[str, Any, Any], ...]:
    return tuple((f.name, getattr(a, f.name), getattr(b, f.name))
                 for f in dataclasses.fields(ParallelPlan)
                 if getattr(a, f.name) != getattr(b, f.name))


def fit_changes(session: Session, store=None, *, max_rows: int = 8) -> FitChanges:
    """The plans the fewest changes away from ``session``'s (at most :data:`MAX_LEVERS`) that
    fit in memory, timed.

    Parameters
    ----------
    session : Session
        A valid session (:func:`core.plan.rules.check` passed).
    store : ProfileStore, optional
        Its profile (:func:`core.sim.simulate.session_profile` when None).
    max_rows : int
        Most rows kept (the fastest).

    Returns
    -------
    FitChanges
        Empty ``rows`` when nothing within three changes (or with twice the GPUs) fits; a
        plan that fits outside the margin already gets no rows (nothing to change).
    """
    store = store if store is not None else session_profile(session)
    capacity = float(store.memory_bytes)
    margin = float(session.cluster.memory_reserve_fraction)
    base = session.plan
    cache: dict = {}

    def verdict_of(pl: ParallelPlan) -> tuple[str, float]:
        memory = stage_memory(dataclasses.replace(session, plan=pl), store)
        need, fits, _ = memory_verdict(memory, capacity)
        return report_verdict(need, capacity, margin, fits), need

    def time_of(pl: ParallelPlan) -> float:
        key = (pl.pipeline_parallel, pl.num_microbatches, pl.schedule, num_chunks(pl))
        t, _, _, _ = solve_batch(session.model, session.cluster, session.cost, key, [pl], store,
                                 cache, fits=[True])
        return float(t[0])

    own, _ = verdict_of(base)
    base_time = time_of(base)
    if own == "fits":
        return FitChanges(own, base_time, [], 0, _HELD)
    seen = {plan_key(base)}
    tried = 0

    def candidates(plans: list[ParallelPlan], levers) -> list[ParallelPlan]:
        out = []
        for pl in plans:
            for lever in levers:
                new = lever(pl, session)
                if new is None or plan_key(new) in seen:
                    continue
                seen.add(plan_key(new))
                if not validate(dataclasses.replace(session, plan=new), sections=("plan",),
                                model_checked=True) and not graph_too_large(session.model, new):
                    out.append(new)
        return out

    def better(plans: list[ParallelPlan]) -> list[tuple[str, float, ParallelPlan]]:
        nonlocal tried
        tried += len(plans)
        rows = [(*verdict_of(pl), pl) for pl in plans]
        want = ("fits",) if own == "tight" else ("fits", "tight")
        return [r for r in rows if r[0] in want]

    found: list = []
    level = [base]
    for levers in range(1, MAX_LEVERS + 1):
        level = candidates(level, LEVERS)
        found = better(level)
        if found or not level:
            break
    if not found:
        found, levers = better(candidates([base], MORE_GPU_LEVERS)), 1
    rows = [FitChange(_changes(base, pl), pl, v, need, time_of(pl), pl.num_gpus, levers)
            for v, need, pl in found[:MAX_TIMED]]
    rows.sort(key=lambda r: (r.num_gpus != base.num_gpus, r.verdict != "fits",
                             r.iteration_time_s))
    return FitChanges(own, base_time, rows[:max_rows], tried, _HELD)
